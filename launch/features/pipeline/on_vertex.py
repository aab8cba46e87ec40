"""The pipeline's steps on Vertex AI: the same decisions as the local target's (steps.py), on
the environment's own services, through the commands a person types today.

    the dataset's versions   the named dataset in the bucket (`dataset: NAME` in the job file)
    the serving version      the experiment's version taking the most traffic on the region's
                             endpoints; the dataset version it was trained on is its
                             `dataset-version` label (model.upload writes it)
    train, evaluate          the job file's Vertex AI jobs, launched as `invoke train/eval
                             --job` launches them (launching.py), followed by their state
                             until they end (the pipeline's account reads no logs)
    compare, upload, canary  the champion gate, `model.upload` and `endpoint.deploy`
    promote                  the experiment's other versions undeployed from the endpoint
                             (what serves and these: the job's target's `base.Serving`,
                             through the registry)
    decisions                gs://BUCKET/pipelines/state/NAME/decisions.json (NAME: the
                             pipeline's, state.py), each change written over the generation
                             it read (a second writer's change is read again, not lost)

A step's container has no infra/outputs.json: the environment's settings travel as the run's
`settings` parameter, resolved when the run was sent (runs.settings_of).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path

from launch import targets
from launch.context.clients import GoogleClients
from launch.context.cloud import Cloud, run_paths
from launch.context.settings import SETTINGS
from launch.errors import InputError, MissingError, StepFailed, reason
from launch.features.pipeline import decisions
from launch.features.pipeline import state as pipeline_state
from launch.targets import champion
from launch.targets.base import SERVING, Serving
from launch.targets.champion import Challenge, GateError
from launch.values import jobfile
from trainer.common.files import PIPELINES_PREFIX
from trainer.data import datasets
from trainer.model.experiments import EXPERIMENTS

# A decision written over a second writer's change is read again and written again, after a
# pause of a random 0 to 0.1 s, then 0 to 0.2, 0.4, ... (full jitter) up to 0 to 5 s, for at
# most WRITE_SECONDS: two runs' steps writing at once both land, without a busy loop
WRITE_BACKOFF = {"initial": 0.1, "maximum": 5.0, "multiplier": 2.0}
WRITE_SECONDS = 60.0
NOWHERE = Path("/nonexistent/outputs.json")  # the settings come with the run, not a file
ENVIRONMENT, REPOSITORIES = "environment", "image_repositories"  # beside the settings


def cloud_of(settings: str, clients: GoogleClients | None = None) -> Cloud:
    """The environment as the run carries it: its name, its settings ({"project": ...}) and
    the repositories its jobs' images may come from (comma-separated), each a string; on
    `clients` (default: Google's own, as a step makes them)."""
    try:
        values = json.loads(settings)
    except ValueError:
        raise InputError("settings: not the JSON `invoke pipeline.run` sends") from None
    known = (*SETTINGS, ENVIRONMENT, REPOSITORIES)
    if not isinstance(values, dict) or not all(
            key in known and isinstance(value, str) for key, value in values.items()):
        raise InputError(f"settings: give only the environment's settings as strings "
                         f"({', '.join(known)})")
    repositories = tuple(filter(None, values.pop(REPOSITORIES, "").split(",")))
    return Cloud(overrides=values, environ={}, outputs_path=NOWHERE,
                 repositories=repositories, clients=clients or GoogleClients())


@dataclasses.dataclass(frozen=True)
class VertexSteps:
    """The steps of one run: its environment (`cloud`), its job file and its state."""

    cloud: Cloud
    job: str  # the job file's text
    state: str  # gs://BUCKET/pipelines/state/NAME
    poll_seconds: float = 15.0  # between reads of a followed job's state
    write_seconds: float = WRITE_SECONDS  # the bound on writing a decision over others'

    @property
    def spec(self) -> jobfile.JobFile:
        return decisions.job_of(self.job)

    @property
    def serving(self) -> Serving:
        """The models the job's target serves (its registry, endpoints)."""
        return targets.offered(self.spec.target, SERVING, self.cloud)

    def dataset(self) -> str:
        """The named dataset the runs follow: its newest version is the one to train on."""
        reference = self.spec.dataset  # never empty: decisions.job_of refuses a file without one
        name, version = datasets.split_reference(reference, "dataset")
        if version:
            raise InputError(f"dataset: {reference[:80]} ({decisions.SOURCE}): the pipeline "
                             "follows a dataset's newest version; give its name alone")
        return name

    # --- the state: decisions in the bucket -------------------------------------------------

    def _object(self, name: str = pipeline_state.DECISIONS, folder: str | None = None):
        """A state object (`name` in the pipeline's state, or in `folder`): below
        gs://BUCKET/pipelines/, where the pipeline's account may write, and nowhere else."""
        bucket = self.cloud.fields(("bucket",))["bucket"]
        prefix = f"gs://{bucket}/{PIPELINES_PREFIX}/"
        path = self.state.removeprefix(f"gs://{bucket}/").strip("/")
        if not self.state.startswith(prefix) or ".." in path.split("/") or \
                not path.startswith(f"{PIPELINES_PREFIX}/"):
            raise InputError(f"state {self.state[:120]!r}: a folder below {prefix}, where the "
                             "pipeline's account writes")
        pipeline_state.name_of(path)  # the pipeline's own folder
        where = path if folder is None else folder
        return self.cloud.storage().bucket(bucket).blob(f"{where}/{name}")

    def check_named(self) -> None:
        """Refuses while the decisions of a pipeline from before pipelines were named sit
        in the state's parent folder (gs://BUCKET/pipelines/state/decisions.json): whose
        refusals they are is for a person to say."""
        parent = self.state.rstrip("/").rsplit("/", 1)[0]
        if self._object(folder=parent.split("/", 3)[3]).exists():
            raise pipeline_state.unnamed(parent, pipeline_state.name_of(self.state),
                                         [pipeline_state.DECISIONS])

    def _read(self) -> tuple[list[dict], int]:
        """The decisions and the generation they were read at (0: none yet), through the
        state's schema (state.parse)."""
        from google.api_core import exceptions

        blob = self._object()
        try:
            data = blob.download_as_bytes(end=pipeline_state.MAX_STATE_BYTES)
        except exceptions.NotFound:
            return [], 0
        except exceptions.GoogleAPICallError as error:
            raise StepFailed(f"{self.state}/{pipeline_state.DECISIONS}: "
                             f"{reason(error, 300)}") from None
        return (pipeline_state.parse(pipeline_state.DECISIONS, data,
                                     f"gs://{blob.bucket.name}/{blob.name}"),
                int(blob.generation))

    def decisions(self) -> list[dict]:
        return self._read()[0]

    def decide(self, **decision) -> None:
        """Appends a decision, over the generation read: a change made in between by another
        run is read again and kept (Cloud Storage's `ifGenerationMatch`, 0: a new object),
        after a pause that grows (WRITE_BACKOFF), for at most `write_seconds`."""
        from google.api_core import exceptions, retry

        entry = {"when": f"{datetime.datetime.now(datetime.UTC):%FT%TZ}", **decision}
        where = f"{self.state}/{pipeline_state.DECISIONS}"

        def attempt() -> None:
            made, generation = self._read()
            try:
                self._object().upload_from_string(
                    json.dumps([*made, entry], indent=2) + "\n",
                    content_type="application/json", if_generation_match=generation)
            except exceptions.PreconditionFailed:
                raise  # another writer's change: read again
            except exceptions.GoogleAPICallError as error:
                raise StepFailed(f"{where}: {reason(error, 300)}") from None

        try:
            retry.Retry(predicate=retry.if_exception_type(exceptions.PreconditionFailed),
                        timeout=self.write_seconds, **WRITE_BACKOFF)(attempt)()
        except exceptions.RetryError:
            raise StepFailed(f"{where} kept changing while this step wrote it (other writers, "
                             f"for up to {self.write_seconds:g} s); run the pipeline again"
                             ) from None

    # --- the steps --------------------------------------------------------------------------

    def resolve_dataset(self) -> str:
        """The dataset's newest version, when it is newer than the serving version's."""
        from launch.stores.gcs import datasets as bucket_datasets

        name = self.dataset()
        self.check_named()
        newest = bucket_datasets.resolve(self.cloud, name, "dataset").version
        held, trained_on = self.serving.trained_on(self.spec.experiment, name)
        go, version, why = decisions.fresh([newest], trained_on,
                                       decisions.refusals_in(self.decisions()))
        if go and held and not trained_on:  # not the pipeline's, nor from this dataset
            why = (f"{newest}: the serving version {held} names no version of dataset "
                   f"{name} (its dataset and dataset-version labels); it is set against the "
                   "run")
        self.decide(step="resolve dataset", go=go, version=version, reason=why)
        print(why, flush=True)
        return version

    def launch(self, task: str, **flags) -> str:
        """One of the job file's jobs, with `flags` over it, on this environment."""
        def cloud_for(job_region=None, job_image=None):
            overrides = {**self.cloud.overrides, **({"region": job_region} if job_region
                                                    else {}),
                         **({"image": job_image} if job_image else {})}
            return dataclasses.replace(self.cloud, overrides=overrides)

        return decisions.launch(self.job, task, cloud_for, follow=True,
                            poll_seconds=self.poll_seconds, **flags)

    def train(self, version: str) -> str:
        """The run training on `version` (gs://BUCKET/runs/RUN_ID), followed to its end; it
        evaluates its checkpoints on the validation split itself (--evaluate), so the
        checkpoint upload takes is chosen without a job of its own, and then that checkpoint
        on the test split (--test), so the gate's figure needs none either."""
        run_id = pipeline_state.run_id_for(self.state, version)
        print(self.launch(jobfile.TRAIN, dataset=self._on(version), run_id=run_id,
                          evaluate=True, test=True), flush=True)
        return run_id

    def _on(self, version: str) -> str:
        if not datasets.VERSION.fullmatch(version):
            raise InputError(f"{version[:80]!r} is not a dataset version")
        return f"{self.dataset()}@{version}"

    @property
    def measure(self) -> champion.Measure:
        return champion.Measure(EXPERIMENTS[self.spec.experiment].gate_metric)

    def _test_figure(self, run_id: str, step: int | None = None) -> champion.Figure:
        """The run's figure on the test split, of the checkpoint upload would choose (the
        serving's `chosen_step`, the best: `step` when the caller has just read it), with its
        record's sha256."""
        storage, paths = self.cloud.storage(), run_paths(self.cloud, run_id)
        step = self.serving.chosen_step(run_id) if step is None else step
        found = champion.read_figure(champion.test_record(storage, paths, step), run_id,
                                     self.measure)
        if isinstance(found, champion.Unreadable):
            raise MissingError(f"run {run_id}: {found.problem}")
        if found is None:
            raise MissingError(f"run {run_id} has no test evaluation of its ckpt-{step}")
        return found

    def _vouched(self) -> frozenset[str]:
        """The test records this pipeline's evaluate steps wrote (decisions.vouched_in)."""
        return decisions.vouched_in(self.decisions())

    def evaluate(self, run_id: str, version: str) -> float:
        """The run's chosen checkpoint on the test split of `version` (unless its training
        tested it: --test), then the serving version's on the same split unless it was
        measured on the same files already. A run whose training evaluated no checkpoint
        (one trained before --evaluate, or whose evaluation failed) has its final one
        evaluated on the validation split first: the registry takes an evaluated one."""
        try:
            step = self.serving.chosen_step(run_id)
        except GateError:  # not evaluated; anything else wrong is said by the second read
            step = None
        if step is None:
            print(self.launch(jobfile.EVAL, run_id=run_id, once=True,
                              dataset=self._on(version)), flush=True)
            step = self.serving.chosen_step(run_id)
        storage, paths = self.cloud.storage(), run_paths(self.cloud, run_id)
        if champion.test_record(storage, paths, step) is None:
            print(self.launch(jobfile.EVAL, run_id=run_id, split="test",  # not by training
                              dataset=self._on(version)), flush=True)
        tested = self._test_figure(run_id, step)
        written = [tested]
        origin, before = self.serving.champion(self.spec.experiment, self.measure,
                                               self._vouched())
        if origin and origin[0] != run_id:
            if before is None or champion.digest(before.data) != champion.digest(tested.data):
                print(self.launch(jobfile.EVAL, run_id=origin[0], split="test",
                                  dataset=self._on(version)), flush=True)
                again = champion.read_figure(champion.test_record(
                    self.cloud.storage(), run_paths(self.cloud, origin[0]), origin[1]),
                    origin[0], self.measure)
                written += [again] if isinstance(again, champion.Figure) else []
            else:
                print(f"the serving version (run {origin[0]}) was tested on the same files: "
                      "not evaluated again", flush=True)
        decisions.evaluated(run_id, written, self.decide)
        return tested.value

    def compare(self, run_id: str, max_drop: float) -> bool:
        """The champion gate, as `model.upload` applies it; the decision with both figures."""
        made = self.decisions()
        vouched = decisions.vouched_in(made)
        challenger = self._test_figure(run_id)
        _, defending = self.serving.champion(self.spec.experiment, self.measure, vouched)
        margin = champion.check_max_drop(max_drop)
        worse = champion.owned(challenger, vouched) and defending is not None and \
            challenger.value < defending.value - margin  # (steps.compare's reason)
        version = decisions.version_in(self.state, made, run_id)
        try:
            verdict = self.serving.challenge(run_id, self.spec.experiment, challenger.step,
                                             Challenge(margin, vouched=vouched))
        except GateError as refused:
            go, why = False, decisions.refusal(refused, run_id, version, worse, vertex=True)
        else:
            go, why = True, verdict.line if verdict else "this checkpoint serves already"
        self.decide(step="compare", go=go, worse=worse, run=run_id, version=version,
                    challenger=challenger.value,
                    champion=defending.value if defending else None, reason=why)
        print(why, flush=True)
        return go

    def upload(self, run_id: str, version: str, max_drop: float) -> dict:
        """`model.upload` of the run (its gate again, with the run's margin): the version
        and its lineage."""
        said = self.serving.upload(run_id, rules=Challenge(max_drop, vouched=self._vouched()))
        print(said, flush=True)
        model = self.serving.version_of(run_id)
        figure = self._test_figure(run_id)
        return {"model": model, "run_id": run_id,
                "step": figure.step, "dataset_version": version, "figure": figure.value,
                "data": figure.data}

    def deploy_canary(self, version: dict, share: int, max_drop: float) -> str:
        """`endpoint.deploy` of the version's run with `share` percent of the traffic (all
        of it on an endpoint serving nothing yet); the deployed model's id."""
        return self.serving.deploy_canary(version["run_id"], share, Challenge(
            max_drop, vouched=self._vouched()), say=_said)

    def promote(self, deployed: str) -> str:
        """The canary takes its experiment's traffic: the experiment's other versions leave
        the endpoint (their share goes to the ones left); another experiment's deployments
        stay."""
        return self.serving.promote(self.spec.experiment, deployed, say=_said)


def _said(line: str) -> None:
    print(line, flush=True)
