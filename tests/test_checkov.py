"""checkov on ``deploy/``: the Kubernetes overlays as ``kubectl kustomize`` renders them (the
JobSet's replicated Jobs as Jobs, which checkov knows), the TFJob (rendered too) and the Dockerfile
(both targets) pass every check but those ``deploy/checkov.yaml`` skips, each with its reason beside it.

checkov (≈ 290 MB with what it needs, and pins of its own) is installed into a venv of its own,
not the project's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT
from tests.k8s import OVERLAYS, render

CHECKOV = "checkov==3.3.30"


@pytest.fixture(scope="module")
def checkov(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("checkov-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", CHECKOV], capture_output=True,
                             text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]
    return venv / "bin" / "checkov"


def _inputs(directory: Path) -> Path:
    objects = []
    for overlay in OVERLAYS:
        for doc in render(ROOT / "deploy" / "k8s" / "overlays" / overlay):
            if doc["kind"] == "JobSet":  # a custom resource checkov reads no pods from: its Jobs
                objects += [{"apiVersion": "batch/v1", "kind": "Job",
                             "metadata": {"name": f"{overlay}-{rj['name']}", "namespace": "showtell"},
                             "spec": rj["template"]["spec"]} for rj in doc["spec"]["replicatedJobs"]]
            elif doc["kind"] != "Namespace" or overlay == OVERLAYS[0]:
                doc["metadata"]["name"] = f"{overlay}-{doc['metadata']['name']}"
                objects.append(doc)
    directory.mkdir()
    (directory / "rendered.yaml").write_text(yaml.safe_dump_all(objects))
    (directory / "tfjob.yaml").write_text(yaml.safe_dump_all(render(ROOT / "deploy" / "k8s" / "tfjob")))
    shutil.copy2(ROOT / "deploy" / "Dockerfile", directory / "Dockerfile")
    return directory


@pytest.mark.slow
def test_deploy_passes_checkov_but_the_justified_skips(checkov: Path, tmp_path: Path):
    inputs = _inputs(tmp_path / "deploy")
    result = subprocess.run(
        [str(checkov), "-d", str(inputs), "--config-file", str(ROOT / "deploy" / "checkov.yaml"),
         "--framework", "kubernetes", "dockerfile", "--output", "json"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"})
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = {r["check_type"]: [(c["check_id"], c["resource"]) for c in r["results"]["failed_checks"]]
              for r in reports}
    assert result.returncode == 0 and not any(failed.values()), failed
    assert {r["check_type"] for r in reports} == {"kubernetes", "dockerfile"}
    # The pods were looked at: seccomp (CKV_K8S_31) passed on every Job and on the TFJob's pods
    passed = {(c["check_id"], c["resource"]) for r in reports for c in r["results"]["passed_checks"]}
    jobs = {f"Job.showtell.{o}-{name}" for o in OVERLAYS
            for name in ("data", "chief", "ps", "worker", "showtell-evaluator")}  # the last a Job of its own
    assert {resource for check, resource in passed if check == "CKV_K8S_31"} >= jobs
    skipped = yaml.safe_load((ROOT / "deploy" / "checkov.yaml").read_text())["skip-check"]
    lines = (ROOT / "deploy" / "checkov.yaml").read_text().splitlines()
    for check in skipped:  # each skip has its reason in the comment above it
        above = lines[lines.index(f"  - {check}") - 1]
        assert above.lstrip().startswith("#"), check
