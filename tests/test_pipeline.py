"""The continuous-training pipeline (issue 42), as Vertex AI will read it: the compiled spec is
deterministic and the checked-in copy is what the sources compile to; it parses as Vertex AI's
PipelineJob and Schedule (their own protos), with the launcher image bound, the parameters
checked and the steps in the order and under the conditions the design names."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from google.cloud import aiplatform_v1

from launch.errors import InputError
from launch.features.pipeline import decisions, definition, requests, runs
from launch.features.pipeline.state import run_id_for
from launch.targets.vertex import pipelines

LOCATION = "projects/pets-detector-dev/locations/us-central1"
IMAGE = "us-central1-docker.pkg.dev/pets-detector-dev/pets-images/launcher@sha256:" + "a" * 64
JOB = "target: vertex\nexperiment: pets_retinanet_mobilenet\ndataset: pets\n"
V1, V2 = "v-20261101T000000Z-00000001", "v-20261201T000000Z-00000002"


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
    # the uploaded version is a Model artifact (Vertex ML Metadata's lineage), deployed as such
    components = spec["components"]
    assert components["comp-upload"]["outputDefinitions"]["artifacts"]["model"][
        "artifactType"]["schemaTitle"] == "system.Model"
    assert components["comp-deploy-canary"]["inputDefinitions"]["artifacts"]["model"][
        "artifactType"]["schemaTitle"] == "system.Model"
    for name, task in spec["root"]["dag"]["tasks"].items():  # nothing is served from cache
        assert task.get("cachingOptions", {}).get("enableCache") in (None, False), name
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert set(parameters) == {"job", "state", "canary_traffic", "max_drop", "settings"}
    assert parameters["canary_traffic"]["defaultValue"] == definition.DEFAULT_CANARY
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {definition.IMAGE}


def test_a_run_parses_as_vertex_ais_pipeline_job_with_its_image_root_and_parameters(compiled):
    values = requests.parameters(JOB, "gs://pets-data/pipeline/state", 20, 0.02)
    job = pipelines.pipeline_job(
        requests.with_image(yaml.safe_load(compiled), IMAGE), display_name="pets-ct",
        root="gs://pets-data/pipeline/root",
        service_account="pets-pipelines@pets-detector-dev.iam.gserviceaccount.com",
        values=values, labels={"app": "pets-detector"})
    request = pipelines.create_request(LOCATION, job, "pets-ct-1")
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
    scheduled = pipelines.schedule(LOCATION, job, "TZ=Europe/Berlin 0 3 * * 1", "pets-ct")
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
    (lambda: pipelines.pipeline_job(
        requests.with_image(yaml.safe_load(definition.SPEC_FILE.read_text()), IMAGE),
        display_name="d", root="gs://b/r", service_account="s", values={"jobs": JOB},
        labels={}),
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
        r"^\| ([^|]+?) \| (?:custom role )?`((?:roles/|<prefix>_)[\w.]+)` \|", table, re.M)}
    where = {"project": "project",
             "data bucket, `datasets/` and `runs/` (listing included)":
                 "bucket:data if only-datasets-runs",
             "data bucket, `datasets/`": "bucket:data if only-datasets",
             "data bucket, `runs/ct-*` (its own runs)": "bucket:data if only-runs-ct",
             "data bucket, `pipelines/`": "bucket:data if only-pipelines",
             "image repository": "repository",
             "the `trainer` account": "account:{trainer}",
             "the `serving` account": "account:{serving}"}
    for env_name, stack in stacks.items():
        env = ENVIRONMENTS[env_name]
        account = names.service_account_id(env, "pipelines")
        held = {(scope, role) for who, scope, role in grants(stack) if who == account}
        documented = {(where[text].format(
            trainer=names.service_account_id(env, "trainer"),
            serving=names.service_account_id(env, "serving")),
            names.pipelines_role(env) if role == "<prefix>_pipelines" else role)
            for text, role in listed}
        assert held == documented and len(documented) == 9, env_name
        on_it = {(who, role) for who, scope, role in grants(stack)
                 if scope == f"account:{account}"}
        # not the deployer: its admin of this account would reach the Custom Code Service
        # Agent (tests/test_iam_paths.py)
        assert on_it == {(f"group:{env.researchers_group}", "roles/iam.serviceAccountUser")}


def versioned_sample(root, version: str, num_images: int | None = None) -> None:
    """A dataset version as the pipeline reads it: the shared model's sample (or
    `num_images` of its kind), converted as its training records were (from the COCO JSON,
    so the same classes), with a test split."""
    from trainer.cli.main import main
    from trainer.data.sample import write_coco_sample, write_sample

    data = write_sample(root / "pets", **({"num_images": num_images} if num_images else {}))
    assert main(["data", "convert", "--format=coco", f"--annotations={write_coco_sample(data)}",
                 f"--images={data / 'images'}", f"--output_dir={root / version}",
                 "--split=0.7,0.2", "--num_shards=1"]) == 0


def pulled_from_label_studio(data: Path, root: Path) -> str:
    """A version `label.pull` publishes into `data`: versioned_sample's images as Label
    Studio tasks, each image's boxes submitted by a person, pulled from a server speaking
    Label Studio's API (tests/test_labelling.py runs the real one) and merged with the
    newest version there."""
    import json

    from launch.features import labelling
    from launch.stores.labelstudio import Studio
    from tests.labelstudio import exported_as_pushed
    from trainer.data.sample import coco_as_label_studio, write_coco_sample, write_sample

    sample = write_sample(root / "pets")
    coco = json.loads(write_coco_sample(sample).read_text())
    coco_as_label_studio(coco, sample / "images", root / "export")
    with exported_as_pushed(root / "export") as url:
        pulled = labelling.pull_version(Studio(url, "t" * 40), "pets", data, root / "work")
    assert pulled.tasks == len(coco["images"]) and pulled.version, pulled
    assert f"published as version {pulled.version}: train " in pulled.summary()
    assert f"example(s) of {V1} kept" in pulled.summary()
    return pulled.version


STEPS = ("resolve dataset", "train", "evaluate on the test split",
         "compare with the serving version", "upload", "deploy a canary", "promote")


def step_lines(out: str, ran: int) -> list[str]:
    """What `run_here` printed as it ran: one line a step, in order, the first `ran` ok
    with their seconds, the rest skipped by their condition; no colour code, none of KFP's
    log."""
    import re

    lines = out.splitlines()
    assert len(lines) == len(STEPS) and "\x1b" not in out, out
    for line, step, index in zip(lines, STEPS, range(len(STEPS)), strict=True):
        shape = (rf"{step}: ok, \d+\.\d s" if index < ran else
                 rf"{step}: skipped \(only if (newer data|no worse)\)")
        assert re.fullmatch(shape, line), (line, out)
    return lines


def kfp_log(said: str, root) -> str:
    """The log file the summary names, last: under the root, KFP's output without colour."""
    where = said.splitlines()[-1].removeprefix("KFP's log: ")
    assert where.startswith(f"{root}/logs/pets-retinanet-mobilenet-") and \
        where.endswith(".log"), said
    text = Path(where).read_text()
    assert "\x1b" not in text
    return text


