"""``docs/cli.md``: every ``showtell`` command's ``--help``, generated from the parsers themselves.

``make docs`` writes it (``python -m showtell.cli_reference > docs/cli.md``); a test fails when
the file and the parsers disagree, so the reference lists every flag of every command.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager

from showtell.cli import COMMANDS
from showtell.common.flags import Parser, flag_help
from showtell.common.setting_sources import keys_of

WIDTH = "100"  # argparse wraps help at $COLUMNS: fixed, so the file does not depend on the terminal


def reference() -> str:
    """The whole reference as Markdown."""
    with _plain_environment():
        parts = ["# Command-line reference\n\n",
                 "Generated from the parsers (`make docs`); `tests/test_cli_reference.py` keeps it in step. "
                 "Every command also answers `--help`. Flags whose default comes from an environment "
                 "variable name it in their help.\n\n"]
        parts += [f"- [`showtell {name}`](#showtell-{name})\n" for name in COMMANDS]
        parts.append("\n")
        for name, (module_name, summary) in COMMANDS.items():
            parser = Parser(prog=f"showtell {name}", description=summary)
            importlib.import_module(module_name).add_arguments(parser)
            parts.append(f"## showtell {name}\n\n")
            parts += _help_blocks(parser)
    return "".join(parts)


def _help_blocks(parser: argparse.ArgumentParser) -> Iterator[str]:
    yield f"```\n{parser.format_help().rstrip()}\n```\n\n"
    yield from _keys_table(parser)
    for action in parser._actions:  # subcommands (`showtell data synthetic|coco`) get their own help
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _help_blocks(sub)


def _keys_table(parser: argparse.ArgumentParser) -> Iterator[str]:
    """Every setting of a command with dotted keys: its key, its flag (shown in ``--help`` or not)
    and what it does — ``--set KEY=VALUE``, ``--KEY VALUE``, a file's section or
    ``SHOWTELL_<KEY>`` sets it."""
    keys = keys_of(parser)
    if not keys:
        return
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    hidden = getattr(parser, "hidden_help", {})
    yield (f"### {parser.prog}: keys\n\n"
           f"Every setting by its dotted key: `--set KEY=VALUE` or `--KEY VALUE`, a config file's section "
           f"(`optimizer: {{learning_rate: 0.1}}`) or the variable `SHOWTELL_<SECTION>__<FIELD>` sets it, as "
           f"does its flag — which `--help` shows only for the {len(actions) - len(hidden)} used every day; "
           f"the others work as written here.\n\n"
           "| key | flag | what |\n|---|---|---|\n")
    for key in sorted(keys):
        action = actions[keys[key]]
        what = " ".join(flag_help(parser, action).split()).replace("|", "\\|").replace("<", "&lt;")
        shown = "" if action.dest in hidden else " (in `--help`)"
        yield f"| `{key}` | `{action.option_strings[-1]}`{shown} | {what} |\n"
    yield "\n"


@contextmanager
def _plain_environment() -> Iterator[None]:
    """Defaults read from ``SHOWTELL_*`` variables shown unset; help wrapped at ``WIDTH``."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("SHOWTELL_")]:
        del os.environ[key]
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


if __name__ == "__main__":
    print(reference(), end="")
