# The trainer image: `python -m trainer` with only the trainer's dependencies.
#   docker build --target gpu -t trainer:gpu .   (default; CUDA wheels, also runs on CPU)
#   docker build --target tpu -t trainer:tpu .   (TPU VMs: tensorflow-tpu with a matching libtpu)
# and the serving image: TensorFlow Serving behind Vertex AI's custom-container contract.
#   docker build --target serving -t serving .                                 (CPUs)
#   docker build --target serving --build-arg SERVING_DEVICE=gpu -t serving-gpu .  (GPUs)
ARG SERVING_DEVICE=cpu
# Python packages' versions come from pyproject.toml; the base images are pinned here (tests
# hold the serving image's TF Serving tag to its tensorflow pin; docs/design/pins.md lists
# every pin site).

FROM python:3.11-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --create-home --uid 1000 trainer
WORKDIR /app
COPY pyproject.toml README.md ./
COPY trainer/ trainer/

FROM base AS gpu
# Reduction Server (--reduction-servers) needs NCCL 2.7 or later (tensorflow[and-cuda] brings
# NCCL 2.25 or later) and Google's google-reduction-server package, which only Google's apt
# repository has (Vertex AI's distributed-training page); its key is trusted for that source
# alone (signed-by), not by the deprecated apt-key. Google publishes no version to pin.
# hadolint ignore=DL3008
RUN python -c "import urllib.request as r; r.urlretrieve('https://packages.cloud.google.com/apt/doc/apt-key.gpg', '/usr/share/keyrings/google-cloud.asc')" \
    && echo "deb [signed-by=/usr/share/keyrings/google-cloud.asc] https://packages.cloud.google.com/apt google-fast-socket main" > /etc/apt/sources.list.d/google-fast-socket.list \
    && apt-get update \
    && apt-get install --yes --no-install-recommends google-reduction-server \
    && rm -rf /var/lib/apt/lists/*
# Exact pins live in pyproject.toml, which hadolint cannot read.
# hadolint ignore=DL3013
RUN pip install ".[trainer,gpu]"
USER 1000
ENTRYPOINT ["python", "-m", "trainer"]

FROM base AS tpu
# tensorflow-tpu replaces tensorflow in place: same module, built for TPU VMs.
# hadolint ignore=DL3013
RUN pip install ".[trainer]" \
    && pip uninstall --yes tensorflow \
    && python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["tpu"], sep="\n")' > tpu.txt \
    && pip install --no-deps -r tpu.txt
USER 1000
ENTRYPOINT ["python", "-m", "trainer"]

# TF Serving 2.20.0 is the release built on TensorFlow 2.20: tag 2.20.0 of
# github.com/tensorflow/serving (commit bc7e9d2, 2026-04-23), whose tensorflow-serving-api
# requires tensorflow>=2.20.0; image tensorflow/serving:2.20.0 on Docker Hub (Ubuntu 22.04).
# Read 2026-11-24. Its GPU build is the same release tagged 2.20.0-gpu (TF Serving's
# tools/docker/Dockerfile.gpu: CUDA on Ubuntu 22.04); one serving stage builds on either.
FROM tensorflow/serving:2.20.0 AS serving-base-cpu
FROM tensorflow/serving:2.20.0-gpu AS serving-base-gpu
# Both bases are pinned just above; hadolint cannot see through the variable.
# hadolint ignore=DL3006
FROM serving-base-${SERVING_DEVICE} AS serving
ARG SERVING_DEVICE
# serving/batching.py's DEVICE: the batching parameters for a GPU or for CPUs
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PETS_SERVING_DEVICE=${SERVING_DEVICE}
# Ubuntu 22.04's python3 (3.10) runs the entrypoint, which needs only its standard library.
# The archive keeps only the current python3 build, so a version pin would break the build
# at its next security update; the base image is pinned instead.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 serving
WORKDIR /app
COPY serving/ serving/
USER 1000
# serving/contract.py's HTTP_PORT: Vertex AI's health checks and predictions
EXPOSE 8080
ENTRYPOINT ["python3", "-m", "serving"]

FROM gpu AS default
