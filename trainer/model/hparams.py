"""A tuning trial's values, and how the trainer reports its result.

A sweep varies config paths of the experiment, or friendly names for the common ones. A
trial's values reach the trainer as `--ID=VALUE` flags (Vertex AI appends one per parameter
to the job's command): the ID is a friendly name, or a config path with `__` for its dots
(`task__model__head__num_convs`). They apply after every other override.

The result goes where Vertex AI's tuning service reads it, the cloudml-hypertune contract: a
file of JSON lines at $CLOUD_ML_HP_METRIC_FILE (default /tmp/hypertune/output.metrics), each
`{"timestamp": T, "trial": ID, METRIC: "VALUE", "global_step": "STEP"}`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence

from trainer.common import yamlfile
from trainer.common.errors import SettingsError
from trainer.common.files import HYPERTUNE_METRIC_FILE

PARAMETERS = {
    "learning_rate": "trainer.optimizer_config.learning_rate.cosine.initial_learning_rate",
    "warmup_steps": "trainer.optimizer_config.warmup.linear.warmup_steps",
    "batch_size": "task.train_data.global_batch_size",
    "input_size": "task.model.input_size",  # a square side: S becomes [S, S, 3]
}
# Config fields the trainer sets from its flags, which no override may change: the data a
# run reads is the one its job names (a dataset's listed shards, the records it checked) and
# the checkpoint it restores the one --init-from names, whatever a stored job file holds.
OWNED_BY_FLAGS = {
    "task.train_data.input_path": "--data-dir or --dataset",
    "task.validation_data.input_path": "--data-dir or --dataset",
    "task.init_checkpoint": "--init-from",
    "task.init_checkpoint_modules": "--init-type",
}
SEGMENT = re.compile(r"[a-z_][a-z0-9_]*")
METRIC_FILE_ENV, DEFAULT_METRIC_FILE = "CLOUD_ML_HP_METRIC_FILE", \
    f"/tmp/{HYPERTUNE_METRIC_FILE}"
METRIC_TAG_ENV, TRIAL_ENV = "CLOUD_ML_HP_METRIC_TAG", "CLOUD_ML_TRIAL_ID"


def config_path(name: str) -> str | None:
    """A friendly name, a dotted path, or a trial ID (`a__b`) -> the config path; None when
    it is none of those."""
    if name in PARAMETERS:
        return PARAMETERS[name]
    segments = name.replace("__", ".").split(".")
    if len(segments) > 1 and all(SEGMENT.fullmatch(s) for s in segments):
        return ".".join(segments)
    return None


def parameter_id(name: str) -> str:
    """The flag a trial passes `name` as."""
    return name.replace(".", "__")


def override(name: str, value) -> dict:
    """The params override that sets parameter `name` to `value`."""
    path = config_path(name)
    if path is None:
        raise SettingsError(f"{name!r} is not a tunable parameter: use one of "
                            f"{', '.join(PARAMETERS)} or a config path")
    if name == "input_size":
        value = [int(value), int(value), 3]
    tree: dict = {}
    node = tree
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return tree


def overrides(values: Mapping[str, object]) -> dict:
    """Parameters by name (friendly names or config paths) -> one params override."""
    merged: dict = {}
    for name, value in values.items():
        _merge(merged, override(name, value))
    return merged


def trial_override(values: Sequence[str]) -> dict:
    """`ID=VALUE` strings -> one params override (values read as YAML scalars)."""
    parsed: dict = {}
    for item in values:
        name, sep, text = item.partition("=")
        if not sep:
            raise SettingsError(f"--hparam {item!r}: use ID=VALUE")
        parsed[name] = yamlfile.scalar(text, f"--hparam {item[:100]!r}", SettingsError)
    return overrides(parsed)


def _merge(into: dict, tree: Mapping) -> None:
    for key, value in tree.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def fit_types(tree: Mapping, current: Mapping) -> dict:
    """Whole floats where the config holds an integer: Vertex AI passes a DISCRETE value
    as a double (`--batch_size=16.0`), and Model Garden would keep the float."""
    fitted = {}
    for key, value in tree.items():
        now = current.get(key) if isinstance(current, Mapping) else None
        if isinstance(value, Mapping):
            fitted[key] = fit_types(value, now if isinstance(now, Mapping) else {})
        elif isinstance(value, float) and value.is_integer() and isinstance(now, int) and \
                not isinstance(now, bool):
            fitted[key] = int(value)
        else:
            fitted[key] = value
    return fitted


def trial_flags(argv: Sequence[str], known: set[str]) -> list[str]:
    """`--ID=VALUE` flags that are not options of ours but name a tunable parameter become
    `--hparam=ID=VALUE`; everything else is left for the parser to judge."""
    out = []
    for arg in argv:
        name, sep, _ = arg.removeprefix("--").partition("=")
        if arg.startswith("--") and sep and name not in known and config_path(name):
            out.append(f"--hparam={arg[2:]}")
        else:
            out.append(arg)
    return out


def is_trial(env: Mapping[str, str]) -> bool:
    """Vertex AI sets the trial id (and the metric's tag) in a tuning trial's job."""
    return TRIAL_ENV in env or METRIC_TAG_ENV in env


def report(metrics: Mapping[str, float], step: int,
           env: Mapping[str, str] = os.environ) -> str:
    """Writes a trial's final metrics for Vertex AI's tuning service; returns the file.
    With $CLOUD_ML_HP_METRIC_TAG set, that metric alone; otherwise every metric, each under
    its own name."""
    tag = env.get(METRIC_TAG_ENV)
    chosen = {tag: metrics[tag]} if tag in metrics else dict(metrics)
    line = {"timestamp": time.time(), "trial": str(env.get(TRIAL_ENV, 0)),
            "global_step": str(int(step)), **{k: str(float(v)) for k, v in chosen.items()}}
    path = env.get(METRIC_FILE_ENV, DEFAULT_METRIC_FILE)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as out:  # the library rewrites the whole file each report
        out.write(json.dumps(line, sort_keys=True) + "\n")
    return path


def read_report(path: str, metric: str) -> tuple[float, int] | None:
    """The last value of `metric` in a metrics file (and its step), as the tuning service
    reads it; None when the file or the metric is missing or unreadable."""
    try:
        with open(path) as lines:
            records = [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError):
        return None
    for record in reversed(records):
        if isinstance(record, dict) and metric in record:
            try:
                return float(record[metric]), int(record.get("global_step", 0))
            except (TypeError, ValueError):
                return None
    return None
