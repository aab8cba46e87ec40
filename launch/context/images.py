"""`invoke image.build`: the trainer images and the serving image in Cloud Build (no local
Docker needed) or with a local Docker engine (`--local-docker`), tagged with the build
context's content hash, and skipped when Artifact Registry has that tag.

The same hash tags the images `cdktn deploy` builds, so a deploy and a researcher never build
the same sources twice.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from google.api_core import exceptions

from infra.image_context import (
    CLOUDBUILD_CONFIG,
    DOCKERFILE,
    REPO_ROOT,
    TAG_CHECK,
    context_files,
    ignore_file,
)
from infra.names import (
    IMAGE_SUBSTITUTIONS,
    SERVING_GPU_IMAGE,
    SERVING_IMAGE,
    TPU_IMAGE,
    TRAINER_IMAGE,
)
from launch.errors import UserError

if TYPE_CHECKING:  # Google's build clients load when a build is made (clients.py)
    from google.cloud import artifactregistry_v1
    from google.cloud.devtools import cloudbuild_v1

_IMAGE_URI = re.compile(r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[^/]+)/"
                        r"(?P<repository>[^/]+)/(?P<image>[^:@]+):(?P<tag>[\w.-]+)$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_BY_DIGEST = re.compile(r"^[a-z0-9-]+-docker\.pkg\.dev/[^/:@]+/[^/:@]+/[^:@]+@sha256:[0-9a-f]{64}$")


class ImageBuildError(UserError):
    pass


@dataclasses.dataclass(frozen=True)
class Images:
    """The images one build makes from the same sources: the trainer's GPU/CPU and TPU
    variants, and TF Serving for endpoints on CPUs and on GPUs."""

    gpu: str
    tpu: str
    serving: str
    serving_gpu: str

    def all(self) -> tuple[str, ...]:
        return self.gpu, self.tpu, self.serving, self.serving_gpu

    def substitutions(self) -> dict[str, str]:
        """cloudbuild.yaml's substitution for each image."""
        return {IMAGE_SUBSTITUTIONS[TRAINER_IMAGE]: self.gpu,
                IMAGE_SUBSTITUTIONS[TPU_IMAGE]: self.tpu,
                IMAGE_SUBSTITUTIONS[SERVING_IMAGE]: self.serving,
                IMAGE_SUBSTITUTIONS[SERVING_GPU_IMAGE]: self.serving_gpu}

    def described(self) -> str:
        return f"{self.gpu}, its TPU variant and the serving images (CPU and GPU)"


@dataclasses.dataclass(frozen=True)
class BuildSite:
    """Where Cloud Build runs and as whom; the bucket holds the sources and the logs."""

    project: str
    region: str
    bucket: str
    service_account: str  # email


@dataclasses.dataclass(frozen=True)
class BuildClients:
    registry: artifactregistry_v1.ArtifactRegistryClient
    builds: cloudbuild_v1.CloudBuildClient
    storage: object  # google.cloud.storage.Client: uploads the build context


@dataclasses.dataclass(frozen=True)
class Built:
    """What `ensure_images*` did, and each image by the digest its tag names now (known
    without another lookup when the tags already existed; empty after a fresh build)."""

    message: str
    digests: dict[str, str] = dataclasses.field(default_factory=dict)


def tag_resource(image_uri: str) -> str:
    """`us-central1-docker.pkg.dev/p/repo/trainer:abc` -> the Artifact Registry tag name."""
    match = _IMAGE_URI.match(image_uri)
    if not match:
        raise ImageBuildError(f"{image_uri} is not an Artifact Registry Docker image URI "
                              "(LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE:TAG)")
    g = match.groupdict()
    return (f"projects/{g['project']}/locations/{g['location']}/repositories/"
            f"{g['repository']}/packages/{g['image']}/tags/{g['tag']}")


def check_image_uri(image_uri: str, flag: str = "--image") -> str:
    """`--image`: an Artifact Registry image by tag or digest (jobs run only images of the
    project's repositories, which the trainer's service account may pull)."""
    if not (_IMAGE_URI.match(image_uri) or _BY_DIGEST.match(image_uri)):
        raise ImageBuildError(f"{flag} {image_uri[:100]!r} is not an Artifact Registry image: "
                              "give LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE:TAG or "
                              "...IMAGE@sha256:DIGEST (`invoke image.build` makes one)")
    return image_uri


