"""Vertex AI serving, the target's `base.Serving` (`VertexServing`, last): `model.upload`,
`endpoint.*`, `predict --endpoint`, `predict --target vertex` (a batch prediction job) and
`runs.show --target vertex`, and what the continuous-training pipeline's steps ask of them:
thin adapters between the flags, the specs (registry, endpoints, answers), the champion gate
(launch/targets/champion.py) and Vertex AI's clients. Each checks what it can before its
first request and says what it did in one paragraph."""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import glob
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from google.cloud import aiplatform_v1

from launch.context.clients import UNREADABLE
from launch.context.cloud import Cloud, run_paths, stamp, standard_labels
from launch.context.places import label_value
from launch.errors import InputError, MissingError, StepFailed, reason
from launch.stores.gcs import mirror
from launch.stores.gcs.upload import list_blobs
from launch.stores.pricing.estimate import ServingCost, known_price
from launch.stores.pricing.table import PriceTable
from launch.stores.runs.jobfiles import bucket_run_data
from launch.targets import champion, traffic
from launch.targets.base import ServingSetup
from launch.targets.champion import Challenge
from launch.targets.vertex import answers, endpoints, lifecycle, registry, submit
from launch.targets.vertex.costs import machine_hourly
from launch.targets.vertex.spec import machine_spec, rest_json
from launch.values.jobfile import flag_value
from trainer.common import jsonnum
from trainer.common.errors import JsonError
from trainer.common.files import EXPORT_INFO_FILE, LABEL_MAP_FILE, MAX_RUN_JSON_BYTES
from trainer.data import datasets
from trainer.data.defaults import MAX_PIXELS
from trainer.data.label_map import id_to_name, parse_label_map
from trainer.detections.detector import Detections, ImageRefused, Picture
from trainer.evaluation import operating
from trainer.model.experiments import EXPERIMENTS
from trainer.prediction.predict import detect_files
from trainer.prediction.results import DETECTIONS_ONLY, ResultForms

T = TypeVar("T")
OPERATION_TIMEOUT = 3600.0  # deployments take minutes; uploads seconds
BATCH_ENDED = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED",
               "JOB_STATE_EXPIRED", "JOB_STATE_PARTIALLY_SUCCEEDED")


@dataclasses.dataclass(frozen=True)
class ServingRegion:
    """The project and region every serving call names (`name`: us-central1), and their
    clients."""

    cloud: Cloud
    project: str
    name: str

    @classmethod
    def of(cls, cloud: Cloud) -> ServingRegion:
        fields = cloud.fields(("project", "region"))
        return cls(cloud, fields["project"], fields["region"])

    @property
    def location(self) -> str:
        return f"projects/{self.project}/locations/{self.name}"

    def models(self):
        return self.cloud.clients.models(self.name)

    def endpoints(self):
        return self.cloud.clients.endpoints(self.name)

    def model_name(self, experiment: str) -> str:
        """The experiment's Model in the registry: every run's version is one of it."""
        return f"{self.location}/models/{registry.parent_model_id(experiment)}"

    def endpoint_name(self, endpoint: str) -> str:
        if "/" in endpoint:
            return endpoint
        if not endpoint.isdigit():
            raise InputError(f"--endpoint {endpoint!r}: give the endpoint's numeric id (from "
                             "`invoke endpoint.list`) or its full resource name")
        return f"{self.location}/endpoints/{endpoint}"


# --- Model Registry -------------------------------------------------------------------------

def challenge(cloud: Cloud, region: ServingRegion, paths, experiment: str, step: int,
              serving_on: Callable[[], list], rules: Challenge, dry_run: bool
              ) -> champion.Verdict | None:
    """The run's checkpoint `step` against the version of its experiment's Model serving now
    (the most traffic on the endpoints `serving_on()` lists, else the Model's default
    alias); None when that version is this very checkpoint."""
    storage = cloud.storage()
    measure = champion.Measure(EXPERIMENTS[experiment].gate_metric, rules.gate_class)
    tested = champion.test_record(storage, paths, step)
    found = champion.read_figure(tested, paths.run_id, measure)
    challenger = champion.own(found, rules.vouched) if isinstance(found, champion.Figure) \
        else None
    if rules.gate_class and challenger is None and tested and champion.figure(
            tested.evaluation, paths.run_id, champion.Measure(measure.metric)) is not None:
        raise InputError(f"--gate-class {rules.gate_class[:60]!r}: run {paths.run_id}'s test "
                         "evaluation has no such class (`invoke runs.compare --run "
                         f"{paths.run_id}` lists them)")
    serving = _unless_unreadable(
        dry_run, "the version serving now", "not compared",
        lambda: registry.serving_version(region, region.model_name(experiment), serving_on()))
    origin = registry.run_and_step(serving) if serving else None
    if origin == (paths.run_id, step):
        return None
    held = registry.champion_figure(storage, serving, lambda run: run_paths(cloud, run),
                                    measure, rules.vouched) if serving else None
    return champion.judge(measure, challenger, held,
                          registry.version_name(serving) if serving else None,
                          rules.max_drop, rules.force, paths.run_id, step,
                          origin[0] if origin else "RUN")


