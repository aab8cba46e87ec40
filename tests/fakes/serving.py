"""Vertex AI's serving services on 127.0.0.1, built from the client library's own protos:
the Model Registry (ModelService), endpoints (EndpointService), online prediction
(PredictionService) and batch prediction (JobService's BatchPredictionJob, added to the
JobService fake).

Prediction runs the Model's container as Vertex AI does (`Containers`): our serving image
through its real entrypoint, configured by the AIP_* variables Vertex AI derives from the
ContainerSpec, then TF Serving (tests/fakes/tf_serving.py) on the SavedModel copied from the
fake bucket; Vertex AI forwards `{"instances": [...]}` to the container's predict route and
returns its `predictions`. A ContainerSpec whose port or routes the image does not serve
fails here as it would on Vertex AI.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import grpc
from google.cloud import aiplatform_v1
from google.longrunning import operations_pb2
from google.protobuf import json_format, struct_pb2

from serving import contract, entrypoint, pixels
from serving.fetch import FetchError, fetch
from serving.front import Front
from tests.fakes.grpc_server import GrpcFake, unary
from tests.fakes.tf_serving import FakeModelServer

LABEL_CLAUSE = re.compile(r'labels\.([\w-]+)="([^"]*)"')
DISPLAY_NAME = re.compile(r'display_name="([^"]*)"')
MAX_REQUEST_BYTES = 1_500_000  # Vertex AI's online prediction request limit: 1.5 MB


def done(response, name: str) -> operations_pb2.Operation:
    """A long-running operation that has already finished with `response`."""
    operation = operations_pb2.Operation(name=name, done=True)
    operation.response.Pack(type(response).pb(response))
    return operation


def _client(client_class, transport_class, fake: GrpcFake):
    return client_class(transport=transport_class(channel=fake.channel()))


class FakeModelService(GrpcFake):
    """Models with versions (`name@version` or `name@alias` reads them) and aliases that
    move, as the registry's do: an alias names one version of a model."""

    SERVICE = "google.cloud.aiplatform.v1.ModelService"

    def __init__(self) -> None:
        self.received: list[aiplatform_v1.UploadModelRequest] = []
        self.versions: dict[str, list[aiplatform_v1.Model]] = {}  # model name -> versions
        self.lock = threading.Lock()
        super().__init__()

    def handlers(self) -> dict:
        model = aiplatform_v1.Model.serialize
        return {
            "UploadModel": unary(self.upload, aiplatform_v1.UploadModelRequest,
                                 operations_pb2.Operation.SerializeToString),
            "GetModel": unary(self.get, aiplatform_v1.GetModelRequest, model),
            "ListModelVersions": unary(self.list_versions,
                                       aiplatform_v1.ListModelVersionsRequest,
                                       aiplatform_v1.ListModelVersionsResponse.serialize),
            "MergeVersionAliases": unary(self.merge_aliases,
                                         aiplatform_v1.MergeVersionAliasesRequest, model),
        }

    def upload(self, request, context):
        with self.lock:
            self.received.append(request)
            if request.parent_model:
                name = request.parent_model
                if name not in self.versions:
                    context.abort(grpc.StatusCode.NOT_FOUND, f"{name} not found")
            else:
                name = f"{request.parent}/models/{request.model_id}"
                if name in self.versions:
                    context.abort(grpc.StatusCode.ALREADY_EXISTS, f"{name} already exists")
                self.versions[name] = []
            version = aiplatform_v1.Model(request.model)
            version.name, version.version_id = name, str(len(self.versions[name]) + 1)
            if not self.versions[name]:
                version.version_aliases = ["default"]  # a model's first version is its default
            self.versions[name].append(version)
            return done(aiplatform_v1.UploadModelResponse(
                model=name, model_version_id=version.version_id), f"{name}/operations/up")

    def find(self, name: str, context) -> aiplatform_v1.Model:
        base, _, which = name.partition("@")
        versions = self.versions.get(base)
        if not versions:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{name} not found")
        which = which or "default"
        for version in versions:
            if which == version.version_id or which in version.version_aliases:
                return version
        context.abort(grpc.StatusCode.NOT_FOUND, f"{name} not found")

    def get(self, request, context):
        return self.find(request.name, context)

    def list_versions(self, request, context):
        wanted = dict(LABEL_CLAUSE.findall(request.filter))
        if request.name not in self.versions:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        return aiplatform_v1.ListModelVersionsResponse(models=[
            v for v in self.versions[request.name]
            if all(v.labels.get(k) == value for k, value in wanted.items())])

    def merge_aliases(self, request, context):
        with self.lock:
            version = self.find(request.name, context)
            for alias in request.version_aliases:
                if alias.startswith("-"):
                    version.version_aliases = [a for a in version.version_aliases
                                               if a != alias[1:]]
                    continue
                for other in self.versions[version.name]:
                    other.version_aliases = [a for a in other.version_aliases if a != alias]
                version.version_aliases = [*version.version_aliases, alias]
            return version

    def client(self) -> aiplatform_v1.ModelServiceClient:
        from google.cloud.aiplatform_v1.services.model_service.transports import (
            ModelServiceGrpcTransport,
        )

        return _client(aiplatform_v1.ModelServiceClient, ModelServiceGrpcTransport, self)


