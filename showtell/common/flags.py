"""Command-line plumbing shared by every ``showtell`` subcommand.

Errors are one line: ``showtell train: error: --batch-size must be ≥ 1 (got 0)``.  A
``ShowtellError`` raised anywhere below a command is printed the same way, with no
traceback, and the process exits non-zero.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from showtell.common import options
from showtell.common.errors import ShowtellError
from showtell.common.logs import FORMATS, error_line, setup_logging
from showtell.common.native_logs import quiet_tensorflow


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

def config_flags(config_cls) -> list[tuple[dataclasses.Field, str]]:
    """The (field, flag) pairs of a config dataclass's ``option`` fields."""
    return [(f, f.metadata["flag"] or "--" + f.name.replace("_", "-"))
            for f in dataclasses.fields(config_cls) if "help" in f.metadata]


def add_config_flags(parser, config_cls) -> None:
    """One flag per ``option`` field of ``config_cls``, default and help from the field."""
    for f, flag in config_flags(config_cls):
        kwargs = dict(f.metadata["argparse"])
        if "type" in kwargs:
            kwargs["type"] = as_flag_type(kwargs["type"])
        help_text = f.metadata["help"]
        if f.default is not None and kwargs.get("action") != "store_true":
            shown = f.default if not isinstance(f.default, bool) else str(f.default).lower()
            help_text += f" (default {shown:g})" if isinstance(shown, float) else f" (default {shown})"
            kwargs["default"] = f.default
        parser.add_argument(flag, help=help_text, **kwargs)


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
    parser.add_argument("--config", type=Path, metavar="FILE", action="append",
                        help=f"a YAML file of settings, keyed by flag name without the dashes "
                             f"(batch-size: 32), such as --print-config prints{also}; repeat it to merge "
                             "files in order (a later file wins); flags on the command line override them, "
                             "they override the defaults")
    parser.add_argument("--print-config", action="store_true",
                        help=print_help or "print the settings (defaults, --config files, environment and "
                                           "flags applied) as YAML that --config reads back, and exit")


# What a config file may hold besides settings: a run record's or --print-config's other sections
# (what the settings resolved to, the environment), read by people, not taken as settings.
RECORD_SECTIONS = frozenset({"resolved", "environment", "at", "step", "command", "changed", "run_id"})
NOT_SETTINGS = frozenset({"config", "print_config"})  # how the settings were given, not settings


