"""The continuous-training pipeline (issue 42), as Vertex AI will read it: the compiled spec is
deterministic and the checked-in copy is what the sources compile to; it parses as Vertex AI's
PipelineJob and Schedule (their own protos), with the launcher image bound, the parameters
checked and the steps in the order and under the conditions the design names."""

from __future__ import annotations

import pytest
import yaml
from google.cloud import aiplatform_v1

from launch.errors import InputError
from launch.features.pipeline import definition, requests

LOCATION = "projects/pets-detector-dev/locations/us-central1"
IMAGE = "us-central1-docker.pkg.dev/pets-detector-dev/pets-images/launcher@sha256:" + "a" * 64
JOB = "target: vertex\nexperiment: pets_retinanet_mobilenet\ndataset: pets\n"


@pytest.fixture(scope="module")
def compiled() -> str:
    return definition.compile_spec()


def test_the_checked_in_spec_is_what_the_sources_compile_to_every_time(compiled):
    # byte-identical to a spec compiled in another process (no stamps, no random names)
    assert definition.SPEC_FILE.read_text() == compiled, \
        "launch/features/pipeline/pipeline.yaml is stale: run `invoke pipeline.compile`"


def tasks_of(dag: dict, spec: dict, inside: str = "") -> dict[str, tuple[str, tuple, str]]:
    """Every task, by name: (the condition group it sits in, what it waits for, condition)."""
    found = {}
    for name, task in dag["tasks"].items():
        condition = task.get("triggerPolicy", {}).get("condition", "")
        found[name] = (inside, tuple(sorted(task.get("dependentTasks", []))), condition)
        component = spec["components"][task["componentRef"]["name"]]
        if "dag" in component:
            found.update(tasks_of(component["dag"], spec, name))
    return found


def test_the_steps_run_in_order_and_stop_on_no_new_data_or_a_worse_model(compiled):
    spec = yaml.safe_load(compiled)
    tasks = tasks_of(spec["root"]["dag"], spec)
    assert tasks["resolve-dataset"][0] == ""
    newer, no_worse = tasks["condition-1"], tasks["condition-2"]
    assert newer[1] == ("resolve-dataset",) and \
        "resolve-dataset-Output'] != ''" in newer[2]  # a version to train on
    assert {name for name, (group, _, _) in tasks.items() if group == "condition-1"} == {
        "train", "evaluate", "compare", "condition-2"}
    assert tasks["evaluate"][1] == ("train",) and tasks["compare"][1] == ("evaluate", "train")
    assert "compare-Output'] == true" in no_worse[2]
    assert {name for name, (group, _, _) in tasks.items() if group == "condition-2"} == {
        "upload", "deploy-canary", "promote"}
    assert tasks["promote"][1] == ("deploy-canary",)
    for name, task in spec["root"]["dag"]["tasks"].items():  # nothing is served from cache
        assert task.get("cachingOptions", {}).get("enableCache") in (None, False), name
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert set(parameters) == {"job", "state", "canary_traffic", "max_drop"}
    assert parameters["canary_traffic"]["defaultValue"] == definition.DEFAULT_CANARY
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {definition.IMAGE}


def test_a_run_parses_as_vertex_ais_pipeline_job_with_its_image_root_and_parameters(compiled):
    values = requests.parameters(JOB, "gs://pets-data/pipeline/state", 20, 0.02)
    job = requests.pipeline_job(
        compiled, IMAGE, display_name="pets-ct", root="gs://pets-data/pipeline/root",
        service_account="pets-pipelines@pets-detector-dev.iam.gserviceaccount.com",
        values=values, labels={"app": "pets-detector"})
    request = requests.create_request(LOCATION, job, "pets-ct-1")
    parsed = aiplatform_v1.CreatePipelineJobRequest.from_json(
        aiplatform_v1.CreatePipelineJobRequest.to_json(request))
    assert parsed == request
    run = parsed.pipeline_job
    assert run.runtime_config.gcs_output_directory == "gs://pets-data/pipeline/root"
    assert dict(run.runtime_config.parameter_values) == values
    assert run.service_account.startswith("pets-pipelines@")
    spec = run.pipeline_spec
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {IMAGE}
    assert yaml.safe_load(compiled)["deploymentSpec"]["executors"]  # the text is untouched
    scheduled = requests.schedule(LOCATION, job, "TZ=Europe/Berlin 0 3 * * 1", "pets-ct")
    assert aiplatform_v1.Schedule.from_json(aiplatform_v1.Schedule.to_json(scheduled)) == \
        scheduled
    assert scheduled.max_concurrent_run_count == 1
    assert scheduled.create_pipeline_job_request.pipeline_job == job


