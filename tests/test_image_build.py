"""image.build: skipped when the tag exists, otherwise one Cloud Build of both targets."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from launch.image_build import (
    ImageBuildError,
    context_tarball,
    ensure_images,
    tag_exists,
    tag_resource,
)
from launch.image_context import context_hash
from tests.fake_build import FakeArtifactRegistry, FakeCloudBuild
from tests.fake_gcs import FakeGcs

REPOSITORY = "us-central1-docker.pkg.dev/pets-detector-dev/pets-images"


@pytest.fixture
def services(monkeypatch):
    with FakeArtifactRegistry() as registry, FakeCloudBuild() as builds, FakeGcs() as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
        storage = gcs.client()
        storage.create_bucket("pets-build")
        yield registry, builds, storage


def ensure(services, tag):
    registry, builds, storage = services
    return ensure_images(
        registry=registry.client(), builds=builds.client(), storage_client=storage,
        project="pets-detector-dev", region="us-central1",
        gpu_image=f"{REPOSITORY}/trainer:{tag}", tpu_image=f"{REPOSITORY}/trainer-tpu:{tag}",
        build_bucket="pets-build", service_account="pets-builder@p.iam.gserviceaccount.com",
        tag=tag)


def test_builds_both_targets_once_then_skips(services):
    registry, builds, storage = services
    tag = context_hash()
    assert "built" in ensure(services, tag)
    (request,) = builds.requests
    build = request.build
    assert request.parent == "projects/pets-detector-dev/locations/us-central1"
    assert build.substitutions["_GPU_IMAGE"] == f"{REPOSITORY}/trainer:{tag}"
    assert build.substitutions["_TPU_IMAGE"] == f"{REPOSITORY}/trainer-tpu:{tag}"
    assert [list(s.args)[:3] for s in build.steps] == [["build", "--target", "gpu"],
                                                     ["build", "--target", "tpu"]]
    assert build.service_account == \
        "projects/pets-detector-dev/serviceAccounts/pets-builder@p.iam.gserviceaccount.com"
    uploaded = storage.bucket("pets-build").blob(f"source/{tag}.tgz").download_as_bytes()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(uploaded))) as tar:
        names = tar.getnames()
    assert {"Dockerfile", "cloudbuild.yaml", "trainer/cli.py"} <= set(names)
    assert not any(n.startswith(("tests/", ".venv/", "work/")) for n in names)

    registry.tags |= {tag_resource(f"{REPOSITORY}/trainer:{tag}"),
                      tag_resource(f"{REPOSITORY}/trainer-tpu:{tag}")}
    assert ensure(services, tag).startswith("up to date")
    assert len(builds.requests) == 1  # nothing rebuilt


def test_tag_lookup_and_bad_uris(services):
    registry, _, _ = services
    uri = f"{REPOSITORY}/trainer:abc"
    assert not tag_exists(registry.client(), uri)
    registry.tags.add(tag_resource(uri))
    assert tag_exists(registry.client(), uri)
    assert tag_resource(uri) == ("projects/pets-detector-dev/locations/us-central1/"
                                 "repositories/pets-images/packages/trainer/tags/abc")
    with pytest.raises(ImageBuildError, match="not an Artifact Registry"):
        tag_resource("docker.io/library/python:3.11")


def test_source_tarball_is_reproducible():
    assert context_tarball() == context_tarball()
