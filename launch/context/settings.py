"""Resolves where jobs run, in one place: flags > environment variables > invoke.yaml >
the infra outputs file that `cdktn deploy --outputs-file infra/outputs.json` writes."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

from infra import locations
from infra import outputs as stack_outputs
from infra.image_context import REPO_ROOT
from launch.context import images
from launch.context.places import CloudSetup, region_name
from launch.errors import InputError, MissingError

OUTPUTS_FILE = stack_outputs.OUTPUTS_FILE
ENV_PREFIX = "PETS_"
CONFIG_SECTION = "vertex"  # invoke.yaml's section of settings


@dataclasses.dataclass(frozen=True)
class Setting:
    """A setting: the stack output that provides it (infra/outputs.py), what reads it, and
    whether tasks take it as a flag (launch/cli/taskflags.py CLOUD, which a test holds to
    this)."""

    output: str
    what: str
    flag: bool = False


# The one table of settings: the docs' reference page (docs/reference/settings.md) and the message
# for a missing one are made from it.
SETTINGS: Mapping[str, Setting] = {
    "project": Setting("project", "the GCP project every job and request goes to", flag=True),
    "region": Setting("region", "the region jobs run in", flag=True),
    "bucket": Setting("bucket", "the data bucket: records, datasets, runs", flag=True),
    "image": Setting("image_uri", "the trainer image of CPU and GPU jobs (`--image` sets "
                                  "the TPU one too)", flag=True),
    "tpu_image": Setting("tpu_image_uri", "the trainer image of TPU jobs"),
    "serving_image": Setting("serving_image_uri", "the TF Serving image models are uploaded "
                                                  "with"),
    "serving_gpu_image": Setting("serving_gpu_image_uri", "the same on TF Serving's GPU "
                                                          "build (`model.upload --gpu`)"),
    "service_account": Setting("trainer_service_account", "what training, tuning and "
                                                          "evaluation jobs run as"),
    "converter_service_account": Setting("converter_service_account", "what conversion jobs "
                                                                      "run as"),
    "serving_service_account": Setting("serving_service_account", "what endpoints and batch "
                                                                  "predictions run as"),
    "pipelines_service_account": Setting("pipelines_service_account", "what continuous "
                                                                      "training's pipeline runs "
                                                                      "run as"),
    "launcher_image": Setting("launcher_image_uri", "the image continuous training's "
                                                    "pipeline steps run in"),
    "tensorboard": Setting("tensorboard", "the Vertex AI TensorBoard jobs write to "
                                          "(optional)"),
    "build_bucket": Setting("build_bucket", "where image builds upload their sources"),
    "builder_service_account": Setting("builder_service_account", "what image builds run "
                                                                  "as"),
    "researchers_push_images": Setting("researchers_push_images", "whether researchers may "
                                                                  "push images (true, false)"),
    "researchers_build_images": Setting("researchers_build_images", "whether researchers "
                                                                    "may submit builds"),
    "notifications_topic": Setting("notifications_topic", "the Pub/Sub topic of job events "
                                                          "(`--notify`)"),
    "bucket_location": Setting("bucket_location", "where the bucket lives: the regions jobs "
                                                  "may read it from"),
    "repository_location": Setting("repository_location", "where the image repository "
                                                          "lives"),
}
FROM_OUTPUTS = {field: setting.output for field, setting in SETTINGS.items()}
# Where the bucket and the repository live, and how to read each kind of name.
LOCATIONS = {"bucket_location": locations.bucket_continent,
             "repository_location": locations.registry_continent}
# what every Vertex AI training, tuning or evaluation job needs; its image comes from
# `job_images` (the TPU one for TPU jobs, none when --image names it)
JOB = ("project", "region", "bucket", "service_account")
SETUP = (*JOB, "image")  # a CPU or GPU job's, its image from the settings


def flag(field: str) -> str:
    return f"--{field.replace('_', '-')}"


def ways(field: str, outputs_path: Path = OUTPUTS_FILE) -> str:
    """How a setting can be given, first source first."""
    given = f"{flag(field)}, " if SETTINGS[field].flag else ""
    return (f"{given}{ENV_PREFIX}{field.upper()}, invoke.yaml's {CONFIG_SECTION}.{field} or "
            f"{_shown(outputs_path)}'s {SETTINGS[field].output}")


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


class SettingsMissingError(MissingError):
    pass


BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")


def bucket_name(value: str, source: str) -> str:
    """A bucket's name, given plainly or as gs://NAME (never doubled into gs://gs://)."""
    name = value.removeprefix("gs://").rstrip("/")
    if not BUCKET.fullmatch(name) or ".." in name:
        raise InputError(f"{source} {value[:100]!r} is not a bucket name: 3 to 222 lowercase "
                         "letters, digits, '-', '_' and '.', a letter or digit at each end "
                         "(gs://NAME is fine; no path after it)")
    return name


