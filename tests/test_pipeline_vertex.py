"""Issue 42 on Vertex AI: the pipeline's steps (launch/features/pipeline/on_vertex.py) against
the fake Vertex AI (custom jobs, Model Registry, endpoints) and the Cloud Storage emulator.
Each job's command runs here for real: the trainer trains and evaluates on the bucket's
files (tests/fakes/vertex.py MirroredJobCommands). The steps run in this process in the
pipeline's order; KFP's local runner would start each in a process of its own, which the
fakes' clients do not reach (tests/test_pipeline.py runs the compiled graph locally)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from launch.features.pipeline import decisions
from launch.features.pipeline.on_vertex import VertexSteps
from launch.features.pipeline.state import run_id_for
from launch.stores.gcs import datasets as bucket_datasets
from tests.conftest import TRAIN_STEPS
from tests.fakes.cloud import OUTPUTS
from tests.fakes.vertex import MirroredJobCommands
from tests.test_pipeline import versioned_sample

STATE = "gs://pets-data/pipelines/state/pets-retinanet-mobilenet"
JOB = ("target: vertex\nexperiment: pets_retinanet_mobilenet\ndataset: pets\nsteps: {steps}\n"
       "max-cost: 5\ntimeout-hours: 2\n{init}eval:\n  timeout-hours: 2\n")
MODEL = "projects/pets-detector-dev/locations/us-central1/models/pets-retinanet-mobilenet"


def step_cloud(fakes, job: str):
    """A step's Cloud as its container makes it (on_vertex.cloud_of, from the settings
    `pipeline.run` sends), on the fakes' clients."""
    from launch.features.pipeline import runs
    from launch.features.pipeline.on_vertex import cloud_of

    settings = runs.settings_of(fakes.cloud(), decisions.job_of(job))
    return cloud_of(settings, fakes.cloud().clients)


def run_once(vertex: VertexSteps, canary: int = 10, max_drop: float = 0.01) -> str:
    """One run's steps, in the order of the pipeline's graph (definition.py): what it ended
    with."""
    version = vertex.resolve_dataset()
    if not version:
        return "stopped: no newer data"
    run_id = vertex.train(version)
    vertex.evaluate(run_id, version)
    if not vertex.compare(run_id, max_drop):
        return "stopped: the gate"
    lineage = vertex.upload(run_id, version, max_drop)
    return vertex.promote(vertex.deploy_canary(lineage, canary, max_drop))


def publish(cloud, root: Path, version_dir: str) -> str:
    """A dataset version uploaded as `invoke data.upload --dataset pets` uploads it."""
    bucket_datasets.upload(cloud, str(root / version_dir), "pets")
    return bucket_datasets.resolve(cloud, "pets").version


def put_checkpoint(storage, model_dir: Path, prefix: str) -> str:
    """The shared model's checkpoint in the bucket, to fine-tune from."""
    bucket = storage.bucket(OUTPUTS.bucket)
    for path in model_dir.iterdir():
        if path.name == "checkpoint" or path.name.startswith(f"ckpt-{TRAIN_STEPS}."):
            bucket.blob(f"{prefix}/{path.name}").upload_from_filename(str(path))
    return f"gs://{OUTPUTS.bucket}/{prefix}"