@pytest.mark.slow(130)  # three pipeline runs, two short trainings that test themselves, one test
@pytest.mark.pipeline_local  # `pytest -m pipeline_local`: this test alone
def test_the_pipeline_runs_here_deploys_then_stops_on_no_new_data_and_on_a_worse_model(
        trained, tmp_path, capsys):
    """Issue 42, locally for real (KFP's subprocess runner, the local target): a first run
    trains (ten steps from the shared model's checkpoint), passes the gate and deploys; a
    second with no new data stops after its first step; a run on a new version, which
    `label.pull` published, whose model trained one step from scratch is stopped by the
    gate, both figures recorded.
    Each run prints one line a step as it runs, then its summary, which names the log
    file that holds KFP's output (never on the screen, nor a colour code in a pipe)."""
    import json

    from launch.features.pipeline import steps

    model_dir = trained[0]
    data, state = tmp_path / "data", tmp_path / "state" / "pets-retinanet-mobilenet"
    root = tmp_path / "root"
    first = V1
    versioned_sample(data, first)
    capsys.readouterr()
    good = (f"target: local\nexperiment: pets_retinanet_mobilenet\ndata-dir: {data}\n"
            f"steps: 10\ninit-from: {model_dir}\n")
    said = runs.run_here(good, str(state.parent), str(root), 10, 0.01)
    shown = capsys.readouterr()
    step_lines(shown.out, ran=7)
    assert shown.err == "" and "\x1b" not in said
    assert said.startswith(f"pipeline pets-retinanet-mobilenet (state {state})")
    assert said.splitlines()[-2] == (
        f"serving: version 1 (run {run_id_for(state, first)}, dataset {first}, "
        f"{steps.lineage(str(state))[0].figure:.3f} on its test split)")
    log = kfp_log(said, root)
    for kfps in ("Executing task 'train'", "Task 'promote' finished with status SUCCESS",
                 "Got executor_input"):  # (Python's warnings: pytest takes them)
        assert kfps in log
    made = json.loads((state / "decisions.json").read_text())
    assert [(d["step"], d["go"]) for d in made] == [("resolve dataset", True),
                                                   ("evaluate", True), ("compare", True)]
    (version,) = steps.lineage(str(state))
    assert (version.model, version.dataset_version) == ("1", first)
    assert version.figure >= 0.5  # the shared model's checkpoint, fine-tuned ten steps
    assert steps.traffic(str(state)) == {"1": 100}
    assert (state / "registry" / "1" / "saved_model.pb").is_file()
    # the version is the run's Model artifact, its lineage in its metadata (ML Metadata's)
    (uploaded,) = (tmp_path / "root").glob("*/upload/executor_output.json")
    (artifact,) = json.loads(uploaded.read_text())["artifacts"]["model"]["artifacts"]
    assert {k: artifact["metadata"][k] for k in ("model", "run_id", "dataset_version")} == {
        "model": "1", "run_id": run_id_for(state, first), "dataset_version": first}
    assert steps.origins(str(state.parent)).startswith(
        f"pets-retinanet-mobilenet: version 1 (100% of the endpoint) <- run "
        f"{run_id_for(state, first)} ckpt-")

    said = runs.run_here(good, str(state.parent), str(root), 10, 0.01)  # nothing new
    step_lines(capsys.readouterr().out, ran=1)
    assert kfp_log(said, root).count("Executing task") == 1
    made = json.loads((state / "decisions.json").read_text())
    assert (made[-1]["step"], made[-1]["go"]) == ("resolve dataset", False)
    assert f"no version newer than {first}" in made[-1]["reason"]
    assert len(list((state / "runs").iterdir())) == 1

    # new data: the same images labelled again in Label Studio, pulled as a version
    second = pulled_from_label_studio(data, tmp_path / "labelled")
    weak = f"target: local\nexperiment: pets_retinanet_mobilenet\ndata-dir: {data}\nsteps: 1\n"
    said = runs.run_here(weak, str(state.parent), str(root), 10, 0.01)
    step_lines(capsys.readouterr().out, ran=4)  # the gate refused: nothing uploaded
    assert f"this pipeline does not train {second} again" in said
    made = json.loads((state / "decisions.json").read_text())
    resolved, tested, verdict = made[-3:]
    assert tested["step"] == "evaluate"
    assert (resolved["go"], resolved["version"]) == (True, second)
    assert verdict["step"] == "compare" and verdict["go"] is False
    assert verdict["challenger"] < verdict["champion"] - 0.01
    assert f"{verdict['challenger']:.3f}" in verdict["reason"] and \
        f"{verdict['champion']:.3f}" in verdict["reason"]
    assert [v.model for v in steps.lineage(str(state))] == ["1"]  # nothing uploaded
    assert steps.traffic(str(state)) == {"1": 100}  # the champion still serves
    # each training tested what it chose itself (--test): the trainer processes the three
    # runs started were two trainings, the first's export, and the champion's test alone
    from launch.targets.local.jobs import JobTable, LocalJob

    ran = [job for job in JobTable().newest(10_000) if isinstance(job, LocalJob)
           and any(str(state) in arg for arg in job.argv)]
    assert sorted(job.name for job in ran) == ["eval-pets_retinanet_mobilenet", "export",
                                               "train-pets_retinanet_mobilenet",
                                               "train-pets_retinanet_mobilenet"], ran
    assert all("--test_after" in job.argv for job in ran if job.name.startswith("train-"))


