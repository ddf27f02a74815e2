"""``tests/crds/*.yaml`` transcribe the operators' CRDs at the releases the docs install; here each
is read against the CRD itself (``tests/crds/upstream/``: the release's file, byte for byte, as
its git blob id shows), so a field a transcription accepts is one that release has."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from tests.helpers import ROOT
from tests.k8s import upstream_text

CRDS = ROOT / "tests" / "crds"
UPSTREAM = CRDS / "upstream"
SOURCES = yaml.safe_load((UPSTREAM / "sources.yaml").read_text())

# (transcription, its kind) → (the release's CRD file, the served version)
TRANSCRIBED = {
    ("jobset-v0.8.1.yaml", "JobSet"): ("jobset-v0.8.1.yaml.gz", "v1alpha2"),
    ("tfjob-v1.9.3.yaml", "TFJob"): ("tfjob-v1.9.3.yaml.gz", "v1"),
    ("prometheus-operator-v0.82.2.yaml", "PodMonitor"):
        ("prometheus-operator-v0.82.2-podmonitors.yaml.gz", "v1"),
    ("prometheus-operator-v0.82.2.yaml", "PrometheusRule"):
        ("prometheus-operator-v0.82.2-prometheusrules.yaml.gz", "v1"),
}


def _load(text: str):
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.mark.parametrize("row", SOURCES, ids=[row["file"] for row in SOURCES])
def test_each_upstream_file_is_its_releases_own(row: dict):
    data = upstream_text(row["file"]).encode()
    assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == row["blob"], row["file"]
    assert row["tag"] in row["file"]  # the transcription beside it names the same release


def fields(schema: dict, at: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every field path a schema names (``[]`` for an array's items), not into a ``$ref``: the
    embedded Kubernetes types are read from Kubernetes' own schemas."""
    if not isinstance(schema, dict) or "$ref" in schema:
        return set()
    found: set[tuple[str, ...]] = set()
    for name, sub in (schema.get("properties") or {}).items():
        found |= {(*at, name)} | fields(sub, (*at, name))
    if isinstance(schema.get("items"), dict):
        found |= fields(schema["items"], (*at, "[]"))
    return found


@pytest.mark.parametrize(("transcription", "kind"), sorted(TRANSCRIBED),
                         ids=[kind for _, kind in sorted(TRANSCRIBED)])
def test_each_transcription_accepts_only_fields_its_release_has(transcription: str, kind: str):
    ours = yaml.safe_load((CRDS / transcription).read_text())["schemas"][kind]
    crd_file, version = TRANSCRIBED[(transcription, kind)]
    crd = _load(upstream_text(crd_file))
    assert crd["spec"]["names"]["kind"] == kind
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    theirs = fields(served["schema"]["openAPIV3Schema"])
    assert ("spec",) in theirs and len(theirs) > 10
    later = sorted(".".join(path) for path in fields(ours) - theirs)
    assert not later, f"{transcription} accepts in {kind} what {crd_file} does not have: {later}"
