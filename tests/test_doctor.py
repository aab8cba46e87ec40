"""invoke doctor's checks against local servers: each failure names its fix."""

from __future__ import annotations

import datetime
import json

import google.auth.exceptions
import pytest
import requests

from launch.features import doctor
from launch.targets.vertex import doctor as vertex_doctor
from tests.fakes.build import FakeArtifactRegistry, FakeCloudBuild
from tests.fakes.gcs import FakeGcs
from tests.fakes.json_http import Request, json_server
from tests.fakes.vertex import FakeJobService

IMAGE = "us-central1-docker.pkg.dev/p/pets-images/trainer:abc"


def test_credentials():
    def missing():
        raise google.auth.exceptions.DefaultCredentialsError("Your default credentials were "
                                                             "not found. To set up...")

    bad, none = doctor.check_credentials(missing)
    assert not bad.ok and bad.fix == "gcloud auth application-default login" and none is None
    token = object()
    good, found = doctor.check_credentials(lambda: (token, "p"))
    assert good.ok and found is token


def test_vertex_api():
    with FakeJobService() as fake:
        assert vertex_doctor.check_vertex(fake.client(), "p", "us-central1").ok
    with FakeJobService() as fake:
        client = fake.client()
    failed = vertex_doctor.check_vertex(client, "p", "us-central1")  # server gone: unreachable
    assert not failed.ok and "aiplatform" in failed.fix


def test_bucket(monkeypatch):
    with FakeGcs() as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
        client = gcs.client()
        client.create_bucket("pets-data")
        assert doctor.check_bucket(client, "pets-data").ok
        missing = doctor.check_bucket(client, "nope")
        assert not missing.ok and "does not exist" in missing.detail

        empty = doctor.check_training_data(client, "pets-data", "records")
        assert not empty.ok and empty.fix == "invoke data.convert && invoke data.upload --prune"
        assert empty.detail == ("gs://pets-data/records/ has no train.record-*, val.record-*, "
                                "label_map.pbtxt")
        bucket = client.bucket("pets-data")
        for name in ("train.record-00000-of-00001", "pet_label_map.pbtxt",
                     "old/val.record-00000-of-00001"):  # not in records/ itself: still missing
            # (pet_label_map.pbtxt: an older conversion's name, which is read still)
            bucket.blob(f"records/{name}").upload_from_string(b"x")
        partial = doctor.check_training_data(client, "pets-data", "records")
        assert partial.detail == "gs://pets-data/records/ has no val.record-*"
        bucket.blob("records/val.record-00000-of-00001").upload_from_string(b"x")
        assert doctor.check_training_data(client, "pets-data", "records").ok
        bucket.blob("records/train.record-00003-of-00004").upload_from_string(b"x")  # stale
        stale = doctor.check_training_data(client, "pets-data", "records")
        assert stale.detail == ("gs://pets-data/records/ mixes train.record-* sets of 1 and 4 "
                                "shards") and stale.fix.endswith("--prune")
        assert not doctor.check_training_data(client, "nope", "records").ok


def test_image():
    with FakeArtifactRegistry() as registry:
        absent = doctor.check_image(registry.client(), IMAGE)
        assert not absent.ok and absent.fix.startswith("invoke image.build")
        digest = registry.push(IMAGE)
        present = doctor.check_image(registry.client(), IMAGE)
        assert present.ok and present.detail == IMAGE.replace(":abc", f"@{digest}")
        elsewhere = doctor.check_image(registry.client(), "docker.io/python:3")
        assert not elsewhere.ok and elsewhere.fix == "fix --image or invoke.yaml"


@pytest.mark.parametrize("email, ok", [
    ("", True),
    ("projects/p/serviceAccounts/123456789@cloudbuild.gserviceaccount.com", False),
    ("projects/p/serviceAccounts/123456789-compute@developer.gserviceaccount.com", False),
    ("projects/p/serviceAccounts/builds@p.iam.gserviceaccount.com", True),
])
def test_the_default_cloud_build_account_escalation_path_is_reported(email, ok):
    with FakeCloudBuild() as builds:
        builds.default_service_account = email
        check = doctor.check_default_build_account(builds.client(), "p", "us-central1")
    assert check.ok is ok
    if not ok:  # a warning naming the account and who fixes it, not a failed preflight
        assert check.warning and email.rsplit("/", 1)[1] in check.detail
        assert "revokes that account's project roles" in check.fix
        text, passed = doctor.report([check])
        assert passed and text.startswith("WARN build default")


@pytest.fixture
def iam():
    """IAM's testIamPermissions over REST: grants actAs on one account only."""
    allowed = "pets-trainer@p.iam.gserviceaccount.com"

    def permissions(request: Request) -> dict:
        granted = json.loads(request.body)["permissions"] if allowed in request.path else []
        return {"permissions": granted} if granted else {}

    with json_server(permissions) as url:
        yield url, allowed


def test_act_as(iam):
    endpoint, allowed = iam
    session = requests.Session()
    assert doctor.check_act_as(session, allowed, endpoint).ok
    denied = doctor.check_act_as(session, "other@p.iam.gserviceaccount.com", endpoint)
    assert not denied.ok and "iam.serviceAccountUser" in denied.fix
    builder = doctor.check_act_as(session, "other@p.iam.gserviceaccount.com", endpoint,
                                  role="builder", purpose="build images")
    assert builder.name == "act as builder" and "on the builder account" in builder.fix


