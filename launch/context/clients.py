"""Makers of the Google API clients the cloud tasks use, in one place.

The defaults reach Google with application default credentials. Tests pass makers of the
same client classes connected to local servers (tests/fakes/): real clients, fake
services, never mocks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


def vertex_jobs(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.JobServiceClient, region)


def vertex_persistent_resources(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.PersistentResourceServiceClient, region)


def _regional(client_class, region: str):
    """Refuses a region that would change the host name (settings checks it first)."""
    from launch.context.places import region_name

    region_name(region, "region")
    return client_class(client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"})


def vertex_models(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.ModelServiceClient, region)


def vertex_endpoints(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.EndpointServiceClient, region)


def vertex_prediction(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.PredictionServiceClient, region)


def cloud_logging():
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

    return LoggingServiceV2Client()


def cloud_storage(project: str):
    from google.cloud import storage

    return storage.Client(project=project)


def artifact_registry():
    from google.cloud import artifactregistry_v1

    return artifactregistry_v1.ArtifactRegistryClient()


def cloud_build():
    from google.cloud.devtools import cloudbuild_v1

    return cloudbuild_v1.CloudBuildClient()


def cloud_catalog():
    from google.cloud import billing_v1

    return billing_v1.CloudCatalogClient()


def pubsub_publisher():
    from google import pubsub_v1

    return pubsub_v1.PublisherClient()


def cloud_quotas():
    from google.cloud import cloudquotas_v1

    return cloudquotas_v1.CloudQuotasClient()


def application_credentials():
    """Application Default Credentials, or google.auth's DefaultCredentialsError."""
    import google.auth

    return google.auth.default()[0]


@dataclasses.dataclass(frozen=True)
class GoogleClients:
    jobs: Callable[[str], object] = vertex_jobs  # region -> JobServiceClient
    logs: Callable[[], object] = cloud_logging
    storage: Callable[[str], object] = cloud_storage  # project -> storage.Client
    registry: Callable[[], object] = artifact_registry
    builds: Callable[[], object] = cloud_build
    catalog: Callable[[], object] = cloud_catalog  # the Billing Catalog (prices)
    persistent_resources: Callable[[str], object] = vertex_persistent_resources  # region ->
    models: Callable[[str], object] = vertex_models  # region -> ModelServiceClient
    endpoints: Callable[[str], object] = vertex_endpoints  # region -> EndpointServiceClient
    prediction: Callable[[str], object] = vertex_prediction  # region -> PredictionService
    pubsub: Callable[[], object] = pubsub_publisher  # job events (launch/targets/vertex/notify.py)
    quotas: Callable[[], object] = cloud_quotas  # the Cloud Quotas API (training quotas)
    credentials: Callable[[], object] = application_credentials  # whether there are any