@pytest.mark.slow(50)  # a training that evaluates and tests itself: one trainer process
def test_on_vertex_ai_a_run_trains_uploads_and_deploys_then_stops_on_no_new_data(
        trained, services, tmp_path):
    """A first run trains on the dataset's newest version in one job (evaluating its
    checkpoints on the validation split as it trains, --evaluate, then the chosen one on the
    test split, --test), passes the gate (nothing serves), uploads a version labelled with
    its dataset version and deploys it with all the traffic; a second with no new version
    stops at its first step."""
    fakes = services
    fakes.vertex.custom_runner = MirroredJobCommands(
        os.environ["STORAGE_EMULATOR_HOST"], fakes.storage, OUTPUTS.bucket,
        tmp_path / "mirror", fakes.logs)
    for image in (OUTPUTS.image_uri, OUTPUTS.serving_image_uri):  # the deployed images
        fakes.registry.push(image)
    versioned_sample(tmp_path / "data", "first", num_images=60)
    first = publish(fakes.cloud(), tmp_path / "data", "first")
    init = f"init-from: {put_checkpoint(fakes.storage, trained[0], 'pretrained/demo')}\n"
    job = JOB.format(steps=10, init=init)

    good = VertexSteps(step_cloud(fakes, job), job, STATE, poll_seconds=0)
    ended = run_once(good)
    run_id = run_id_for(STATE, first)
    assert ended.endswith("serves all of pets_retinanet_mobilenet's traffic on "
                          + good.serving._endpoint().name)
    versions = fakes.models.versions[MODEL]
    assert [v.labels["run"] for v in versions] == [run_id]
    assert versions[0].labels["dataset-version"] == first.lower()  # labels are lowercase
    (endpoint,) = fakes.endpoints.endpoints.values()
    assert list(endpoint.traffic_split.values()) == [100]
    made = good.decisions()
    assert [(d["step"], d["go"]) for d in made] == [("resolve dataset", True),
                                                   ("evaluate", True), ("compare", True)]

    assert run_once(good) == "stopped: no newer data"
    assert "no version newer than" in good.decisions()[-1]["reason"]
    assert len(fakes.vertex.jobs) == 1  # the training, which evaluated and tested itself
    training = next(iter(fakes.vertex.jobs.values())).job_spec.worker_pool_specs[0]
    assert "--mode=train_and_eval" in training.container_spec.args  # --evaluate
    (tested,) = [arg for arg in training.container_spec.args if arg.startswith("--test_input")]
    assert "--test_after" in training.container_spec.args  # --test, on the version's files
    assert tested.startswith(f"--test_input=gs://{OUTPUTS.bucket}/datasets/pets/")
    for records in ("eval", "eval-test"):  # the training's own, of the checkpoint it chose
        assert fakes.storage.bucket(OUTPUTS.bucket).blob(
            f"runs/{run_id}/checkpoints/{records}/ckpt-10.json").exists()
    # each job ran the environment's deployed trainer image; the version serves on its
    # deployed serving image: pinned by digest, nothing built
    assert {job.job_spec.worker_pool_specs[0].container_spec.image_uri.split("@")[0]
            for job in fakes.vertex.jobs.values()} == {OUTPUTS.image_uri.split(":")[0]}
    assert versions[0].container_spec.image_uri.startswith(
        OUTPUTS.serving_image_uri.split(":")[0] + "@sha256:")
    assert fakes.builds.requests == []
    assert json.loads(fakes.storage.bucket(OUTPUTS.bucket).blob(
        "pipelines/state/pets-retinanet-mobilenet/decisions.json").download_as_bytes()
    )[-1]["go"] is False


def test_on_vertex_ai_a_worse_run_is_refused_with_both_figures_and_not_trained_again(
        services, serving_prices):
    """The gate on Vertex AI (the trained runs above pass it; the local end-to-end test has
    a real loser): the run's test figure against the version serving on the endpoint, both
    in the decision, nothing uploaded or deployed, and the version not trained again."""
    from launch.targets.vertex import serving
    from tests.test_champion import evaluated_on_test
    from tests.test_pipeline import published_dataset
    from tests.test_serving import cpu, write_run

    cloud = services.cloud()
    published_dataset(services, cloud)
    version = bucket_datasets.resolve(cloud, "pets").version
    write_run(services.storage, "ct-champion")
    evaluated_on_test(services.storage, "ct-champion", 0.9)
    serving.upload_model(cloud, "ct-champion")
    serving.deploy(cloud, "ct-champion", cpu)
    run_id = run_id_for(STATE, version)
    write_run(services.storage, run_id)
    evaluated_on_test(services.storage, run_id, 0.5)
    vertex = VertexSteps(cloud, JOB.format(steps=1, init=""), STATE)
    vertex.decide(step="resolve dataset", go=True, version=version, reason="newer")

    assert vertex.compare(run_id, 0.01) is False
    verdict = vertex.decisions()[-1]
    assert (verdict["step"], verdict["worse"], verdict["version"]) == ("compare", True,
                                                                      version)
    assert (verdict["challenger"], verdict["champion"]) == (0.5, 0.9)
    assert "0.500" in verdict["reason"] and "0.900" in verdict["reason"]
    assert vertex.resolve_dataset() == ""
    assert "was tried and refused" in vertex.decisions()[-1]["reason"]
    assert len(services.models.versions[MODEL]) == 1  # the champion alone


