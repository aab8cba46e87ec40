"""The stack's images of these sources (`invoke image.build`, and before a job that runs
them): built in Cloud Build, or with this machine's Docker, only when a tag is missing."""

from __future__ import annotations

from infra.image_context import context_hash
from launch.context import images
from launch.context.cloud import Cloud
from launch.text import say

# the settings naming images.Images
IMAGE_FIELDS = ("image", "tpu_image", "serving_image", "serving_gpu_image")


def build_images(cloud: Cloud, local_docker: bool = False) -> images.Built:
    """`invoke image.build`: Cloud Build (or the local Docker), skipped when every tag exists."""
    required = ("project", "region", *IMAGE_FIELDS)
    if not local_docker:
        required += ("build_bucket", "builder_service_account")
    fields = cloud.fields(required)
    tag = context_hash()
    wanted = images.Images(*(images.with_tag(fields[f], tag) for f in IMAGE_FIELDS))
    registry = cloud.clients.registry()
    if local_docker:
        if fields["researchers_push_images"] == "false":
            raise images.ImageBuildError(
                f"--local-docker pushes images, which researchers may not do in environment "
                f"{cloud.environment!r} (researchers_push_images is off in "
                "infra/environments.py, so a tag always names an image Cloud Build made). "
                "Drop --local-docker to build in Cloud Build as the builder account, or ask a "
                "platform engineer to turn researchers_push_images on")
        return images.ensure_images_locally(registry, wanted)
    if fields["researchers_build_images"] == "false" and \
            images.existing(registry, wanted) is None:
        raise images.ImageBuildError(
            f"the image of these sources ({tag}) does not exist, and researchers do not build "
            f"images in environment {cloud.environment!r} (researchers_build_images is off in "
            "infra/environments.py: images come from main's deploys). Train from main's "
            "sources, pass --image with an image of main, or ask a platform engineer")
    site = images.BuildSite(fields["project"], fields["region"], fields["build_bucket"],
                            fields["builder_service_account"])
    return images.ensure_images(
        images.BuildClients(registry, cloud.clients.builds(), cloud.storage()), site, wanted,
        tag, on_status=say)
