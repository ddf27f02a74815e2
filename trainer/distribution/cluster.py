"""The training cluster: from ``TF_CONFIG`` (what Kubeflow's TFJob sets) or from seed-style
flags (``--ps-hosts``, ``--worker-hosts``, ``--chief-host``, ``--job-name``, ``--task-index``),
turned into one ``Cluster`` and checked before TensorFlow starts anything — and the experiment's
``Distribution`` section, whose options are those flags.  No TensorFlow here: ``placement``
builds the strategy.

``evaluator`` tasks in ``TF_CONFIG`` are not part of the training cluster (TensorFlow's own
convention): they are dropped from the spec, and a process whose own task is the evaluator is
told to run ``showtell evaluate``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

from showtell.common.errors import ShowtellError, first_line
from showtell.common.options import Invalid, check, option
from showtell.common.options import positive_int as _positive_int

log = logging.getLogger(__name__)

JOBS = ("chief", "worker", "ps")
STRATEGIES = ("auto", "one_device", "mirrored", "parameter_server", "multi_worker")
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


@check("device list")
def device_list(text: str) -> tuple[str, ...]:
    devices = tuple(d.strip() for d in text.split(",") if d.strip())
    if not devices:
        raise Invalid(f"expected DEVICE[,DEVICE…] such as GPU:0,GPU:1 (got '{text}')")
    return devices


@check("GPU count")
def gpu_count(text: str) -> int | None:
    """``all`` (None) or how many of the machine's GPUs to use."""
    if text.strip().lower() == "all":
        return None
    return _positive_int(text)


@dataclass(frozen=True)
class Distribution:
    """Distribution (tf.distribute)."""

    strategy: str = option(
        "auto", "auto: mirrored over several GPUs, else one_device; with a cluster, parameter_server if it "
                "has ps tasks, else multi_worker", choices=STRATEGIES, env="SHOWTELL_STRATEGY", shown=True)
    devices: tuple[str, ...] | None = option(
        None, "towers for mirrored / the device for one_device, e.g. GPU:0,GPU:1 (default: all GPUs)",
        type=device_list, shown=True)
    gpus: int | None = option(
        None, "use the machine's first N GPUs, the others hidden from TensorFlow before it claims their "
              "memory (default: all) — how deploy/compose.gpu.yml takes a count, which docker-compose "
              "1.29 cannot", type=gpu_count, env="SHOWTELL_GPUS")
    server_grace_secs: float = option(
        60.0, "a ps or worker stopped by a signal serves on until the chief's final checkpoint lands, "
              "at most this long (the chief's save reads the ps; 0: stop at once)", type=float)
    logical_cpus: int | None = option(None, "split the CPU into N logical devices (towers without GPUs, "
                                            "for tests)", type=_positive_int, shown=True)
    ps_hosts: str | None = option(None, "h:p,… parameter servers (or TF_CONFIG)", shown=True)
    worker_hosts: str | None = option(None, "h:p,… workers", shown=True)
    chief_host: str | None = option(None, "h:p of the chief (parameter_server's coordinator)", shown=True)
    job_name: str | None = option(None, "this task's job: chief, worker or ps", shown=True)
    task_index: int | None = option(None, "this task's index in its job (default 0)", type=int, shown=True)
    log_device_placement: bool = option(False, "log every op's device (TensorFlow's own, very verbose)",
                                        action="store_true")


class ClusterError(ShowtellError):
    """A cluster spec that cannot describe a training cluster."""


@dataclass(frozen=True)
class Cluster:
    jobs: dict[str, list[str]]  # job name → "host:port" per task
    task_type: str
    task_index: int
    source: str  # "TF_CONFIG" or "flags"

    @property
    def is_chief(self) -> bool:
        """The task that writes checkpoints and summaries: the chief, or worker 0 without one."""
        if "chief" in self.jobs:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def address(self) -> str:
        return self.jobs[self.task_type][self.task_index]

    def count(self, job: str) -> int:
        return len(self.jobs.get(job, []))

    def tf_config(self) -> dict:
        return {"cluster": self.jobs, "task": {"type": self.task_type, "index": self.task_index}}

    def describe(self) -> str:
        jobs = ", ".join(f"{len(hosts)} {job}" for job, hosts in self.jobs.items())
        return (f"{self.task_type}:{self.task_index} ({self.address}) of a cluster of {jobs} "
                f"(from {self.source})")


def host_port(text: str, what: str) -> str:
    match = _HOST_PORT.match(text.strip())
    if not match or not 0 < int(match.group(2)) < 65536:
        raise ClusterError(f"{what}: '{text}' is not host:port (e.g. 10.0.0.5:2222)")
    return text.strip()


def cluster_from_flags(ps_hosts: str | None, worker_hosts: str | None, chief_host: str | None,
               job_name: str | None, task_index: int | None) -> Cluster | None:
    """The seed-style flags as a cluster; None when none of them was given."""
    if not any(v is not None for v in (ps_hosts, worker_hosts, chief_host, job_name, task_index)):
        return None
    jobs: dict[str, list[str]] = {}
    if chief_host:
        jobs["chief"] = [host_port(chief_host, "--chief-host")]
    for job, flag, hosts in (("worker", "--worker-hosts", worker_hosts), ("ps", "--ps-hosts", ps_hosts)):
        if hosts:
            jobs[job] = [host_port(h, flag) for h in hosts.split(",")]
    if job_name is None:
        raise ClusterError("--job-name is required with cluster flags (chief, worker or ps)")
    return _checked(jobs, job_name, 0 if task_index is None else task_index, "flags",
                    job_flag="--job-name", index_flag="--task-index")


