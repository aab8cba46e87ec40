"""Chooses the tf.distribute strategy and numeric precision from where the trainer runs.

Pure functions decide (so they are tested without devices); `build_strategy` does the I/O.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from trainer.args import STRATEGIES
from trainer.common.errors import ClusterSpecError

# Vertex AI worker pools -> TF_CONFIG task types. Pool 2 holds parameter or reduction servers,
# which MultiWorkerMirroredStrategy does not address, so it is left out of the cluster.
VERTEX_POOL_ROLES = {"workerpool0": "chief", "workerpool1": "worker", "workerpool3": "evaluator"}


@dataclasses.dataclass(frozen=True)
class TpuSlice:
    """Which host of a TPU VM slice this is. On a multi-host slice (v5litepod-16 and up)
    every host runs the container; the TPU runtime names the hosts in TPU_WORKER_HOSTNAMES
    and this one's index in TPU_WORKER_ID."""

    index: int = 0
    hosts: int = 1

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


SINGLE_HOST = TpuSlice()


def tf_config_from_cluster_spec(cluster_spec: Mapping) -> dict:
    """Vertex AI's CLUSTER_SPEC (`workerpoolN` names) -> a TF_CONFIG dict."""
    try:
        cluster = {VERTEX_POOL_ROLES[pool]: list(addresses)
                   for pool, addresses in cluster_spec["cluster"].items()
                   if pool in VERTEX_POOL_ROLES and addresses}
        task = cluster_spec["task"]
        role = VERTEX_POOL_ROLES.get(task["type"], task["type"])
        return {"cluster": cluster, "task": {"type": role, "index": int(task["index"])}}
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise ClusterSpecError(f"CLUSTER_SPEC is not Vertex AI's format ({error!r})") from None


def cluster_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment additions: TF_CONFIG derived from CLUSTER_SPEC when only the latter is set."""
    if "TF_CONFIG" in env or "CLUSTER_SPEC" not in env:
        return {}
    try:
        spec = json.loads(env["CLUSTER_SPEC"])
    except json.JSONDecodeError as error:
        raise ClusterSpecError(f"CLUSTER_SPEC is not JSON ({error})") from None
    return {"TF_CONFIG": json.dumps(tf_config_from_cluster_spec(spec))}


def tf_config(env: Mapping[str, str]) -> dict:
    raw = env.get("TF_CONFIG") or cluster_env(env).get("TF_CONFIG")
    return json.loads(raw) if raw else {}


def num_workers(config: Mapping) -> int:
    """Training workers in a TF_CONFIG (chief and workers; evaluators do not train)."""
    cluster = config.get("cluster", {})
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def is_chief(config: Mapping, slice_: TpuSlice = SINGLE_HOST) -> bool:
    """The one replica (and the one host of a TPU slice) that writes summaries, the run's
    files and the export."""
    if slice_.index != 0:
        return False
    task = config.get("task", {})
    if not task:
        return True
    if "chief" in config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type") == "worker" and task.get("index", 0) == 0


def tpu_slice(env: Mapping[str, str]) -> TpuSlice:
    hostnames = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    raw = env.get("TPU_WORKER_ID", "").strip() or "0"
    if not raw.isdigit() or int(raw) >= max(len(hostnames), 1):
        raise ClusterSpecError(f"TPU_WORKER_ID {raw[:20]!r} is not the index of one of the "
                               f"{len(hostnames)} hosts in TPU_WORKER_HOSTNAMES")
    return TpuSlice(int(raw), max(len(hostnames), 1))


def tpu_address(requested: str | None, slice_: TpuSlice) -> str | None:
    """`--tpu local` means this VM's chips; on a multi-host slice the TPU cluster resolver
    finds every host of the slice itself (no address: Cloud TPU's own discovery)."""
    if requested == "local" and slice_.multi_host:
        return None
    return requested


def choose_strategy(requested: str, env: Mapping[str, str], num_gpus: int,
                    tpu: str | None) -> str:
    """`auto`: TF_CONFIG/CLUSTER_SPEC -> multi-worker; TPU -> tpu; GPUs -> mirrored; else one."""
    if requested not in STRATEGIES:
        raise ValueError(f"--strategy must be one of {', '.join(STRATEGIES)}, got {requested!r}")
    if requested != "auto":
        return requested
    if tpu:
        return "tpu"
    if num_workers(tf_config(env)) > 1:
        return "multi_worker_mirrored"
    if num_gpus > 1:
        return "mirrored"
    return "one_device"


def precision_for(strategy: str, num_gpus: int) -> str:
    """bfloat16 on TPUs, mixed float16 on GPUs, float32 on CPUs."""
    if strategy == "tpu":
        return "bfloat16"
    if num_gpus > 0:
        return "float16"
    return "float32"


def build_strategy(name: str, num_gpus: int, tpu: str | None):
    """Creates the strategy; TF_CONFIG must already be in os.environ for multi-worker."""
    from official.common import distribute_utils

    return distribute_utils.get_distribution_strategy(
        distribution_strategy=name, num_gpus=num_gpus, tpu_address=tpu,
        all_reduce_alg="nccl" if num_gpus else None,
    )
