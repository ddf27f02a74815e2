"""``showtell evaluate`` / ``python -m evaluator``.

For now the standalone mode only: ``--once`` evaluates one checkpoint (the newest, or
``--checkpoint PATH``) and prints its metrics (``--json`` for scripts).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from captioning.cli_util import Parser, positive_int, quiet_tensorflow, run_command, setup_logging

PROG = "showtell evaluate"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", type=Path, required=True, help="the trainer's model directory")
    p.add_argument("--data", type=Path, required=True, help="dataset directory (its val split is used)")
    p.add_argument("--once", action="store_true", required=True,
                   help="evaluate one checkpoint and exit (the watching service comes next)")
    p.add_argument("--checkpoint", help="checkpoint prefix to evaluate (default: the newest)")
    p.add_argument("--max-eval-examples", type=positive_int, help="cap on validation records/images")
    p.add_argument("--beam-size", type=positive_int, default=3)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    quiet_tensorflow()
    setup_logging()

    def body() -> int:
        from evaluator.once import evaluate_checkpoint

        result = evaluate_checkpoint(args.model_dir, args.data, args.checkpoint,
                                     args.max_eval_examples, args.beam_size)
        if args.json:
            sys.stdout.write(json.dumps(asdict(result)) + "\n")
            return 0
        metrics = "  ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
        sys.stdout.write(f"step {result.step}  {metrics}  ({result.examples} examples, "
                         f"{result.seconds:.1f} s)\n")
        for s in result.samples:
            sys.stdout.write(f"  {s['caption']!r}  refs: {' | '.join(s['references'])}\n")
        return 0

    return run_command(PROG, body)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description="Evaluate checkpoints of a showtell model dir.")
    add_arguments(parser)
    return run(parser.parse_args(argv))
