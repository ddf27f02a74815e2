"""Command-line plumbing shared by every ``showtell`` subcommand.

Errors are one line: ``showtell train: error: --batch-size must be ≥ 1 (got 0)``.  A
``ShowtellError`` raised anywhere below a command is printed the same way, with no
traceback, and the process exits non-zero.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence
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


# What a config file may hold besides settings: a run record's or --print-config's other sections
# (what the settings resolved to, the environment), read by people, not taken as settings.
RECORD_SECTIONS = frozenset({"resolved", "environment", "at", "step", "command", "changed", "run_id",
                             "revision"})
NOT_SETTINGS = frozenset({"config", "print_config", "set"})  # how the settings were given, not settings


def apply_config_file(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """The older named variables a flag reads (``SHOWTELL_STRATEGY``), then every ``--config FILE``
    in ``argv``, in order (a later file's keys win), then every ``SHOWTELL_<SECTION>__<FIELD>``
    variable of a dotted key, become ``parser``'s defaults, each
    value checked by its flag's own type and choices: so flags given still win, and a bad value
    fails in one line naming the file and key (or the variable), and what is allowed (exit 2),
    before anything runs.  A run's record (``runs/<id>.json``) gives its last revision's settings.
    Returns ``argv`` with its dotted keys (``--set KEY=VALUE``, ``--KEY VALUE``) as their flags."""
    named, environment = _environment_settings(parser)
    defaults: dict[str, object] = dict(named)
    for path in _config_paths(argv):
        defaults.update(_file_settings(parser, path))
    defaults.update(environment)
    parser.set_defaults(**defaults)
    return expand_keys(parser, argv)


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


def keys_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The parser's dotted keys → dests ({} for a command without them)."""
    return getattr(parser, "dotted_keys", {})


def environment_name(key: str) -> str:
    """``optimizer.learning_rate`` → ``SHOWTELL_OPTIMIZER__LEARNING_RATE``."""
    return "SHOWTELL_" + key.upper().replace(".", "__")


def _environment_settings(parser: argparse.ArgumentParser) -> dict[str, object]:
    """The environment's settings, each checked as its flag would check it: first the older named
    variables (``SHOWTELL_STRATEGY``: defaults, which a ``--config`` file overrides), then every
    ``SHOWTELL_<SECTION>__<FIELD>`` (over the files) — two dicts, in that order."""
    import os

    actions = _actions(parser)
    key_of = {dest: key for key, dest in keys_of(parser).items()}
    named, settings = {}, {}
    for dest, action in actions.items():
        variable = getattr(action, "environment", None)
        if variable and os.environ.get(variable):
            key = key_of.get(dest, action.option_strings[-1])
            named[dest] = _setting(parser, f"environment {variable}", key, action, os.environ[variable])
    for key, dest in keys_of(parser).items():
        variable = environment_name(key)
        text = os.environ.get(variable)
        if text is not None:
            settings[dest] = _setting(parser, f"environment {variable}", key, actions[dest], text)
            actions[dest].required = False
    return named, settings


def expand_keys(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--set KEY=VALUE``, ``--set=KEY=VALUE``, ``--KEY VALUE`` and ``--KEY=VALUE``
    (``KEY`` dotted) replaced by the flag they name, the value checked as a file's is."""
    keys, actions = keys_of(parser), _actions(parser)
    out: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        given, key, value = None, None, None
        if word == "--set" or word.startswith("--set="):
            given = word.partition("=")[2] if word.startswith("--set=") else (
                words[i + 1] if i + 1 < len(words) else parser.error("--set: expected KEY=VALUE"))
            i += 1 if word.startswith("--set=") else 2
            key, equals, value = given.partition("=")
            if not equals:
                parser.error(f"--set {given}: expected KEY=VALUE, e.g. optimizer.learning_rate=0.1")
            where = "--set"
        elif word.startswith("--") and "." in word.partition("=")[0] and keys:
            key, equals, value = word[2:].partition("=")
            if not equals:
                if i + 1 >= len(words):
                    parser.error(f"--{key}: expected a value")
                value = words[i + 1]
            i += 1 if equals else 2
            where = f"--{key}"
        else:
            out.append(word)
            i += 1
            continue
        if key not in keys:
            near = difflib.get_close_matches(key, list(keys), n=1)
            parser.error(f"{where}: unknown key {key!r}{f' (did you mean {near[0]}?)' if near else ''}; "
                         f"the keys are listed in docs/cli.md")
        action = actions[keys[key]]
        parsed = _setting(parser, where, key, action, value)
        if isinstance(action, argparse._StoreTrueAction):
            if parsed:
                out.append(action.option_strings[-1])
            else:  # the last given wins: a false here undoes the flag given before it
                out = [w for w in out if w not in action.option_strings]
                parser.set_defaults(**{action.dest: False})
        else:
            out += [action.option_strings[-1], value]
    return out


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "config")}


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
    if isinstance(data.get("revisions"), list):  # a run's record: its settings, if it has one revision
        revisions = data["revisions"]
        if not revisions or not isinstance(revisions[-1], dict) or not isinstance(
                revisions[-1].get("settings"), dict):
            parser.error(f"--config {path}: a run record without settings to repeat")
        if len(revisions) > 1:
            _refuse_revisions(parser, path, data.get("run_id", "?"), len(revisions), 2, revisions[1])
        data = revisions[-1]["settings"]
    revision = data.get("revision")  # runs/<id>.yaml: the start it was written at
    if isinstance(revision, dict) and isinstance(revision.get("number"), int) and revision["number"] > 1:
        _refuse_revisions(parser, path, revision.get("run_id", "?"), revision["number"], revision["number"],
                          revision)
    actions, keys = _actions(parser), keys_of(parser)
    sections = {key.split(".")[0] for key in keys}
    where = f"--config {path}"
    settings = {}
    for key, value, dest in _flattened(data, sections, keys):
        if dest in NOT_SETTINGS or (dest in RECORD_SECTIONS and dest not in actions):
            continue
        action = actions.get(dest)
        if action is None:
            names = [*(d.replace("_", "-") for d in actions), *keys]
            near = difflib.get_close_matches(str(key).replace("_", "-") if "." not in str(key) else str(key),
                                             names, n=1)
            parser.error(f"{where}: unknown key {key!r}{f' (did you mean {near[0]}?)' if near else ''}; "
                         f"keys are the flags of {parser.prog} without the dashes"
                         f"{', or dotted keys in sections' if keys else ''}")
        if value is None:  # what --print-config prints for unset, "never" or "auto": None itself
            if not _takes_none(action):
                parser.error(f"{where}: {key}: expected a value (null is not one for this flag)")
            settings[action.dest] = None
        elif isinstance(action, argparse._AppendAction):  # a repeated flag: one value or a list of them
            values = value if isinstance(value, list) else [value]
            settings[action.dest] = [_setting(parser, where, key, action, v) for v in values]
        else:
            settings[action.dest] = _setting(parser, where, key, action, value)
        action.required = False  # given by the file
    return settings


