"""Make a "pretrained" Inception v3 where no ImageNet weights can be downloaded.

Show and Tell starts from an encoder pretrained on classification; offline, the synthetic
dataset's generator knows every scene's labels (layout; each shape's colour, kind and size, in
reading order), so Inception v3 is trained to classify those on the **train split** (the last
tenth of it held out to report accuracy; no validation image is read) and saved as an ordinary
Keras ``.weights.h5`` file — the file ``showtell train --inception-weights`` loads like any
other.  The demo runs this first, then the two phases of the real recipe.

Pretraining resumes: beside the weights file, ``<name>.pretrain/`` keeps the whole classifier
(encoder and heads), Adam's state and the step, so a later run goes on where the last one ended —
two runs of N steps train like one of 2N (``--fresh`` starts over).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import keras
import tensorflow as tf

from showtell.captioning.config import PRETRAIN_PROGRESS, InputConfig, pretrain_progress, pretrain_state
from showtell.common.errors import ShowtellError
from showtell.common.files import sha256_of
from showtell.trainer.loop.checkpoints import SaveSchedule
from showtell.trainer.loop.controller import Controller, StepLogs
from showtell.trainer.loop.prometheus import TrainerFigures
from showtell.trainer.loop.signals import StopRequest
from showtell.trainer.pretraining.heads import (
    HELD_OUT,
    classifier,
    describe_accuracy,
    fit_dataset,
    held_out_accuracy,
    make_train_step,
    train_images,
)

log = logging.getLogger(__name__)
@dataclass(frozen=True)
class PretrainResult:
    steps: int  # the pretraining's steps in all, over every run that resumed it
    seconds: float  # this run's
    accuracy: dict[str, float]  # per head, held-out train images, inference mode (BN statistics)
    path: Path
    exit_code: int = 0  # 0: its --seconds/--steps ran out; 128 + the signal that stopped it first
    started_from: int = 0  # the step this run resumed at (0: a fresh start)
    loss: float = float("nan")  # the last step's (weighted sum over the heads)


def pretrain(*, data: Path, out: Path, seconds: float | None = None, steps: int | None = None,
             batch_size: int = 32, learning_rate: float = 1e-3, seed: int = 0,
             report_every_secs: float = 20.0, first_save_after: float | None = None,
             fresh: bool = False, figures: TrainerFigures | None = None) -> PretrainResult:
    """Train the encoder on ``data``'s scene labels for ``steps`` or ``seconds`` more, from where
    the last run left it (``pretrain_state(out)``) unless ``fresh``; write ``out``.

    The steps run on the trainer's loop (``controller.Controller``: one step a call, actions
    between, stops between steps): the progress line is an action, the first encoder a save.

    Args:
      data: a synthetic dataset directory (``showtell data synthetic``).
      out: the weights file to write (``*.weights.h5``); written whole or not at all.
      seconds: stop after this long (SIGTERM/SIGINT also stop early and still save).
      steps: stop after this many steps (of this run).
      batch_size: images per step.
      learning_rate: Adam's rate.
      seed: initialisation, order and augmentation seed.
      report_every_secs: log progress (step, images/s, held-out accuracy, time left) this often
        — a user watching the demo sees it move; 0: every step.
      first_save_after: also write ``out`` once this many seconds after the start, and go on —
        an early encoder that phase 1 can start from while pretraining continues (the demo's
        preview); the end writes it again.
      fresh: start from random weights even when a state from an earlier run is there.
      figures: the Prometheus figures to keep (``pretrain --prometheus-port``), as a trainer's.
    """
    if not out.name.endswith(".weights.h5"):
        raise ShowtellError(f"--out {out}: the file name must end in .weights.h5 (Keras' weights format)")
    if seconds is None and steps is None:
        raise ShowtellError("give --seconds or --steps: how long to pretrain")
    stop = StopRequest()
    stop.action = "ending pretraining and saving the encoder"
    stop.install()
    started = time.monotonic()
    try:
        return _pretrain(data, out, stop, Budget(seconds, steps, started), batch_size,
                         learning_rate, seed, report_every_secs, first_save_after, fresh, figures)
    finally:
        stop.restore()


@dataclass(frozen=True)
class Budget:
    """How long this run pretrains: ``steps`` more and/or ``seconds`` from ``started``."""

    seconds: float | None
    steps: int | None
    started: float  # time.monotonic() at the call

    def describe(self) -> str:
        if self.seconds is None:
            return f"{self.steps} steps"
        either = f"{self.steps} steps or " if self.steps is not None else ""
        return f"{either}{self.seconds:.0f} s"

    def left(self, now: float) -> str:
        return "" if self.seconds is None else f", {max(0.0, self.seconds - (now - self.started)):.0f} s left"


def _pretrain(data: Path, out: Path, stop: StopRequest, budget: Budget, batch_size: int,
              learning_rate: float, seed: int, report_every_secs: float, first_save_after: float | None,
              fresh: bool, figures: TrainerFigures | None) -> PretrainResult:
    keras.utils.set_random_seed(seed)
    images, labels = train_images(data)
    n_fit = round(len(images) * (1 - HELD_OUT))
    log.info("pretraining on %d train images (%d held out) for %s", n_fit, len(images) - n_fit,
             budget.describe())
    size, config = images.shape[1], InputConfig(seed=seed)
    encoder, model = classifier(size)
    optimizer = keras.optimizers.Adam(learning_rate)
    step_fn = make_train_step(model, optimizer)  # builds the optimizer's slots: restorable
    state = PretrainState(pretrain_state(out), model, optimizer)
    first = 0 if fresh else state.restore()

    def held_out() -> dict[str, float]:
        return held_out_accuracy(model, images[n_fit:], {h: v[n_fit:] for h, v in labels.items()}, size,
                                 config)

    # A resumed run takes up the batches where the last one left them: the same as one longer run.
    runner = PretrainRunner(step_fn, fit_dataset(images[:n_fit], {h: v[:n_fit] for h, v in labels.items()},
                                                 config, batch_size, skip_steps=first), first, batch_size)
    preview = EncoderPreview(encoder, out, state, runner)
    if figures is not None:
        figures.start(first, batch_size, "pretrain")
        preview.on_save = figures.saved
    remaining = None if first_save_after is None else max(1e-3, budget.started + first_save_after
                                                             - time.monotonic())
    controller = Controller(
        runner=runner, global_step=lambda: runner.step, checkpoints=preview,
        save_schedule=SaveSchedule(None, None, first_secs=remaining), stop=stop,
        actions=[TimeLimit(stop, budget),
                 PretrainProgress(held_out, report_every_secs, budget, batch_size, first),
                 *([figures] if figures is not None else [])])
    stopped_by = controller.train(first + budget.steps if budget.steps is not None else 2**62)
    if stop.final and preview.saved_step == runner.step:
        # The time limit fell on the first encoder's step (a slow machine's first step, tracing,
        # outlasted --seconds): one step more, so the final encoder a follower waits for
        # (``train --follow-encoder``) is newer weights, not the first one's bytes again.
        log.info("%s ended the pretraining on its first encoder's step %d: one more step, so the final "
                 "encoder is a newer one", stop.reason, runner.step)
        runner.train(1)
    step, elapsed = runner.step, time.monotonic() - budget.started
    accuracy = held_out()
    log.info("pretrained %d steps in %.0f s (loss %.3f; %d steps in all); held-out accuracy: %s",
             step - first, elapsed, runner.loss, step, describe_accuracy(accuracy))
    finished = stopped_by is None or stop.final
    state.save(step, accuracy)
    _save(encoder, out, "the pretrained encoder")
    state.encoder_written(step, out, final=finished)
    if figures is not None:
        figures(step)
    code = stop.exit_code(finished)
    if code:  # as the trainer says it: a scheduler must not read a preempted pretraining as done
        log.info("stopped after %d steps by %s before finishing: exit %d — not done; the encoder so far "
                 "is saved", step - first, stop.reason, code)
    return PretrainResult(steps=step, seconds=elapsed, accuracy=accuracy, path=out, exit_code=code,
                          started_from=first, loss=runner.loss)


class PretrainRunner:
    """The controller's runner for pretraining: one step a call on the fit batches, the global
    step counted here (the state saves it)."""

    steps_per_loop = 1

    def __init__(self, step_fn: Callable, batches: tf.data.Dataset, first: int, batch_size: int) -> None:
        self._step_fn, self._batches = step_fn, iter(batches)
        self.step, self.batch_size, self.loss = first, batch_size, float("nan")
        self._traced = False

    def train(self, num_steps: int) -> StepLogs:
        logs = StepLogs(traced=not self._traced)
        for _ in range(num_steps):
            waited = time.perf_counter()
            x, y = next(self._batches)
            computed = time.perf_counter()
            self.loss = float(self._step_fn(x, y))
            done = time.perf_counter()
            logs.input_seconds += computed - waited
            logs.compute_seconds += done - computed
            logs.losses.append(self.loss)
            self.step += 1
        logs.examples = num_steps * self.batch_size
        self._traced = True
        return logs

    def agree(self, flags: list[bool]) -> list[bool]:
        return flags  # one process: nothing to agree with


class TimeLimit:
    """The pretraining's ``--seconds``, counted from its start but set once its first step is done:
    a budget spent loading images and building the model (a slow machine's demo) still trains a
    step, so every run makes progress.  A signal stops it at once, as before."""

    def __init__(self, stop: StopRequest, budget: Budget) -> None:
        self.stop, self.budget, self.set = stop, budget, False

    def __call__(self, step: int, logs: StepLogs) -> None:
        if not self.set:
            self.stop.time_limit(self.budget.seconds, start=self.budget.started)
            self.set = True


class PretrainProgress:
    """The progress line, after the first step and then every ``every_secs`` (0: every step):
    step, time (and time left), loss, images/s, held-out accuracy."""

    def __init__(self, held_out: Callable[[], dict[str, float]], every_secs: float, budget: Budget,
                 batch_size: int, first: int) -> None:
        self.held_out, self.every, self.budget, self.batch_size = held_out, every_secs, budget, batch_size
        self.first, self.reported_step, self.reported = first, first, budget.started

    def __call__(self, step: int, logs: StepLogs) -> None:
        now = time.monotonic()
        if step != self.first + 1 and now - self.reported < self.every:
            return
        accuracy = self.held_out()
        log.info("pretrain step %d (%.0f s%s): loss %.3f, %.1f images/s; held-out accuracy %s", step,
                 now - self.budget.started, self.budget.left(now), logs.losses[-1],
                 (step - self.reported_step) * self.batch_size / max(now - self.reported, 1e-9),
                 describe_accuracy(accuracy))
        self.reported, self.reported_step = time.monotonic(), step


class EncoderPreview:
    """What the controller's save does in a pretraining: write the encoder so far — a first encoder
    that phase 1 can start from while pretraining goes on (``first_save_after``)."""

    def __init__(self, encoder: keras.Model, out: Path, state: PretrainState, runner: PretrainRunner) -> None:
        self.encoder, self.out, self.state, self.runner = encoder, out, state, runner
        self.on_save: Callable[[int, float], None] | None = None
        self.saved_step: int | None = None  # the step of the first encoder written, if one was

    def save(self) -> str:
        started, step = time.monotonic(), self.runner.step
        _save(self.encoder, self.out, f"a first encoder, after {step} steps (pretraining goes on)")
        self.state.encoder_written(step, self.out, final=False)
        self.saved_step = step
        if self.on_save is not None:
            self.on_save(step, time.monotonic() - started)
        return str(self.out)


class PretrainState:
    """The pretraining's state beside its weights file: the classifier (encoder and heads), Adam's
    slots and the step in a TensorFlow checkpoint, and in ``progress.json`` the held-out accuracy
    it reached (the demo says what the last run reached) and what the weights file holds (a first
    encoder or the final one: ``--if-missing`` and ``train --follow-encoder`` go by it)."""

    def __init__(self, directory: Path, model: keras.Model, optimizer: keras.Optimizer) -> None:
        self.directory = directory
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=self.step)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(directory), max_to_keep=1)

    def restore(self) -> int:
        """The step restored (0: nothing to resume)."""
        path = self.manager.latest_checkpoint
        if not path:
            return 0
        try:
            self.checkpoint.restore(path).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as exc:
            raise ShowtellError(f"{self.directory}: the pretraining state there does not fit this encoder "
                                f"and dataset ({str(exc).splitlines()[0][:200]}); pass --fresh to start "
                                "over (it is replaced), or another --out") from None
        step = int(self.step.numpy())
        before = self.progress()
        log.info("resuming pretraining at step %d from %s%s", step, self.directory,
                 f" (held-out accuracy then: {describe_accuracy(before['accuracy'])})" if before else "")
        return step

    def progress(self) -> dict | None:
        return pretrain_progress(self.directory)

    def save(self, step: int, accuracy: dict[str, float]) -> None:
        """Written whole or not at all (the manager's rename; the progress file's too)."""
        self.step.assign(step)
        try:
            self.manager.save(checkpoint_number=step)
        except (OSError, tf.errors.OpError) as exc:
            raise self._unwritable(exc) from exc
        self._write_progress(step=step, accuracy=accuracy)

    def encoder_written(self, step: int, out: Path, final: bool) -> None:
        """Say what the weights file now holds — the step's encoder, final or a first one — for
        those bytes only (their sha256): a reader never takes a file for what it is not."""
        self._write_progress(encoder={"step": step, "final": final, "sha256": sha256_of([out])})

    def _write_progress(self, **fields) -> None:
        progress = {**(self.progress() or {}), **fields}
        tmp = self.directory / f".{PRETRAIN_PROGRESS}.tmp-{os.getpid()}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(progress))
            os.replace(tmp, self.directory / PRETRAIN_PROGRESS)
        except OSError as exc:
            raise self._unwritable(exc) from exc

    def _unwritable(self, exc: Exception) -> ShowtellError:
        return ShowtellError(f"{self.directory}: cannot write the pretraining state ({exc}); free some space "
                             "or choose another --out")


def _save(encoder: keras.Model, out: Path, what: str) -> None:
    """Only the encoder (no heads), through a temporary sibling and a rename."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name[:-len('.weights.h5')]}.tmp-{os.getpid()}.weights.h5")
        try:
            encoder.save_weights(str(tmp))
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise ShowtellError(f"--out {out}: cannot write it ({exc.strerror or exc}); choose a writable "
                            "path with free space") from exc
    log.info("wrote %s to %s (load it with --inception-weights %s)", what, out, out)
