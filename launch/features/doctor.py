"""`invoke doctor`: preflight for cloud launches. Each check says what is wrong and the
command that fixes it; nothing is changed. The platform's checks (credentials, bucket, data,
image, access) are here; the cloud target's own (its service, quotas and end dates:
`base.DOCTOR`'s `Checks`) come through the registry."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence

import google.auth
import google.auth.exceptions
from google.api_core import exceptions
from google.auth.transport.requests import AuthorizedSession

from infra import outputs as stack_outputs
from launch import targets
from launch.context.cloud import Cloud, job_images
from launch.context.images import ImageBuildError, resolve_digest
from launch.context.settings import SettingsMissingError
from launch.errors import MissingError
from launch.stores import datachecks
from launch.stores.gcs.upload import training_data_problems
from launch.targets.base import DOCTOR, Check
from trainer.common.files import RECORDS_PREFIX

ACT_AS = "iam.serviceAccounts.actAs"
IAM_ENDPOINT = "https://iam.googleapis.com"
# Cloud Build's default accounts, which hold project-wide roles out of the box.
BROAD_BUILD_ACCOUNTS = {"@cloudbuild.gserviceaccount.com": "the legacy Cloud Build account",
                        "-compute@developer.gserviceaccount.com": "the Compute Engine default"}


def run(cloud: Cloud) -> tuple[str, bool]:
    """Every check runs, whatever fails before it; the report and whether all passed. The
    end dates need no cloud: they are reported without credentials too."""
    own = targets.first(DOCTOR, cloud)
    dated = [check_outputs(cloud), *own.dated(datetime.date.today())]
    credentials, creds = check_credentials(google.auth.default)
    if not credentials.ok:
        return report([credentials, *dated])
    try:
        where = job_images(cloud)  # the image a job would use
    except SettingsMissingError as error:
        return report([credentials, Check("settings", False, str(error)), *dated])
    session, storage_client = AuthorizedSession(creds), cloud.storage()
    found = [
        credentials,
        own.reachable(where),
        check_bucket(storage_client, where.bucket),
        check_training_data(storage_client, where.bucket, RECORDS_PREFIX),
        check_data_findings(storage_client, where.bucket),
        check_image(cloud.clients.registry(), where.image),
        check_act_as(session, where.service_account),
        check_default_build_account(cloud.clients.builds(), where.project, where.region),
    ]
    found += own.limits(where)
    if builder := cloud.fields(())["builder_service_account"]:
        found.append(check_act_as(session, builder, role="builder", purpose="build images"))
    return report([*found, *dated])


def check_outputs(cloud: Cloud) -> Check:
    """Whether the environment's stack outputs are here: without them every setting must
    come from flags, PETS_* variables or invoke.yaml (docs/reference/settings.md)."""
    stack = stack_outputs.stack_name(cloud.environment)
    if stack_outputs.read(cloud.environment, cloud.outputs_path):
        return Check("stack outputs", True, f"{cloud.outputs_path} has {stack}'s")
    return Check("stack outputs", False, f"{cloud.outputs_path} has no outputs of {stack} (not "
                 "deployed, or not fetched here): settings come only from flags, PETS_* "
                 "variables and invoke.yaml (docs/reference/settings.md lists them)",
                 f"npx cdktn output {stack} --outputs-file infra/outputs.json (once a platform "
                 f"engineer has run `npx cdktn deploy {stack}`)", warning=True)


def check_credentials(load: Callable) -> tuple[Check, object | None]:
    """`load` is google.auth.default (injected for tests); returns the credentials it found,
    so later checks reuse them instead of looking them up again."""
    try:
        credentials, project = load()
    except google.auth.exceptions.DefaultCredentialsError as error:
        return Check("credentials", False, str(error)[:200],
                     "gcloud auth application-default login"), None
    return Check("credentials", True,
                 f"application default credentials (project {project})"), credentials


def check_bucket(storage_client, bucket: str) -> Check:
    try:
        storage_client.get_bucket(bucket)
    except exceptions.NotFound:
        return Check("bucket", False, f"gs://{bucket} does not exist",
                     "npx cdktn deploy (platform engineers), or fix --bucket")
    except exceptions.Forbidden as error:
        return Check("bucket", False, f"gs://{bucket}: {error.message}",
                     "ask to be added to the researchers' group (object admin on the bucket)")
    return Check("bucket", True, f"gs://{bucket} reachable")


def check_training_data(storage_client, bucket: str, prefix: str) -> Check:
    try:
        problems = training_data_problems(storage_client, bucket, prefix)
    except (MissingError, exceptions.GoogleAPICallError) as error:
        return Check("training data", False, str(error), "see the bucket check")
    if problems:
        return Check("training data", False, f"gs://{bucket}/{prefix}/ {'; '.join(problems)}",
                     "invoke data.convert && invoke data.upload --prune")
    return Check("training data", True,
                 f"gs://{bucket}/{prefix}/ holds one complete conversion")


def check_data_findings(storage_client, bucket: str) -> Check:
    """What `invoke train` would refuse or warn about in the bucket's records."""
    try:
        found = datachecks.bucket_findings(storage_client, bucket)
    except exceptions.GoogleAPICallError as error:
        return Check("data checks", False, str(error), "see the bucket check")
    refusals = [f.text for f in found if f.refuse]
    if refusals:
        return Check("data checks", False, "; ".join(refusals),
                     "`invoke data.inspect` shows the data; fix it and convert again")
    if found:
        return Check("data checks", False, "; ".join(f.text for f in found), warning=True)
    return Check("data checks", True, "every class has training and validation examples")


