# The launcher image: continuous training's pipeline steps (launch/features/pipeline/), each a
# KFP lightweight component that calls the launcher's code. Built by `cdktf deploy`
# (launcher.cloudbuild.yaml), tagged with the content hash of the files
# launcher.Dockerfile.dockerignore admits, apart from the trainer images' tag.
#   DOCKER_BUILDKIT=1 docker build -f launcher.Dockerfile -t launcher .
# Python packages' versions come from pyproject.toml: the workstation's (the Vertex AI
# clients, kfp) and the trainer's without TensorFlow (the steps never load it; a test checks).
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --create-home --uid 1000 launcher
WORKDIR /app
COPY pyproject.toml README.md ./
COPY trainer/ trainer/
COPY launch/ launch/
COPY infra/ infra/
# Exact pins live in pyproject.toml, which hadolint cannot read.
# hadolint ignore=DL3013
RUN python -c 'import tomllib; extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]; print(*(d for d in extras["trainer"] if not d.startswith(("tensorflow", "tf-"))), sep="\n")' > launcher.txt \
    && pip install ".[workstation]" -r launcher.txt
USER 1000
