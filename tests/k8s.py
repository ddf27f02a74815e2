"""The Kubernetes manifests as a cluster would get them (``kubectl kustomize`` of an overlay), the
Pod Security "restricted" profile's rules, a NetworkPolicy as a network plugin applies it, and the
operators' own files (``tests/crds/upstream``) — shared by the manifest tests and checkov's."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import yaml

from tests import system_packages
from tests.helpers import ROOT

OVERLAYS = ("cpu", "gpu")


def render(directory: Path) -> list[dict]:
    """``kubectl kustomize`` of ``directory``: the objects ``kubectl apply -k`` would send."""
    if not shutil.which("kubectl"):
        system_packages.require(system_packages.unavailable({"kubectl": "kubernetes-client"}))
        system_packages.ensure({"kubectl": "kubernetes-client"})
    result = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True,
                            timeout=120)
    # Debian's kubernetes-client is kubectl 1.20, whose Kustomize 2.0 reads neither `patches:` nor
    # `resources: [../../base]`: a current kubectl (Kustomize ≥ 4) is needed.
    assert result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


# Pod Security Standards, "restricted" (kubernetes.io/docs/concepts/security/pod-security-standards):
# what the admission controller checks, for every pod and container of a rendered overlay.
def restricted_violations(pod: dict) -> list[str]:
    problems = []
    pod_security = pod.get("securityContext", {})
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            problems.append(f"{key}")
    problems += [f"volume {v['name']}: not an allowed type" for v in pod.get("volumes", [])
                 if not set(v) - {"name"} <= {"configMap", "persistentVolumeClaim", "emptyDir", "secret",
                                              "projected", "downwardAPI", "csi", "ephemeral"}]
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        name, security = container["name"], container.get("securityContext", {})
        merged = {**pod_security, **security}
        if not merged.get("runAsNonRoot"):
            problems.append(f"{name}: runAsNonRoot")
        if merged.get("runAsUser") == 0:
            problems.append(f"{name}: runAsUser 0")
        if security.get("privileged"):
            problems.append(f"{name}: privileged")
        if security.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation must be false")
        capabilities = security.get("capabilities", {})
        added = set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}
        if "ALL" not in capabilities.get("drop", []) or added:
            problems.append(f"{name}: capabilities must drop ALL")
        if merged.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile RuntimeDefault or Localhost")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            problems.append(f"{name}: hostPort")
    return problems


# The custom resources' schemas, as the CRDs at the versions the docs install validate them
# (tests/crds/: each file says its release and where its fields come from).
CRDS = Path(__file__).parent / "crds"


def _crd_schemas() -> dict[str, tuple[dict, str]]:
    """kind → (JSON schema, the Kubernetes minor whose schemas its embedded types come from)."""
    schemas = {}
    for path in sorted(CRDS.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())
        for kind, schema in spec["schemas"].items():
            schemas[kind] = (schema, spec["kubernetes"])
    return schemas


CUSTOM_KINDS = frozenset(_crd_schemas())


def crd_violations(doc: dict) -> list[str]:
    """What the API server, with the CRD of the version the docs install, refuses in ``doc`` (a
    rendered custom object) under strict field validation: one line per error, empty if none."""
    import json

    import jsonschema
    import kubernetes_validate
    from referencing import Registry, Resource

    schema, version = _crd_schemas()[doc["kind"]]
    package = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    definitions = json.loads((package / f"v{version}.0-local-strict" / "_definitions.json").read_text())
    registry = Resource.from_contents(definitions) @ Registry()
    # the "$ref"s are relative to the Kubernetes schemas' own base ("/api/_definitions.json")
    validator = jsonschema.Draft202012Validator({**schema, "$id": "https://kubernetes.io/crd.json"},
                                                registry=registry)
    return sorted(f"{doc['kind']} {'.'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(doc))


def admits(policy: dict, namespace: str, source: tuple[str, dict[str, str]], port: int) -> bool:
    """NetworkPolicy's ingress rules as the network plugin applies them to a pod in ``namespace``:
    a connection from ``source`` (its namespace, its pod labels) to ``port`` is admitted when some
    rule's ports include it (none: all) and some peer of its ``from`` selects the source (none:
    any source).  Selectors here use matchLabels only."""
    def selects(selector: dict | None, labels: dict[str, str]) -> bool:
        return selector is not None and selector.get("matchLabels", {}).items() <= labels.items()

    source_namespace, pod_labels = source
    for rule in policy["spec"]["ingress"]:
        if "ports" in rule and port not in {p["port"] for p in rule["ports"]}:
            continue
        if "from" not in rule:
            return True
        for peer in rule["from"]:
            namespace_labels = {"kubernetes.io/metadata.name": source_namespace}
            in_namespace = (selects(peer["namespaceSelector"], namespace_labels)
                            if "namespaceSelector" in peer else source_namespace == namespace)
            if in_namespace and ("podSelector" not in peer or selects(peer["podSelector"], pod_labels)):
                return True
    return False


def admitted_ports(documents: list[dict], pods: dict[str, dict[str, str]]) -> dict[str, set[int]]:
    """Which of showtell's ports the rendered NetworkPolicy admits from each kind of source: the
    path's own pods (``pods``: name → labels, in its namespace), the same labels in another
    namespace, Prometheus, a metrics client, and strangers in and out of the namespace."""
    [policy] = [d for d in documents if d["kind"] == "NetworkPolicy"]
    namespace = policy["metadata"]["namespace"]
    assert policy["spec"]["podSelector"] == {} and policy["spec"]["policyTypes"] == ["Ingress"]
    sources = {name: (namespace, labels) for name, labels in pods.items()}
    sources |= {"trainer labels, another namespace": ("elsewhere", pods["trainer"]),
                "prometheus": ("monitoring", {"app.kubernetes.io/name": "prometheus"}),
                "metrics client": ("dashboards", {"showtell.io/metrics-client": "true"}),
                "stranger, same namespace": (namespace, {"app": "web"}),
                "stranger": ("default", {"app": "web"})}
    return {name: {p for p in (2222, 50051, 9400) if admits(policy, namespace, source, p)}
            for name, source in sources.items()}


NETWORK = {"trainer": {2222, 50051}, "evaluator": {50051}, "trainer labels, another namespace": set(),
           "prometheus": {9400}, "metrics client": {50051}, "stranger, same namespace": set(),
           "stranger": set()}


def upstream_text(name: str) -> str:
    """A file of ``tests/crds/upstream`` as its release has it."""
    data = (ROOT / "tests" / "crds" / "upstream" / name).read_bytes()
    return (gzip.decompress(data) if name.endswith(".gz") else data).decode()
