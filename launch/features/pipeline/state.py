"""A pipeline's name and its state files, read through one schema.

Any number of pipelines may follow one dataset in one environment: each is named (`invoke
pipeline.run --pipeline NAME`, by default its job file's experiment), and the name is the
last folder of its state (`work/pipeline/state/NAME`, `gs://BUCKET/pipelines/state/NAME`)
and part of its runs' ids (`ct-NAME-VERSION`), so two pipelines share no run, job file,
decision or refusal.

The state files are written by the pipeline, but they sit where people and other runs can
write too: each is read bounded and checked whole (`parse`), and a file that is not what the
pipeline writes is refused in one line naming it, never guessed at.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from launch.errors import InputError
from trainer.common import jsonnum
from trainer.common.errors import JsonError
from trainer.common.files import PIPELINE_RUN_PREFIX
from trainer.data import datasets

LINEAGE, ENDPOINT, DECISIONS = "lineage.json", "endpoint.json", "decisions.json"
FILES = (LINEAGE, ENDPOINT, DECISIONS)
MAX_STATE_BYTES = 4 << 20  # a decision is a few hundred bytes: years of runs
# a name is a label value and part of a run id: ct- + NAME + - + 25 characters of a version
# (20261201t000000z-0a1b2c3d) stays within a run id's 63
NAME = re.compile(r"[a-z][a-z0-9-]{0,29}")
RUN_ID = re.compile(rf"{PIPELINE_RUN_PREFIX}[0-9a-z-]{{1,60}}")  # run_id_for's (and older)
MODEL = re.compile(r"[0-9]{1,9}")  # a local version's number
SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_DATA = 2000  # a record's `data`: a pattern and its digest


@dataclasses.dataclass(frozen=True)
class Version:
    """One uploaded version and where it came from."""

    model: str  # its number in the registry
    run_id: str
    step: int
    dataset_version: str
    figure: float  # the gate metric on its test split
    data: str  # the test records it was measured on
    record: str = ""  # sha256 of the test record it was judged on ("": an older state's)


def check_name(name: str, shown: str = "--pipeline") -> str:
    """A pipeline's name, as given: a folder, a label value and part of its runs' ids."""
    if not NAME.fullmatch(name):
        raise InputError(f"{shown} {name[:80]!r}: give a pipeline name, a lowercase letter "
                         "then up to 29 lowercase letters, digits or '-'")
    return name


def name_for(given: str | None, experiment: str) -> str:
    """The pipeline's name: `given`, else its job file's experiment's
    (`pets_retinanet_mobilenet` -> `pets-retinanet-mobilenet`)."""
    if given is not None:
        return check_name(given)
    return check_name(experiment.replace("_", "-"), f"experiment {experiment} as a name "
                                                    "(give --pipeline NAME):")


def name_of(state: str | Path) -> str:
    """The pipeline a state belongs to: its last folder."""
    last = str(state).rstrip("/").rsplit("/", 1)[-1]
    if not NAME.fullmatch(last):
        raise InputError(f"state {str(state)[:120]!r}: its last folder is the pipeline's name; "
                         "`invoke pipeline.run --pipeline NAME` names it")
    return last


def run_id_for(state: str | Path, version: str) -> str:
    """The run that trains on `version` in this pipeline: one a version and pipeline, so a
    version is trained once by each pipeline following it."""
    return f"{PIPELINE_RUN_PREFIX}{name_of(state)}-{version.removeprefix('v-').lower()}"


def unnamed(root: str, name: str, found: list[str]) -> InputError:
    """The refusal of a state written before pipelines were named (its files at `root`)."""
    return InputError(f"{root}: {', '.join(found)} there are a pipeline's state from before "
                      f"pipelines were named; move them (and runs/, registry/) into "
                      f"{root.rstrip('/')}/{name}/ to go on as pipeline {name}, or move them "
                      "away")


def parse(file: str, data: bytes, where: str):
    """A state file's value: lineage.json a list of Versions, endpoint.json a split
    (version -> percent), decisions.json a list of objects (their fields are read where
    they are used, each checked there). InputError naming `where` for anything else."""
    try:
        value = jsonnum.loads(data, MAX_STATE_BYTES, where)
    except JsonError as error:
        raise _damaged(where, str(error).removeprefix(f"{where} ")) from None
    expected = dict if file == ENDPOINT else list
    if not isinstance(value, expected):
        raise _damaged(where, f"a JSON {type(value).__name__}, not a "
                              f"{expected.__name__}")
    if file == LINEAGE:
        return [_version(entry, n, where) for n, entry in enumerate(value, 1)]
    if file == ENDPOINT:
        return _split(value, where)
    if not all(isinstance(d, dict) for d in value):
        raise _damaged(where, "not a list of decisions")
    return value


def _damaged(where: str, problem: str) -> InputError:
    return InputError(f"{where}: not a state file this pipeline wrote ({problem}); move it "
                      "away, or restore it")


def _version(entry: object, n: int, where: str) -> Version:
    fields = [f.name for f in dataclasses.fields(Version)]
    if not isinstance(entry, dict) or not set(entry) <= set(fields) or \
            not set(entry) >= set(fields) - {"record"}:
        raise _damaged(where, f"its entry {n} is not a version: give it {', '.join(fields)}")
    checks = {"model": lambda v: isinstance(v, str) and MODEL.fullmatch(v),
              "run_id": lambda v: isinstance(v, str) and RUN_ID.fullmatch(v),
              "step": lambda v: type(v) is int and 0 <= v < 1 << 62,
              "dataset_version": lambda v: isinstance(v, str) and datasets.VERSION.fullmatch(v),
              "figure": lambda v: (x := jsonnum.number(v)) is not None and -1 <= x <= 1,
              "data": lambda v: isinstance(v, str) and len(v) <= MAX_DATA,
              "record": lambda v: isinstance(v, str) and (v == "" or SHA256.fullmatch(v))}
    for field, check in checks.items():
        if field in entry and not check(entry[field]):
            raise _damaged(where, f"its entry {n} is not a version: {field} is "
                                  f"{str(entry[field])[:40]!r}")
    return Version(**{**entry, "figure": float(entry["figure"])})


def _split(value: dict, where: str) -> dict[str, int]:
    for model, share in value.items():
        if not MODEL.fullmatch(model) or type(share) is not int or not 0 <= share <= 100:
            raise _damaged(where, f"{model[:20]!r}: {str(share)[:20]!r} is not a version's "
                                  "share, 0 to 100 percent")
    if sum(value.values()) > 100:
        raise _damaged(where, f"its shares add up to {sum(value.values())} percent")
    return value
