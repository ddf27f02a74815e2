# The showtell trainer.  Same image on GPU hosts (NVIDIA runtime) and CPU-only ones.
#   docker build -f deploy/trainer.Dockerfile -t showtell-trainer .
# Build args: BASE_IMAGE (any Debian-like image with python3 + venv), EXTRA (the package
# extra: and-cuda by default; cpu keeps a CPU-only image small), and an optional extra CA
# certificate for builds behind a TLS-intercepting proxy: put PEM files in deploy/certs/.
ARG BASE_IMAGE=python:3.11-slim
ARG EXTRA=and-cuda
FROM ${BASE_IMAGE}
# Declared before FROM (its default) and here without a value: the layers up to the install
# step are then the same in both Dockerfiles, so one image's build cache serves the other
# when both get the same EXTRA.
ARG EXTRA

ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 TF_CPP_MIN_LOG_LEVEL=2 \
    PATH=/opt/venv/bin:$PATH
COPY deploy/certs/ /usr/local/share/ca-certificates/showtell-extra/
RUN set -e; \
    if ls /usr/local/share/ca-certificates/showtell-extra/*.crt >/dev/null 2>&1; then \
      update-ca-certificates; fi; \
    python3 -m venv /opt/venv; \
    useradd --create-home --uid 1000 showtell; \
    mkdir -p /data /checkpoints /work && chown showtell:showtell /data /checkpoints /work

WORKDIR /opt/showtell
COPY pyproject.toml constraints.txt README.md LICENSE ./
COPY deploy/install.sh deploy/install.sh
COPY captioning captioning
COPY trainer trainer
COPY evaluator evaluator
COPY showtell showtell
COPY protos protos
RUN deploy/install.sh "${EXTRA}"

USER showtell
WORKDIR /home/showtell
VOLUME ["/checkpoints", "/data"]
# exec form: SIGTERM reaches showtell, which saves a checkpoint and exits 0
ENTRYPOINT ["showtell", "train"]
CMD ["--data", "/data/synthetic", "--model-dir", "/checkpoints/model"]
