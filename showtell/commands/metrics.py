"""``showtell metrics {latest,list,best,watch,status,runs,compare,health} --server HOST:PORT [--json]``.

``compare A B`` puts two evaluations of the same images side by side: each metric's B − A with
its paired-bootstrap interval and p-value, computed by the evaluator from what it kept per image.

``watch`` follows the evaluator across its restarts (reconnects with backoff, resumes after
the last step it printed); ``status`` prints a short summary for a person.

A thin command over ``showtell.api.client.MetricsClient`` (``showtell.v1.MetricsService``).
Unreachable servers, ``NOT_FOUND`` and deadlines become one-line messages and a non-zero exit;
``--json`` prints protobuf's JSON mapping with the proto field names (``global_step``,
``metrics``, …), one object per line.
``health`` asks ``grpc.health.v1`` (open without a token) and exits 0 only when SERVING —
the evaluator image's ``HEALTHCHECK``.  TLS and the bearer token: ``showtell.api.transport``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from datetime import datetime

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from showtell import metrics as registry
from showtell.api.client import MetricsClient, evaluation_ref
from showtell.api.contract import ALL_RUNS, DEFAULT_SET, describe_costs
from showtell.api.replies import explain, format_comparison
from showtell.api.transport import ClientSecurity, add_client_arguments
from showtell.common.errors import UsageError
from showtell.common.flags import Parser, open_fraction, positive_float, positive_int, run_command
from showtell.common.intervals import with_interval
from showtell.common.logs import setup_logging
from showtell.v1 import metrics_pb2 as pb

PROG = "showtell metrics"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", choices=("latest", "list", "best", "watch", "status", "runs", "compare",
                                     "health"))
    p.add_argument("refs", nargs="*", metavar="A B",
                   help="compare: two evaluations, each STEP, RUN:STEP, best or RUN:best (best by --metric)")
    p.add_argument("--server", default=os.environ.get("SHOWTELL_SERVER") or "127.0.0.1:50051",
                   help="evaluator HOST:PORT (env SHOWTELL_SERVER; default 127.0.0.1:50051)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--timeout", type=positive_float, default=10.0, help="seconds per call (not watch)")
    p.add_argument("--metric", default="cider", choices=registry.names(), metavar="METRIC",
                   help=f"best, compare's best: which metric, one of {', '.join(registry.names())} "
                        "(default cider)")
    p.add_argument("--bootstrap", type=positive_int, metavar="N",
                   help="compare: resamples (default: the evaluator's --bootstrap)")
    p.add_argument("--confidence", type=open_fraction, metavar="P",
                   help="compare: the intervals' confidence (default: the evaluator's --confidence)")
    p.add_argument("--mode", choices=("max", "min"), help="best: direction (default: by metric)")
    p.add_argument("--from-step", type=int, default=0, help="list: first step")
    p.add_argument("--page-size", type=positive_int, default=100, help="list: evaluations per call")
    p.add_argument("--after-step", type=int, default=-1, help="watch: replay evaluations after this step")
    p.add_argument("--eval-set", default="", metavar="NAME",
                   help="latest/list/best/watch/compare: an evaluation set of the evaluator's (default val, "
                        "--data's; list: '*' for every set; names in `status`)")
    p.add_argument("--run", default="", metavar="ID|all",
                   help="latest/list/best/watch: a training run's evaluations (default: the model dir's "
                        "current run; 'all': every run; ids in `status` and `list --run all --json`)")
    add_client_arguments(p)


def _emit(message, as_json: bool) -> None:
    if as_json:
        text = json_format.MessageToJson(message, preserving_proto_field_name=True, indent=None,
                                         always_print_fields_with_no_presence=True)
        sys.stdout.write(text + "\n")
    elif isinstance(message, pb.Evaluation):
        sys.stdout.write(format_evaluation(message) + "\n")
    else:
        sys.stdout.write(str(message))
    sys.stdout.flush()


def format_evaluation(e: pb.Evaluation) -> str:
    when = datetime.fromtimestamp(e.evaluated_at.ToSeconds()).strftime("%H:%M:%S")
    status = pb.Evaluation.Status.Name(e.status).removeprefix("STATUS_").lower()
    where = f" {e.eval_set}" if e.eval_set not in ("", DEFAULT_SET) else ""
    if e.status != pb.Evaluation.STATUS_OK:
        return f"step {e.global_step:>7}{where}  {status}: {e.reason}"
    metrics = "  ".join(f"{k} {with_interval(v, _bounds(e, k))}" for k, v in sorted(e.metrics.items()))
    scoring = f"; tokenizer={e.scoring.tokenizer} scorers={','.join(e.scoring.scorers)}" \
        if e.HasField("scoring") else ""
    trained = f", after {_duration(e.train_time.ToTimedelta().total_seconds())} of training" \
        if e.HasField("train_time") else ""
    return (f"step {e.global_step:>7}{where}  {metrics}  ({e.num_examples} examples, "
            f"{e.eval_duration.ToTimedelta().total_seconds():.1f} s, {when}{trained}{scoring})")


def _bounds(e: pb.Evaluation, metric: str) -> tuple[float, float] | None:
    return (e.intervals[metric].lower, e.intervals[metric].upper) if metric in e.intervals else None


def _compare_refs(args: argparse.Namespace) -> tuple[pb.EvaluationRef, pb.EvaluationRef]:
    if len(args.refs) != 2:
        raise UsageError(f"compare takes two evaluations, A and B (got {len(args.refs)}): e.g. "
                         "`showtell metrics compare 800 1200` or `compare RUN_A:best RUN_B:best`")
    try:
        return (evaluation_ref(args.refs[0], args.metric, args.eval_set),
                evaluation_ref(args.refs[1], args.metric, args.eval_set))
    except ValueError as exc:
        raise UsageError(f"compare: {exc}") from None


def query(args: argparse.Namespace) -> int:
    security = ClientSecurity.from_args(args)
    with MetricsClient(args.server, security=security, timeout=args.timeout) as client:
        try:
            if args.query == "health":
                return health(client.channel, args.timeout)
            run = ALL_RUNS if args.run == "all" else args.run
            if args.refs and args.query != "compare":
                raise UsageError(f"{args.query} takes no positional arguments (got {' '.join(args.refs)})")
            if args.query == "compare":
                a, b = _compare_refs(args)
                reply = client.compare(a, b, samples=args.bootstrap or 0, confidence=args.confidence or 0.0)
                _emit(reply, True) if args.json else sys.stdout.write(format_comparison(reply) + "\n")
            elif args.query == "latest":
                _emit(client.latest(run, args.eval_set), args.json)
            elif args.query == "status":
                reply = client.status()
                if args.json:
                    _emit(reply, True)
                else:
                    sys.stdout.write(format_status(reply) + "\n")
            elif args.query == "best":
                _emit(client.best(args.metric, mode=args.mode, run_id=run, eval_set=args.eval_set), args.json)
            elif args.query == "runs":  # the evaluator's runs (showtell runs --server has more)
                from showtell.commands.runs import from_summary, table

                rows = client.runs(args.metric)
                if args.json:
                    for summary in rows:
                        _emit(summary, True)
                else:
                    where = client.status().checkpoint_dir
                    sys.stdout.write(table([from_summary(r, where) for r in rows], args.metric, None))
            elif args.query == "list":
                for evaluation in client.evaluations(from_step=args.from_step, page_size=args.page_size,
                                                     run_id=run, eval_set=args.eval_set):
                    _emit(evaluation, args.json)
            else:
                watch(args, client)
        except grpc.RpcError as error:
            raise explain(error, args.server, security) from error
    return 0


def watch(args: argparse.Namespace, client: MetricsClient) -> None:
    """Print each evaluation once, across evaluator restarts (reconnects with backoff)."""

    def on_retry(error: grpc.RpcError, wait: float) -> None:
        sys.stderr.write(f"{PROG}: {args.server} went away ({error.code().name.lower()}); "
                         f"reconnecting in {wait:.0f} s\n")

    follower = client.watch(after_step=args.after_step, on_retry=on_retry, eval_set=args.eval_set)
    if args.run and args.run != "all":
        follower.last_run = args.run
    # SIGTERM (a supervisor, or `kill`): end the stream and exit 0.  Ctrl-C stays Python's
    # KeyboardInterrupt (exit 130) — where the shell has not made this a background job that
    # ignores SIGINT; SIGTERM stops it either way.
    signal.signal(signal.SIGTERM, lambda signum, frame: follower.close())
    for evaluation in follower:
        _emit(evaluation, args.json)


def format_status(s: pb.EvaluatorStatus) -> str:
    """A few lines for a person; ``--json`` has every field."""
    up = int(s.uptime.ToTimedelta().total_seconds())
    uptime = f"{up // 3600}h{up // 60 % 60:02d}m"
    doing = f"evaluating step {s.evaluating_step}" if s.evaluating_step >= 0 else "idle"
    if s.evaluating_step >= 0 and s.images_total:
        doing += f" ({s.images_done} of {s.images_total} images" + (
            f", about {_duration(s.time_left.ToTimedelta().total_seconds())} left)"
            if s.HasField("time_left") else ")")
    lines = [
        f"evaluator of {s.checkpoint_dir}  (policy {s.policy}, {s.observer}, up {uptime})",
        f"  {doing}; newest checkpoint seen: "
        + (f"step {s.last_seen_step}" if s.last_seen_step >= 0 else "none yet"),
        f"  {s.evaluations} evaluation(s) recorded, {s.failures} failed or skipped; "
        f"current run {s.run_id or '(from before run ids)'} ({s.runs} run(s) in the history)",
    ]
    if len(s.eval_sets) > 1:
        lines.append(f"  evaluation sets: {', '.join(s.eval_sets)}")
    if s.HasField("last_costs"):
        c = s.last_costs
        lines.append("  last evaluation: " + describe_costs(c.features, c.images_reused, c.images_computed,
                                                           dict(c.seconds)))
    if s.pending_steps:
        shown = ", ".join(str(step) for step in s.pending_steps[:10])
        lines.append(f"  pending: {shown}{' …' if len(s.pending_steps) > 10 else ''}")
    if s.parts > 1:
        waiting = [f"step {w.step} (part{'s' if len(w.missing_parts) > 1 else ''} "
                   f"{', '.join(f'{i}/{s.parts}' for i in w.missing_parts) or 'unreadable'})"
                   for w in s.waiting_for_parts]
        lines.append(f"  split into {s.parts} parts; waiting for parts: "
                     + (", ".join(waiting[:10]) + (" …" if len(waiting) > 10 else "") if waiting else "none"))
    if s.HasField("best_export"):
        b = s.best_export
        rule = f"{b.metric}:{'max' if b.maximize else 'min'}"
        lines.append(f"  best export: {rule} step {b.step} ({b.value:.6g}) -> {b.path}" if b.path
                     else f"  best export: {rule}, none yet")
    if s.HasField("tracking"):
        t = s.tracking
        lines.append(f"  tracking: {t.tracker}: " + (
            "every evaluation sent" if not t.backlog else f"{t.backlog} evaluation(s) waiting to be sent"
            + (f" ({t.last_error})" if t.last_error else "")))
    if s.last_error:
        lines.append(f"  last error: {s.last_error}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def health(channel: grpc.Channel, timeout: float) -> int:
    """Print the serving status; 0 only when SERVING."""
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    sys.stdout.write(status + "\n")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


def run(args: argparse.Namespace) -> int:
    setup_logging()

    def body() -> int:
        try:
            return query(args)
        except KeyboardInterrupt:
            return 130

    return run_command(PROG, body)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description="Query an evaluator's metrics over gRPC.")
    add_arguments(parser)
    return run(parser.parse_args(argv))