def check_image(registry, image_uri: str) -> Check:
    """The image a job would run, by the digest it would be submitted with."""
    try:
        pinned = resolve_digest(registry, image_uri)
    except ImageBuildError as error:
        fix = ("invoke image.build (`invoke train --target vertex` also builds it)"
               if "not in Artifact Registry" in str(error) else "fix --image or invoke.yaml")
        return Check("trainer image", False, str(error), fix)
    except exceptions.GoogleAPICallError as error:
        return Check("trainer image", False, error.message, "ask for artifactregistry.reader")
    return Check("trainer image", True, pinned)


def check_default_build_account(builds, project: str, region: str) -> Check:
    """A build that names no service account runs as the project's default Cloud Build
    account, without the caller needing to act as it: whoever may submit builds (the
    researchers) may borrow its roles. This platform's builds always name the builder."""
    name = "build default"
    try:
        found = builds.get_default_service_account(
            name=f"projects/{project}/locations/{region}/defaultServiceAccount", timeout=30)
    except exceptions.GoogleAPICallError as error:
        return Check(name, False, f"Cloud Build did not say: {error.message}",
                     "ask for roles/cloudbuild.builds.viewer", warning=True)
    email = found.service_account_email.rsplit("/", 1)[-1]
    if not email:
        return Check(name, True, "none: every build must name its service account")
    for suffix, what in BROAD_BUILD_ACCOUNTS.items():
        if email.endswith(suffix):
            return Check(
                name, False, f"builds that name no account run as {email} ({what}, with "
                "project-wide roles): anyone who may submit a build can use them",
                "a platform engineer revokes that account's project roles or disallows "
                "default build accounts by organisation policy (docs/platform/security.md)",
                warning=True)
    return Check(name, True, f"builds that name no account run as {email}")


def check_act_as(session, service_account: str, endpoint: str = IAM_ENDPOINT,
                 role: str = "trainer", purpose: str = "run jobs") -> Check:
    """testIamPermissions on a service account: may the caller act as it (to run jobs as the
    trainer, or to build images as the builder)?"""
    name = f"act as {role}"
    url = f"{endpoint}/v1/projects/-/serviceAccounts/{service_account}:testIamPermissions"
    response = session.post(url, json={"permissions": [ACT_AS]}, timeout=30)
    if response.status_code != 200:
        return Check(name, False, f"IAM answered {response.status_code} for {service_account}",
                     f"check the {role} service account name (infra outputs)")
    if ACT_AS not in response.json().get("permissions", []):
        return Check(name, False, f"you may not act as {service_account}",
                     "ask to be added to the researchers' group (iam.serviceAccountUser on "
                     f"the {role} account)")
    return Check(name, True, f"may {purpose} as {service_account}")


def report(checks: Sequence[Check]) -> tuple[str, bool]:
    lines = []
    for check in checks:
        mark = "ok  " if check.ok else "WARN" if check.warning else "FAIL"
        lines.append(f"{mark} {check.name:<16} {check.detail}")
        if not check.ok and check.fix:
            lines.append(f"     {'':<16} fix: {check.fix}")
    return "\n".join(lines), all(c.ok or c.warning for c in checks)
