"""A hyperparameter sweep as data: what to vary, what to optimise, how many trials.

Written as a YAML file or as repeated `--param` flags, and checked here before anything is
built or sent: an unknown parameter, an empty range, a metric the evaluator does not write,
more parallel trials than trials. The same `Sweep` becomes a Vertex AI study spec or a local
Optuna study.

    metric: AP50            # any of METRICS
    goal: maximize
    trials: 12
    parallel: 3
    algorithm: bayesian     # bayesian | random | grid
    params:
      learning_rate: {low: 1e-4, high: 1e-2, log: true}
      batch_size: [8, 16, 32]
      task.model.head.num_convs: {low: 1, high: 4}
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from launch.errors import InputError
from launch.values.files import read_page
from trainer.common import yamlfile
from trainer.common.options import number
from trainer.model import hparams
from trainer.model.experiments import AP_METRICS, AR_METRICS, GOALS, MASK_AP_METRICS
from trainer.model.hparams import PARAMETERS

METRICS = (*AP_METRICS, *AR_METRICS, *MASK_AP_METRICS)  # what the evaluator writes
ALGORITHMS = ("bayesian", "random", "grid")
MAX_TRIALS = 1000
MAX_SWEEP_FILE_BYTES = 1 << 20


class SweepError(InputError):
    """A sweep that cannot run; the message names the field and what would work."""


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter: a range (`low`..`high`, integers or reals, optionally log-scaled) or a
    list of values (numbers or words)."""

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    values: tuple = ()

    def __post_init__(self) -> None:
        if "__" in self.name or hparams.config_path(self.name) is None:
            raise SweepError(f"parameter {self.name!r} is neither one of "
                             f"{', '.join(PARAMETERS)} nor a dotted config path (e.g. "
                             "task.model.head.num_convs)")
        if self.values:
            if self.low is not None or self.high is not None:
                raise SweepError(f"{self.name}: give a range or values, not both")
            if len(set(self.values)) != len(self.values):
                raise SweepError(f"{self.name}: values {list(self.values)} repeat")
            for value in self.values:
                if isinstance(value, bool) or not isinstance(value, (int, float, str)) or \
                        (isinstance(value, float) and not math.isfinite(value)):
                    raise SweepError(f"{self.name}: {value!r} is not a number or a word")
            return
        if self.low is None or self.high is None:
            raise SweepError(f"{self.name}: give low and high, or a list of values")
        if not self.low < self.high:
            raise SweepError(f"{self.name}: the range {self.low}..{self.high} is empty; "
                             "low must be below high")
        if self.log and self.low <= 0:
            raise SweepError(f"{self.name}: a log scale needs low > 0, got {self.low}")

    @property
    def is_range(self) -> bool:
        return not self.values

    @property
    def config_path(self) -> str:
        return hparams.config_path(self.name)

    @property
    def parameter_id(self) -> str:
        """The name Vertex AI passes the trial's value under (`--ID=VALUE`)."""
        return hparams.parameter_id(self.name)

    def override(self, value) -> dict:
        """The params override that sets this parameter to `value`."""
        return hparams.override(self.name, value)

    def as_spec(self) -> list | dict:
        """What a sweep file says for this parameter."""
        if self.values:
            return list(self.values)
        return {"low": self.low, "high": self.high, "log": self.log}