def test_two_writers_of_the_buckets_state_lose_no_decision(services):
    """Each change is written over the generation it read: two steps deciding at once (two
    runs, or a run and a retry) both land; without the precondition one would be lost."""
    import threading

    steps_of = [VertexSteps(services.cloud(), JOB.format(steps=1, init=""), STATE)
                for _ in range(2)]

    def write(writer: VertexSteps, name: str) -> None:
        for i in range(15):
            writer.decide(step=name, go=True, i=i)

    threads = [threading.Thread(target=write, args=(w, f"w{n}"))
               for n, w in enumerate(steps_of)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    made = steps_of[0].decisions()
    assert sorted((d["step"], d["i"]) for d in made) == sorted(
        (f"w{n}", i) for n in range(2) for i in range(15))


@pytest.mark.parametrize("state, text, message", [
    ("gs://other-bucket/pipelines/state", None, "a folder below gs://pets-data/pipelines/"),
    ("gs://pets-data/pipelines/../runs", None, "a folder below gs://pets-data/pipelines/"),
    ("gs://pets-data/datasets/x", None, "a folder below gs://pets-data/pipelines/"),
    ("gs://pets-data/pipelines/state/../x", None, "a folder below gs://pets-data/pipelines/"),
    ("gs://pets-data/pipelines/state/Pets", None, "its last folder is the pipeline's name"),
    (STATE, b"{not json", "not a state file this pipeline wrote"),
    (STATE, b'{"step": "x"}', "not a state file this pipeline wrote (a JSON dict, not a "
                              "list)"),
    (STATE, b'[{"step": "x"}, "x"]', "(not a list of decisions)"),
    (STATE, b"[" + b"{}, " * (1 << 20) + b"{}]", "(is more than 4,194,304 bytes)"),
])
def test_a_state_outside_the_bucket_or_damaged_is_refused_in_one_line(services, state, text,
                                                                      message):
    from launch.errors import UserError

    if text is not None:
        services.storage.bucket(OUTPUTS.bucket).blob(
            f"{STATE.split('/', 3)[3]}/decisions.json").upload_from_string(text)
    steps_here = VertexSteps(services.cloud(), JOB.format(steps=1, init=""), state)
    with pytest.raises(UserError) as refused:
        steps_here.decide(step="resolve dataset", go=False)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_steps_environment_is_the_settings_its_run_carries(services):
    """A step's container has no outputs file: its Cloud is the `settings` parameter as
    `pipeline.run` resolved it, and nothing else (no variable of the container's)."""
    from launch.features.pipeline import runs
    from launch.features.pipeline.on_vertex import NOWHERE, cloud_of
    from launch.values import jobfile
    from tests.fakes.cloud import REPOSITORY
    from tests.test_pipeline import published_dataset

    job = JOB.format(steps=1, init="")
    settings = runs.settings_of(services.cloud(), decisions.job_of(job))
    cloud = cloud_of(settings)
    assert cloud.outputs_path == NOWHERE and cloud.environ == {}
    fields = cloud.fields(("project", "region", "bucket", "image", "service_account",
                           "serving_service_account", "serving_image"))
    carried = json.loads(settings)
    assert (carried.pop("environment"), carried.pop("image_repositories")) == ("dev",
                                                                              REPOSITORY)
    assert {k: v for k, v in fields.items() if v} == carried
    assert fields["image"] == OUTPUTS.image_uri
    assert (cloud.environment, cloud.image_repositories()) == ("dev", (REPOSITORY,))
    # a job launched from it passes the launcher's own checks (its image among the
    # repositories the run carries), as a dry run
    published_dataset(services, services.cloud())
    here = step_cloud(services, job)
    printed = VertexSteps(here, job, STATE).launch(jobfile.TRAIN, dataset="pets",
                                                   run_id="ct-x", dry_run=True)
    assert OUTPUTS.image_uri.rsplit(":", 1)[0] in printed


def test_what_the_state_and_the_registry_say_is_read_not_trusted(services, serving_prices):
    """Decisions in the bucket that are not the pipeline's (a version that is a list, a
    number, no reason) are passed over, never a traceback; a serving version whose labels
    name another dataset, or a `dataset-version` that is no version, is set against the run
    instead of stopping every run for ever; promote leaves another experiment's deployment
    on the endpoint."""
    from launch.targets.vertex import serving
    from launch.targets.vertex.registry import parent_model_id
    from tests.test_pipeline import published_dataset
    from tests.test_serving import cpu, write_run

    cloud = services.cloud()
    published_dataset(services, cloud)
    newest = bucket_datasets.resolve(cloud, "pets").version
    services.storage.bucket(OUTPUTS.bucket).blob(f"{STATE.split('/', 3)[3]}/decisions.json") \
        .upload_from_string(json.dumps([
            {"step": "compare", "worse": True, "version": ["x"]},
            {"step": "compare", "worse": True, "version": newest.upper()},
            {"step": "resolve dataset", "version": 5}, {"step": 3}, {}]))
    vertex = VertexSteps(cloud, JOB.format(steps=1, init=""), STATE)
    assert decisions.refusals_in(vertex.decisions()) == {}
    assert decisions.version_in(STATE, vertex.decisions(), run_id_for(STATE, newest)) == ""

    write_run(services.storage, "other-data")  # uploaded from another dataset's version
    services.storage.bucket(OUTPUTS.bucket).blob("runs/other-data/job.yaml") \
        .upload_from_string("target: vertex\ndataset: cats@v-29991231T000000Z-0000000a\n")
    serving.upload_model(cloud, "other-data")
    serving.deploy(cloud, "other-data", cpu)
    (held,) = services.models.versions[MODEL]
    assert held.labels["dataset"] == "cats"
    assert vertex.resolve_dataset() == newest  # not "no version newer than v-2999..."
    assert "names no version of dataset pets" in vertex.decisions()[-1]["reason"]

    write_run(services.storage, "resnet", experiment="pets_retinanet_resnetfpn")
    serving.upload_model(cloud, "resnet")
    serving.deploy(cloud, "resnet", cpu)
    (endpoint,) = services.endpoints.endpoints.values()
    ours = next(d.id for d in endpoint.deployed_models if d.display_name == "other-data")
    said = vertex.promote(ours)
    (endpoint,) = services.endpoints.endpoints.values()
    assert {d.display_name for d in endpoint.deployed_models} == {"other-data", "resnet"}
    assert parent_model_id("pets_retinanet_mobilenet") in MODEL and "serves all of" in said


def test_a_decision_over_a_writer_that_never_stops_waits_longer_each_time_up_to_its_bound(
        services):
    """A second writer changes the decisions between each read and write
    (a Cloud Storage client whose every conditional write is preceded by another's): the
    step reads again after a growing, jittered pause, lands once the other stops, and gives
    up in one line after its bound, not after 20 writes in a burst."""
    import dataclasses
    import time

    import requests
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from launch.errors import StepFailed

    name = f"{STATE.split('/', 3)[3]}/decisions.json"
    writes: list[float] = []  # when each of the step's conditional writes was sent
    meddling = {"left": 3}

    class Meddler(requests.Session):
        def request(self, method, url, *args, **kwargs):
            if "ifGenerationMatch" in url and meddling["left"]:
                meddling["left"] -= 1
                writes.append(time.monotonic())
                services.storage.bucket(OUTPUTS.bucket).blob(name).upload_from_string(
                    json.dumps([{"step": "other", "i": len(writes)}]))
            elif "ifGenerationMatch" in url:
                writes.append(time.monotonic())
            return super().request(method, url, *args, **kwargs)

    client = storage.Client(project="test", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": os.environ[
                                "STORAGE_EMULATOR_HOST"]}, _http=Meddler())
    cloud = services.cloud()
    cloud = dataclasses.replace(cloud, clients=dataclasses.replace(
        cloud.clients, storage=lambda project: client))
    vertex = VertexSteps(cloud, JOB.format(steps=1, init=""), STATE, write_seconds=30)
    vertex.decide(step="mine", go=True)
    assert [d["step"] for d in vertex.decisions()] == ["other", "mine"]  # both kept
    assert len(writes) == 4  # three lost to the other writer, then written

    writes.clear()
    meddling["left"] = 10_000  # a writer that never stops
    vertex = dataclasses.replace(vertex, write_seconds=3)
    started = time.monotonic()
    with pytest.raises(StepFailed) as refused:
        vertex.decide(step="mine again", go=True)
    took = time.monotonic() - started
    assert str(refused.value) == (
        f"{STATE}/decisions.json kept changing while this step wrote it (other writers, "
        "for up to 3 s); run the pipeline again")
    assert took <= 3 + 1  # the bound: no pause that would pass it is taken
    assert 3 <= len(writes) < 20  # paused between attempts: no burst of 20
    assert max(b - a for a, b in itertools.pairwise(writes)) <= 5 + 1  # each pause bounded


