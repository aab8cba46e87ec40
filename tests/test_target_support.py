"""Each target declares the job-file fields it takes (`supports`), and a value the user set
that the chosen target would ignore is one line naming it as given, exit 2, before anything
is built, written or sent (launch.targets.refuse_unsupported, called by every job task)."""

from __future__ import annotations

import pytest

from launch import targets
from launch.errors import InputError
from launch.values import jobfile
from tests.cli import invoke, refused

# One value of each field the local target does not take, by kind of flag, as typed.
VERTEX_ONLY = {
    "place": {"region": "us-east4", "image": "us-docker.pkg.dev/p/r/trainer:1"},
    "hardware": {"machine_type": "g2-standard-8", "accelerator": "NVIDIA_L4:1",
                 "tpu": "v5litepod-8", "tpu_topology": "2x4"},
    "replicas": {"reduction_servers": "2"},
    "scheduling": {"spot": True, "flex_start": True, "max_wait_hours": "2",
                   "reservation": "any", "persistent_resource": "pool1",
                   "timeout_hours": "12"},
    "access": {"web_access": True},
    "ladder": {"regions": ["us-central1,us-east4"], "fallback": ["g2-standard-8"],
               "capacity": ["spot,standard"], "max_preemptions": "3"},
}


def refusal(task: str, flags: dict, file: dict | None = None, source: str = "") -> str:
    job = jobfile.resolve(task, flags, file, source)
    with pytest.raises(InputError) as refused_:
        targets.refuse_unsupported(job, task, jobfile.given(flags), source)
    return str(refused_.value)


@pytest.mark.parametrize("kind", VERTEX_ONLY)
def test_a_vertex_only_flag_on_the_local_target_is_refused_by_its_name(kind):
    for name, value in VERTEX_ONLY[kind].items():  # train takes each of them
        shown = jobfile.flag(name)
        assert refusal("train", {name: value}) == (
            f"{shown} runs on Vertex AI only: add --target vertex, or drop {shown}")
        vertex = jobfile.resolve("train", {name: value, "target": "vertex"})
        targets.refuse_unsupported(vertex, "train", {name, "target"}, "")  # taken there


def test_every_field_the_local_target_refuses_is_listed_above_and_some_target_takes_each():
    local = targets.executor_class("local").supports
    listed = {name for values in VERTEX_ONLY.values() for name in values}
    assert set(jobfile.FIELDS) - local == listed
    assert all(any(name in targets.executor_class(t).supports for t in targets.TARGETS)
               for name in jobfile.FIELDS)


def test_a_job_file_key_the_local_target_does_not_take_is_refused_by_its_key(tmp_path):
    source = f"--job {tmp_path / 'job.yaml'}"
    assert refusal("train", {}, {"steps": 10, "spot": True}, source) == (
        f"spot (in {source}) runs on Vertex AI only: add --target vertex, or drop spot "
        f"from {source}")
    # eval reads its machine from its own section, and the refusal names the section
    assert refusal("eval", {}, {"eval": {"machine-type": "n1-standard-8"}}, source) == (
        f"eval: machine-type (in {source}) runs on Vertex AI only: add --target vertex, or "
        f"drop eval: machine-type from {source}")
    # a flag over the file's key is named as the flag
    assert refusal("train", {"capacity": ["spot"]}, {"capacity": ["standard"]}, source) == (
        "--capacity runs on Vertex AI only: add --target vertex, or drop --capacity")


def test_defaults_and_keys_another_task_reads_do_not_trip_it(tmp_path):
    source = f"--job {tmp_path / 'job.yaml'}"
    file = {"spot": False, "workers": 0, "timeout-hours": 24, "max-preemptions": 2,
            "eval": {"machine-type": "n1-standard-8"}, "steps": 10}
    for task in ("train", "tune"):  # neither reads eval's section
        targets.refuse_unsupported(jobfile.resolve(task, {}, file, source), task, set(),
                                   source)
    flags = {"workers": "1", "steps": "5", "label": ["team=vision"], "max_cost": "1"}
    targets.refuse_unsupported(jobfile.resolve("train", flags), "train", set(flags), "")


def test_invoke_refuses_spot_here_in_one_line_before_anything_is_written(tmp_path):
    saved = tmp_path / "job.yaml"
    line = refused(invoke("train", "--spot", "--steps", "10", "--save-job", str(saved),
                          "--dry-run", cwd=tmp_path))
    assert line == "error: --spot runs on Vertex AI only: add --target vertex, or drop --spot"
    assert not saved.exists()
