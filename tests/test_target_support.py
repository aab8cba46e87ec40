"""Each target declares what it can do and its own job options (its `TargetSpec`), and a value
the chosen target cannot take is one line naming it as given and what the target cannot do,
exit 2, before anything is built, written or sent (`jobfile.resolve`, which every job task
calls first). No list of field names per target: the refusal comes from the capability."""

from __future__ import annotations

import dataclasses

import pytest

from launch.errors import InputError
from launch.values import jobfile
from launch.values.target_names import TARGETS
from tests.cli import invoke, refused

# One value of each flag the local target does not take, by what it cannot do, as typed.
VERTEX_ONLY = {
    "run in a chosen cloud region": {"region": "us-east4"},
    "run a container image": {"image": "us-docker.pkg.dev/p/r/trainer:1"},
    "choose a machine type": {"machine_type": "g2-standard-8"},
    "attach GPUs": {"accelerator": "NVIDIA_L4:1"},
    "run on TPU slices": {"tpu": "v5litepod-8", "tpu_topology": "2x4"},
    "run Reduction Server replicas": {"reduction_servers": "2"},
    "run spot capacity": {"spot": True},
    "queue for flex-start capacity": {"flex_start": True, "max_wait_hours": "2"},
    "run on capacity set aside (reservations, persistent resources)": {
        "reservation": "any", "persistent_resource": "pool1"},
    "stop a job at a timeout": {"timeout_hours": "12"},
    "open a shell into a running replica": {"web_access": True},
    "climb a capacity ladder (regions, fallback machines, kinds of capacity)": {
        "regions": ["us-central1,us-east4"], "fallback": ["g2-standard-8"],
        "capacity": ["spot,standard"], "max_preemptions": "3"},
}


def refusal(task: str, flags: dict, file: dict | None = None, source: str = "") -> str:
    with pytest.raises(InputError) as refused_:
        jobfile.resolve(task, flags, file, source)
    return str(refused_.value)


@pytest.mark.parametrize("cannot", VERTEX_ONLY)
def test_a_vertex_only_flag_on_the_local_target_is_refused_by_what_it_cannot_do(cannot):
    for name, value in VERTEX_ONLY[cannot].items():  # train takes each of them
        shown = jobfile.flag(name)
        assert refusal("train", {name: value}) == (
            f"{shown}: the local target cannot {cannot}: add --target vertex, or drop {shown}")
        jobfile.resolve("train", {name: value, "target": "vertex"})  # taken there
    assert refusal("train", {"detach": True, "target": "vertex"}) == (
        "--detach: the vertex target cannot run a job in this machine's background: add "
        "--target local, or drop --detach")


def test_what_a_target_takes_is_its_capabilities_and_its_own_options():
    """Every option the local target refuses is listed above, each target declares the
    capability each of its own options needs, and some target can take every neutral field."""
    listed = {name for values in VERTEX_ONLY.values() for name in values}
    local = TARGETS["local"]
    refused_here = {name for name, field in jobfile.FIELDS.items()
                    if not local.can(field.metadata["needs"])}
    assert refused_here | {field.name for field in jobfile.own_options("vertex")} == listed
    for name in TARGETS:
        spec = TARGETS[name]
        assert all(spec.can(field.metadata["needs"]) for field in jobfile.own_options(name))
        assert not hasattr(spec.executor_class(), "supports")  # no list of field names
    assert all(any(TARGETS[name].can(field.metadata["needs"]) for name in TARGETS)
               for field in jobfile.FIELDS.values())


def test_a_job_file_key_the_local_target_does_not_take_is_refused_by_its_key(tmp_path):
    source = f"--job {tmp_path / 'job.yaml'}"
    assert refusal("train", {}, {"steps": 10, "spot": True}, source) == (
        f"spot (in {source}): the local target cannot run spot capacity: add --target "
        f"vertex, or drop spot from {source}")
    # eval reads its machine from its own section, and the refusal names the section
    assert refusal("eval", {}, {"version": 2, "eval": {"vertex": {
        "machine-type": "n1-standard-8"}}}, source) == (
        f"eval: vertex: machine-type (in {source}): the local target cannot choose a "
        f"machine type: add --target vertex, or drop eval: vertex: machine-type from {source}")
    assert refusal("eval", {}, {"eval": {"spot": True}}, source) == (
        f"eval: spot (in {source}): the local target cannot run spot capacity: add --target "
        f"vertex, or drop eval: spot from {source}")
    # a version 1 file's key is named where version 2 keeps it
    assert refusal("train", {}, {"machine-type": "g2-standard-8"}, source).startswith(
        f"vertex: machine-type (in {source}): the local target cannot choose a machine type")
    # a flag over the file's key is named as the flag
    assert refusal("train", {"capacity": ["spot"]}, {"capacity": ["standard"]}, source) == (
        "--capacity: the local target cannot climb a capacity ladder (regions, fallback "
        "machines, kinds of capacity): add --target vertex, or drop --capacity")


def test_defaults_and_keys_another_task_reads_do_not_trip_it(tmp_path):
    source = f"--job {tmp_path / 'job.yaml'}"
    file = {"spot": False, "workers": 0, "timeout-hours": 24, "max-preemptions": 2,
            "eval": {"machine-type": "n1-standard-8"}, "steps": 10}
    for task in ("train", "tune"):  # neither reads eval's section
        jobfile.resolve(task, {}, file, source)
    jobfile.resolve("train", {"workers": "1", "steps": "5", "label": ["team=vision"],
                              "max_cost": "1"})


def test_a_key_in_the_wrong_targets_section_is_one_line_naming_the_key_and_the_section():
    with pytest.raises(InputError, match=r"^f: `local: machine-type` is not an option of the "
                                         r"local target here; it belongs in the `vertex:` "
                                         r"section or in the `eval: vertex:` section$"):
        jobfile.resolve("train", {}, {"version": 2, "local": {"machine-type": "x"}}, "f")
    with pytest.raises(InputError, match=r"^f: `eval: vertex: regions` is not an option of "
                                         r"the vertex target here; it belongs in the "
                                         r"`vertex:` section$"):
        jobfile.resolve("eval", {}, {"version": 2, "target": "vertex",
                                     "eval": {"vertex": {"regions": ["a"]}}}, "f")


def test_invoke_refuses_spot_here_in_one_line_before_anything_is_written(tmp_path):
    saved = tmp_path / "job.yaml"
    line = refused(invoke("train", "--spot", "--steps", "10", "--save-job", str(saved),
                          "--dry-run", cwd=tmp_path))
    assert line == ("error: --spot: the local target cannot run spot capacity: add --target "
                    "vertex, or drop --spot")
    assert not saved.exists()


def test_a_targets_options_are_its_own_type_in_the_job():
    job = jobfile.resolve("train", {"target": "vertex", "machine_type": "g2-standard-8"})
    assert type(job.target_options).__name__ == "VertexOptions"
    assert jobfile.resolve("train", {}).target_options == TARGETS["local"].options()
    with pytest.raises(TypeError, match="the local target's options are LocalOptions"):
        dataclasses.replace(job, target="local")
