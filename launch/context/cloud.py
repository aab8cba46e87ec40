"""The context every cloud task starts from: where its settings come from (flags, PETS_*
variables, invoke.yaml's `vertex:` section, infra/outputs.json), how it makes API clients,
and the names a run gets (its id, its paths in the bucket, its images, its labels)."""

from __future__ import annotations

import dataclasses
import datetime
import getpass
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from infra.image_context import REPO_ROOT, context_hash
from launch.context import settings
from launch.context.clients import GoogleClients
from launch.context.images import with_tag
from launch.context.places import CloudSetup, RunPaths, label_value


@dataclasses.dataclass(frozen=True)
class Cloud:
    config: Mapping = dataclasses.field(default_factory=dict)  # invoke.yaml's `vertex:`
    overrides: Mapping[str, str | None] = dataclasses.field(default_factory=dict)  # flags
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: os.environ)
    clients: GoogleClients = dataclasses.field(default_factory=GoogleClients)
    outputs_path: Path = settings.OUTPUTS_FILE
    repositories: tuple[str, ...] | None = None  # None: from the settings' sources

    @property
    def environment(self) -> str:
        return self.overrides.get("environment") or self.config.get("environment") or "dev"

    def fields(self, required: tuple[str, ...]) -> dict[str, str | None]:
        """The settings, failing with the command that creates any `required` one missing."""
        return settings.resolve_fields(self.environment, self.overrides, self.environ,
                                       self.config, self.outputs_path, required)

    def setup(self, required: tuple[str, ...] = settings.SETUP) -> CloudSetup:
        return settings.resolve_setup(self.environment, self.overrides, self.environ,
                                      self.config, self.outputs_path, required)

    def locations(self) -> settings.Locations:
        """Where the bucket and the repository live: the regions a job may read them from."""
        return settings.resolve_locations(self.environment, self.overrides, self.environ,
                                          self.config, self.outputs_path)

    def image_repositories(self) -> tuple[str, ...]:
        """The repositories whose images jobs may run (settings.image_repositories; a
        pipeline step's, as its run carries them: `repositories`)."""
        if self.repositories is not None:
            return self.repositories
        return settings.image_repositories(self.environment, self.environ, self.config,
                                           self.outputs_path)

    def storage(self):
        return self.clients.storage(self.fields(("project",))["project"])


IMAGES = ("image", "tpu_image")  # the trainer's, as a job's settings name them


def job_images(cloud: Cloud, tpu: bool = False) -> CloudSetup:
    """Where a job runs, with its images: a pinned `--image` as it is; otherwise the
    repository's images tagged with the content hash of these sources (the submission builds
    them first unless Artifact Registry already has them). Only the image the job runs is
    required: the TPU one for a TPU job, neither when `--image` names it."""
    pinned = cloud.overrides.get("image")
    where = cloud.setup((*settings.JOB, *(() if pinned else ("tpu_image",) if tpu else
                                          ("image",))))
    if pinned:
        return dataclasses.replace(where, tpu_image=pinned)
    tag = context_hash()
    return dataclasses.replace(where, **{field: with_tag(image, tag) for field in IMAGES
                                         if (image := getattr(where, field))})


def run_paths(cloud: Cloud, run_id: str) -> RunPaths:
    """`--run-id` -> the run's gs:// paths; needs only the bucket."""
    return RunPaths(cloud.fields(("bucket",))["bucket"], run_id)


def resolve_path(cloud: Cloud, run_id: str | None, explicit: str | None,
                 in_run: Callable[[RunPaths], str], local: str) -> str:
    """A path given on the command line wins; else `--run-id R` means `in_run(R's paths)`
    in the bucket; else the local default."""
    if explicit:
        return explicit
    return in_run(run_paths(cloud, run_id)) if run_id else local


def stamp() -> str:
    """Now, as the part of a name that keeps runs and batches apart (UTC, to the second)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")


def default_run_id(experiment: str | None) -> str:
    return label_value(f"{experiment or 'pets'}-{stamp()}")


def standard_labels() -> dict[str, str]:
    try:
        revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                  capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        revision = ""
    return {"user": getpass.getuser(), "git-revision": revision or "unknown"}
