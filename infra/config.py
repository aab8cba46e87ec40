"""Per-environment configuration: one typed, validated place. Errors name the field and fix."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping

from infra import locations, names

# Regions where Vertex AI custom training and TensorBoard are offered.
VERTEX_REGIONS = frozenset({
    "us-central1", "us-east1", "us-east4", "us-east5", "us-south1", "us-west1", "us-west2",
    "us-west3", "us-west4", "northamerica-northeast1", "northamerica-northeast2",
    "southamerica-east1", "southamerica-west1", "europe-central2", "europe-north1",
    "europe-southwest1", "europe-west1", "europe-west2", "europe-west3", "europe-west4",
    "europe-west6", "europe-west8", "europe-west9", "europe-west12", "me-central1",
    "me-central2", "me-west1", "africa-south1", "asia-east1", "asia-east2", "asia-northeast1",
    "asia-northeast2", "asia-northeast3", "asia-south1", "asia-southeast1", "asia-southeast2",
    "australia-southeast1", "australia-southeast2",
})

_DOCKER_REPOSITORY = re.compile(r"[a-z0-9-]+-docker\.pkg\.dev/[a-z0-9:.-]+/[a-z0-9._-]+")
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,10}[a-z0-9]$")
_EMAIL = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")
_REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")


class ConfigError(ValueError):
    pass


# The fields that name someone's own projects, people and repository: an environment that is
# yours has none of the example's values in them
OWN_FIELDS = ("project_id", "state_bucket", "researchers_group", "alert_emails",
              "github_repository", "github_repository_id", "github_owner_id")
# RFC 2606: domains reserved for examples, so no group or mailbox of them is anyone's
_EXAMPLE_DOMAIN = re.compile(r"@example\.(com|net|org)$", re.IGNORECASE)


def check_bucket_name(name: str, field: str) -> None:
    """GCS bucket naming rules (the ones that apply to names without dots)."""
    if not _BUCKET.match(name) or name.startswith("goog") or "google" in name or ".." in name:
        raise ConfigError(f"{field}: {name!r} is not a valid bucket name (3-63 lowercase "
                          "letters, digits, '-', '_' or '.', starting and ending with a letter "
                          "or digit, no 'goog' prefix, no 'google')")


@dataclasses.dataclass(frozen=True)
class Retention:
    noncurrent_version_days: int = 30  # delete overwritten/deleted object versions after this
    soft_delete_days: int = 7  # recover deleted objects within this window
    scratch_prefixes: tuple[str, ...] = ("scratch/",)
    scratch_expiry_days: int | None = 14  # None keeps scratch objects forever
    # the images endpoints kept for labelling (asked/: `model.upload --keep-asked`), your
    # users' pictures: deleted after this many days (None keeps them)
    asked_expiry_days: int | None = 90
    build_source_days: int = 7  # Cloud Build uploads and logs
    keep_image_versions: int = 10  # most recent tagged trainer images kept
    untagged_image_days: int = 3

    def validate(self, where: str) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, int) and value < 1:
                raise ConfigError(f"{where}.retention.{field.name}: must be at least 1, "
                                  f"got {value}")
        if not 7 <= self.soft_delete_days <= 90:
            raise ConfigError(f"{where}.retention.soft_delete_days: GCS allows 7 to 90 days, "
                              f"got {self.soft_delete_days}")
        for prefix in self.scratch_prefixes:
            if not prefix or prefix.startswith("/"):
                raise ConfigError(f"{where}.retention.scratch_prefixes: {prefix!r} must be a "
                                  "relative object prefix such as 'scratch/'")


@dataclasses.dataclass(frozen=True)
class Environment:
    """Everything that differs between dev and prod. Derived names live in `infra.names`."""

    name: str
    project_id: str
    region: str
    name_prefix: str
    researchers_group: str  # a Google group's email
    github_repository: str  # owner/name: the only repository allowed to deploy
    github_repository_id: int  # its numeric id (the API's `id`): a re-created repo differs
    github_owner_id: int  # the numeric id of its owner (user or organisation)
    state_bucket: str  # Terraform state (bootstrapped by hand: docs/platform/deploy.md)
    # Who Cloud Monitoring emails when a Vertex AI job fails or is cancelled (one channel each)
    alert_emails: tuple[str, ...]
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    retention: Retention = dataclasses.field(default_factory=Retention)
    # Researchers may push images from their own Docker (`--local-docker`). Off: images are
    # built only by Cloud Build, as the builder account, from the sources' content hash.
    researchers_push_images: bool = False
    # Researchers may submit Cloud Builds as the builder (`invoke image.build`, `invoke train`
    # of sources whose image is missing). The build checks each tag is its sources' content
    # hash, but a build config of a researcher's own runs any steps as the builder; off, only
    # the deployer builds (images of `main`) and no researcher can place an image at all.
    researchers_build_images: bool = True
    # Where the data bucket and the image repository live (None: the region). A dual- or
    # multi-region (US, NAM4, EU, EUR4, ASIA, ASIA1; repositories us, europe, asia) lets
    # `invoke train --regions` fail over to other regions of its continent
    # (infra/locations.py); a job only runs where both are read without crossing one.
    bucket_location: str | None = None
    registry_location: str | None = None
    # Artifact Registry repositories besides the environment's own whose images jobs may run
    # as the trainer (LOCATION-docker.pkg.dev/PROJECT/REPOSITORY), e.g. a shared base image
    # project's; the trainer must also be allowed to pull from them. Empty: only its own.
    allowed_image_repositories: tuple[str, ...] = ()

    def _check_alert_emails(self, where: str) -> None:
        emails = self.alert_emails
        if isinstance(emails, str) or not emails:
            raise ConfigError(f"{where}.alert_emails: {emails!r} must be a tuple of at least "
                              "one email address (who hears of failed jobs)")
        for email in emails:
            if not isinstance(email, str) or not _EMAIL.match(email):
                raise ConfigError(f"{where}.alert_emails: {email!r} is not an email address")
        seen: dict[str, str] = {}
        for email in emails:  # one notification channel per address
            if twin := seen.get(key := names.channel_key(email)):
                raise ConfigError(f"{where}.alert_emails: {email!r} and {twin!r} are one "
                                  "address (letters' case and punctuation aside); list it once")
            seen[key] = email

    def _check_locations(self, where: str) -> None:
        """Each location known, and on the continent of the environment's own region (its
        TensorBoard's and build's), where its jobs run by default."""
        home = locations.region_continent(self.region)
        for field, value, continent, offered in (
                ("bucket_location", self.bucket_location, locations.bucket_continent,
                 [*locations.BUCKET_MULTI_REGIONS, *locations.BUCKET_DUAL_REGIONS]),
                ("registry_location", self.registry_location, locations.registry_continent,
                 list(locations.REGISTRY_MULTI_REGIONS))):
            if value is None:
                continue
            found = continent(value) if isinstance(value, str) else None
            if found is None:
                raise ConfigError(f"{where}.{field}: {value!r} is not a location "
                                  f"infra/locations.py knows: {', '.join(offered)} or a region "
                                  "(None: the environment's region)")
            if found != home:
                raise ConfigError(f"{where}.{field}: {value!r} is in {found}, the region "
                                  f"{self.region} in {home}: choose a location on its "
                                  "continent (jobs in the region read it)")

    def example_fields(self, example: Collection[object]) -> list[str]:
        """The fields of OWN_FIELDS that still hold one of the `example`'s values (or an
        address at a domain reserved for examples): what is not yet this environment's own."""
        found = []
        for field in OWN_FIELDS:
            value = getattr(self, field)
            values = value if isinstance(value, tuple) else (value,)
            if any(v in example or (isinstance(v, str) and _EXAMPLE_DOMAIN.search(v))
                   for v in values):
                found.append(field)
        return found

    @property
    def is_production(self) -> bool:
        return self.name == "prod"

    def validate(self) -> Environment:
        where = f"environment {self.name!r}"
        if not _PROJECT_ID.match(self.project_id):
            raise ConfigError(f"{where}.project_id: {self.project_id!r} is not a project id "
                              "(6-30 lowercase letters, digits or hyphens, starting with a "
                              "letter)")
        if self.region not in VERTEX_REGIONS:
            raise ConfigError(f"{where}.region: {self.region!r} is not a Vertex AI region "
                              "(e.g. us-central1, europe-west4)")
        if not _PREFIX.match(self.name_prefix):
            raise ConfigError(f"{where}.name_prefix: {self.name_prefix!r} must be 2-12 "
                              "lowercase letters, digits or hyphens, starting with a letter")
        if not _EMAIL.match(self.researchers_group):
            raise ConfigError(f"{where}.researchers_group: {self.researchers_group!r} is not "
                              "a group email address")
        if not _REPOSITORY.match(self.github_repository):
            raise ConfigError(f"{where}.github_repository: {self.github_repository!r} must be "
                              "'owner/name'")
        for field in ("github_repository_id", "github_owner_id"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where}.{field}: {value!r} is not a GitHub numeric id "
                                  "(`gh api repos/OWNER/NAME --jq '.id, .owner.id'`)")
        check_bucket_name(self.state_bucket, f"{where}.state_bucket")
        self._check_alert_emails(where)
        self._check_locations(where)
        repositories = self.allowed_image_repositories
        if isinstance(repositories, str) or not all(
                isinstance(r, str) and _DOCKER_REPOSITORY.fullmatch(r) for r in repositories):
            raise ConfigError(f"{where}.allowed_image_repositories: {repositories!r} must be a "
                              "tuple of LOCATION-docker.pkg.dev/PROJECT/REPOSITORY")
        for key, value in self.labels.items():
            if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
                raise ConfigError(f"{where}.labels: {key}={value!r} breaks GCP label rules "
                                  "(lowercase letters, digits, '_' and '-'; keys start with a "
                                  "letter)")
        self.retention.validate(where)
        check_bucket_name(names.data_bucket(self), f"{where} (project_id + name_prefix)")
        return self
