"""The compose files, statically (``docker-compose config``) and as a real running stack.

The real stack (``docker`` mark, run last): a private ``dockerd``, a debootstrap base image and
both images built by ``docker-compose build`` from a copy of the checkout — all started in the
background under ``nice 19`` while the other tests run (``tests/docker_engine.py``,
``tests/session_hooks.py``) — then ``docker-compose up -d`` on the real ``docker-compose.yml``. The
test's env file changes only what the issue allows: the base image and the trainer's TensorFlow
package (``tensorflow-cpu``: a CPU build here), the size of the input (fewer, 75 px pictures; 8
evaluation examples; batch 8), METEOR off (``SHOWTELL_METEOR``: its JVM is ≈ 7 CPU-s per evaluator
start), the encoder's pretraining (5 s) and the checkpoint interval, so
training steps between checkpoints are few — plus free host ports. Then, from the host: the
pretrain service's encoder used by phase 1, metrics over gRPC, the read-only checkpoint volume,
TensorBoard's two runs, ``restart`` and a real crash (SIGKILL of the trainer's process) both
resuming at the newest checkpoint, ``stop trainer`` → it saves and exits 143 (stopped, not
finished), the standalone evaluator (``deploy/compose.evaluator.yml``) over TLS with a token on
the model dir it left, ``stop`` → the services 0, ``down -v`` → nothing left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, parse_cli, wait_for
from tests.measure import free_ports
from tests.session_hooks import UNWAITED_CPU_KEY

RECIPE = "/etc/showtell/recipe.yaml"


def _trainer(service: dict):
    """A compose trainer service's flags as `showtell train` reads them: its command, with the
    recipe file it mounts (``SHOWTELL_RECIPE``) and the defaults its environment gives
    (``SHOWTELL_STRATEGY``)."""
    from unittest import mock

    command = list(service["command"])
    if RECIPE in command:
        [source] = [v.split(":")[0] for v in service["volumes"] if v.split(":")[1:2] == [RECIPE]]
        command[command.index(RECIPE)] = source
    environment = {k: str(v) for k, v in (service.get("environment") or {}).items()}
    with mock.patch.dict(os.environ, environment):
        return parse_cli("showtell.commands.train", command)

COMPOSE_FILES = {
    "base": ["docker-compose.yml"],
    "gpu": ["docker-compose.yml", "deploy/compose.gpu.yml"],
    "cluster": ["docker-compose.yml", "deploy/compose.cluster.yml"],
    "evaluator": ["deploy/compose.evaluator.yml"],
    "split": ["docker-compose.yml", "deploy/compose.split.yml"],
}
# One worker runs this module, first (tests/session_hooks.py): it installs the engine's tools with
# apt and builds the images, which must not happen twice at once.
pytestmark = pytest.mark.xdist_group("docker")
ENV_EXAMPLES = {"base": ".env.example", "evaluator": "deploy/evaluator.env.example"}
_DEFAULT = re.compile(r"\$\{((?:SHOWTELL|MLFLOW)_\w+):-([^}]*)\}")  # MLflow's own: MLFLOW_TRACKING_URI
_REQUIRED = re.compile(r"\$\{(SHOWTELL_\w+):\?[^}]*\}")


def _require_docker_tools() -> None:
    """docker-compose (and the engine's tools) here, installed if needed; skip with the reason
    where they cannot be had — except under CI, which fails (``system_packages.require``)."""
    from tests import docker_engine, system_packages

    reason = docker_engine.unavailable()
    system_packages.require(reason and f"no Docker engine: {reason}")
    docker_engine.ensure_tools()


def _env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


_CONFIGS: dict[tuple, str] = {}


def _config(files: list[str], env: dict[str, str], cwd: Path = ROOT, env_file: str | None = None) -> dict:
    """``docker-compose config`` (interpolated and merged) as a dict — a fresh one each call, but
    docker-compose (≈ 1 s a start) runs once per distinct input: the files' and env file's
    contents, the environment and the directory."""
    contents = tuple((Path(cwd) / name).read_text() for name in [*files, *([env_file] if env_file else [])])
    key = (tuple(files), tuple(sorted(env.items())), str(cwd), env_file, contents)
    if key not in _CONFIGS:
        _CONFIGS[key] = _run_config(files, env, cwd, env_file)
    return yaml.safe_load(_CONFIGS[key])


def _run_config(files: list[str], env: dict[str, str], cwd: Path, env_file: str | None) -> str:
    cmd = ["docker-compose", *(["--env-file", env_file] if env_file else [])]
    for f in files:
        cmd += ["-f", f]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SHOWTELL_")} | env
    result = subprocess.run([*cmd, "config"], cwd=cwd, env=full_env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    quiet = subprocess.run([*cmd, "config", "-q"], cwd=cwd, env=full_env, capture_output=True, text=True,
                           timeout=120)
    assert quiet.returncode == 0 and not quiet.stdout, quiet.stderr
    return result.stdout


STANDALONE_ENV = {"SHOWTELL_CHECKPOINTS": "/mnt/nfs/showtell/model",
                  "SHOWTELL_DATA_DIR": "/srv/showtell-data"}


@pytest.fixture(scope="module")
def compose_tools() -> None:
    _require_docker_tools()


@pytest.mark.parametrize("variant", sorted(COMPOSE_FILES))
def test_compose_config_accepts_every_file(compose_tools, variant: str):
    env = STANDALONE_ENV if variant == "evaluator" else {}
    config = _config(COMPOSE_FILES[variant], env)
    assert "evaluator" in config["services"]
    if variant == "evaluator":
        bad = subprocess.run(["docker-compose", "-f", COMPOSE_FILES["evaluator"][0], "config", "-q"],
                             cwd=ROOT,
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
            assert documented[var] == default, f"{example}: {var}={documented[var]}, compose: {default}"


def test_no_compose_file_carries_the_obsolete_version_key():
    """Compose v2 warns "the attribute `version` is obsolete" on every command; 1.29 (here)
    accepts files without it (test_compose_config_accepts_every_file)."""
    for name in {f for files in COMPOSE_FILES.values() for f in files}:
        assert "version" not in yaml.safe_load((ROOT / name).read_text()), name


PRESETS = {"coco-phase1": {"train_inception": False, "inception_learning_rate": None, "steps": 1_000_000},
           "coco-phase2": {"train_inception": True, "inception_learning_rate": 0.0005, "steps": 3_000_000}}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_render_the_im2txt_recipe_as_commands_our_clis_accept(compose_tools, preset: str):
    from showtell.commands.train import argument_problem

    env_file = f"deploy/presets/{preset}.env"
    assert set(_env_file(ROOT / env_file)) <= set(_env_file(ROOT / ".env.example")), "unknown setting"
    services = _config(COMPOSE_FILES["gpu"], {}, env_file=env_file)["services"]
    recipe = ROOT / "deploy" / "recipes" / f"{preset}.yaml"
    assert f"{recipe}:{RECIPE}:ro" in services["trainer"]["volumes"]  # the preset's recipe file
    trainer = _trainer(services["trainer"])
    assert trainer.config == [recipe]
    assert argument_problem(trainer) is None
    # im2txt: SGD at 2.0 halved every 8 epochs, batch 32, ImageNet Inception v3 on COCO records.
    assert (trainer.optimizer, trainer.learning_rate, trainer.epochs_per_decay, trainer.batch_size) == \
        ("sgd", 2.0, 8.0, 32)
    assert trainer.inception_weights.endswith("inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5")
    assert str(trainer.data) == "/data/coco" and trainer.strategy == "mirrored"
    for key, value in PRESETS[preset].items():
        assert getattr(trainer, key) == value, key
    evaluator = parse_cli("showtell.commands.evaluate", services["evaluator"]["command"])
    assert (evaluator.export_best, evaluator.export_keep, evaluator.beam_size) == ("cider:max", 3, 3)
    assert "/srv/showtell:/data:ro" in services["trainer"]["volumes"]
    # Phase 1 builds the feature cache: not in the read-only data, on the trainer's own volume.
    assert trainer.cache_dir.startswith("/checkpoints/") and "checkpoints:/checkpoints:rw" in \
        services["trainer"]["volumes"]


def test_defaults_leave_phase_2_early_stop_and_export_to_their_flags(compose_tools):
    """The base stack passes every recipe flag, with values meaning "as if not given"."""
    from showtell.commands.train import argument_problem

    services = _config(COMPOSE_FILES["base"], {})["services"]
    trainer = _trainer(services["trainer"])
    assert argument_problem(trainer) is None
    assert (trainer.train_inception, trainer.inception_learning_rate, trainer.stop_when) == (None, None, "")
    assert (trainer.mixed_precision, trainer.jit_compile, trainer.steps_per_loop) == ("off", False, None)
    assert not parse_cli("showtell.commands.evaluate", services["evaluator"]["command"]).export_best


def test_a_recipe_of_ones_own_changes_the_trainer_and_nothing_else(compose_tools, tmp_path: Path):
    """A team's recipe file (SHOWTELL_RECIPE): its settings reach the trainer; the places the
    compose file wires (data, model dir, evaluator) stay the stack's."""
    from showtell.commands.train import argument_problem

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text((ROOT / "deploy/recipes/demo.yaml").read_text().replace('stop-when: ""',
                                                                              'stop-when: "cider>=0.9"')
                      + "model-dir: /elsewhere\n")
    services = _config(COMPOSE_FILES["base"], {"SHOWTELL_RECIPE": str(recipe)})["services"]
    early = _trainer(services["trainer"])
    assert argument_problem(early) is None
    assert (early.stop_when, early.patience, early.evaluator) == ("cider>=0.9", 1, "evaluator:50051")
    assert str(early.model_dir) == "/checkpoints/model"  # the command's flag wins over the file
    base = _config(COMPOSE_FILES["base"], {})["services"]
    assert {k: v for k, v in services.items() if k != "trainer"} == \
        {k: v for k, v in base.items() if k != "trainer"}


def test_the_monitoring_profile_scrapes_what_the_services_serve(compose_tools):
    """``--profile monitoring``: Prometheus scrapes each service's --prometheus-port on the compose
    network (not published), with the rules promtool checks (tests/test_prometheus.py)."""
    services = _config(COMPOSE_FILES["base"], {})["services"]
    trainer = _trainer(services["trainer"])
    evaluator = parse_cli("showtell.commands.evaluate", services["evaluator"]["command"])
    scrape = yaml.safe_load((ROOT / "deploy" / "monitoring" / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in scrape["scrape_configs"]}
    pretrain = parse_cli("showtell.commands.pretrain", services["pretrain"]["command"])
    assert targets == {"showtell-evaluator": [f"evaluator:{evaluator.prometheus_port}"],
                       "showtell-trainer": [f"trainer:{trainer.prometheus_port}"],
                       "showtell-pretrain": [f"pretrain:{pretrain.prometheus_port}"]}
    assert trainer.prometheus_host == evaluator.prometheus_host == pretrain.prometheus_host == "0.0.0.0"
    for name in ("pretrain", "trainer", "evaluator"):
        assert all(str(trainer.prometheus_port) not in port for port in services[name].get("ports", []))
    prometheus = services["prometheus"]
    assert prometheus["profiles"] == ["monitoring"] and not prometheus["image"].endswith(":latest")
    assert f"{ROOT / 'deploy' / 'monitoring'}:/etc/prometheus:ro" in prometheus["volumes"]
    assert prometheus["ports"] == ["127.0.0.1:9090:9090/tcp"]
    assert scrape["rule_files"] == ["alerts.yml"] and (ROOT / "deploy" / "monitoring" / "alerts.yml").exists()
    # Grafana beside it, its data source that Prometheus, its dashboard the one the tests query
    # (tests/test_prometheus.py runs every panel's PromQL against a real Prometheus)
    grafana = services["grafana"]
    assert grafana["profiles"] == ["monitoring"] and not grafana["image"].endswith(":latest")
    assert grafana["ports"] == ["127.0.0.1:3000:3000/tcp"]
    provisioning = ROOT / "deploy" / "monitoring" / "grafana" / "provisioning"
    assert f"{provisioning}:/etc/grafana/provisioning:ro" in grafana["volumes"]
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["url"] == "http://prometheus:9090" and "9090:9090/tcp" in prometheus["ports"][0]
    [provider] = yaml.safe_load((provisioning / "dashboards" / "showtell.yml").read_text())["providers"]
    assert f"{ROOT / 'deploy' / 'monitoring' / 'grafana' / 'dashboards'}:{provider['options']['path']}:ro" \
        in grafana["volumes"]


def test_the_tracking_profile_serves_what_the_services_send_to(compose_tools):
    """``--profile tracking`` with ``MLFLOW_TRACKING_URI=http://mlflow:5000``: both services send to
    the profile's server, which answers that Host header; without the variable, neither sends."""
    uri = "http://mlflow:5000"
    services = _config(COMPOSE_FILES["base"], {"MLFLOW_TRACKING_URI": uri})["services"]
    assert services["trainer"]["environment"]["MLFLOW_TRACKING_URI"] == uri
    assert services["evaluator"]["environment"]["MLFLOW_TRACKING_URI"] == uri
    server = services["mlflow"]
    assert server["profiles"] == ["tracking"] and server["ports"] == ["127.0.0.1:5000:5000/tcp"]
    entrypoint = re.search(r"^ENTRYPOINT (\[.*?\])$", (ROOT / "deploy" / "Dockerfile").read_text().split(
        "AS tracking")[1], re.M | re.S).group(1)
    argv = json.loads(entrypoint.replace("\\\n", ""))
    allowed = argv[argv.index("--allowed-hosts") + 1].split(",")
    assert "mlflow:5000" in allowed and argv[argv.index("--port") + 1] == "5000"
    off = _config(COMPOSE_FILES["base"], {})["services"]
    assert off["trainer"]["environment"]["MLFLOW_TRACKING_URI"] == ""  # empty: off (tests/test_tracking.py)


DIGEST = re.compile(r"python:3\.11-slim@sha256:[0-9a-f]{64}")


def test_images_are_built_here_from_a_pinned_base_with_labels_and_never_latest(compose_tools):
    """Base pinned by digest (the same everywhere), built not pulled, no host network in builds
    (BuildKit refuses it unless entitled), OCI labels, and no ``latest`` anywhere."""
    dockerfile = ROOT / "deploy" / "Dockerfile"
    named = {ROOT / ".env.example", ROOT / "deploy" / "evaluator.env.example", dockerfile,
             *(ROOT / f for files in COMPOSE_FILES.values() for f in files)}
    pins = {pin for path in named for pin in DIGEST.findall(path.read_text())}
    assert len(pins) == 1, pins
    for path in [*named, *(ROOT / "deploy" / "k8s").rglob("*.yaml")]:
        settings = "\n".join(line.split("#")[0] for line in path.read_text().splitlines())  # not prose
        assert not re.search(r":latest\b|=latest\b|-latest\}", settings), path
    text = dockerfile.read_text()
    assert f"ARG BASE_IMAGE={next(iter(pins))}" in text
    targets = {stage: body for stage, body in re.findall(r"^FROM \S+ AS (\w+)\n(.*?)(?=^FROM |\Z)", text,
                                                         re.M | re.S)}
    assert {"deps", "trainer", "evaluator"} <= set(targets), set(targets)
    assert re.search(r"^FROM base AS tracking$", text, re.M)  # MLflow's server: none of showtell's deps
    for label in ("source", "version", "revision", "licenses", "base.name"):
        assert f"org.opencontainers.image.{label}=" in targets["tracking"], label
    for target in ("trainer", "evaluator"):  # each on the one shared dependency stage, labelled
        assert re.search(rf"^FROM deps AS {target}$", text, re.M), target
        for label in ("source", "version", "revision", "licenses", "base.name"):
            assert f"org.opencontainers.image.{label}=" in targets[target], (target, label)
    # One file at a time: docker-compose 1.29 drops pull_policy when it merges files (v2 keeps it).
    for variant in ("base", "evaluator"):
        [file] = COMPOSE_FILES[variant]
        services = _config([file], STANDALONE_ENV if variant == "evaluator" else {})["services"]
        for name, service in services.items():
            if "build" in service:
                assert service.get("pull_policy") == "build", (variant, name)
                assert service["build"]["dockerfile"] == "deploy/Dockerfile", (variant, name)
                assert service["build"]["target"] == {"evaluator": "evaluator", "mlflow": "tracking"}.get(
                    name, "trainer")
                assert "network" not in service["build"], (variant, name)
                assert set(service["build"]["args"]) >= {"VERSION", "REVISION", "SOURCE", "BASE_IMAGE"}


def test_the_pin_script_rewrites_every_place_the_base_is_named(tmp_path: Path):
    """``deploy/pin-base-image.sh`` against a stand-in ``docker`` (no registry here) answering
    as ``docker image inspect`` does: the new digest everywhere, the old one nowhere."""
    import shutil

    new = "f" * 64
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    pinned = [n for n in tracked if DIGEST.search((ROOT / n).read_text(errors="replace"))]
    assert "deploy/Dockerfile" in pinned and "deploy/compose.split.yml" in pinned  # every file naming it
    for name in ("deploy/pin-base-image.sh", *pinned):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    stand_in = tmp_path / "bin" / "docker"
    stand_in.parent.mkdir()
    stand_in.write_text(f"#!/bin/sh\n[ \"$1\" = image ] && echo python@sha256:{new}\nexit 0\n")
    stand_in.chmod(0o755)
    result = subprocess.run([str(tmp_path / "deploy" / "pin-base-image.sh")], capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{stand_in.parent}:{os.environ['PATH']}"}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"base image pinned: python:3.11-slim@sha256:{new}" in result.stdout
    for path in (p for p in tmp_path.rglob("*") if p.is_file() and p.parent.name != "bin"
                 and p.name != "pin-base-image.sh"):
        pins = set(DIGEST.findall(path.read_text()))
        assert pins == {f"python:3.11-slim@sha256:{new}"}, (path, pins)


def test_overrides_change_only_what_differs(compose_tools):
    """GPU and cluster keep the base file's command: they change the strategy (an environment
    default of --strategy), the GPU image and devices, and add the cluster's tasks."""
    base = _config(COMPOSE_FILES["base"], {})["services"]
    gpu = _config(COMPOSE_FILES["gpu"], {})["services"]
    cluster = _config(COMPOSE_FILES["cluster"], {})["services"]
    assert _trainer(base["trainer"]).strategy == "auto"
    for services, strategy in ((gpu, "mirrored"), (cluster, "parameter_server")):
        assert services["trainer"]["command"] == base["trainer"]["command"]
        assert _trainer(services["trainer"]).strategy == strategy
    for name in ("data", "evaluator", "tensorboard"):  # everything else as it was (but pull_policy,
        # which docker-compose 1.29 drops in any merge of files)
        assert {**gpu[name], "pull_policy": "build"} == base[name], name
    assert base["trainer"]["build"]["args"]["EXTRA"] == "cpu"  # what `up` builds by default
    assert gpu["trainer"]["build"]["args"]["EXTRA"] == "and-cuda"
    assert gpu["trainer"]["image"] == base["trainer"]["image"] + "-cuda"  # the CPU image stays
    [device] = gpu["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    # A count of GPUs as docker-compose 1.29 starts it: its own device requests take the reservation
    # (a count from a variable, "2", raised there), and the trainer uses the first two.
    two = _config(COMPOSE_FILES["gpu"], {"SHOWTELL_GPUS": "2"})["services"]["trainer"]
    assert _compose_device_requests(two) == [{**device, "count": -1, "capabilities": [["gpu"]]}]
    assert (_trainer(two).gpus, _trainer(gpu["trainer"]).gpus) == (2, None)
    assert "deploy" not in base["trainer"]
    # The images are the release's, as in the Kubernetes manifests
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert base["trainer"]["image"] == f"showtell-trainer:{version}"
    assert base["evaluator"]["image"] == f"showtell-evaluator:{version}"


def _compose_device_requests(service: dict) -> list:
    """``service``'s GPU requests as docker-compose itself makes them at ``up`` (its
    ``Project.get_device_requests``, run by its own interpreter)."""
    import shutil

    interpreter = Path(shutil.which("docker-compose")).read_text().splitlines()[0].removeprefix("#!")
    code = ("import json, sys; from compose.project import Project; "
            "print(json.dumps(Project.get_device_requests(None, json.load(sys.stdin))))")
    result = subprocess.run([interpreter, "-c", code], input=json.dumps(service), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_the_split_runs_the_base_evaluator_as_two_parts_that_meet_in_one_volume(compose_tools):
    """deploy/compose.split.yml: both parts run the base evaluator's command, each told its part by
    the environment; part 0 keeps the port, part 1 has none, its own work volume, and both the
    parts volume; nothing else changes."""
    from unittest import mock

    from showtell.commands.evaluate import argument_problem
    from showtell.evaluator.config import Shard

    base = _config(COMPOSE_FILES["base"], {})["services"]
    split = _config(COMPOSE_FILES["split"], {})["services"]
    assert set(split) == {*base, "evaluator-1"}
    for index, name in enumerate(("evaluator", "evaluator-1")):
        service = split[name]
        assert service["command"] == base["evaluator"]["command"], name
        with mock.patch.dict(os.environ, {k: str(v) for k, v in service["environment"].items()}):
            args = parse_cli("showtell.commands.evaluate", service["command"])
        assert (args.shard, str(args.parts_dir), args.policy) == (Shard(index, 2), "/parts", "all"), name
        assert argument_problem(args) is None, name
        assert "parts:/parts:rw" in service["volumes"] and "checkpoints:/checkpoints:ro" in service["volumes"]
    assert "evaluations-1:/work:rw" in split["evaluator-1"]["volumes"] and "ports" not in split["evaluator-1"]
    # part 1's image is built as part 0's, never pulled (1.29's config leaves pull_policy out: the file)
    assert split["evaluator-1"]["build"] == base["evaluator"]["build"]
    raw = yaml.safe_load((ROOT / COMPOSE_FILES["split"][1]).read_text())["services"]["evaluator-1"]
    assert raw["pull_policy"] == "build"
    assert split["evaluator"]["ports"] == base["evaluator"]["ports"]
    def same(service: dict) -> dict:  # docker-compose 1.29's merge drops pull_policy and reorders volumes
        return {**service, "pull_policy": "build", "volumes": sorted(service.get("volumes", []))}

    for name in base:
        if name != "evaluator":
            assert same(split[name]) == same(base[name]), name


def test_services_run_commands_our_clis_accept(compose_tools):
    from showtell.trainer.distribution.cluster import from_tf_config

    base = _config(COMPOSE_FILES["base"], {})
    services = base["services"]
    assert services["data"]["entrypoint"] == ["showtell", "data", "synthetic"]
    data = parse_cli("showtell.commands.data", ["synthetic", *services["data"]["command"]])
    assert data.if_missing and str(data.out) == "/data/synthetic"
    trainer = _trainer(services["trainer"])
    assert str(trainer.model_dir) == "/checkpoints/model" and trainer.strategy == "auto"
    assert (trainer.mixed_precision, trainer.jit_compile) == ("off", False)
    # the demo's recipe: an encoder pretrained once on the scenes' labels, then phase 1 on it frozen
    assert services["pretrain"]["entrypoint"] == ["showtell", "pretrain"]
    pretrain = parse_cli("showtell.commands.pretrain", services["pretrain"]["command"])
    assert pretrain.if_missing and str(pretrain.out) == trainer.inception_weights == \
        "/checkpoints/encoder.weights.h5"
    assert str(pretrain.data) == str(trainer.data) and pretrain.seconds == 420
    # the trainer starts beside the pretraining, on its first encoder, and follows it to the final one
    assert pretrain.first_save_after == 45 and trainer.follow_encoder and trainer.first_save_secs == 20
    assert "pretrain" not in services["trainer"]["depends_on"]
    assert services["trainer"]["depends_on"]["data"]["condition"] == "service_completed_successfully"
    assert trainer.train_inception is None  # auto: frozen, since it starts pretrained
    from showtell.commands.demo.settings import TRAIN_FLAGS

    demo = parse_cli("showtell.commands.train", ["--data", "d", "--model-dir", "m", *TRAIN_FLAGS])
    for flag in ("optimizer", "learning_rate", "epochs_per_decay", "lstm_dropout", "image_dropout",
                 "batch_size"):
        assert getattr(trainer, flag) == getattr(demo, flag), flag
    evaluator = parse_cli("showtell.commands.evaluate", services["evaluator"]["command"])
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
        assert _trainer(cluster[name]).strategy == "parameter_server"
    assert roles == {"trainer": ("chief", 0), "ps-0": ("ps", 0), "worker-0": ("worker", 0),
                     "worker-1": ("worker", 1)}
    # variables live on the ps, and TensorFlow saves each on its own device: the ps writes its
    # part of every checkpoint (found by a real cluster up: "ckpt-50_temp; No such file")
    assert "checkpoints:/checkpoints:rw" in cluster["ps-0"]["volumes"]
    assert "checkpoints:/checkpoints:rw" in cluster["trainer"]["volumes"]

    standalone = _config(COMPOSE_FILES["evaluator"], STANDALONE_ENV)["services"]["evaluator"]
    args = parse_cli("showtell.commands.evaluate", standalone["command"])
    assert args.poll_secs > 0  # network filesystems deliver no inotify events
    assert any(v.startswith("/mnt/nfs/showtell/model:/checkpoints") and v.endswith(":ro")
               for v in standalone["volumes"])


# ---------------------------------------------------------------- the real stack


@pytest.fixture(scope="module")
def prebuilt():
    """The private dockerd with both images built — in the background, niced, while the other
    tests ran (``tests/session_hooks.py`` starts it and orders docker tests last) — or now."""
    _require_docker_tools()
    from tests import docker_engine

    build = docker_engine.prebuild(ROOT)  # the one already running, or a new one
    try:
        yield build.wait()
    finally:
        docker_engine.stop_prebuild()


def _metrics_json(port: int, *extra: str) -> dict | None:
    result = subprocess.run([sys.executable, "-m", "showtell", "metrics", "latest", "--json",
                             "--timeout", "5", "--server", f"127.0.0.1:{port}", *extra],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    if result.returncode != 0:
        return None
    evaluation = json.loads(result.stdout)
    return evaluation if evaluation["status"] == "STATUS_OK" else None


def _build_steps(output: str) -> dict[str, list[str]]:
    """A legacy ``docker build``'s output by step: the instruction's first three words → the
    outputs of each step that starts so (``Using cache`` in one: taken from the cache)."""
    steps: dict[str, list[str]] = {}
    for step in re.split(r"\nStep \d+/\d+ : ", output)[1:]:
        steps.setdefault(" ".join(step.split(None, 3)[:3]), []).append(step)
    return steps


def _saved_steps(logs: str) -> list[int]:
    return [int(s) for s in re.findall(r"saved checkpoint /checkpoints/model/ckpt-(\d+)", logs)]


# the trainer's line when it moves the first encoder's run aside to start the final encoder's
SET_ASIDE = "kept aside in /checkpoints/model-preview"


def _final_run_log(stack) -> str:
    """The trainer's log since it set the first encoder's run aside: that run's checkpoints had the
    same paths and higher steps (a fresh-clone run resumed at 70 where the preview had saved 150)."""
    return stack.logs("trainer").rsplit(SET_ASIDE, 1)[-1]


def _half_a_core_each(tmp_path: Path) -> Path:
    """An override (compose's own layering) capping the trainer and the pretraining at half a core
    each: the trainer trains for as long as the stack is up, and this test needs its checkpoints,
    restarts and crashes, not its speed, nor the pretraining's — uncapped they took both cores from
    the other tests for minutes."""
    override = tmp_path / "compose.half-a-core-each.yml"
    override.write_text("services:\n  trainer:\n    cpus: 0.5\n  pretrain:\n    cpus: 0.5\n")
    return override


def _follows_the_encoder(stack) -> str:
    """The trainer's switch from the first encoder's run to the final encoder's: its run id."""
    wait_for(lambda: stack.container("pretrain").attrs["State"]["Status"] == "exited", 300,
             "the pretraining to end", interval=1)
    assert stack.container("pretrain").attrs["State"]["ExitCode"] == 0
    pretrained = stack.logs("pretrain")
    assert "a first encoder, after" in pretrained and "wrote the pretrained encoder" in pretrained, pretrained
    loads = "encoder initialised from /checkpoints/encoder.weights.h5"
    logs = wait_for(lambda: SET_ASIDE in (text := stack.logs("trainer"))
                    and text.count(loads) >= 2 and text, 300,
                    "the trainer to start again on the final encoder", interval=1)
    trainer = stack.container("trainer")
    assert trainer.attrs["RestartCount"] == 0 and trainer.attrs["State"]["Status"] == "running"
    assert logs.count(loads) == 2, logs[-3000:]
    evaluator = stack.container("evaluator")
    preview = evaluator.exec_run(["sh", "-c", "ls /checkpoints/model-preview; "
                                              "cat /checkpoints/model/showtell-model.json"])
    listing, record = preview.output.decode().split("{", 1)
    assert preview.exit_code == 0 and "checkpoint" in listing.split(), preview.output
    return json.loads("{" + record)["run_id"]


# pytest-timeout counts the fixture's wait for the background builds too (on a loaded machine, 527 s
# of setup once pushed a passing stack past 900 s in all)
@pytest.mark.docker
@pytest.mark.timeout(1800)
def test_compose_up_trains_evaluates_restarts_and_goes_away(prebuilt, tmp_path: Path, record_property):
    from tests.docker_engine import BUILD_ENV, PROJECT, Stack
    from tests.pki import SERVER_NAME, make_pki

    engine, project = prebuilt.engine, prebuilt.project
    figures: dict[str, float | int] = dict(prebuilt.figures)
    grpc_port, board_port, remote_port = free_ports(3)
    # The demo's recipe, with batch 8 and a checkpoint every 10 s (few training steps between them).
    recipe = project / "deploy" / "recipes" / "docker-test.yaml"
    recipe.write_text((project / "deploy" / "recipes" / "demo.yaml").read_text()
                      .replace("batch-size: 32", "batch-size: 8").replace("save-every-secs: 120",
                                                                          "save-every-secs: 10"))
    assert "batch-size: 8" in recipe.read_text() and "save-every-secs: 10\n" in recipe.read_text()
    stack = Stack(engine, project, PROJECT, {
        **BUILD_ENV,  # the base image built here; the default (CPU) images
        # the input, small: 64 + 8 pictures at 75 px (Inception's minimum), 8 evaluated
        "SHOWTELL_TRAIN_IMAGES": "64", "SHOWTELL_VAL_IMAGES": "8", "SHOWTELL_IMAGE_SIZE": "75",
        "SHOWTELL_EVAL_EXAMPLES": "8", "SHOWTELL_RECIPE": str(recipe),
        "SHOWTELL_METEOR": "false",  # its JVM: ≈ 7 CPU-s per evaluator (PTB tokenizing still uses the JRE)
        # the encoder's pretraining, short: a first encoder after its first step, the final one after
        # 240 s (by then the half-a-core trainer has started on the first).  With 60 s, a machine
        # whose first half-a-core step took 54 s (tracing) wrote both 6 s apart: the trainer never
        # saw the first; with 120 s, CI's took 124 s, and the final encoder was the first one's
        # bytes (now a step newer, and a trainer told so either way), 5 s after it.  The trainer's
        # preview began 55 s after the first encoder there: 240 s leaves twice that.
        "SHOWTELL_PRETRAIN_SECONDS": "240", "SHOWTELL_PRETRAIN_FIRST_SAVE": "3",
        "SHOWTELL_GRPC_PORT": str(grpc_port), "SHOWTELL_TENSORBOARD_PORT": str(board_port),
    }, ["docker-compose.yml", str(_half_a_core_each(tmp_path))])
    pki = make_pki(tmp_path / "pki")
    remote = None
    client = engine.client
    try:
        # One install of the dependencies for both images: the evaluator's first build took the
        # shared stage from the trainer's (from the wheelhouse, no index: BUILD_ARGS).
        first = _build_steps(prebuilt.builds["trainer"])
        deps = first["RUN deploy/install.sh deps"][0]
        assert "Using cache" not in deps, prebuilt.builds["trainer"][-3000:]
        assert "Looking in links: http://127.0.0.1:" in deps and "Successfully installed" in deps
        assert "Using cache" in _build_steps(prebuilt.builds["evaluator"])["RUN deploy/install.sh deps"][0]
        # A source edit rebuilds the package's layers only: TensorFlow's layer (and the JRE's)
        # come from the cache (the layers were ordered for it).
        edited = project / "showtell" / "__init__.py"
        edited.write_text(edited.read_text() + "\n# an edit\n")
        for service in ("trainer", "evaluator"):
            started = time.monotonic()
            rebuilt = stack.run("build", service)
            figures[f"{service}_rebuild_after_edit_s"] = round(time.monotonic() - started, 1)
            steps = _build_steps(rebuilt.stdout + rebuilt.stderr)
            assert "Using cache" in steps["RUN deploy/install.sh deps"][0], rebuilt.stdout[-3000:]
            # the edit is in the image (the legacy builder builds every stage before the target:
            # the evaluator's build takes the package stage's wheel from the trainer's)
            changed = ["RUN deploy/install.sh package"]
            changed += ["RUN deploy/install.sh wheel"] if service == "trainer" else []
            for step in changed:
                assert "Using cache" not in steps[step][-1], (service, step)
        for service in ("trainer", "evaluator"):
            image = client.images.get(f"showtell-{service}:test").attrs
            figures[f"{service}_image_mb"] = round(image["Size"] / 1e6)
            assert image["Config"]["User"] == "showtell"  # non-root
            labels = image["Config"]["Labels"]  # OCI labels from the compose build args
            oci = "org.opencontainers.image"
            built_from = (labels[f"{oci}.version"], labels[f"{oci}.base.name"])
            assert built_from == (BUILD_ENV["SHOWTELL_VERSION"], BUILD_ENV["SHOWTELL_BASE_IMAGE"]), labels

        started = time.monotonic()
        stack.run("up", "-d")
        wait_for(lambda: stack.health("evaluator") == "healthy", 300, "the evaluator to be healthy",
                 interval=1)
        for capped in ("trainer", "pretrain"):  # the override
            assert stack.container(capped).attrs["HostConfig"]["NanoCpus"] == 500_000_000
        assert stack.container("data").attrs["State"]["ExitCode"] == 0
        wait_for(lambda: _metrics_json(grpc_port), 600, "a first evaluation over gRPC", interval=2)
        figures["up_to_first_evaluation_s"] = round(time.monotonic() - started, 1)
        # The trainer started on the pretraining's first encoder, then on its final one: the same
        # container (an exec, no restart), the first run kept aside, a new run evaluated.
        run_id = _follows_the_encoder(stack)
        evaluation = wait_for(lambda: (e := _metrics_json(grpc_port)) and e["run_id"] == run_id and e, 300,
                              "an evaluation of the run on the final encoder", interval=2)
        step = int(evaluation["global_step"])
        assert evaluation["checkpoint_path"] == f"/checkpoints/model/ckpt-{step}"
        assert step in _saved_steps(stack.logs("trainer"))  # a checkpoint the trainer container wrote
        # the demo's recipe: phase 1 on the encoder the pretrain service wrote, from the feature cache
        pretrained = stack.logs("pretrain")
        assert re.search(r"wrote .* to /checkpoints/encoder.weights.h5", pretrained), pretrained
        assert "encoder frozen: pretrained encoder" in stack.logs("trainer")
        assert {"loss", "perplexity", "bleu4", "cider"} <= set(evaluation["metrics"])
        # the image's JRE: COCO's PTB tokenizer ran, as a non-root user over a root-owned install;
        # SHOWTELL_METEOR=false reached the evaluator
        assert evaluation["scoring"] == {"tokenizer": "ptb", "scorers": [
            "bleu1", "bleu2", "bleu3", "bleu4", "cider", "distinct_2", "rouge_l"]}, evaluation["scoring"]

        # the evaluator cannot write the checkpoint volume
        evaluator = stack.container("evaluator")
        # the recipe file reached the trainer (its batch size and save interval are the recipe's),
        # and the run recorded every setting as merged — not the file's path
        record = evaluator.exec_run(["sh", "-c", "cat /checkpoints/model/runs/*.json"])
        assert record.exit_code == 0, record.output
        [revision] = json.loads(record.output)["revisions"]
        assert (revision["settings"]["batch_size"], revision["settings"]["save_every_secs"]) == (8, 10.0), \
            revision["settings"]
        assert "config" not in revision["settings"]
        # both services serve Prometheus' page on the compose network (port 9400), not on the host
        for service, figure in (("evaluator", 'showtell_evaluator_evaluations_total{status="ok"}'),
                                ("trainer", "showtell_trainer_step")):
            page = stack.container(service).exec_run(
                ["python3", "-c", "import urllib.request; print(urllib.request.urlopen("
                                  "'http://127.0.0.1:9400/metrics', timeout=10).read().decode())"])
            assert page.exit_code == 0 and figure.encode() in page.output, page.output[-2000:]
        write = evaluator.exec_run(["touch", "/checkpoints/model/evaluator-was-here"])
        assert write.exit_code != 0 and b"Read-only file system" in write.output, write.output
        mounts = {m["Destination"]: m for m in evaluator.attrs["Mounts"]}
        assert mounts["/checkpoints"]["RW"] is False and mounts["/work"]["RW"] is True

        # TensorBoard shows both curves
        import requests

        def runs() -> bool:
            try:
                listed = requests.get(f"http://127.0.0.1:{board_port}/data/runs", timeout=5).json()
                # the evaluator's: one run directory per training run (eval/<run id>)
                return "trainer/train" in listed and any(r.startswith("evaluator/eval/") for r in listed)
            except (requests.RequestException, ValueError):
                return False

        wait_for(runs, 120, "TensorBoard to list the trainer's and the evaluator's runs", interval=2)

        # `docker-compose restart trainer`: SIGTERM → a final checkpoint, then resume from it
        stack.run("restart", "trainer")
        logs = wait_for(lambda: (text := _final_run_log(stack)).count("resumed from") >= 1 and text, 300,
                        "the restarted trainer to resume", interval=1)
        [(path, final)] = re.findall(r"final checkpoint (/checkpoints/model/ckpt-\d+) \(step (\d+)\)", logs)
        assert f"resumed from {path} at step {final}" in logs

        # a real crash: SIGKILL of the trainer's process → the restart policy brings it back,
        # resuming at the newest checkpoint it had written
        wait_for(lambda: max(_saved_steps(_final_run_log(stack)), default=0) > int(final), 120,
                 "a checkpoint after the restart", interval=1)
        trainer = stack.container("trainer")
        newest = max(_saved_steps(_final_run_log(stack)))
        os.kill(trainer.attrs["State"]["Pid"], signal.SIGKILL)
        logs = wait_for(lambda: (text := _final_run_log(stack)).count("resumed from") >= 2 and text, 300,
                        "the crashed trainer to come back", interval=1)
        resumed = [int(s) for s in re.findall(r"resumed from \S+/ckpt-\d+ at step (\d+)", logs)]
        assert resumed[-1] >= newest
        trainer.reload()
        assert trainer.attrs["RestartCount"] >= 1

        # stop: the trainer saves a final checkpoint and exits 143 (stopped, not finished) — before
        # the standalone evaluator below, which then sees a model dir that stays as it is (and the
        # stack's evaluator, with nothing new to evaluate, sleeps meanwhile)
        stack.run("stop", "trainer")
        state = stack.container("trainer").attrs["State"]
        assert (state["Status"], state["ExitCode"]) == ("exited", 143), state
        assert _final_run_log(stack).count("final checkpoint") >= 2

        # the same evaluator image alone, "on another machine": the trainer's model dir mounted
        # read-only from the host (as an NFS mount would be), polling, TLS and a token
        volume = client.volumes.get(f"{stack.name}_checkpoints").attrs["Mountpoint"]
        data = client.volumes.get(f"{stack.name}_data").attrs["Mountpoint"]
        secrets = "/run/secrets/showtell"
        remote = Stack(engine, project, f"{PROJECT}-remote", {
            **BUILD_ENV,
            "SHOWTELL_CHECKPOINTS": f"{volume}/model", "SHOWTELL_DATA_DIR": f"{data}/synthetic",
            "SHOWTELL_EVAL_EXAMPLES": "8", "SHOWTELL_EVAL_POLL_SECS": "2", "SHOWTELL_METEOR": "false",
            # test traffic stays on loopback
            "SHOWTELL_GRPC_BIND": "127.0.0.1", "SHOWTELL_GRPC_PORT": str(remote_port),
            "SHOWTELL_SECRETS": str(pki), "SHOWTELL_TLS_CERT": f"{secrets}/server.crt",
            "SHOWTELL_TLS_KEY": f"{secrets}/server.key", "SHOWTELL_AUTH_TOKEN_FILE": f"{secrets}/token",
            "SHOWTELL_CA": f"{secrets}/ca.crt", "SHOWTELL_TLS_SERVER_NAME": SERVER_NAME,
        }, ["deploy/compose.evaluator.yml"])
        remote.run("up", "-d")
        wait_for(lambda: remote.health("evaluator") == "healthy", 300, "the standalone evaluator", interval=1)
        tls = ["--ca", str(pki / "ca.crt"), "--tls-server-name", SERVER_NAME]
        far = wait_for(lambda: _metrics_json(remote_port, *tls, "--auth-token-file", str(pki / "token")), 300,
                       "an evaluation from the standalone evaluator", interval=2)
        assert int(far["global_step"]) >= int(final)
        assert _metrics_json(remote_port, *tls) is None  # no token: refused
        refused = subprocess.run([sys.executable, "-m", "showtell", "metrics", "latest", "--server",
                                  f"127.0.0.1:{remote_port}", *tls],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "no bearer token" in refused.stderr
        remote.run("down", "-v")

        # stop: the services, whose only end is a signal, exit 0; the trainer stays stopped (143)
        stack.run("stop")
        for service, code in (("trainer", 143), ("evaluator", 0), ("tensorboard", 0)):
            state = stack.container(service).attrs["State"]
            assert (state["Status"], state["ExitCode"]) == ("exited", code), (service, state)

        stack.run("down", "-v")
        labels = {"label": [f"com.docker.compose.project={stack.name}"]}
        assert client.containers.list(all=True, filters=labels) == []
        assert client.volumes.list(filters=labels) == []
        assert [n.name for n in client.networks.list() if n.name.startswith(stack.name)] == []
    except BaseException:
        for s in (stack, remote):
            if s is not None:
                sys.stderr.write(s.run("logs", "--tail", "60", check=False).stdout[-12000:])
        raise
    finally:
        for s in (remote, stack):
            if s is not None:
                s.run("down", "-v", "--remove-orphans", check=False)
        # The engine's CPU (builds and stack; none of it waited for by this process) is this test's.
        engine_cpu = engine.cpu_seconds()
        if engine_cpu is not None:
            figures["engine_cpu_s"] = round(engine_cpu, 1)
            record_property(UNWAITED_CPU_KEY, engine_cpu)
        print(f"docker figures: {json.dumps(figures)}")
