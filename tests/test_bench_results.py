"""Raw results kept: each ``bench/results/<bench>.json`` names a commit that exists and whose
bench takes the flags it ran with, and the BENCHMARKS.md figures drawn from it are the file's
own numbers — read here from the file, never retyped."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import ROOT

RESULTS = sorted((ROOT / "bench" / "results").glob("*.json"))


def _git(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *words], cwd=ROOT, capture_output=True, text=True, check=False)


def _bench_source(commit: str, bench: str) -> str:
    """The bench's source at ``commit``, with ``rounds.add_out``'s ``"--out"`` if the bench calls it."""
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
        shown = _git("show", f"{commit}:bench/{bench}.py")
        assert shown.returncode == 0, shown.stderr
        source = shown.stdout
    else:  # only a shallow clone may lack it; a full one must have it
        assert _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true", \
            f"{commit}: no such commit in this repository"
        source = (ROOT / "bench" / f"{bench}.py").read_text()
    return source + ('"--out"' if re.search(r"\badd_out\(", source) else "")


def _range(figure: dict, digits: int) -> str:
    return f"{figure['median']:.{digits}f} ({figure['min']:.{digits}f}–{figure['max']:.{digits}f})"


# bench → (the BENCHMARKS.md row it feeds, what the row must hold, made from the file's report)
FIGURES: dict[str, list[tuple[str, Callable[[dict], str]]]] = {
    "eval_throughput": [
        ("evaluator ÷ plain forward pass, images per CPU second, at this size",
         lambda r: f"**{_range(r['ratio_evaluator_over_forward_cpu'], 3)}**"),
        ("the same per wall-clock second",
         lambda r: _range(r["ratio_evaluator_over_forward_wall"], 3)),
        ("METEOR's warm JVM, per evaluation",
         lambda r: f"{r['meteor_cpu_sec_per_evaluation']['median']:.2f} CPU-s: "
                   f"{r['meteor_share_of_an_evaluation'] * 100:.1f} % of the evaluation"),
        ("the tokenizer's CPU per evaluation",
         lambda r: f"{r['tokenizer_cpu_sec_per_evaluation']['median']:.2f} CPU-s"),
        ("evaluator ÷ forward per CPU second for a 5,000-image evaluation",
         lambda r: f"**{_range(r['ratio_evaluator_over_forward_cpu_at_5000_images'], 3)}"),
        ("the intervals (1,000 resamples, every metric) of a 5,000-image evaluation",
         lambda r: f"{r['bootstrap_cpu_sec_at_5000_images']['median']:.2f} CPU-s"),
    ],
    "steps_per_loop": [
        ("showtell, 10 a call ÷ Keras fit, 10 a call, fresh processes",
         lambda r: f"**{_range(r['phase1']['showtell_10_over_keras_fit_10'], 3)}** | "
                   f"**{_range(r['phase2']['showtell_10_over_keras_fit_10'], 3)}**"),
        ("showtell, 10 steps a call ÷ 1, fresh processes",
         lambda r: f"{_range(r['phase1']['showtell_10_over_showtell_1'], 3)} | "
                   f"{_range(r['phase2']['showtell_10_over_showtell_1'], 3)}"),
    ],
}


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_a_results_file_names_a_commit_whose_bench_takes_its_flags(path: Path):
    saved = json.loads(path.read_text())
    assert {"bench", "commit", "tree_changed", "date", "argv", "machine", "report"} <= set(saved)
    assert saved["bench"] == path.stem
    changed = saved["tree_changed"]
    assert changed == [], f"run the bench on a committed tree (changed: {changed})"
    assert re.fullmatch(r"[0-9a-f]{40}", saved["commit"]), saved["commit"]
    source = _bench_source(saved["commit"], saved["bench"])
    for flag in (a.split("=", 1)[0] for a in saved["argv"] if a.startswith("--")):
        assert f'"{flag}"' in source, f"{flag}: not a flag of bench/{saved['bench']}.py at {saved['commit']}"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", saved["date"])


@pytest.mark.parametrize("bench", sorted(FIGURES))
def test_benchmarks_figures_are_the_results_files_own(bench: str):
    path = ROOT / "bench" / "results" / f"{bench}.json"
    saved = json.loads(path.read_text())
    report, commit = saved["report"], saved["commit"][:7]
    lines = (ROOT / "BENCHMARKS.md").read_text().splitlines()
    for label, figure in FIGURES[bench]:
        rows = [line for line in lines if label in line]
        assert len(rows) == 1, f"BENCHMARKS.md: {len(rows)} rows hold {label!r}"
        assert figure(report) in rows[0], f"{label!r}: {figure(report)!r} is not in {rows[0]!r}"
    section = "\n".join(lines)
    assert f"bench/results/{bench}.json" in section and commit in section, \
        f"BENCHMARKS.md names neither the results file nor its commit {commit}"