@pytest.mark.parametrize("call, message", [
    (lambda: requests.parameters("", "s"), "the job file is empty"),
    (lambda: requests.parameters("x" * 70_000, "s"), "over 64 KB"),
    (lambda: requests.parameters(JOB, "s", canary_traffic=0), "--canary-traffic is a "
                                                                "percentage"),
    (lambda: requests.parameters(JOB, "s", max_drop=float("nan")), "--max-drop must be"),
    (lambda: requests.check_cron("every day"), "give five cron fields"),
    (lambda: requests.check_cron("0 3 * * 1; rm -rf /"), "give five cron fields"),
    (lambda: requests.pipeline_job(definition.SPEC_FILE.read_text(), IMAGE, display_name="d",
                                   root="gs://b/r", service_account="s",
                                   values={"jobs": JOB}, labels={}),
     "parameters ['jobs'] are not the pipeline's"),
])
def test_bad_values_are_refused_before_anything_is_sent(call, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("(", r"\(")):
        call()


def test_a_spec_compiled_for_another_image_is_refused(compiled):
    spec = yaml.safe_load(compiled)
    bound = requests.with_image(spec, IMAGE)
    with pytest.raises(InputError, match="recompile it"):
        requests.with_image(bound, IMAGE)


def test_the_docs_picture_is_drawn_from_the_spec_in_the_order_the_steps_run(tmp_path):
    from launch.features.pipeline import graph

    order, groups = graph.steps(definition.SPEC_FILE.read_text())
    assert [s.label for s in order] == [
        "resolve dataset", "newer-data", "train", "evaluate on the test split",
        "compare with the serving version", "no-worse", "upload", "deploy a canary", "promote"]
    assert {s.label: s.group for s in order}["promote"] == "condition-2"
    assert set(groups) == {"condition-1", "condition-2"}
    drawn = graph.draw(definition.SPEC_FILE.read_text(), tmp_path / "pipeline.png")
    assert drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and graph.PICTURE.is_file()


def test_the_pipelines_account_holds_exactly_the_grants_the_guide_lists(stacks):
    """Issue 42: the guide's table of the `pipelines` service account's grants is the
    synthesised stack's, in every environment (a grant added or dropped in either fails)."""
    import re

    from infra import names
    from infra.environments import ENVIRONMENTS
    from infra.synthesized import grants
    from tests.conftest import REPO

    text = (REPO / "docs" / "guides" / "continuous-training.md").read_text()
    table = text.split("## Who runs it", 1)[1]
    listed = {(where, role) for where, role in re.findall(
        r"^\| ([^|]+?) \| `(roles/[\w.]+)` \|", table, re.M)}
    where = {"project": "project",
             "data bucket, `datasets/` and `runs/` (listing included)":
                 "bucket:data if only-datasets-runs",
             "data bucket, `pipelines/`": "bucket:data if only-pipelines",
             "the `trainer` account": "account:{trainer}",
             "the `serving` account": "account:{serving}"}
    for env_name, stack in stacks.items():
        env = ENVIRONMENTS[env_name]
        account = names.service_account_id(env, "pipelines")
        held = {(scope, role) for who, scope, role in grants(stack) if who == account}
        documented = {(where[text].format(
            trainer=names.service_account_id(env, "trainer"),
            serving=names.service_account_id(env, "serving")), role)
            for text, role in listed}
        assert held == documented and len(documented) == 6, env_name
        on_it = {(who, role) for who, scope, role in grants(stack)
                 if scope == f"account:{account}"}
        assert on_it == {(f"group:{env.researchers_group}", "roles/iam.serviceAccountUser"),
                         (names.service_account_id(env, "deployer"),
                          "roles/iam.serviceAccountAdmin")}


