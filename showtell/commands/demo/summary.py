"""What the demo's runs reached: the summary at its end, the time to its target, an earlier demo's
run and pretraining — read from the evaluations and the model dir, without TensorFlow until the end."""

from __future__ import annotations

from pathlib import Path

from showtell.captioning.config import pretrain_progress
from showtell.commands.demo.console import Console
from showtell.commands.demo.settings import UNSEEN_SEED
from showtell.common.intervals import with_interval
from showtell.evaluator.records.workdir import WorkDir
from showtell.v1 import metrics_pb2 as pb


def going_on(state: Path) -> str:
    """What the last pretraining reached (its ``progress.json``), said where this one goes on."""
    progress = pretrain_progress(state)
    if not progress or "step" not in progress:
        return ""
    accuracy = progress.get("accuracy", {})

    def mean(attr: str) -> float:
        values = [v for head, v in accuracy.items() if head.endswith(f"_{attr}")]
        return sum(values) / max(len(values), 1)

    return (f", going on from step {progress['step']} (held-out accuracy then: colour {mean('colour'):.2f}, "
            f"kind {mean('kind'):.2f}, size {mean('size'):.2f})")


def run_id(model: Path) -> str:
    """The model dir's current run, read without TensorFlow ('' when none is recorded)."""
    from showtell.common.model_dir import ModelDir

    return ModelDir(model).read_run_id() or ""


def newest_step(model: Path) -> int | None:
    """The step of the newest checkpoint on disk (the trainer has ended: its final save is done)."""
    from showtell.common.model_dir import ModelDir

    return max(ModelDir(model).checkpoint_steps(), default=None)


TARGET_EXACT_MATCH = 0.5  # the demo's summary says when its run reached this


def summary(seen: list[pb.Evaluation], work: WorkDir, console: Console,
             unseen: list[pb.Evaluation] = ()) -> None:
    curves: dict[str, list[str]] = {}  # per run (the preview's, then the finished encoder's), in order
    for e in seen:
        if e.status == pb.Evaluation.STATUS_OK and "exact_match" in e.metrics:
            curves.setdefault(e.run_id, []).append(f"{e.global_step}: {exact_match(e)}")
    for run, curve in curves.items():
        console.say("summary", f"exact match by step, with 95 % intervals (run {run or '-'}): "
                    + ", ".join(curve))
        other = [f"{e.global_step}: {exact_match(e)}" for e in unseen if e.run_id == run]
        if other:
            console.say("summary", f"  the same checkpoints on unseen scenes (seed {UNSEEN_SEED}): "
                        + ", ".join(other))
    if curves:
        console.say("summary", time_to_target([e for e in seen if e.run_id == list(curves)[-1]]))
    console.say("summary", f"{len(seen)} evaluations; history in {work.history}")


def time_to_target(evaluations: list[pb.Evaluation], target: float = TARGET_EXACT_MATCH) -> str:
    """When the run's exact match first reached ``target``, in training time (the trainer's, saved
    in each checkpoint), or the best it reached."""
    ok = [e for e in evaluations if e.status == pb.Evaluation.STATUS_OK and "exact_match" in e.metrics]
    for e in sorted(ok, key=lambda e: e.global_step):
        if e.metrics["exact_match"] >= target and e.HasField("train_time"):
            seconds = round(e.train_time.ToTimedelta().total_seconds())
            return f"exact match {target:g} reached after {seconds // 60}:{seconds % 60:02d} of training " \
                   f"(step {e.global_step})"
    best = max(ok, key=lambda e: e.metrics["exact_match"], default=None)
    return f"exact match {target:g} not reached" + (
        f" (best {exact_match(best)} at step {best.global_step})" if best else "")


def recorded_exact_match(record) -> str:
    return with_interval(record.metrics["exact_match"], record.intervals.get("exact_match"), digits=2)


def exact_match(e: pb.Evaluation) -> str:
    """``0.77 (0.69–0.85)``: the value and, when recorded, its interval."""
    return metric(e, "exact_match")


def metric(e: pb.Evaluation, name: str) -> str:
    bounds = e.intervals.get(name)
    return with_interval(e.metrics[name], (bounds.lower, bounds.upper) if bounds else None, digits=2)
