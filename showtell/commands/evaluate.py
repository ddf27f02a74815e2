"""``showtell evaluate`` (and ``python -m showtell.evaluator``): flags → ``EvaluatorConfig`` → the
evaluator's assembly (``evaluator/daemon.py``).

Default: the service — watch the model dir, evaluate each new checkpoint, keep the
history, serve metrics over gRPC — until SIGTERM/SIGINT.  ``--once`` evaluates one
checkpoint (the newest, or ``--checkpoint PATH``), prints its metrics and exits.  Both are built
from the one typed config ``config_from_args`` makes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from showtell.api.transport import ServerSecurity, add_server_arguments
from showtell.common.exposition import MonitoringConfig
from showtell.common.flags import (
    add_config_file_flag,
    add_config_flags,
    add_verbose_flag,
    config_from_flags,
    run_command,
    start_command,
)
from showtell.common.intervals import with_interval
from showtell.common.setting_sources import print_config
from showtell.common.tracking import TrackingConfig
from showtell.evaluator.config import (
    EvalSet,
    EvaluationConfig,
    EvaluatorConfig,
    ExportConfig,
    Finish,
    ServeConfig,
    ShardConfig,
    WatchConfig,
)
from showtell.evaluator.records.workdir import WorkDir

PROG = "showtell evaluate"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True,
                   help="the trainer's model directory: local or NFS; a tf.io.gfile URL (gs://…) is "
                        "polled, a path tested here only as file://")
    p.add_argument("--data", type=Path, required=True, help="dataset directory (its val split is used)")
    p.add_argument("--eval-set", action="append", type=_eval_set, default=[],
                   metavar="NAME=PATH[:EXAMPLES]",
                   help="also evaluate each checkpoint on this dataset's validation split (its first "
                        "EXAMPLES images), as a set of its own: its metrics, intervals, best and best export "
                        "(repeat for more; --data's split is the set named val)")
    p.add_argument("--work-dir", type=Path,
                   help="evaluator state: history, pins, summaries, kept features (default: "
                        "<model-dir>-eval; with --once: none, unless given — then its features are kept)")
    for config_cls in (ServeConfig, WatchConfig, EvaluationConfig, ExportConfig, MonitoringConfig):
        add_config_flags(p, config_cls)
    add_config_flags(p.add_argument_group("one evaluation split across evaluators"), ShardConfig)
    add_config_flags(p.add_argument_group("ending by itself (default: serve until SIGTERM)"), Finish)
    add_config_flags(p.add_argument_group(TrackingConfig.__doc__.splitlines()[0].rstrip(".")), TrackingConfig)
    add_server_arguments(p)
    p.add_argument("--once", action="store_true", help="evaluate one checkpoint, print, exit")
    p.add_argument("--checkpoint", help="with --once: checkpoint prefix to evaluate (default: the newest)")
    p.add_argument("--json", action="store_true", help="with --once: print one JSON object")
    add_config_file_flag(p)
    add_verbose_flag(p)


def config_from_args(args: argparse.Namespace) -> EvaluatorConfig:
    """The evaluator's configuration from its flags: the service's work dir defaults to
    ``<model-dir>-eval``; ``--once`` has one only when ``--work-dir`` names it."""
    model_dir = str(args.model_dir)
    work = WorkDir(args.work_dir) if args.work_dir else None if args.once else WorkDir.beside(model_dir)
    return EvaluatorConfig(
        model_dir=model_dir, data=args.data, work=work,
        evaluation=config_from_flags(EvaluationConfig, args), watch=config_from_flags(WatchConfig, args),
        serve=config_from_flags(ServeConfig, args), export=config_from_flags(ExportConfig, args),
        finish=config_from_flags(Finish, args), monitoring=config_from_flags(MonitoringConfig, args),
        eval_sets=tuple(args.eval_set), sharding=config_from_flags(ShardConfig, args),
        tracking=config_from_flags(TrackingConfig, args))


def argument_problem(args: argparse.Namespace) -> str | None:
    """Flag combinations argparse cannot see (one message; the CLI exits 2 with it)."""
    if args.once and (args.until_step is not None or args.max_evaluations or args.exit_when_trained):
        return ("--until-step, --max-evaluations and --exit-when-trained end the service; --once already "
                "evaluates one checkpoint")
    if not args.once and (args.checkpoint or args.json):
        return "--checkpoint and --json go with --once"
    problem = eval_set_problem(args.eval_set)
    if problem:
        return problem
    problem = shard_problem(args)
    if problem:
        return problem
    if args.once and args.max_eval_examples == "auto":
        return ("--max-eval-examples auto fits evaluations between the trainer's checkpoints; with --once "
                "pass a number of images or leave it out (all)")
    return None


def shard_problem(args: argparse.Namespace) -> str | None:
    """What ``--shard`` cannot go with (one line)."""
    one = args.shard
    if one is None or one.count == 1:
        return "--parts-dir goes with --shard I/N, N > 1" if args.parts_dir else None
    where = f"--shard {one}"
    if args.once:
        return f"{where} splits the service's evaluations; --once evaluates a whole checkpoint"
    if args.parts_dir is None:
        return f"{where} needs --parts-dir: a directory every part writes to, part 0 reads (shared storage)"
    if args.policy != "all":
        return (f"{where} needs --policy all: every part must evaluate the same checkpoints (with latest, a "
                "part that fell behind would skip to another one and no checkpoint would have every part)")
    if args.max_eval_examples == "auto":
        return f"{where}: --max-eval-examples auto sizes one evaluator's evaluations; give a number or all"
    if args.until_step is not None or args.max_evaluations:
        return (f"{where}: --until-step and --max-evaluations count one evaluator's evaluations; a split one "
                "ends with --exit-when-trained")
    return None


def _print_once(result, as_json: bool) -> None:
    """A line (or a JSON object) per evaluation set, and the sample captions."""
    for one in (result, *result.others):
        if as_json:
            fields = {k: v for k, v in asdict(one).items() if k not in ("stats", "others")}
            sys.stdout.write(json.dumps(fields) + "\n")
            continue
        metrics = "  ".join(f"{k} {with_interval(v, one.intervals.get(k))}" for k, v in one.metrics.items())
        sys.stdout.write(f"step {one.step} {one.eval_set}  {metrics}  ({one.examples} examples, "
                         f"{one.seconds:.1f} s; {one.scoring or 'no scorers'})\n")
        for s in one.samples:
            sys.stdout.write(f"  {s['caption']!r}  refs: {' | '.join(s['references'])}\n")


def eval_set_problem(sets: Sequence[EvalSet]) -> str | None:
    """What is wrong with ``--eval-set``s (one line), before anything starts: a name used twice
    or the default's, a path with no validation records."""
    from showtell.api.contract import DEFAULT_SET
    from showtell.captioning.data.dataset import evaluation_problem

    seen: set[str] = set()
    for spec in sets:
        where = f"--eval-set {spec.name}={spec.data}"
        if spec.name == DEFAULT_SET:
            return f"{where}: {DEFAULT_SET!r} is the name of --data's validation split; choose another name"
        if spec.name in seen:
            return f"{where}: the name {spec.name!r} is given twice; each set needs its own"
        seen.add(spec.name)
        problem = evaluation_problem(spec.data)
        if problem:
            return f"{where}: {problem}"
    return None


def _eval_set(text: str) -> EvalSet:
    try:
        return EvalSet.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--eval-set {text}: ")) from None


def run(args: argparse.Namespace) -> int:
    problem = argument_problem(args)
    if problem:
        sys.stderr.write(f"{PROG}: error: {problem} (see --help)\n")
        return 2
    if args.print_config:
        return print_config(PROG, args)
    start_command(args)
    config = config_from_args(args)

    def body() -> int:
        from showtell.evaluator import daemon

        if args.once:
            _print_once(daemon.evaluate_once(config, args.checkpoint), args.json)
            return 0
        security = ServerSecurity.from_args(args).load()  # bad flags/files: one line, before TensorFlow
        return daemon.run(config, security)

    return run_command(PROG, body)
