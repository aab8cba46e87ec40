"""image.build: skipped when the tags exist, otherwise one Cloud Build of every target (the
trainer's GPU and TPU images, the serving image)."""

from __future__ import annotations

import gzip
import io
import os
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from infra.image_context import REPO_ROOT, context_hash
from infra.names import IMAGE_SUBSTITUTIONS
from launch.context.images import (
    CLOUDBUILD_CONFIG,
    BuildClients,
    BuildSite,
    ImageBuildError,
    Images,
    context_tarball,
    docker_commands,
    ensure_images,
    ensure_images_locally,
    resolve_digest,
    tag_resource,
    tagged_digest,
    with_tag,
)
from tests.fakes.build import FakeArtifactRegistry, FakeCloudBuild
from tests.fakes.gcs import FakeGcs

REPOSITORY = "us-central1-docker.pkg.dev/pets-detector-dev/pets-images"
SITE = BuildSite("pets-detector-dev", "us-central1", "pets-build",
                 "pets-builder@p.iam.gserviceaccount.com")


@pytest.fixture
def services(monkeypatch):
    with FakeArtifactRegistry() as registry, FakeCloudBuild() as builds, FakeGcs() as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
        storage = gcs.client()
        storage.create_bucket("pets-build")
        yield registry, builds, storage


def images(tag: str) -> Images:
    return Images(*(f"{REPOSITORY}/{name}:{tag}" for name in ("trainer", "trainer-tpu",
                                                              "serving", "serving-gpu")))


def ensure(services, tag, on_status=print):
    registry, builds, storage = services
    return ensure_images(BuildClients(registry.client(), builds.client(), storage), SITE,
                         images(tag), tag, on_status=on_status)


def test_builds_every_target_once_then_skips(services):
    registry, builds, storage = services
    tag = context_hash()
    status = []
    assert "built" in ensure(services, tag, status.append).message
    (request,) = builds.requests
    assert status == [f"building {REPOSITORY}/trainer:{tag}, its TPU variant and the serving "
                      "images (CPU and GPU) in Cloud Build build-1 (about 20 minutes; log: "
                      "https://console.cloud.google.com/cloud-build/builds/build-1)"]
    build = request.build
    assert request.parent == "projects/pets-detector-dev/locations/us-central1"
    assert build.substitutions == {"_GPU_IMAGE": f"{REPOSITORY}/trainer:{tag}",
                                   "_TPU_IMAGE": f"{REPOSITORY}/trainer-tpu:{tag}",
                                   "_SERVING_IMAGE": f"{REPOSITORY}/serving:{tag}",
                                   "_SERVING_GPU_IMAGE": f"{REPOSITORY}/serving-gpu:{tag}"}
    check, *docker = build.steps  # the tag check first, then one docker build per target
    assert list(check.args) == ["python3", "infra/image_context.py", "${_GPU_IMAGE}",
                                "${_TPU_IMAGE}", "${_SERVING_IMAGE}", "${_SERVING_GPU_IMAGE}"]
    assert [list(s.args)[:5] for s in docker] == [
        ["build", "--target", "gpu", "-t", "${_GPU_IMAGE}"],
        ["build", "--target", "tpu", "-t", "${_TPU_IMAGE}"],
        ["build", "--target", "serving", "-t", "${_SERVING_IMAGE}"],
        # the serving stage again, on TF Serving's GPU build (the Dockerfile's SERVING_DEVICE)
        ["build", "--target", "serving", "--build-arg", "SERVING_DEVICE=gpu"]]
    assert build.service_account == \
        "projects/pets-detector-dev/serviceAccounts/pets-builder@p.iam.gserviceaccount.com"
    uploaded = storage.bucket("pets-build").blob(f"source/{tag}.tgz").download_as_bytes()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(uploaded))) as tar:
        names = tar.getnames()
    assert {"Dockerfile", "cloudbuild.yaml", "trainer/cli/main.py", "serving/entrypoint.py",
            "infra/image_context.py"} <= set(names)
    assert not any(n.startswith(("tests/", ".venv/", "work/", "launch/")) for n in names)
    assert [n for n in names if n.startswith("infra/")] == ["infra/image_context.py"]

    digests = {name: registry.push(f"{REPOSITORY}/{name}:{tag}")
               for name in ("trainer", "trainer-tpu", "serving", "serving-gpu")}
    skipped = ensure(services, tag)
    assert skipped.message.startswith("up to date")
    assert skipped.digests == {f"{REPOSITORY}/{name}:{tag}": f"{REPOSITORY}/{name}@{digest}"
                               for name, digest in digests.items()}
    assert len(builds.requests) == 1  # nothing rebuilt


def test_tag_lookup_and_bad_uris(services):
    registry, _, _ = services
    uri = f"{REPOSITORY}/trainer:abc"
    assert tagged_digest(registry.client(), uri) is None
    digest = registry.push(uri)
    assert tagged_digest(registry.client(), uri) == f"{REPOSITORY}/trainer@{digest}"
    assert tag_resource(uri) == ("projects/pets-detector-dev/locations/us-central1/"
                                 "repositories/pets-images/packages/trainer/tags/abc")
    with pytest.raises(ImageBuildError, match="not an Artifact Registry"):
        tag_resource("docker.io/library/python:3.11")


