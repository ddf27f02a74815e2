"""The committed gRPC modules are exactly what protoc makes from protos/ (one source of truth)."""

from __future__ import annotations

import filecmp
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]


def test_generated_code_is_current(tmp_path: Path):
    well_known = protoc._get_resource_file_name("grpc_tools", "_proto")
    rc = protoc.main(["protoc", f"-I{ROOT / 'protos'}", f"-I{well_known}",
                      f"--python_out={tmp_path}", f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}",
                      str(ROOT / "protos/showtell/v1/metrics.proto")])
    assert rc == 0
    for name in ("metrics_pb2.py", "metrics_pb2.pyi", "metrics_pb2_grpc.py"):
        assert filecmp.cmp(tmp_path / "showtell/v1" / name, ROOT / "showtell/v1" / name, shallow=False), (
            f"showtell/v1/{name} is stale: run `make proto` and commit")
