"""Command-line plumbing shared by every ``showtell`` subcommand.

Errors are one line: ``showtell train: error: --batch-size must be ≥ 1 (got 0)``.  A
``ShowtellError`` raised anywhere below a command is printed the same way, with no
traceback, and the process exits non-zero.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable

from showtell.common.errors import ShowtellError


class Parser(argparse.ArgumentParser):
    """``argparse`` with single-line errors (usage is one ``--help`` away)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1 (got {text})")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0 (got {text})")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0 (got {text})")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (got {text})")
    return value


def boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false (got {text})")


for _fn, _name in ((positive_int, "positive integer"), (non_negative_int, "integer ≥ 0"),
                   (non_negative_float, "number ≥ 0"),
                   (positive_float, "number > 0"), (boolean, "true|false")):
    _fn.__name__ = _name  # argparse names the type in "invalid <type> value" messages


def quiet_tensorflow() -> None:
    """Hide TensorFlow's C++ start-up chatter unless the user asked for it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("absl").setLevel(logging.ERROR)
    if not verbose:  # TensorFlow's own INFO lines (closure waits, reduce plans) drown ours
        logging.getLogger("tensorflow").setLevel(logging.WARNING)


def run_command(prog: str, fn: Callable[[], int]) -> int:
    """Run a command body; a ``ShowtellError`` becomes one line on stderr and exit 1."""
    try:
        return fn()
    except ShowtellError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return exc.exit_code
