"""Jobs written down once: every bad value is one line naming the flag (exit 2, nothing
built), the job file round-trips through --dry-run for train, tune and eval on GPU, TPU and
multi-worker hardware, and --init-from reaches the trainer's arguments. The commands run in
this process (tests/cli.py: invoke's own parser and tasks.py); one test runs the real
`python -m invoke` for the wiring only a new process shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from google.cloud import aiplatform_v1

from launch.errors import InputError
from launch.values import jobfile, pretrained
from launch.values.jobs import Evaluation, TrainerDirs, Training
from tests import cli
from tests.cli import REPO, refused
from tests.conftest import HANG
from tests.test_vertex import SETUP
from trainer.cli.main import ERROR_PREFIX

VERTEX_ENV = {"PETS_PROJECT": SETUP.project, "PETS_REGION": SETUP.region,
              "PETS_BUCKET": SETUP.bucket, "PETS_IMAGE": SETUP.image,
              "PETS_TPU_IMAGE": SETUP.tpu_image,
              "PETS_SERVICE_ACCOUNT": SETUP.service_account,
              # no credentials: nothing can be built or submitted from these tests
              "GOOGLE_APPLICATION_CREDENTIALS": str(REPO / "work" / "no-credentials.json")}


def invoke(*args: str) -> cli.Ran:
    """`invoke ARGS` in this process, with the settings above."""
    return cli.invoke(*args, env=VERTEX_ENV)


def test_the_invoke_binary_refuses_in_one_line_dry_runs_and_helps():
    """The wiring only a new `python -m invoke` process shows (seconds each, so only these):
    a bad value is one line and exit 2, a dry run prints the request, --help the options."""
    def binary(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO,
                              env={**os.environ, **VERTEX_ENV}, capture_output=True,
                              text=True, timeout=HANG)

    assert refused(binary("train", "--steps=0")) == \
        "error: --steps must be at least 1, got '0'"
    result = binary("train", *VERTEX, "--run-id=b1", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert aiplatform_v1.CustomJob.from_json(result.stdout).labels["run"] == "b1"
    result = binary("train", "--help")
    assert result.returncode == 0 and "[whole number >= 1]" in result.stdout


VERTEX = ("--target=vertex", "--experiment=pets_retinanet_resnetfpn")
BAD_VALUES = [
    (("train", "--steps=0"), "--steps must be at least 1, got '0'"),
    (("train", "--steps=-100"), "--steps must be at least 1"),
    (("train", "--steps=abc"), "--steps must be a whole number, got 'abc'"),
    (("train", "--steps=1.5"), "--steps must be a whole number"),
    (("train", "--steps=nan"), "--steps must be a whole number"),
    (("train", *VERTEX, "--steps=0", "--dry-run"), "--steps must be at least 1"),
    (("train", "--experiment=retinanet_resnetfpn_cocoo"),
     "--experiment 'retinanet_resnetfpn_cocoo' is not a detection experiment (did you "
     "mean retinanet_resnetfpn_coco"),
    (("eval", "--experiment=resnet_imagenet"), "--experiment 'resnet_imagenet' is not a"),
    (("eval", "--split=train"), "--split must be one of val, test, got 'train'"),
    (("train", *VERTEX, "--bucket=gs://b/records", "--dry-run"),
     "--bucket 'gs://b/records' is not a bucket name"),
    (("train", *VERTEX, "--bucket=gs://b", "--dry-run"),
     "--bucket 'gs://b' is not a bucket name: 3 to 222 lowercase letters"),
    (("train", *VERTEX, "--region=us-centrall", "--dry-run"),
     "--region 'us-centrall' is not a Google Cloud region name"),
    (("train", *VERTEX, "--region=us-central9", "--dry-run"),
     "--region 'us-central9' is not a Vertex AI training region"),
    (("train", *VERTEX, "--regions=us-central1,us-east4", "--region=us-east4", "--dry-run"),
     "--region and --regions: choose one"),
    (("train", *VERTEX, "--fallback=n1-standard-16", "--dry-run"),
     "--fallback n1-standard-16: the accelerator cannot be inferred"),
    (("train", *VERTEX, "--regions=us-central1,europe-west4", "--dry-run"),  # no outputs file
     "--regions europe-west4 is in europe, but the data bucket is in us-central1 "
     "(north-america), taken to be the environment's region as its location is not known"),
    (("train", *VERTEX, "--image=nginx:latest", "--dry-run"),
     "--image 'nginx:latest' is not an Artifact Registry image"),
    (("train", "--data-dir=work/no-such-records"), "--data-dir work/no-such-records: no such"),
    (("train", *VERTEX, "--data-dir=work/records", "--dry-run"),
     "--data-dir work/records is on this machine"),
    (("train", "--override=task.model.no_such_field=1"),
     "--override 'task.model.no_such_field': pets_retinanet_mobilenet has no field"),
    (("train", "--override=batch_size=abc"),
     "--override batch_size='abc': task.train_data.global_batch_size takes a whole number"),
    (("train", "--override=learning_rate=true"), "takes a float"),
    (("train", "--override=nonsense"), "--override takes KEY=VALUE, got 'nonsense'"),
    (("train", "--init-from=resnet50-imagenet"),
     "--init-from resnet50-imagenet is a resnet-50 checkpoint and pets_retinanet_mobilenet "
     "has a mobilenet-MobileNetV2 backbone"),
    (("train", "--init-from=resnet50-imagenet"),  # ours first, all of them
     "(pets_fasterrcnn_resnetfpn, pets_maskrcnn_resnetfpn, pets_retinanet_resnetfpn and "),
    (("train", "--init-from=no-such-checkpoint"),
     "--init-from 'no-such-checkpoint' is neither a pretrained checkpoint"),
    (("train", "--init-from=work/no/ckpt-5"), "--init-from work/no/ckpt-5: no checkpoint there"),
    (("train", *VERTEX, "--init-from=/tmp", "--dry-run"), "--init-from /tmp is on this machine"),
    (("train", "--init-type=all"), "--init-type says what --init-from holds"),
    (("train", "--experiment=pets_retinanet_resnetfpn", "--init-from=resnet50-imagenet",
      "--init-type=all"), "--init-type all restores every layer"),
    (("train", "--workers=-1"), "--workers must be at least 0"),
    (("train", "--timeout-hours=inf"), "--timeout-hours must be a number"),
    (("train", "--max-cost=-5"), "--max-cost must be more than 0"),
    (("train", "--label=Team=x"), "--label Team=x: label keys and values"),
    (("train", "--target=laptop"), "--target must be one of local, vertex, got 'laptop'"),
    (("train", "--job=work/no-such-job.yaml"), "--job work/no-such-job.yaml: cannot read it"),
    (("eval", "--idle-timeout=0"), "--idle-timeout must be more than 0"),
    (("tune", "--trials=0", "--param=learning_rate=0.001:0.1"), "trials must be a whole"),
    (("data.convert", "--num-shards=abc"), "--num-shards must be a whole number, got 'abc'"),
]


@pytest.mark.parametrize(("args", "message"), BAD_VALUES,
                         ids=[" ".join(args) for args, _ in BAD_VALUES])
def test_every_bad_value_is_one_line_naming_the_flag_and_nothing_runs(args, message, tmp_path):
    model_dir = tmp_path / "model"
    extra = (f"--model-dir={model_dir}",) if args[0] in ("train", "eval") else ()
    line = refused(invoke(*args, *extra))
    assert message in line, line
    assert not model_dir.exists()  # nothing trained, nothing written


JOB_FILE_MISTAKES = {
    "experiment: pets_retinanet_resnetfpn\nsteps: 0\n": "--steps (in --job {job}) must be at "
                                                       "least 1",
    "stpes: 100\n": "'stpes' is not a key",
    "- a list\n": "a job file is a mapping",
    "steps: true\n": "--steps (in --job {job}) must be a whole number",
    "once: true\n": "'once' belongs in the `eval:` section",
    "eval:\n  steps: 5\n": "`eval: steps` belongs at the top",
    "eval:\n  nonsense: 5\n": "`eval: nonsense` is not a key: `eval:` is a mapping of "
                              "accelerator, tpu, spot, flex-start, once, idle-timeout, split, "
                              "vertex",
    "version: 2\nmachine-type: n1-standard-8\n": "'machine-type' belongs in the `vertex:` "
                                                 "section or in the `eval: vertex:` section",
    "version: 2\nvertex:\n  detach: true\n": "`vertex: detach` is not an option of the "
                                              "vertex target here; it belongs in the `local:` "
                                              "section",
    "version: 2\nvertex:\n  spot: true\n": "`vertex: spot` is not an option of the vertex "
                                            "target here; it belongs at the top or in the "
                                            "`eval:` section",
    "version: 3\nsteps: 5\n": "--job {job}: version 3 is newer than this launcher reads (2): "
                              "update the launcher (`git pull`), or write the file in version 2",
    "version: two\n": "version 'two' is not a job file version: 1 to 2",
    "machine-type: a\nvertex:\n  machine-type: b\n": "both `machine-type` and `vertex: "
                                                      "machine-type`",
    "tune: 5\n": "`tune:` is a mapping of sweep",
    "tune:\n  sweep: x\n": "--sweep (in --job {job}): the sweep is a mapping",
    "override: {input_size: &a [1, 2]}\nlabel: *a\n": "aliases (*name) are not allowed",
    "override:\n  learning_rate: .nan\n": "--job {job}: line 2: .nan is not a finite number",
    "timeout-hours: 1e15\n": "--timeout-hours (in --job {job}) must be at most 87600",
    "model-dir: \"m\\0x\"\n": "--model-dir (in --job {job}) is text (printable",
    "web-access: maybe\n": "--web-access (in --job {job}) is true or false, got 'maybe'",
}


@pytest.mark.parametrize(("text", "message"), JOB_FILE_MISTAKES.items(),
                         ids=range(len(JOB_FILE_MISTAKES)))
def test_a_job_files_mistakes_name_the_file_and_the_flag(text, message, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(text)
    assert message.format(job=job) in refused(invoke("train", f"--job={job}"))


def test_a_bucket_given_as_a_url_is_its_name_never_doubled():
    result = invoke("train", *VERTEX, "--bucket=gs://other-bucket/", "--run-id=b1",
                    "--dry-run")
    assert result.returncode == 0, result.stderr
    job = aiplatform_v1.CustomJob.from_json(result.stdout)
    assert job.job_spec.base_output_directory.output_uri_prefix == \
        "gs://other-bucket/runs/b1"
    assert "gs://gs://" not in result.stdout + result.stderr


def test_help_has_no_automatic_short_flags_and_shows_types_and_defaults():
    for name in ("train", "tune", "eval", "data.convert", "predict", "export"):
        result = invoke(name, "-h")
        assert result.returncode == 0, result.stderr
        options = result.stdout.split("Options:", 1)[1]
        assert not [line for line in options.splitlines() if line.strip().startswith("-")
                    and not line.strip().startswith("--")], options
    train = invoke("train", "--help").stdout
    assert "--steps=STRING" in train and "[whole number >= 1]" in train
    assert "--max-preemptions" in train and "default 2]" in train
    flat = " ".join(train.split())  # invoke wraps the help
    assert "job timeout (vertex) [number >= 0.0167; default 24]" in flat  # one minute
    assert "0 for no limit, default 24 (vertex) [number 0 or >= 0.0167]" in flat  # waiting
    # a task whose first option is required takes `--help` for its value: one line, exit 2,
    # naming the task as invoke lists it (every such task, called in this process)
    import inspect

    from invoke import Collection, Context, Exit

    import tasks
    collection = Collection.from_module(tasks)
    for name in collection.task_names:
        body = collection[name]
        parameters = list(inspect.signature(body).parameters.values())[1:]
        required = [p.name for p in parameters if p.default is inspect.Parameter.empty]
        if required:
            with pytest.raises(Exit) as stopped:
                body(Context(), **{p: "--help" for p in required})
            assert stopped.value.code == 2
            assert str(stopped.value.message).endswith(f"invoke --help {name}")
    for name, option in (("model.upload", "--run-id"), ("jobs.status", "--job")):
        assert refused(invoke(name, "--help")) == (
            f"error: {option} needs a value, not --help; this task's options: "
            f"invoke --help {name}")


def test_every_task_summary_is_a_whole_sentence():
    """`invoke --list` shows a docstring's first line: it must not stop mid-sentence."""
    import tasks

    def walk(collection):
        yield from collection.tasks.values()
        for child in collection.collections.values():
            yield from walk(child)

    for task in walk(tasks.namespace):
        first = task.__doc__.strip().splitlines()[0]
        assert first.endswith("."), first