def upload_model(cloud: Cloud, run_id: str, min_ap50: float | None = None,
                 aliases: str = ",".join(registry.DEFAULT_ALIASES), gpu: bool = False,
                 dry_run: bool = False, container: str | None = None,
                 today: datetime.date | None = None, checkpoint: str | None = None,
                 rules: Challenge = Challenge(), keep_asked: float | None = None) -> str:
    region = ServingRegion.of(cloud)
    choice = mirror.checkpoint_choice(checkpoint, paths=False)
    rules = rules.checked()
    wanted = registry.check_aliases(aliases)
    container = registry.check_container(container or registry.CUSTOM)
    keep_asked = registry.check_keep_asked(keep_asked, container)
    if container == registry.PREBUILT:  # Google's, until its end of availability
        lifecycle.check_offered(registry.prediction_image(region.name, "gpu" if gpu else "cpu"),
                                today or datetime.date.today())  # before any request
    paths = run_paths(cloud, run_id)  # a run id is checked before any request
    if dry_run:
        submit.say_once_without_credentials(cloud)
    candidate = _unless_unreadable(dry_run, f"run {run_id}", "the gate is not checked, and "
                                   "the model lacks what the run's files give (its experiment's "
                                   "model id, metrics and labels)",
                                   lambda: registry.read_candidate(cloud.storage(), paths,
                                                                   choice))
    bar = registry.gate(candidate, min_ap50) if candidate else None
    verdict = challenge(  # against what serves anywhere in the region
        cloud, region, paths, candidate.experiment, candidate.evaluation.step,
        lambda: list(region.endpoints().list_endpoints(parent=region.location)), rules,
        dry_run) if candidate else None
    spec = (registry.custom_container(submit.sources_image(
        cloud, "serving_gpu_image" if gpu else "serving_image", dry_run))
            if container == registry.CUSTOM else registry.prebuilt_container(region.name, gpu))
    if keep_asked and candidate:  # the images go where label.push --asked finds them
        registry.keeping(spec, keep_asked, paths.bucket,
                         registry.parent_model_id(candidate.experiment))
    model = registry.model_spec(paths, spec, candidate)
    recorded = _unless_unreadable(dry_run, f"run {run_id}'s job file", "the version's "
                                  "labels lack its dataset", lambda: bucket_run_data(
                                      cloud, run_id)) if candidate else None
    model.labels.update(registry.lineage_labels(recorded.dataset if recorded else None))
    model.labels.update(registry.judged_labels(verdict))  # what it was judged on
    if verdict and verdict.forced:  # the version says it went ahead, and why
        model.labels[registry.FORCED_LABEL] = "true"
        model.version_description += f"; forced: {verdict.forced}"
    parent = _unless_unreadable(
        dry_run, "the Model Registry", "the request uploads a first version",
        lambda: _existing(region.models(), region.model_name(candidate.experiment))
    ) if candidate else None
    request = registry.upload_request(region.project, region.name, model, parent)
    passed = (f"run {run_id}: {candidate.gate_metric} {candidate.gated:.3f} at "
              f"ckpt-{candidate.evaluation.step} clears {bar:.3f} ({candidate.why})\n"
              + (verdict.line if verdict else "champion: this checkpoint is the version "
                 "serving now") if candidate else f"run {run_id}: not read, not gated")
    if dry_run:  # the request alone on stdout, for `| python -m json.tool`; the rest beside
        print(f"{passed}\naliases: {', '.join(wanted) or 'none'}", file=sys.stderr)
        return rest_json(request)
    client = region.models()
    response = client.upload_model(request=request).result(timeout=OPERATION_TIMEOUT)
    version = f"{response.model}@{response.model_version_id}"
    if wanted:
        client.merge_version_aliases(name=version, version_aliases=list(wanted))
    return (f"{passed}; uploaded as {version} (aliases: {', '.join(wanted) or 'none'}) on "
            f"{spec.image_uri}\ndeploy it: invoke endpoint.deploy --run-id {run_id}")


