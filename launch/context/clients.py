"""Makers of the Google API clients the cloud tasks use, in one place.

The defaults reach Google with application default credentials. Tests pass makers of the
same client classes connected to local servers (tests/fakes/): real clients, fake
services, never mocks.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable

from google.api_core import exceptions as api_exceptions
from google.auth.exceptions import GoogleAuthError

# What a caller without credentials, or without access, gets: a dry run goes on without what
# it may not read (saying what its request lacks).
UNREADABLE = (GoogleAuthError, api_exceptions.Forbidden, api_exceptions.Unauthorized)


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
    return client_class(client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"},
                        credentials=application_credentials())


def vertex_models(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.ModelServiceClient, region)


def vertex_endpoints(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.EndpointServiceClient, region)


def vertex_pipelines(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.PipelineServiceClient, region)


def vertex_schedules(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.ScheduleServiceClient, region)


def vertex_prediction(region: str):
    from google.cloud import aiplatform_v1

    return _regional(aiplatform_v1.PredictionServiceClient, region)


def cloud_logging():
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

    return LoggingServiceV2Client(credentials=application_credentials())


def cloud_storage(project: str):
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):  # an emulator: the client asks no credentials
        return storage.Client(project=project)
    return storage.Client(project=project, credentials=application_credentials())


def artifact_registry():
    from google.cloud import artifactregistry_v1

    return artifactregistry_v1.ArtifactRegistryClient(credentials=application_credentials())


def cloud_build():
    from google.cloud.devtools import cloudbuild_v1

    return cloudbuild_v1.CloudBuildClient(credentials=application_credentials())


def cloud_catalog():
    from google.cloud import billing_v1

    return billing_v1.CloudCatalogClient(credentials=application_credentials())


def pubsub_publisher():
    from google import pubsub_v1

    return pubsub_v1.PublisherClient(credentials=application_credentials())


def cloud_quotas():
    from google.cloud import cloudquotas_v1

    return cloudquotas_v1.CloudQuotasClient(credentials=application_credentials())


METADATA_PROBE_SECONDS = 0.5  # a metadata server answers in milliseconds where there is one


def application_credentials():
    """Application Default Credentials, or google.auth's DefaultCredentialsError: looked up
    once for every client a command makes (each client looking them up itself probed the
    metadata server again), and again only when what it depends on changes."""
    from google.auth import environment_vars

    key = tuple(os.environ.get(name) for name in (
        environment_vars.CREDENTIALS, environment_vars.CLOUD_SDK_CONFIG_DIR, "HOME",
        environment_vars.GCE_METADATA_IP, environment_vars.NO_GCE_CHECK))
    found = _looked_up(key)
    if isinstance(found, Exception):
        raise found
    return found


@functools.lru_cache(maxsize=8)
def _looked_up(key: tuple) -> object:
    """The credentials for the environment `key` names, or the error saying there are none.
    With no key file and no gcloud ADC file, google.auth asks the metadata server, three
    times with a 3 s timeout: 10 s or more where nothing answers (a laptop on some networks).
    One short probe first says whether there is a metadata server to ask (or the machine says
    it is a Google one), so a dry run without credentials answers at once."""
    import google.auth
    from google.auth import _cloud_sdk, environment_vars, exceptions
    from google.auth.compute_engine import _metadata

    if not os.environ.get(environment_vars.CREDENTIALS) and \
            not os.path.exists(_cloud_sdk.get_application_default_credentials_path()) and \
            not _metadata_answers(_metadata._get_metadata_ip_root(False)) and \
            not _metadata.detect_gce_residency_linux():
        return exceptions.DefaultCredentialsError(
            "no credentials: no GOOGLE_APPLICATION_CREDENTIALS, no gcloud application-default "
            "credentials and no metadata server")
    try:
        return google.auth.default()[0]
    except exceptions.DefaultCredentialsError as error:
        return error


def _metadata_answers(root: str) -> bool:
    """Whether a GCE metadata server answers at `root` within METADATA_PROBE_SECONDS."""
    import urllib.request

    request = urllib.request.Request(root, headers={"Metadata-Flavor": "Google"})
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with direct.open(request, timeout=METADATA_PROBE_SECONDS) as answer:
            return answer.headers.get("Metadata-Flavor") == "Google"
    except (OSError, ValueError):  # refused, unreachable, timed out, or not a URL
        return False


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
    pipelines: Callable[[str], object] = vertex_pipelines  # region -> PipelineServiceClient
    schedules: Callable[[str], object] = vertex_schedules  # region -> ScheduleServiceClient
    pubsub: Callable[[], object] = pubsub_publisher  # job events (launch/targets/vertex/notify.py)
    quotas: Callable[[], object] = cloud_quotas  # the Cloud Quotas API (training quotas)
    credentials: Callable[[], object] = application_credentials  # whether there are any
