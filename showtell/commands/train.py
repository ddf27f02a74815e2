"""``showtell train`` (and ``python -m showtell.trainer``): flags → ``TrainExperiment`` →
``assembly.run``.

Every flag is an ``option`` of one of the experiment's sections (``trainer/experiment.py`` and the
config dataclasses), written once there with whether ``--help`` shows it; this module only makes
the parser, checks what argparse cannot, and hands the experiment on.
"""

from __future__ import annotations

import argparse
import sys

from showtell.common.errors import ShowtellError
from showtell.common.flags import (
    add_config_file_flag,
    add_config_flags,
    add_keys,
    hide_flags,
    run_command,
    start_command,
)
from showtell.common.setting_sources import settings_yaml
from showtell.trainer import assembly
from showtell.trainer.experiment import SECTIONS, TrainExperiment, from_flags, keys, settings

PROG = "showtell train"


def add_arguments(p: argparse.ArgumentParser) -> None:
    for name, section in SECTIONS.items():
        title = section.__doc__.splitlines()[0].rstrip(".")
        add_config_flags(p if name == "source" else p.add_argument_group(title), section)
    add_keys(p, keys(), sections="docs/cli.md lists them")
    add_config_file_flag(p, records=True, print_help=(
        "print the run's configuration as YAML --config reads back (every setting; and what it resolves "
        "to, when --data exists) and exit, training and writing nothing"))
    hide_flags(p)  # --help is one screen: the options marked shown


def run(args: argparse.Namespace) -> int:
    problem = argument_problem(args)
    if problem:
        sys.stderr.write(f"{PROG}: error: {problem} (see --help)\n")
        return 2
    start_command(args)
    exp = from_flags(vars(args))  # defaults, --config files, environment applied: args stop here
    if args.print_config:
        return run_command(PROG, lambda: _print_config(exp))
    code = run_command(PROG, lambda: assembly.run(exp))
    if code == assembly.RESTART and exp.follow.enabled:
        from showtell.trainer.following.follow import restart

        return restart()  # returns only if the exec failed
    return code


def _print_config(exp: TrainExperiment) -> int:
    """``--print-config``: the settings as YAML that ``--config`` reads back to the same settings;
    given a model dir and a dataset that exists, then what they resolve to (the phase, the
    strategy, the global batch, the steps per call) and the versions, as sections ``--config``
    passes over.  Nothing is written; neither is needed for the settings."""
    sys.stdout.write(settings_yaml(
        settings(exp), f"{PROG}: its settings (feed this file back: --config FILE); "
        "resolved and environment are what they came to, read by people, passed over by --config",
        assembly.resolved_sections(exp), keys()))
    return 0


def argument_problem(args: argparse.Namespace) -> str | None:
    """Flag combinations argparse cannot see."""
    missing = [flag for flag, value in (("--data", args.data), ("--model-dir", args.model_dir))
               if value is None]
    if missing and not args.print_config:
        return f"the following arguments are required: {', '.join(missing)}"
    if args.cache_variants > 1 and not args.augment:
        return "--cache-variants > 1 needs --augment true (the variants would be identical)"
    if args.stop_when and not args.evaluator:  # --evaluator alone is unused: compose always passes it
        return "--stop-when needs --evaluator HOST:PORT (the evaluator whose metrics it follows)"
    if args.stop_when:
        from showtell.trainer.following.early_stop import StopWhen

        try:
            StopWhen.parse(args.stop_when, args.patience)
        except ShowtellError as exc:
            return str(exc)
    return None
