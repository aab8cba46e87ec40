"""What researchers type: `invoke --list` is the menu; the logic lives in launch/ and trainer/.

Modules that load Google's client libraries (a target's package, reached through the
registry; launch.features.doctor: about two seconds) and the targets' registry are imported
inside the tasks that need them, so the menu and the local data tasks start at once; every
other import is here. Flags are declared by the values they fill (launch/cli/taskflags.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from invoke import Collection, Exit
from invoke.main import program

from launch.cli.taskflags import Flag, args_task, cloud, job_task, parse_errors_exit_2, task
from launch.errors import InputError, StepFailed, UserError
from launch.features import workflow
from launch.values import jobfile, jobs
from launch.values.jobfile import EVAL, TRAIN, TUNE
from launch.values.jobs import TrainerDirs
from launch.values.resources import optional_number
from trainer.args import (
    Args,
    ConvertArgs,
    DownloadArgs,
    ExportArgs,
    PredictArgs,
    SampleArgs,
)

WORK = "work"
parse_errors_exit_2(program)  # an unknown task or flag is a user's mistake: exit 2
DATA_DIR, RECORDS_DIR, MODEL_DIR = f"{WORK}/pets", f"{WORK}/records", f"{WORK}/model"
LABELLED_DIR = f"{WORK}/datasets/pets"  # label.pull's versions: a pipeline's local data-dir
EXPORT_DIR = f"{WORK}/exported"
PIPELINE_STATE = f"{WORK}/pipeline/state"  # a local pipeline's state (runs.show reads it)
PIPELINE_ROOT = f"{WORK}/pipeline/root"  # KFP's local outputs


def _tool(args: Args) -> None:
    """Runs the trainer tool `args` is the command of (data sample, download, convert)."""
    _guarded(lambda: workflow.run_job(jobs.tool_job(args)))


def _numbers(**values):
    """The options given on the command line (None: keep the command's default)."""
    return {name: value for name, value in values.items() if value is not None}


def _cloud(c, project=None, region=None, bucket=None, image=None, env=None):
    """Settings from invoke.yaml's `vertex:` section, overridden by the cloud flags
    (`taskflags.CLOUD`) a task takes."""
    from launch.context.cloud import Cloud

    return Cloud(config=dict(c.config.get("vertex", {})),
                 overrides={"project": project, "region": region, "bucket": bucket,
                            "image": image, "environment": env})


NO_CREDENTIALS = ("no Google credentials found: run `gcloud auth application-default login` "
                  "(on a workstation) or attach a service account (in CI, via Workload "
                  "Identity Federation)")


def _guarded(action):
    """Runs a task's action: a failed step exits 1; what the user can fix (settings, input,
    access, a refusal by Google Cloud) exits 2; each with one line that names the fix. Any
    other exception is a bug and keeps its traceback."""
    from google.api_core.exceptions import GoogleAPICallError
    from google.auth.exceptions import DefaultCredentialsError

    from launch.text import printable
    from trainer.common.errors import DirectoryBusy

    try:
        return action()
    except (UserError, DirectoryBusy) as error:  # DirectoryBusy: another writer holds a lock
        raise Exit(printable(f"error: {error}"), code=2) from None
    except DefaultCredentialsError:
        raise Exit(f"error: {NO_CREDENTIALS}", code=2) from None
    except GoogleAPICallError as error:  # any refusal the adapters do not explain themselves
        raise Exit(printable(f"error: Google Cloud refused the request ("
                             f"{error.__class__.__name__}: {error.message}); `invoke doctor` "
                             "checks your access"), code=2) from None
    except StepFailed as error:
        raise Exit(printable(f"error: {error}"), code=1) from None


def _say(action) -> None:
    """Runs an action that returns what to tell the user, and tells it."""
    from launch.text import printable

    print(printable(str(_guarded(action))))


# How a job task runs, or where: never part of the job, so never in a job file.
RUN_FLAGS = {
    "job": Flag("a job file (YAML): keys are these flags' names; flags given with it win"),
    "dry_run": Flag("print the resolved job file and the request it becomes; run nothing",
                    False),
    "save_job": Flag("write the resolved job file here (review it, edit it, pass it to "
                     "--job)"),
    "follow": Flag("print the job's log lines until it ends (fails if the job does)", False),
    "local_docker": Flag("build a missing image with the local Docker, not Cloud Build",
                         False),
    **cloud("env", "project", "bucket"),
}


@args_task(SampleArgs, defaults={"output_dir": DATA_DIR}, skip=("seed",))
def sample(c, args: SampleArgs):
    """Write a synthetic dataset in the Oxford-IIIT Pets layout (and as COCO JSON)."""
    _tool(args)


@args_task(DownloadArgs, defaults={"output_dir": DATA_DIR}, skip=("base_url",))
def download(c, args: DownloadArgs):
    """Download Oxford-IIIT Pets (verified, resumable)."""
    _tool(args)


DATASET_HELP = "a named dataset in the bucket (`invoke data.list`)"


@task(help={"records_dir": "converted TFRecords",
            "prune": "delete objects in records/ that this conversion did not write",
            "dataset": "upload as this named dataset (gs://BUCKET/datasets/NAME/), not to "
                       "records/"}, flags=cloud("env", "bucket"))
def upload(c, records_dir=RECORDS_DIR, prune=False, dataset=None, **where):
    """Upload converted TFRecords: as a named dataset, or to gs://BUCKET/records/."""
    cloud = _cloud(c, **where)
    if dataset:
        from launch.stores.gcs import datasets

        if prune:
            raise Exit("error: --prune applies to records/; a --dataset upload is a new "
                       "version, and older versions are deleted by themselves", code=2)
        _say(lambda: datasets.upload(cloud, records_dir, dataset))
        return
    from launch.stores.gcs.records import upload_records

    _say(lambda: upload_records(cloud, records_dir, prune))


@task(name="list", flags=cloud("env", "project", "bucket"))
def data_list(c, **where):
    """List the named datasets in the bucket: format, examples, classes, size, when."""
    from launch.stores.gcs import datasets

    _say(lambda: datasets.listing(_cloud(c, **where)))


CONVERT_FLAGS = {
    "target": Flag("local, or vertex: a job next to the data (--data-dir gs://BUCKET/raw/..., "
                   "paths below it) that writes --dataset", "local"),
    "dataset": Flag("publish the records as this named dataset in the bucket"),
    **{name: RUN_FLAGS[name] for name in ("dry_run", "follow", "local_docker")},
    "max_cost": Flag("vertex: USD; refuse a job whose bound (price x timeout) is higher",
                     kind=float),
    **cloud("env", "project", "region", "bucket"),
}


@args_task(ConvertArgs, CONVERT_FLAGS, defaults={"output_dir": RECORDS_DIR},
           skip=("processes",))
def convert(c, args: ConvertArgs, target, dataset, dry_run, follow, max_cost, local_docker,
            **where):
    """Convert Pets, VOC, COCO, YOLO, LabelMe, CVAT or Label Studio labels to TFRecords.

    With --target vertex the converter runs next to the data; with --dataset the records
    become a named dataset in the bucket. Either way a report says what was kept."""
    from launch.targets import executor_for
    from launch.targets.base import Handover, LaunchFlags

    if args.data_dir is None and args.format == "pets" and not args.sources:
        args = dataclasses.replace(args, data_dir=DATA_DIR)
    typed = {"follow": follow, "local_docker": local_docker, "max_cost": max_cost,
             "region": where["region"], "dataset": dataset, "dry_run": dry_run}

    def converted() -> str:
        jobfile.refuse_incapable(target, {name: jobs.Conversion.NEEDS[name]
                                          for name, value in typed.items()
                                          if value not in (None, False)
                                          and name in jobs.Conversion.NEEDS})
        handover = Handover(bool(dry_run), max_cost=jobfile.flag_value("max_cost", max_cost))
        launch_flags = LaunchFlags(TrainerDirs(MODEL_DIR, RECORDS_DIR), _cloud(c, **where),
                                   handover, local_docker=bool(local_docker),
                                   follow=bool(follow))
        return executor_for(target, launch_flags).convert(jobs.Conversion(args, dataset))

    _say(converted)


@args_task(ConvertArgs, {
    "records": Flag("converted TFRecords (default: work/records)"),
    "experiment": Flag("whose input size and anchors to check against"),
    "output_dir": Flag("where the report goes", f"{WORK}/inspect"),
    "dataset": Flag(DATASET_HELP + " (fetched to the local mirror)"),
    **cloud("env", "bucket")}, only=("data_dir", "format", "annotations", "images"), help={
    "data_dir": "or a raw dataset (converted to a temporary directory)",
    "annotations": "or a raw COCO JSON (with --images)"})
def inspect(c, raw: ConvertArgs, records, experiment, output_dir, dataset, **where):
    """Look at a dataset: class counts, box sizes against the anchors, samples; flags."""
    import tempfile

    from launch.features.dataset_report import inspect as inspect_records
    from trainer.model.experiments import DEFAULT_EXPERIMENT

    def report(records_dir: str) -> None:
        _say(lambda: inspect_records(records_dir, experiment or DEFAULT_EXPERIMENT,
                                     Path(output_dir)))

    if dataset:
        from launch.stores.gcs import datasets

        cloud = _cloud(c, **where)
        return report(str(_guarded(lambda: datasets.stage(cloud, dataset))))
    if not (raw.data_dir or raw.annotations):
        return report(records or RECORDS_DIR)
    with tempfile.TemporaryDirectory(prefix="inspect-") as scratch:  # the raw data, converted
        _tool(dataclasses.replace(raw, output_dir=f"{scratch}/records",
                                  format="coco" if raw.annotations else raw.format))
        report(f"{scratch}/records")


CHECKPOINT_HELP = ("best (the default: the best evaluated, else the newest), latest, or a "
                   "step: 1200 or ckpt-1200")
LISTING = cloud("env", "project", "region")  # the tasks that look at Vertex AI's jobs
FORCE = {"force": Flag("train even when the data checks refuse the records", False)}
RERUN = {"rerun": Flag("repeat an earlier run's job as a new run: a run id (its job.yaml in "
                       "the bucket) or a local model directory")}
SWEEP_FLAGS = {
    "sweep": Flag("sweep file (YAML): metric, goal, trials, parallel, algorithm, params"),
    "param": Flag("NAME=LOW:HIGH[:log] or NAME=a,b,c (adds to the file's params)",
                  iterable=True),
    "metric": Flag("AP, AP50, AP75, APs, APm, APl, ARmax1, ... (default AP)"),
    "goal": Flag("maximize or minimize (default maximize)"),
    "trials": Flag("how many trials (default 10)", kind=int),
    "parallel": Flag("trials at a time (default 1)", kind=int),
    "algorithm": Flag("bayesian, random or grid (default bayesian)"),
}


@job_task(TRAIN, {**RUN_FLAGS, **RERUN, **FORCE})
def train(c, **flags):
    """Train a detector here or on Vertex AI, from scratch or from a pretrained checkpoint.

    On Vertex AI: a custom job on GPUs, several workers or a TPU slice."""
    _run_job(c, TRAIN, flags)


@job_task(EVAL, RUN_FLAGS, name="eval")
def evaluate(c, **flags):
    """Evaluate a run's checkpoints with COCO metrics, beside its training.

    On Vertex AI it runs on a CPU machine unless the flags (or the job file's `eval:`) say
    otherwise. `--split test`: the best checkpoint once, on the held-out test split, into
    eval-test/ (`invoke runs.compare` shows it)."""
    _run_job(c, EVAL, flags)


@job_task(TUNE, {**RUN_FLAGS, **FORCE, **SWEEP_FLAGS})
def tune(c, **flags):
    """Sweep hyperparameters: trials of `invoke train` (Optuna here, Vertex AI Vizier)."""
    _run_job(c, TUNE, flags, _sweep)


def _run_job(c, task: str, flags: dict, more=None) -> None:
    """A job task: its request, handed to its target's executor (launch/features/launching.py)."""
    from launch.features import launching

    def cloud_for(job_region=None, job_image=None):
        return _cloud(c, flags["project"], job_region, flags["bucket"], job_image, flags["env"])

    request, executor = _guarded(lambda: launching.prepare(task, flags, cloud_for, WORK,
                                                            RECORDS_DIR, more))
    _say(lambda: request.hand_to(executor))


def _sweep(flags: dict, file: dict, source: str) -> dict:
    """tune's --sweep: the job file's `tune: sweep:`, then --sweep's file, then the flags."""
    from launch.values.sweep import load

    sweep = load(flags["sweep"], flags["param"] or (), metric=flags["metric"],
                 goal=flags["goal"], algorithm=flags["algorithm"],
                 base=jobfile.file_sweep(file, source), **_numbers(
                     trials=optional_number("--trials", flags["trials"], int),
                     parallel=optional_number("--parallel", flags["parallel"], int)))
    return {"sweep": sweep.as_mapping()}


@task
def models_pretrained(c):
    """List the pretrained checkpoints `--init-from NAME` takes, and what each fits."""
    from launch.values.pretrained import listing

    print(listing())


@task(name="status", help={"job": "tuning job id (default: list the newest)",
                           "follow": "print trials as they start and end, until the job ends",
                           "poll": "seconds between checks"}, flags=LISTING)
def tune_status(c, job=None, follow=False, poll=30, **where):
    """Show a Vertex AI tuning job's trials, best first (or list the newest tuning jobs)."""
    from launch.features.tuning import status

    cloud = _cloud(c, **where)
    _say(lambda: status(cloud, job, follow, float(poll)))


@task(name="list", help={"root": "local runs below this directory (default: work)",
                         "target": "local, or vertex: the runs in the bucket"},
      flags=cloud("env", "project", "region", "bucket"))
def runs_list(c, root=WORK, target="local", **where):
    """List runs with their best checkpoint's metrics: model directories here, or in the bucket."""
    from launch.features.runs.lookup import list_runs
    from launch.targets import executor_class

    def listing() -> str:
        in_bucket = executor_class(target).runs_in_bucket
        return list_runs(Path(root), (lambda: _cloud(c, **where)) if in_bucket else None)

    _say(listing)


@task(name="show", help={
    "target": "local: the local pipeline's versions; vertex: what the endpoints serve",
    "state": "local: the continuous-training pipelines' states, a folder each"},
      flags=LISTING)
def runs_show(c, target="local", state=PIPELINE_STATE, **where):
    """Show where each serving model came from: its dataset version, run and checkpoint."""
    from launch.features.runs.lookup import show

    _say(lambda: show(target, lambda: _cloud(c, **where), state))


@task(name="compare", iterable=["run"], help={
    "run": "a model directory (or a sweep's), gs:// path, run id or SWEEP/TRIAL "
           "(repeatable)", "output_dir": "where the report goes (default: work/report)",
    "checkpoint": "whose evaluation each run shows: " + CHECKPOINT_HELP},
      flags=cloud("env", "project", "region", "bucket"))
def runs_compare(c, run=None, output_dir=f"{WORK}/report", checkpoint=None, **where):
    """Compare runs: a table, PNG plots and an HTML report with the worst images."""
    from launch.features.runs.lookup import compare
    from launch.stores.gcs.mirror import checkpoint_choice

    _say(lambda: compare(lambda: _cloud(c, **where), run or [], Path(output_dir),
                         checkpoint=checkpoint_choice(checkpoint, paths=False)))


RUN_ID = {"run_id": Flag("a Vertex AI run: use its paths in the bucket")}


@args_task(ExportArgs, {**RUN_ID, **cloud("env", "project", "bucket")}, help={
    "model_dir": "checkpoints: a local directory or gs:// (default: work/model)",
    "output_dir": "SavedModel destination, local or gs://"})
def export(c, args: ExportArgs, run_id, **where):
    """Export a SavedModel (uint8 images or encoded files in), TFLite, ONNX or OpenVINO."""
    from launch.context.cloud import resolve_path

    cloud = _cloud(c, **where)
    _say(lambda: "exported to " + workflow.export(dataclasses.replace(
        args, model_dir=resolve_path(cloud, run_id, args.model_dir,
                                     lambda run: run.checkpoints, MODEL_DIR),
        export_dir=resolve_path(cloud, run_id, args.export_dir, lambda run: run.exported,
                                EXPORT_DIR)), storage_client=cloud.storage))


SERVING = {"machine_type": Flag("serving machine (default n1-standard-4)"),
           "accelerator": Flag("TYPE:COUNT, e.g. NVIDIA_L4:1 (needs a model uploaded --gpu)"),
           "min_replicas": Flag("replicas always up", 1, kind=int),
           "max_replicas": Flag("autoscaling bound", 1, kind=int)}


# The run against the version serving now, on the test split (docs/guides/evaluation.md)
CHALLENGE = {"max_drop": Flag("refuse a run whose gate metric on the test split is this much "
                              "below the serving version's (default 0.01)", kind=float),
             "gate_class": Flag("compare this class's recall at the operating point instead "
                                "of the experiment's gate metric"),
             "force": Flag("go ahead even when the run is worse than the serving version: "
                           "the reason, recorded in the version's description")}


def _challenge(max_drop, gate_class, force):
    from launch.targets.champion import Challenge

    return Challenge(max_drop, gate_class, force)


AUTOSCALING = {"target_utilization": Flag(
    "autoscale to keep each replica's CPU use (with --accelerator: its GPU's duty cycle) near "
    "this percent, 1 to 100 (default: Vertex AI's 60)", kind=int)}


def _serving(machine_type, accelerator, min_replicas, max_replicas, traffic=100,
             target_utilization=None):
    """The serving machine the flags ask for; the target checks it against its region."""
    from launch.targets.base import ServingSetup

    return ServingSetup(machine_type, accelerator,
                        optional_number("--min-replicas", min_replicas, int),
                        optional_number("--max-replicas", max_replicas, int),
                        optional_number("--traffic", traffic, int),
                        optional_number("--target-utilization", target_utilization, int))


def _served(cloud):
    """The models the target that serves them serves (model.upload, endpoint.* and predict
    --endpoint take no --target: the registry's first that offers serving)."""
    from launch import targets
    from launch.targets.base import SERVING

    return targets.first(SERVING, cloud)


PREDICT_FLAGS = {
    "endpoint": Flag("ask this Vertex AI endpoint (id)"),
    "target": Flag("local (default), or vertex: a batch prediction job with --run-id's model "
                   "over gs:// images", "local"),
    **SERVING,
    "timeout_hours": Flag("vertex: cancel the batch job after this long (default "
                          f"{jobfile.flag_value('timeout_hours', None):g})", kind=float),
    "max_cost": Flag("vertex: USD; refuse a batch job whose bound (--max-replicas x price x "
                     "--timeout-hours) is higher", kind=float),
    "dry_run": Flag("vertex: print the BatchPredictionJob JSON (reading the run's model and "
                    "listing the images); write and submit nothing", False),
    **RUN_ID, **cloud("env", "project", "region", "bucket"),
}


@args_task(PredictArgs, PREDICT_FLAGS, defaults={"images": f"{DATA_DIR}/images/*.jpg"}, help={
    "model": "SavedModel dir or .tflite file: local or gs:// (default: work/exported)",
    "images": "image glob, local or gs://BUCKET/DIR/*.jpg",
    "output_dir": "annotated images and detections.json, local or gs:// (vertex default: the "
                  "run's predictions/)"})
def predict(c, args: PredictArgs, endpoint, target, machine_type, accelerator, min_replicas,
            max_replicas, timeout_hours, max_cost, dry_run, run_id, **where):
    """Detect pets in images: annotated pictures plus a JSON of detections.

    With a model here, a Vertex AI endpoint, or a batch prediction job."""
    from launch import targets
    from launch.context.cloud import resolve_path
    from launch.targets.base import SERVING

    cloud = _cloud(c, **where)
    cap = _guarded(lambda: workflow.pixel_cap(args.max_pixels))
    forms = _guarded(lambda: workflow.result_forms(args))  # before a model or endpoint is read
    if endpoint:
        _say(lambda: "predictions in " + _served(cloud).predict(
            endpoint, args.images, args.output_dir or f"{WORK}/predictions",
            args.score_threshold, cap, forms))
        return
    if _guarded(lambda: targets.offers(target, SERVING)):  # a batch job with its model
        if not run_id:
            raise Exit(f"error: --target {target} predicts with a run's uploaded model: pass "
                       "--run-id", code=2)
        def batch() -> str:
            said = targets.offered(target, SERVING, cloud).predict_batch(
                run_id, args.images, args.output_dir, args.score_threshold,
                _serving(machine_type, accelerator, min_replicas, max_replicas),
                timeout_hours=timeout_hours, max_cost=max_cost, max_pixels=cap,
                dry_run=bool(dry_run), forms=forms)
            return said if dry_run else f"predictions in {said}"

        _say(batch)
        return
    if dry_run:
        batches = _guarded(lambda: targets.offering(SERVING))
        raise Exit(f"error: --dry-run shows a batch job's request: add --target {batches} "
                   "--run-id RUN", code=2)
    _say(lambda: "predictions in " + workflow.predict(
        resolve_path(cloud, run_id, args.model, lambda run: run.model, EXPORT_DIR),
        args.images, args.output_dir or f"{WORK}/predictions", args.score_threshold,
        storage_client=cloud.storage, max_pixels=cap, forms=forms))


@task(name="upload", help={"run_id": "the trained run (gs://BUCKET/runs/RUN_ID)",
                           "checkpoint": "the checkpoint to gate (its export must be the "
                                         "run's model): " + CHECKPOINT_HELP,
                           "min_ap50": "refuse a run whose AP50 at that checkpoint (mask "
                                       "AP50 for a mask experiment) is lower (default: the "
                                       "experiment's)",
                           "aliases": "version aliases (default: candidate; add default "
                                      "to make it the model's default version)",
                           "container": "custom (default: our TF Serving image, at the "
                                        "trainer's TensorFlow) or prebuilt (Vertex AI's "
                                        "TensorFlow 2.15 container)",
                           "gpu": "serve on a GPU: our TF Serving GPU image (the prebuilt "
                                  "GPU container with --container prebuilt); deploy with "
                                  "--accelerator",
                           "dry_run": "print the UploadModelRequest JSON, send nothing (no "
                                      "credentials needed)",
                           "keep_asked": "keep the images of this fraction of its requests "
                                         "(0 < RATE <= 1) in gs://BUCKET/asked/MODEL/ for "
                                         "`label.push --asked MODEL` (default: none kept)"},
      flags={**CHALLENGE, **cloud("env", "project", "region", "bucket")})
def model_upload(c, run_id, min_ap50: float | None = None, aliases="candidate",
                 container=None, gpu=False, dry_run=False, checkpoint=None,
                 keep_asked: float | None = None, *, max_drop, gate_class, force, **where):
    """Upload a run's SavedModel to the Vertex AI Model Registry, if its evaluation passes.

    And only if it is no worse than the version serving now, on the test split."""
    cloud = _cloud(c, **where)
    _say(lambda: _served(cloud).upload(
        run_id, optional_number("--min-ap50", min_ap50, float), aliases, bool(gpu),
        bool(dry_run), container, checkpoint=checkpoint,
        rules=_challenge(max_drop, gate_class, force), keep_asked=keep_asked))


@task(name="deploy", help={"run_id": "the uploaded run to deploy",
                           "endpoint": "endpoint id (default: pets-detector, created if "
                                       "missing)",
                           "traffic": "percent of requests for this version; the deployed "
                                      "ones share the rest (default 100)",
                           "dry_run": "print the DeployModelRequest JSON, deploy nothing (no "
                                      "credentials needed)",
                           "max_cost": "USD a month: refuse a deployment that can cost "
                                       "more (--max-replicas for a month)"},
      flags={**SERVING, **AUTOSCALING, **CHALLENGE,
             **cloud("env", "project", "region", "bucket")})
def endpoint_deploy(c, run_id, endpoint=None, traffic=100, dry_run=False,
                    max_cost: float | None = None, *, machine_type, accelerator,
                    min_replicas, max_replicas, target_utilization, max_drop, gate_class,
                    force, **where):
    """Deploy a run's registered model to an endpoint, sharing traffic with what is there.

    Only if it is no worse than the version serving there, on the test split."""
    cloud = _cloud(c, **where)
    _say(lambda: _served(cloud).deploy(
        run_id, _serving(machine_type, accelerator, min_replicas, max_replicas, traffic,
                         target_utilization), endpoint, bool(dry_run), max_cost,
        _challenge(max_drop, gate_class, force)))


@task(name="list", flags=LISTING)
def endpoint_list(c, **where):
    """List the endpoints, their deployed models and traffic."""
    _say(lambda: _served(_cloud(c, **where)).endpoints())


@task(name="undeploy", help={"endpoint": "endpoint id", "deployed_model": "deployed model id "
                             "(from endpoint.list)"}, flags=LISTING)
def endpoint_undeploy(c, endpoint, deployed_model, **where):
    """Undeploy a model from an endpoint; its traffic goes to the others."""
    _say(lambda: _served(_cloud(c, **where)).undeploy(endpoint, deployed_model))


@task(help={"logdir": "a model directory, local or gs:// (default: work/model)",
            "port": "port on 127.0.0.1", "target": "local: serve TensorBoard here; vertex: "
            "print the run's Vertex AI TensorBoard links"},
      flags={**RUN_ID, **cloud("env", "project", "region", "bucket")})
def tensorboard(c, logdir=None, port=6006, target="local", *, run_id, **where):
    """TensorBoard for a run: served on 127.0.0.1, or the run's Vertex AI TensorBoard link."""
    from launch.targets import executor_for
    from launch.targets.base import LaunchFlags

    launch_flags = LaunchFlags(TrainerDirs(MODEL_DIR, RECORDS_DIR), _cloud(c, **where))
    _say(lambda: executor_for(target, launch_flags).tensorboard(run_id, logdir, _port(port)))


def _port(value) -> int:
    if not str(value).isdigit() or not 1 <= int(value) <= 65535:
        raise InputError(f"--port must be a number from 1 to 65535, got {value!r}")
    return int(value)


@task(help={"workdir": "everything goes here (default work/demo; work/demo-masks with --masks)",
            "steps": "training steps (default 400; 200 with --masks)",
            "format": "pets, or coco: convert the sample from its COCO JSON",
            "num_images": "sample size",
            "masks": "instance masks: records with masks, the CPU Mask R-CNN experiment"})
def demo(c, workdir: str | None = None, steps: int | None = None,
         num_images: int | None = None, format="pets", masks=False):
    """Sample -> convert -> train -> evaluate -> export -> predict, all locally."""
    result = _guarded(lambda: workflow.demo(
        workdir or workflow.demo_dir(WORK, masks), optional_number("--steps", steps, int),
        optional_number("--num-images", num_images, int), format=format, masks=masks))
    print(result.summary())


@task(flags=cloud("env", "project", "region", "bucket", "image"))
def doctor(c, **where):
    """Check credentials, APIs, bucket, image, act-as and end dates before Vertex AI runs."""
    from launch.features import doctor as checks

    cloud = _cloud(c, **where)
    text, ok = _guarded(lambda: checks.run(cloud))
    print(text)
    if not ok:
        raise Exit(code=1)


@task(name="build", flags={**LISTING, "local_docker": RUN_FLAGS["local_docker"]})
def image_build(c, *, local_docker, **where):
    """Build the trainer and serving images unless their content-hash tag exists.

    In Cloud Build, or with the local Docker (--local-docker)."""
    from launch.context.builds import build_images

    cloud = _cloud(c, **where)
    _say(lambda: build_images(cloud, local_docker).message)


# jobs.*: which target's jobs (the registry's names); without --target, a job's id finds it
JOB_FLAGS = {**LISTING, "target": Flag("local or vertex (default: the one whose id --job is: "
                                       "a local job's is in work/jobs, a number is Vertex "
                                       "AI's)")}
JOB_HELP = {"job": "job id (from jobs.list), or a Vertex AI job's full resource name"}


def _job_command(c, command: str, job: str | None, where: dict, **options) -> None:
    from launch.features.jobs import job_command

    target = where.pop("target")
    cloud = _cloud(c, **where)
    _say(lambda: job_command(cloud, command, job, target=target, **options))


@task(name="list", flags={**LISTING, "target": Flag("local (this machine's, in work/jobs) "
                                                     "or vertex (the default)")})
def jobs_list(c, **where):
    """List the newest jobs: Vertex AI's custom jobs, or this machine's (--target local)."""
    _job_command(c, "list", None, where)


@task(name="status", help=JOB_HELP, flags=JOB_FLAGS)
def jobs_status(c, job, **where):
    """Show one job's state."""
    _job_command(c, "status", job, where)


@task(name="logs", help={**JOB_HELP, "lines": "how many of the newest lines",
                         "follow": "keep printing new lines until the job ends"},
      flags=JOB_FLAGS)
def jobs_logs(c, job, lines=100, follow=False, **where):
    """Print a job's log lines: Cloud Logging's (all replicas), or a local job's log."""
    _job_command(c, "logs", job, where, lines=int(lines), follow=follow)


@task(name="cancel", help=JOB_HELP, flags=JOB_FLAGS)
def jobs_cancel(c, job, **where):
    """Cancel a job."""
    _job_command(c, "cancel", job, where)


@task(name="wait", help={**JOB_HELP, "notify": "publish how the job ended to the stack's "
                                               "job-events topic (Vertex AI; "
                                               "docs/guides/notifications.md)"},
      flags={**JOB_FLAGS, "poll": Flag("seconds between checks (default: 30 on Vertex AI, "
                                       "1 here)", kind=float)})
def jobs_wait(c, job, notify=False, **where):
    """Wait for a job to end, printing each state change."""
    poll = where.pop("poll")
    _job_command(c, "wait", job, where, poll_seconds=poll, notify=bool(notify))


@task(name="refresh")
def pricing_refresh(c):
    """Rebuild launch/stores/pricing/prices.yaml from the Cloud Billing Catalog (Vertex AI SKUs)."""
    from launch.context.clients import cloud_catalog
    from launch.features.pricing import refresh

    _say(lambda: refresh(cloud_catalog()))


@task(help={"num_images": "images of each photo size to convert"})
def bench_convert(c, num_images=2000):
    """Benchmark conversion: images/s and MB/s a core, scaling; hours and cost on Vertex AI."""
    from benchmarks import convert_speed

    convert_speed.main(int(num_images))


@task(help={"steps": "training steps to time"})
def bench_input(c, steps=60):
    """Benchmark the tf.data input pipeline against the train step's consumption."""
    from benchmarks import input_speed

    input_speed.main(int(steps))


@task(help={"steps": "training steps for each driver", "interval": "steps a summary"})
def bench_train(c, steps=300, interval=50):
    """Benchmark training steps/s: our trainer against Model Garden's own driver."""
    from benchmarks import train_speed

    train_speed.main(int(steps), int(interval))


@task(help={"repeats": "runs of each driver (the median is shown)"})
def bench_startup(c, repeats=3):
    """Benchmark start-up: seconds to the first training step, ours against Model Garden's."""
    from benchmarks import startup

    startup.main(int(repeats))


@task(help={"rounds": "rounds of labelling", "budget": "images labelled a round",
            "steps": "training steps a round (from scratch)",
            "seeds": "comma-separated seeds (random's draw and the trainings'), each a run",
            "strategies": "comma-separated strategies besides random (default: all)"})
def bench_active(c, rounds=4, budget=6, steps=150, seeds="1,2,3", strategies=None):
    """Benchmark choosing what to label: AP by images labelled, each strategy against random."""
    from benchmarks import active
    from launch.features.label_choice import STRATEGIES

    def measured() -> None:
        chosen = [s.strip() for s in strategies.split(",") if s.strip()] if strategies \
            else None
        if unknown := [s for s in chosen or () if s not in STRATEGIES]:
            raise InputError(f"--strategies {strategies}: {unknown[0]} is not one of "
                             f"{', '.join(STRATEGIES)}")
        numbers = [n.strip() for n in str(seeds).split(",") if n.strip()]
        if not numbers or not all(n.isdigit() for n in numbers):
            raise InputError(f"--seeds {seeds}: give whole numbers, e.g. 1,2,3")
        active.main(int(rounds), int(budget), int(steps), [int(n) for n in numbers],
                    strategies=chosen)

    _guarded(measured)


@task(help={"relaunches": "relaunches to average"})
def bench_relaunch(c, relaunches=20):
    """Benchmark the image step of a relaunch with unchanged sources (no build)."""
    from benchmarks import relaunch

    relaunch.main(int(relaunches))


@task
def bench_scaling(c):
    """Benchmark what tests must not time: linear triage and planning, bombs, a dead worker."""
    from benchmarks import scaling

    scaling.main()


@task(help={"model_dir": "a trained model directory (default: the demo's)"})
def bench_serve(c, model_dir=f"{WORK}/demo/model"):
    """Benchmark serving: ms per image, AP50 and agreement of the SavedModel and TFLite."""
    from benchmarks import serve_speed

    serve_speed.main(model_dir)


@task(help={"model_dir": "a trained model directory (default: the demo's)",
            "images": "validation images to measure on, at most (default 134)"})
def bench_formats(c, model_dir=f"{WORK}/demo/model", images=134):
    """Benchmark every export format: AP, AP50, p50/p90 ms, images/s, size, export time."""
    from benchmarks import formats

    formats.main(model_dir, images)


@task(name="endpoint", help={
    "endpoint": "a Vertex AI endpoint's id: measure it (default: the local stand-in)",
    "model": "the export the local stand-in serves (default: the demo's)",
    "concurrency": "clients at once, a level each (default 1,2,4,8)",
    "requests": "requests a level at most (default 200)",
    "seconds": "seconds a level at most (default 60)",
    "images": "image files to send (default: 20 held-out synthetic pets)",
    "machine_type": "local: the machine to price the figures as (default n1-standard-4)",
    "batching": "local: batch as the serving image would here (default on)"},
    flags=cloud("env", "project", "region"))
def bench_endpoint(c, endpoint=None, model=f"{WORK}/demo/exported", concurrency="1,2,4,8",
                   requests=200, seconds=60.0, images=None, machine_type=None, batching=True,
                   **where):
    """Benchmark an endpoint under load: latency percentiles, images/s, USD per 1,000 images."""
    from benchmarks import endpoint_load

    _guarded(lambda: endpoint_load.main(
        endpoint, lambda: _cloud(c, **where), model, concurrency, int(requests),
        float(seconds), images, machine_type, bool(batching)))


@task(name="compile")
def pipeline_compile(c):
    """Compile the continuous-training pipeline: its spec and the picture of its graph."""
    from launch.features.pipeline import definition, graph

    definition.SPEC_FILE.write_text(spec := definition.compile_spec())
    print(f"wrote {definition.SPEC_FILE.relative_to(Path.cwd())} and "
          f"{graph.draw(spec, graph.PICTURE).relative_to(Path.cwd())}")


PIPELINE_RUN = {
    "job": Flag("the job file (YAML) the pipeline's steps run, as `invoke train --job` takes "
                "it; its target says where the pipeline runs"),
    "target": Flag("local (KFP's local runner here) or vertex (Vertex AI Pipelines); "
                   "default: the job file's"),
    "pipeline": Flag("the pipeline's name: its state, runs (ct-NAME-VERSION) and refusals "
                     "are its own (default: the job file's experiment, "
                     "pets-retinanet-mobilenet)"),
    "state": Flag(f"local: where pipelines leave what their next runs read, a folder each "
                  f"(default {PIPELINE_STATE})"),
    "root": Flag(f"local: KFP's pipeline root: its outputs, and each run's log in logs/ "
                 f"(default {PIPELINE_ROOT})"),
    "canary_traffic": Flag("percent of the endpoint's traffic a new version takes first",
                           10, kind=int),
    "max_drop": Flag("the gate: stop a run whose test figure is this much below the serving "
                     "version's", 0.01, kind=float),
    "launcher_image": Flag("vertex: the image the steps run in (default: the stack's "
                           "launcher image, built by `cdktn deploy`)"),
    "dry_run": Flag("vertex: print the request; send nothing", False),
    **cloud("env", "project", "region", "bucket"),
}


@task(name="run", flags=PIPELINE_RUN)
def pipeline_run(c, job, target, pipeline, state, root, canary_traffic, max_drop,
                 launcher_image, dry_run, **where):
    """Run the continuous-training pipeline once: here (KFP's local runner) or on Vertex AI."""
    from launch import targets
    from launch.features.pipeline import runs
    from launch.targets.base import PIPELINES

    def act():
        text, named = runs.job_and_target(job, target)
        sent = targets.offers(named, PIPELINES)  # to its pipeline service, or run here
        other = {"--state": state, "--root": root} if sent else \
            {"--launcher-image": launcher_image, "--dry-run": dry_run}
        if given := [flag for flag, value in other.items() if value]:
            raise InputError(f"{', '.join(given)}: not for a run whose job file says target: "
                             f"{named}")
        if not sent:
            return runs.run_here(text, state or PIPELINE_STATE, root or PIPELINE_ROOT,
                                 canary_traffic, max_drop, pipeline)
        return runs.run(_cloud(c, **where), text, launcher_image, canary_traffic,
                        max_drop, bool(dry_run), pipeline)

    _say(act)


@task(name="schedule", flags={**{k: v for k, v in PIPELINE_RUN.items()
                                 if k not in ("target", "state", "root")},
                              "cron": Flag("when: five cron fields, optionally after "
                                           "TZ=Area/City ('TZ=Europe/Berlin 0 3 * * 1')")})
def pipeline_schedule(c, job, pipeline, canary_traffic, max_drop, launcher_image, dry_run,
                      cron, **where):
    """Run the pipeline on a Vertex AI schedule, one run at a time."""
    from launch.features.pipeline import runs

    _say(lambda: runs.schedule(_cloud(c, **where), runs.read_job(job), launcher_image,
                               canary_traffic, max_drop, cron or "", bool(dry_run),
                               pipeline))


@task(name="list", flags=LISTING)
def pipeline_list(c, **where):
    """List the pipeline's newest runs on Vertex AI and its schedules."""
    from launch.features.pipeline import runs

    _say(lambda: runs.listing(_cloud(c, **where)))


@task(name="cancel", help={"run": "a run id (from pipeline.list) or its full name",
                           "schedule": "RUN is a schedule: pause it"}, flags=LISTING)
def pipeline_cancel(c, run, schedule=False, **where):
    """Cancel a pipeline run, or pause a schedule."""
    from launch.features.pipeline import runs

    _say(lambda: runs.cancel(_cloud(c, **where), run, bool(schedule)))


@task(name="reference")
def docs_reference(c):
    """Write the documentation's generated reference pages (docs/reference/) from their data."""
    from docsite import site

    _guarded(site.write_reference)


@task(name="serve", help={"build": "write the static site to site/ instead of serving it "
                                   "(strict: a broken link or anchor fails)",
                          "port": "the port to serve on, on 127.0.0.1"})
def docs_site(c, build=False, port=8000):
    """Serve the documentation site at http://127.0.0.1:8000, rebuilt as pages change."""
    from docsite import site

    _guarded(lambda: site.run(build, port))


LABEL_HELP = {
    "data_dir": "the dataset the labels join: a directory of versions, as pipeline.run "
                "follows (default work/datasets/pets)",
    "title": "the Label Studio project's (or CVAT task's) title (default: the dataset's name)",
    "url": "the server's address (Label Studio's default: $LABEL_STUDIO_URL, else "
           "http://localhost:8080; CVAT's: $CVAT_URL)",
    "token_file": "a file holding the API token (else $LABEL_STUDIO_API_KEY, or CVAT's "
                  "$CVAT_ACCESS_TOKEN; never a flag)",
    "tool": "labelstudio or cvat",
}


@task(name="push", help={
    "images": "the images to label: a local glob (or --dataset, or --asked)",
    "dataset": "push a named dataset's images from the bucket (NAME or NAME@VERSION), with "
               "--model's detections or else its own boxes as pre-labels, to review",
    "asked": "push the images endpoints were asked about, kept in gs://BUCKET/asked/MODEL/ "
             "by a version uploaded with --keep-asked (MODEL: e.g. pets-retinanet-mobilenet)",
    "since": "--asked: only the images kept on this day (YYYY-MM-DD) or after",
    "model": "an export whose detections, at its operating point, become pre-labels: a "
             "local directory, or the serving run's in the bucket (gs://BUCKET/runs/RUN/model)",
    "strategy": "push only the --budget images worth labelling first: random, uncertainty, "
                "disagreement or diversity (docs/guides/labelling.md; default: every image)",
    "budget": "how many images --strategy chooses",
    "against": "disagreement's second model: the int8 .tflite beside the export, or "
               "another checkpoint's export",
    "seed": "random's draw", **LABEL_HELP}, flags=cloud("env", "bucket"))
def label_push(c, images=None, model=None, data_dir=LABELLED_DIR, title=None, url=None,
               token_file=None, strategy=None, budget: int | None = None, against=None,
               seed=0, dataset=None, tool="labelstudio", asked=None, since=None, **where):
    """Send images to Label Studio (or CVAT) with a model's detections as pre-labels."""
    from launch.features import labelling

    def pushed() -> str:
        if [bool(images), bool(dataset), bool(asked)].count(True) != 1:
            raise InputError("give --images (a glob of the images to label), --dataset (a "
                             "named dataset's images) or --asked (the images a served "
                             "Model's endpoints kept), one of them")
        choice = labelling.Choice(strategy, budget, against, seed)
        choice.check(model)  # before the server is asked anything
        if since and not asked:
            raise InputError(f"--since {since[:40]!r} picks among --asked's images: add "
                             "--asked MODEL")
        if asked:
            from launch.stores.gcs.asked import check_model, check_since

            check_model(asked)
            check_since(since)
        studio = labelling.connect(url, token_file, tool)
        with labelling.working(Path(WORK) / "label") as work:
            return push(studio, work, choice)

    def push(studio, work: Path, choice) -> str:
        cloud = _cloud(c, **where)  # settings only: a client when a step asks for one
        detector = model
        if any(m and m.startswith("gs://") for m in (model, against)):  # the bucket's export
            detector = labelling.local_model(cloud, model)
            choice = dataclasses.replace(choice, against=labelling.local_model(cloud, against))
        if asked:
            return labelling.push_asked(studio, title or asked, cloud, asked, detector,
                                        Path(data_dir), work, choice, since=since).summary()
        if dataset:
            from launch.stores.gcs import datasets

            name = datasets.check(dataset.split("@", 1)[0])
            return labelling.push_dataset(studio, title or name, cloud, dataset, detector,
                                          work, choice).summary()
        return labelling.push_images(studio, title or Path(data_dir).name, images,
                                     Path(data_dir), detector, work, choice).summary()

    _say(pushed)


@task(name="pull", help={
    "with_predictions": "take a task nobody labelled as its pre-labels stand (default: only "
                        "what people submitted; in CVAT, jobs marked completed)",
    "dataset": "publish into this named dataset in the bucket (gs://BUCKET/datasets/NAME/), "
               "merged with its newest version, not into --data-dir",
    **LABEL_HELP}, flags=cloud("env", "bucket"))
def label_pull(c, data_dir=LABELLED_DIR, title=None, url=None, token_file=None,
               with_predictions=False, dataset=None, tool="labelstudio", **where):
    """Publish what people labelled in Label Studio (or CVAT) as a new dataset version."""
    from launch.features import labelling

    def pulled() -> str:
        studio = labelling.connect(url, token_file, tool)
        if dataset:
            from launch.stores.gcs import datasets

            datasets.check(dataset)  # before the server is asked anything
        with labelling.working(Path(WORK) / "label") as work:
            if dataset:
                return labelling.pull_to_bucket(studio, title or dataset, _cloud(c, **where),
                                                dataset, work, with_predictions).summary()
            return labelling.pull_version(studio, title or Path(data_dir).name,
                                          Path(data_dir), work, with_predictions).summary()

    _say(pulled)


data = Collection("data", sample, download, convert, upload, inspect, data_list)
docs = Collection("docs", docs_reference)
docs.add_task(docs_site, default=True)
bench = Collection("bench")
bench.add_task(bench_active, name="active")
bench.add_task(bench_convert, name="convert")
bench.add_task(bench_endpoint, name="endpoint")
bench.add_task(bench_formats, name="formats")
bench.add_task(bench_input, name="input")
bench.add_task(bench_relaunch, name="relaunch")
bench.add_task(bench_scaling, name="scaling")
bench.add_task(bench_serve, name="serve")
bench.add_task(bench_startup, name="startup")
bench.add_task(bench_train, name="train")
image = Collection("image", image_build)
pricing = Collection("pricing", pricing_refresh)
pipeline = Collection("pipeline", pipeline_compile, pipeline_run, pipeline_schedule,
                      pipeline_list, pipeline_cancel)
jobs_collection = Collection("jobs", jobs_list, jobs_status, jobs_logs, jobs_cancel,
                             jobs_wait)
model = Collection("model", model_upload)
endpoint_collection = Collection("endpoint", endpoint_deploy, endpoint_list, endpoint_undeploy)
runs_collection = Collection("runs", runs_list, runs_compare, runs_show)
models = Collection("models")
models.add_task(models_pretrained, name="pretrained")
label = Collection("label", label_push, label_pull)
tune_collection = Collection("tune")
tune_collection.add_task(tune, default=True)
tune_collection.add_task(tune_status, name="status")
namespace = Collection(data, docs, bench, image, pricing, jobs_collection, model,
                       endpoint_collection, tune_collection, runs_collection, models, doctor,
                       pipeline, label,
                       train,
                       evaluate, export, predict, tensorboard, demo)
