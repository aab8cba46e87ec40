"""Model Registry: a trained run becomes a version of its experiment's Vertex AI Model, and
only when its final evaluation clears the gate (and the champion gate: launch/targets/
champion.py; what a version was judged on is kept in its labels, `judged_labels`). (The
targets' own registry, `--target`'s names, is launch/targets/__init__.py.)

A run's versions share one parent Model per experiment (`pets-retinanet-mobilenet`), so the
registry shows a model's history; each version carries its run, experiment and final COCO
metrics as labels, and aliases (`candidate`, `default`) that deployments can name. A version
serves on our TF Serving image (`custom`, the Vertex AI contract of serving/contract.py; on CPUs,
or TF Serving's GPU build with --gpu) or on Vertex AI's prebuilt TensorFlow container
(`prebuilt`, until its end of availability).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from google.cloud import aiplatform_v1

from infra.names import SERVING_GPU_IMAGE
from launch.context.places import RunPaths, label_value
from launch.errors import InputError, MissingError
from launch.stores.gcs import mirror
from launch.stores.gcs.upload import list_blobs, read_json
from launch.targets.champion import (
    SHA_IN_LABEL,
    Figure,
    GateError,
    Measure,
    Unreadable,
    Verdict,
    data_label,
    read_figure,
    test_record,
    vouch,
)
from launch.targets.vertex.hardware import catalogue, multi_region
from launch.values.resources import optional_number
from serving import asked, contract
from trainer.common import jsonnum
from trainer.common.files import (
    EXPORT_INFO_FILE,
    MAX_RUN_JSON_BYTES,
    METRICS_DIR,
    METRICS_FILE,
    RUN_FILE,
    RUNS_PREFIX,
    metrics_file,
)
from trainer.common.options import Bound
from trainer.model.best.choice import DEFAULT_CHOICE, LATEST, Choice
from trainer.model.eval_record import EvaluationRecord
from trainer.model.experiments import AP_METRICS, EXPERIMENTS, MASK_AP_METRICS

CHECKPOINT = re.compile(r"ckpt-(\d+)\.index")
EVALUATION = re.compile(f"{METRICS_DIR}/{METRICS_FILE.pattern}")
ALIAS = re.compile(r"[a-z][a-z0-9-]{0,127}")
DEFAULT_ALIASES = ("candidate",)
UPLOAD_TIMEOUT = 1800.0
DEFAULT_ALIAS = "default"
FORCED_LABEL = "forced"
# what a version was judged on, as labels (values: 63 characters at most, so a sha256 keeps
# its first SHA_IN_LABEL hexadecimal digits): its own test record, and the serving version's
TEST_SHA, TEST_DATA, TEST_FIGURE = "test-sha256", "test-data-sha256", "test-figure"
CHAMPION_RUN, CHAMPION_STEP = "champion-run", "champion-step"
CHAMPION_SHA, CHAMPION_FIGURE = "champion-sha256", "champion-figure"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """What the gate read about a run: everything the Model spec needs."""

    run: RunPaths
    experiment: str
    evaluation: EvaluationRecord
    export: dict  # the artifact's export.json
    why: str = ""  # why this checkpoint (the best, the newest, the one asked for)

    @property
    def gate_metric(self) -> str:
        return EXPERIMENTS[self.experiment].gate_metric

    @property
    def gated(self) -> float:
        """The value the gate judges: its experiment's AP50, of the boxes or of the masks."""
        return self.evaluation.metrics[self.gate_metric]


def parent_model_id(experiment: str) -> str:
    """Model ids: lowercase letters, digits and '-' (underscores are not allowed)."""
    return label_value(experiment).replace("_", "-")


CUSTOM, PREBUILT = "custom", "prebuilt"  # --container


