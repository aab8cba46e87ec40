"""Fake Artifact Registry (tags) and Cloud Build (builds) on 127.0.0.1, from the clients' protos."""

from __future__ import annotations

import grpc
from google.cloud import artifactregistry_v1
from google.cloud.devtools import cloudbuild_v1
from google.longrunning import operations_pb2
from google.protobuf import any_pb2

from tests.grpc_fake import GrpcFake, unary


class FakeArtifactRegistry(GrpcFake):
    SERVICE = "google.devtools.artifactregistry.v1.ArtifactRegistry"

    def __init__(self) -> None:
        self.tags: set[str] = set()
        super().__init__()

    def handlers(self) -> dict:
        return {"GetTag": unary(self.get_tag, artifactregistry_v1.GetTagRequest,
                                artifactregistry_v1.Tag.serialize)}

    def get_tag(self, request, context):
        if request.name not in self.tags:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        return artifactregistry_v1.Tag(name=request.name)

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
        super().__init__()

    def handlers(self) -> dict:
        return {"CreateBuild": unary(self.create_build, cloudbuild_v1.CreateBuildRequest,
                                     operations_pb2.Operation.SerializeToString)}

    def create_build(self, request, context):
        self.requests.append(request)
        build = cloudbuild_v1.Build(request.build)
        build.id, build.status = f"build-{len(self.requests)}", cloudbuild_v1.Build.Status.SUCCESS
        build.log_url = f"https://console.cloud.google.com/cloud-build/builds/{build.id}"
        if self.registry is not None:
            from launch.image_build import tag_resource

            self.registry.tags |= {tag_resource(build.substitutions.get(i.strip("${}"), i))
                                   for i in build.images}
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
