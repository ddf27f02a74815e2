"""The demo's settings: what its trainers and evaluator are started with, its second evaluation
set, and how its seconds are split between the phases (``--phases``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from showtell.captioning.config import SyntheticConfig
from showtell.common.flags import flag_type

ENCODER_FILE = "encoder.weights.h5"
# The decoder's settings on the synthetic default: Adam, constant rate, little dropout (a small
# dataset whose every caption is true).  The phases add what differs between them.
TRAIN_FLAGS = ["--batch-size", "32", "--optimizer", "adam", "--learning-rate", "0.001",
               "--epochs-per-decay", "0", "--lstm-dropout", "0.1", "--image-dropout", "0",
               "--save-every-secs", "30", "--log-every-steps", "50"]
PHASE2_FLAGS = ["--train-inception", "true", "--learning-rate", "0.0003",
                "--inception-learning-rate", "0.0001"]


def evaluator_args(model: Path, data: Path, work: Path, *, port: int, examples: int,
                   threads: int, unseen: Path | None = None) -> list[str]:
    """The demo's evaluator (``bench/demo_overhead.py`` measures what it costs the trainer);
    ``unseen``: scenes of another seed, evaluated as a second set (``UNSEEN``)."""
    return ["evaluate", "--model-dir", str(model), "--data", str(data), "--work-dir", str(work),
            "--port", str(port), "--policy", "latest", "--meteor", "false",
            "--max-eval-examples", str(examples), "--beam-size", "1", "--threads", str(threads),
            *(["--eval-set", f"{UNSEEN}={unseen}"] if unseen is not None else [])]


UNSEEN = "unseen"  # the second evaluation set: scenes drawn with another seed than the training data's
UNSEEN_SEED = SyntheticConfig().seed + 1


@dataclass(frozen=True)
class Phases:
    """How the demo's seconds are split: pretraining the encoder, phase 1, phase 2."""

    pretrain: float
    phase1: float
    phase2: float

    def __str__(self) -> str:
        """The flag's own text (``--print-config`` prints it, ``--phases`` reads it back)."""
        return f"{self.pretrain:g},{self.phase1:g},{self.phase2:g}"

    def seconds(self, total: float) -> tuple[float, float, float]:
        whole = self.pretrain + self.phase1 + self.phase2
        return tuple(total * part / whole for part in (self.pretrain, self.phase1, self.phase2))


@flag_type("phase split")
def phases(text: str) -> Phases:
    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) != 3 or min(parts) < 0 or parts[1] <= 0:
        raise argparse.ArgumentTypeError(
            f"expected PRETRAIN,PHASE1,PHASE2 shares such as 0.4,0.5,0.1 (phase 1 > 0; got '{text}')")
    return Phases(*parts)


# Measured (BENCHMARKS.md): what limits the captions is whether the encoder has learnt the shapes'
# kinds, so pretraining gets most of the time — and, with --preview, phase 1 shows evaluations
# from the first minutes on an early encoder while pretraining goes on.  Phase 2 at the end
# measured no better than more phase 1 in ten minutes; `--phases 0.6,0.3,0.1` runs it.
DEFAULT_PHASES = "0.7,0.3,0"