def resolve_fields(environment: str, overrides: Mapping[str, str | None],
                   env: Mapping[str, str], config: Mapping[str, str],
                   outputs_path: Path = OUTPUTS_FILE,
                   required: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Each field from the first source that has it; a missing required one names the fix."""
    outputs = stack_outputs.read(environment, outputs_path)
    values = {}
    for field, output in FROM_OUTPUTS.items():
        sources = ((flag(field), overrides.get(field)),
                   (f"{ENV_PREFIX}{field.upper()}", env.get(f"{ENV_PREFIX}{field.upper()}")),
                   (f"invoke.yaml's vertex.{field}", config.get(field)),
                   (f"{outputs_path}'s {output}", outputs.get(output)))
        source, values[field] = next(((s, v) for s, v in sources if v), ("", None))
        if field == "bucket" and values[field] and source != sources[-1][0]:  # typed by people
            values[field] = bucket_name(str(values[field]), source)
        if field == "region" and values[field]:  # every source: it becomes a host name
            values[field] = region_name(str(values[field]), source)
        if field in LOCATIONS and values[field] and not LOCATIONS[field](values[field]):
            raise InputError(f"{source} {str(values[field])[:80]!r} is not a location "
                             "infra/locations.py knows (a region, or US, EU, ASIA, NAM4, EUR4, "
                             "ASIA1 for a bucket; us, europe, asia for a repository)")
    missing = [field for field in required if not values[field]]
    if missing:
        stack = stack_outputs.stack_name(environment)
        raise SettingsMissingError(
            f"no {', '.join(missing)} for environment {environment!r}: give "
            + "; ".join(f"{field} by {ways(field, outputs_path)}" for field in missing)
            + f". A platform engineer's `npx cdktn deploy {stack} --outputs-file "
            f"infra/outputs.json` writes them all (`npx cdktn output {stack} --outputs-file "
            "infra/outputs.json` fetches them); docs/reference/settings.md lists every setting")
    return values


def resolve_setup(environment: str, overrides: Mapping[str, str | None],
                  env: Mapping[str, str], config: Mapping[str, str],
                  outputs_path: Path = OUTPUTS_FILE,
                  required: tuple[str, ...] = SETUP) -> CloudSetup:
    fields = resolve_fields(environment, overrides, env, config, outputs_path, required)
    return CloudSetup(**{k: v for k, v in fields.items() if k in CloudSetup.__annotations__})


@dataclasses.dataclass(frozen=True)
class Locations:
    """Where a run's data (the bucket) and image (the repository) live."""

    bucket: str
    repository: str
    unknown: tuple[str, ...] = ()  # "bucket", "repository": taken to be `assumed`
    assumed: str = ""  # e.g. "the environment's region"

    def note(self) -> str:
        """What was assumed, for a note beside the request ('' when nothing was)."""
        if not self.unknown:
            return ""
        taken = self.bucket if "bucket" in self.unknown else self.repository
        fixes = " or ".join(f"{ENV_PREFIX}{kind.upper()}_LOCATION" for kind in self.unknown)
        return (f"note: the {' and '.join(self.unknown)} location is not known, so it is "
                f"taken to be {self.assumed} ({taken}); set {fixes} (or deploy the stack "
                "again) if it is elsewhere")


def resolve_locations(environment: str, overrides: Mapping[str, str | None],
                      env: Mapping[str, str], config: Mapping[str, str],
                      outputs_path: Path = OUTPUTS_FILE) -> Locations:
    """The bucket's and the repository's locations. The repository's is the one the image's
    host names (where a job pulls it from); the bucket's is its setting, else the
    environment's own region: never the job's --region, which would pass any region."""
    fields = resolve_fields(environment, overrides, env, config, outputs_path, ("region",))
    own = resolve_fields(environment, {}, env, config, outputs_path, ())["region"]
    home = own or fields["region"]
    found = {"bucket": fields["bucket_location"],
             "repository": images.image_location(fields["image"]) or
             fields["repository_location"]}
    unknown = tuple(kind for kind, location in found.items() if not location)
    return Locations(found["bucket"] or home, found["repository"] or home, unknown,
                     ("the environment's region" if own else "the job's region")
                     if unknown else "")


def image_repositories(environment: str, env: Mapping[str, str], config: Mapping[str, str],
                       outputs_path: Path = OUTPUTS_FILE) -> tuple[str, ...]:
    """The repositories whose images jobs may run: those of the environment's own images
    (its settings without the flags: variables, invoke.yaml, the stack's outputs) and any a
    platform engineer allows (the stack's `allowed_image_repositories`). A flag, a job file
    or a rerun names an image; none of them names where images may come from."""
    fields = resolve_fields(environment, {}, env, config, outputs_path, ())
    outputs = stack_outputs.read(environment, outputs_path)
    found = [outputs.get("repository_url"), *map(images.repository_of, (
        fields["image"], fields["tpu_image"], fields["serving_image"],
        fields["serving_gpu_image"])),
        *outputs.get("allowed_image_repositories", "").split(",")]
    return tuple(dict.fromkeys(r.strip().rstrip("/") for r in found if r and r.strip()))