def _unless_unreadable(dry_run: bool, what: str, meaning: str, read: Callable[[], T]
                       ) -> T | None:
    """`read()`; in a dry run that may not read it, None, and a note on stderr saying what the
    printed request lacks (as a dry run shows images by tag when it cannot pin them)."""
    try:
        return read()
    except UNREADABLE as error:
        if not dry_run:
            raise
        print(f"note: {what} not read ({reason(error, 300)}): {meaning}", file=sys.stderr)
        return None


def _existing(client, name: str) -> aiplatform_v1.Model | None:
    from google.api_core import exceptions

    try:
        return client.get_model(name=name)
    except exceptions.NotFound:
        return None


def run_version(cloud: Cloud, run_id: str) -> aiplatform_v1.Model:
    """The registry version uploaded from run `run_id` (the newest, if uploaded twice)."""
    from google.api_core import exceptions

    region, paths = ServingRegion.of(cloud), run_paths(cloud, run_id)
    experiment = registry.experiment_of(cloud.storage(), paths)
    parent = region.model_name(experiment)
    try:
        versions = list(region.models().list_model_versions(
            request={"name": parent, "filter": f'labels.run="{run_id}"'}))
    except exceptions.NotFound:
        versions = []
    if not versions:
        raise MissingError(f"run {run_id} is not in the Model Registry; upload it with "
                           f"`invoke model.upload --run-id {run_id}`")
    return max(versions, key=lambda v: int(v.version_id or 0))


# --- Endpoints ------------------------------------------------------------------------------

def price_serving(setup: endpoints.Serving, region: str, max_cost: float | None,
                  timeout_hours: float | None = None) -> None:
    """Prints what serving on `setup` costs on stderr (an endpoint: per hour and per month,
    and at most with autoscaling; a batch job, `timeout_hours` long at most: its bound) and
    refuses one over --max-cost, before any request."""
    cost = known_price(lambda: ServingCost(machine_hourly(
        PriceTable.load(), "prediction", region, machine_spec(setup.machine)),
        setup.min_replicas, setup.max_replicas, timeout_hours), max_cost)
    if cost is not None:
        print("\n".join(cost.lines()), file=sys.stderr, flush=True)
        cost.refuse_over(max_cost)


def deploy(cloud: Cloud, run_id: str, serving: Callable[[str], endpoints.Serving],
           endpoint: str | None = None, dry_run: bool = False,
           max_cost: float | str | None = None, rules: Challenge = Challenge()) -> str:
    region = ServingRegion.of(cloud)
    setup = serving(region.name)  # validated before any request
    rules = rules.checked()
    print(f"replicas: {setup.autoscaling()}", file=sys.stderr)
    price_serving(setup, region.name, flag_value("max_cost", max_cost))
    if dry_run:
        submit.say_once_without_credentials(cloud)
    version = _unless_unreadable(dry_run, f"run {run_id}'s registered version",
                                 "the deployed model is left empty and its container unchecked",
                                 lambda: run_version(cloud, run_id))
    origin = registry.run_and_step(version) if version else None

    def serving_there() -> list:  # the endpoint this deployment goes to, if it exists
        existing = find_endpoint(region.endpoints(), region, endpoint, create=False)
        return [existing] if existing is not None else []

    paths = run_paths(cloud, run_id)
    verdict = challenge(cloud, region, paths, registry.experiment_of(cloud.storage(), paths),
                        origin[1], serving_there, rules, dry_run) if origin else None
    if verdict:
        print(verdict.line, file=sys.stderr)
    if version and setup.machine.accelerator and \
            not registry.serves_on_gpu(version.container_spec):
        raise InputError(f"{version.name}@{version.version_id} serves on a CPU container "
                         f"({version.container_spec.image_uri}); upload it with --gpu (our "
                         "serving image's GPU build) to deploy on a GPU")
    account = cloud.fields(())["serving_service_account"]

    def where() -> tuple[str, dict[str, int]]:
        """The endpoint (created unless a dry run) and the split with the new version."""
        chosen = find_endpoint(region.endpoints(), region, endpoint, create=not dry_run)
        current = dict(chosen.traffic_split) if chosen is not None else {}
        return (chosen.name if chosen is not None else f"{region.location}/endpoints/NEW",
                traffic.split_with_new(current, setup.traffic))

    name, split = _unless_unreadable(
        dry_run, "the endpoint", "the traffic split holds only the new version's share",
        where) or (region.endpoint_name(endpoint) if endpoint else
                   f"{region.location}/endpoints/NEW", {traffic.NEW: setup.traffic})
    request = aiplatform_v1.DeployModelRequest(
        endpoint=name, deployed_model=endpoints.deployed_model(
            f"{version.name}@{version.version_id}" if version else "", setup, account,
            label_value(run_id)),
        traffic_split=split)
    if dry_run:
        return rest_json(request)
    deployed = region.endpoints().deploy_model(request=request).result(
        timeout=OPERATION_TIMEOUT).deployed_model
    shares = ", ".join(f"{deployed.id if k == traffic.NEW else k}: {v}%"
                       for k, v in split.items())
    return (f"deployed run {run_id} ({version.name}@{version.version_id}) to {name} "
            f"as {deployed.id} on {setup.machine.describe()}, {setup.autoscaling()}; traffic "
            f"{shares}\n"
            f"predict: invoke predict --endpoint {name.rsplit('/', 1)[-1]} "
            "--images 'DIR/*.jpg'")


