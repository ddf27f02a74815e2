"""The documents a reader follows: every relative link and ``#anchor`` resolves, no project
bookkeeping words (issue numbers, "stop 33") where users read, BENCHMARKS.md stays a size one can
read, and each benchmark figure the README and docs quote is one BENCHMARKS.md holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

READ = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md",
        ROOT / "SECURITY.md",
        *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
BOOKKEEPING = re.compile(r"\b(?:issue|stop) \d+\b|review mend", re.IGNORECASE)
# Benchmark figures as the README and docs quote them: the value must appear in BENCHMARKS.md.
QUOTED = [re.compile(p) for p in (
    r"exact match \**(0\.\d+)",
    r"first evaluation (?:at|after) \**(\d+:\d\d)",
    r"(\d[\d,]*) passed",
    r"≈ ?([\d,]+) images a minute",
    r"(\d+(?:\.\d+)?) of (?:the|a) forward pass",
)]


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a file's headings: lower-cased, punctuation dropped, spaces → '-'."""
    found = set()
    for heading in re.findall(r"^#+ +(.+?) *$", re.sub(r"```.*?```", "", markdown, flags=re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("document", READ, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(document: Path):
    text = re.sub(r"```.*?```", "", document.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https://, mailto: — not ours to check offline
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document
        if not file.exists():
            broken.append(f"{target}: no {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert broken == []


@pytest.mark.parametrize("document", READ, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_bookkeeping_words_where_users_read(document: Path):
    assert BOOKKEEPING.findall(document.read_text()) == []


def test_benchmarks_stay_readable():
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert len(text.encode()) <= 20 * 1024
    assert "## Contents" in text


@pytest.mark.parametrize("document", [d for d in READ if d.name != "BENCHMARKS.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_figures_quoted_in_the_docs_are_in_benchmarks(document: Path):
    benchmarks = (ROOT / "BENCHMARKS.md").read_text()
    text = re.sub(r"```.*?```", "", document.read_text(), flags=re.S)  # excerpts of logs are not quotes
    missing = [m.group(0) for pattern in QUOTED for m in pattern.finditer(text)
               if m.group(1) not in benchmarks]
    assert missing == []


def test_the_checks_fail_on_what_they_guard_against(tmp_path: Path):
    """Planted: a link to a missing anchor and a bookkeeping word are found."""
    (tmp_path / "a.md").write_text("# Real heading\n\nsee [x](a.md#gone) and [y](#real-heading); issue 12\n")
    text = (tmp_path / "a.md").read_text()
    assert anchors(text) == {"real-heading"}
    assert [t for t in LINK.findall(text)] == ["a.md#gone", "#real-heading"]
    assert BOOKKEEPING.findall(text) == ["issue 12"]
