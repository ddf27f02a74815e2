"""How the benches measure: warm-up passes not counted, rounds alternated, median and spread.

A shared 2-core VM drifts by tens of percent within a minute, so one timing of A then one of B
says little.  Each path runs ``warm`` untimed passes first (tracing, caches, tf.data's
autotuning); then every round times each path once, in turn — in reverse order every other
round, so that no path always follows the same one (a path's after-effects, a cooling CPU,
fall on each alike) — and a ratio is the median of the per-round ratios, reported with its spread, so a reader
can see whether a difference is larger than the noise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

MIN_ROUNDS = 3


def alternate(paths: dict[str, Callable[[], float]], *, rounds: int, warm: int = 1) -> dict[str, list[float]]:
    """Each path's figure per round (whatever its callable returns: a rate, seconds, a tuple …)."""
    if rounds < MIN_ROUNDS:
        raise SystemExit(f"--rounds {rounds}: at least {MIN_ROUNDS}, or the spread means nothing")
    for one in paths.values():
        for _ in range(warm):
            one()
    figures: dict[str, list] = {name: [] for name in paths}
    for index in range(rounds):
        for name in order(list(paths), index):
            figures[name].append(paths[name]())
    return figures


def order(names: list[str], index: int) -> list[str]:
    """Round ``index``'s order: as given on even rounds, reversed on odd ones."""
    return names if index % 2 == 0 else names[::-1]


def spread(values: list[float], digits: int = 2) -> dict[str, object]:
    """Median, min–max and every round's value."""
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "rounds": [round(v, digits) for v in values]}


def ratio(numerator: list[float], denominator: list[float], digits: int = 3) -> dict[str, object]:
    """Per-round ratios (same round, same conditions), their median and spread, and whether 1.0
    lies inside the spread (then the two are not told apart by this run)."""
    ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
    out = spread(ratios, digits)
    out["one_inside_spread"] = min(ratios) <= 1.0 <= max(ratios)
    return out


def paired(numerator: list[float], denominator: list[float], level: float = 0.95,
           digits: int = 3) -> dict[str, object]:
    """``ratio`` for many paired rounds (a min–max range of 30 is far wider than the median's
    uncertainty): the median of the per-round ratios with its distribution-free interval — the
    order statistics a sign test gives at ``level`` — and how many rounds lie above 1.0."""
    by_round = [a / b for a, b in zip(numerator, denominator, strict=True)]
    ratios, n = sorted(by_round), len(by_round)
    # the largest k with P(Binomial(n, ½) < k) ≤ (1 − level) / 2: [x_(k), x_(n+1−k)] holds the median
    k, tail = 0, 0.0
    while tail + math.comb(n, k) / 2**n <= (1 - level) / 2:
        tail += math.comb(n, k) / 2**n
        k += 1
    if k == 0:
        raise SystemExit(f"{n} rounds: too few for a {level:.0%} interval of the median")
    low, high = ratios[k - 1], ratios[n - k]
    return {"median": round(statistics.median(ratios), digits), "low": round(low, digits),
            "high": round(high, digits), "level": level, "one_inside": low <= 1.0 <= high,
            "above_one": sum(r > 1.0 for r in ratios), "rounds": n,
            "ratios": [round(r, digits) for r in by_round]}


def _git(*words: str) -> str:
    done = subprocess.run(["git", *words], cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                          text=True, check=False)
    return done.stdout.rstrip()  # not lstrip: a status line starts with a space (" M path")


def _checkout() -> tuple[str, list[str]]:
    """HEAD and the tracked files that differ from it — other results files aside: they are output,
    not code (`make bench` writes them one after another)."""
    changed = [line[3:] for line in _git("status", "--porcelain", "--untracked-files=no").splitlines()
               if not line[3:].startswith("bench/results/")]
    return _git("rev-parse", "HEAD"), changed


# The checkout as the bench started (every bench imports this module first): a results file names
# the code that ran, not the code there when it ended.
STARTED_AT = _checkout()


def write_results(path: Path, report: dict, argv: Sequence[str]) -> None:
    """``report`` as a results file (``bench/results/<bench>.json``): with the commit it ran at
    (and the tracked files that differed from it), the date, the machine and the arguments — what
    ``tests/test_bench_results.py`` checks BENCHMARKS.md's figures against.  Refused (exit 1, one
    line) if HEAD moved or a tracked file changed while the bench ran: no commit names that run."""
    if _checkout() != STARTED_AT:
        now = _checkout()
        raise SystemExit(f"{path}: not written: the checkout changed while the bench ran (HEAD "
                         f"{STARTED_AT[0][:7]} → {now[0][:7]}, changed files {STARTED_AT[1]} → {now[1]}); "
                         "run it again on a tree left alone")
    info = Path("/proc/cpuinfo").read_text().splitlines()

    def first(field: str, default: str = "") -> str:
        return next((line.split(":", 1)[1].strip() for line in info if line.startswith(field)), default)

    cpu = first("model name", platform.processor())
    commit, changed = STARTED_AT
    stamped = {"bench": Path(sys.argv[0]).stem, "commit": commit, "tree_changed": changed,
               "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "argv": list(argv),
               # which kind of machine: machines of one "cpu" name ran 2× apart, so its clock and
               # vector width too (BENCHMARKS.md names each row's machine)
               "machine": {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
                           "mhz": round(float(first("cpu MHz", "0") or 0)),
                           "avx512": "avx512f" in first("flags").split()},
               "report": report}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stamped, indent=1) + "\n")


def add_out(parser: argparse.ArgumentParser, bench: str) -> None:
    """``--out``: where the report is also written as a results file (see ``write_results``)."""
    parser.add_argument("--out", type=Path, help=f"also write the report with its commit, date and machine "
                        f"(bench/results/{bench}.json: what BENCHMARKS.md quotes)")


def publish(report: dict, out: Path | None, argv: Sequence[str] | None = None,
            indent: int | None = 2) -> None:
    """Print ``report``; with ``out``, keep it as a results file too (``argv``: the bench's
    arguments, when ``main`` was given them rather than reading ``sys.argv``)."""
    print(json.dumps(report, indent=indent))
    if out is not None:
        write_results(out, report, sys.argv[1:] if argv is None else argv)