def find_endpoint(client, region: ServingRegion, endpoint: str | None, create: bool):
    """The named endpoint, or ours by display name (created when missing and `create`)."""
    from google.api_core import exceptions

    if endpoint:
        name = region.endpoint_name(endpoint)
        try:
            return client.get_endpoint(name=name)
        except exceptions.NotFound:
            raise MissingError(f"endpoint {name} does not exist; `invoke endpoint.list` "
                               "shows ours") from None
    found = list(client.list_endpoints(request={
        "parent": region.location, "filter": f'display_name="{endpoints.DEFAULT_ENDPOINT}"'}))
    if found:
        return found[0]
    if not create:
        return None
    return client.create_endpoint(parent=region.location, endpoint=aiplatform_v1.Endpoint(
        display_name=endpoints.DEFAULT_ENDPOINT, labels=standard_labels())).result(
        timeout=OPERATION_TIMEOUT)


def list_endpoints(cloud: Cloud) -> str:
    region = ServingRegion.of(cloud)
    rows = []
    for endpoint in region.endpoints().list_endpoints(parent=region.location):
        rows.append(f"{endpoint.name.rsplit('/', 1)[-1]}  {endpoint.display_name}")
        for deployed in endpoint.deployed_models:
            resources = deployed.dedicated_resources
            rows.append(f"  {deployed.id}  {deployed.model.rsplit('/', 1)[-1]}  "
                        f"{endpoint.traffic_split.get(deployed.id, 0)}%  "
                        f"{resources.machine_spec.machine_type} x "
                        f"{resources.min_replica_count}-{resources.max_replica_count}  "
                        f"({deployed.display_name})")
    return "\n".join(rows) or f"no endpoints in {region.location}"


def origins(cloud: Cloud) -> str:
    """Where each deployed model came from, as its version's labels record it: its share of
    its endpoint, the version, the run and checkpoint, the gate metric, the dataset version."""
    region = ServingRegion.of(cloud)
    models, rows = region.models(), []
    for endpoint in region.endpoints().list_endpoints(parent=region.location):
        for deployed in endpoint.deployed_models:
            version = (f"{deployed.model.split('@')[0]}@{deployed.model_version_id}"
                       if deployed.model_version_id else deployed.model)
            rows.append(origin_line(endpoint.display_name or endpoint.name.rsplit("/", 1)[-1],
                                    endpoint.traffic_split.get(deployed.id, 0), version,
                                    dict(models.get_model(name=version).labels)))
    return "\n".join(rows) or f"nothing deployed in {region.location}"


def origin_line(endpoint: str, share: int, version: str, labels: dict[str, str]) -> str:
    """One deployed version's lineage: endpoint <- version <- run <- dataset version."""
    data = (f"dataset {labels['dataset']} version "
            f"{registry.labelled_version(labels['dataset-version'])}"
            if labels.get("dataset-version") else "its data not recorded (a data directory)")
    ap50 = labels.get("ap50", labels.get("mask_ap50", "")).replace("_", ".") or "unknown"
    return (f"{endpoint} {share}%: {version.rsplit('/', 1)[-1]} <- run {labels.get('run', '?')} "
            f"ckpt-{labels.get('step', '?')} (AP50 {ap50}) <- {data}")


