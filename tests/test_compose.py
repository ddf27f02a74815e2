"""The compose files, statically (``docker-compose config``) and as a real running stack.

The real stack (``docker`` mark): a private ``dockerd`` (``tests/docker_engine.py``), a
debootstrap base image, both images built by ``docker-compose build`` from a copy of the
checkout, ``docker-compose up -d`` on the real ``docker-compose.yml``.  The test's env file
changes only what the issue allows — the base image and the trainer's TensorFlow package
(``tensorflow-cpu``: a CPU build here), the size of the input (fewer, 75 px pictures; 8
evaluation examples; batch 8) and the checkpoint interval, so training steps between
checkpoints are few — plus free host ports.  Then, from the host: metrics over gRPC, the
read-only checkpoint volume, TensorBoard's two runs, ``restart`` and a real crash (SIGKILL of
the trainer's process) both resuming at the newest checkpoint, the standalone evaluator
(``deploy/compose.evaluator.yml``) over TLS with a token, ``stop`` → exit 0, ``down -v`` →
nothing left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, free_ports, wait_for
from tests.test_deploy import _parse

COMPOSE_FILES = {
    "base": ["docker-compose.yml"],
    "gpu": ["docker-compose.yml", "deploy/compose.gpu.yml"],
    "cluster": ["docker-compose.yml", "deploy/compose.cluster.yml"],
    "evaluator": ["deploy/compose.evaluator.yml"],
}
ENV_EXAMPLES = {"base": ".env.example", "evaluator": "deploy/evaluator.env.example"}
_DEFAULT = re.compile(r"\$\{(SHOWTELL_\w+):-([^}]*)\}")
_REQUIRED = re.compile(r"\$\{(SHOWTELL_\w+):\?[^}]*\}")


def _require_docker_tools() -> None:
    """docker-compose (and the engine's tools) here, installed if needed; skip with the reason
    where they cannot be had — except when SHOWTELL_REQUIRE_DOCKER=1 (.ci/run), which fails."""
    from tests import docker_engine

    reason = docker_engine.unavailable()
    if reason is None:
        docker_engine.ensure_tools()
        return
    if os.environ.get("SHOWTELL_REQUIRE_DOCKER") == "1":
        pytest.fail(f"SHOWTELL_REQUIRE_DOCKER=1 but no Docker engine can be had: {reason}")
    pytest.skip(f"no Docker engine: {reason}")


def _env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def _config(files: list[str], env: dict[str, str], cwd: Path = ROOT) -> dict:
    """``docker-compose config`` (interpolated and merged) as a dict."""
    cmd = ["docker-compose"]
    for f in files:
        cmd += ["-f", f]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SHOWTELL_")} | env
    result = subprocess.run([*cmd, "config"], cwd=cwd, env=full_env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    quiet = subprocess.run([*cmd, "config", "-q"], cwd=cwd, env=full_env, capture_output=True, text=True,
                           timeout=120)
    assert quiet.returncode == 0 and not quiet.stdout, quiet.stderr
    return yaml.safe_load(result.stdout)


STANDALONE_ENV = {"SHOWTELL_CHECKPOINTS": "/mnt/nfs/showtell/model", "SHOWTELL_DATA_DIR": "/srv/showtell-data"}


@pytest.fixture(scope="module")
def compose_tools() -> None:
    _require_docker_tools()


@pytest.mark.parametrize("variant", sorted(COMPOSE_FILES))
def test_compose_config_accepts_every_file(compose_tools, variant: str):
    env = STANDALONE_ENV if variant == "evaluator" else {}
    config = _config(COMPOSE_FILES[variant], env)
    assert "evaluator" in config["services"]
    if variant == "evaluator":
        bad = subprocess.run(["docker-compose", "-f", COMPOSE_FILES["evaluator"][0], "config", "-q"], cwd=ROOT,
                             env={k: v for k, v in os.environ.items() if not k.startswith("SHOWTELL_")},
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode != 0 and "set SHOWTELL_CHECKPOINTS" in bad.stderr  # the check can fail


def test_env_example_lists_every_setting_with_the_compose_default():
    for group, example in ENV_EXAMPLES.items():
        documented = _env_file(ROOT / example)
        used: dict[str, str] = {}
        for name in {f for f in COMPOSE_FILES[group] + (COMPOSE_FILES["gpu"] + COMPOSE_FILES["cluster"]
                                                         if group == "base" else [])}:
            text = (ROOT / name).read_text()
            for var, default in _DEFAULT.findall(text):
                assert used.setdefault(var, default) == default, f"{name}: {var} has two defaults"
            for var in _REQUIRED.findall(text):
                used.setdefault(var, "")
        assert set(used) == set(documented), f"{example} vs compose files: {set(used) ^ set(documented)}"
        for var, default in used.items():
            assert documented[var] == default, f"{example}: {var}={documented[var]} but compose says {default}"


def _trainer_command(config: dict) -> list[str]:
    return config["services"]["trainer"]["command"]


def test_overrides_change_only_the_strategy_and_resources(compose_tools):
    base = _config(COMPOSE_FILES["base"], {})
    gpu = _config(COMPOSE_FILES["gpu"], {})
    cluster = _config(COMPOSE_FILES["cluster"], {})
    for variant, config, strategy in (("gpu", gpu, "mirrored"), ("cluster", cluster, "parameter_server")):
        command = _trainer_command(config)
        i = command.index("--strategy")
        assert command[i + 1] == strategy
        assert command[:i + 1] + command[i + 2:] == [a for j, a in enumerate(_trainer_command(base))
                                                     if j != _trainer_command(base).index("--strategy") + 1]
    [device] = gpu["services"]["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]


def test_services_run_commands_our_clis_accept(compose_tools):
    from trainer.cluster import from_tf_config

    base = _config(COMPOSE_FILES["base"], {})
    services = base["services"]
    assert services["data"]["entrypoint"] == ["showtell", "data", "synthetic"]
    data = _parse("captioning.data_cli", ["synthetic", *services["data"]["command"]])
    assert data.if_missing and str(data.out) == "/data/synthetic"
    trainer = _parse("trainer.cli", services["trainer"]["command"])
    assert str(trainer.model_dir) == "/checkpoints/model" and trainer.strategy == "auto"
    evaluator = _parse("evaluator.cli", services["evaluator"]["command"])
    assert str(evaluator.model_dir) == "/checkpoints/model" and evaluator.host == "0.0.0.0"
    assert "checkpoints:/checkpoints:ro" in services["evaluator"]["volumes"]
    assert "checkpoints:/checkpoints:rw" in services["trainer"]["volumes"]
    assert services["evaluator"]["ports"] == ["127.0.0.1:50051:50051/tcp"]  # loopback unless told otherwise
    assert services["tensorboard"]["depends_on"]["evaluator"]["condition"] == "service_healthy"

    cluster = _config(COMPOSE_FILES["cluster"], {})["services"]
    roles = {}
    for name in ("trainer", "ps-0", "worker-0", "worker-1"):
        spec = from_tf_config(cluster[name]["environment"]["TF_CONFIG"])
        roles[name] = (spec.task_type, spec.task_index)
        hosts = {h.split(":")[0] for hs in spec.jobs.values() for h in hs}
        assert hosts == {"trainer", "ps-0", "worker-0", "worker-1"}  # service names on the network
        assert _parse("trainer.cli", cluster[name]["command"]).strategy == "parameter_server"
    assert roles == {"trainer": ("chief", 0), "ps-0": ("ps", 0), "worker-0": ("worker", 0),
                     "worker-1": ("worker", 1)}

    standalone = _config(COMPOSE_FILES["evaluator"], STANDALONE_ENV)["services"]["evaluator"]
    args = _parse("evaluator.cli", standalone["command"])
    assert args.poll_secs > 0  # network filesystems deliver no inotify events
    assert any(v.startswith("/mnt/nfs/showtell/model:/checkpoints") and v.endswith(":ro")
               for v in standalone["volumes"])