def dry_run(*args: str) -> tuple[str, str]:
    result = invoke(*args, "--dry-run")
    assert result.returncode == 0, result.stderr
    return result.stdout, result.stderr


ROUND_TRIPS = {
    "train-gpu": ("train", "--machine-type=g2-standard-8", "--accelerator=NVIDIA_L4:1",
                  "--steps=2000", "--override=batch_size=16", "--label=team=pets",
                  "--web-access"),
    "train-multi-worker": ("train", "--machine-type=n1-standard-16",
                           "--accelerator=NVIDIA_TESLA_T4:2", "--workers=2",
                           "--reduction-servers=2", "--init-from=resnet50-imagenet"),
    "train-tpu": ("train", "--tpu=v5litepod-8", "--capacity=spot,standard",
                  "--override=learning_rate=0.02"),
    "train-failover": ("train", "--machine-type=a2-highgpu-1g", "--regions=us-central1",
                       "--fallback=g2-standard-8,ct5lp-hightpu-4t", "--capacity=spot,standard"),
    "eval-gpu": ("eval", "--run-id=gpu1", "--machine-type=g2-standard-8", "--web-access",
                 "--accelerator=NVIDIA_L4:1", "--once"),
    "eval-tpu": ("eval", "--run-id=tpu1", "--tpu=v5litepod-1"),
    "eval-cpu": ("eval", "--run-id=multi1", "--idle-timeout=600"),
    "eval-test": ("eval", "--run-id=multi1", "--split=test"),
    "tune-gpu": ("tune", "--machine-type=g2-standard-8", "--accelerator=NVIDIA_L4:1",
                 "--param=learning_rate=0.001:0.1:log", "--trials=4", "--parallel=2"),
    "tune-multi-worker": ("tune", "--accelerator=NVIDIA_TESLA_T4:1", "--workers=1",
                          "--param=batch_size=8,16"),
    "tune-tpu": ("tune", "--tpu=v5litepod-4", "--param=warmup_steps=100:1000"),
}


