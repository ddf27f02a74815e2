"""Where a command's settings come from besides its flags, each value checked as its flag would
check it: ``--config`` files (YAML, or a run's record), the environment (``SHOWTELL_<SECTION>__<FIELD>``
and the older named variables a flag reads), and dotted keys on the command line (``--set KEY=VALUE``,
``--KEY VALUE``) — and the YAML ``--print-config`` writes, which ``--config`` reads back.

Precedence: defaults ← older named variables ← files ← dotted-key variables ← the command line.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path

from showtell.common import options

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
    keys = keys_of(parser)
    for key, dest in keys.items():
        variable = environment_name(key)
        text = os.environ.get(variable)
        if text is not None:
            settings[dest] = _setting(parser, f"environment {variable}", key, actions[dest], text)
            actions[dest].required = False
    _refuse_misspelt(parser, keys, os.environ)
    return named, settings


def _refuse_misspelt(parser: argparse.ArgumentParser, keys: dict[str, str], environ) -> None:
    """A ``SHOWTELL_<SECTION>__<FIELD>`` that names no key of this command is refused as ``--set``
    refuses one — where it is this command's (its section is one of this command's, or so near
    one that it is a slip): another command's (the evaluator's, in a shared environment) passes."""
    known = {environment_name(key): key for key in keys}
    sections = {key.partition(".")[0] for key in keys}
    for variable in sorted(environ):
        if not variable.startswith("SHOWTELL_") or "__" not in variable or variable in known:
            continue
        section = variable[len("SHOWTELL_"):].partition("__")[0].lower()
        if section not in sections and not difflib.get_close_matches(section, sections, n=1, cutoff=0.8):
            continue
        near = difflib.get_close_matches(variable, list(known), n=1)
        parser.error(f"environment {variable}: names no setting of this command"
                     f"{f' (did you mean {near[0]}?)' if near else ''}; the keys are listed in docs/cli.md "
                     "(SHOWTELL_<SECTION>__<FIELD>)")


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
    return action.default is None or name == options.seconds_or_never.name or name.endswith("|auto")


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
