#!/bin/sh
# The image build's steps (deploy/Dockerfile), each a layer of its own so that a source edit does
# not reinstall TensorFlow:
#   deploy/install.sh requirements EXTRA  print the dependencies (pyproject.toml's, with EXTRA's)
#   deploy/install.sh deps EXTRA          install them into /opt/venv, then drop what no service loads
#   deploy/install.sh wheel EXTRA         build showtell's wheel into dist/ (the package stage)
#   deploy/install.sh package EXTRA       install that wheel without dependencies, then check
# EXTRA: `cpu` (tensorflow-cpu) or `and-cuda` (tensorflow with the CUDA libraries), at the versions
# CI pins (constraints.txt pins the CUDA wheels too).  The generated gRPC modules are committed
# (showtell/v1), so no protoc runs here.  Where the wheels come from is pip's own business:
# PIP_INDEX_URL (a mirror), PIP_FIND_LINKS and PIP_NO_INDEX (a wheelhouse), empty = PyPI.
set -eu
step="$1"
extra="$2"
case "$extra" in
  cpu|and-cuda) ;;
  *) echo "deploy/install.sh: extra must be cpu or and-cuda (got '$extra')" >&2; exit 2 ;;
esac
# The Dockerfile declares pip's settings as build args, empty unless given: pip refuses an empty one.
[ -n "${PIP_INDEX_URL:-}" ] || unset PIP_INDEX_URL
[ -n "${PIP_FIND_LINKS:-}" ] || unset PIP_FIND_LINKS
[ -n "${PIP_NO_INDEX:-}" ] || unset PIP_NO_INDEX
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then export PIP_CERT=/etc/ssl/certs/ca-certificates.crt; fi
export PIP_NO_CACHE_DIR=1
site="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

requirements() {
  # The dependency list from pyproject.toml (tomllib: Python ≥ 3.11), plus what builds the package.
  python3 - "$extra" <<'PY'
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
}

case "$step" in
  requirements)
    requirements ;;
  deps)
    requirements > /tmp/requirements.txt
    pip install -c constraints.txt -r /tmp/requirements.txt
    rm /tmp/requirements.txt
    # What the services never load, in this same layer (deleted later, it would still be shipped):
    # TensorFlow's C++ headers (for compiling custom ops: 287 MB), pycocoevalcap's SPICE (a jar
    # that downloads Stanford CoreNLP on first use: the evaluator runs BLEU, METEOR, ROUGE-L and
    # CIDEr only) and NumPy's own test suite (27 MB).  Nothing else: the libraries, the scorers'
    # data and the compiled bytecode (it saves each start the compile) stay.
    rm -rf "$site/tensorflow/include" "$site/pycocoevalcap/spice"
    find "$site/numpy" -depth -type d -name tests -exec rm -rf {} + ;;
  wheel)
    pip wheel --no-deps --no-build-isolation --wheel-dir dist . >/dev/null
    rm -rf build ./*.egg-info ;;
  package)
    pip install --no-deps dist/showtell-*.whl
    rm -rf dist
    pip check
    # From another directory: a ./showtell here would shadow the installed package.
    # Every command's module and the metrics' registry (each metric file found in the wheel).
    (cd / && python -c "import showtell.v1.metrics_pb2_grpc, showtell.commands.train, showtell.commands.evaluate, \
showtell.commands.demo; from showtell import metrics; assert 'distinct_2' in metrics.names(), metrics.names()" \
      && showtell --version) ;;
  *) echo "deploy/install.sh: step must be requirements, deps, wheel or package (got '$step')" >&2; exit 2 ;;
esac
