#!/usr/bin/env bash
# Pin the images' base to the digest python:3.11-slim has now (run it to take Debian's and
# Python's fixes; commit the change it makes):
#   deploy/pin-base-image.sh            # python:3.11-slim, as the registry serves it today
#   deploy/pin-base-image.sh python:3.11-slim-bookworm
# Pulls the tag, reads its repository digest (the multi-platform index, so every architecture
# gets its own image) and writes TAG@sha256:… wherever the base is named: the Dockerfile, the
# compose files and their .env examples.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-python:3.11-slim}"
docker pull --quiet "$tag" >/dev/null
digest="$(docker image inspect --format '{{index .RepoDigests 0}}' "$tag")"  # python@sha256:…
pinned="${tag}@${digest#*@}"
files=(deploy/Dockerfile docker-compose.yml deploy/compose.evaluator.yml deploy/compose.split.yml
       .env.example deploy/evaluator.env.example)
sed -i -E "s#python:3\.11-slim[^ }\"]*@sha256:[0-9a-f]{64}#${pinned}#g" "${files[@]}"
grep -c "$pinned" "${files[@]}"
echo "base image pinned: $pinned"
