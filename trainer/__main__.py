"""``python -m showtell.trainer`` — the same as ``showtell train`` (whose parser lives, with every
command's, under ``showtell/commands/``)."""

import sys

from showtell.cli import main
from showtell.common.processes import run_as_process

run_as_process(lambda: main(["train", *sys.argv[1:]]))