LOCAL_JOB = "target: local\nexperiment: pets_retinanet_mobilenet\ndata-dir: {data}\nsteps: 1\n"


def measure_run(state, run_id: str, ap: float, data: str) -> None:
    """A run whose step 7 was measured on the test split (as `evaluate --split test` writes)."""
    import json

    from launch.features.pipeline import steps
    from trainer.common import files

    folder = steps.run_dir(str(state), run_id) / files.TEST_METRICS_DIR
    folder.mkdir(parents=True)
    (folder / files.metrics_file(7)).write_text(json.dumps({
        "step": 7, "metrics": {"AP": ap / 2, "AP50": ap}, "data": data}))


def serving_champion(tmp_path):
    """Pipeline `p`'s state with version 1 serving all traffic, judged at 0.95 on its test
    record, and new data (V1): the state, a job file and the run id it gets."""
    import dataclasses
    import json

    from launch.features.pipeline import steps

    data, state = tmp_path / "data", tmp_path / "state" / "p"
    (data / V1).mkdir(parents=True)
    measure_run(state, "ct-p-champion", 0.95, "d/test.record-*")
    champ = steps._figure(str(state), "ct-p-champion", "pets_retinanet_mobilenet")
    held = steps.Version("1", "ct-p-champion", 7, V1, 0.95, champ.data, champ.sha256)
    (state / steps.LINEAGE).write_text(json.dumps([dataclasses.asdict(held)]))
    (state / steps.ENDPOINT).write_text('{"1": 100}')
    return state, LOCAL_JOB.format(data=data), run_id_for(state, V1)


def test_only_version_directories_are_read_and_a_refused_version_is_not_trained_again(
        tmp_path):
    """A link named as a version (it could lead anywhere on the disk), a file, and a name
    that is not a version are not the dataset's versions; `../` is not a version to train;
    the gate's refusal of a version is remembered, so a schedule does not retrain it; by
    that pipeline alone: another following the same dataset trains it."""
    from launch.features.pipeline import steps

    data, state = tmp_path / "data", tmp_path / "state" / "retinanet"
    (data / V1).mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (data / V2).symlink_to(tmp_path / "elsewhere")
    (data / "v-20270101T000000Z-0000000z").mkdir()  # not a version's name
    (data / "v-20270201T000000Z-00000003").write_text("a file")
    assert steps.versions(str(data)) == [V1]
    job = decisions.job_of(LOCAL_JOB.format(data=data))
    for hostile in ("../etc", f"{V1}/../../x", "v-20261101T000000Z-0000000"):
        with pytest.raises(InputError, match="is not a dataset version"):
            steps.on_version(job, hostile)
    assert steps.resolve_dataset(LOCAL_JOB.format(data=data), str(state)) == V1
    measure_run(state, run_id_for(state, V1), 0.4, "x")
    steps.decide(str(state), step="resolve dataset", go=True, version=V1, reason="r")
    steps.decide(str(state), step="compare", go=False, worse=False, run="ct-x", version=V1,
                 reason="tested on other data")  # not the model's fault: tried again
    assert steps.resolve_dataset(LOCAL_JOB.format(data=data), str(state)) == V1
    steps.decide(str(state), step="compare", go=False, worse=True,
                 run=run_id_for(state, V1), version=V1, reason="0.400 is worse than 0.700")
    assert steps.resolve_dataset(LOCAL_JOB.format(data=data), str(state)) == ""
    assert "was tried and refused (0.400 is worse than 0.700)" in \
        steps.decisions(str(state))[-1]["reason"]
    other = state.parent / "faster"  # a second pipeline on the dataset: its own refusals
    assert steps.resolve_dataset(LOCAL_JOB.format(data=data), str(other)) == V1


def test_runs_show_tells_where_each_version_came_from_newest_first(tmp_path):
    """`invoke runs.show` on a local pipeline's state: each version, its share of the
    endpoint, its run and checkpoint, its test figure and its dataset version."""
    import dataclasses
    import json

    from launch.errors import MissingError
    from launch.features.pipeline import steps

    with pytest.raises(MissingError, match="no pipeline state here"):
        steps.origins(str(tmp_path / "none"))
    assert steps.origins(str(tmp_path)).endswith("no version uploaded yet")
    versions = [steps.Version("1", "ct-a", 300, V1, 0.7012, "d1/test.record-*"),
                steps.Version("2", "ct-b", 410, V2, 0.7123, "d2/test.record-*")]
    for name in ("faster", "retina"):
        (tmp_path / name).mkdir()
        (tmp_path / name / steps.LINEAGE).write_text(json.dumps(
            [dataclasses.asdict(v) for v in versions[:2 if name == "retina" else 1]]))
    (tmp_path / "retina" / steps.ENDPOINT).write_text(json.dumps({"1": 90, "2": 10}))
    assert steps.origins(str(tmp_path)).splitlines() == [
        f"faster: version 1 (0% of the endpoint) <- run ct-a ckpt-300 (0.701 on "
        f"d1/test.record-*) <- dataset version {V1}",
        f"retina: version 2 (10% of the endpoint) <- run ct-b ckpt-410 (0.712 on "
        f"d2/test.record-*) <- dataset version {V2}",
        f"retina: version 1 (90% of the endpoint) <- run ct-a ckpt-300 (0.701 on "
        f"d1/test.record-*) <- dataset version {V1}"]