def undeploy(cloud: Cloud, endpoint: str, deployed_model_id: str) -> str:
    region = ServingRegion.of(cloud)
    client = region.endpoints()
    found = find_endpoint(client, region, endpoint, create=False)
    ids = {d.id for d in found.deployed_models}
    if deployed_model_id not in ids:
        raise InputError(f"{found.name} has no deployed model {deployed_model_id!r}; it has "
                         f"{', '.join(sorted(ids)) or 'none'}")
    split = traffic.split_without(dict(found.traffic_split), deployed_model_id)
    client.undeploy_model(request=aiplatform_v1.UndeployModelRequest(
        endpoint=found.name, deployed_model_id=deployed_model_id, traffic_split=split)
    ).result(timeout=OPERATION_TIMEOUT)
    shares = ", ".join(f"{k}: {v}%" for k, v in split.items()) or "nothing deployed"
    return f"undeployed {deployed_model_id} from {found.name}; traffic {shares}"


# --- Predictions ----------------------------------------------------------------------------

def _label_names(cloud: Cloud, artifact_uri: str) -> dict[int, str]:
    """The label map exported beside a model, so reports name the classes."""
    from google.api_core import exceptions

    where = mirror.GcsPath.parse(artifact_uri)
    try:
        text = cloud.storage().bucket(where.bucket).blob(
            f"{where.prefix}/{LABEL_MAP_FILE}").download_as_bytes(start=0, end=1 << 20)
        return id_to_name(parse_label_map(text.decode()))
    except (exceptions.NotFound, ValueError):
        return {}


def _export_info(cloud: Cloud, artifact_uri: str) -> dict:
    """The export.json beside a model in the bucket ({} if missing or not JSON): the score
    threshold its evaluation chose travels with it (trainer/evaluation/operating.py)."""
    from google.api_core import exceptions

    where = mirror.GcsPath.parse(artifact_uri)
    try:
        found = jsonnum.loads(cloud.storage().bucket(where.bucket).blob(
            f"{where.prefix}/{EXPORT_INFO_FILE}").download_as_bytes(
                start=0, end=MAX_RUN_JSON_BYTES), MAX_RUN_JSON_BYTES, artifact_uri)
    except (exceptions.NotFound, JsonError, UnicodeDecodeError):
        return {}
    return found if isinstance(found, dict) else {}


def _report(cloud: Cloud, detector, names, model: str, images: str, output_dir: str,
            score_threshold: float | None, info: dict, max_pixels: int,
            forms: ResultForms) -> str:
    client = cloud.storage() if mirror.is_gcs(images) or mirror.is_gcs(output_dir) else None
    paths = sorted(glob.glob(mirror.stage_images(client, images)))
    if not paths:
        raise InputError(f"no image matches {images}")
    detect_files(detector, names, model, paths, str(mirror.written_first(output_dir)),
                 operating.threshold(score_threshold, info), max_pixels, forms)
    return mirror.publish_predictions(client, output_dir)


def _busiest(region: ServingRegion, endpoint: str):
    """The endpoint and the deployed model with the most of its traffic."""
    found = find_endpoint(region.endpoints(), region, endpoint, create=False)
    if not found.deployed_models:
        raise MissingError(f"{found.name} has no deployed model; `invoke endpoint.deploy`")
    busiest = max(found.traffic_split.items(), key=lambda item: item[1], default=(None, 0))[0]
    return found, next((d for d in found.deployed_models if d.id == busiest),
                       found.deployed_models[0])


def predict_online(cloud: Cloud, endpoint: str, images: str, output_dir: str,
                   score_threshold: float | None, max_pixels: int = MAX_PIXELS,
                   forms: ResultForms = DETECTIONS_ONLY) -> str:
    region = ServingRegion.of(cloud)
    found, deployed = _busiest(region, endpoint)
    model = region.models().get_model(name=deployed.model)
    detector = answers.endpoint_detector(cloud.clients.prediction(region.name), found.name)
    return _report(cloud, detector, _label_names(cloud, model.artifact_uri), found.name,
                   images, output_dir, score_threshold,
                   _export_info(cloud, model.artifact_uri), max_pixels, forms)


@dataclasses.dataclass(frozen=True)
class EndpointUnderLoad:
    """What `invoke bench.endpoint --endpoint` measures: where requests go, the machine that
    answers them, its replicas and a replica's price (None: not in the price table)."""

    name: str
    machine: str
    replicas: int
    hourly: float | None
    price_notes: tuple[str, ...]
    send: Callable[[bytes], None]


def endpoint_under_load(cloud: Cloud, endpoint: str) -> EndpointUnderLoad:
    """The endpoint's busiest deployed model, priced, and a sender of one image a request
    (Vertex AI's predict, as `predict --endpoint` sends it)."""
    region = ServingRegion.of(cloud)
    found, deployed = _busiest(region, endpoint)
    resources = deployed.dedicated_resources
    hourly, notes = prediction_hourly(region.name, resources.machine_spec)
    client = cloud.clients.prediction(region.name)

    def send(image: bytes) -> None:
        client.predict(endpoint=found.name,
                       instances=[answers.instance(Picture("", None, image))])

    spec = resources.machine_spec
    machine = spec.machine_type + (f" + {spec.accelerator_type.name}:{spec.accelerator_count}"
                                   if spec.accelerator_count else "")
    return EndpointUnderLoad(found.name, machine, max(1, resources.min_replica_count), hourly,
                             notes, send)