class FakeEndpointService(GrpcFake):
    """Endpoints, and the deployments on them with their traffic split, refused as Vertex AI
    refuses them: a split that does not add up to 100, or names a model not deployed."""

    SERVICE = "google.cloud.aiplatform.v1.EndpointService"

    def __init__(self, models: FakeModelService) -> None:
        self.models = models
        self.endpoints: dict[str, aiplatform_v1.Endpoint] = {}
        self.received: list = []
        self.lock = threading.Lock()
        super().__init__()

    def handlers(self) -> dict:
        operation = operations_pb2.Operation.SerializeToString
        return {
            "CreateEndpoint": unary(self.create, aiplatform_v1.CreateEndpointRequest,
                                    operation),
            "GetEndpoint": unary(self.get, aiplatform_v1.GetEndpointRequest,
                                 aiplatform_v1.Endpoint.serialize),
            "ListEndpoints": unary(self.list, aiplatform_v1.ListEndpointsRequest,
                                   aiplatform_v1.ListEndpointsResponse.serialize),
            "DeployModel": unary(self.deploy, aiplatform_v1.DeployModelRequest, operation),
            "UndeployModel": unary(self.undeploy, aiplatform_v1.UndeployModelRequest,
                                   operation),
        }

    def create(self, request, context):
        with self.lock:
            self.received.append(request)
            name = f"{request.parent}/endpoints/{len(self.endpoints) + 1001}"
            endpoint = aiplatform_v1.Endpoint(request.endpoint)
            endpoint.name = name
            self.endpoints[name] = endpoint
            return done(endpoint, f"{name}/operations/create")

    def get(self, request, context):
        if request.name not in self.endpoints:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        return self.endpoints[request.name]

    def list(self, request, context):
        shown = DISPLAY_NAME.findall(request.filter)
        return aiplatform_v1.ListEndpointsResponse(endpoints=[
            e for n, e in self.endpoints.items() if n.startswith(f"{request.parent}/")
            and (not shown or e.display_name == shown[0])])

    @staticmethod
    def _check_split(split: dict, deployed: set[str], context) -> None:
        if deployed and sum(split.values()) != 100:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"traffic split {dict(split)} does not sum to 100")
        if unknown := set(split) - deployed:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"traffic split names undeployed models {sorted(unknown)}")

    def deploy(self, request, context):
        with self.lock:
            self.received.append(request)
            endpoint = self.get(aiplatform_v1.GetEndpointRequest(name=request.endpoint),
                                context)
            self.models.find(request.deployed_model.model, context)
            deployed = aiplatform_v1.DeployedModel(request.deployed_model)
            deployed.id = str(len(self.received) * 1000 + len(endpoint.deployed_models) + 1)
            split = {(deployed.id if k == "0" else k): v
                     for k, v in request.traffic_split.items()}
            self._check_split(split, {d.id for d in endpoint.deployed_models} | {deployed.id},
                              context)
            endpoint.deployed_models = [*endpoint.deployed_models, deployed]
            endpoint.traffic_split = split
            return done(aiplatform_v1.DeployModelResponse(deployed_model=deployed),
                        f"{request.endpoint}/operations/deploy")

    def undeploy(self, request, context):
        with self.lock:
            self.received.append(request)
            endpoint = self.get(aiplatform_v1.GetEndpointRequest(name=request.endpoint),
                                context)
            remaining = [d for d in endpoint.deployed_models
                         if d.id != request.deployed_model_id]
            if len(remaining) == len(endpoint.deployed_models):
                context.abort(grpc.StatusCode.NOT_FOUND,
                              f"no deployed model {request.deployed_model_id}")
            split = dict(request.traffic_split) or {
                k: v for k, v in endpoint.traffic_split.items()
                if k != request.deployed_model_id}
            self._check_split(split, {d.id for d in remaining}, context)
            endpoint.deployed_models, endpoint.traffic_split = remaining, split
            return done(aiplatform_v1.UndeployModelResponse(),
                        f"{request.endpoint}/operations/undeploy")

    def client(self) -> aiplatform_v1.EndpointServiceClient:
        from google.cloud.aiplatform_v1.services.endpoint_service.transports import (
            EndpointServiceGrpcTransport,
        )

        return _client(aiplatform_v1.EndpointServiceClient, EndpointServiceGrpcTransport, self)


