"""What each of the pipeline's components does (definition.py calls one function a step): the
launcher's own code, on the state a run keeps.

The state (`state`, a directory named after its pipeline: state.py) is where runs leave
what the next run reads:
    runs/ct-NAME-VERSION/  each run's model directory (checkpoints, evaluations, its export)
    registry/N/            the uploaded versions' exports
    lineage.json           each version: its run, checkpoint, dataset version, test figure
                           and the digest of the test record it was judged on
    endpoint.json          the traffic split over the versions deployed
    decisions.json         each run's two decisions: train or not, and the gate with figures
The job file's `data_dir` holds the dataset's versions, one directory each, named as named
datasets' versions are (`v-YYYYMMDDTHHMMSSZ-xxxxxxxx`, trainer/data/datasets.py), so the newest
sorts last. A job file for a target whose runs live in the bucket and that serves models
(Vertex AI: the registry says which) runs the same steps on its services (on_vertex.py):
each step function here takes the run's `settings` for them and hands such a job over.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
from pathlib import Path

from launch.errors import InputError, MissingError
from launch.features.pipeline import on_vertex as on_vertex_steps
from launch.features.pipeline import state as pipeline_state
from launch.features.pipeline.decisions import (
    evaluated,
    fresh,
    in_bucket,
    job_of,
    launch,
    refusal,
    refusals_in,
    version_in,
    vouched_in,
)
from launch.features.pipeline.state import (
    DECISIONS,
    ENDPOINT,
    LINEAGE,
    MAX_STATE_BYTES,
    RUN_ID,
    Version,
    parse,
    run_id_for,
)
from launch.targets import champion
from launch.targets.champion import GateError
from launch.targets.traffic import NEW, split_with_new
from launch.values import jobfile
from trainer.args import ExportArgs
from trainer.common import jsonnum
from trainer.common.errors import JsonError
from trainer.common.files import (
    EXPORT_INFO_FILE,
    MAX_RUN_JSON_BYTES,
    METRICS_FILE,
    TEST,
    TEST_METRICS_DIR,
    metrics_file,
    shard_glob,
)
from trainer.common.io import replace_text
from trainer.common.locks import taking_turns
from trainer.data import datasets
from trainer.model.eval_record import data_identity
from trainer.model.experiments import EXPERIMENTS

STATE_LOCK = ".state.lock"


NO_SETTINGS = "{}"  # the local target reads none; Vertex AI's steps the environment's


def on_vertex(job: str, state: str, settings: str):
    """The steps of a job file whose runs live in the bucket (on_vertex.py's), else None
    (the ones here)."""
    if not in_bucket(job_of(job).target):
        return None
    return on_vertex_steps.VertexSteps(on_vertex_steps.cloud_of(settings), job, state)


def versions(data_dir: str) -> list[str]:
    """The dataset's versions in `data_dir`, oldest first: directories named as versions,
    not links (a link would train on data from outside the dataset's directory)."""
    root = Path(data_dir)
    if not root.is_dir():
        raise MissingError(f"data_dir {data_dir}: no such directory of dataset versions")
    return sorted(p.name for p in root.iterdir()
                  if datasets.VERSION.fullmatch(p.name) and p.is_dir() and not p.is_symlink())


def _state_file(state: str, name: str, empty):
    """A state file's value (`empty` when there is none yet), through the state's schema
    (state.parse): a damaged one is refused in one line, not guessed at, since the next
    decision would be made on it."""
    path = Path(state, name)
    if not path.exists():
        return empty
    try:
        data = jsonnum.read_bytes(path, MAX_STATE_BYTES)
    except JsonError as error:
        raise InputError(f"{error}: not a state file this pipeline wrote; move it away, or "
                         "restore it") from None
    return parse(name, data, str(path))


def lineage(state: str) -> list[Version]:
    return _state_file(state, LINEAGE, [])


def traffic(state: str) -> dict[str, int]:
    return _state_file(state, ENDPOINT, {})


def serving(state: str) -> Version | None:
    """The version with the most of the endpoint's traffic, if any serves."""
    split = traffic(state)
    if not split:
        return None
    busiest = max(split, key=lambda model: (split[model], int(model)))
    found = next((v for v in lineage(state) if v.model == busiest), None)
    if found is None:
        raise MissingError(f"{Path(state, ENDPOINT)} serves version {str(busiest)[:20]!r}, "
                           f"which {LINEAGE} does not name; restore the state's files")
    return found


def origins(root: str) -> str:
    """Each pipeline's uploaded versions (the pipelines' states below `root`), newest first:
    its share of the endpoint, its run and checkpoint, its test figure and the dataset
    version it was trained on."""
    if not Path(root).is_dir():
        raise MissingError(f"--state {root}: no pipeline state here; `invoke pipeline.run "
                           "--job FILE` makes one")
    if found := unnamed_files(root):
        raise pipeline_state.unnamed(root, "NAME", found)
    lines = []
    for state in sorted(p for p in Path(root).iterdir()
                        if pipeline_state.NAME.fullmatch(p.name) and p.is_dir()):
        split = traffic(str(state))
        lines += [f"{state.name}: version {v.model} ({split.get(v.model, 0)}% of the "
                  f"endpoint) <- run {v.run_id} ckpt-{v.step} ({v.figure:.3f} on {v.data}) "
                  f"<- dataset version {v.dataset_version}"
                  for v in reversed(lineage(str(state)))]
    return "\n".join(lines) or f"{root}: no version uploaded yet"


def unnamed_files(root: str) -> list[str]:
    """The state files directly in `root`: a state from before pipelines were named."""
    return [name for name in pipeline_state.FILES if Path(root, name).exists()]


def _write(state: str, name: str, value) -> None:
    """A state file, whole or not at all (trainer.common.io.replace_text)."""
    replace_text(str(Path(state, name)), json.dumps(value, indent=2) + "\n")


def on_version(job: jobfile.JobFile, version: str) -> jobfile.JobFile:
    """The job reading one version of the dataset (its directory below data_dir)."""
    if not datasets.VERSION.fullmatch(version):
        raise InputError(f"{version[:80]!r} is not a dataset version")
    return dataclasses.replace(job, data_dir=str(Path(job.data_dir, version)))


def run_dir(state: str, run_id: str) -> Path:
    """A run's directory in the state: only a run id this pipeline makes (run_id_for)."""
    if not RUN_ID.fullmatch(run_id):
        raise InputError(f"{run_id[:80]!r} is not a run of this pipeline (ct-VERSION)")
    return Path(state, "runs", run_id)


def decisions(state: str) -> list[dict]:
    return _state_file(state, DECISIONS, [])


def decide(state: str, **decision) -> None:
    """Appends a decision to the state's record, with when it was made."""
    with turn(state):
        _write(state, DECISIONS, [*decisions(state), {
            "when": f"{datetime.datetime.now(datetime.UTC):%FT%TZ}", **decision}])


def turn(state: str):
    """The state's writers take turns (two runs at once, a run and a person): each change
    reads the state and writes it back whole, so none is lost."""
    return taking_turns(state, STATE_LOCK)


def resolve_dataset(job: str, state: str, settings: str = NO_SETTINGS) -> str:
    """The version to train on, or "" when none is newer than the serving model's."""
    if vertex := on_vertex(job, state, settings):
        return vertex.resolve_dataset()
    held = serving(state)
    go, version, reason = fresh(versions(job_of(job).data_dir),
                                held.dataset_version if held else None,
                                refusals_in(decisions(state)))
    decide(state, step="resolve dataset", go=go, version=version, reason=reason)
    print(reason, flush=True)
    return version


def train(job: str, state: str, version: str, settings: str = NO_SETTINGS) -> str:
    """Trains on `version` into a new run, as `invoke train --job` does, then tests the
    checkpoint it chose on the test split in the same process (--test); the run's id."""
    if vertex := on_vertex(job, state, settings):
        return vertex.train(version)
    spec = job_of(job)
    run_id = run_id_for(state, version)
    on_version(spec, version)  # checked before any directory is named by it
    print(launch(job, jobfile.TRAIN, data_dir=str(Path(spec.data_dir, version)),
                 model_dir=str(run_dir(state, run_id)), test=True), flush=True)
    return run_id


def evaluate(job: str, state: str, run_id: str, version: str, settings: str = NO_SETTINGS
             ) -> float:
    """The run's best checkpoint on the test split of `version` (its data), unless its
    training tested it already (--test), and the serving version's on the same split unless
    it was measured on the same files already (a test split kept from one version to the
    next) and its record there is one the gate may trust (_defending), so the comparison is
    of one test; the sha256 of the records written goes to the state (`evaluated`). The
    run's figure."""
    if vertex := on_vertex(job, state, settings):
        return vertex.evaluate(run_id, version)
    spec = job_of(job)
    on_version(spec, version)
    data = Path(spec.data_dir, version)
    held = serving(state)
    measure = champion.Measure(EXPERIMENTS[spec.experiment].gate_metric)
    defending = _defending(state, held, measure, vouched_in(decisions(state))) if held \
        else None  # the figure the gate will read; not trusted: measured again
    again = [held.run_id] if held and not _measured_on(defending, data) else []
    untested = [] if _record(state, run_id) else [run_id]  # its training tested it (--test)
    for each in [*untested, *again]:  # as `invoke eval --split test` evaluates a run
        print(launch(job, jobfile.EVAL, split="test", data_dir=str(data),
                     model_dir=str(run_dir(state, each))), flush=True)
    if held and not again:
        print(f"the serving version (run {held.run_id}) was tested on the same files: not "
              "evaluated again", flush=True)
    tested = _figure(state, run_id, spec.experiment)
    written = [tested, *(_figure(state, held.run_id, spec.experiment, held.step)
                         for _ in again)]
    evaluated(run_id, written, lambda **made: decide(state, **made))
    return tested.value


def _measured_on(figure: champion.Figure | champion.Unreadable | None, data: Path) -> bool:
    """Whether `figure` (the serving version's, as the gate reads it: _defending) is one to
    trust and was measured on the same files as `data`'s test split (their names and sizes:
    trainer.model.eval_record.data_identity)."""
    here = data_identity(str(data / shard_glob(TEST)))
    return isinstance(figure, champion.Figure) and \
        champion.digest(figure.data) == champion.digest(here)


def _record(state: str, run_id: str, step: int | None = None) -> champion.TestRecord | None:
    """The run's test evaluation of ckpt-`step` (default: its newest), read as the gate
    reads one (bounded, with its sha256); None when there is none."""
    folder = run_dir(state, run_id) / TEST_METRICS_DIR
    if step is None:
        found = [int(m[1]) for p in folder.glob("ckpt-*.json")
                 if (m := METRICS_FILE.fullmatch(p.name))]
        if not found:
            return None
        step = max(found)
    path = folder / metrics_file(step)
    if not path.exists():
        return None
    try:
        data = jsonnum.read_bytes(path, MAX_RUN_JSON_BYTES)
    except JsonError as error:
        return champion.TestRecord(str(path), "", None, str(error).removeprefix(f"{path} "))
    return champion.read_record(data, step, str(path))


def _figure(state: str, run_id: str, experiment: str, step: int | None = None
            ) -> champion.Figure:
    """The run's figure on the test split (of ckpt-`step`, default its newest evaluation);
    a run without one, or whose record cannot be read, stops the step in one line."""
    measure = champion.Measure(EXPERIMENTS[experiment].gate_metric)
    found = champion.read_figure(_record(state, run_id, step), run_id, measure)
    if isinstance(found, champion.Unreadable):
        raise MissingError(f"run {run_id}: {found.problem}")
    if found is None:
        raise MissingError(f"run {run_id} has no test evaluation with its data named")
    return found


def _defending(state: str, held: Version, measure: champion.Measure,
               vouched: frozenset[str]) -> champion.Figure | champion.Unreadable | None:
    """The serving version's figure: its record of the checkpoint it was uploaded from,
    which must be the one it was judged on (its lineage's `record`) or one this pipeline's
    evaluate step wrote (champion.vouch)."""
    found = champion.read_figure(_record(state, held.run_id, held.step), held.run_id, measure)
    return champion.vouch(found, held.record, champion.data_label(held.data), vouched)


def compare(job: str, state: str, run_id: str, max_drop: float,
            settings: str = NO_SETTINGS) -> bool:
    """The champion gate (launch/targets/champion.py): whether the run goes on; the
    decision, with both figures, in the state."""
    if vertex := on_vertex(job, state, settings):
        return vertex.compare(run_id, max_drop)
    spec = job_of(job)
    measure = champion.Measure(EXPERIMENTS[spec.experiment].gate_metric)
    made = decisions(state)
    vouched = vouched_in(made)
    challenger = _figure(state, run_id, spec.experiment)
    held = serving(state)
    defending = _defending(state, held, measure, vouched) if held else None
    margin = champion.check_max_drop(max_drop)
    held_figure = defending if isinstance(defending, champion.Figure) else None
    # a figure the gate refuses to trust (rewritten since) says nothing of the model
    worse = champion.owned(challenger, vouched) and held_figure is not None and \
        challenger.value < held_figure.value - margin
    version = version_in(state, made, run_id)
    try:
        champion.own(challenger, vouched)
        verdict = champion.judge(measure, challenger, defending,
                                 f"version {held.model}" if held else None, margin, None,
                                 run_id, challenger.step, held.run_id if held else "RUN")
    except GateError as refused:  # worse, other data, a record not to be trusted: stop
        go, reason = False, refusal(refused, run_id, version, worse, vertex=False)
    else:
        go, reason = True, verdict.line
    decide(state, step="compare", go=go, worse=worse, run=run_id, version=version,
           challenger=challenger.value, champion=held_figure.value if held_figure else None,
           reason=reason)
    print(reason, flush=True)
    return go


def upload(job: str, state: str, run_id: str, version: str, max_drop: float = 0.0,
           settings: str = NO_SETTINGS) -> dict:
    """The checkpoint the test split measured, exported (encoded files in, as Vertex AI
    serves) as the registry's next version; its lineage (Version's fields). Only a run the
    gate passed pays for an export. On Vertex AI, `model.upload` with its gate again
    (`max_drop`)."""
    from launch.features.workflow import export

    if vertex := on_vertex(job, state, settings):
        return vertex.upload(run_id, version, max_drop)
    spec = job_of(job)
    figure = champion.own(_figure(state, run_id, spec.experiment),
                          vouched_in(decisions(state)))  # the record the gate passed
    _next_version(state, lineage(state))  # refused before the export; again in the turn
    staged = Path(state, "registry", f".export-{run_id}")  # outside the turns: minutes long
    shutil.rmtree(staged, ignore_errors=True)  # an earlier attempt's
    try:
        export(ExportArgs(model_dir=str(run_dir(state, run_id)), export_dir=str(staged),
                          checkpoint=str(figure.step), default_signature="bytes"))
        if not (staged / EXPORT_INFO_FILE).is_file():
            raise MissingError(f"run {run_id}: its export to {staged} wrote no "
                               f"{EXPORT_INFO_FILE}")
        with turn(state):  # one number a version, however many runs upload at once
            known = lineage(state)
            directory = _next_version(state, known)
            model = directory.name
            staged.rename(directory)
            entry = Version(model, run_id, figure.step, version, figure.value, figure.data,
                            figure.sha256)
            _write(state, LINEAGE, [dataclasses.asdict(v) for v in (*known, entry)])
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return dataclasses.asdict(entry)


def _next_version(state: str, known: list[Version]) -> Path:
    """The registry's directory for the version after `known`, which must not exist yet."""
    number = max((int(v.model) for v in known if v.model.isdigit()), default=0) + 1
    directory = Path(state, "registry", str(number))
    if directory.exists():  # no lineage names it: a person's, or a damaged state
        raise InputError(f"{directory} exists but lineage.json does not name it: move it away "
                         "and run the pipeline again")
    return directory


def deploy_canary(job: str, state: str, version: dict, share: int, max_drop: float = 0.0,
                  settings: str = NO_SETTINGS) -> str:
    """The version (upload's lineage) takes `share` percent; the versions deployed share
    the rest. What promote is handed: the deployed version."""
    if vertex := on_vertex(job, state, settings):
        return vertex.deploy_canary(version, share, max_drop)
    model = str(version["model"])
    with turn(state):
        split = traffic(state)
        new = split_with_new(split, share if split else 100)
        _write(state, ENDPOINT, {(model if k == NEW else k): v
                                 for k, v in new.items()})
    return model


def promote(job: str, state: str, deployed: str, settings: str = NO_SETTINGS) -> str:
    """The canary takes all the traffic; the versions before it leave the endpoint."""
    if vertex := on_vertex(job, state, settings):
        return vertex.promote(deployed)
    with turn(state):
        _write(state, ENDPOINT, {deployed: 100})
    return f"version {deployed} serves all traffic ({datetime.datetime.now(datetime.UTC):%F})"
