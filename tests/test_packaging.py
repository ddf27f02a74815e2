"""The package installs as ``showtell.*`` only — from a wheel into a fresh environment, and as
the editable install ``make install`` makes — with the repository's folders mapped into it."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.e2e


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=600)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def test_wheel_installs_into_a_fresh_environment_as_one_namespace(tmp_path: Path):
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "dist"),
         str(ROOT), cwd=tmp_path)
    [wheel] = (tmp_path / "dist").glob("showtell-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"showtell"}, tops  # no top-level trainer/, evaluator/, captioning/
    for module in ("showtell/trainer/loop/controller.py", "showtell/evaluator/serving/server.py",
                   "showtell/api/client.py", "showtell/captioning/data/vocab.py",
                   "showtell/v1/metrics_pb2.py"):
        assert module in names, module

    # A fresh environment: its own site-packages with the wheel; the dependencies (TensorFlow
    # alone is 600 MB) borrowed read-only from this one through a .pth line, which does not
    # run this environment's editable-install hook.
    fresh = tmp_path / "fresh"
    _run(sys.executable, "-m", "venv", "--without-pip", str(fresh), cwd=tmp_path)
    python = fresh / "bin" / "python"
    site = Path(_run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     cwd=tmp_path).stdout.strip())
    (site / "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet",
         str(wheel), cwd=tmp_path)

    located = _run(str(python), "-c", "import showtell.trainer, showtell.evaluator; "
                   "print(showtell.trainer.__file__); print(showtell.evaluator.__file__)", cwd=tmp_path)
    assert all(line.startswith(str(site)) for line in located.stdout.split()), located.stdout
    generic = subprocess.run([str(python), "-c", "import trainer"], capture_output=True, text=True,
                             cwd=tmp_path)
    assert generic.returncode == 1 and "No module named 'trainer'" in generic.stderr
    assert "train" in _run(str(fresh / "bin" / "showtell"), "--help", cwd=tmp_path).stdout
    assert "--model-dir" in _run(str(python), "-m", "showtell.evaluator", "--help", cwd=tmp_path).stdout
    assert "--steps" in _run(str(python), "-m", "showtell.trainer", "--help", cwd=tmp_path).stdout


def test_editable_install_maps_the_repository_folders(tmp_path: Path):
    located = _run(sys.executable, "-c", "import showtell.trainer.loop.controller as c, "
                   "showtell.captioning.data.vocab as v; print(c.__file__); print(v.__file__)",
                   cwd=tmp_path)  # outside the repository
    assert located.stdout.split() == [str(ROOT / "trainer" / "loop" / "controller.py"),
                                      str(ROOT / "captioning" / "data" / "vocab.py")]
    assert "--model-dir" in _run(sys.executable, "-m", "showtell.evaluator", "--help", cwd=tmp_path).stdout


def test_wheel_with_the_cpu_extra_installs_runs_and_names_the_extras_without_tensorflow(tmp_path: Path):
    """What a user does: ``pip install 'showtell[cpu]'`` into a new venv (the versions CI pins;
    pip's cache makes the second install of them cheap), then a command that needs TensorFlow,
    then the same without TensorFlow."""
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "dist"),
         str(ROOT), cwd=tmp_path)
    [wheel] = (tmp_path / "dist").glob("showtell-*.whl")
    fresh = tmp_path / "fresh"
    _run(sys.executable, "-m", "venv", str(fresh), cwd=tmp_path)
    pip, showtell = str(fresh / "bin" / "pip"), str(fresh / "bin" / "showtell")
    # --no-compile: pip would byte-compile TensorFlow's ≈ 10,000 modules (≈ 10 CPU-s) for one
    # command that imports a fraction of them; what is under test is the extras and the metadata.
    _run(pip, "install", "--quiet", "--no-compile", "-c", str(ROOT / "constraints.txt"), f"{wheel}[cpu]",
         cwd=tmp_path)
    _run(pip, "check", cwd=tmp_path)
    version = _run(str(fresh / "bin" / "python"), "-c", "import importlib.metadata as m; "
                   "print(m.version('showtell'))", cwd=tmp_path).stdout.strip()
    assert _run(showtell, "--version", cwd=tmp_path).stdout.strip() == f"showtell {version}"
    installed = {line.split("==")[0].lower() for line in _run(pip, "freeze", cwd=tmp_path).stdout.split()}
    assert "tensorflow-cpu" in installed or "tensorflow_cpu" in installed
    assert not installed & {"docker", "grpcio-tools", "grpcio_tools", "pytest", "ruff"}, installed  # dev only

    _run(showtell, "data", "synthetic", "--out", str(tmp_path / "data"), "--train", "8", "--val", "2",
         cwd=tmp_path)
    assert (tmp_path / "data" / "dataset.json").is_file() and (tmp_path / "data" / "vocab.txt").is_file()

    _run(pip, "uninstall", "--yes", "--quiet", "tensorflow-cpu", cwd=tmp_path)
    missing = subprocess.run([showtell, "data", "synthetic", "--out", str(tmp_path / "again")],
                             capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        "showtell data: error: TensorFlow is not installed: install showtell with one of its extras, "
        "pip install 'showtell[cpu]' (CPU) or 'showtell[and-cuda]' (NVIDIA GPUs)"], missing.stderr
    assert not (tmp_path / "again").exists()
    imported = subprocess.run([str(fresh / "bin" / "python"), "-c", "import showtell.trainer.step.task"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert imported.returncode == 1
    assert imported.stderr.strip().splitlines()[-1].endswith("'showtell[and-cuda]' (NVIDIA GPUs)")
    # The gRPC client needs no TensorFlow: an operator's laptop can query a cluster's evaluator.
    assert "--server" in _run(showtell, "metrics", "--help", cwd=tmp_path).stdout