def test_decisions_from_before_pipelines_were_named_are_refused_saying_where_to_move_them(
        services):
    """Item 2: the decisions an unnamed pipeline left (gs://BUCKET/pipelines/state/
    decisions.json) are refused in one line, when a run is sent and at its first step,
    until a person moves them to a pipeline's folder; nothing is sent meanwhile."""
    from launch.errors import InputError
    from launch.features.pipeline import runs
    from tests.fakes.cloud import REPOSITORY
    from tests.test_pipeline import VERTEX_JOB, published_dataset

    cloud = services.cloud()
    published_dataset(services, cloud)
    old = services.storage.bucket(OUTPUTS.bucket).blob("pipelines/state/decisions.json")
    old.upload_from_string(b"[]")
    expected = ("gs://pets-data/pipelines/state: decisions.json there are a pipeline's state "
                "from before pipelines were named; move them (and runs/, registry/) into "
                "gs://pets-data/pipelines/state/pets-retinanet-mobilenet/ to go on as pipeline "
                "pets-retinanet-mobilenet, or move them away")
    with pytest.raises(InputError) as refused:
        VertexSteps(cloud, VERTEX_JOB, STATE).resolve_dataset()
    assert str(refused.value) == expected
    with pytest.raises(InputError) as refused:
        runs.run(cloud, VERTEX_JOB, f"{REPOSITORY}/launcher:abc123", 10, 0.01, False)
    assert str(refused.value) == expected and services.pipelines.received == []
    old.delete()
    other = "gs://pets-data/pipelines/state/faster"  # and a named pipeline is its own
    assert VertexSteps(cloud, VERTEX_JOB, other).resolve_dataset() == \
        bucket_datasets.resolve(cloud, "pets").version


