"""``deploy/k8s/tfjob`` (``kubectl kustomize`` renders it): a Kubeflow TFJob (Chief, PS, Worker) and
the evaluator's own Job
whose pods pass the Kubernetes API schema, whose commands are flags our CLIs accept, whose evaluator
mounts the checkpoint volume read-only — and which runs as applied: the chief's init container fills the
data path every task reads, pods run as the images' user with memory limits, GPUs on the workers,
release-tagged images, and probes on the evaluator's plaintext health port."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest

from tests.helpers import K8S_VERSION, ROOT, parse_cli
from tests.k8s import (
    CUSTOM_KINDS,
    NETWORK,
    admitted_ports,
    crd_violations,
    render,
    restricted_violations,
    upstream_text,
)

DIRECTORY = ROOT / "deploy" / "k8s" / "tfjob"


@pytest.fixture(scope="module")
def documents() -> list[dict]:
    return render(DIRECTORY)


@pytest.fixture(scope="module")
def tfjob(documents) -> dict:
    [job] = [d for d in documents if d["kind"] == "TFJob"]
    return job


@pytest.fixture(scope="module")
def pods(documents, tfjob) -> dict[str, dict]:
    """Every pod template by role: the TFJob's replicas, and the evaluator's own Job beside it."""
    [evaluator] = [d for d in documents if d["kind"] == "Job"]
    return {name: replica["template"] for name, replica in tfjob["spec"]["tfReplicaSpecs"].items()} | {
        "Evaluator": evaluator["spec"]["template"]}


def test_every_kubernetes_object_passes_the_api_schema(documents, tfjob):
    """Kubernetes' own objects against the API schema; the TFJob against the TFJob CRD of the
    training operator the docs name (v1.9.3, tests/crds/), its pod templates Kubernetes 1.31's,
    and each pod template against today's API schema as well."""
    for doc in documents:
        if doc["kind"] in CUSTOM_KINDS:
            assert crd_violations(doc) == [], doc["kind"]
        else:
            kubernetes_validate.validate(doc, desired_version=K8S_VERSION, strict=True)
    for name, replica in tfjob["spec"]["tfReplicaSpecs"].items():
        pod = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name.lower()},
               "template": replica["template"]}
        kubernetes_validate.validate(pod, desired_version=K8S_VERSION, strict=True)
    misspelt = {**tfjob, "spec": {**tfjob["spec"],
                                  "runPolicy": {"cleanPodPolicy": "Running", "backofLimit": 3}}}
    assert len(crd_violations(misspelt)) == 1  # the CRD check can fail
    with pytest.raises(kubernetes_validate.ValidationError):  # the check can fail
        kubernetes_validate.validate({**documents[0], "spec": {"accesModes": ["ReadWriteMany"]}},
                                     desired_version=K8S_VERSION, strict=True)


