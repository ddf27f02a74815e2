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
# Benchmark figures as the README and docs quote them, each with the words a BENCHMARKS.md line
# must hold beside the value (so "exact match 0.9" is not found in a line saying "goal ≥ 0.9").
QUOTED = [(re.compile(p), keyword) for p, keyword in (
    (r"(?<!until )exact match \**(0\.\d+)", "exact match"),  # "until exact match 0.5": a target
    (r"first evaluation (?:at|after) \**(\d+:\d\d)", "evaluation"),
    (r"(\d[\d,]*) passed", "passed"),
    (r"≈ ?([\d,]+) images a minute", "images"),
    (r"(\d+(?:\.\d+)?) of (?:the|a) forward pass", "forward pass"),
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


# A figure inside bold text: a time (2:38), a decimal (0.69), a percentage or a ratio (1.2×).
FIGURE = re.compile(r"\d+:\d\d|\d+\.\d+|\d[\d,]*%|\d+(?:\.\d+)?×")
BOLD = re.compile(r"\*\*([^*]+)\*\*")


def holds(text: str, figure: str, keyword: str = "") -> bool:
    """Whether a line of ``text`` holding ``keyword`` has ``figure`` as a whole number: 0.9 is
    not in 0.94, nor 2:30 in 12:30."""
    whole = re.compile(rf"(?<![\d.:]){re.escape(figure)}(?![\d]|\.\d)")
    return any(keyword.lower() in line.lower() and whole.search(line) for line in text.splitlines())


def quoted_figures(markdown: str) -> list[tuple[str, str, str]]:
    """(where, figure, keyword) for every benchmark figure a document quotes: the phrases of
    ``QUOTED`` and every figure in bold text — code (excerpts of logs) aside."""
    text = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", markdown, flags=re.S))
    found = [(m.group(0), m.group(1), keyword) for pattern, keyword in QUOTED for m in pattern.finditer(text)]
    found += [(f"**{m.group(1)}**", figure, "")
              for m in BOLD.finditer(text) for figure in FIGURE.findall(m.group(1))]
    return found


@pytest.mark.parametrize("document", [d for d in READ if d.name != "BENCHMARKS.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_figures_quoted_in_the_docs_are_in_benchmarks(document: Path):
    benchmarks = (ROOT / "BENCHMARKS.md").read_text()
    missing = [where for where, figure, keyword in quoted_figures(document.read_text())
               if not holds(benchmarks, figure, keyword)]
    assert missing == []


def test_a_figure_is_matched_whole_beside_its_words_and_bold_figures_count():
    """Planted: the README's "exact match 0.69" changed to 0.9 is not found in a BENCHMARKS that
    holds exact match 0.94 and a goal of 0.9; a bold 2:30 is not found in 12:30; bold figures are
    quoted figures."""
    benchmarks = "exact match 0.94 at 12:30\n1.25× faster (goal ≥ 0.9)\nexact match at the end: 0.69"
    assert not holds(benchmarks, "0.9", "exact match") and holds(benchmarks, "0.9")
    assert not holds(benchmarks, "2:30") and not holds(benchmarks, "1.2×")
    assert holds(benchmarks, "0.94", "exact match") and holds(benchmarks, "0.69", "exact match")
    quoted = quoted_figures("the demo reached **exact match 0.9** in **2:30** (**phase 1**, **Adam at 1e-3**)"
                            " trains until exact match 0.5; log: `exact match 0.7 reached`")
    assert [(f, k) for _, f, k in quoted] == [("0.9", "exact match"), ("0.9", ""), ("2:30", "")]
    assert [w for w, f, k in quoted if not holds(benchmarks, f, k)] == ["exact match 0.9", "**2:30**"]


def test_the_checks_fail_on_what_they_guard_against(tmp_path: Path):
    """Planted: a link to a missing anchor and a bookkeeping word are found."""
    (tmp_path / "a.md").write_text("# Real heading\n\nsee [x](a.md#gone) and [y](#real-heading); issue 12\n")
    text = (tmp_path / "a.md").read_text()
    assert anchors(text) == {"real-heading"}
    assert [t for t in LINK.findall(text)] == ["a.md#gone", "#real-heading"]
    assert BOOKKEEPING.findall(text) == ["issue 12"]
