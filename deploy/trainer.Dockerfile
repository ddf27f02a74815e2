# The showtell trainer.  CPU by default; EXTRA=and-cuda for GPU hosts (NVIDIA runtime).
#   docker build -f deploy/trainer.Dockerfile -t showtell-trainer .
#   docker build -f deploy/trainer.Dockerfile --build-arg EXTRA=and-cuda -t showtell-trainer:0.1.0-cuda .
# Build args: BASE_IMAGE (any Debian-like image with python3 ≥ 3.11 + venv), EXTRA (the package
# extra: cpu, or and-cuda: several GB of CUDA wheels), and an optional extra CA certificate for
# builds behind a TLS-intercepting proxy: put PEM files in deploy/certs/.
ARG BASE_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7
ARG EXTRA=cpu
FROM ${BASE_IMAGE}
# Declared before FROM (its default) and here without a value: the layers up to the
# dependencies' install are then the same in both Dockerfiles, so one image's build cache
# serves the other when both get the same EXTRA.
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

# Dependencies first, from the two files that name them: a source edit rebuilds from the COPY of
# the sources on, in seconds, and TensorFlow's layer stays cached (BENCHMARKS.md: image rebuilds).
WORKDIR /opt/showtell
COPY pyproject.toml constraints.txt ./
COPY deploy/install.sh deploy/install.sh
RUN deploy/install.sh deps "${EXTRA}"
COPY README.md LICENSE ./
COPY captioning captioning
COPY trainer trainer
COPY evaluator evaluator
COPY showtell showtell
COPY protos protos
RUN deploy/install.sh package "${EXTRA}"

# OCI labels: which release and commit the image is, and where its source lives (compose passes
# SHOWTELL_VERSION, SHOWTELL_REVISION and SHOWTELL_SOURCE; docs/deployment.md: `docker build`'s).
# After the sources: a new commit changes only these last layers.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=""
ARG BASE_IMAGE
LABEL org.opencontainers.image.title="showtell-trainer" \
      org.opencontainers.image.description="showtell's trainer: Show and Tell image captioning, checkpoints on a schedule" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
USER showtell
WORKDIR /home/showtell
VOLUME ["/checkpoints", "/data"]
# exec form: SIGTERM reaches showtell, which saves a checkpoint and exits 143 (not finished)
ENTRYPOINT ["showtell", "train"]
CMD ["--data", "/data/synthetic", "--model-dir", "/checkpoints/model"]
