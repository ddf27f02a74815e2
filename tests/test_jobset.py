"""``deploy/k8s/``: a Kustomize base (namespace, volumes, JobSet, Service, the trainer's recipe as
a ConfigMap) and overlays (cpu, gpu), rendered here by ``kubectl kustomize`` — each render's
objects pass the Kubernetes API schema (the JobSet's Jobs too), its pods meet Pod Security
"restricted" (the namespace enforces it), its tasks find each other through JobSet's stable pod
hostnames with the cluster given by flags our trainer accepts, the chief trains with the
recipe file it mounts, the evaluator reads the checkpoints read-only and ends with the training,
and the set succeeds on chief + evaluator — and it runs as applied: the data job fills the path
the others read, pods run as the images' user on writable volumes, with memory limits, GPUs on
the workers (gpu overlay), release-tagged images, probes on the plaintext health port, and
Prometheus' scrape annotations on the pods that serve metrics."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import kubernetes_validate
import pytest

from showtell.trainer.distribution.cluster import cluster_from_flags
from tests.helpers import K8S_VERSION, ROOT, parse_cli
from tests.k8s import (
    CUSTOM_KINDS,
    NETWORK,
    OVERLAYS,
    admitted_ports,
    crd_violations,
    render,
    restricted_violations,
)

K8S = ROOT / "deploy" / "k8s"


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def documents(overlay: str) -> list[dict]:
    return render(K8S / "overlays" / overlay)


@pytest.fixture(scope="module")
def jobset(documents) -> dict:
    [job] = [d for d in documents if d["kind"] == "JobSet"]
    return job


@pytest.fixture(scope="module")
def evaluator_job(documents) -> dict:
    [job] = [d for d in documents if d["kind"] == "Job"]
    return job


def as_replicated(job: dict) -> dict:
    """The evaluator's Job in a replicated job's shape, so the checks of every pod read it as they
    read the set's tasks (it has no replicas and depends on nothing: it is not in the set)."""
    return {"name": "evaluator", "template": {"metadata": job["metadata"], "spec": job["spec"]}}


@pytest.fixture(scope="module")
def replicated(jobset, evaluator_job) -> dict[str, dict]:
    """The set's replicated jobs by name, and the evaluator's Job beside them."""
    return {rj["name"]: rj for rj in jobset["spec"]["replicatedJobs"]} | {
        "evaluator": as_replicated(evaluator_job)}


def _schema_valid(documents: list[dict]) -> None:
    """Kubernetes' own objects against the API schema, the custom ones against their CRDs."""
    for doc in documents:
        if doc["kind"] in CUSTOM_KINDS:
            assert crd_violations(doc) == [], doc["kind"]
        else:
            kubernetes_validate.validate(doc, desired_version=K8S_VERSION, strict=True)


def _with_component(where: Path, component: str, base: Path = K8S / "overlays" / "cpu", **more) -> list[dict]:
    """``base`` (the cpu overlay) with ``component`` added, from an overlay of a user's own in ``where``."""
    import os

    import yaml

    where.mkdir()
    (where / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(base, where)],
        "components": [os.path.relpath(K8S / "components" / component, where)], **more}))
    return render(where)


def _container(rj: dict) -> dict:
    [container] = rj["template"]["spec"]["template"]["spec"]["containers"]
    return container