@dataclasses.dataclass(frozen=True)
class Sweep:
    params: tuple[Param, ...]
    metric: str = "AP"
    goal: str = "maximize"
    trials: int = 10
    parallel: int = 1
    algorithm: str = "bayesian"

    def __post_init__(self) -> None:
        if not self.params:
            raise SweepError("a sweep needs at least one parameter (--param NAME=LOW:HIGH)")
        names = [p.name for p in self.params]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise SweepError(f"parameters named twice: {', '.join(duplicates)}")
        if self.metric not in METRICS:
            raise SweepError(f"metric {self.metric!r} is not one the evaluator writes; use "
                             f"one of {', '.join(METRICS)}")
        if self.goal not in GOALS:
            raise SweepError(f"goal {self.goal!r}: use maximize or minimize")
        if self.algorithm not in ALGORITHMS:
            raise SweepError(f"algorithm {self.algorithm!r}: use one of "
                             f"{', '.join(ALGORITHMS)}")
        for name, value in (("trials", self.trials), ("parallel", self.parallel)):
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not 1 <= value <= MAX_TRIALS:
                raise SweepError(f"{name} must be a whole number from 1 to {MAX_TRIALS}, "
                                 f"got {value!r}")
        if self.parallel > self.trials:
            raise SweepError(f"parallel ({self.parallel}) is more than trials "
                             f"({self.trials})")
        if self.algorithm == "grid" and (ranges := [
                p.name for p in self.params if p.is_range and not p.integer]):
            raise SweepError(f"a grid needs values or integer ranges; {', '.join(ranges)} "
                             "is a real range: list its values")

    @classmethod
    def from_mapping(cls, data: Mapping) -> Sweep:
        if not isinstance(data, Mapping):
            raise SweepError("a sweep file is a mapping: metric, goal, trials, parallel, "
                             "algorithm, params")
        unknown = set(data) - {"metric", "goal", "trials", "parallel", "algorithm", "params"}
        if unknown:
            raise SweepError(f"unknown sweep fields: {', '.join(sorted(map(str, unknown)))}")
        params = data.get("params") or {}
        if not isinstance(params, Mapping):
            raise SweepError("params is a mapping: NAME: {low, high[, log]} or NAME: [values]")
        fields = {k: data[k] for k in ("metric", "goal", "trials", "parallel", "algorithm")
                  if k in data}
        return cls(tuple(_param(str(name), spec) for name, spec in params.items()), **fields)

    @classmethod
    def from_yaml(cls, text: str) -> Sweep:
        return cls.from_mapping(yamlfile.loads(text, "the sweep file", SweepError) or {})

    def as_mapping(self) -> dict:
        """The sweep file of this sweep: `Sweep.from_mapping(s.as_mapping()) == s`."""
        return {"metric": self.metric, "goal": self.goal, "trials": self.trials,
                "parallel": self.parallel, "algorithm": self.algorithm,
                "params": {p.name: p.as_spec() for p in self.params}}


def _param(name: str, spec) -> Param:
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        if not all(isinstance(value, (int, float, str)) for value in spec):
            raise SweepError(f"{name}: list numbers, true/false or text, not {spec!r}"[:200])
        return Param(name, values=tuple(spec))
    if not isinstance(spec, Mapping):
        raise SweepError(f"{name}: give {{low: .., high: ..[, log: true]}} or a list of "
                         f"values, not {spec!r}")
    unknown = set(spec) - {"low", "high", "log"}
    if unknown:
        raise SweepError(f"{name}: unknown keys {', '.join(sorted(map(str, unknown)))}")
    low, high = (_number(name, key, spec.get(key)) for key in ("low", "high"))
    return Param(name, low, high, log=spec.get("log") is True,
                 integer=isinstance(low, int) and isinstance(high, int))


def _number(name: str, key: str, value: Any) -> int | float | None:
    """A range's bound as typed (YAML reads `1e-4` as text) through the one number reader
    (trainer.common.options), naming the parameter and the key; whole as written (`4`: an integer
    range), None when not given."""
    if value is None:
        return None
    whole = isinstance(value, int) or (isinstance(value, str) and WHOLE.fullmatch(value))
    return number(value, int if whole else float, f"{name}: {key}", fault=SweepError)


WHOLE = re.compile(r"[+-]?\d+")
FLAG = re.compile(r"(?P<name>[^=]+)=(?P<spec>.+)")


def parse_flag(flag: str) -> Param:
    """`NAME=LOW:HIGH[:log]` (integers if both bounds are) or `NAME=a,b,c`."""
    match = FLAG.fullmatch(flag.strip())
    if not match:
        raise SweepError(f"--param {flag!r}: use NAME=LOW:HIGH[:log] or NAME=a,b,c")
    name, spec = match["name"].strip(), match["spec"].strip()
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
            raise SweepError(f"--param {flag!r}: a range is LOW:HIGH or LOW:HIGH:log")
        return _param(name, {"low": parts[0], "high": parts[1], "log": len(parts) == 3})
    return Param(name, values=tuple(_value(v.strip()) for v in spec.split(",")))


def _value(text: str):
    try:
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
    except ValueError:
        return text


def load(path: str | None, flags: Iterable[str] = (), base: Mapping | None = None,
         **fields) -> Sweep:
    """`invoke tune`'s sweep: `base` (a job file's), the sweep file (if any) over it, then
    `--param` flags, then the fields given as flags (None: the file's or the default)."""
    data: dict = dict(base or {})
    if path:
        text = read_page(path, "--sweep", MAX_SWEEP_FILE_BYTES, SweepError)
        file = yamlfile.loads(text, f"--sweep {path}", SweepError) or {}
        if not isinstance(file, Mapping):
            return Sweep.from_mapping(file)  # says what is wrong with it
        data.update(file)
    flags = list(flags)
    if flags and isinstance(data.get("params") or {}, Mapping):
        data["params"] = {**(data.get("params") or {}),
                          **{p.name: p.as_spec() for p in map(parse_flag, flags)}}
    data.update({k: v for k, v in fields.items() if v is not None})
    return Sweep.from_mapping(data)