def check_container(container: str) -> str:
    """--container: ours (on CPUs, or with --gpu TF Serving's GPU build) or Google's."""
    if container not in (CUSTOM, PREBUILT):
        raise InputError(f"--container {container[:40]!r}: give {CUSTOM} (our TF Serving image, "
                         f"at the trainer's TensorFlow; the default) or {PREBUILT} (Vertex AI's "
                         "prebuilt TensorFlow container, until its end of availability)")
    return container


def check_keep_asked(rate: float | str | None, container: str) -> float | None:
    """--keep-asked: a fraction of requests, above 0 and at most 1, kept by our image only."""
    rate = optional_number("--keep-asked", rate, float, Bound(0, above=True, maximum=1))
    if rate and container != CUSTOM:
        raise InputError(f"--keep-asked {rate:g}: only our serving image keeps asked images; "
                         f"drop --container {container} or --keep-asked")
    return rate or None


def keeping(container: aiplatform_v1.ModelContainerSpec, rate: float, bucket: str,
            model: str) -> None:
    """The variables that make our image keep `rate` of its requests' images in
    gs://`bucket`/asked/`model`/ (serving/asked.py), where `label.push --asked` reads them."""
    container.env.extend([
        aiplatform_v1.EnvVar(name=asked.KEEP_RATE, value=f"{rate:g}"),
        aiplatform_v1.EnvVar(name=asked.KEEP_URI,
                             value=f"gs://{bucket}/{asked.ASKED_PREFIX}/{model}")])


def custom_container(image: str) -> aiplatform_v1.ModelContainerSpec:
    """Our serving image, with the port and routes its entrypoint serves (the contract)."""
    return aiplatform_v1.ModelContainerSpec(
        image_uri=image, ports=[aiplatform_v1.Port(container_port=contract.HTTP_PORT)],
        predict_route=contract.predict_route(), health_route=contract.health_route())


def prebuilt_container(region: str, gpu: bool) -> aiplatform_v1.ModelContainerSpec:
    """Vertex AI's TensorFlow container: it needs no port or routes."""
    return aiplatform_v1.ModelContainerSpec(
        image_uri=prediction_image(region, "gpu" if gpu else "cpu"))


def serves_on_gpu(container: aiplatform_v1.ModelContainerSpec) -> bool:
    """Vertex AI's tf2-gpu container, or our serving image's GPU build (infra/names.py)."""
    name = container.image_uri.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    return "/tf2-gpu." in container.image_uri or name == SERVING_GPU_IMAGE


def prediction_image(region: str, device: str = "cpu") -> str:
    containers = catalogue()["prediction_containers"]
    return containers["image"].format(geo=multi_region(region), device=device,
                                      version=containers["tensorflow"][0].replace(".", "-"))


def check_aliases(text: str) -> tuple[str, ...]:
    aliases = tuple(a.strip() for a in text.split(",") if a.strip())
    for alias in aliases:
        if not ALIAS.fullmatch(alias):
            raise InputError(f"--aliases: {alias!r} is not a version alias (a lowercase "
                             "letter, then letters, digits or '-')")
    return aliases


def _final(step_of, names: list[str], pattern: re.Pattern) -> int | None:
    steps = [int(m.group(1)) for name in names if (m := pattern.fullmatch(step_of(name)))]
    return max(steps) if steps else None