def test_every_object_passes_its_schema_the_jobset_its_crd_at_the_installed_version(documents, replicated):
    """Kubernetes' own objects against the API schema; the JobSet against the JobSet CRD of the
    release docs/deployment.md installs (v0.8.1, tests/crds/), whose embedded Job spec is
    Kubernetes 1.32's — stricter than 1.37's own Job (a pod condition pattern needs its status)."""
    _schema_valid(documents)
    # the checks can fail: the condition pattern as it was (valid for 1.37's Job, not this CRD),
    # an unknown field, a failure rule's bad action
    [jobset] = [d for d in documents if d["kind"] == "JobSet"]
    before = copy.deepcopy(jobset)
    before["spec"]["replicatedJobs"][1]["template"]["spec"]["podFailurePolicy"]["rules"][0][
        "onPodConditions"] = [{"type": "DisruptionTarget"}]
    assert crd_violations(before) == ["JobSet spec.replicatedJobs.1.template.spec.podFailurePolicy.rules"
                                      ".0.onPodConditions.0: 'status' is a required property"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
           "spec": before["spec"]["replicatedJobs"][1]["template"]["spec"]}
    kubernetes_validate.validate(job, desired_version=K8S_VERSION, strict=True)  # what hid it
    unknown = copy.deepcopy(jobset)
    unknown["spec"]["replicatedJobs"][1]["template"]["spec"]["backofLimit"] = 0
    assert len(crd_violations(unknown)) == 1
    unknown["spec"]["failurePolicy"]["rules"][0]["action"] = "Restart"
    assert len(crd_violations(unknown)) == 2


def test_the_set_succeeds_with_the_chief_and_the_evaluator_is_a_workload_of_its_own(jobset, replicated,
                                                                                    evaluator_job):
    """Training's success frees its accelerators at once (the set ends with the chief), and the
    evaluator — a batch/v1 Job beside the set, not in it — evaluates the final checkpoint on its own
    time, its failures retried by its own Job and never failing or restarting the training."""
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert {rj["name"] for rj in jobset["spec"]["replicatedJobs"]} == {"data", "chief", "ps", "worker"}
    assert replicated["chief"]["replicas"] == 1 and replicated["worker"]["replicas"] >= 2
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief"]}
    assert all("evaluator" not in rule.get("targetReplicatedJobs", [])
               for rule in jobset["spec"]["failurePolicy"]["rules"])
    assert (evaluator_job["apiVersion"], evaluator_job["spec"]["backoffLimit"]) == ("batch/v1", 30)
    rules = evaluator_job["spec"]["podFailurePolicy"]["rules"]
    disrupted = [{"type": "DisruptionTarget", "status": "True"}]
    assert rules[0] == {"action": "Ignore", "onPodConditions": disrupted}
    assert rules[1]["action"] == "FailJob" and rules[1]["onExitCodes"]["values"] == [2]
    evaluator = parse_cli("showtell.commands.evaluate", _container(replicated["evaluator"])["args"])
    assert evaluator.exit_when_trained and evaluator.poll_secs  # it ends after the final checkpoint
    # The whole set preempted at once: the ps and workers serve on until the chief's final save
    # lands (tests/test_clusters.py), inside the kubelet's grace
    from showtell.trainer.distribution.cluster import Distribution

    grace = Distribution().server_grace_secs
    for name in ("chief", "ps", "worker"):
        assert _pod(replicated[name])["terminationGracePeriodSeconds"] > grace, name
    assert evaluator.export_best == "cider:max"


RECIPE = "/etc/showtell/recipe.yaml"


@pytest.fixture(scope="module")
def recipe(documents, tmp_path_factory) -> Path:
    """The recipe the chief mounts (its ConfigMap's file), where a test's parser can read it."""
    [config_map] = [d for d in documents
                    if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "showtell-recipe"]
    path = tmp_path_factory.mktemp("recipe") / "recipe.yaml"
    path.write_text(config_map["data"]["recipe.yaml"])
    return path


def _expanded(args: list[str], env: dict[str, str], recipe: Path | None = None) -> list[str]:
    """Kubernetes' $(VAR) expansion of container args from the container's env (and the mounted
    recipe's path, where this test has its copy)."""
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]
    return [str(recipe) if recipe and a == RECIPE else a for a in expanded]


def _pod_env(jobset: dict, job: str, index: int) -> dict[str, str]:
    """The label and annotation values JobSet puts on the pod of Job ``index`` of ``job``, by the
    env names the containers read them into."""
    return {"JOBSET": jobset["metadata"]["name"], "JOB_NAME": job, "TASK": str(index)}