def prediction_hourly(region: str, spec: aiplatform_v1.MachineSpec
                      ) -> tuple[float | None, tuple[str, ...]]:
    """A replica's prediction price per hour (None: not in the table) and what to say of it:
    why it is unknown, or the sources of unconfirmed rows."""
    notes: list[str] = []
    hourly = known_price(lambda: machine_hourly(PriceTable.load(), "prediction", region, spec),
                         None, say=notes.append)
    return (hourly.total if hourly else None,
            (*notes, *(hourly.unconfirmed_lines() if hourly else ())))


def batch_inputs(storage, images: str) -> list[str]:
    """The gs:// files a glob names (`gs://BUCKET/DIR/*.jpg`: DIR's own files, as a local
    glob matches them)."""
    folder, _, pattern = images.rpartition("/")
    where = mirror.GcsPath.parse(folder)
    if not pattern or pattern in (".", ".."):
        raise InputError(f"--images {images!r}: end it with a file pattern, e.g. "
                         "gs://BUCKET/DIR/*.jpg")
    uris = []
    for blob in list_blobs(storage, where.bucket, where.prefix, delimiter="/"):
        name = blob.name.removeprefix(f"{where.prefix}/")
        # a file list is one URI a line: a name that would break a line is not sent
        if fnmatch.fnmatchcase(name, pattern) and not any(c in name for c in "\r\n/"):
            uris.append(f"gs://{where.bucket}/{blob.name}")
    if not uris:
        raise InputError(f"no object matches {images}")
    return uris


def batch_job(version: aiplatform_v1.Model, inputs: str, output_prefix: str,
              setup: endpoints.Serving, service_account: str | None, run_id: str,
              stamp: str) -> aiplatform_v1.BatchPredictionJob:
    """A batch prediction over a file list: Vertex AI sends each file as `{"b64": ...}`."""
    return aiplatform_v1.BatchPredictionJob(
        display_name=f"pets-batch-{run_id}-{stamp}"[:128],
        model=f"{version.name}@{version.version_id}",
        input_config=aiplatform_v1.BatchPredictionJob.InputConfig(
            instances_format="file-list",
            gcs_source=aiplatform_v1.GcsSource(uris=[inputs])),
        output_config=aiplatform_v1.BatchPredictionJob.OutputConfig(
            predictions_format="jsonl",
            gcs_destination=aiplatform_v1.GcsDestination(output_uri_prefix=output_prefix)),
        dedicated_resources=aiplatform_v1.BatchDedicatedResources(
            machine_spec=machine_spec(setup.machine), starting_replica_count=setup.min_replicas,
            max_replica_count=setup.max_replicas),
        service_account=service_account or "",
        labels={**standard_labels(), "run": run_id})