def test_images_resolve_to_the_digest_their_tag_names_now(services):
    registry, _, _ = services
    client, uri = registry.client(), f"{REPOSITORY}/trainer:abc"
    with pytest.raises(ImageBuildError, match=r"trainer:abc is not in Artifact Registry: "
                                              r"`invoke image\.build`"):
        resolve_digest(client, uri)
    first = registry.push(uri)
    assert resolve_digest(client, uri) == f"{REPOSITORY}/trainer@{first}"
    second = registry.push(uri)  # the tag moves: a later resolution follows it
    assert second != first and resolve_digest(client, uri) == f"{REPOSITORY}/trainer@{second}"

    by_digest = f"docker.io/library/python@sha256:{'a' * 64}"
    assert resolve_digest(client, by_digest) == by_digest  # already immutable: as it is
    for hostile in ("docker.io/library/python:3.11", f"{REPOSITORY}/trainer@sha256:abc",
                    f"{REPOSITORY}/trainer@sha256:{'A' * 64}", f"{REPOSITORY}/trainer",
                    f"{REPOSITORY}/trainer:abc@md5:{'a' * 32}"):
        with pytest.raises(ImageBuildError, match="digest"):
            resolve_digest(client, hostile)
    registry.tags[tag_resource(uri)] = "latest"  # a registry answer that is not a digest
    with pytest.raises(ImageBuildError, match="'latest' is not an image digest"):
        resolve_digest(client, uri)


def test_source_tarball_is_reproducible():
    assert context_tarball() == context_tarball()


def test_cloudbuild_names_each_image_by_the_substitution_infra_and_the_launcher_pass():
    config = yaml.safe_load((REPO_ROOT / CLOUDBUILD_CONFIG).read_text())
    named = {image.strip("${}") for image in config["images"]}
    assert named == set(IMAGE_SUBSTITUTIONS.values()) == set(images("t").substitutions())
    targets = {step["args"][2] for step in config["steps"] if step["args"][0] == "build"}
    assert targets == {"gpu", "tpu", "serving"}


def test_local_docker_runs_the_cloud_build_steps_then_pushes():
    wanted = images("t1")
    gpu, tpu, serving, serving_gpu = wanted.all()
    assert docker_commands((REPO_ROOT / CLOUDBUILD_CONFIG).read_text(), wanted) == [
        [sys.executable, "infra/image_context.py", gpu, tpu, serving, serving_gpu],  # the check
        ["docker", "build", "--target", "gpu", "-t", gpu, "."],
        ["docker", "build", "--target", "tpu", "-t", tpu, "."],
        ["docker", "build", "--target", "serving", "-t", serving, "."],
        ["docker", "build", "--target", "serving", "--build-arg", "SERVING_DEVICE=gpu", "-t",
         serving_gpu, "."],
        ["docker", "push", gpu], ["docker", "push", tpu], ["docker", "push", serving],
        ["docker", "push", serving_gpu]]
    with pytest.raises(ImageBuildError, match="not a docker step"):
        docker_commands("steps: [{name: gcr.io/cloud-builders/gcloud, args: [x]}]", wanted)
    assert with_tag(f"{REPOSITORY}/trainer:deployed", "abc") == f"{REPOSITORY}/trainer:abc"
    assert with_tag("localhost:5000/trainer", "abc") == "localhost:5000/trainer:abc"


def docker_on_path(tmp_path, monkeypatch, exit_on: str = "") -> Path:
    """A `docker` executable that records its arguments (this machine has no Docker engine)."""
    calls = tmp_path / "calls"
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                      f'case "$*" in *"{exit_on or "never"}"*) exit 1;; esac\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_local_docker_builds_pushes_or_skips(services, tmp_path, monkeypatch):
    registry, builds, _ = services
    wanted = images(context_hash())  # the tag check (run with this Python) passes
    gpu, tpu, serving, serving_gpu = wanted.all()
    calls = docker_on_path(tmp_path, monkeypatch)
    result = ensure_images_locally(registry.client(), wanted).message
    assert result.startswith("built and pushed")
    assert calls.read_text().splitlines() == [
        f"build --target gpu -t {gpu} .", f"build --target tpu -t {tpu} .",
        f"build --target serving -t {serving} .",
        f"build --target serving --build-arg SERVING_DEVICE=gpu -t {serving_gpu} .",
        f"push {gpu}", f"push {tpu}", f"push {serving}", f"push {serving_gpu}"]
    for image in wanted.all():
        registry.push(image)
    calls.unlink()
    assert ensure_images_locally(registry.client(), wanted).message.startswith("up to date")
    assert not calls.exists() and builds.requests == []


def test_local_docker_failures_name_the_fix(services, tmp_path, monkeypatch):
    registry, _, _ = services
    docker_on_path(tmp_path, monkeypatch, exit_on="push")
    with pytest.raises(ImageBuildError, match=r"gcloud auth configure-docker "
                                              r"us-central1-docker\.pkg\.dev"):
        ensure_images_locally(registry.client(), images(context_hash()))
    with pytest.raises(ImageBuildError, match=r"infra/image_context\.py .*trainer:t3 .* failed"):
        ensure_images_locally(registry.client(), images("t3"))  # not the sources' hash
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ImageBuildError, match="docker is not on PATH"):
        ensure_images_locally(registry.client(), images("t3"))