@pytest.mark.parametrize("args", ROUND_TRIPS.values(), ids=ROUND_TRIPS)
def test_the_dry_runs_job_file_fed_back_gives_the_identical_request(args, tmp_path):
    saved = tmp_path / "job.yaml"
    first, notes = dry_run(*args, *VERTEX, f"--save-job={saved}")
    text = saved.read_text()
    assert text.rstrip() in notes  # printed too, for people
    assert f"project {SETUP.project}, region {SETUP.region}, run gs://{SETUP.bucket}/runs/" \
        in notes
    again, _ = dry_run(args[0], f"--job={saved}")
    assert json.loads(again) == json.loads(first)  # (a proto map's order may differ)
    (aiplatform_v1.HyperparameterTuningJob if args[0] == "tune"
     else aiplatform_v1.CustomJob).from_json(first)  # the API's own type reads it
    if args[0] == "eval":
        assert yaml.safe_load(text)["eval"]  # eval's machine lives in its own section
    if "--web-access" in args:  # the shell travels in the file, to the job's spec
        assert aiplatform_v1.CustomJob.from_json(again).job_spec.enable_web_access


def test_flags_given_with_a_job_file_win(tmp_path):
    saved = tmp_path / "job.yaml"
    dry_run("train", *VERTEX, "--steps=2000", "--run-id=r1", f"--save-job={saved}")
    request, _ = dry_run("train", f"--job={saved}", "--steps=300")
    (pool,) = aiplatform_v1.CustomJob.from_json(request).job_spec.worker_pool_specs
    assert "--train_steps=300" in pool.container_spec.args


