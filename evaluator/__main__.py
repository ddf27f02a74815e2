"""``python -m showtell.evaluator`` — the same as ``showtell evaluate`` (whose parser lives, with every
command's, under ``showtell/commands/``)."""

import sys

from showtell.cli import main
from showtell.common.processes import run_as_process

run_as_process(lambda: main(["evaluate", *sys.argv[1:]]))
