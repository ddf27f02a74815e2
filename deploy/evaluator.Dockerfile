# The showtell evaluator service (CPU).  Needs only the checkpoint directory (read-only is
# enough) and the dataset's validation split; serves metrics over gRPC on port 50051.
#   docker build -f deploy/evaluator.Dockerfile -t showtell-evaluator .
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
# A headless JRE: COCO's PTB tokenizer and METEOR (pycocoevalcap's jars) need Java — with it the
# scores are comparable with published ones (GetLatest's `scoring` says which tokenizer ran).
# After the dependencies, so that this image and the trainer's share their layer (TensorFlow is
# installed once for both); before the sources, so an edit does not reinstall it.
RUN apt-get update && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/* && java -version

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
LABEL org.opencontainers.image.title="showtell-evaluator" \
      org.opencontainers.image.description="showtell's evaluator: evaluates each new checkpoint, serves metrics over gRPC" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
USER showtell
WORKDIR /home/showtell
VOLUME ["/work"]
EXPOSE 50051
# The gRPC health service answers SERVING once the evaluator is up; it stays open without a
# token.  With TLS, set SHOWTELL_CA (and SHOWTELL_TLS_SERVER_NAME) in the container's environment.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["showtell", "metrics", "health", "--server", "127.0.0.1:50051", "--timeout", "4"]
ENTRYPOINT ["showtell", "evaluate"]
CMD ["--model-dir", "/checkpoints/model", "--data", "/data/synthetic", "--work-dir", "/work/eval", \
     "--host", "0.0.0.0", "--port", "50051"]