_REPOSITORY = re.compile(r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/[^/:@]+/[^/:@]+")


def repository_of(image_uri: str | None) -> str | None:
    """`us-docker.pkg.dev/p/repo/trainer:t` -> `us-docker.pkg.dev/p/repo` (None: not an
    Artifact Registry image)."""
    match = _REPOSITORY.match(image_uri or "")
    return match[0] if match else None


def image_location(image_uri: str | None) -> str | None:
    """Where an Artifact Registry image lives, as its host names it: `us-central1` for
    `us-central1-docker.pkg.dev/...`, the multi-region `us` for `us-docker.pkg.dev/...`
    (https://cloud.google.com/artifact-registry/docs/docker/names, read 2026-11-26:
    LOCATION-docker.pkg.dev/PROJECT-ID/REPOSITORY/IMAGE)."""
    match = _REPOSITORY.match(image_uri or "")
    return match["location"] if match else None


def check_repository(image_uri: str, repositories: tuple[str, ...], flag: str = "--image"
                     ) -> str:
    """`--image` (a flag, a job file's `image:` or a rerun's) runs as the trainer: only an
    image of the environment's repositories, or of one a platform engineer allows."""
    check_image_uri(image_uri, flag)
    if repository_of(image_uri) not in repositories:
        raise ImageBuildError(
            f"{flag} {image_uri[:120]} is not in the environment's repositories "
            f"({', '.join(repositories) or 'none known'}): jobs run as the trainer only images "
            "built for the environment (`invoke image.build`); a platform engineer may allow "
            "another repository (allowed_image_repositories in infra/environments.py)")
    return image_uri


def with_tag(image_uri: str, tag: str) -> str:
    """`.../trainer:deployed` (or untagged) -> `.../trainer:TAG`."""
    name = image_uri.split("@", 1)[0]
    repository, _, last = name.rpartition("/")
    return f"{repository}/{last.split(':', 1)[0]}:{tag}"


def with_digest(image_uri: str, digest: str) -> str:
    """`.../trainer:TAG` -> `.../trainer@sha256:...`: a name no later push can move."""
    if not _DIGEST.match(digest):
        raise ImageBuildError(f"{digest!r} is not an image digest (sha256:<64 hex digits>)")
    name = image_uri.split("@", 1)[0]
    repository, _, last = name.rpartition("/")
    return f"{repository}/{last.split(':', 1)[0]}@{digest}"


def resolve_digest(client: artifactregistry_v1.ArtifactRegistryClient, image_uri: str,
                   timeout: float = 60.0) -> str:
    """The image by the digest its Artifact Registry tag names now (as given when it already
    names a digest): a job runs the image that was built, even if the tag moves later."""
    if "@" in image_uri:
        return with_digest(image_uri, image_uri.rsplit("@", 1)[1])
    try:
        tag_resource(image_uri)
    except ImageBuildError as error:
        raise ImageBuildError(f"{error}, nor pinned by digest (IMAGE@sha256:...): jobs run "
                              "only images that cannot change under them") from None
    if (pinned := tagged_digest(client, image_uri, timeout)) is None:
        raise ImageBuildError(f"{image_uri} is not in Artifact Registry: `invoke image.build` "
                              "builds the sources' images; check --image")
    return pinned


def tagged_digest(client: artifactregistry_v1.ArtifactRegistryClient, image_uri: str,
                  timeout: float = 60.0) -> str | None:
    """`.../IMAGE:TAG` -> `.../IMAGE@sha256:...` as the tag names it now; None if no such tag."""
    try:
        tag = client.get_tag(name=tag_resource(image_uri), timeout=timeout)
    except exceptions.NotFound:
        return None
    return with_digest(image_uri, tag.version.rsplit("/", 1)[-1])


def context_tarball(root: Path = REPO_ROOT) -> bytes:
    """The Docker context plus the build config and the tag check its first step runs, as a
    reproducible tar.gz (sorted, no mtimes)."""
    names = {*context_files(root),
             *(root / n for n in (DOCKERFILE, ignore_file(root), CLOUDBUILD_CONFIG, TAG_CHECK))}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in names if p.exists()):
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            data = path.read_bytes()
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