PREBUILT = "-docker.pkg.dev/vertex-ai/prediction/"  # Vertex AI's own containers
DEFAULT_PORT = 8080  # Vertex AI's, for a ContainerSpec without ports
DEFAULT_ROUTE = "/v1/endpoints/ENDPOINT/deployedModels/DEPLOYED_MODEL:predict"  # both routes'


class ContainerFailed(Exception):
    """The Model's container exited or never became healthy."""


class Containers:
    """Each Model version's container, started at its first prediction and health-checked
    first, as a deployment does: our image runs its entrypoint (serving/entrypoint.py) with
    the variables Vertex AI sets; a prebuilt TensorFlow container runs TF Serving on the
    artifacts as Vertex AI configures it (its routes are its own)."""

    def __init__(self, storage_url: str) -> None:
        self.storage_url = storage_url
        self.running: dict[str, tuple[FakeModelServer, str]] = {}
        self.commands: list[list[str]] = []  # TF Serving's command lines, in order
        self.fronts: list[Front] = []  # our image's request fronts
        self.folder = tempfile.TemporaryDirectory()
        self.lock = threading.Lock()

    def close(self) -> None:
        for front in self.fronts:
            front.shutdown()
            front.server_close()
        for server, _ in self.running.values():
            server.close()
        self.folder.cleanup()

    def predict(self, model: aiplatform_v1.Model, instances: list) -> list[dict]:
        """The container's `predictions` for `instances`; ValueError with its error."""
        url = self.start(model)
        request = urllib.request.Request(url, data=json.dumps({"instances": instances}).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                return json.loads(answer.read())["predictions"]
        except urllib.error.HTTPError as error:
            raise ValueError(json.loads(error.read()).get("error", error.reason)) from None

    def start(self, model: aiplatform_v1.Model) -> str:
        """The URL Vertex AI forwards predictions to (the container started if it is not)."""
        key = f"{model.name}@{model.version_id}"
        with self.lock:
            if key not in self.running:
                workdir = Path(self.folder.name) / str(len(self.running))
                workdir.mkdir()
                self.running[key] = self._run(model, workdir)
            return self.running[key][1]

    def _run(self, model: aiplatform_v1.Model, workdir: Path) -> tuple[FakeModelServer, str]:
        spec = model.container_spec
        environ = {"STORAGE_EMULATOR_HOST": self.storage_url}
        if PREBUILT in spec.image_uri:
            fetch(model.artifact_uri, workdir / "1", environ)
            port, predict, health = DEFAULT_PORT, "/v1/models/default:predict", \
                "/v1/models/default"
            command = ["tensorflow_model_server", "--port=8500", f"--rest_api_port={port}",
                       "--model_name=default", f"--model_base_path={workdir}"]
        else:
            port = spec.ports[0].container_port if spec.ports else DEFAULT_PORT
            predict = spec.predict_route or DEFAULT_ROUTE
            health = spec.health_route or DEFAULT_ROUTE
            try:
                command = entrypoint.prepare(
                    {**environ, contract.PORT: str(port), contract.PREDICT_ROUTE: predict,
                     contract.HEALTH_ROUTE: health, contract.STORAGE_URI: model.artifact_uri},
                    workdir)
            except (entrypoint.ContractError, FetchError) as error:
                raise ContainerFailed(f"the container exited: serving: {error}") from None
        self.commands.append(command)
        server = FakeModelServer(command)
        if PREBUILT not in spec.image_uri:  # our image: its request front on the container's port
            front = Front(("127.0.0.1", 0), server.port, pixels.budget_of(workdir / "1"))
            threading.Thread(target=front.serve_forever, daemon=True).start()
            self.fronts.append(front)
            server.host_port[port] = front.port
        if port not in server.host_port:
            server.close()
            raise ContainerFailed(f"nothing listens on the container's port {port}")
        base = f"http://127.0.0.1:{server.host_port[port]}"
        try:
            urllib.request.urlopen(f"{base}{health}", timeout=30).close()
        except urllib.error.HTTPError as error:
            server.close()
            raise ContainerFailed(f"health check GET {health}: {error.code}") from None
        return server, f"{base}{predict}"


class FakePredictionService(GrpcFake):
    """Predict on an endpoint: the deployed model with the most traffic answers."""

    SERVICE = "google.cloud.aiplatform.v1.PredictionService"

    def __init__(self, endpoints: FakeEndpointService, containers: Containers) -> None:
        self.endpoints, self.containers = endpoints, containers
        self.received: list[aiplatform_v1.PredictRequest] = []
        super().__init__()

    def handlers(self) -> dict:
        return {"Predict": unary(self.predict, aiplatform_v1.PredictRequest,
                                 aiplatform_v1.PredictResponse.serialize)}

    def predict(self, request, context):
        self.received.append(request)
        size = aiplatform_v1.PredictRequest.pb(request).ByteSize()
        if size > MAX_REQUEST_BYTES:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"Request payload size exceeds the limit: {MAX_REQUEST_BYTES} bytes.")
        endpoint = self.endpoints.endpoints.get(request.endpoint)
        if endpoint is None or not endpoint.deployed_models:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"{request.endpoint} has no deployed model")
        busiest = max(endpoint.traffic_split.items(), key=lambda item: item[1])[0]
        deployed = next(d for d in endpoint.deployed_models if d.id == busiest)
        model = self.endpoints.models.find(deployed.model, context)
        instances = [json_format.MessageToDict(v) for v in
                     aiplatform_v1.PredictRequest.pb(request).instances]
        try:
            predictions = self.containers.predict(model, instances)
        except ValueError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except ContainerFailed as error:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
        response = aiplatform_v1.PredictResponse.pb(aiplatform_v1.PredictResponse(
            deployed_model_id=busiest, model=model.name, model_version_id=model.version_id))
        response.predictions.extend(json_format.ParseDict(p, struct_pb2.Value())
                                    for p in predictions)
        return aiplatform_v1.PredictResponse.wrap(response)

    def client(self) -> aiplatform_v1.PredictionServiceClient:
        from google.cloud.aiplatform_v1.services.prediction_service.transports import (
            PredictionServiceGrpcTransport,
        )

        return _client(aiplatform_v1.PredictionServiceClient, PredictionServiceGrpcTransport,
                       self)


