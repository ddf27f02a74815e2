"""Step runners, in Orbit's ``StandardTrainer`` shape: ``train(num_steps)`` runs that many
global steps and returns what happened (``StepLogs``).  Nothing else — no schedule, no
checkpoint, no logging: that is the controller's and its actions'.

* ``SynchronousRunner``: one device, mirrored towers or multi-worker all-reduce — each step a
  ``strategy.run`` over one distributed global batch.
* ``ParameterServerRunner``: ``num_steps`` steps scheduled on whichever workers are free, then
  ``join``.  Workers that fail are dropped by the coordinator (their steps re-run elsewhere)
  and come back when they restart; a lost ps fails the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import tensorflow as tf

from showtell.captioning.config import InputConfig
from showtell.captioning.data import inputs
from showtell.trainer.loop.controller import StepLogs


class StepTask(Protocol):
    """What a runner uses of a task (``task.CaptionTask``): its strategy, steps and batch size."""

    strategy: tf.distribute.Strategy
    batch_size: int  # global examples a step
    input_config: InputConfig
    uses_cache: bool
    files: list[str]

    @property
    def step(self) -> int: ...

    def make_train_step(self, element_spec) -> Callable: ...

    def make_train_loop(self) -> Callable: ...

    def replica_step(self, batch: dict[str, tf.Tensor], dense: bool = False) -> tf.Tensor: ...


class SynchronousRunner:
    """Steps of a synchronous strategy (one device, mirrored, multi-worker).

    ``steps_per_loop`` 1: one traced step per Python call, each batch fetched in Python, so the
    time spent waiting for input is measured.  N > 1: up to N steps inside one traced
    ``tf.while_loop`` reading the distributed iterator in the graph (Orbit's ``StandardTrainer``
    with ``use_tf_while_loop``, Keras' ``steps_per_execution``): no Python between steps, and
    no input-wait figure.  Every call is marked in the profiler's trace with the global step it
    starts at (a no-op unless a profiler runs: ``ProfileSteps`` needs nothing from here)."""

    def __init__(self, *, task: StepTask, dataset: tf.data.Dataset, steps_per_loop: int = 1) -> None:
        """
        Args:
          task: what to train; its strategy runs the steps.
          dataset: the global batches (``task.dataset(cache)``).
          steps_per_loop: the most steps one call runs (the controller's chunks end on intervals).
        """
        self.task, self.strategy, self.steps_per_loop = task, task.strategy, steps_per_loop
        self.workers = 1
        self.multi_worker = isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        self.dist = self.strategy.experimental_distribute_dataset(dataset)
        self.iterator = iter(self.dist)  # what the next steps read (a bench may start a fresh one)
        if steps_per_loop == 1:
            self._step = task.make_train_step(self.dist.element_spec)
        else:
            self._loop = task.make_train_loop()
        self._agree_fn = None
        self._traced = False
        self._next_step = task.step + 1  # the global step the next call starts at (for the trace)
        # Images through the encoder in training steps, this process's share (none on the cache).
        local_replicas = (len(self.strategy.extended.worker_devices) if self.multi_worker
                          else self.strategy.num_replicas_in_sync)
        self._local_examples = task.input_config.batch_size * local_replicas
        self.encoder_images = 0

    def train(self, num_steps: int) -> StepLogs:
        logs = StepLogs(traced=not self._traced, input_measured=self.steps_per_loop == 1)
        # TensorBoard's trace viewer and step-time graph read these markers.
        with tf.profiler.experimental.Trace("train", step_num=self._next_step, _r=1):
            if self.steps_per_loop == 1:
                for _ in range(num_steps):
                    self._one_step(logs)
            else:
                started = time.perf_counter()
                losses = self._read_errors(self._loop, self.iterator, tf.constant(num_steps, tf.int32))
                logs.losses = [float(loss) for loss in losses.numpy()]
                logs.compute_seconds = time.perf_counter() - started
        logs.examples = num_steps * self.task.batch_size
        self._traced = True
        self._next_step += num_steps
        if not self.task.uses_cache:
            self.encoder_images += num_steps * self._local_examples
        return logs

    def _one_step(self, logs: StepLogs) -> None:
        t0 = time.perf_counter()
        batch = self._read_errors(next, self.iterator)
        t1 = time.perf_counter()
        logs.losses.append(float(self._step(batch)))
        logs.input_seconds += t1 - t0
        logs.compute_seconds += time.perf_counter() - t1

    def _read_errors(self, fn, *args):
        """``fn(*args)``; a corrupt record becomes a ``DataError`` naming its shard."""
        try:
            return fn(*args)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as exc:
            raise inputs.input_error(exc, self.task.files) from exc

    def agree(self, flags: list[bool]) -> list[bool]:
        """Multi-worker: every worker must stop and save at the same step (they run collectives
        in lock step), so a flag raised on any worker holds for all.  Elsewhere: as given."""
        if not self.multi_worker:
            return list(flags)
        if self._agree_fn is None:
            @tf.function(autograph=False)
            def agree(local: tf.Tensor) -> tf.Tensor:
                per_replica = self.strategy.run(lambda: tf.identity(local))
                return self.strategy.reduce("sum", per_replica, axis=None)

            self._agree_fn = agree
        total = self._agree_fn(tf.constant([float(f) for f in flags]))
        return [bool(v > 0) for v in total.numpy()]


class ParameterServerRunner:
    """Steps scheduled on the workers of a parameter-server cluster by its coordinator (the
    profiler, if on, traces the coordinator; the steps run on the workers)."""

    def __init__(self, *, task: StepTask, dataset_fn, coordinator, workers: int,
                 steps_per_loop: int) -> None:
        """
        Args:
          task: what to train; its variables live on the ps tasks.
          dataset_fn: builds a worker's pipeline (``task.dataset_factory(batch, cache)``).
          coordinator: the ``ClusterCoordinator`` that schedules steps on the workers.
          workers: how many worker tasks the cluster has (for the log).
          steps_per_loop: steps scheduled before each ``join`` (the controller's chunk).
        """
        self.task, self.coordinator = task, coordinator
        self.workers, self.steps_per_loop = workers, steps_per_loop
        per_worker = coordinator.create_per_worker_dataset(dataset_fn)
        self._iterator = iter(per_worker)
        strategy = task.strategy

        @tf.function(autograph=False)
        def worker_step(iterator):
            return strategy.run(task.replica_step, args=(next(iterator),))  # one replica

        self._worker_step = worker_step
        self._traced = False
        self.encoder_images = 0

    def train(self, num_steps: int) -> StepLogs:
        t0 = time.perf_counter()
        results = [self.coordinator.schedule(self._worker_step, args=(self._iterator,))
                   for _ in range(num_steps)]
        self.coordinator.join()
        logs = StepLogs(losses=[float(r.fetch()) for r in results], compute_seconds=time.perf_counter() - t0,
                        examples=num_steps * self.task.batch_size, traced=not self._traced)
        self._traced = True
        if not self.task.uses_cache:
            self.encoder_images += num_steps * self.task.batch_size
        return logs

    def agree(self, flags: list[bool]) -> list[bool]:
        return list(flags)  # one coordinator decides for the cluster
