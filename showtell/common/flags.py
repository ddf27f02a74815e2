"""Command-line plumbing shared by every ``showtell`` subcommand.

Errors are one line: ``showtell train: error: --batch-size must be ≥ 1 (got 0)``.  A
``ShowtellError`` raised anywhere below a command is printed the same way, with no
traceback, and the process exits non-zero.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from showtell.common import options
from showtell.common.errors import ShowtellError
from showtell.common.logs import FORMATS, error_line, setup_logging
from showtell.common.native_logs import quiet_tensorflow
from showtell.common.options import config_flags


class Parser(argparse.ArgumentParser):
    """``argparse`` with single-line errors (usage is one ``--help`` away)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class FlagType(options.Check):
    """An argparse ``type`` with a name: argparse says "invalid <name> value: 'x'" for a
    ``ValueError`` and prints an ``ArgumentTypeError``'s own message — a check's ``Invalid`` is
    turned into the latter."""

    def __call__(self, text: str):
        try:
            return self.parse(text)
        except options.Invalid as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None


def flag_type(name: str) -> Callable[[Callable], FlagType]:
    """Decorator: ``@flag_type("positive integer")`` over a parse function."""
    return lambda parse: FlagType(name, parse)


def as_flag_type(parse):
    """A check of ``common/options`` as an argparse type (anything else as it is)."""
    return FlagType(parse.name, parse.parse) if isinstance(parse, options.Check) and not isinstance(
        parse, FlagType) else parse


positive_int = as_flag_type(options.positive_int)
positive_int_or_auto = as_flag_type(options.positive_int_or_auto)
non_negative_int = as_flag_type(options.non_negative_int)
non_negative_float = as_flag_type(options.non_negative_float)
positive_float = as_flag_type(options.positive_float)
seconds_or_never = as_flag_type(options.seconds_or_never)
fraction = as_flag_type(options.fraction)
open_fraction = as_flag_type(options.open_fraction)
boolean = as_flag_type(options.boolean)


def or_auto(parse) -> FlagType:
    """``options.or_auto`` as an argparse type."""
    return as_flag_type(options.or_auto(parse))


# -- flags written once, on the config dataclasses --------------------------------------

def add_config_flags(parser, config_cls) -> None:
    """One flag per ``option`` field of ``config_cls``, default and help from the field, and its
    marks: shown in a one-screen ``--help`` (``shown``), set by an older named variable (``env``)."""
    for f, flag in config_flags(config_cls):
        kwargs = dict(f.metadata["argparse"])
        if "type" in kwargs:
            kwargs["type"] = as_flag_type(kwargs["type"])
        help_text, env = f.metadata["help"], f.metadata.get("env")
        if env:
            help_text += f" (env {env})"
        if f.default is not None and kwargs.get("action") != "store_true":
            shown = f.default if not isinstance(f.default, bool) else str(f.default).lower()
            help_text += f" (default {shown:g})" if isinstance(shown, float) else f" (default {shown})"
            kwargs["default"] = f.default
        names = [f.metadata["short"], flag] if f.metadata.get("short") else [flag]
        action = parser.add_argument(*names, help=help_text, **kwargs)
        action.shown, action.environment = f.metadata.get("shown", False), env


def config_from_flags(config_cls, args: argparse.Namespace, **fixed):
    """``config_cls`` with every ``option`` field from its flag, the rest default or ``fixed``."""
    values = {f.name: getattr(args, flag.lstrip("-").replace("-", "_"))
              for f, flag in config_flags(config_cls)}
    return config_cls(**values, **fixed)


# -- a YAML file of settings ------------------------------------------------------------

def add_config_file_flag(parser: argparse.ArgumentParser, records: bool = False,
                         print_help: str | None = None) -> None:
    """``--config FILE`` (repeatable) and ``--print-config``; ``records``: the command writes run
    records (``train``), which ``--config`` then also reads; ``print_help``: the command prints
    more than its settings (``train``: what they resolve to)."""
    also = (", or a run's record (<model-dir>/runs/<id>.yaml, or its history <id>.json), to repeat "
            "the run" if records else "")
    shown(parser.add_argument("--config", type=Path, metavar="FILE", action="append",
                        help=f"a YAML file of settings, keyed by flag name without the dashes "
                             f"(batch-size: 32), such as --print-config prints{also}; repeat it to merge "
                             "files in order (a later file wins); flags on the command line override them, "
                             "they override the defaults"))
    shown(parser.add_argument("--print-config", action="store_true",
                              help=print_help or "print the settings (defaults, --config files, environment "
                                                 "and flags applied) as YAML that --config reads back, and "
                                                 "exit"))


# -- dotted keys: every setting by its place in the command's typed configuration ----------

def add_keys(parser: argparse.ArgumentParser, keys: dict[str, str], *, sections: str) -> None:
    """Name each setting by its dotted key (``optimizer.learning_rate`` → the flag whose dest is
    ``learning_rate``): ``--set KEY=VALUE`` and ``--KEY VALUE`` on the command line, a section of
    a config file (``optimizer: {learning_rate: 0.1}``) and a ``SHOWTELL_OPTIMIZER__LEARNING_RATE``
    variable reach it.  ``sections``: where the keys are listed, for the help."""
    parser.dotted_keys = dict(keys)  # type: ignore[attr-defined]
    shown(parser.add_argument("--set", metavar="KEY=VALUE", action="append",
                        help=f"set any setting by its dotted key, e.g. --set optimizer.learning_rate=0.1 "
                             f"(or --optimizer.learning_rate 0.1; in the environment "
                             f"SHOWTELL_OPTIMIZER__LEARNING_RATE=0.1); the keys: {sections}"))


def shown(action: argparse.Action) -> argparse.Action:
    """Mark a flag written by hand (not an ``option``) as one ``hide_flags`` keeps in ``--help``."""
    action.shown = True  # type: ignore[attr-defined]
    return action


def hide_flags(parser: argparse.ArgumentParser) -> None:
    """Keep ``--help`` to one screen: every flag not marked ``shown`` (by its ``option`` or by
    ``shown``) still works but is left out of the help, its text kept for the keys' reference
    (``docs/cli.md``)."""
    hidden = {}
    for action in parser._actions:
        if (action.option_strings and not getattr(action, "shown", False) and action.dest != "help"
                and action.help != argparse.SUPPRESS):
            hidden[action.dest], action.help = action.help, argparse.SUPPRESS
    parser.hidden_help = hidden  # type: ignore[attr-defined]


def flag_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """A flag's help text, shown or hidden."""
    return getattr(parser, "hidden_help", {}).get(action.dest) or action.help or ""


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logs, and TensorFlow's native start-up notices (hidden by default)")
    parser.add_argument("--log-format", choices=FORMATS, default="text",
                        help="text (default) or json: one JSON object a line (time, level, logger, "
                             "message, run and step where known), for log pipelines")


def start_command(args: argparse.Namespace) -> None:
    """What every TensorFlow command does first: TensorFlow's native notices off unless
    ``--verbose`` (before anything imports it), then logging."""
    verbose = bool(getattr(args, "verbose", False))
    quiet_tensorflow(verbose)
    setup_logging(verbose, getattr(args, "log_format", "text"))


def run_command(prog: str, fn: Callable[[], int]) -> int:
    """Run a command body; a ``ShowtellError`` becomes one line on stderr and exit 1."""
    try:
        return fn()
    except ShowtellError as exc:
        sys.stderr.write(error_line(prog, str(exc)) + "\n")
        return exc.exit_code