def test_vertex_dry_run_fine_tunes_from_a_catalogue_checkpoint():
    request, notes = dry_run("train", *VERTEX, "--init-from=resnet50-imagenet", "--run-id=ft1")
    (pool,) = aiplatform_v1.CustomJob.from_json(request).job_spec.worker_pool_specs
    args = list(pool.container_spec.args)
    assert f"--init_checkpoint={pretrained.catalogue()['resnet50-imagenet'].path}" in args
    assert "--init_checkpoint_type=backbone" in args
    assert "init-from: resnet50-imagenet" in notes


def test_a_coco_detector_restores_its_decoder_only_where_it_matches():
    resnet = pretrained.resolve("retinanet-resnet50fpn-coco", None, "pets_retinanet_resnetfpn")
    assert resnet.type == "detector" and resnet.checkpoint.endswith(".tar.gz")
    # Faster R-CNN's FPN spans levels 2-6, RetinaNet's 3-7: only the backbone fits
    assert pretrained.resolve("retinanet-resnet50fpn-coco", None,
                              "pets_fasterrcnn_resnetfpn").type == "backbone"
    with pytest.raises(InputError, match=r"decoder .* differs"):
        pretrained.resolve("retinanet-resnet50fpn-coco", "detector",
                           "pets_fasterrcnn_resnetfpn")