def test_a_job_file_without_its_targets_data_is_a_one_line_refusal(tmp_path):
    from launch.errors import MissingError
    from launch.features.pipeline import steps

    with pytest.raises(InputError, match="give dataset, the named dataset whose new versions"):
        decisions.job_of(JOB.replace("dataset: pets", "data-dir: gs://pets-data/records"))
    with pytest.raises(InputError, match="the pipeline follows a dataset's newest version"):
        steps.resolve_dataset(JOB.replace("pets\n", f"pets@{V1}\n"), "gs://pets-data/s",
                              '{"bucket": "pets-data"}')
    with pytest.raises(InputError, match="settings: give only the environment's settings"):
        steps.resolve_dataset(JOB, "gs://pets-data/s", '{"password": "x"}')
    with pytest.raises(MissingError, match="no such directory of dataset versions"):
        steps.resolve_dataset(LOCAL_JOB.format(data=tmp_path / "none"), str(tmp_path))


def test_the_serving_version_is_measured_again_only_on_other_test_files(tmp_path):
    """A dataset version whose test split is the same files (names and sizes) as the one the
    serving version's judged record (of its checkpoint: what the gate reads) was measured on
    needs no second evaluation; other files, or a newer record of another checkpoint on
    these files (which the gate does not read), do."""
    import json

    from launch.features.pipeline import steps
    from trainer.model.eval_record import data_identity

    old, new = tmp_path / V1, tmp_path / V2
    for version in (old, new):
        version.mkdir()
        (version / "test.record-00000-of-00001").write_bytes(b"x" * 100)
    state = tmp_path / "state"
    measure_run(state, "ct-a", 0.7, data_identity(str(old / "test.record-*")))
    judged = steps._figure(str(state), "ct-a", "pets_retinanet_mobilenet", 7)
    assert steps._measured_on(judged, new)
    (new / "test.record-00000-of-00001").write_bytes(b"x" * 101)  # re-converted: other data
    assert not steps._measured_on(judged, new)
    assert not steps._measured_on(None, new)
    (state / "runs" / "ct-a" / "eval-test" / "ckpt-99.json").write_text(json.dumps({
        "step": 99, "metrics": {"AP": 0.3, "AP50": 0.6},
        "data": data_identity(str(new / "test.record-*"))}))  # another checkpoint's, newer
    assert not steps._measured_on(steps._figure(str(state), "ct-a",
                                                "pets_retinanet_mobilenet", 7), new)


def test_two_writers_of_one_state_lose_no_decision(tmp_path):
    """Two runs at once on one state (a schedule and a person): each change of a state file
    waits its turn and writes the file whole, so 2 x 150 decisions are 300 (without the
    turns, about a third are lost)."""
    import subprocess
    import sys
    import time

    from launch.features.pipeline import steps
    from tests.conftest import REPO

    writer = ("import pathlib, sys, time\nfrom launch.features.pipeline import steps\n"
              "go = pathlib.Path(sys.argv[1], 'go')\n"
              "while not go.exists(): time.sleep(0.01)\n"
              "for i in range(150): steps.decide(sys.argv[1], step='w', go=True, i=i, "
              "who=sys.argv[2])\n")
    processes = [subprocess.Popen([sys.executable, "-c", writer, str(tmp_path), who],
                                  cwd=REPO) for who in "ab"]
    time.sleep(3)  # both imported and waiting
    (tmp_path / "go").touch()
    assert [p.wait(timeout=120) for p in processes] == [0, 0]
    made = steps.decisions(str(tmp_path))
    assert sorted((d["who"], d["i"]) for d in made) == sorted(
        (who, i) for who in "ab" for i in range(150))


def test_an_upload_never_overwrites_a_version_the_lineage_does_not_name(tmp_path):
    """registry/1 left by a step that died before the lineage named it: the next upload is
    refused in one line, and what is there stays as it was."""
    from launch.features.pipeline import steps

    data, state = tmp_path / "data", tmp_path / "state"
    (data / V1).mkdir(parents=True)
    measure_run(state, "ct-run", 0.5, "test.record-*")
    (state / "registry" / "1").mkdir(parents=True)
    (state / "registry" / "1" / "saved_model.pb").write_bytes(b"an earlier export")
    with pytest.raises(InputError, match=r"registry/1 exists but lineage\.json does not name"):
        steps.upload(LOCAL_JOB.format(data=data), str(state), "ct-run", V1)
    assert (state / "registry" / "1" / "saved_model.pb").read_bytes() == b"an earlier export"
    assert steps.lineage(str(state)) == []


VERTEX_JOB = ("target: vertex\nexperiment: pets_retinanet_mobilenet\ndataset: pets\n"
              "max-cost: 20\n")


