"""``showtell COMMAND`` — dispatch to each command's own module under ``showtell/commands/``
(``COMMANDS`` below lists them: data, pretrain, train, evaluate, metrics, runs, caption,
import-im2txt, demo).

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

from showtell.common.errors import NO_TENSORFLOW
from showtell.common.flags import Parser
from showtell.common.setting_sources import apply_config_file
from showtell.common.versions import installed_version

COMMANDS = {
    "data": ("showtell.commands.data", "build a dataset: the synthetic default or MSCOCO"),
    "pretrain": ("showtell.commands.pretrain", "pretrain the encoder on the synthetic scenes' labels"),
    "train": ("showtell.commands.train", "train the model; checkpoints on a schedule"),
    "evaluate": ("showtell.commands.evaluate", "watch a model dir, evaluate each checkpoint, serve metrics"),
    "metrics": ("showtell.commands.metrics", "query an evaluator over gRPC"),
    "runs": ("showtell.commands.runs", "the runs recorded in model dirs: status, best, time to a target"),
    "caption": ("showtell.commands.caption", "caption image files with a trained model or an export"),
    "import-im2txt": ("showtell.commands.import_im2txt",
                      "the published Show-and-Tell model (an im2txt checkpoint) as a showtell model dir"),
    "demo": ("showtell.commands.demo",
             "the recipe in miniature on synthetic data: pretraining, phase 1, evaluations live"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(prog="showtell", description="Show-and-Tell captioning: train / evaluate split.")
    parser.add_argument("--version", action="version", version=f"showtell {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    modules = {}
    name = argv[0] if argv and argv[0] in COMMANDS else None
    for command, (module_name, help_text) in COMMANDS.items():
        sp = sub.add_parser(command, help=help_text, prog=f"showtell {command}")
        sp.__class__ = Parser
        if command == name:  # only the chosen command's module is imported
            try:
                modules[command] = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                return _missing(command, exc)
            modules[command].add_arguments(sp)
            argv = [argv[0], *apply_config_file(sp, argv[1:])]  # --config files, environment, dotted keys
    args = parser.parse_args(argv)
    try:
        return modules[args.command].run(args)
    except ModuleNotFoundError as exc:  # commands import TensorFlow when they run
        return _missing(args.command, exc)


# What the services import beyond the client's grpcio and protobuf: the `services` extra, which
# `cpu` and `and-cuda` include (tests/test_packaging.py checks the list against pyproject.toml).
SERVICE_MODULES = {"keras": "keras", "h5py": "h5py", "tensorboard": "tensorboard", "numpy": "numpy",
                   "grpc_reflection": "grpcio-reflection", "watchdog": "watchdog", "tqdm": "tqdm",
                   "PIL": "pillow", "pycocoevalcap": "pycocoevalcap", "yaml": "pyyaml",
                   "prometheus_client": "prometheus-client"}


def _missing(command: str, exc: ModuleNotFoundError) -> int:
    """TensorFlow, or another of the services' dependencies, missing (a client-only install) →
    one line naming the extras; anything else is a bug: re-raise."""
    top = (exc.name or "").split(".")[0]
    if top == "tensorflow":
        message = NO_TENSORFLOW
    elif top in SERVICE_MODULES:
        message = (f"{SERVICE_MODULES[top]} is not installed (this is the metrics client alone): install "
                   "showtell with one of its service extras, pip install 'showtell[cpu]' (CPU) or "
                   "'showtell[and-cuda]' (NVIDIA GPUs)")
    else:
        raise exc
    print(f"showtell {command}: error: {message}", file=sys.stderr)
    return 1


def entry() -> None:
    """The ``showtell`` console script: ``main`` in a process of its own (``run_as_process``)."""
    from showtell.common.processes import run_as_process

    run_as_process(main)
