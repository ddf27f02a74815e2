"""Where this process trains, decided once by the assembly as one ``Placement``: the cluster and
this task's place in it, the ``tf.distribute`` strategy and its devices — and the servers of a
cluster, which train nothing themselves.

* ``one_device``: one GPU (or the CPU).
* ``mirrored``: synchronous towers, one replica per device (``--devices`` or every visible GPU;
  ``--logical-cpus N`` splits the CPU so towers run, and are tested, without GPUs).
* ``multi_worker``: synchronous all-reduce across worker processes (``MultiWorkerMirroredStrategy``).
* ``parameter_server``: asynchronous PS training; variables live on the ps tasks, spread over
  them whole, round-robin, the chief coordinates and workers run the steps.  (A
  ``variable_partitioner`` would split large variables, but Keras 3 variables cannot be
  ``ShardedVariable``s: the first step fails with "'ShardedVariable' object has no attribute
  'handle'" — measured with TF 2.21 / Keras 3.15.)
* ``auto``: mirrored over GPUs when several are visible, one_device otherwise; with a cluster,
  parameter_server if it has ps tasks, else multi_worker.

Device setup (logical CPUs, soft placement) must happen before TensorFlow initialises its
runtime, so ``locate`` configures the devices first thing in the trainer process; ``place`` builds
the strategy afterwards (a parameter-server chief only once its servers answer).
"""

from __future__ import annotations

import logging
import socket
import time
from collections import defaultdict
from dataclasses import dataclass

import tensorflow as tf

from showtell.common.errors import ShowtellError, UsageError
from showtell.common.model_dir import ModelDir
from showtell.trainer.distribution.cluster import Cluster, ClusterError, Distribution, resolve
from showtell.trainer.loop.signals import StopRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Site:
    """This process in its cluster, before any strategy exists: the cluster (None: one process)
    and the strategy's name it resolves to (``auto`` without a cluster: the devices decide)."""

    cluster: Cluster | None
    name: str

    @property
    def serves(self) -> bool:
        """A ps or worker task of a parameter-server cluster: it serves, the chief trains."""
        return self.name == "parameter_server" and self.cluster.task_type != "chief"

    @property
    def is_chief(self) -> bool:
        """The task that writes the model dir: the chief, worker 0 without one, or the one process."""
        return self.cluster is None or self.cluster.is_chief


@dataclass(frozen=True)
class Placement:
    """Where this process trains, decided once: nothing below the assembly derives it again."""

    site: Site
    strategy: tf.distribute.Strategy
    why: str  # the strategy in words: chosen how, on which devices
    coordinator: object | None = None  # ClusterCoordinator under parameter_server

    @property
    def name(self) -> str:
        return self.site.name

    @property
    def is_chief(self) -> bool:
        return self.site.is_chief

    @property
    def workers(self) -> int:
        """Worker tasks stepping on their own (parameter_server); 1 otherwise."""
        cluster = self.site.cluster
        return cluster.count("worker") if cluster is not None and self.coordinator is not None else 1


def locate(d: Distribution, tf_config: str | None) -> Site:
    """This task's site, from the cluster flags or ``TF_CONFIG``, checked; the devices configured
    (logical CPUs, placement logging) before TensorFlow starts."""
    configure_devices(d.logical_cpus, d.log_device_placement, d.gpus)
    site = Site(*resolve(d, tf_config))
    if site.cluster is not None:
        log.info("this task: %s", site.cluster.describe())
    return site


def configure_devices(logical_cpus: int | None, log_placement: bool = False,
                      gpus: int | None = None) -> None:
    """Split the CPU into logical devices, hide all but the first ``gpus`` GPUs (None: all), and keep
    CPU-only ops placeable on GPU hosts."""
    if gpus is not None:
        found = tf.config.list_physical_devices("GPU")
        if len(found) < gpus:
            plural = "" if len(found) == 1 else "s"
            raise UsageError(f"--gpus {gpus}: TensorFlow sees {len(found)} GPU{plural} here; give --gpus "
                             "all or at most that many (a container: reserve them, deploy/compose.gpu.yml)")
        tf.config.set_visible_devices(found[:gpus], "GPU")
    if logical_cpus and logical_cpus > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical_cpus)]
        )
    tf.config.set_soft_device_placement(True)
    if log_placement:
        tf.debugging.set_log_device_placement(True)