def test_a_run_and_a_schedule_reach_vertex_ai_as_the_pipelines_account_with_root_and_values(
        services, capsys):
    """Issue 42: a dry run prints the PipelineJob request and sends nothing; a run and a
    schedule reach the fake Vertex AI (its own protos; the spec checked against KFP's
    PipelineSpec proto) as the pipelines account, with the root and the state under the
    bucket's pipelines/, the parameters, the launcher image on every step and the run's cost
    bound; list shows them; cancel and pause act on them."""
    import json

    from tests.fakes.cloud import OUTPUTS, REPOSITORY

    cloud, image = services.cloud(), f"{REPOSITORY}/launcher:abc123"
    published_dataset(services, cloud)
    printed = runs.run(cloud, VERTEX_JOB, image, 20, 0.02, dry_run=True)
    dry = aiplatform_v1.CreatePipelineJobRequest.from_json(printed)
    assert services.pipelines.received == [] and json.loads(printed)["parent"] == LOCATION
    assert "cost bound: 80.00 USD a run (4 jobs x 20.00: the training and 3 " \
           "evaluations)" in capsys.readouterr().err

    said = runs.run(cloud, VERTEX_JOB, image, 20, 0.02, dry_run=False)
    (sent,) = services.pipelines.received
    assert said.startswith(f"started {LOCATION}/pipelineJobs/{definition.NAME}-")
    # the dry run shows what is sent (but the run's id: the time it was made)
    assert sent.pipeline_job == dry.pipeline_job and sent.parent == dry.parent
    run = sent.pipeline_job
    assert run.service_account == OUTPUTS.pipelines_service_account
    assert run.runtime_config.gcs_output_directory == "gs://pets-data/pipelines/root"
    values = dict(run.runtime_config.parameter_values)
    settings = json.loads(values.pop("settings"))
    assert values == {"job": VERTEX_JOB,
                      "state": "gs://pets-data/pipelines/state/pets-retinanet-mobilenet",
                      "canary_traffic": 20, "max_drop": 0.02}
    # the environment's settings for the steps' container (it has no outputs file), the
    # jobs on the environment's trainer image as deployed; no job-events topic
    assert {k: settings[k] for k in ("project", "region", "bucket", "service_account",
                                     "serving_service_account", "image")} == {
        "project": OUTPUTS.project, "region": "us-central1", "bucket": "pets-data",
        "service_account": OUTPUTS.trainer_service_account,
        "serving_service_account": OUTPUTS.serving_service_account,
        "image": OUTPUTS.image_uri}
    assert "notifications_topic" not in settings
    assert {e["container"]["image"] for e in
            run.pipeline_spec["deploymentSpec"]["executors"].values()} == {image}
    assert run.labels["max-cost-usd"] == "80_00"
    assert run.labels["pipeline"] == "pets-retinanet-mobilenet"  # the job file's experiment

    cron = "TZ=Europe/Berlin 0 3 * * 1"
    planned = aiplatform_v1.Schedule.from_json(
        runs.schedule(cloud, VERTEX_JOB, None, 10, 0.01, cron, dry_run=True))
    said = runs.schedule(cloud, VERTEX_JOB, None, 10, 0.01, cron, dry_run=False)
    (made,) = services.schedules.schedules.values()
    assert made.create_pipeline_job_request == planned.create_pipeline_job_request
    # by default the steps run in the stack's launcher image
    assert {e["container"]["image"] for e in made.create_pipeline_job_request.pipeline_job
            .pipeline_spec["deploymentSpec"]["executors"].values()} == {
        OUTPUTS.launcher_image_uri}
    assert said == f"scheduled {made.name} on '{cron}': one run at a time"
    assert (made.max_concurrent_run_count, made.max_concurrent_active_run_count,
            made.allow_queueing) == (1, 1, False)
    inner = made.create_pipeline_job_request.pipeline_job
    assert inner.service_account == OUTPUTS.pipelines_service_account
    assert inner.runtime_config.parameter_values["canary_traffic"] == 10

    run_id = next(iter(services.pipelines.jobs)).rsplit("/", 1)[1]
    listed = runs.listing(cloud).splitlines()
    assert listed[0].startswith(f"{run_id}  PENDING  ") and listed[0].endswith(
        "pipeline pets-retinanet-mobilenet  bound 80.00 USD")
    assert listed[1] == "schedule 1  ACTIVE  'TZ=Europe/Berlin 0 3 * * 1'"
    # Vertex AI names a project by its number in its answers: taken as this project's
    numbered = f"projects/123456789/locations/us-central1/pipelineJobs/{run_id}"
    assert runs.cancel(cloud, numbered, False).startswith(
        f"cancelling {LOCATION}/pipelineJobs/{run_id}")
    assert runs.cancel(cloud, made.name, True).startswith("paused")
    with pytest.raises(InputError, match="not in this environment's project and region"):
        runs.cancel(cloud, f"{LOCATION}0/pipelineJobs/{run_id}", False)  # us-central10
    listed = runs.listing(cloud).splitlines()
    assert listed[0].split()[1] == "CANCELLED" and listed[1].split()[2] == "PAUSED"


def published_dataset(services, cloud) -> None:
    """Named dataset `pets` with one version, as `invoke data.upload` publishes it."""
    from launch.stores.gcs import datasets as bucket_datasets
    from tests.fakes.cloud import write_records

    records = write_records(services.workdir / "records")
    (records / "test.record-00000-of-00001").write_bytes(b"x" * 100)
    bucket_datasets.upload(cloud, str(records), "pets")


