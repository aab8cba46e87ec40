"""Every Google service the cloud tasks call, faked on 127.0.0.1 at once, and a
`launch.context.cloud.Cloud` whose real clients reach them; settings come from an outputs file as
`cdktn deploy --outputs-file` writes it (the stack's `StackOutputs`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from infra import outputs as stack_outputs
from infra.outputs import StackOutputs
from launch.context.clients import GoogleClients
from launch.context.cloud import Cloud
from tests.fakes.build import FakeArtifactRegistry, FakeCloudBuild
from tests.fakes.gcs import FakeGcs
from tests.fakes.logs import FakeLoggingService
from tests.fakes.pipelines import FakePipelineService, FakeScheduleService
from tests.fakes.pubsub import FakePubSub
from tests.fakes.quotas import FakeCloudQuotas
from tests.fakes.serving import (
    BatchRunner,
    Containers,
    FakeEndpointService,
    FakeModelService,
    FakePredictionService,
)
from tests.fakes.vertex import FakeJobService, FakePersistentResources

REPOSITORY = "us-central1-docker.pkg.dev/pets-detector-dev/pets-images"
PROJECT = "pets-detector-dev"
OUTPUTS = StackOutputs(
    project=PROJECT, region="us-central1", bucket="pets-data", build_bucket="pets-build",
    repository_url=REPOSITORY, image_uri=f"{REPOSITORY}/trainer:deployed",
    tpu_image_uri=f"{REPOSITORY}/trainer-tpu:deployed",
    serving_image_uri=f"{REPOSITORY}/serving:deployed",
    serving_gpu_image_uri=f"{REPOSITORY}/serving-gpu:deployed", image_tag="deployed",
    trainer_service_account=f"pets-trainer@{PROJECT}.iam.gserviceaccount.com",
    converter_service_account=f"pets-converter@{PROJECT}.iam.gserviceaccount.com",
    builder_service_account=f"pets-builder@{PROJECT}.iam.gserviceaccount.com",
    serving_service_account=f"pets-serving@{PROJECT}.iam.gserviceaccount.com",
    pipelines_service_account=f"pets-pipelines@{PROJECT}.iam.gserviceaccount.com",
    deployer_service_account=f"pets-deployer@{PROJECT}.iam.gserviceaccount.com",
    planner_service_account=f"pets-planner@{PROJECT}.iam.gserviceaccount.com",
    tensorboard=f"projects/{PROJECT}/locations/us-central1/tensorboards/7",
    workload_identity_provider=f"projects/{PROJECT}/locations/global/workloadIdentityPools/"
                               "pets-github/providers/github",
    researchers_push_images="true",
    researchers_build_images="true",
    notifications_topic=f"projects/{PROJECT}/topics/pets-job-events",
    bucket_location="US-CENTRAL1", repository_location="us-central1",
    launcher_image_uri=f"{REPOSITORY}/launcher:deployed")


@contextlib.contextmanager
def fake_cloud(workdir: Path) -> Iterator[SimpleNamespace]:
    """`.cloud(**flags)` makes a Cloud; the fakes are attributes, for assertions."""
    with FakeJobService() as vertex, FakeLoggingService() as logs, \
            FakeArtifactRegistry() as registry, FakeCloudBuild(registry) as builds, \
            FakeGcs() as gcs, FakePersistentResources() as persistent, \
            FakeModelService() as models, FakeEndpointService(models) as endpoints, \
            FakePubSub((OUTPUTS.notifications_topic,)) as pubsub, \
            FakeCloudQuotas() as quotas, FakePipelineService() as pipelines, \
            FakeScheduleService() as schedules:
        containers = Containers(gcs.url)
        vertex.batch_runner = BatchRunner(models, containers, gcs.client())
        prediction = FakePredictionService(endpoints, containers).__enter__()
        previous = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url  # resumable uploads read it
        try:
            storage = gcs.client()
            for bucket in (OUTPUTS.bucket, OUTPUTS.build_bucket):
                storage.create_bucket(bucket)
            outputs = workdir / "outputs.json"
            stack_outputs.write({"dev": OUTPUTS}, outputs)
            clients = GoogleClients(jobs=lambda region: vertex.client(), logs=logs.client,
                                    storage=lambda project: gcs.client(),
                                    registry=registry.client, builds=builds.client,
                                    persistent_resources=lambda region: persistent.client(),
                                    models=lambda region: models.client(),
                                    endpoints=lambda region: endpoints.client(),
                                    prediction=lambda region: prediction.client(),
                                    pubsub=pubsub.publisher, quotas=quotas.client,
                                    pipelines=lambda region: pipelines.client(),
                                    schedules=lambda region: schedules.client(),
                                    credentials=lambda: "the fakes take any")
            yield SimpleNamespace(
                vertex=vertex, logs=logs, registry=registry, builds=builds, storage=storage,
                persistent=persistent, models=models, endpoints=endpoints,
                prediction=prediction, containers=containers, pubsub=pubsub, quotas=quotas,
                workdir=workdir,
                pipelines=pipelines, schedules=schedules,
                cloud=lambda **flags: Cloud(
                    overrides=flags, environ={}, clients=clients, outputs_path=outputs))
        finally:
            prediction.__exit__()
            containers.close()
            if previous is None:
                os.environ.pop("STORAGE_EMULATOR_HOST", None)
            else:
                os.environ["STORAGE_EMULATOR_HOST"] = previous


def write_records(root: Path) -> Path:
    """A converted dataset's files (random bytes: what matters here is their names)."""
    import random

    root.mkdir(parents=True, exist_ok=True)
    for name in ("train.record-00000-of-00001", "val.record-00000-of-00001"):
        (root / name).write_bytes(random.Random(name).randbytes(1000))
    (root / "pet_label_map.pbtxt").write_text("item { id: 1 name: 'Abyssinian' }\n")
    return root