class BatchRunner:
    """What a BatchPredictionJob over a file list does: each listed gs:// file is read,
    sent as `{"b64": ...}` to the Model's container, and written as a JSON line
    `{"instance": URI, "prediction": {...}}` under the job's output prefix; a file the model
    cannot read is an `{"instance": URI, "error": ...}` line of the errors file."""

    def __init__(self, models: FakeModelService, containers: Containers, storage) -> None:
        self.models, self.containers, self.storage = models, containers, storage

    def __call__(self, job: aiplatform_v1.BatchPredictionJob) -> None:
        storage = self.storage
        model = self.models.find(job.model, _Aborter())
        (listing,) = job.input_config.gcs_source.uris
        lines, errors = [], []
        for uri in self._read(storage, listing).decode().split():
            instance = {"b64": base64.b64encode(self._read(storage, uri)).decode()}
            try:
                (prediction,) = self.containers.predict(model, [instance])
                lines.append({"instance": uri, "prediction": prediction})
            except ValueError as error:  # the container's answer (TF's decode errors)
                errors.append({"instance": uri, "error": str(error).splitlines()[0]})
        output = f"{job.output_config.gcs_destination.output_uri_prefix.rstrip('/')}/" \
                 f"prediction-{model.display_name}-2026_11_23T00_00_00_000Z"
        bucket, _, prefix = output.removeprefix("gs://").partition("/")
        for name, rows in (("prediction.results-00000-of-00001", lines),
                           ("prediction.errors_stats-00000-of-00001", errors)):
            storage.bucket(bucket).blob(f"{prefix}/{name}").upload_from_string(
                "".join(json.dumps(row) + "\n" for row in rows))
        job.output_info.gcs_output_directory = output
        job.completion_stats.successful_count = len(lines)
        job.completion_stats.failed_count = len(errors)

    @staticmethod
    def _read(storage, uri: str) -> bytes:
        bucket, _, name = uri.removeprefix("gs://").partition("/")
        return storage.bucket(bucket).blob(name).download_as_bytes()


class _Aborter:
    """`find`'s context outside a request: a missing model is an error of the test."""

    def abort(self, code, message):
        raise LookupError(message)
