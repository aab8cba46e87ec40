"""Relaunching with unchanged trainer sources: how long the image step takes (it must not
build). Runs against the local fake Artifact Registry, Cloud Build and GCS of the tests."""

from __future__ import annotations

import os
import time

from launch.image_build import ensure_images, tag_resource
from launch.image_context import context_hash
from tests.fake_build import FakeArtifactRegistry, FakeCloudBuild
from tests.fake_gcs import FakeGcs

REPOSITORY = "us-central1-docker.pkg.dev/bench/pets-images"


def main(relaunches: int = 20) -> dict:
    with FakeArtifactRegistry() as registry, FakeCloudBuild() as builds, FakeGcs() as gcs:
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        storage = gcs.client()
        storage.create_bucket("bench-build")
        clients = {"registry": registry.client(), "builds": builds.client(),
                   "storage_client": storage}

        def image_step() -> str:
            tag = context_hash()
            return ensure_images(**clients, project="bench", region="us-central1",
                                 gpu_image=f"{REPOSITORY}/trainer:{tag}",
                                 tpu_image=f"{REPOSITORY}/trainer-tpu:{tag}",
                                 build_bucket="bench-build", service_account="b@bench", tag=tag)

        start = time.perf_counter()
        image_step()  # first launch: a build is submitted
        first = time.perf_counter() - start
        tag = context_hash()
        registry.tags |= {tag_resource(f"{REPOSITORY}/trainer:{tag}"),
                          tag_resource(f"{REPOSITORY}/trainer-tpu:{tag}")}
        start = time.perf_counter()
        for _ in range(relaunches):
            image_step()
        relaunch = (time.perf_counter() - start) / relaunches
        builds_started = len(builds.requests)
    print(f"\nfirst launch (uploads the context, submits a build): {first:6.3f} s")
    print(f"relaunch, unchanged sources (hash + 2 tag lookups):  {relaunch:6.3f} s")
    print(f"builds submitted: {builds_started} (1 expected: the first launch only)")
    return {"first": first, "relaunch": relaunch, "builds": builds_started}


if __name__ == "__main__":
    main()
