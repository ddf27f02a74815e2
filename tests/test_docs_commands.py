"""Every ``showtell …`` command the README and docs show — in code blocks and in inline code — names
a command, subcommand and flags that the real parsers have, so a renamed or removed flag fails the
suite instead of a reader.  Values are not parsed: the docs write placeholders (``HOST:PORT``,
``…``, ``$H``) where a reader puts their own.  ``docs/cli.md`` is generated from the parsers and
checked by its own test."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest

from showtell.cli import COMMANDS
from tests.helpers import ROOT

DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "SECURITY.md",
             *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "cli.md")]
FENCE = re.compile(r"```[\w-]*\n(.*?)```", re.S)
INLINE = re.compile(r"(?<!`)`((?:\S*/)?showtell [^`\n]+)`(?!`)")
SHELL_END = {"|", "||", "&&", ";", "&", ">", ">>", "2>&1", "<"}


def commands(markdown: str) -> list[list[str]]:
    """The ``showtell`` invocations in a document: each as its words after ``showtell``."""
    lines = []
    for block in FENCE.findall(markdown):
        lines += block.replace("\\\n", " ").splitlines()
    lines += INLINE.findall(FENCE.sub("", markdown))
    found = []
    for line in lines:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote in prose
            words = line.split()
        for i, word in enumerate(words):
            if word == "showtell" or word.endswith("/showtell"):
                invocation = []
                for w in words[i + 1:]:
                    if w in SHELL_END or w.startswith(">"):
                        break
                    invocation.append(w)
                if invocation and (invocation[0] in COMMANDS or invocation[0].startswith("--")):
                    found.append(invocation)
                break
    return found


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"showtell {command}")
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    return parser


def problems(words: list[str]) -> list[str]:
    """What in ``showtell WORDS`` the parsers do not have: an unknown command, subcommand or flag."""
    if words[0].startswith("--"):
        return [] if words[0] in ("--version", "--help", "-h") else [f"showtell has no {words[0]}"]
    parser, chain, found, elided = _parser(words[0]), [words[0]], [], False
    for word in words[1:]:
        if word in ("…", "...") or elided:  # words left out: from here on only flags are checked
            elided = True
            if word.startswith("--") and word.split("=", 1)[0] not in parser._option_string_actions:
                found.append(f"showtell {' '.join(chain)} has no {word.split('=', 1)[0]}")
            continue
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            if flag not in parser._option_string_actions:
                found.append(f"showtell {' '.join(chain)} has no {flag}")
            continue
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subparsers and not word.startswith("-"):
            if word not in subparsers[0].choices:
                found.append(f"showtell {' '.join(chain)} has no subcommand {word!r}")
                break
            parser = subparsers[0].choices[word]
            chain.append(word)
            continue
        choices = [a for a in parser._actions if not a.option_strings and a.choices and a.dest != "help"]
        if choices and len(chain) == 1 and not word.startswith("-"):
            if word not in choices[0].choices:
                allowed = sorted(choices[0].choices)
                found.append(f"showtell {' '.join(chain)}: {word!r} is not one of {allowed}")
            chain.append(word)
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_the_docs_show_has_the_flags_it_names(document: Path):
    shown = commands(document.read_text())
    bad = {" ".join(words): p for words in shown if (p := problems(words))}
    assert not bad, f"{document.name}: {bad}"


def test_the_docs_show_commands_and_the_check_bites():
    shown = [c for d in DOCUMENTS for c in commands(d.read_text())]
    assert len(shown) >= 40 and {c[0] for c in shown} >= {"train", "evaluate", "metrics", "caption", "data"}
    planted = """```bash
.venv/bin/showtell train --data d --model-dir m --save-every-sec 60   # a renamed flag
showtell metrics lates --server h:1 | jq .
```
and inline: `showtell evaluate --model-dir m --data d --no-such-flag`, `showtell runs --history h`.
"""
    found = [problems(c) for c in commands(planted)]
    assert found[0] == ["showtell train has no --save-every-sec"]
    assert len(found[1]) == 1 and found[1][0].startswith("showtell metrics: 'lates' is not one of ['best'")
    assert found[2:] == [["showtell evaluate has no --no-such-flag"], []]
