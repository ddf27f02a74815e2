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
from dataclasses import dataclass, field

import tensorflow as tf

from showtell.captioning.data import inputs
from showtell.trainer.task import CaptionTask


@dataclass
class StepLogs:
    """What ``train(num_steps)`` did: one loss per step and where the time went."""

    losses: list[float] = field(default_factory=list)
    input_seconds: float = 0.0  # waiting for batches (synchronous runners only)
    compute_seconds: float = 0.0
    examples: int = 0  # global examples consumed
    traced: bool = False  # the first call: its time is graph tracing, not throughput

    @property
    def steps(self) -> int:
        return len(self.losses)


class SynchronousRunner:
    """Steps of a synchronous strategy (one device, mirrored, multi-worker)."""

    steps_per_loop = 1  # a signal, a due save or another worker's stop is honoured after each step
    profiling = False  # set by ProfileSteps: each step is marked in the trace with its number

    def __init__(self, *, task: CaptionTask) -> None:
        """
        Args:
          task: what to train; its strategy runs the steps.
        """
        self.task, self.strategy = task, task.strategy
        self.workers = 1
        self.multi_worker = isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        dist = self.strategy.experimental_distribute_dataset(task.dataset())
        self._step = task.make_train_step(dist.element_spec)
        self._batches = inputs.checked(dist, task.files)
        self._agree_fn = None
        self._traced = False
        # Images through the encoder in training steps, this process's share (none on the cache).
        local_replicas = (len(self.strategy.extended.worker_devices) if self.multi_worker
                          else self.strategy.num_replicas_in_sync)
        self._local_examples = task.input_config.batch_size * local_replicas
        self.encoder_images = 0

    def train(self, num_steps: int) -> StepLogs:
        logs = StepLogs(traced=not self._traced)
        for _ in range(num_steps):
            if self.profiling:  # TensorBoard's trace viewer and step-time graph read these markers
                with tf.profiler.experimental.Trace("train", step_num=self.task.step + 1, _r=1):
                    t0, t1, loss = self._one_step()
            else:
                t0, t1, loss = self._one_step()
            logs.losses.append(loss)
            logs.input_seconds += t1 - t0
            logs.compute_seconds += time.perf_counter() - t1
            logs.examples += self.task.batch_size
        self._traced = True
        if not self.task.uses_cache:
            self.encoder_images += num_steps * self._local_examples
        return logs

    def _one_step(self):
        t0 = time.perf_counter()
        batch = next(self._batches)
        t1 = time.perf_counter()
        return t0, t1, float(self._step(batch))

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
    """Steps scheduled on the workers of a parameter-server cluster by its coordinator."""

    profiling = False  # ProfileSteps traces the coordinator; the steps run on the workers

    def __init__(self, *, task: CaptionTask, coordinator, workers: int, steps_per_loop: int) -> None:
        """
        Args:
          task: what to train; its variables live on the ps tasks.
          coordinator: the ``ClusterCoordinator`` that schedules steps on the workers.
          workers: how many worker tasks the cluster has (for the log).
          steps_per_loop: steps scheduled before each ``join`` (the controller's chunk).
        """
        self.task, self.coordinator = task, coordinator
        self.workers, self.steps_per_loop = workers, steps_per_loop
        per_worker = coordinator.create_per_worker_dataset(task.dataset_factory(task.input_config.batch_size))
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