def test_every_catalogue_entry_fits_an_experiment_and_names_its_source():
    entries = pretrained.catalogue()
    assert {"resnet50-imagenet", "mobilenetv2-imagenet", "retinanet-resnet50fpn-coco"} <= \
        set(entries)
    for entry in entries.values():
        assert entry.holds in pretrained.HOLDS
        assert entry.source.startswith("https://")
        assert entry.path.startswith(("gs://", "https://storage.googleapis.com/"))
        assert any(entry.fits(name) for name in jobfile.experiment_fields.registered()), entry
    listing = invoke("models.pretrained").stdout
    assert all(name in listing for name in entries)


def test_a_resolved_job_reads_back_as_the_same_job():
    job = jobfile.resolve("train", {"target": "vertex", "steps": "200",
                                    "override": ["batch_size=4"], "label": ["team=pets"],
                                    "capacity": "spot,standard", "spot": True})
    written = yaml.safe_load(job.to_yaml("train"))
    assert list(written)[:2] == ["version", "target"] and written["version"] == 2
    assert (written["spot"], written["vertex"]) == (True, {"capacity": ["spot", "standard"]})
    again = jobfile.resolve("train", {}, written, "the file")
    assert again == job
    assert isinstance(jobfile.request(job, "train"), Training)
    evaluation = jobfile.resolve("eval", {"target": "vertex", "once": True,
                                          "machine_type": "n1-standard-4"})
    assert yaml.safe_load(evaluation.to_yaml("eval"))["eval"] == {
        "once": True, "vertex": {"machine-type": "n1-standard-4"}}
    assert isinstance(jobfile.request(evaluation, "eval"), Evaluation)


# Version 1 (no `version:`): what the launcher wrote before each target's options moved into
# its section; each is read as the version 2 file beside it.
V1_AND_V2 = {
    "train": ("target: vertex\nregion: us-east4\nmachine-type: g2-standard-8\n"
              "accelerator: NVIDIA_L4:1\nspot: true\ntimeout-hours: 6.0\nweb-access: true\n"
              "regions: []\nmax-preemptions: 3\neval:\n  machine-type: n1-standard-4\n",
              "version: 2\ntarget: vertex\naccelerator: NVIDIA_L4:1\nspot: true\n"
              "vertex:\n  region: us-east4\n  machine-type: g2-standard-8\n"
              "  timeout-hours: 6.0\n  web-access: true\n  regions: []\n"
              "  max-preemptions: 3\neval:\n  vertex:\n    machine-type: n1-standard-4\n"),
    "eval": ("target: vertex\nrun-id: r1\neval:\n  machine-type: n1-standard-4\n"
             "  spot: true\n  timeout-hours: 2\n  once: true\n",
             "version: 2\ntarget: vertex\nrun-id: r1\neval:\n  spot: true\n  once: true\n"
             "  vertex:\n    machine-type: n1-standard-4\n    timeout-hours: 2\n"),
    "local": ("detach: true\nsteps: 10\n", "version: 2\nlocal:\n  detach: true\nsteps: 10\n"),
}