@pytest.mark.parametrize("call, message", [
    (lambda c, i: runs.run(c, VERTEX_JOB.replace("max-cost: 20\n", ""), i, 10, 0.01,
                                    False), "give max-cost (USD)"),
    # the run's jobs, checked as its steps launch them: over max-cost, or no such dataset
    (lambda c, i: runs.run(c, VERTEX_JOB.replace("max-cost: 20", "max-cost: 5"), i, 10,
                           0.01, False), "over --max-cost 5: lower --timeout-hours"),
    (lambda c, i: runs.schedule(c, VERTEX_JOB.replace("max-cost: 20", "max-cost: 5"), i,
                                10, 0.01, "0 3 * * *", True), "over --max-cost 5"),
    (lambda c, i: runs.run(c, VERTEX_JOB.replace("dataset: pets", "dataset: cats"), i, 10,
                           0.01, False), "cats"),
    (lambda c, i: runs.run(c, LOCAL_JOB.format(data="d"), i, 10, 0.01, False),
     "target: local (--job): Vertex AI Pipelines runs jobs on Vertex AI"),
    (lambda c, i: runs.run(c, VERTEX_JOB.replace("dataset: pets", "data-dir: gs://b/r"),
                           i, 10, 0.01, False), "give dataset, the named dataset"),
    (lambda c, i: runs.run(c, VERTEX_JOB, "docker.io/someone/launcher:1", 10, 0.01,
                                    False), "--launcher-image 'docker.io/someone/launcher:1' "
                                            "is not an Artifact Registry image"),
    (lambda c, i: runs.run(c, VERTEX_JOB, "europe-docker.pkg.dev/p/r/launcher:1", 10,
                                    0.01, False),
     "--launcher-image europe-docker.pkg.dev/p/r/launcher:1 is not in the environment's "
     "repositories"),
    (lambda c, i: runs.run(c, VERTEX_JOB, i, 101, 0.01, False),
     "--canary-traffic is a percentage"),
    (lambda c, i: runs.schedule(c, VERTEX_JOB, i, 10, 0.01, "@daily", False),
     "--cron '@daily': give five cron fields"),
    (lambda c, i: runs.cancel(c, "../../x", False), "is not a run id"),
    (lambda c, i: runs.cancel(
        c, "projects/other/locations/us-central1/pipelineJobs/x", False),
     "is not in this environment's project and region"),
    (lambda c, i: runs.cancel(c, f"{LOCATION}/pipelineJobs/x", True),
     "is not a schedule id"),
])
def test_bad_pipeline_values_are_refused_before_anything_is_sent(services, call, message):
    from launch.errors import UserError
    from tests.fakes.cloud import REPOSITORY

    published_dataset(services, services.cloud())
    with pytest.raises(UserError) as refused:
        call(services.cloud(), f"{REPOSITORY}/launcher:abc123")
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert services.pipelines.received == [] and services.schedules.schedules == {}


def test_the_tasks_refuse_a_missing_job_file_and_a_target_the_file_does_not_name(tmp_path):
    from invoke import Exit

    from tests.test_run_experiment import run_task

    path, local, odd = tmp_path / "ct.yaml", tmp_path / "local.yaml", tmp_path / "odd.yaml"
    path.write_text(VERTEX_JOB)
    local.write_text(LOCAL_JOB.format(data=tmp_path))
    odd.write_text("target: mars\n")
    for flags, message in (({}, "error: --job FILE: the job file"),
                           ({"job": str(tmp_path / "none.yaml")}, "none.yaml: no such file"),
                           ({"job": str(path), "target": "local"},
                            "--target local, but the job file says target: vertex"),
                           ({"job": str(path), "state": "s", "root": "r"},
                            "--state, --root: not for a run whose job file says target: vertex"),
                           ({"job": str(local), "dry_run": True},
                            "--dry-run: not for a run whose job file says target: local"),
                           ({"job": str(odd)}, "target: 'mars' (--job")):
        with pytest.raises(Exit) as refused:
            run_task("pipeline_run", **flags)
        assert refused.value.code == 2 and message in refused.value.message


GOOD_VERSION = {"model": "1", "run_id": "ct-p-x", "step": 7, "dataset_version": V1,
                "figure": 0.7, "data": "d/test.record-*"}


def lineage_with(**fields) -> str:
    import json

    return json.dumps([{**GOOD_VERSION, **fields}]).replace('"NaN"', "NaN")


@pytest.mark.parametrize("name, text, message", [
    ("decisions.json", "{not json", "decisions.json: not a state file this pipeline wrote"),
    ("decisions.json", '[{"step": "x"}, 3]', "(not a list of decisions)"),
    ("lineage.json", '{"a": 1}', "not a state file this pipeline wrote (a JSON dict, not a "
                                 "list)"),
    ("lineage.json", '[{"model": "1"}]', "its entry 1 is not a version: give it model, "),
    # files that parse, with wrong inner types, each refused in one line
    ("lineage.json", lineage_with(figure="high"), "its entry 1 is not a version: figure is "
                                                  "'high'"),
    ("lineage.json", lineage_with(figure="NaN"), "figure is 'nan'"),
    ("lineage.json", lineage_with(figure=1e308), "figure is '1e+308'"),
    ("lineage.json", lineage_with(step="7"), "step is '7'"),
    ("lineage.json", lineage_with(step=True), "step is 'True'"),
    ("lineage.json", lineage_with(model=["1"]), "model is \"['1']\""),
    ("lineage.json", lineage_with(run_id="../../etc"), "run_id is '../../etc'"),
    ("lineage.json", lineage_with(dataset_version=5), "dataset_version is '5'"),
    ("lineage.json", lineage_with(record="x"), "record is 'x'"),
    ("lineage.json", "[" + '"x", ' * (3 << 20) + '"x"]', "bytes, more than 4,194,304"),
    ("endpoint.json", '{"1": "lots"}', "'1': 'lots' is not a version's share"),
    ("endpoint.json", '{"1": 90.5}', "'1': '90.5' is not a version's share"),
    ("endpoint.json", '{"1": 90, "2": 90}', "its shares add up to 180 percent"),
    ("endpoint.json", '["1"]', "(a JSON list, not a dict)"),
    ("endpoint.json", '{"7": 100}', "serves version '7', which lineage.json does not name"),
])
def test_a_damaged_state_is_refused_in_one_line(tmp_path, name, text, message):
    """Every state file is read through one schema (state.parse): a file that is not JSON,
    or parses with the wrong inner types, ends neither the first step nor `runs.show` in a
    traceback, and is left as it was."""
    from launch.errors import UserError
    from launch.features.pipeline import steps

    data, state = tmp_path / "data", tmp_path / "state" / "p"
    (data / V1).mkdir(parents=True)
    state.mkdir(parents=True)
    (state / steps.LINEAGE).write_text(lineage_with())  # version 1 serves
    (state / steps.ENDPOINT).write_text('{"1": 100}')
    (state / name).write_text(text)
    shown = name != steps.DECISIONS and "7" not in text  # what `runs.show` reads
    for read in (lambda: steps.resolve_dataset(LOCAL_JOB.format(data=data), str(state)),
                 *([lambda: steps.origins(str(state.parent))] if shown else [])):
        with pytest.raises(UserError) as refused:
            read()
        assert message in str(refused.value) and "\n" not in str(refused.value)
    assert (state / name).read_text() == text  # left as it was