def _assert_tasks_find_each_other(jobset: dict, replicated: dict, recipe: Path) -> None:
    # JobSet's default subdomain is the set's name, so a pod's name is <set>-<job>-<i>-0.<set>.
    assert "subdomain" not in jobset["spec"]["network"]
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    name = subdomain = jobset["metadata"]["name"]
    expected_hosts = {job: [f"{name}-{job}-{i}-0.{subdomain}:2222"
                            for i in range(replicated[job]["replicas"])]
                      for job in ("chief", "ps", "worker")}
    for job in ("chief", "ps", "worker"):
        container = _container(replicated[job])
        assert container["command"] == ["showtell", "train"]
        fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
        assert fields == {"JOBSET": "metadata.labels['jobset.sigs.k8s.io/jobset-name']",
                          "JOB_NAME": "metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']",
                          "TASK": "metadata.annotations['jobset.sigs.k8s.io/job-index']"}
        assert replicated[job]["template"]["spec"].get("parallelism", 1) == 1  # pod index is 0
        for index in range(replicated[job]["replicas"]):
            # What JobSet puts in the label and annotation of this Job's pod.
            args = parse_cli("showtell.commands.train",
                             _expanded(container["args"], _pod_env(jobset, job, index), recipe))
            assert args.strategy == "parameter_server"
            cluster = cluster_from_flags(args.ps_hosts, args.worker_hosts, args.chief_host, args.job_name,
                                 args.task_index)
            assert (cluster.task_type, cluster.task_index) == (job, index)
            assert cluster.jobs == expected_hosts


def test_each_task_is_given_the_cluster_by_flags_from_jobset_hostnames(jobset, replicated, recipe):
    _assert_tasks_find_each_other(jobset, replicated, recipe)