@pytest.mark.parametrize("name", V1_AND_V2)
def test_a_version_1_file_and_its_version_2_rewrite_resolve_to_the_same_job(name):
    old, new = (jobfile.parse(text, "f") for text in V1_AND_V2[name])
    assert old == new  # the table of renamed keys moves each key to its version 2 place
    for task in ("train", "eval") if name != "local" else ("train",):
        assert jobfile.resolve(task, {}, yaml.safe_load(V1_AND_V2[name][0]), "f") == \
            jobfile.resolve(task, {}, yaml.safe_load(V1_AND_V2[name][1]), "f")
    resolved = jobfile.resolve("eval" if name == "eval" else "train", {}, old, "f")
    assert jobfile.parse(resolved.to_yaml("eval" if name == "eval" else "train"), "f")[
        "version"] == 2


def test_upgrading_leaves_the_callers_file_as_it_was():
    file = {"machine-type": "a", "eval": {"web-access": True}}
    assert jobfile.upgrade(file, "f") == {"version": 2, "vertex": {"machine-type": "a"},
                                          "eval": {"vertex": {"web-access": True}}}
    assert file == {"machine-type": "a", "eval": {"web-access": True}}


def test_overrides_reach_the_trainer_as_one_typed_document():
    job = jobfile.resolve("train", {"override": ["batch_size=4", "learning_rate=1e-2"],
                                    "params_override": ["task.model.num_classes=3"]})
    first, merged = jobfile.trainer_overrides(job)
    assert first == "task.model.num_classes=3"
    assert json.loads(merged) == {
        "task": {"train_data": {"global_batch_size": 4}},
        "trainer": {"optimizer_config": {"learning_rate": {"cosine": {
            "initial_learning_rate": 0.01}}}}}


def test_the_recorded_model_garden_fields_are_those_of_the_pinned_model_garden():
    from trainer.model.experiments import fields

    assert fields.text(fields.generate()) == fields.FIELDS_FILE.read_text(), \
        "stale: run `python -m trainer.model.experiments.fields`"


def test_the_trainer_refuses_to_evaluate_on_data_labelled_unlike_the_run(tmp_path):
    """The second line of defence behind `invoke eval` reading the run's own data: another
    label map is one line (exit 2) before TensorFlow loads, not Model Garden's traceback."""
    from tests.conftest import run_trainer

    run, data = tmp_path / "run", tmp_path / "data"
    run.mkdir()
    data.mkdir()
    (run / "label_map.pbtxt").write_text("item {\n  id: 1\n  name: 'cat'\n}\n")
    (data / "pet_label_map.pbtxt").write_text("item {\n  id: 1\n  name: 'dog'\n}\n")
    (data / "val.record-00000-of-00001").write_bytes(b"")
    result = run_trainer("--mode=eval", f"--model_dir={run}", f"--data_dir={data}",
                         check=False, timeout=HANG)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"{ERROR_PREFIX}the label map {data}/pet_label_map.pbtxt is not the one the run in {run} "
        "was trained with: evaluate on the data the run trained on (`invoke eval` without "
        "--data-dir reads it)"]


def test_one_file_serves_train_tune_and_eval_and_flags_add_to_it(tmp_path):
    saved = tmp_path / "job.yaml"
    dry_run("train", *VERTEX, "--machine-type=g2-standard-8", "--accelerator=NVIDIA_L4:1",
            "--init-from=resnet50-imagenet", "--override=batch_size=16", "--run-id=l4",
            f"--save-job={saved}")
    tuning, _ = dry_run("tune", f"--job={saved}", "--param=learning_rate=0.001:0.1:log")
    trial = aiplatform_v1.HyperparameterTuningJob.from_json(tuning).trial_job_spec
    (pool,) = trial.worker_pool_specs
    assert (pool.machine_spec.machine_type, pool.machine_spec.accelerator_type.name) == \
        ("g2-standard-8", "NVIDIA_L4")  # the trials train on the file's machine
    evaluation, _ = dry_run("eval", f"--job={saved}")
    (pool,) = aiplatform_v1.CustomJob.from_json(evaluation).job_spec.worker_pool_specs
    assert pool.machine_spec.machine_type == "n1-standard-8"  # eval's own: a CPU machine
    assert "--model_dir=gs://pets-detector-dev-pets-data/runs/l4/checkpoints" in \
        pool.container_spec.args

    request, notes = dry_run("train", f"--job={saved}", "--override=warmup_steps=5",
                             "--init-from=")
    (pool,) = aiplatform_v1.CustomJob.from_json(request).job_spec.worker_pool_specs
    assert not any(a.startswith("--init_checkpoint") for a in pool.container_spec.args)
    assert "batch_size: 16" in notes and "warmup_steps: 5" in notes  # merged, not replaced
    line = refused(invoke("train", f"--job={saved}", "--dry-run",
                          f"--save-job={tmp_path}/no/such/dir/job.yaml"))
    assert line == f"error: --save-job {tmp_path}/no/such/dir/job.yaml: not a file in an " \
        "existing directory"