def read_candidate(storage, run: RunPaths, choice: Choice = DEFAULT_CHOICE
                   ) -> Candidate:
    """The run's checkpoint `choice` names (the best it keeps, else its newest), its
    evaluation and its exported model, which must be of that checkpoint, from the bucket.
    Every value is checked: these files are written by jobs, not by us."""
    prefix = f"{RUNS_PREFIX}/{run.run_id}"
    names = [blob.name for blob in list_blobs(storage, run.bucket, f"{prefix}/checkpoints")]
    relative = lambda name: name.removeprefix(f"{prefix}/checkpoints/")  # noqa: E731
    final = _final(relative, names, CHECKPOINT)
    if final is None:
        raise MissingError(f"run {run.run_id} has no checkpoint in {run.checkpoints}; train it "
                           "with `invoke train --target vertex --run-id "
                           f"{run.run_id}`")
    step, why = _chosen(storage, run, choice, final, {
        int(m[1]) for name in names if (m := CHECKPOINT.fullmatch(relative(name)))})
    evaluated = {int(m[1]) for name in names if (m := EVALUATION.fullmatch(relative(name)))}
    if step not in evaluated:
        newest = f"ckpt-{max(evaluated)}" if evaluated else "none"
        fix = (f"evaluate it with `invoke eval --target vertex --run-id {run.run_id} --once`"
               if step == final else "choose an evaluated one with --checkpoint")
        raise GateError(f"run {run.run_id}'s checkpoint ckpt-{step} ({why}) has no evaluation "
                        f"(newest: {newest}); {fix}")
    result = _json(storage, run, f"checkpoints/{METRICS_DIR}/{metrics_file(step)}")
    export = _json(storage, run, f"model/{EXPORT_INFO_FILE}")
    reexport = (f"`invoke export --run-id {run.run_id} --checkpoint "
                f"{choice if choice.kind == 'step' else choice.kind} --output-dir {run.model} "
                "--default-signature bytes`")
    if export.get("default_signature") != "bytes":
        raise GateError(f"{run.model} answers uint8 pixels by default; Vertex AI's container "
                        f"calls serving_default with encoded files: re-export it with {reexport}")
    if export.get("checkpoint") != f"ckpt-{step}":
        held = str(export.get("checkpoint"))[:40]
        raise GateError(f"{run.model} was exported from {held}, not ckpt-{step} ({why}): "
                        f"export that checkpoint there with {reexport}")
    experiment = experiment_of(storage, run)
    return Candidate(run, experiment, EvaluationRecord(step, _metrics(result.get("metrics"),
                                                                 experiment)), export, why)


def _chosen(storage, run: RunPaths, choice: Choice, final: int, saved: set[int]
            ) -> tuple[int, str]:
    """The step `choice` names in the run, and why, in words."""
    if choice.kind == LATEST:
        return final, "the newest, as asked"
    kept = mirror.read_best(storage, run.checkpoints)
    if choice.kind == "step":
        if choice.step not in saved and not (kept and kept.step == choice.step):
            raise MissingError(f"run {run.run_id} has no checkpoint ckpt-{choice.step} (the "
                               f"newest is ckpt-{final}); `invoke runs.compare --run "
                               f"{run.run_id}` shows its evaluations")
        return choice.step, "as asked"
    if kept is None:
        return final, "the newest: the run keeps no best checkpoint (best/best.json)"
    return kept.step, f"the best, {kept.describe()}"


def experiment_of(storage, run: RunPaths) -> str:
    """The experiment the run's run.json names, one of ours (its Model is named after it)."""
    experiment = _json(storage, run, f"checkpoints/{RUN_FILE}").get("experiment")
    if not isinstance(experiment, str) or experiment not in EXPERIMENTS:
        raise GateError(f"run {run.run_id} names experiment {str(experiment)[:100]!r}, not "
                        "one of ours")
    return experiment


def _json(storage, run: RunPaths, path: str) -> dict:
    """A run file the jobs wrote (`path` below the run), through the one bounded reader."""
    name = f"{RUNS_PREFIX}/{run.run_id}/{path}"
    try:
        value = read_json(storage, run.bucket, name, MAX_RUN_JSON_BYTES)
    except jsonnum.JsonError as error:
        raise GateError(str(error)) from None
    if value is None:
        raise MissingError(f"gs://{run.bucket}/{name} is missing; is the run id right?")
    if not isinstance(value, dict):
        raise GateError(f"gs://{run.bucket}/{name} is not a JSON object")
    return value


