#!/bin/sh
# Image build steps shared by both Dockerfiles, in two layers so that a source edit does not
# reinstall TensorFlow:
#   deploy/install.sh deps EXTRA     the dependencies only (needs pyproject.toml + constraints.txt)
#   deploy/install.sh package EXTRA  the package itself, without dependencies, then checks
# EXTRA: `cpu` (tensorflow-cpu) or `and-cuda` (tensorflow with the CUDA libraries), at the versions
# CI pins (constraints.txt pins the CUDA wheels too).  The generated gRPC modules are committed
# (showtell/v1), so no protoc runs here.
set -eu
step="$1"
extra="$2"
case "$extra" in
  cpu|and-cuda) ;;
  *) echo "deploy/install.sh: extra must be cpu or and-cuda (got '$extra')" >&2; exit 2 ;;
esac
export PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_NO_CACHE_DIR=1
case "$step" in
  deps)
    # The dependency list from pyproject.toml (tomllib: Python ≥ 3.11), plus what builds the package.
    python3 - "$extra" > /tmp/requirements.txt <<'PY'
import sys
import tomllib

with open("pyproject.toml", "rb") as f:
    pyproject = tomllib.load(f)
project = pyproject["project"]
extras = project["optional-dependencies"]


def requirements(extra):
    """An extra's requirements, with those of the extras it names (showtell[services])."""
    for requirement in extras[extra]:
        if requirement.startswith("showtell["):
            yield from requirements(requirement[len("showtell["):-1])
        else:
            yield requirement


print("\n".join([*project["dependencies"], *requirements(sys.argv[1]),
                 *pyproject["build-system"]["requires"]]))
PY
    pip install -c constraints.txt -r /tmp/requirements.txt
    rm /tmp/requirements.txt ;;
  package)
    pip install --no-deps --no-build-isolation .
    rm -rf build ./*.egg-info
    pip check
    # From another directory: here ./showtell (the sources) would shadow the installed package.
    (cd / && python -c "import showtell.v1.metrics_pb2_grpc, showtell.trainer.cli, showtell.evaluator.cli" \
      && showtell --version) ;;
  *) echo "deploy/install.sh: step must be deps or package (got '$step')" >&2; exit 2 ;;
esac