def test_a_run_whose_test_record_is_rewritten_after_its_evaluation_is_refused(
        services, serving_prices):
    """In the pipeline, the evaluate step records the sha256 of the test
    records its jobs wrote. A run measured at 0.30 whose record is then rewritten to 0.99
    is refused at the gate and at the upload; the serving version's record that the step
    wrote again (new test files) is the pipeline's own, and a fair run is judged on it."""
    from launch.context.cloud import run_paths
    from launch.targets import champion
    from launch.targets.champion import GateError
    from launch.targets.vertex import serving
    from tests.test_champion import evaluated_on_test
    from tests.test_pipeline import published_dataset
    from tests.test_serving import cpu, write_run

    cloud, storage = services.cloud(), services.storage
    published_dataset(services, cloud)
    version = bucket_datasets.resolve(cloud, "pets").version
    write_run(storage, "ct-champion")
    evaluated_on_test(storage, "ct-champion", 0.9)
    serving.upload_model(cloud, "ct-champion")
    serving.deploy(cloud, "ct-champion", cpu)
    run_id = run_id_for(STATE, version)
    write_run(storage, run_id)
    evaluated_on_test(storage, run_id, 0.30)  # as its evaluation job writes it
    vertex = VertexSteps(cloud, JOB.format(steps=1, init=""), STATE)
    vertex.decide(step="resolve dataset", go=True, version=version, reason="newer")
    decisions.evaluated(run_id, [vertex._test_figure(run_id)], vertex.decide)  # the step's
    evaluated_on_test(storage, run_id, 0.99)  # rewritten by someone who may write runs/

    assert vertex.compare(run_id, 0.01) is False
    verdict = vertex.decisions()[-1]
    assert f"run {run_id}'s test record gs://pets-data/runs/{run_id}/checkpoints/eval-test/" \
           "ckpt-1000.json is not the one its evaluation wrote (rewritten since)" in \
           verdict["reason"]
    assert verdict["worse"] is False  # not the model's doing: the version is tried again
    with pytest.raises(GateError, match="is not the one its evaluation wrote"):
        vertex.upload(run_id, version, 0.01)
    assert len(services.models.versions[MODEL]) == 1

    other = "gs://pets-data/datasets/pets/v9/test.record-* (1 files, sha256 99999999)"
    evaluated_on_test(storage, run_id, 0.60, data=other)  # evaluated again, on new files
    evaluated_on_test(storage, "ct-champion", 0.55, data=other)  # and the serving version
    held = champion.read_figure(champion.test_record(
        storage, run_paths(cloud, "ct-champion"), 1000), "ct-champion", vertex.measure)
    decisions.evaluated(run_id, [vertex._test_figure(run_id), held], vertex.decide)
    assert vertex.compare(run_id, 0.01) is True  # 0.60 against the step's own 0.55
    assert "0.600 against the serving version's 0.550" in vertex.decisions()[-1]["reason"]