def labelled(experiment: str) -> tuple[str, ...]:
    """The metrics a version's labels carry: COCO AP, AP50 and AP75 of the boxes, and of the
    masks for an experiment gated on its masks."""
    names = ("AP", "AP50", "AP75")
    gate_metric = EXPERIMENTS[experiment].gate_metric
    return (*names, *(m for m in MASK_AP_METRICS[:3] if gate_metric in MASK_AP_METRICS))


def _metrics(found, experiment: str) -> dict[str, float]:
    """COCO metrics are numbers in [-1, 1] (-1: no object of that size); anything else is
    not a metric and fails the gate rather than reaching a label."""
    if not isinstance(found, dict):
        raise GateError("the evaluation has no metrics")
    metrics = {}
    for name in dict.fromkeys((*AP_METRICS, *labelled(experiment),
                               EXPERIMENTS[experiment].gate_metric)):
        value = jsonnum.number(found.get(name))
        if value is None or not -1 <= value <= 1:
            raise GateError(f"the evaluation's {name} is {str(found.get(name))[:40]}, not a "
                            "COCO metric")
        metrics[name] = value
    return metrics


def gate(candidate: Candidate, min_ap50: float | None) -> float:
    """The bar this run's gate metric (its experiment's AP50: of the boxes, or of the masks)
    must reach: --min-ap50, else its experiment's."""
    bar = EXPERIMENTS[candidate.experiment].min_ap50 if min_ap50 is None else min_ap50
    if candidate.gated < bar:
        source = "--min-ap50" if min_ap50 is not None else \
            f"the default of {candidate.experiment}"
        raise GateError(f"run {candidate.run.run_id} is not uploaded: its "
                        f"{candidate.gate_metric} is {candidate.gated:.3f} at "
                        f"ckpt-{candidate.evaluation.step} ({candidate.why}), "
                        f"below {bar:.3f} ({source}); train longer, or pass --min-ap50 to "
                        "accept it")
    return bar


def model_spec(run: RunPaths, container: aiplatform_v1.ModelContainerSpec,
               candidate: Candidate | None) -> aiplatform_v1.Model:
    """The Model version: the run's SavedModel on `container`, named and labelled by what the
    gate read (None: a dry run that could not read the run, whose request lacks those)."""
    model = aiplatform_v1.Model(artifact_uri=run.model, container_spec=container,
                                labels={"run": run.run_id})  # as the run's jobs are labelled
    if candidate is None:
        return model
    metrics = candidate.evaluation.metrics
    shown = labelled(candidate.experiment)
    summary = ", ".join(f"{k} {metrics[k]:.4f}" for k in shown)
    model.display_name = parent_model_id(candidate.experiment)
    model.description = EXPERIMENTS[candidate.experiment].description
    model.version_description = (f"run {run.run_id}, ckpt-{candidate.evaluation.step}: "
                                 f"{summary}")
    model.labels.update({"experiment": label_value(candidate.experiment),
                         "step": str(candidate.evaluation.step),
                         **{label_value(k): metric_label(metrics[k])
                            for k in shown}})
    return model


def lineage_labels(dataset: str | None) -> dict[str, str]:
    """Where a version's data came from, as labels: the named dataset and the version its run
    read (`pets@v-20261201T000000Z-0a1b2c3d`, from the run's job file); none for a directory."""
    if not dataset or "@" not in dataset:
        return {}
    name, version = dataset.split("@", 1)
    return {"dataset": label_value(name), "dataset-version": label_value(version)}


def labelled_version(label: str) -> str:
    """A `dataset-version` label back to the version's name: labels are lowercase, and a
    version's `T` and `Z` (trainer/data/datasets.py VERSION) are the only letters it changes."""
    found = re.fullmatch(r"v-(\d{8})t(\d{6})z-([0-9a-f]{8})", label)
    return f"v-{found[1]}T{found[2]}Z-{found[3]}" if found else label


def metric_label(value: float) -> str:
    """0.8352 -> "0_8352": label values allow no '.'."""
    return f"{value:.4f}".replace(".", "_").replace("-", "minus")