def predict_batch(cloud: Cloud, run_id: str, images: str, output_dir: str | None,
                  score_threshold: float | None, serving: Callable[[str], endpoints.Serving],
                  poll_seconds: float = 30.0, say: Callable[[str], None] = print,
                  timeout_hours: float | str | None = None,
                  max_cost: float | str | None = None, max_pixels: int = MAX_PIXELS,
                  dry_run: bool = False, forms: ResultForms = DETECTIONS_ONLY) -> str:
    """A batch prediction job over `images` with run `run_id`'s uploaded model, read back into
    the local report; the path of the report. A dry run reads the model and lists the
    images, then returns the request's JSON: it writes and submits nothing."""
    region = ServingRegion.of(cloud)
    setup = serving(region.name)
    if not mirror.is_gcs(images):
        raise InputError(f"--images {images!r}: batch prediction reads the bucket; upload "
                         "the images and pass gs://BUCKET/DIR/*.jpg (or predict locally)")
    timeout_hours = flag_value("timeout_hours", timeout_hours)  # a job's, checked the same way
    price_serving(setup, region.name, flag_value("max_cost", max_cost), timeout_hours)
    storage, paths = cloud.storage(), run_paths(cloud, run_id)
    version = run_version(cloud, run_id)
    uris = batch_inputs(storage, images)
    started = stamp()
    work = f"{paths.root}/batch/{started}"
    request = batch_job(version, f"{work}/inputs.txt", f"{work}/", setup,
                        cloud.fields(())["serving_service_account"], run_id, started)
    if dry_run:
        return (f"{len(uris)} image(s) with {version.name}@{version.version_id}; dry run: "
                f"{work}/inputs.txt not written, nothing submitted\n" + rest_json(request))
    where = mirror.GcsPath.parse(work)
    storage.bucket(where.bucket).blob(f"{where.prefix}/inputs.txt").upload_from_string(
        "".join(f"{uri}\n" for uri in uris))
    jobs = cloud.clients.jobs(region.name)
    job = jobs.create_batch_prediction_job(parent=region.location, batch_prediction_job=request)
    say(f"batch prediction {job.name}: {len(uris)} image(s) with "
        f"{version.name}@{version.version_id}")
    job = _wait_batch(jobs, job.name, poll_seconds, say, timeout_hours)
    if job.state.name not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_PARTIALLY_SUCCEEDED"):
        raise StepFailed(f"batch prediction {job.name} ended {job.state.name}: "
                         f"{job.error.message or 'see its logs in the console'}")
    if not job.output_info.gcs_output_directory:
        raise StepFailed(f"batch prediction {job.name} wrote no results")
    found, errors = _read_results(storage, job.output_info.gcs_output_directory)
    by_mirror = {str(mirror.GcsPath.parse(uri).mirror()): uri for uri in uris}

    def detect(picture: Picture) -> Detections:
        uri = by_mirror.get(picture.path, picture.path)
        if uri in found:
            return found[uri]
        raise ImageRefused(errors.get(uri, "the batch job returned no prediction for it"))

    return _report(cloud, detect, _label_names(cloud, version.artifact_uri), job.name, images,
                   output_dir or f"{paths.root}/predictions/{started}", score_threshold,
                   _export_info(cloud, version.artifact_uri), max_pixels, forms)


def _wait_batch(client, name: str, poll_seconds: float, say, timeout_hours: float
                ) -> aiplatform_v1.BatchPredictionJob:
    """Polls until the job ends; cancels it at `timeout_hours` (a batch job has no timeout
    of its own, so this is what bounds its cost while the task waits)."""
    state, deadline, cancelled = None, time.monotonic() + timeout_hours * 3600, False
    while True:
        job = client.get_batch_prediction_job(name=name)
        if job.state.name != state:
            state = job.state.name
            say(f"  {state.removeprefix('JOB_STATE_').lower()}")
        if state in BATCH_ENDED:
            return job
        if not cancelled and time.monotonic() >= deadline:
            client.cancel_batch_prediction_job(name=name)
            cancelled = True
            say(f"  cancelling: {timeout_hours:g} h (--timeout-hours) have passed")
        time.sleep(poll_seconds)


def _read_results(storage, directory: str) -> tuple[dict[str, Detections], dict[str, str]]:
    where = mirror.GcsPath.parse(directory)
    lines = []
    for blob in list_blobs(storage, where.bucket, where.prefix):
        if blob.name.rsplit("/", 1)[-1].startswith(("prediction.results-",
                                                     "prediction.errors_stats-")):
            lines += blob.download_as_text().splitlines()
    return answers.batch_results(lines)


def _on(setup: ServingSetup) -> Callable[[str], endpoints.Serving]:
    """The flags' serving machine, checked against the region when it is known."""
    return lambda region: endpoints.Serving.from_flags(
        region, setup.machine_type, setup.accelerator, setup.min_replicas, setup.max_replicas,
        setup.traffic, setup.target_utilization)