def test_a_prefixed_second_instance_finds_its_own_tasks_claims_and_recipe(tmp_path: Path):
    """A user's overlay with a namePrefix (a second experiment in the namespace): the tasks'
    hosts, the claims and the recipe the JobSet names are the prefixed ones the render holds."""
    import os

    import yaml

    user = tmp_path / "exp1"
    user.mkdir()
    (user / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namePrefix": "exp1-",
        "resources": [os.path.relpath(K8S / "overlays" / "cpu", user)]}))
    documents = render(user)
    [jobset] = [d for d in documents if d["kind"] == "JobSet"]
    assert jobset["metadata"]["name"] == "exp1-showtell"
    replicated = {rj["name"]: rj for rj in jobset["spec"]["replicatedJobs"]}
    [config_map] = [d for d in documents
                    if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-recipe")]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(config_map["data"]["recipe.yaml"])
    _assert_tasks_find_each_other(jobset, replicated, recipe)
    claims = {d["metadata"]["name"] for d in documents if d["kind"] == "PersistentVolumeClaim"}
    assert claims == {"exp1-showtell-checkpoints", "exp1-showtell-data", "exp1-showtell-eval"}
    for name, rj in replicated.items():
        for volume in _pod(rj)["volumes"]:
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, (name, volume)
            if "configMap" in volume:
                assert volume["configMap"]["name"] == config_map["metadata"]["name"], (name, volume)


def test_evaluator_reads_the_checkpoints_read_only_and_trainers_write_them(replicated):
    def mounts(job: str) -> dict[str, dict]:
        pod = replicated[job]["template"]["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        return {m["mountPath"]: {**m, "claim": volumes[m["name"]].get("persistentVolumeClaim", {})}
                for m in _container(replicated[job])["volumeMounts"]}

    evaluator = mounts("evaluator")["/checkpoints"]
    assert evaluator["readOnly"] is True and evaluator["claim"]["readOnly"] is True
    for job in ("chief", "ps", "worker"):
        trainer = mounts(job)["/checkpoints"]
        assert not trainer.get("readOnly")
        assert trainer["claim"]["claimName"] == evaluator["claim"]["claimName"]


def _version() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _pod(rj: dict) -> dict:
    return rj["template"]["spec"]["template"]["spec"]


def test_the_data_job_runs_first_and_fills_the_path_every_task_reads(jobset, replicated, recipe):
    names = [rj["name"] for rj in jobset["spec"]["replicatedJobs"]]
    assert names[0] == "data" and "dependsOn" not in replicated["data"]  # JobSet: the first cannot depend
    for name in names[1:]:
        assert replicated[name]["dependsOn"] == [{"name": "data", "status": "Complete"}], name
    data = _container(replicated["data"])
    assert data["command"] == ["showtell", "data", "synthetic"]
    built = parse_cli("showtell.commands.data", ["synthetic", *data["args"]])
    assert built.if_missing  # a restarted set keeps the dataset
    data_mount = {m["mountPath"]: m for m in data["volumeMounts"]}["/data"]
    assert not data_mount.get("readOnly")
    claim = {v["name"]: v for v in _pod(replicated["data"])["volumes"]}[data_mount["name"]]
    # the evaluator is not in the set, so it cannot depend on the data job: it waits for the dataset
    [wait] = _pod(replicated["evaluator"])["initContainers"]
    assert f"{built.out}/dataset.json" in wait["command"][-1]
    for job, module in (("chief", "showtell.commands.train"), ("worker", "showtell.commands.train"),
                        ("evaluator", "showtell.commands.evaluate")):
        container = _container(replicated[job])
        args = parse_cli(module, _expanded(container["args"], _pod_env(jobset, job, 0), recipe))
        assert args.data == built.out, job
        mount = {m["mountPath"]: m for m in container["volumeMounts"]}["/data"]
        volume = {v["name"]: v for v in _pod(replicated[job])["volumes"]}[mount["name"]]
        assert volume["persistentVolumeClaim"]["claimName"] == claim["persistentVolumeClaim"]["claimName"]


def test_pods_run_as_the_images_user_with_limits_gpus_and_release_tags(replicated, overlay):
    version = _version()
    for name, rj in replicated.items():
        pod = _pod(rj)
        security = pod["securityContext"]
        assert security["runAsNonRoot"] and (security["runAsUser"], security["fsGroup"]) == (1000, 1000), name
        container = _container(rj)
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        tag = container["image"].rsplit(":", 1)[1]
        assert tag in (version, f"{version}-cuda"), (name, container["image"])  # never :latest
        resources = container["resources"]
        assert resources["limits"]["memory"] == resources["requests"]["memory"], name
        gpus = resources["limits"].get("nvidia.com/gpu")
        assert (gpus == "1") == (name == "worker" and overlay == "gpu"), name  # the workers run the steps
        if name != "evaluator":  # the trainer's build: CUDA on the gpu overlay
            assert tag.endswith("-cuda") == (overlay == "gpu"), (name, tag)
        policy = rj["template"]["spec"].get("podFailurePolicy")
        if policy:  # its rules name this container
            assert all(r["onExitCodes"]["containerName"] == container["name"]
                       for r in policy["rules"] if "onExitCodes" in r)
            assert {"type": "DisruptionTarget", "status": "True"} in policy["rules"][0]["onPodConditions"]


def test_the_probes_ask_the_plaintext_health_port_the_evaluator_is_given(replicated):
    container = _container(replicated["evaluator"])
    args = parse_cli("showtell.commands.evaluate", container["args"])
    assert args.health_port and args.health_port != args.port
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == args.health_port, probe
    assert args.health_port in {p["containerPort"] for p in container["ports"]}


def test_the_chief_trains_with_the_recipe_it_mounts(jobset, replicated, recipe):
    chief = _container(replicated["chief"])
    mounts = {m["mountPath"]: m for m in chief["volumeMounts"]}
    volumes = {v["name"]: v for v in _pod(replicated["chief"])["volumes"]}
    assert mounts["/etc/showtell"]["readOnly"] is True
    assert volumes[mounts["/etc/showtell"]["name"]]["configMap"]["name"] == "showtell-recipe"
    args = parse_cli("showtell.commands.train",
                     _expanded(chief["args"], _pod_env(jobset, "chief", 0), recipe))
    assert args.config == [recipe] and args.save_every_secs == 600 and args.keep == 5  # from the file
    assert str(args.model_dir) == "/checkpoints/model"  # the flags: where things are


def test_every_pod_meets_pod_security_restricted_in_a_namespace_enforcing_it(documents, replicated):
    [namespace] = [d for d in documents if d["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {d["metadata"].get("namespace") for d in documents if d["kind"] != "Namespace"} == \
        {namespace["metadata"]["name"]}
    for name, rj in replicated.items():
        assert restricted_violations(_pod(rj)) == [], name
    # the check can fail: the pods as they were before seccomp was set
    unconfined = {**_pod(replicated["chief"]), "securityContext": {
        k: v for k, v in _pod(replicated["chief"])["securityContext"].items() if k != "seccompProfile"}}
    assert restricted_violations(unconfined) == ["trainer: seccompProfile RuntimeDefault or Localhost"]


def test_the_pods_serving_metrics_are_annotated_for_prometheus(jobset, replicated, recipe):
    for job, module in (("chief", "showtell.commands.train"), ("evaluator", "showtell.commands.evaluate")):
        container = _container(replicated[job])
        args = parse_cli(module, _expanded(container["args"], _pod_env(jobset, job, 0), recipe))
        annotations = replicated[job]["template"]["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert int(annotations["prometheus.io/port"]) == args.prometheus_port
        assert args.prometheus_host == "0.0.0.0"
        assert {"name": "metrics", "containerPort": args.prometheus_port} in container["ports"]


# JobSet's FailurePolicyRule (jobset.x-k8s.io/v1alpha2, kubernetes-sigs/jobset api/…/jobset_types.go):
# the action enum, the name pattern, and the reasons a batch/v1 Job fails with.
JOBSET_ACTIONS = {"FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"}
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
JOB_FAILURE_REASONS = {"BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy",
                       "MaxFailedIndexesExceeded"}


def _job_outcome(spec: dict, container: str, exit_code: int | None,
                 conditions: tuple[str, ...] = ()) -> str | None:
    """What the Job controller does with pods that keep failing so: the Job's failure reason, or
    None when the failures are ignored (a replacement pod, not counted).  Its pod failure policy's
    rules in order, the first match wins; none matching counts the failure against backoffLimit."""
    for failures in range(1, spec.get("backoffLimit", 6) + 2):
        for rule in spec.get("podFailurePolicy", {}).get("rules", []):
            codes = rule.get("onExitCodes")
            if codes and exit_code is not None and codes.get("containerName", container) == container:
                hit = (exit_code in codes["values"]) == (codes["operator"] == "In")
            else:
                hit = any(p["type"] in conditions for p in rule.get("onPodConditions", []))
            if hit:
                if rule["action"] == "FailJob":
                    return "PodFailurePolicy"
                if rule["action"] == "Ignore":
                    return None
                break  # Count: as if no rule matched
        if failures > spec.get("backoffLimit", 6):
            return "BackoffLimitExceeded"
    raise AssertionError("unreachable")


def _jobset_action(policy: dict, replicated_job: str, reason: str) -> tuple[str, str]:
    """JobSet's failure policy for a child Job failed with ``reason``: the first rule whose reasons
    and target jobs match (empty = any), else RestartJobSet — (action, rule name)."""
    for rule in policy.get("rules", []):
        if (not rule.get("onJobFailureReasons") or reason in rule["onJobFailureReasons"]) and \
                (not rule.get("targetReplicatedJobs") or replicated_job in rule["targetReplicatedJobs"]):
            return rule["action"], rule["name"]
    return "RestartJobSet", "(default)"


def test_a_bad_flag_fails_the_set_at_once_and_a_lost_task_restarts_it(jobset, replicated):
    """Every Job's pod failure policy and the set's failure policy together, as their controllers
    apply them: exit 2 (a bad flag) fails the JobSet at once, whichever task it is; a training
    task's crash fails its Job past its backoffLimit and restarts the set (counted against
    maxRestarts); an evaluator's crash is its own Job's retry, and once its retries are spent
    only that Job fails — the set never hears of it; a preempted or evicted pod is replaced and
    fails nothing."""
    policy = jobset["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 10
    for rule in policy["rules"]:
        assert rule["action"] in JOBSET_ACTIONS and RULE_NAME.match(rule["name"]), rule
        assert set(rule["onJobFailureReasons"]) <= JOB_FAILURE_REASONS, rule
        assert set(rule.get("targetReplicatedJobs", [])) <= set(replicated), rule
    for name, rj in replicated.items():
        spec = rj["template"]["spec"]
        pod = spec["template"]["spec"]
        assert pod["restartPolicy"] == "Never", name  # what a podFailurePolicy requires
        container = _container(rj)["name"]
        bad_flag = _job_outcome(spec, container, 2)
        assert bad_flag == "PodFailurePolicy", name
        crash = _job_outcome(spec, container, 1)
        stopped = _job_outcome(spec, container, 143)  # SIGTERM: a checkpoint saved, not finished
        assert crash == stopped == "BackoffLimitExceeded", name
        if name == "evaluator":  # its own Job, not the set's: replaced for hours, then it alone fails
            assert spec["backoffLimit"] >= 30 and "evaluator" not in {
                rj["name"] for rj in jobset["spec"]["replicatedJobs"]}
            continue
        assert _jobset_action(policy, name, bad_flag) == ("FailJobSet", "badConfiguration"), name
        assert _jobset_action(policy, name, crash) == ("RestartJobSet", "lostTask"), name
        assert _job_outcome(spec, container, None, ("DisruptionTarget",)) is None, name
    # the checks can fail: without the set's rules, JobSet's default restarts on a bad flag too
    assert _jobset_action({"maxRestarts": 10}, "chief", "PodFailurePolicy")[0] == "RestartJobSet"
    assert _job_outcome({"backoffLimit": 0}, "trainer", 2) == "BackoffLimitExceeded"


RECOMMENDED = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
               "app.kubernetes.io/version")


def _pod_templates(doc: dict) -> dict[str, dict]:
    """name → pod template metadata, for the workload kinds whose pods Kustomize does not label."""
    if doc["kind"] == "JobSet":
        return {rj["name"]: rj["template"]["spec"]["template"].get("metadata", {})
                for rj in doc["spec"]["replicatedJobs"]}
    if doc["kind"] == "Job":
        return {"evaluator": doc["spec"]["template"].get("metadata", {})}
    if doc["kind"] == "TFJob":
        return {name: spec["template"].get("metadata", {})
                for name, spec in doc["spec"]["tfReplicaSpecs"].items()}
    return {}


@pytest.mark.parametrize("directory", ["overlays/cpu", "overlays/gpu", "tfjob"])
def test_every_object_and_pod_carries_the_recommended_labels(directory: str):
    """Kubernetes' app.kubernetes.io labels on every object and every pod (the version the
    release's), and the Service selecting the evaluator's pods by them, no other pod."""
    documents = render(K8S / directory)
    pods: dict[str, dict] = {}
    for doc in documents:
        labels = doc["metadata"].get("labels", {})
        assert all(labels.get(k) for k in RECOMMENDED), (doc["kind"], doc["metadata"]["name"], labels)
        assert labels["app.kubernetes.io/version"] == _version()
        for name, metadata in _pod_templates(doc).items():
            pod_labels = metadata.get("labels", {})
            assert all(pod_labels.get(k) for k in RECOMMENDED), (name, pod_labels)
            assert pod_labels["app.kubernetes.io/version"] == _version()
            pods[name] = pod_labels
    [service] = [d for d in documents if d["kind"] == "Service"]
    selector = service["spec"]["selector"]
    chosen = {name for name, labels in pods.items() if selector.items() <= labels.items()}
    assert chosen == {"evaluator"} or chosen == {"Evaluator"}, chosen


def test_the_prometheus_operator_component_monitors_the_pods_that_serve_metrics(tmp_path: Path):
    """``components/prometheus-operator`` added to an overlay: its PodMonitor selects the chief's
    and the evaluator's pods (both serve port "metrics") and copies the labels the alerts select
    on; its PrometheusRule holds the rules Prometheus loads from deploy/monitoring/alerts.yml."""
    import yaml

    def overlay(name: str, **more) -> list[dict]:
        return _with_component(tmp_path / name, "prometheus-operator", **more)

    documents = overlay("my-overlay")
    [monitor] = [d for d in documents if d["kind"] == "PodMonitor"]
    [rule] = [d for d in documents if d["kind"] == "PrometheusRule"]
    [jobset] = [d for d in documents if d["kind"] == "JobSet"]
    assert monitor["metadata"]["namespace"] == rule["metadata"]["namespace"] == "showtell"
    # kube-prometheus-stack's Grafana sidecar loads the dashboard from its labelled ConfigMap
    [board] = [d for d in documents
               if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["metadata"]["namespace"] == "showtell"
    assert json.loads(board["data"]["showtell-dashboard.json"])["uid"]
    kubernetes_validate.validate(board, desired_version=K8S_VERSION, strict=True)
    # prometheus-operator v0.82.2's CRDs accept both (the checks can fail: a misspelt field)
    assert crd_violations(monitor) == crd_violations(rule) == []
    assert crd_violations({**monitor, "spec": {**monitor["spec"], "podTargetLabel": []}}) != []
    # kube-prometheus-stack selects them by its release's name, which an overlay sets (the
    # component's documented patch)
    assert monitor["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"] == \
        "kube-prometheus-stack"
    patch = '[{"op": "replace", "path": "/metadata/labels/release", "value": "my-release"}]'
    mine = overlay("my-release", patches=[{"target": {"group": "monitoring.coreos.com"}, "patch": patch}])
    monitoring = [d for d in mine if d["kind"] in ("PodMonitor", "PrometheusRule")]
    assert {d["metadata"]["labels"]["release"] for d in monitoring} == {"my-release"}
    selected = set()
    [evaluator] = [d for d in documents if d["kind"] == "Job"]
    for rj in [*jobset["spec"]["replicatedJobs"], as_replicated(evaluator)]:
        template = rj["template"]["spec"]["template"]
        if monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items():
            ports = {p.get("name") for c in template["spec"]["containers"] for p in c.get("ports", [])}
            if {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports:
                selected.add(rj["name"])
    assert selected == {"chief", "evaluator"}  # the two that serve --prometheus-port
    assert "app.kubernetes.io/name" in monitor["spec"]["podTargetLabels"]  # → app_kubernetes_io_name
    alerts = yaml.safe_load((ROOT / "deploy" / "monitoring" / "alerts.yml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"], "copy alerts.yml's groups into prometheusrule.yaml"
    # Alertmanager needs an absolute runbook URL: an overlay names where the docs are hosted
    base = "https://docs.example.org/showtell/operations.md"
    hosted = overlay("hosted", configMapGenerator=[{"name": "showtell-runbooks", "behavior": "merge",
                                                    "literals": [f"base={base}"]}])
    [hosted_rule] = [d for d in hosted if d["kind"] == "PrometheusRule"]
    urls = [r["annotations"]["runbook_url"] for g in hosted_rule["spec"]["groups"] for r in g["rules"]]
    assert urls == [base + "#" + r["annotations"]["runbook_url"].partition("#")[2]
                    for g in alerts["groups"] for r in g["rules"]]
    assert any('app_kubernetes_io_name="showtell"' in r["expr"] for r in alerts["groups"][0]["rules"])


def test_the_network_policy_admits_each_port_from_its_own_sources_only(documents, replicated):
    """TensorFlow's cluster port (2222, which runs any graph a peer sends) from this instance's
    training tasks in this namespace only; the evaluator's gRPC from this instance's pods and from
    labelled metrics clients; the metrics port from Prometheus; nothing from anyone else
    (SECURITY.md, "Network").  The TFJob path: test_deploy.py."""
    pods = {"trainer": replicated["worker"]["template"]["spec"]["template"]["metadata"]["labels"],
            "evaluator": replicated["evaluator"]["template"]["spec"]["template"]["metadata"]["labels"]}
    assert admitted_ports(documents, pods) == NETWORK
    # the check can fail: the policy as it was, every port open to any pod of the namespace
    [policy] = [d for d in documents if d["kind"] == "NetworkPolicy"]
    was = {**policy, "spec": {**policy["spec"], "ingress": [{"from": [{"podSelector": {}}]}]}}
    others = [d for d in documents if d["kind"] != "NetworkPolicy"]
    assert admitted_ports([*others, was], pods)["evaluator"] == {2222, 50051, 9400}


def test_the_split_evaluator_component_runs_indexed_parts_that_agree_and_serves_part_0(tmp_path: Path):
    """``components/split-evaluator`` added to an overlay: the evaluator Job runs N pods whose
    index (the Job controller's JOB_COMPLETION_INDEX) is their part of ``--shard I/N`` — with N
    the Job's own parallelism and completions; each pod's work dir is its own, the parts dir
    shared; the Service reaches index 0 only; everything else is the overlay's, and passes the
    JobSet CRD, the API schema and Pod Security "restricted"."""
    from showtell.commands.evaluate import argument_problem
    from showtell.evaluator.config import Shard

    documents = _with_component(tmp_path / "split", "split-evaluator")
    plain = render(K8S / "overlays" / "cpu")
    _schema_valid(documents)
    [jobset] = [d for d in documents if d["kind"] == "JobSet"]
    assert [jobset] == [d for d in plain if d["kind"] == "JobSet"]  # the training is untouched
    [evaluator] = [d for d in documents if d["kind"] == "Job"]
    [plain_evaluator] = [d for d in plain if d["kind"] == "Job"]
    job = evaluator["spec"]
    container = _container(as_replicated(evaluator))
    # the base's args, and the split's
    assert container["args"][:-6] == _container(as_replicated(plain_evaluator))["args"]
    parts = job["parallelism"]
    assert parts == job["completions"] == 2
    assert job["completionMode"] == "Indexed" and "completionMode" not in plain_evaluator["spec"]
    assert restricted_violations(job["template"]["spec"]) == []
    for index in range(parts):  # what the kubelet expands $(JOB_COMPLETION_INDEX) into
        args = parse_cli("showtell.commands.evaluate",
                         [a.replace("$(JOB_COMPLETION_INDEX)", str(index)) for a in container["args"]])
        assert (args.shard, str(args.parts_dir), args.policy) == (Shard(index, parts), "/parts", "all")
        assert argument_problem(args) is None and args.exit_when_trained
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/work"]["subPathExpr"] == "part-$(JOB_COMPLETION_INDEX)"  # each part's own work dir
    assert mounts["/parts"]["name"] == mounts["/work"]["name"] and mounts["/parts"]["subPath"] == "parts"
    [claim] = [d for d in documents if d["kind"] == "PersistentVolumeClaim"
               and d["metadata"]["name"] == "showtell-eval"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # the parts may run on different nodes
    [service] = [d for d in documents if d["kind"] == "Service" and "evaluator" in d["metadata"]["name"]]
    pod_labels = {**job["template"]["metadata"]["labels"], "batch.kubernetes.io/job-completion-index": "0"}
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["selector"]["batch.kubernetes.io/job-completion-index"] == "0"
    # the TFJob path has the same evaluator Job, so the same component splits it there
    tfjob_path = _with_component(tmp_path / "tfjob", "split-evaluator", base=K8S / "tfjob")
    [on_tfjob] = [d for d in tfjob_path if d["kind"] == "Job"]
    assert on_tfjob["spec"] == evaluator["spec"]
