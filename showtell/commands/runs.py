"""``showtell runs``: the runs recorded in model dirs (``<model-dir>/runs/<run id>.json``, written
by ``showtell train``) — when each started, how far it got, whether it is training, finished or
stopped (and why), and, from an evaluator's history, its best value of a metric and the training
time it took to reach a target.

    showtell runs MODEL_DIR [MODEL_DIR ...]          a table (or --json)
    showtell runs show RUN_ID MODEL_DIR [...]        the run's whole configuration, every revision
    showtell runs diff RUN_A RUN_B MODEL_DIR [...]   the settings (and versions) that differ
    showtell runs [show RUN | diff A B] --server HOST:PORT   the same, asked of an evaluator;
        diff adds the runs' best evaluations (by --metric) compared on the same images

Model dirs are read without TensorFlow, so the light client (``pip install '.[client]'``) runs
every form; only ``--history`` (an evaluator's SQLite history) needs the services' modules — on a
client, ``--server`` asks the evaluator, which answers from that history and the model dir.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable
from dataclasses import asdict
from datetime import UTC
from pathlib import Path

from showtell import metrics as registry
from showtell.common import run_records
from showtell.common.errors import ShowtellError, UsageError
from showtell.common.files import is_url
from showtell.common.flags import add_verbose_flag, positive_float, run_command, start_command
from showtell.common.locks import held
from showtell.common.model_dir import ModelDir
from showtell.common.run_records import Run, diff

PROG = "showtell runs"

log = logging.getLogger(__name__)


def runs_in(model_dir: Path) -> list[Run]:
    """The runs recorded in a local ``model_dir``, oldest first."""
    if is_url(str(model_dir)):
        raise UsageError(f"{model_dir}: a URL model dir is read through TensorFlow; ask the evaluator "
                         "that follows it instead (showtell runs --server HOST:PORT)")
    if not model_dir.is_dir():  # a missing file, as in every command: exit 1
        raise ShowtellError(f"{model_dir}: no such model dir")
    opened = ModelDir(model_dir)
    current = opened.run_id
    found = []
    for run_id in opened.run_ids():
        try:
            record = opened.load_run(run_id)
        except ShowtellError as exc:  # one bad file does not hide the other runs
            log.warning("%s", exc)
            continue
        is_current = run_id == current
        newest = max(opened.checkpoint_steps(), default=0) if is_current else None
        run = run_records.summary(run_id, record, str(model_dir), current=is_current,
                                  training=is_current and held(model_dir, "trainer"),
                                  newest_checkpoint=newest)
        if run is not None:
            found.append(run)
    return sorted(found, key=lambda r: r.started)


def find(run_id: str, dirs: Iterable[str]) -> dict:
    """A run's record from the first of ``dirs`` that holds it."""
    dirs = list(dirs)
    for d in dirs:
        model_dir = ModelDir(d)
        if run_id in model_dir.run_ids():
            return model_dir.load_run(run_id)
    raise UsageError(f"run {run_id}: not recorded in {', '.join(dirs)} (showtell runs DIR lists them)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from showtell.api.transport import add_client_arguments

    p.add_argument("words", nargs="*", metavar="[show RUN | diff RUN_A RUN_B] MODEL_DIR",
                   help="model dirs to read (after `show RUN` or `diff RUN_A RUN_B`); none with --server")
    p.add_argument("--server", metavar="HOST:PORT",
                   help="ask the evaluator at HOST:PORT (ListRuns, GetRun) instead of reading model dirs")
    p.add_argument("--history", type=Path,
                   help="an evaluator's history (<work-dir>/evaluations.sqlite): best value and time "
                        "to target")
    p.add_argument("--metric", default="exact_match:max", metavar="METRIC:max|min",
                   help="the metric whose best value is shown (default exact_match:max; with --server "
                        "the metric's own direction)")
    p.add_argument("--target", default="exact_match=0.5", metavar="METRIC=X",
                   help="the training time until METRIC first reached X (default exact_match=0.5; "
                        "for a metric where lower is better, until it fell to X)")
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    p.add_argument("--timeout", type=positive_float, default=10.0, help="--server: seconds per call")
    add_client_arguments(p)
    add_verbose_flag(p)


def run(args: argparse.Namespace) -> int:
    start_command(args)
    return run_command(PROG, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    words = list(args.words)
    verb = words[0] if words and words[0] in ("show", "diff") else None
    wanted = {"show": 2, "diff": 3}.get(verb or "", 0)  # words before the model dirs
    if args.server is not None:
        if len(words) != wanted:
            raise UsageError("with --server, no model dirs: showtell runs [show RUN_ID | diff RUN_A RUN_B] "
                             "--server HOST:PORT")
        return _ask(args, verb, words[1:])
    if len(words) <= wanted:
        raise UsageError({"show": "usage: showtell runs show RUN_ID MODEL_DIR [MODEL_DIR ...]",
                          "diff": "usage: showtell runs diff RUN_A RUN_B MODEL_DIR [MODEL_DIR ...]"}.get(
            verb or "", "usage: showtell runs MODEL_DIR [MODEL_DIR ...], or --server HOST:PORT"))
    dirs = words[wanted:]
    if verb == "show":
        print(json.dumps(find(words[1], dirs), indent=2))
        return 0
    if verb == "diff":
        for line in diff(find(words[1], dirs), find(words[2], dirs)):
            print(line)
        return 0
    runs = [r for d in dirs for r in runs_in(Path(d))]
    if args.history is not None:
        _score(runs, args.history, args.metric, args.target)
    _print(runs, args)
    return 0


def _ask(args: argparse.Namespace, verb: str | None, run_ids: list[str]) -> int:
    """The same answers from an evaluator over gRPC (its model dir and history)."""
    import grpc

    from showtell.api.client import MetricsClient
    from showtell.api.replies import explain
    from showtell.api.transport import ClientSecurity

    security = ClientSecurity.from_args(args)
    with MetricsClient(args.server, security=security, timeout=args.timeout) as client:
        try:
            if verb == "show":
                print(json.dumps(client.run_record(run_ids[0])[1], indent=2))
            elif verb == "diff":
                for line in diff(client.run_record(run_ids[0])[1], client.run_record(run_ids[1])[1]):
                    print(line)
                print(_best_compared(client, run_ids, args.metric.partition(":")[0]))
            else:
                metric = args.metric.partition(":")[0]
                target_metric, target = _target(args.target)
                if target_metric != metric:
                    raise UsageError(f"--target {args.target}: with --server, the target is on --metric "
                                     f"({metric}); e.g. --target {metric}=0.5")
                where = client.status().checkpoint_dir
                _print([from_summary(s, where) for s in client.runs(metric, target)], args)
        except grpc.RpcError as error:
            raise explain(error, args.server, security, usage=(grpc.StatusCode.NOT_FOUND,)) from error
    return 0


def _best_compared(client, run_ids: list[str], metric: str) -> str:
    """The two runs' best evaluations by ``metric`` compared on the same images (paired
    bootstrap), or the one line saying why they cannot be.  Two evaluations of different images
    (another set, another size) are refused (``UsageError``, exit 2): that comparison would
    mislead, where a run with nothing to compare merely has no answer."""
    import grpc

    from showtell.api.replies import format_comparison
    from showtell.v1 import metrics_pb2 as pb

    a, b = (pb.EvaluationRef(run_id=run, best=metric) for run in run_ids)
    try:
        return f"best by {metric}, compared:\n" + format_comparison(client.compare(a, b))
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.INVALID_ARGUMENT:
            raise
        if "were not the same images" in error.details():
            raise UsageError(f"best by {metric}: not compared ({error.details()})") from None
        return f"best by {metric}: not compared ({error.details()})"


def from_summary(s, model_dir: str) -> Run:
    """A ``ListRuns`` row as ``showtell runs`` shows a model dir's."""
    started = (s.started.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%S%z")
               if s.HasField("started") else "")
    return Run(s.run_id, model_dir, started, s.step or s.latest_step, s.steps or None,
               s.status or "not recorded in the model dir",
               best=s.best_value if s.HasField("best_value") else None,
               best_step=s.best_step if s.HasField("best_value") else None,
               target_seconds=s.time_to_target.ToTimedelta().total_seconds()
               if s.HasField("time_to_target") else None,
               target_step=s.target_step or None)


def _print(runs: list[Run], args: argparse.Namespace) -> None:
    if args.json:
        for r in runs:
            print(json.dumps(asdict(r)))
    else:
        sys.stdout.write(table(runs, args.metric, args.target))


def _target(spec: str) -> tuple[str, float]:
    metric, _, value = spec.partition("=")
    try:
        return metric, float(value)
    except ValueError:
        raise UsageError(f"--target {spec}: expected METRIC=X, e.g. exact_match=0.5") from None


def _score(runs: list[Run], history: Path, metric_spec: str, target_spec: str) -> None:
    """Best value and time to target, from an evaluator's history."""
    try:
        from showtell.evaluator.records.store import Store
    except ModuleNotFoundError as exc:
        raise ShowtellError(f"--history needs the evaluator's modules ({exc.name} is not installed: "
                            "this is the client alone); ask the evaluator instead: showtell runs --server "
                            "HOST:PORT") from exc

    if not history.is_file():
        raise UsageError(f"--history {history}: no such file (an evaluator's "
                         "<work-dir>/evaluations.sqlite)")
    metric, _, mode = metric_spec.partition(":")
    target_metric, target = _target(target_spec)
    lower = not registry.higher_is_better(target_metric)
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


def table(runs: list[Run], metric: str, target: str | None) -> str:
    """The runs as aligned columns; ``target`` None: no time-to-target column."""
    rows = [["RUN", "STARTED", "STEP", "STATUS", f"BEST {metric}",
             *([f"TIME TO {target}"] if target else []), "MODEL DIR"]]
    for r in runs:
        best = "-" if r.best is None else f"{r.best:.4f} (step {r.best_step})"
        reached = "-" if r.target_step is None else (
            f"step {r.target_step}" if r.target_seconds is None else
            f"{_clock(r.target_seconds)} (step {r.target_step})")
        rows.append([r.run_id, r.started, f"{r.step}/{r.steps}", r.status, best,
                     *([reached] if target else []), r.model_dir])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
                   for row in rows)


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


def main(argv: list[str] | None = None) -> int:
    from showtell.common.flags import Parser

    parser = Parser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
