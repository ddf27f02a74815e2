"""``showtell evaluate`` / ``python -m showtell.evaluator``.

Default: the service — watch the model dir, evaluate each new checkpoint, keep the
history, serve metrics over gRPC — until SIGTERM/SIGINT.  ``--once`` evaluates one
checkpoint (the newest, or ``--checkpoint PATH``), prints its metrics and exits.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from showtell.api.transport import ServerSecurity, add_server_arguments, check_listen_address
from showtell.common.flags import (
    Parser,
    add_verbose_flag,
    boolean,
    non_negative_int,
    positive_float,
    positive_int,
    run_command,
    start_command,
)
from showtell.common.locks import DirectoryLock
from showtell.evaluator.workdir import WorkDir

PROG = "showtell evaluate"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True,
                   help="the trainer's model directory (local, NFS, or a tf.io.gfile URL such as gs://…)")
    p.add_argument("--data", type=Path, required=True, help="dataset directory (its val split is used)")
    p.add_argument("--work-dir", type=Path,
                   help="evaluator state: history, pins, summaries (default: <model-dir>-eval)")
    p.add_argument("--host", default="127.0.0.1", help="gRPC bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=50051, help="gRPC port, 0 picks a free one (default 50051)")
    p.add_argument("--health-port", type=int, metavar="PORT",
                   help="also serve grpc.health.v1 alone, in plaintext, on --host:PORT — for probes that "
                        "cannot do TLS (Kubernetes' gRPC probes) when --tls-cert is on (default: off)")
    p.add_argument("--policy", choices=("latest", "all"), default="latest",
                   help="latest: skip to the newest when behind; all: every checkpoint in order")
    p.add_argument("--poll-secs", type=positive_float,
                   help="poll the state file every S seconds instead of inotify (network filesystems)")
    p.add_argument("--arrival-timeout", type=positive_float, default=300.0, metavar="S",
                   help="how long a checkpoint the state file names may stay incomplete (a synced copy "
                        "still arriving) before it is recorded skipped (default 300)")
    p.add_argument("--max-eval-examples", type=positive_int,
                   help="evaluate the first N validation images (each with all its captions); default all")
    p.add_argument("--beam-size", type=positive_int, default=3)
    p.add_argument("--threads", type=positive_int, help="TensorFlow threads (share a host politely)")
    p.add_argument("--meteor", type=boolean, default=True, help="compute METEOR when java is present")
    p.add_argument("--tokenizer", choices=("auto", "ptb", "regex"), default="auto",
                   help="how captions are tokenized for scoring: ptb (COCO's PTBTokenizer, needs java; "
                        "scores comparable with published ones), regex, or auto: ptb when java is "
                        "present (default)")
    p.add_argument("--export-best", metavar="METRIC[:max|min]",
                   help="export each better evaluation's model as a SavedModel version "
                        "<work-dir>/export/best/<step>/, TensorFlow Serving's layout "
                        "(e.g. cider:max, loss:min)")
    p.add_argument("--export-keep", type=positive_int, default=3, metavar="K",
                   help="export versions kept, newest first (default 3)")
    p.add_argument("--max-streams", type=positive_int, default=10_000,
                   help="concurrent Watch streams served; more get RESOURCE_EXHAUSTED (default 10000)")
    end = p.add_argument_group("ending by itself (default: serve until SIGTERM)")
    end.add_argument("--until-step", type=non_negative_int, metavar="N",
                     help="exit 0 after evaluating a checkpoint at step N or later")
    end.add_argument("--max-evaluations", type=positive_int, metavar="K",
                     help="exit 0 after K evaluations by this process (skipped checkpoints do not count)")
    end.add_argument("--exit-when-trained", action="store_true",
                     help="exit 0 once the trainer has finished (--steps, --max-seconds or early stop; "
                          "not a SIGTERM or crash) and its final checkpoint is evaluated")
    add_server_arguments(p)
    p.add_argument("--once", action="store_true", help="evaluate one checkpoint, print, exit")
    p.add_argument("--checkpoint", help="with --once: checkpoint prefix to evaluate (default: the newest)")
    p.add_argument("--json", action="store_true", help="with --once: print one JSON object")
    add_verbose_flag(p)


def _limit_threads(threads: int | None) -> None:
    if threads:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def run_once(args: argparse.Namespace) -> int:
    from showtell.captioning.model.modeldir import latest_checkpoint
    from showtell.evaluator.evaluation import CheckpointEvaluator
    from showtell.evaluator.scorers import CaptionScorer

    scorer = CaptionScorer(meteor=args.meteor, tokenizer=args.tokenizer)
    try:
        evaluator = CheckpointEvaluator(args.model_dir, args.data, args.max_eval_examples,
                                        args.beam_size, scorer=scorer)
        result = evaluator.evaluate(args.checkpoint or latest_checkpoint(args.model_dir))
    finally:
        scorer.close()
    if args.json:
        sys.stdout.write(json.dumps(asdict(result)) + "\n")
        return 0
    metrics = "  ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
    sys.stdout.write(f"step {result.step}  {metrics}  ({result.examples} examples, {result.seconds:.1f} s; "
                     f"{result.scoring or 'no scorers'})\n")
    for s in result.samples:
        sys.stdout.write(f"  {s['caption']!r}  refs: {' | '.join(s['references'])}\n")
    return 0


def run(args: argparse.Namespace) -> int:
    start_command(args)

    def body() -> int:
        from showtell.evaluator.scorers import resolve_tokenizer

        resolve_tokenizer(args.tokenizer)  # --tokenizer ptb without Java: one line, before anything starts
        _limit_threads(args.threads)
        if args.once:
            if args.until_step is not None or args.max_evaluations or args.exit_when_trained:
                raise SystemExit(f"{PROG}: error: --until-step, --max-evaluations and --exit-when-trained "
                                 "end the service; --once already evaluates one checkpoint (see --help)")
            return run_once(args)
        if args.checkpoint or args.json:
            raise SystemExit(f"{PROG}: error: --checkpoint and --json go with --once (see --help)")
        security = ServerSecurity.from_args(args).load()  # bad flags/files: one line, before TensorFlow
        work = WorkDir(args.work_dir) if args.work_dir else WorkDir.beside(str(args.model_dir))
        # One evaluator per work dir (its history, exports): a second one is refused by name.
        with DirectoryLock(directory=work.root, role="evaluator", flag="--work-dir"):
            check_listen_address(args.host, args.port)
            if args.health_port is not None:
                check_listen_address(args.host, args.health_port, "--health-port")
            from showtell.evaluator.daemon import serve

            return serve(args, work, security)

    return run_command(PROG, body)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description="Evaluate checkpoints of a showtell model dir.")
    add_arguments(parser)
    return run(parser.parse_args(argv))
