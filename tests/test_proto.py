"""The committed gRPC modules are exactly what protoc makes from protos/ (one source of truth)."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_code_is_current(tmp_path: Path):
    # A subprocess: protoc's C++ protobuf in the same process as TensorFlow's segfaults.
    result = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'protos'}", f"--python_out={tmp_path}",
         f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}",
         str(ROOT / "protos/showtell/v1/metrics.proto")],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for name in ("metrics_pb2.py", "metrics_pb2.pyi", "metrics_pb2_grpc.py"):
        assert filecmp.cmp(tmp_path / "showtell/v1" / name, ROOT / "showtell/v1" / name, shallow=False), (
            f"showtell/v1/{name} is stale: run `make proto` and commit")


BUF = ROOT / "node_modules" / ".bin" / "buf"


def _buf(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    if not BUF.exists():  # `make lint` installs it; a bare `pytest` does the same
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=ROOT, check=True,
                       timeout=300)
    return subprocess.run([str(BUF), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_contract_passes_buf_lint_and_breaks_nothing_released(tmp_path: Path):
    """``buf lint`` (STANDARD) and ``buf breaking`` pass on the contract, and fail on the kinds of
    change they are there to stop: the pre-0.1.0 names, a removed field."""
    assert _buf("lint", cwd=ROOT).returncode == 0
    assert _buf("breaking", "--against", "protos/showtell-v1.binpb", cwd=ROOT).returncode == 0
    proto = (ROOT / "protos" / "showtell" / "v1" / "metrics.proto").read_text()
    for name, changed, expected in (
            ("lint", proto.replace("service MetricsService", "service Metrics"),
             'Service name "Metrics" should be suffixed with "Service"'),
            ("breaking", proto.replace("  string reason = 10;\n", ""),
             'Previously present field "10" with name "reason" on message "Evaluation" was deleted')):
        module = tmp_path / name
        (module / "protos" / "showtell" / "v1").mkdir(parents=True)
        (module / "protos" / "showtell" / "v1" / "metrics.proto").write_text(changed)
        (module / "buf.yaml").write_text((ROOT / "buf.yaml").read_text())
        released = str(ROOT / "protos" / "showtell-v1.binpb")
        result = _buf(*(("lint",) if name == "lint" else ("breaking", "--against", released)), cwd=module)
        said = result.stdout + result.stderr
        assert result.returncode != 0 and expected in said, said
