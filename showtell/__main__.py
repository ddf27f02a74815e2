from showtell.cli import main
from showtell.common.processes import run_as_process

run_as_process(main)