def upload_request(project: str, region: str, model: aiplatform_v1.Model,
                   parent: aiplatform_v1.Model | None) -> aiplatform_v1.UploadModelRequest:
    """A new version of `parent`, or the first version of the experiment's Model."""
    location = f"projects/{project}/locations/{region}"
    if parent is not None:
        return aiplatform_v1.UploadModelRequest(parent=location, parent_model=parent.name,
                                                model=model)
    return aiplatform_v1.UploadModelRequest(parent=location, model=model,
                                            model_id=model.display_name)


def judged_labels(verdict: Verdict | None) -> dict[str, str]:
    """What a version was judged on, as its labels: its own test record (sha256, data
    digest, figure; its run and step are its `run` and `step`) and the serving version's
    (run, checkpoint, sha256, figure)."""
    labels = {}
    if verdict and (mine := verdict.challenger):
        labels.update({TEST_SHA: mine.sha256[:SHA_IN_LABEL], TEST_DATA: data_label(mine.data),
                       TEST_FIGURE: metric_label(mine.value)})
    if verdict and (held := verdict.champion):
        labels.update({CHAMPION_RUN: label_value(held.run_id), CHAMPION_STEP: str(held.step),
                       CHAMPION_SHA: held.sha256[:SHA_IN_LABEL],
                       CHAMPION_FIGURE: metric_label(held.value)})
    return {key: value for key, value in labels.items() if value}


def model_id(resource: str) -> str:
    """`projects/P/locations/L/models/ID@3` -> ID: a deployed model names its Model with the
    project's number or id, and a version or alias after '@'."""
    return resource.split("@", 1)[0].rsplit("/models/", 1)[-1]


def serving_version(region, parent: str, endpoints: Sequence[aiplatform_v1.Endpoint]
                    ) -> aiplatform_v1.Model | None:
    """The version of `parent` serving now: the one taking the most traffic on `endpoints`
    (a tie: the newest version), else the model's `default` alias, else None."""
    from google.api_core import exceptions

    found: list[tuple[int, int]] = []
    for endpoint in endpoints:
        for deployed in endpoint.deployed_models:
            if model_id(deployed.model) != model_id(parent):
                continue
            version = deployed.model_version_id or deployed.model.partition("@")[2]
            if version.isascii() and version.isdigit():
                found.append((endpoint.traffic_split.get(deployed.id, 0), int(version)))
    names = [f"{parent}@{version}" for _, version in sorted(found, reverse=True)]
    for name in [*names, f"{parent}@{DEFAULT_ALIAS}"]:
        try:
            return region.models().get_model(name=name)
        except exceptions.NotFound:
            continue
    return None


def run_and_step(version: aiplatform_v1.Model) -> tuple[str, int] | None:
    """The run and checkpoint step a version was uploaded from (its labels), if it says."""
    run_id, step = version.labels.get("run"), version.labels.get("step", "")
    return (run_id, int(step)) if run_id and step.isascii() and step.isdigit() else None


def champion_figure(storage, version: aiplatform_v1.Model, run_of, measure: Measure,
                    vouched: frozenset[str] = frozenset()) -> Figure | Unreadable | None:
    """The serving version's figure: None when its labels do not say its run and step (or
    name no run we could read), or its run has no test evaluation of that step; Unreadable
    when that evaluation cannot be read or is not the one the version was judged on
    (`vouch`)."""
    found = run_and_step(version)
    try:
        paths = run_of(found[0]) if found else None
    except InputError:  # a `run` label that is no run id of ours
        return None
    if paths is None:
        return None
    return vouch(read_figure(test_record(storage, paths, found[1]), found[0], measure),
                 version.labels.get(TEST_SHA, ""), version.labels.get(TEST_DATA, ""), vouched)


def version_name(version: aiplatform_v1.Model) -> str:
    return f"{version.name}@{version.version_id}"