@pytest.mark.parametrize("given, message", [
    ("../x", "--pipeline '../x': give a pipeline name"),
    ("Pets", "--pipeline 'Pets': give a pipeline name"),
    ("a" * 31, "--pipeline 'aaaa"),
    ("", "--pipeline '': give a pipeline name"),
    ("a b", "--pipeline 'a b'"),
])
def test_a_pipeline_name_that_is_no_name_is_refused_before_anything_runs(
        tmp_path, given, message):
    """The name is a folder, a label value and part of each run id (63 characters at most):
    a path, capitals, spaces or 31 characters are refused in one line, and nothing is
    written."""
    data = tmp_path / "data"
    (data / V1).mkdir(parents=True)
    with pytest.raises(InputError) as refused:
        runs.run_here(LOCAL_JOB.format(data=data), str(tmp_path / "state"),
                      str(tmp_path / "root"), 10, 0.01, given)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "state").exists() and not (tmp_path / "root").exists()


def test_a_state_folder_that_names_no_pipeline_is_one_line_given_as_a_path(tmp_path):
    with pytest.raises(InputError, match=r"^state '/.*/Not_A_Name': its last folder is the "):
        run_id_for(tmp_path / "Not_A_Name", V1)


def test_two_pipelines_on_one_dataset_share_no_run_state_or_refusal(tmp_path):
    """A RetinaNet and a Faster R-CNN job file following one dataset are
    two pipelines (by default, named after their experiments): their runs (and so their
    job.yaml), states and refusals are their own, and each run id is a label value."""
    from launch.context.places import check_run_id
    from launch.features.pipeline import state as pipeline_state
    from launch.features.pipeline import steps

    root = tmp_path / "state"
    names = [pipeline_state.name_for(None, experiment) for experiment in (
        "pets_retinanet_mobilenet", "pets_fasterrcnn_resnetfpn")]
    assert names == ["pets-retinanet-mobilenet", "pets-fasterrcnn-resnetfpn"]
    runs = {check_run_id(run_id_for(str(root / name), V2)) for name in names}
    assert runs == {"ct-pets-retinanet-mobilenet-20261201t000000z-00000002",
                    "ct-pets-fasterrcnn-resnetfpn-20261201t000000z-00000002"}
    longest = run_id_for(str(root / ("a" * 30)), V2)
    assert len(longest) <= 63 and check_run_id(longest) == longest
    assert {str(steps.run_dir(str(root / n), run_id_for(str(root / n), V2)).parent.parent)
            for n in names} == {str(root / n) for n in names}
    with pytest.raises(InputError, match="its last folder is the pipeline's name"):
        run_id_for(str(tmp_path / "Not_A_Name"), V2)


def test_a_state_from_before_pipelines_were_named_is_refused_saying_where_to_move_it(
        tmp_path):
    """A state written by the previous version (its files at the state's top) is neither
    read as a pipeline's nor left to be forgotten: one line says where to move it."""
    from launch.features.pipeline import steps

    data, root = tmp_path / "data", tmp_path / "state"
    (data / V1).mkdir(parents=True)
    root.mkdir()
    (root / steps.DECISIONS).write_text("[]")
    for act, name in ((lambda: runs.run_here(LOCAL_JOB.format(data=data), str(root),
                                             str(tmp_path / "root"), 10, 0.01),
                       "pets-retinanet-mobilenet"),
                      (lambda: steps.origins(str(root)), "NAME")):
        with pytest.raises(InputError) as refused:
            act()
        assert "decisions.json there are a pipeline's state from before pipelines were " \
               "named; move them (and runs/, registry/) into" in str(refused.value)
        assert f"into {root}/{name}/ to go on as pipeline {name}" in str(refused.value)


def test_the_local_gate_refuses_test_records_rewritten_after_they_were_written_or_judged(
        tmp_path):
    """On the local target: a version's lineage keeps the sha256 of
    the test record it was judged on, the evaluate step the records its jobs wrote. A run
    at 0.30 whose record is rewritten to 0.99, a serving version (0.95) whose record is
    rewritten down to 0.10 or truncated: each stops the run at the gate, in one line."""

    from launch.features.pipeline import steps
    from trainer.common import files

    state, job, run_id = serving_champion(tmp_path)
    measure_run(state, run_id, 0.30, "d/test.record-*")
    decisions.evaluated(run_id, [steps._figure(str(state), run_id, "pets_retinanet_mobilenet")],
                    lambda **made: steps.decide(str(state), **made))
    record = steps.run_dir(str(state), run_id) / files.TEST_METRICS_DIR / "ckpt-7.json"
    champion_record = record.parents[2] / "ct-p-champion" / files.TEST_METRICS_DIR / \
        "ckpt-7.json"
    judged = champion_record.read_text()

    record.write_text(record.read_text().replace("0.3", "0.99"))
    assert steps.compare(job, str(state), run_id, 0.01) is False
    assert "is not the one its evaluation wrote (rewritten since)" in \
        steps.decisions(str(state))[-1]["reason"]

    record.write_text(record.read_text().replace("0.99", "0.05"))  # rewritten down
    assert steps.compare(job, str(state), run_id, 0.01) is False
    refused = steps.decisions(str(state))[-1]
    assert "rewritten since" in refused["reason"]
    assert refused["worse"] is False  # a figure not trusted is no verdict: tried again

    record.write_text(record.read_text().replace("0.05", "0.3"))  # as written: judged
    champion_record.write_text(judged.replace("0.95", "0.1"))
    assert steps.compare(job, str(state), run_id, 0.01) is False
    said = steps.decisions(str(state))[-1]["reason"]
    assert "the serving version (version 1): its test record (run ct-p-champion, ckpt-7) " \
           "is not the one it was judged on" in said and "\n" not in said

    champion_record.write_text(judged[:-10])
    assert steps.compare(job, str(state), run_id, 0.01) is False
    assert f"its test record {champion_record} cannot be read (is not JSON" in \
        steps.decisions(str(state))[-1]["reason"]

    champion_record.write_text(judged)  # restored: the run is judged, and is worse
    assert steps.compare(job, str(state), run_id, 0.01) is False
    assert steps.decisions(str(state))[-1]["worse"] is True


