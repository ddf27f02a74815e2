#!/bin/sh
# Image build step shared by both Dockerfiles: install TensorFlow ($1, e.g. tensorflow-cpu==2.21.*
# or tensorflow[and-cuda]==2.21.*), the package's other dependencies at the versions CI pins,
# generate the gRPC code from protos/, then the package itself.
set -eu
tf_package="$1"
export PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_NO_CACHE_DIR=1
python - <<'PY' > /tmp/requirements.txt
import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print("\n".join(d for d in deps if not d.startswith("tensorflow-cpu")))
PY
grep -v '^tensorflow-cpu==' constraints.txt > /tmp/constraints.txt
pip install -c /tmp/constraints.txt "$tf_package" -r /tmp/requirements.txt
python -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. --grpc_python_out=. \
    protos/showtell/v1/metrics.proto
pip install --no-deps .
# From another directory: here ./showtell (the sources) would shadow the installed package.
(cd / && python -c "import showtell.v1.metrics_pb2_grpc, showtell.trainer.cli, showtell.evaluator.cli")
