"""Jobs run images of the environment's repositories only, unless a platform engineer allows
another in the stack; the repository's location is derived from the image's host, and a
region far from it is refused. Through the real clients against the local fakes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from infra import outputs as stack_outputs
from launch.context.cloud import Cloud
from launch.context.images import ImageBuildError
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.locality import TooFar
from launch.targets.vertex.resources import Resources
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Request
from launch.values.resources import Accelerator
from tests.fakes.cloud import OUTPUTS, REPOSITORY, write_records
from tests.on_vertex import with_vertex
from tests.test_rerun import EXPERIMENT, launch


def test_an_image_of_another_repository_is_refused_from_a_flag_and_a_job_file(services, tmp_path):
    other = "us-central1-docker.pkg.dev/someone-else/images/trainer:v1"
    dry = VertexHandover(dry_run=True)
    for flags, file in (({"image": other}, None), ({}, {"image": other})):
        with pytest.raises(ImageBuildError, match=r"is not in the environment's repositories "
                                                  r".*a platform engineer may allow"):
            launch(services.cloud(), "img1", flags, file, "--job f", dry)
    assert services.vertex.received == [] and services.registry.lookups == []
    own = f"{REPOSITORY}/trainer:mine"  # the environment's own repository: as before
    assert launch(services.cloud(), "img1", {"image": own}, handover=dry)


def test_a_platform_engineer_allows_another_repository_in_the_stack(services, tmp_path):
    shared = "us-central1-docker.pkg.dev/shared-images/base"
    stack_outputs.write({"dev": dataclasses.replace(
        OUTPUTS, allowed_image_repositories=shared)}, services.cloud().outputs_path)
    cloud = services.cloud()
    assert shared in cloud.image_repositories()
    assert REPOSITORY in cloud.image_repositories()
    digest = services.registry.push(f"{shared}/trainer:v1")
    from launch.stores.gcs.records import upload_records
    upload_records(cloud, str(write_records(tmp_path / "records")))
    launch(cloud, "shared1", {"image": f"{shared}/trainer:v1"})
    (pool,) = services.vertex.received[0].custom_job.job_spec.worker_pool_specs
    assert pool.container_spec.image_uri == f"{shared}/trainer@{digest}"
    # a variable is the researcher's, not the platform's: it allows nothing
    assert "us-central1-docker.pkg.dev/x/y" not in dataclasses.replace(
        cloud, environ={"PETS_ALLOWED_IMAGE_REPOSITORIES": "us-central1-docker.pkg.dev/x/y"}
    ).image_repositories()


# --- the repository's location is the image host's ------------------------------------------

ENVIRON = {"PETS_PROJECT": OUTPUTS.project, "PETS_BUCKET": OUTPUTS.bucket,
           "PETS_SERVICE_ACCOUNT": OUTPUTS.trainer_service_account,
           "PETS_IMAGE": f"{REPOSITORY}/trainer:abc",
           "PETS_TPU_IMAGE": f"{REPOSITORY}/trainer-tpu:abc"}


def from_variables(services, tmp_path, region: str, **environ) -> Cloud:
    """Settings from variables and flags alone: no outputs file (the fakes' clients)."""
    return dataclasses.replace(services.cloud(region=region), environ={**ENVIRON, **environ},
                               outputs_path=tmp_path / "no-outputs.json")


def dry_run(cloud: Cloud) -> str:
    request = with_vertex(Request.training(EXPERIMENT, 100, run_id="loc1"), Resources(
        "n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1)))
    return Vertex(cloud, VertexHandover(dry_run=True)).launch(request)


def test_a_region_far_from_the_image_is_refused_without_an_outputs_file(services, tmp_path,
                                                                        capsys):
    with pytest.raises(TooFar, match=r"^--region europe-west4 is in europe, but the image "
                                     r"repository is in us-central1 \(north-america\): choose "
                                     r"a region in north-america, where the repository is read "
                                     r"without crossing a continent$"):
        dry_run(from_variables(services, tmp_path, "europe-west4"))
    far = from_variables(services, tmp_path, "europe-west4", PETS_REGION="us-central1",
                         PETS_IMAGE="europe-docker.pkg.dev/pets-detector-dev/i/trainer:a")
    with pytest.raises(TooFar, match=r"^--region europe-west4 is in europe, but the data bucket "
                                     r"is in us-central1 \(north-america\), taken to be the "
                                     r"environment's region as its location is not known: "
                                     r"choose a region in north-america, where the bucket is "
                                     r"read without crossing a continent, or set "
                                     r"PETS_BUCKET_LOCATION$"):
        dry_run(far)
    capsys.readouterr()
    dry_run(from_variables(services, tmp_path, "us-east4", PETS_REGION="us-central1"))
    assert ("note: the bucket location is not known, so it is taken to be the environment's "
            "region (us-central1); set PETS_BUCKET_LOCATION (or deploy the stack again) if it "
            "is elsewhere") in capsys.readouterr().err
    dry_run(from_variables(services, tmp_path, "europe-west4", PETS_BUCKET_LOCATION="EU",
                           PETS_IMAGE="europe-docker.pkg.dev/pets-detector-dev/i/trainer:a"))
    assert "not known" not in capsys.readouterr().err


def test_a_pinned_image_is_located_by_its_own_host(services):
    cloud = services.cloud(image="us-docker.pkg.dev/pets-detector-dev/pets-images/trainer:x")
    assert cloud.locations().repository == "us"
    assert services.cloud().locations() == type(cloud.locations())("US-CENTRAL1", "us-central1")
    assert Path(services.cloud().outputs_path).exists()