def _refuse_revisions(parser: argparse.ArgumentParser, path: str, run: str, count: int, number: int,
                      revision: dict) -> None:
    """A run resumed with changed settings is not repeated by any one revision's settings from
    step 0: say so in one line, naming the revision (``number``) and what it changed."""
    changed = "; ".join(revision.get("changed") or []) or "its settings"
    parser.error(f"--config {path}: run {run} has {count} revisions — revision {number} changed {changed} "
                 f"at step {revision.get('step', '?')} — and one revision's settings from step 0 would not "
                 f"repeat it; repeat its first revision (showtell runs show {run}) and resume with each "
                 "later one's settings at its step")


def _flattened(data: dict, sections: set[str], keys: dict[str, str]):
    """(key as written, value, dest) for each setting of a file: a flat flag name, or a section
    of dotted keys (``optimizer: {learning_rate: 0.1}`` → ``optimizer.learning_rate``)."""
    for key, value in data.items():
        if isinstance(value, dict) and key in sections:
            for field, inner in value.items():
                dotted = f"{key}.{field}"
                yield dotted, inner, keys.get(dotted, f"<unknown {dotted}>")
        else:
            yield key, value, str(key).replace("-", "_")


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


def settings_yaml(settings: dict[str, object], header: str, sections: dict[str, object] | None = None,
                  keys: dict[str, str] | None = None) -> str:
    """Settings as a config file holds them — plain values (a path as text, a list as its flag
    writes it, unset ones null), how they were given (``--config``, ``--print-config``) left out;
    with ``keys`` (dotted key → dest) in their sections (``optimizer: {learning_rate: 2.0}``), else
    by dashed flag name — then ``sections`` (``RECORD_SECTIONS``, passed over when read):
    ``--config`` reads this back to the same settings."""
    import yaml

    def plain(value):
        if isinstance(value, Path) or (isinstance(value, tuple) and type(value).__str__ is not tuple.__str__):
            return str(value)  # a flag's own tuple type (--profile-steps 3:5): its flag's text
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, Path)) for v in value):
            return ",".join(str(plain(v)) for v in value)  # one flag's list (--devices GPU:0,GPU:1)
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]  # a repeated flag's values (--eval-set …), each its flag's text
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return str(value)  # a flag's own type (--phases): its text, which the flag reads back

    printed: dict[str, object] = {}
    key_of = {dest: key for key, dest in (keys or {}).items()}
    rank = {dest: i for i, dest in enumerate(key_of)}  # the keys' order: the configuration's sections
    for dest, value in sorted(settings.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])):
        if dest in NOT_SETTINGS or dest == "command":
            continue
        if dest in key_of:
            section, field = key_of[dest].split(".", 1)
            printed.setdefault(section, {})[field] = plain(value)
        else:
            printed[dest.replace("_", "-")] = plain(value)
    printed.update(sections or {})
    return f"# {header}\n" + yaml.safe_dump(printed, sort_keys=False, allow_unicode=True)