def from_tf_config(text: str | None) -> Cluster | None:
    """``TF_CONFIG`` as a cluster; None when unset or naming no cluster."""
    if not text or not text.strip():
        return None
    try:
        config = json.loads(text)
        spec = config.get("cluster") or {}
        task = config.get("task") or {}
    except (ValueError, AttributeError) as exc:
        raise ClusterError(f"TF_CONFIG: not a JSON object ({exc})") from exc
    if not spec:
        return None
    if not isinstance(spec, dict) or not all(isinstance(v, list) for v in spec.values()):
        raise ClusterError("TF_CONFIG: 'cluster' must map job names to lists of host:port")
    task_type = task.get("type")
    if task_type == "evaluator":
        raise ClusterError("TF_CONFIG: this task is the 'evaluator'; run `showtell evaluate` for it, "
                           "not `showtell train`")
    jobs = {job: [host_port(h, f"TF_CONFIG cluster.{job}") for h in hosts]
            for job, hosts in spec.items() if job != "evaluator"}
    if task_type is None:
        raise ClusterError("TF_CONFIG: 'task.type' is missing (chief, worker or ps)")
    try:
        index = int(task.get("index", 0))
    except (TypeError, ValueError) as exc:
        raise ClusterError(f"TF_CONFIG: task.index '{task.get('index')}' is not an integer") from exc
    return _checked(jobs, task_type, index, "TF_CONFIG", job_flag="TF_CONFIG task.type",
                    index_flag="TF_CONFIG task.index")


def _checked(jobs: dict[str, list[str]], task_type: str, index: int, source: str, job_flag: str,
             index_flag: str) -> Cluster:
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown:
        raise ClusterError(f"{source}: unknown job '{unknown[0]}' (jobs are chief, worker, ps, evaluator)")
    if task_type not in JOBS:
        raise ClusterError(f"{job_flag} '{task_type}': unknown job name (use chief, worker or ps)")
    if task_type not in jobs:
        raise ClusterError(f"{job_flag} '{task_type}': the cluster has no {task_type} hosts")
    if not 0 <= index < len(jobs[task_type]):
        tasks = len(jobs[task_type])
        raise ClusterError(f"{index_flag} {index} is out of range: the cluster has {tasks} {task_type} "
                           f"task(s), indices 0…{tasks - 1}")
    if len(jobs.get("chief", [])) > 1:
        raise ClusterError(f"{source}: {len(jobs['chief'])} chief hosts; a cluster has one chief")
    return Cluster(jobs, task_type, index, source)


def check_for_strategy(cluster: Cluster | None, strategy: str) -> None:
    """The jobs each distributed strategy needs."""
    if strategy == "parameter_server":
        if cluster is None:
            raise ClusterError("--strategy parameter_server needs a cluster: TF_CONFIG or --ps-hosts, "
                               "--worker-hosts, --chief-host, --job-name, --task-index")
        for job, flag in (("chief", "--chief-host"), ("ps", "--ps-hosts"), ("worker", "--worker-hosts")):
            if not cluster.count(job):
                raise ClusterError(f"--strategy parameter_server: the cluster has no {job} ({flag}); "
                                   "it needs a chief (the coordinator), ≥ 1 ps and ≥ 1 worker")
    elif strategy == "multi_worker":
        if cluster is None:
            raise ClusterError("--strategy multi_worker needs a cluster: TF_CONFIG or --worker-hosts, "
                               "--job-name, --task-index")
        if cluster.count("ps"):
            raise ClusterError("--strategy multi_worker: the cluster has ps tasks; use "
                               "--strategy parameter_server for a parameter-server cluster")
    elif cluster is not None and strategy in ("one_device", "mirrored"):
        raise ClusterError(f"--strategy {strategy} runs on one host; a cluster was given "
                           f"({cluster.source}) — use parameter_server or multi_worker")


def resolve_name(name: str, cluster: Cluster | None) -> str:
    """``auto`` with a cluster: parameter_server if it has ps tasks, else multi_worker.  Without
    one, ``auto`` stays until the placement sees the devices."""
    if name == "auto" and cluster is not None:
        return "parameter_server" if cluster.count("ps") else "multi_worker"
    return name


def resolve(d: Distribution, tf_config: str | None) -> tuple[Cluster | None, str]:
    """This task's cluster, from the cluster flags or ``TF_CONFIG`` (None: one process), and the
    strategy's name it resolves to — checked against each other."""
    cluster = (cluster_from_flags(d.ps_hosts, d.worker_hosts, d.chief_host, d.job_name, d.task_index)
               or from_tf_config(tf_config))
    name = resolve_name(d.strategy, cluster)
    check_for_strategy(cluster, name)
    return cluster, name


class ClusterLost(ClusterError):
    """A task of a running cluster lost (a ps gone): worth a restart, so not exit 1 but 138 —
    Kubeflow's code for a program's own "retry me" (``restartPolicy: ExitCode`` restarts 130,
    137, 138 and 143 and fails the job on 1 and 2)."""

    exit_code = 138


def cluster_failure(exc: Exception) -> ClusterLost:
    """One line naming the unreachable task(s), found in TensorFlow's many-line gRPC error."""
    text = str(exc)
    lost = sorted({f"/job:{job}/task:{task}" for job, task in
                   re.findall(r"remote target /job:(\w+)/replica:\d+/task:(\d+)", text)})
    ps = [t for t in lost if t.startswith("/job:ps/")]
    if ps:
        what = f"parameter server {', '.join(ps)} is unreachable"
    elif lost:
        what = f"{', '.join(lost)} unreachable"
    else:
        what = first_line(exc, 240)
    return ClusterLost(f"the training cluster failed: {what} ({type(exc).__name__}); restart the failed "
                        "task(s) and this command — training resumes from the last checkpoint")
