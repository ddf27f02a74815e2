"""``python -m showtell.trainer`` — the same as ``showtell train``."""

from showtell.common.processes import run_as_process
from showtell.trainer.cli import main

run_as_process(main)