def _device(name: str) -> str:
    """``GPU:0`` → ``/gpu:0``; full device names pass through."""
    name = name.strip()
    return name if name.startswith("/") else "/" + name.lower()


def place(site: Site, devices: tuple[str, ...] | None, stop: StopRequest) -> Placement | None:
    """Build the strategy of ``site`` for this process (``auto``: by the GPUs visible); a
    parameter-server chief first waits for its servers (None: stopped while waiting).

    Cluster strategies are created before anything lists devices: listing initialises the
    runtime, after which collective ops can no longer be configured.
    """
    name = site.name
    if name == "parameter_server" and not wait_for_ps(site.cluster, stop):
        return None
    if name in ("multi_worker", "parameter_server"):
        return _cluster_strategy(site)
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    why = f"--strategy {name}"
    if name == "auto":
        if len(gpus) > 1:
            name, why = "mirrored", f"auto: {len(gpus)} GPUs visible"
        else:
            name, why = "one_device", f"auto: {len(gpus) or 'no'} GPU{'' if len(gpus) == 1 else 's'} visible"
    if name == "one_device":
        device = _device(devices[0]) if devices else (gpus[0] if gpus else cpus[0])
        return Placement(Site(None, name), tf.distribute.OneDeviceStrategy(device), f"{why}, on {device}")
    chosen = [_device(d) for d in devices] if devices else (gpus or cpus)
    return Placement(Site(None, name), tf.distribute.MirroredStrategy(chosen),
                     f"{why}, towers on {', '.join(chosen)}")


def _cluster_strategy(site: Site) -> Placement:
    name, cluster = site.name, site.cluster
    if cluster is None:
        raise ClusterError(f"--strategy {name} needs a cluster (TF_CONFIG or the --*-hosts flags)")
    why = f"--strategy {name}, cluster from {cluster.source}"
    resolver = cluster_resolver(cluster)
    if name == "multi_worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
        return Placement(site, strategy, f"{why}, {cluster.count('worker') + cluster.count('chief')} workers")
    strategy = tf.distribute.ParameterServerStrategy(resolver)  # whole variables, round-robin
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    return Placement(site, strategy, f"{why}, {cluster.count('ps')} ps, {cluster.count('worker')} workers",
                     coordinator)


def cluster_resolver(cluster: Cluster) -> tf.distribute.cluster_resolver.ClusterResolver:
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster.jobs), task_type=cluster.task_type, task_id=cluster.task_index,
        rpc_layer="grpc",
    )


def wait_for_ps(cluster: Cluster, stop, every: float = 1.0, first_say: float = 5.0,
                say_every: float = 15.0) -> bool:
    """Block until every parameter server accepts connections, saying who is awaited (after
    ``first_say`` seconds — a ps a second late is a normal start — then every ``say_every``);
    False if ``stop`` (a ``StopRequest``: SIGTERM, Ctrl-C) came first.

    TensorFlow's own connect waits for an unreachable ps silently and without end, deaf to
    SIGTERM; a chief started while its ps restarts (a rescheduled pod, a crashed task) then looks
    hung.  This waits the same (the ps is usually coming back), but says so, sleeps between
    probes, and stops when asked.
    """
    def answers(address: str) -> bool:
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
                return True
        except OSError:
            return False

    started = last_said = time.monotonic()
    said = False
    while True:
        missing = [f"ps:{i} ({a})" for i, a in enumerate(cluster.jobs.get("ps", [])) if not answers(a)]
        if not missing:
            if said:
                log.info("every parameter server answers (waited %.0f s)", time.monotonic() - started)
            return True
        if time.monotonic() - last_said >= (say_every if said else first_say):
            log.warning("waiting for %s to answer (%.0f s so far): training starts when it does",
                        ", ".join(missing), time.monotonic() - started)
            last_said, said = time.monotonic(), True
        if stop.wait(every):
            return False


