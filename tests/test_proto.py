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