def flags_named_are_taken(advice: str) -> None:
    """Every flag the advice names is one its task takes: a flag in a `invoke TASK ...`
    command TASK's, any other pipeline.run's (each parsed from the tasks' own flags); and it
    names at least one command."""
    import re

    from invoke import Collection

    import tasks

    known = Collection.from_module(tasks)

    def taken(name: str) -> set[str]:
        return {f"--{flag}" for argument in known[name].get_arguments()
                for flag in argument.names}

    commands = re.findall(r"`invoke ([\w.]+)([^`]*)`", advice)
    assert commands, advice
    for name, flags in commands:
        assert set(re.findall(r"--[\w-]+", flags)) <= taken(name), (name, advice)
    elsewhere = re.sub(r"`invoke [^`]*`", "", advice)
    assert set(re.findall(r"--[\w-]+", elsewhere)) <= taken("pipeline.run"), advice


def test_the_gates_refusal_in_a_pipeline_advises_only_flags_the_tasks_take(tmp_path):
    """The gate's own advice (`--force REASON`) is for model.upload, and a
    pipeline takes no --force. A run refused as worse is told the version is not trained
    again, the next one is, and --max-drop (which pipeline.run takes) allows a larger drop;
    a run refused for a record it cannot trust is told the next run tries it again; on
    Vertex AI, `model.upload --force` serves the run by hand."""

    from launch.features.pipeline import steps
    from launch.targets import champion

    state, job, run_id = serving_champion(tmp_path)
    steps.decide(str(state), step="resolve dataset", go=True, version=V1, reason="newer")
    measure_run(state, run_id, 0.30, "d/test.record-*")
    decisions.evaluated(run_id, [steps._figure(str(state), run_id, "pets_retinanet_mobilenet")],
                    lambda **made: steps.decide(str(state), **made))

    assert steps.compare(job, str(state), run_id, 0.01) is False
    worse = steps.decisions(str(state))[-1]
    assert worse["worse"] is True and "worse by 0.650, more than 0.01 (--max-drop)" in \
        worse["reason"]
    assert f"this pipeline does not train {V1} again" in worse["reason"]
    assert "`invoke pipeline.run --job FILE --max-drop DROP` allows a larger drop" in \
        worse["reason"]
    flags_named_are_taken(worse["reason"])

    record = steps.run_dir(str(state), run_id) / "eval-test" / "ckpt-7.json"
    record.write_text(record.read_text().replace("0.3", "0.99"))  # not what was evaluated
    assert steps.compare(job, str(state), run_id, 0.01) is False
    untrusted = steps.decisions(str(state))[-1]["reason"]
    assert untrusted.endswith(f"(rewritten since); the next run tries {V1} again: `invoke "
                              "pipeline.run --job FILE`")
    flags_named_are_taken(untrusted)

    gate = champion.Refused("run r's AP50 is worse", "pass --force REASON to go ahead")
    for worse_run in (True, False):
        on_vertex = decisions.refusal(gate, "ct-p-x", V1, worse_run, vertex=True)
        assert on_vertex.endswith("upload it by hand: `invoke model.upload --run-id ct-p-x "
                                  "--force REASON`")
        flags_named_are_taken(on_vertex)


def test_a_step_that_fails_says_so_in_one_line_naming_its_error_and_the_log(tmp_path, capsys):
    """A version with no records fails the train step (KFP's local runner,
    for real: no training starts). Its one line says it failed, with the last line of its
    error and the log file, which holds the step's whole output; the run ends with one line
    naming the log (exit 1: the task's StepFailed)."""
    from launch.errors import StepFailed

    data, root = tmp_path / "data", tmp_path / "root"
    (data / V1).mkdir(parents=True)
    with pytest.raises(StepFailed) as failed:
        runs.run_here(LOCAL_JOB.format(data=data), str(tmp_path / "state"), str(root),
                      10, 0.01)
    (log,) = (root / "logs").glob("pets-retinanet-mobilenet-*.log")
    shown = capsys.readouterr()
    ok, train = shown.out.splitlines()  # nothing after the failed step: it was not reached
    assert ok.startswith("resolve dataset: ok, ") and "\x1b" not in shown.out
    assert train.startswith("train: failed after ")
    assert train.endswith(f"s: launch.errors.InputError: no files match --train-input "
                          f"{data / V1}/train.record-*; convert data first with `invoke "
                          "data.convert` (or `python -m trainer data convert`) (its output: "
                          f"{log})")
    assert str(failed.value) == (f"pipeline pets-retinanet-mobilenet stopped: step train "
                                 f"failed (its output and KFP's: {log}; the pipeline's files: "
                                 f"{root})")
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "\x1b" not in text
    assert "Task 'train' finished with status FAILURE" in text