def test_tfjob_has_the_training_roles_and_operator_conventions(tfjob, documents):
    assert tfjob["apiVersion"] == "kubeflow.org/v1"
    # The chief's success ends the job: parameter servers (which never exit) are deleted rather
    # than left behind (cleanPodPolicy None would keep them).  The evaluator is not a replica:
    # its own Job, which the TFJob's end, failure or deadline never touches.
    assert tfjob["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    specs = tfjob["spec"]["tfReplicaSpecs"]
    assert set(specs) == {"Chief", "PS", "Worker"}
    from showtell.trainer.distribution.cluster import Distribution

    grace = Distribution().server_grace_secs
    for name, replica in specs.items():  # stopped at once, the ps and workers outlast the chief's save
        assert replica["template"]["spec"]["terminationGracePeriodSeconds"] > grace, name
    [evaluator] = [d for d in documents if d["kind"] == "Job"]
    assert evaluator["metadata"]["name"] == "showtell-evaluator" and evaluator["spec"]["backoffLimit"] >= 30
    assert specs["Chief"]["replicas"] == 1
    assert specs["PS"]["replicas"] >= 1 and specs["Worker"]["replicas"] >= 2
    for replica in specs.values():
        [container] = replica["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow" and replica["restartPolicy"] == "ExitCode"


def _kubeflow_restarts(exit_code: int) -> bool:
    """What a replica with ``restartPolicy: ExitCode`` does with its ``tensorflow`` container's exit
    code: training-operator v1.9.3's ``train.IsRetryableExitCode``, read from that release's source
    (``tests/crds/upstream``; v1.7.0 replaced the older list of permanent codes with this rule)."""
    import operator

    source = upstream_text("training-operator-v1.9.3-train_util.go.txt")
    [(compare, bound)] = re.findall(r"func IsRetryableExitCode\(exitCode int32\) bool \{\s*"
                                    r"return exitCode (>=|>|<=|<|==) (\d+)\s*\}", source)
    ops = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
    return ops[compare](exit_code, int(bound))


def test_exit_codes_fail_the_job_on_a_bad_flag_and_restart_it_on_a_lost_task(tfjob):
    """showtell's exit codes under the TFJob's policy: a bad flag or an error fails the job at once
    (OnFailure retried it ten times); a signal or a lost ps restarts the replica, which resumes."""
    import signal

    from showtell.common.errors import ShowtellError
    from showtell.common.processes import signal_exit_code
    from showtell.trainer.distribution.cluster import ClusterError, ClusterLost, cluster_failure

    lost = cluster_failure(RuntimeError("... remote target /job:ps/replica:0/task:0 ..."))
    assert isinstance(lost, ClusterLost) and "parameter server /job:ps/task:0" in str(lost)
    outcomes = {"bad flag": 2, "an error (a missing dataset)": ShowtellError.exit_code,
                "a bad cluster spec": ClusterError.exit_code, "a lost ps": lost.exit_code,
                "SIGTERM (preemption, eviction)": signal_exit_code(signal.SIGTERM),
                "SIGINT": signal_exit_code(signal.SIGINT), "SIGKILL (OOM)": 128 + signal.SIGKILL,
                "a crash (SIGSEGV)": 128 + signal.SIGSEGV, "an abort (SIGABRT)": 128 + signal.SIGABRT}
    restarts = {what: _kubeflow_restarts(code) for what, code in outcomes.items()}
    # A crash is retried too (every code from 128): until the run's deadline, not a count.
    assert restarts == {"bad flag": False, "an error (a missing dataset)": False, "a bad cluster spec": False,
                        "a lost ps": True, "SIGTERM (preemption, eviction)": True, "SIGINT": True,
                        "SIGKILL (OOM)": True, "a crash (SIGSEGV)": True, "an abort (SIGABRT)": True}
    for name, replica in tfjob["spec"]["tfReplicaSpecs"].items():
        assert replica["restartPolicy"] == "ExitCode", name
    # The retries' bound is a deadline: the operator's backoffLimit counts container restarts in
    # running pods, which ExitCode's re-created pods never have (kubeflow/trainer#2045).
    run_policy = tfjob["spec"]["runPolicy"]
    assert "backoffLimit" not in run_policy and run_policy["activeDeadlineSeconds"] >= 7 * 24 * 3600


def test_commands_are_flags_the_clis_accept(tfjob, pods):
    specs = tfjob["spec"]["tfReplicaSpecs"]
    for role in ("Chief", "PS", "Worker"):
        [container] = specs[role]["template"]["spec"]["containers"]
        assert container["command"] == ["showtell", "train"]
        args = parse_cli("showtell.commands.train", container["args"])
        assert args.strategy == "parameter_server" and args.job_name is None  # cluster from TF_CONFIG
        assert args.model_dir == Path("/checkpoints/model")
    [evaluator] = pods["Evaluator"]["spec"]["containers"]
    assert evaluator["command"] == ["showtell", "evaluate"]
    args = parse_cli("showtell.commands.evaluate", evaluator["args"])
    assert str(args.model_dir) == "/checkpoints/model" and args.poll_secs > 0
    assert args.exit_when_trained  # the evaluator ends once the final checkpoint is evaluated


def test_evaluator_reads_the_checkpoints_read_only_and_trainers_write_them(pods):
    def mounts(role: str) -> dict[str, dict]:
        pod = pods[role]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        [container] = pod["containers"]
        return {m["mountPath"]: {**m, "claim": volumes[m["name"]].get("persistentVolumeClaim", {})}
                for m in container["volumeMounts"]}

    evaluator = mounts("Evaluator")["/checkpoints"]
    assert evaluator["readOnly"] is True and evaluator["claim"]["readOnly"] is True
    for role in ("Chief", "PS", "Worker"):
        trainer = mounts(role)["/checkpoints"]
        assert not trainer.get("readOnly")
        assert trainer["claim"]["claimName"] == evaluator["claim"]["claimName"]


def _pod(pods: dict, role: str) -> dict:
    return pods[role]["spec"]


def test_the_chief_fills_the_data_path_that_every_task_reads(pods):
    [init] = _pod(pods, "Chief")["initContainers"]
    assert init["command"] == ["showtell", "data", "synthetic"]
    built = parse_cli("showtell.commands.data", ["synthetic", *init["args"]])
    assert built.if_missing
    [wait] = _pod(pods, "Evaluator")["initContainers"]
    assert f"{built.out}/dataset.json" in wait["command"][-1]  # the manifest a finished build writes last
    from showtell.captioning.data.dataset import MANIFEST

    assert MANIFEST == "dataset.json"
    for role, module in (("Chief", "showtell.commands.train"), ("Worker", "showtell.commands.train"),
                         ("Evaluator", "showtell.commands.evaluate")):
        [container] = _pod(pods, role)["containers"]
        assert parse_cli(module, container["args"]).data == built.out, role


def test_pods_run_as_the_images_user_with_limits_gpus_release_tags_and_plaintext_probes(pods):
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for role in pods:
        pod = _pod(pods, role)
        assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["fsGroup"] == 1000, role
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            tag = container["image"].rsplit(":", 1)[1]
            assert tag in (version, f"{version}-cuda"), (role, container["image"])  # never :latest
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["resources"]["limits"]["memory"] == container["resources"]["requests"]["memory"]
        [main] = pod["containers"]
        assert (main["resources"]["limits"].get("nvidia.com/gpu") == "1") == (role == "Worker"), role
    [evaluator] = _pod(pods, "Evaluator")["containers"]
    args = parse_cli("showtell.commands.evaluate", evaluator["args"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert evaluator[probe]["grpc"]["port"] == args.health_port != args.port, probe


def test_every_pod_meets_pod_security_restricted(pods):
    for name, template in pods.items():
        assert restricted_violations(template["spec"]) == [], name


def test_the_tfjob_path_closes_its_cluster_port_as_the_jobset_path_does(documents, pods):
    """The operator's per-replica Services make 2222 reachable cluster-wide; the same component's
    NetworkPolicy admits it from this instance's training tasks only (test_jobset.py's table)."""
    labels = {role: pods[name]["metadata"]["labels"]
              for role, name in (("trainer", "Worker"), ("evaluator", "Evaluator"))}
    assert admitted_ports(documents, labels) == NETWORK