def versioned_sample(root, version: str) -> None:
    """A dataset version as the pipeline reads it: the shared model's sample, converted as
    its training records were (from the COCO JSON, so the same classes), with a test split."""
    from trainer.cli import main
    from trainer.data.sample import write_coco_sample, write_sample

    data = write_sample(root / "pets")
    assert main(["data", "convert", "--format=coco", f"--annotations={write_coco_sample(data)}",
                 f"--images={data / 'images'}", f"--output_dir={root / version}",
                 "--split=0.7,0.2", "--num_shards=1"]) == 0


@pytest.mark.slow  # three pipeline runs, two short trainings and three test evaluations
@pytest.mark.pipeline_local  # 2.5 minutes, and TensorFlow processes beside the suite's
def test_the_pipeline_runs_here_deploys_then_stops_on_no_new_data_and_on_a_worse_model(
        trained, tmp_path):
    """Issue 42, locally for real (KFP's subprocess runner, the local target): a first run
    trains (ten steps from the shared model's checkpoint), passes the gate and deploys; a
    second with no new data stops after its first step; a run on a new version whose model
    trained one step from scratch is stopped by the gate, both figures recorded."""
    import json
    import shutil

    from kfp import local

    from launch.features.pipeline import steps

    model_dir = trained[0]
    data, state = tmp_path / "data", tmp_path / "state"
    first, second = "v-20261101T000000Z-00000001", "v-20261201T000000Z-00000002"
    versioned_sample(data, first)
    local.init(runner=local.SubprocessRunner(use_venv=False),
               pipeline_root=str(tmp_path / "root"))
    good = (f"target: local\nexperiment: pets_retinanet_mobilenet\ndata-dir: {data}\n"
            f"steps: 10\ninit-from: {model_dir}\n")
    definition.continuous_training(job=good, state=str(state))
    made = json.loads((state / "decisions.json").read_text())
    assert [(d["step"], d["go"]) for d in made] == [("resolve dataset", True),
                                                   ("compare", True)]
    (version,) = steps.lineage(str(state))
    assert (version.model, version.dataset_version) == ("1", first)
    assert version.figure >= 0.5  # the shared model's checkpoint, fine-tuned ten steps
    assert steps.traffic(str(state)) == {"1": 100}
    assert (state / "registry" / "1" / "saved_model.pb").is_file()

    definition.continuous_training(job=good, state=str(state))  # nothing new: one step
    made = json.loads((state / "decisions.json").read_text())
    assert (made[-1]["step"], made[-1]["go"]) == ("resolve dataset", False)
    assert f"no version newer than {first}" in made[-1]["reason"]
    assert len(list((state / "runs").iterdir())) == 1

    shutil.copytree(data / first, data / second)  # new data: the same images, re-released
    weak = f"target: local\nexperiment: pets_retinanet_mobilenet\ndata-dir: {data}\nsteps: 1\n"
    definition.continuous_training(job=weak, state=str(state))
    made = json.loads((state / "decisions.json").read_text())
    resolved, verdict = made[-2:]
    assert (resolved["go"], resolved["version"]) == (True, second)
    assert verdict["step"] == "compare" and verdict["go"] is False
    assert verdict["challenger"] < verdict["champion"] - 0.01
    assert f"{verdict['challenger']:.3f}" in verdict["reason"] and \
        f"{verdict['champion']:.3f}" in verdict["reason"]
    assert [v.model for v in steps.lineage(str(state))] == ["1"]  # nothing uploaded
    assert steps.traffic(str(state)) == {"1": 100}  # the champion still serves
