"""``showtell runs``: the runs recorded in model dirs (``<model-dir>/runs/<run id>.json``, written
by ``showtell train``) — when each started, how far it got, whether it is training, finished or
stopped (and why), and, from an evaluator's history, its best value of a metric and the training
time it took to reach a target.

    showtell runs MODEL_DIR [MODEL_DIR ...]          a table (or --json)
    showtell runs show RUN_ID MODEL_DIR [...]        the run's whole configuration, every revision
    showtell runs diff RUN_A RUN_B MODEL_DIR [...]   the settings (and versions) that differ
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from showtell.common.errors import ShowtellError
from showtell.common.flags import add_verbose_flag, run_command, start_command

PROG = "showtell runs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("words", nargs="+", metavar="[show RUN | diff RUN_A RUN_B] MODEL_DIR",
                   help="model dirs to read (after `show RUN` or `diff RUN_A RUN_B`)")
    p.add_argument("--history", type=Path,
                   help="an evaluator's history (<work-dir>/evaluations.sqlite): best value and time "
                        "to target")
    p.add_argument("--metric", default="exact_match:max", metavar="METRIC:max|min",
                   help="the metric whose best value is shown (default exact_match:max)")
    p.add_argument("--target", default="exact_match=0.5", metavar="METRIC=X",
                   help="the training time until METRIC first reached X (default exact_match=0.5; "
                        "for a metric where lower is better, until it fell to X)")
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    add_verbose_flag(p)


@dataclass
class Run:
    run_id: str
    model_dir: str
    started: str
    step: int
    steps: int | None  # the last revision's --steps
    status: str  # training | finished (reason) | stopped (reason)
    best: float | None = None
    best_step: int | None = None
    target_seconds: float | None = None  # training seconds when --target was first met
    target_step: int | None = None


def run(args: argparse.Namespace) -> int:
    start_command(args)  # TensorFlow reads the model dirs: its native notices hidden unless -v
    return run_command(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    words = args.words
    if words[0] == "show":
        if len(words) < 3:
            raise ShowtellError("usage: showtell runs show RUN_ID MODEL_DIR [MODEL_DIR ...]")
        print(json.dumps(_find(words[1], words[2:])[1], indent=2))
        return 0
    if words[0] == "diff":
        if len(words) < 4:
            raise ShowtellError("usage: showtell runs diff RUN_A RUN_B MODEL_DIR [MODEL_DIR ...]")
        for line in diff(_find(words[1], words[3:])[1], _find(words[2], words[3:])[1]):
            print(line)
        return 0
    runs = [r for d in words for r in runs_in(Path(d))]
    if args.history is not None:
        _score(runs, args.history, args.metric, args.target)
    if args.json:
        for r in runs:
            print(json.dumps(asdict(r)))
    else:
        sys.stdout.write(table(runs, args.metric, args.target))
    return 0


def runs_in(model_dir: Path) -> list[Run]:
    """The runs recorded in ``model_dir``, oldest first."""
    from showtell.captioning.model.modeldir import RUNS, checkpoint_steps, read_run_id
    from showtell.common.locks import held

    if not model_dir.is_dir():
        raise ShowtellError(f"{model_dir}: no such model dir")
    current = read_run_id(str(model_dir))
    found = []
    for path in sorted((model_dir / RUNS).glob("*.json")):
        record = _load(path)
        revisions, ends = record.get("revisions", []), record.get("ends", [])
        if not revisions:
            continue
        run_id = path.stem
        last_end = ends[-1] if ends else None
        step = max(checkpoint_steps(model_dir), default=0) if run_id == current else (
            last_end["step"] if last_end else revisions[-1]["step"])
        if run_id == current and held(model_dir, "trainer"):
            status = "training"
        elif last_end is None or last_end["at"] < revisions[-1]["at"]:
            status = "stopped (no end recorded: killed?)"
        else:
            status = f"{'finished' if last_end['finished'] else 'stopped'} ({last_end['reason']})"
        found.append(Run(run_id, str(model_dir), revisions[0]["at"], step,
                         revisions[-1]["settings"].get("steps"), status))
    return sorted(found, key=lambda r: r.started)


def _score(runs: list[Run], history: Path, metric_spec: str, target_spec: str) -> None:
    """Best value and time to target, from an evaluator's history."""
    from showtell.evaluator.metric_names import LOWER_IS_BETTER
    from showtell.evaluator.records.store import Store

    if not history.is_file():
        raise ShowtellError(f"--history {history}: no such file (an evaluator's "
                            "<work-dir>/evaluations.sqlite)")
    metric, _, mode = metric_spec.partition(":")
    target_metric, _, value = target_spec.partition("=")
    try:
        target = float(value)
    except ValueError:
        raise ShowtellError(f"--target {target_spec}: expected METRIC=X, e.g. exact_match=0.5") from None
    lower = target_metric in LOWER_IS_BETTER
    store = Store(history)
    try:
        for r in runs:
            best = store.best(metric, maximize=(mode or "max") == "max", run=r.run_id)
            if best is not None:
                r.best, r.best_step = best.metrics[metric], best.step
            reached = store.first_reaching(target_metric, target, maximize=not lower, run=r.run_id)
            if reached is not None:
                r.target_seconds, r.target_step = reached.train_seconds, reached.step
    finally:
        store.close()


def table(runs: list[Run], metric: str, target: str) -> str:
    rows = [["RUN", "STARTED", "STEP", "STATUS", f"BEST {metric}", f"TIME TO {target}", "MODEL DIR"]]
    for r in runs:
        best = "-" if r.best is None else f"{r.best:.4f} (step {r.best_step})"
        reached = "-" if r.target_step is None else (
            f"step {r.target_step}" if r.target_seconds is None else
            f"{_clock(r.target_seconds)} (step {r.target_step})")
        rows.append([r.run_id, r.started, f"{r.step}/{r.steps}", r.status, best, reached, r.model_dir])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
                   for row in rows)


def diff(a: dict, b: dict) -> list[str]:
    """The settings of A's and B's last revisions that differ, then the versions."""
    from showtell.trainer.run_config import differences

    first, second = a["revisions"][-1], b["revisions"][-1]
    lines = differences(first["settings"], second["settings"])
    for key in ("showtell", "tensorflow", "keras", "python"):
        old, new = first["environment"].get(key), second["environment"].get(key)
        if old != new:
            lines.append(f"{key}: {old} → {new}")
    return lines or ["no setting differs"]


def _find(run_id: str, dirs: list[str]) -> tuple[Path, dict]:
    from showtell.captioning.model.modeldir import RUNS

    for d in dirs:
        path = Path(d) / RUNS / f"{run_id}.json"
        if path.is_file():
            return path, _load(path)
    raise ShowtellError(f"run {run_id}: not recorded in {', '.join(dirs)} (showtell runs DIR lists them)")


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ShowtellError(f"{path}: unreadable run record ({exc}); move it aside") from exc


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


def main(argv: list[str] | None = None) -> int:
    from showtell.common.flags import Parser

    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