@dataclasses.dataclass(frozen=True)
class VertexServing:
    """The Model Registry, endpoints and batch prediction of the project and region the
    settings name (nothing is asked of Google Cloud until a method is called)."""

    cloud: Cloud

    def upload(self, run_id: str, min_ap50: float | None = None,
               aliases: str = ",".join(registry.DEFAULT_ALIASES), gpu: bool = False,
               dry_run: bool = False, container: str | None = None,
               checkpoint: str | None = None, rules: Challenge = Challenge(),
               keep_asked: float | None = None) -> str:
        return upload_model(self.cloud, run_id, min_ap50, aliases, gpu, dry_run, container,
                            checkpoint=checkpoint, rules=rules, keep_asked=keep_asked)

    def deploy(self, run_id: str, setup: ServingSetup, endpoint: str | None = None,
               dry_run: bool = False, max_cost: float | None = None,
               rules: Challenge = Challenge()) -> str:
        return deploy(self.cloud, run_id, _on(setup), endpoint, dry_run, max_cost, rules)

    def endpoints(self) -> str:
        return list_endpoints(self.cloud)

    def undeploy(self, endpoint: str, deployed_model: str) -> str:
        return undeploy(self.cloud, endpoint, deployed_model)

    def origins(self) -> str:
        return origins(self.cloud)

    def predict(self, endpoint: str, images: str, output_dir: str,
                score_threshold: float | None, max_pixels: int = MAX_PIXELS,
                forms: ResultForms = DETECTIONS_ONLY) -> str:
        return predict_online(self.cloud, endpoint, images, output_dir, score_threshold,
                              max_pixels, forms)

    def predict_batch(self, run_id: str, images: str, output_dir: str | None,
                      score_threshold: float | None, setup: ServingSetup,
                      timeout_hours: float | None = None, max_cost: float | None = None,
                      max_pixels: int = MAX_PIXELS, dry_run: bool = False,
                      forms: ResultForms = DETECTIONS_ONLY) -> str:
        return predict_batch(self.cloud, run_id, images, output_dir, score_threshold,
                             _on(setup), timeout_hours=timeout_hours, max_cost=max_cost,
                             max_pixels=max_pixels, dry_run=dry_run, forms=forms)

    # --- the continuous-training pipeline's steps (launch/features/pipeline/on_vertex.py) --

    @property
    def _region(self) -> ServingRegion:
        return ServingRegion.of(self.cloud)

    def _region_endpoints(self) -> list:
        region = self._region
        return list(region.endpoints().list_endpoints(parent=region.location))

    def _serving(self, experiment: str) -> aiplatform_v1.Model | None:
        """The experiment's version serving now anywhere in the region, if any."""
        region = self._region
        return registry.serving_version(region, region.model_name(experiment),
                                        self._region_endpoints())

    def trained_on(self, experiment: str, dataset: str) -> tuple[str | None, str | None]:
        held = self._serving(experiment)
        if held is None:
            return None, None
        found = registry.labelled_version(held.labels.get("dataset-version", ""))
        same = held.labels.get("dataset") == label_value(dataset)
        return registry.version_name(held), \
            found if same and datasets.VERSION.fullmatch(found) else None

    def champion(self, experiment: str, measure: champion.Measure,
                 vouched: frozenset[str] = frozenset()
                 ) -> tuple[tuple[str, int] | None, champion.Figure | None]:
        held = self._serving(experiment)
        origin = registry.run_and_step(held) if held else None
        figure = registry.champion_figure(self.cloud.storage(), held,
                                          lambda run: run_paths(self.cloud, run), measure,
                                          vouched) if origin else None
        return origin, figure if isinstance(figure, champion.Figure) else None

    def chosen_step(self, run_id: str) -> int:
        return registry.read_candidate(self.cloud.storage(),
                                       run_paths(self.cloud, run_id)).evaluation.step

    def challenge(self, run_id: str, experiment: str, step: int, rules: Challenge
                  ) -> champion.Verdict | None:
        return challenge(self.cloud, self._region, run_paths(self.cloud, run_id), experiment,
                         step, self._region_endpoints, rules, dry_run=False)

    def version_of(self, run_id: str) -> str:
        return registry.version_name(run_version(self.cloud, run_id))

    def _endpoint(self):
        """The endpoint `endpoint.deploy` deploys to by default (None before the first)."""
        region = self._region
        return find_endpoint(region.endpoints(), region, None, create=False)

    def deploy_canary(self, run_id: str, share: int, rules: Challenge,
                      say: Callable[[str], None]) -> str:
        before = self._endpoint()
        share = share if before is not None and before.deployed_models else 100
        say(self.deploy(run_id, ServingSetup(traffic=share), rules=rules))
        endpoint = self._endpoint()
        ours = [d.id for d in endpoint.deployed_models if d.display_name == label_value(run_id)]
        if not ours:
            raise MissingError(f"{endpoint.name} does not show run {run_id} deployed")
        return ours[-1]

    def promote(self, experiment: str, deployed: str, say: Callable[[str], None]) -> str:
        endpoint = self._endpoint()
        if endpoint is None or deployed not in {d.id for d in endpoint.deployed_models}:
            raise MissingError(f"endpoint {endpoints.DEFAULT_ENDPOINT} no longer has the "
                               f"canary {deployed}; not promoted")
        ours = registry.model_id(self._region.model_name(experiment))
        for other in [d.id for d in endpoint.deployed_models
                      if d.id != deployed and registry.model_id(d.model) == ours]:
            say(undeploy(self.cloud, endpoint.name, other))
        return f"{deployed} serves all of {experiment}'s traffic on {endpoint.name}"
