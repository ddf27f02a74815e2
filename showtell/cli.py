"""``showtell {data,pretrain,train,evaluate,metrics,caption,demo}`` — dispatch to each command's own module.

Subcommand modules are imported only when chosen, so ``showtell --help`` is instant and
the trainer and evaluator packages never import each other.
"""

from __future__ import annotations

import importlib
import os
import sys

# gRPC's C core reads this once, at import: without it a failed TLS handshake prints an
# INFO line from C++ beside our one-line error.  An explicit GRPC_VERBOSITY still wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from showtell.common.flags import Parser

COMMANDS = {
    "data": ("showtell.commands.data", "build a dataset: the synthetic default or MSCOCO"),
    "pretrain": ("showtell.commands.pretrain", "pretrain the encoder on the synthetic scenes' labels"),
    "train": ("showtell.trainer.cli", "train the model; checkpoints on a schedule"),
    "evaluate": ("showtell.evaluator.cli", "watch a model dir, evaluate each checkpoint, serve metrics"),
    "metrics": ("showtell.commands.metrics", "query an evaluator over gRPC"),
    "caption": ("showtell.commands.caption", "caption image files with a trained model or an export"),
    "demo": ("showtell.demo", "trainer + evaluator locally on the synthetic default, metrics live"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(prog="showtell", description="Show-and-Tell captioning: train / evaluate split.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    modules = {}
    name = argv[0] if argv and argv[0] in COMMANDS else None
    for command, (module_name, help_text) in COMMANDS.items():
        sp = sub.add_parser(command, help=help_text, prog=f"showtell {command}")
        sp.__class__ = Parser
        if command == name:  # only the chosen command's module is imported
            modules[command] = importlib.import_module(module_name)
            modules[command].add_arguments(sp)
    args = parser.parse_args(argv)
    return modules[args.command].run(args)