def serve(cluster: Cluster, stop: StopRequest, model_dir: ModelDir | None = None, grace: float = 0.0) -> None:
    """A ps or worker task of a parameter-server cluster: start its server and serve until
    SIGTERM/SIGINT (``stop``) — and then on until the chief's final checkpoint lands in
    ``model_dir``, at most ``grace`` seconds (``outlast_the_chief``).

    Workers get ``inter_op_parallelism_threads ≥ workers + 1``: with fewer, the coordinator's
    first scheduled step hangs on a 2-core machine (measured; TF's own test clusters do this).
    """
    stop.action = "stopping the server"
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = cluster.count("worker") + 1
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster.jobs), job_name=cluster.task_type,
                                  task_index=cluster.task_index, protocol="grpc", config=config, start=True)
    log.info("serving %s:%d at %s until stopped", cluster.task_type, cluster.task_index, server.target)
    while not stop.wait(3600):  # sleeps until a signal sets it
        pass
    if model_dir is not None and grace > 0:
        outlast_the_chief(model_dir, grace)


def outlast_the_chief(model_dir: ModelDir, grace: float, poll: float = 0.5) -> bool:
    """Stopped with the whole cluster at once (a scheduler preempting the set, ``compose down``),
    a server keeps serving until a checkpoint newer than the stop lands, or the run is finished:
    the chief's final save reads the variables from the parameter servers, and its last steps
    run on the workers.  At most ``grace`` seconds (a chief that saves nothing is not waited for
    longer).  Whether the checkpoint came."""
    newest = _named_step(model_dir)
    log.info("stopped: serving on until the chief's final checkpoint lands in %s (at most %g s)",
             model_dir, grace)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if model_dir.finished() is not None or _named_step(model_dir) > newest:
            log.info("the chief's checkpoint landed: stopping the server")
            return True
        time.sleep(poll)
    log.info("no checkpoint from the chief within %g s: stopping the server", grace)
    return False


def _named_step(model_dir: ModelDir) -> int:
    """The newest step the state file names (-1: none, or unreadable now): a checkpoint has landed
    only once it is named — its ``.index`` file appears while the save still runs (the shards'
    merge, which may run on this very task: a ps that stopped at the sight of it broke the chief's
    save with "Socket closed")."""
    from showtell.captioning.model.restoring import read_state

    try:
        named = read_state(model_dir)
    except ShowtellError:
        return -1
    return max((ModelDir.step_of(prefix) for prefix in named), default=-1)


def variable_placement(strategy: tf.distribute.Strategy, variables: list, workers: int | None = None) -> str:
    """Where the replicas run and where the variables live (count and MB per device)."""
    per_device: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for variable in variables:
        for value in _components(strategy, variable):
            entry = per_device[value.device or "(default)"]
            entry[0] += 1
            entry[1] += value.shape.num_elements() * value.dtype.size
    replicas = ([f"{workers} workers (one replica each)"] if workers
                else list(getattr(strategy.extended, "worker_devices", ()) or ()))
    where = ", ".join(f"{d}: {n} variables, {size / 2**20:.1f} MB"
                      for d, (n, size) in sorted(per_device.items()))
    return f"replicas on {', '.join(replicas) or 'the cluster workers'}; variables on {where}"


def _components(strategy: tf.distribute.Strategy, variable) -> list:
    """The concrete tf.Variables behind a Keras variable: one per tower, shard or ps task."""
    value = getattr(variable, "value", variable)  # a Keras variable's backing tf variable
    if hasattr(value, "variables") and not isinstance(value, tf.Variable):  # sharded across ps
        return list(value.variables)
    return list(strategy.experimental_local_results(value))