def build_request(*, config_text: str, images: Images, source_bucket: str,
                  source_object: str, service_account: str, logs_bucket: str
                  ) -> cloudbuild_v1.Build:
    """cloudbuild.yaml with the image names substituted: the same build `cdktn deploy` runs."""
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import duration_pb2

    config = yaml.safe_load(config_text)
    timeout = int(str(config.get("timeout", "3600s")).rstrip("s"))
    return cloudbuild_v1.Build(
        source=cloudbuild_v1.Source(storage_source=cloudbuild_v1.StorageSource(
            bucket=source_bucket, object_=source_object)),
        steps=[cloudbuild_v1.BuildStep(name=s["name"], args=s.get("args", []))
               for s in config["steps"]],
        images=config.get("images", []),
        substitutions=images.substitutions(),
        service_account=service_account,
        logs_bucket=f"gs://{logs_bucket}/logs",
        options=cloudbuild_v1.BuildOptions(logging=cloudbuild_v1.BuildOptions.LoggingMode[
            config.get("options", {}).get("logging", "GCS_ONLY")]),
        timeout=duration_pb2.Duration(seconds=timeout),
    )


def existing(registry, images: Images) -> dict[str, str] | None:
    """Every image by digest when every tag exists (one lookup each); None otherwise."""
    digests = {}
    for image in images.all():
        if (pinned := tagged_digest(registry, image)) is None:
            return None
        digests[image] = pinned
    return digests


def _up_to_date(images: Images, digests: dict[str, str]) -> Built:
    return Built(f"up to date: {images.described()} exist; nothing to build", digests)


def docker_commands(config_text: str, images: Images) -> list[list[str]]:
    """cloudbuild.yaml's steps as local commands (`docker`, and a `python3` step with this
    Python: the tag check), then a push of each image: one build definition for Cloud Build
    and for a workstation's Docker."""
    config = yaml.safe_load(config_text)
    values = {f"${{{name}}}": image for name, image in images.substitutions().items()}
    commands = []
    for step in config["steps"]:
        args = [values.get(a, a) for a in step.get("args", [])]
        if step["name"].rsplit("/", 1)[-1] == "docker":
            commands.append(["docker", *args])
        elif args[:1] == ["python3"]:
            commands.append([sys.executable, *args[1:]])
        else:
            raise ImageBuildError(f"{CLOUDBUILD_CONFIG}: step {step['name']} is not a docker "
                                  "step; build in Cloud Build instead (drop --local-docker)")
    return commands + [["docker", "push", values.get(i, i)] for i in config.get("images", [])]


def ensure_images_locally(registry, images: Images, root: Path = REPO_ROOT) -> Built:
    """Builds and pushes the images with the local Docker engine unless every tag exists."""
    if (digests := existing(registry, images)) is not None:
        return _up_to_date(images, digests)
    if shutil.which("docker") is None:
        raise ImageBuildError("docker is not on PATH: install Docker, or drop --local-docker "
                              "to build in Cloud Build")
    registry_host = images.gpu.split("/", 1)[0]
    for command in docker_commands((root / CLOUDBUILD_CONFIG).read_text(), images):
        if subprocess.run(command, cwd=root).returncode != 0:
            hint = (f"; authenticate with `gcloud auth configure-docker {registry_host}`"
                    if command[1] == "push" else "")
            raise ImageBuildError(f"`{' '.join(command)}` failed (output above){hint}")
    return Built(f"built and pushed {', '.join(images.all())} with the local Docker")


def ensure_images(clients: BuildClients, site: BuildSite, images: Images, tag: str,
                  root: Path = REPO_ROOT, on_status: Callable[[str], None] = print) -> Built:
    """Builds the images in Cloud Build unless every tag exists; says what happened."""
    from google.cloud.devtools import cloudbuild_v1

    if (digests := existing(clients.registry, images)) is not None:
        return _up_to_date(images, digests)
    source_object = f"source/{tag}.tgz"
    clients.storage.bucket(site.bucket).blob(source_object).upload_from_string(
        context_tarball(root), content_type="application/gzip")
    request = build_request(
        config_text=(root / CLOUDBUILD_CONFIG).read_text(), images=images,
        source_bucket=site.bucket, source_object=source_object,
        service_account=f"projects/{site.project}/serviceAccounts/{site.service_account}",
        logs_bucket=site.bucket)
    try:
        operation = clients.builds.create_build(
            parent=f"projects/{site.project}/locations/{site.region}",
            project_id=site.project, build=request)
        started = operation.metadata.build
        on_status(f"building {images.described()} in Cloud Build {started.id} "
                  f"(about 20 minutes; log: {started.log_url})")
        build = operation.result(timeout=3600)
    except exceptions.GoogleAPICallError as error:
        raise ImageBuildError(f"Cloud Build refused the build: {error.message}") from None
    if build.status != cloudbuild_v1.Build.Status.SUCCESS:
        raise ImageBuildError(f"build {build.id} ended {build.status.name}: {build.log_url}")
    return Built(f"built {', '.join(images.all())} (build {build.id})")
