#!/bin/sh
# Image build step shared by both Dockerfiles: install the package with one extra ($1: `cpu` for
# tensorflow-cpu, `and-cuda` for tensorflow with the CUDA libraries) at the versions CI pins.
# The generated gRPC modules are committed (showtell/v1), so no protoc runs here.
set -eu
extra="$1"
case "$extra" in
  cpu|and-cuda) ;;
  *) echo "deploy/install.sh: extra must be cpu or and-cuda (got '$extra')" >&2; exit 2 ;;
esac
export PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_NO_CACHE_DIR=1
pip install -c constraints.txt ".[$extra]"
pip check
# From another directory: here ./showtell (the sources) would shadow the installed package.
(cd / && python -c "import showtell.v1.metrics_pb2_grpc, showtell.trainer.cli, showtell.evaluator.cli" \
  && showtell --version)