def print_config(prog: str, args: argparse.Namespace) -> int:
    """``--print-config`` of a command without sections of its own: its settings, exit 0."""
    sys.stdout.write(settings_yaml(vars(args), f"{prog}: its settings (feed this file back: --config FILE)"))
    return 0


def _setting(parser: argparse.ArgumentParser, where: str, key, action: argparse.Action, value):
    """``value`` from a file, the environment or a dotted key, as the flag would have parsed it;
    an error names ``where`` it came from and the key."""
    if isinstance(action, argparse._StoreTrueAction):
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"  # from --set or the environment
        if not isinstance(value, bool):
            parser.error(f"{where}: {key}: expected true or false (got {value!r})")
        return value
    if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) for v in value):
        value = ",".join(str(v) for v in value)  # a list flag (--devices GPU:0,GPU:1), as a record holds it
    if isinstance(value, (dict, list)):
        parser.error(f"{where}: {key}: expected one value (got {value!r})")
    if isinstance(value, bool) and action.choices is not None and "off" in action.choices:
        value = "on" if value else "off"  # YAML 1.1 reads an unquoted off (or no) as false
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        parsed = action.type(text) if callable(action.type) else text
    except argparse.ArgumentTypeError as exc:
        parser.error(f"{where}: {key}: {exc}")
    except (ValueError, TypeError):
        name = getattr(action.type, "__name__", None) or repr(action.type)
        parser.error(f"{where}: {key}: invalid {name} value: {value!r}")
    if action.choices is not None and parsed not in action.choices:
        allowed = ", ".join(map(str, action.choices))
        parser.error(f"{where}: {key}: {parsed!r} is not one of {allowed}")
    return parsed


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, ``--config`` files and the environment applied first, dotted keys expanded."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return parser.parse_args(apply_config_file(parser, argv))


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