def test_report_lists_fixes_and_fails_if_any_check_fails():
    text, ok = doctor.report([doctor.Check("a", True, "fine"),
                              doctor.Check("b", False, "broken", "do this")])
    assert not ok and "FAIL b" in text and "fix: do this" in text
    assert doctor.report([doctor.Check("a", True, "fine")])[1]


def test_end_dates_warn_90_days_ahead_with_the_date_and_the_fix():
    """TensorFlow 2.15's and 2.14's prebuilt containers end on 2027-01-14 (catalogue.yaml)."""
    quiet = vertex_doctor.check_end_dates(datetime.date(2026, 10, 15))  # 91 days before
    assert [(c.ok, c.name) for c in quiet] == [(True, "end dates")]
    assert "nothing ends within 90 days" in quiet[0].detail
    assert "2027-01-14, in 91 days" in quiet[0].detail

    due = vertex_doctor.check_end_dates(datetime.date(2026, 10, 16))  # 90 days before: warned
    assert [(c.ok, c.warning) for c in due] == [(False, True)] * 2
    assert due[0].detail.startswith("tf2-cpu.2-15, tf2-gpu.2-15 (TensorFlow 2.15 prebuilt "
                                    "prediction containers): end of availability 2027-01-14, "
                                    "in 90 days (https://docs.cloud.google.com/gemini-enterprise-"
                                    "agent-platform/")
    assert "the project's own serving image" in due[0].fix
    text, ok = doctor.report(due)
    assert ok  # a warning, not a failure: nothing a launch needs
    assert text.splitlines()[0].startswith("WARN end dates ")
    assert "2027-01-14" in text.splitlines()[0]
    assert "fix: serve on the project's own serving image" in text

    ended = vertex_doctor.check_end_dates(datetime.date(2027, 1, 17))
    assert "end of availability 2027-01-14, 3 days ago" in ended[0].detail


def test_the_docs_theme_end_of_life_is_warned_of_with_its_successor():
    """Material for MkDocs ends on 2027-05-05 (its own build notice): from 90 days before,
    the doctor says so and names Zensical, which .ci/run already builds the site with."""
    assert not any("mkdocs-material" in c.detail
                   for c in vertex_doctor.check_end_dates(datetime.date(2027, 2, 3)))  # 91 days
    (check,) = [c for c in vertex_doctor.check_end_dates(datetime.date(2027, 2, 4))
                if "mkdocs-material" in c.detail]
    assert check.warning and "end of availability 2027-05-05, in 90 days" in check.detail
    assert "Zensical" in check.fix and "docsite/site.py" in check.fix


def test_invoke_doctor_without_credentials_says_how_to_log_in(tmp_path):
    from tests.cli import invoke

    result = invoke("doctor", "--env=nostack", env={
        "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "missing.json")})
    assert result.returncode == 1
    assert "FAIL credentials" in result.stdout
    assert "fix: gcloud auth application-default login" in result.stdout
    assert " end dates " in result.stdout  # needs no credentials: reported all the same
    # issue 38 item 7: no stack outputs here, and what that means
    assert "WARN stack outputs" in result.stdout and "has no outputs of pets-nostack (not " \
        "deployed, or not fetched here): settings come only from flags, PETS_* variables " \
        "and invoke.yaml" in result.stdout
    assert "fix: npx cdktn output pets-nostack --outputs-file infra/outputs.json" in \
        result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("source", ["flag", "env"])
def test_a_region_that_is_not_a_region_name_is_refused_before_any_client(tmp_path, source):
    """Issue 27, case 13: a region becomes part of an API host name, so it is checked first."""
    from tests.cli import invoke

    bad = "us-central1/../../x"
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "missing.json"),
           "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}  # any request would fail
    flags = ["--region", bad] if source == "flag" else []
    if source == "env":
        env["PETS_REGION"] = bad
    result = invoke("jobs.list", *flags, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a Google Cloud region name" in lines[0]
    assert ("--region" if source == "flag" else "PETS_REGION") in lines[0]


@pytest.mark.parametrize("region", ["us-central1", "europe-west4", "northamerica-northeast1"])
def test_region_names_that_google_uses_are_accepted(region):
    from launch.context.places import region_name
    from launch.context.settings import resolve_fields

    fields = resolve_fields("dev", {"region": region}, {}, {}, required=())
    assert fields["region"] == region == region_name(region, "--region")


@pytest.mark.parametrize("region", ["us-central1/../../x", "US-CENTRAL1", "us-central1.evil.com",
                                    "us-central", "-us1", "us--central1", "us-central1 "])
def test_bad_region_names_are_refused_by_settings_and_by_the_client_makers(tmp_path, region):
    from launch.context.clients import vertex_endpoints
    from launch.context.settings import resolve_fields
    from launch.errors import InputError

    with pytest.raises(InputError, match=r"invoke\.yaml's vertex\.region"):
        resolve_fields("dev", {}, {}, {"region": region}, outputs_path=tmp_path / "none.json",
                       required=())
    with pytest.raises(InputError, match="not a Google Cloud region name"):
        vertex_endpoints(region)
