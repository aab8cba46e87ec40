"""Fake Artifact Registry (tags) and Cloud Build (builds) on 127.0.0.1, from the clients' protos."""

from __future__ import annotations

import hashlib

import grpc
from google.cloud import artifactregistry_v1
from google.cloud.devtools import cloudbuild_v1
from google.longrunning import operations_pb2
from google.protobuf import any_pb2

from tests.fakes.grpc_server import GrpcFake, unary


class FakeArtifactRegistry(GrpcFake):
    SERVICE = "google.devtools.artifactregistry.v1.ArtifactRegistry"

    def __init__(self) -> None:
        self.tags: dict[str, str] = {}  # tag resource name -> the image digest it names
        self.lookups: list[str] = []  # the tags asked for, in order
        super().__init__()

    def push(self, image_uri: str) -> str:
        """Tags new image content as `image_uri` (moving the tag if it exists); its digest."""
        from launch.context.images import tag_resource

        name = tag_resource(image_uri)
        digest = "sha256:" + hashlib.sha256(f"{name}#{len(self.tags)}".encode()).hexdigest()
        self.tags[name] = digest
        return digest

    def handlers(self) -> dict:
        return {"GetTag": unary(self.get_tag, artifactregistry_v1.GetTagRequest,
                                artifactregistry_v1.Tag.serialize)}

    def get_tag(self, request, context):
        self.lookups.append(request.name)
        if request.name not in self.tags:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        package = request.name.rsplit("/tags/", 1)[0]
        return artifactregistry_v1.Tag(name=request.name,
                                       version=f"{package}/versions/{self.tags[request.name]}")

    def client(self) -> artifactregistry_v1.ArtifactRegistryClient:
        from google.cloud.artifactregistry_v1.services.artifact_registry.transports import (
            ArtifactRegistryGrpcTransport,
        )

        return artifactregistry_v1.ArtifactRegistryClient(
            transport=ArtifactRegistryGrpcTransport(channel=self.channel()))


class FakeCloudBuild(GrpcFake):
    """Completes every build at once, successfully, and records the requests; with a
    registry, it pushes the build's images there as Cloud Build does."""

    SERVICE = "google.devtools.cloudbuild.v1.CloudBuild"

    def __init__(self, registry: FakeArtifactRegistry | None = None) -> None:
        self.requests: list[cloudbuild_v1.CreateBuildRequest] = []
        self.registry = registry
        self.default_service_account = ""  # as GetDefaultServiceAccount answers: the API's form
        super().__init__()

    def handlers(self) -> dict:
        return {"CreateBuild": unary(self.create_build, cloudbuild_v1.CreateBuildRequest,
                                     operations_pb2.Operation.SerializeToString),
                "GetDefaultServiceAccount": unary(
                    self.get_default_service_account,
                    cloudbuild_v1.GetDefaultServiceAccountRequest,
                    cloudbuild_v1.DefaultServiceAccount.serialize)}

    def get_default_service_account(self, request, context):
        return cloudbuild_v1.DefaultServiceAccount(
            name=request.name, service_account_email=self.default_service_account)

    def create_build(self, request, context):
        self.requests.append(request)
        build = cloudbuild_v1.Build(request.build)
        build.id, build.status = f"build-{len(self.requests)}", cloudbuild_v1.Build.Status.SUCCESS
        build.log_url = f"https://console.cloud.google.com/cloud-build/builds/{build.id}"
        if self.registry is not None:
            for image in build.images:
                self.registry.push(build.substitutions.get(image.strip("${}"), image))
        response, metadata = any_pb2.Any(), any_pb2.Any()
        response.Pack(cloudbuild_v1.Build.pb(build))
        metadata.Pack(cloudbuild_v1.BuildOperationMetadata.pb(
            cloudbuild_v1.BuildOperationMetadata(build=build)))
        return operations_pb2.Operation(name=f"operations/{build.id}", done=True,
                                        response=response, metadata=metadata)

    def client(self) -> cloudbuild_v1.CloudBuildClient:
        from google.cloud.devtools.cloudbuild_v1.services.cloud_build.transports import (
            CloudBuildGrpcTransport,
        )

        return cloudbuild_v1.CloudBuildClient(
            transport=CloudBuildGrpcTransport(channel=self.channel()))