def test_every_option_of_every_task_says_its_type():
    """`[text]`, `[whole number ...]`, `[number ...]`, `[repeatable]` or a switch: no option
    is left without its type."""
    import tasks

    def walk(collection):
        yield from collection.tasks.values()
        for child in collection.collections.values():
            yield from walk(child)

    for task in walk(tasks.namespace):
        for argument in task.get_arguments():
            if argument.kind is not bool:
                assert argument.help and argument.help.endswith("]"), (task.name,
                                                                       argument.name)


def test_a_local_config_file_travels_to_vertex_as_its_text(tmp_path):
    """The container cannot read this machine's files: a local --config-file becomes a
    --params_override of its text, applied before the others, and a bad one is one line."""
    config = tmp_path / "head.yaml"
    config.write_text("task:\n  model:\n    head:\n      num_convs: 2\n")
    request, _ = dry_run("train", *VERTEX, f"--config-file={config}",
                         "--config-file=gs://b/more.yaml", "--override=batch_size=4")
    (pool,) = aiplatform_v1.CustomJob.from_json(request).job_spec.worker_pool_specs
    args = list(pool.container_spec.args)
    assert "--config_file=gs://b/more.yaml" in args
    overrides = [a.removeprefix("--params_override=") for a in args
                 if a.startswith("--params_override=")]
    assert overrides[0] == config.read_text() and json.loads(overrides[1]) == {
        "task": {"train_data": {"global_batch_size": 4}}}
    config.write_text("- not a mapping\n")
    assert f"--config-file {config}: a Model Garden YAML is a mapping" in refused(
        invoke("train", *VERTEX, f"--config-file={config}", "--dry-run"))
    assert f"--config-file {tmp_path}/none.yaml: cannot read it" in refused(
        invoke("train", *VERTEX, f"--config-file={tmp_path}/none.yaml", "--dry-run"))


@pytest.mark.parametrize("flag", ["--job", "--sweep"])
def test_a_settings_file_too_large_or_not_text_is_one_line_naming_its_flag(flag, tmp_path):
    from launch.values import sweep

    read = jobfile.read if flag == "--job" else sweep.load
    big, binary = tmp_path / "big.yaml", tmp_path / "binary.yaml"
    big.write_text("run-id: big\n# " + "x" * (2 << 20))  # cut short, it would parse as less
    binary.write_bytes(b"run-id: \xff\xfe\n")
    with pytest.raises(InputError, match=rf"^{flag} {big}: larger than \d+ KiB; a "
                                         rf"{flag[2:]} file is a page of settings$"):
        read(str(big))
    with pytest.raises(InputError, match=rf"^{flag} {binary}: cannot read it \(.*\)$"):
        read(str(binary))


def test_a_seed_reaches_the_trainer_and_a_negative_one_is_refused():
    """`invoke train --seed 3` (or `seed: 3` in a job file) is the trainer's --seed=3."""
    job = jobfile.resolve(jobfile.TRAIN, {"seed": 3}, jobfile.parse("seed: 3\n", "f"), "f")
    request = jobfile.request(job, jobfile.TRAIN)
    assert request.args.seed == 3
    assert "--seed=3" in request.trainer_job(TrainerDirs("m", "d")).args
    with pytest.raises(InputError, match="--seed must be at least 0"):
        jobfile.resolve(jobfile.TRAIN, {"seed": -1}, {}, "")