def apply_config_file(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Every ``--config FILE`` in ``argv``, in order (a later file's keys win), becomes ``parser``'s
    defaults, each value checked by its flag's own type and choices: so flags given still win, and
    a bad file fails in one line naming the file, the key and what is allowed (exit 2), before
    anything runs.  A run's record (``runs/<id>.json``) gives its last revision's settings."""
    defaults: dict[str, object] = {}
    for path in _config_paths(argv):
        defaults.update(_file_settings(parser, path))
    parser.set_defaults(**defaults)


def _file_settings(parser: argparse.ArgumentParser, path: str) -> dict[str, object]:
    import yaml  # here: the metrics client, which takes no --config, installs without PyYAML

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        parser.error(f"--config {path}: cannot read it ({exc.strerror or exc})")
    except yaml.YAMLError as exc:
        parser.error(f"--config {path}: not YAML ({str(exc).splitlines()[0]})")
    if data is None:
        return {}
    if not isinstance(data, dict):
        parser.error(f"--config {path}: expected settings as a mapping, e.g. 'batch-size: 32'")
    if isinstance(data.get("revisions"), list):  # a run's record: its last revision's settings
        revisions = data["revisions"]
        if not revisions or not isinstance(revisions[-1], dict) or not isinstance(
                revisions[-1].get("settings"), dict):
            parser.error(f"--config {path}: a run record without settings to repeat")
        data = revisions[-1]["settings"]
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "config")}
    settings = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_")
        if dest in NOT_SETTINGS or (dest in RECORD_SECTIONS and dest not in actions):
            continue
        action = actions.get(dest)
        if action is None:
            names = [dest.replace("_", "-") for dest in actions]
            near = difflib.get_close_matches(str(key).replace("_", "-"), names, n=1)
            parser.error(f"--config {path}: unknown key {key!r}"
                         f"{f' (did you mean {near[0]}?)' if near else ''}; keys are the flags of "
                         f"{parser.prog} without the dashes")
        if value is None:  # what --print-config prints for unset, "never" or "auto": None itself
            if not _takes_none(action):
                parser.error(f"--config {path}: {key}: expected a value (null is not one for this flag)")
            settings[action.dest] = None
        elif isinstance(action, argparse._AppendAction):  # a repeated flag: one value or a list of them
            values = value if isinstance(value, list) else [value]
            settings[action.dest] = [_setting(parser, path, key, action, v) for v in values]
        else:
            settings[action.dest] = _setting(parser, path, key, action, value)
        action.required = False  # given by the file
    return settings


def _takes_none(action: argparse.Action) -> bool:
    """Whether None is a value of this flag: its default (unset), or what its type makes of
    ``0`` for never or of ``auto`` (``--save-every-secs 0``, ``--train-inception auto``)."""
    name = getattr(action.type, "name", "")
    return action.default is None or name == seconds_or_never.name or name.endswith("|auto")


def _config_paths(argv: Sequence[str]) -> list[str]:
    paths = []
    for i, word in enumerate(argv):
        if word == "--config" and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif word.startswith("--config="):
            paths.append(word.split("=", 1)[1])
    return paths


def settings_yaml(settings: dict[str, object], header: str,
                  sections: dict[str, object] | None = None) -> str:
    """Settings as a config file holds them — dashed keys, plain values (a path as text, a list as
    its flag writes it, unset ones null), how they were given (``--config``, ``--print-config``)
    left out — then ``sections`` (``RECORD_SECTIONS``, passed over when read): ``--config`` reads
    this back to the same settings."""
    import yaml

    def plain(value):
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, Path)) for v in value):
            return ",".join(str(plain(v)) for v in value)  # one flag's list (--devices GPU:0,GPU:1)
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]  # a repeated flag's values (--eval-set …), each its flag's text
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return str(value)  # a flag's own type (--phases): its text, which the flag reads back

    printed: dict[str, object] = {key.replace("_", "-"): plain(value)
                                  for key, value in sorted(settings.items())
                                  if key not in NOT_SETTINGS and key != "command"}
    printed.update(sections or {})
    return f"# {header}\n" + yaml.safe_dump(printed, sort_keys=False, allow_unicode=True)


def print_config(prog: str, args: argparse.Namespace) -> int:
    """``--print-config`` of a command without sections of its own: its settings, exit 0."""
    sys.stdout.write(settings_yaml(vars(args), f"{prog}: its settings (feed this file back: --config FILE)"))
    return 0


def _setting(parser: argparse.ArgumentParser, path: str, key, action: argparse.Action, value):
    """``value`` from the file, as the flag would have parsed it."""
    if isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            parser.error(f"--config {path}: {key}: expected true or false (got {value!r})")
        return value
    if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) for v in value):
        value = ",".join(str(v) for v in value)  # a list flag (--devices GPU:0,GPU:1), as a record holds it
    if isinstance(value, (dict, list)):
        parser.error(f"--config {path}: {key}: expected one value (got {value!r})")
    if isinstance(value, bool) and action.choices is not None and "off" in action.choices:
        value = "on" if value else "off"  # YAML 1.1 reads an unquoted off (or no) as false
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        parsed = action.type(text) if callable(action.type) else text
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--config {path}: {key}: {exc}")
    except (ValueError, TypeError):
        name = getattr(action.type, "__name__", None) or repr(action.type)
        parser.error(f"--config {path}: {key}: invalid {name} value: {value!r}")
    if action.choices is not None and parsed not in action.choices:
        allowed = ", ".join(map(str, action.choices))
        parser.error(f"--config {path}: {key}: {parsed!r} is not one of {allowed}")
    return parsed


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, a ``--config FILE`` applied first."""
    argv = sys.argv[1:] if argv is None else list(argv)
    apply_config_file(parser, argv)
    return parser.parse_args(argv)


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
