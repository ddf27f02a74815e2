"""The trainer's own configuration: optimizer and schedule, how long and how often, and how the
steps compute.  Defaults follow im2txt; a field written with ``option(…)`` is also a
``showtell train`` flag, as in ``showtell.captioning.config`` (the settings both services share)."""

from __future__ import annotations

from dataclasses import dataclass

from showtell.common.options import (
    PRECISIONS,
    boolean,
    non_negative_float,
    option,
    or_auto,
    positive_float,
    positive_int,
    seconds_or_never,
)

OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclass(frozen=True)
class OptimizerConfig:
    """im2txt's training schedule: SGD 2.0, halved every 8 epochs, global-norm clip 5.0."""

    name: str = option("sgd", "sgd (im2txt), momentum or adam", flag="--optimizer", choices=OPTIMIZERS,
                       shown=True)
    learning_rate: float = option(2.0, "initial rate (im2txt's SGD rate)", type=positive_float,
                                 shown=True)
    decay_factor: float = option(0.5, "multiply the rate by this every --epochs-per-decay",
                                 type=positive_float)
    epochs_per_decay: float = option(8.0, "0 keeps the rate constant", type=non_negative_float)
    clip_gradients: float = option(5.0, "global-norm clip, 0 disables", type=non_negative_float)
    # None: IM2TXT_INCEPTION_LEARNING_RATE for a pretrained encoder; from scratch the encoder
    # follows the decoder's schedule.
    inception_learning_rate: float | None = option(
        None, "the encoder's constant rate while it trains (default 0.0005, im2txt's, when pretrained; "
              "from scratch it follows --learning-rate; auto: that default)", type=or_auto(positive_float))

    @property
    def decays(self) -> bool:
        """Whether the rate decays (else it is constant: a variable a checkpoint restores)."""
        return bool(self.decay_factor) and self.decay_factor != 1.0 and bool(self.epochs_per_decay)

    def describe_rate(self) -> str:
        """The schedule in words, for the start-up log."""
        if self.decays:
            return f"{self.learning_rate:g} × {self.decay_factor:g} every {self.epochs_per_decay:g} epochs"
        return f"{self.learning_rate:g} (constant)"


IM2TXT_INCEPTION_LEARNING_RATE = 0.0005


@dataclass(frozen=True)
class TrainConfig:
    """How long to train and when to checkpoint and log."""

    steps: int = option(1_000_000, "train until the global step reaches this total", type=positive_int,
                        shown=True)
    max_seconds: float | None = option(None, "stop (and save) after this many seconds", type=positive_float)
    save_every_secs: float | None = option(600.0, "checkpoint every S seconds, 0 disables",
                                           type=seconds_or_never, shown=True)
    save_every_steps: int | None = option(None, "checkpoint every K steps", type=positive_int,
                                          shown=True)
    first_save_secs: float | None = option(None, "also the first checkpoint this many seconds into the run, "
                                           "then on the schedule: an evaluator reports early",
                                           type=positive_float)
    keep: int = option(5, "checkpoints kept on disk", type=positive_int, shown=True)
    log_every_steps: int = option(100, "log and write scalar summaries every K steps", type=positive_int)
    histogram_every_steps: int = option(1000, "weight histograms every K steps", type=positive_int)
    seed: int = option(0, "initialisation and input-order seed", type=int, shown=True)


# ``--steps-per-loop auto``, measured in bench/steps_per_loop.py (BENCHMARKS.md, "The trainer"):
# phase 1's steps on cached features gain from 10 per call with a small model (1.19×), not at
# im2txt's size (1.00×, never slower at the median); phase 2's long steps do not (1.01×), so they
# keep one step a call — and with it the input-wait figure and a SIGTERM honoured after one step.
PHASE1_STEPS_PER_LOOP = 10


@dataclass(frozen=True)
class ComputeConfig:
    """How the steps compute: mixed precision, XLA and steps per traced call (GPU speed levers).

    Not part of the model: variables, logits and the loss stay float32, so a checkpoint
    written in one mode restores into any other, and the evaluator reads it as always.
    """

    mixed_precision: str = option("off", "compute in bfloat16 (bf16: A100/H100, TPUs, AVX512-BF16 CPUs) or "
                                         "float16 with dynamic loss scaling (fp16: V100, T4); variables, "
                                         "logits and loss stay float32", choices=tuple(PRECISIONS))
    jit_compile: bool = option(False, "compile each replica's forward and backward pass with XLA",
                               type=boolean)
    steps_per_loop: int | None = option(
        None, "run up to N steps inside one traced loop (Keras' steps_per_execution); 1 also times the "
              f"wait for input; saves, logs and stops still land on exact steps; auto: "
              f"{PHASE1_STEPS_PER_LOOP} on the phase-1 feature cache, else 1 (default auto)",
        type=or_auto(positive_int))

    def loop_steps(self, on_cache: bool) -> int:
        """``--steps-per-loop``, ``auto`` resolved for the phase."""
        return self.steps_per_loop or (PHASE1_STEPS_PER_LOOP if on_cache else 1)
