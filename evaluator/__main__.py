"""``python -m showtell.evaluator`` — the same as ``showtell evaluate``."""

from showtell.common.processes import run_as_process
from showtell.evaluator.cli import main

run_as_process(main)
