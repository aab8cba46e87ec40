# The trainer image: `python -m trainer` with only the trainer's dependencies.
#   docker build --target gpu -t trainer:gpu .   (default; CUDA wheels, also runs on CPU)
#   docker build --target tpu -t trainer:tpu .   (TPU VMs: tensorflow-tpu with a matching libtpu)
# Versions come from pyproject.toml, the one place they are pinned.

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

FROM gpu AS default
