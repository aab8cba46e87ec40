"""What Vertex AI custom training can run on, as data, and the checks a job must pass before
any API call: accelerator vs machine family, counts, TPU topology, region."""

from __future__ import annotations

import dataclasses
import re

from launch.errors import InputError


class HardwareError(InputError):
    """An impossible machine/accelerator/TPU/region combination; the message says what fits."""


@dataclasses.dataclass(frozen=True)
class Machine:
    machine_type: str
    accelerator_type: str | None = None
    accelerator_count: int = 0
    tpu_topology: str | None = None

    @property
    def is_tpu(self) -> bool:
        return bool(self.accelerator_type and self.accelerator_type.startswith("TPU")) or \
            self.machine_type.startswith("ct5lp-")


# GPU families on n1 machines: accelerator -> counts one n1 machine takes.
N1_GPUS = {"NVIDIA_TESLA_T4": (1, 2, 4), "NVIDIA_TESLA_V100": (1, 2, 4, 8),
           "NVIDIA_TESLA_P100": (1, 2, 4), "NVIDIA_TESLA_P4": (1, 2, 4)}
# Families whose machine type fixes the accelerator: regex -> (accelerator, count from name).
FIXED_GPU_FAMILIES = (
    (re.compile(r"^a2-highgpu-(\d+)g$"), "NVIDIA_TESLA_A100"),
    (re.compile(r"^a2-ultragpu-(\d+)g$"), "NVIDIA_A100_80GB"),
    (re.compile(r"^a3-highgpu-(\d+)g$"), "NVIDIA_H100_80GB"),
    (re.compile(r"^a3-megagpu-(\d+)g$"), "NVIDIA_H100_MEGA_80GB"),
    (re.compile(r"^a3-ultragpu-(\d+)g$"), "NVIDIA_H200_141GB"),
    (re.compile(r"^a4-highgpu-(\d+)g$"), "NVIDIA_B200"),
)
G2_L4_COUNTS = {"4": 1, "8": 1, "12": 1, "16": 1, "24": 2, "32": 1, "48": 4, "96": 8}
CPU_FAMILIES = ("n1-", "n2-", "n2d-", "e2-", "c2-", "c2d-", "m1-")
# TPU VMs: v5e single-host machine types and their topologies.
V5E_TOPOLOGIES = {"ct5lp-hightpu-1t": "1x1", "ct5lp-hightpu-4t": "2x2",
                  "ct5lp-hightpu-8t": "2x4"}
TPU_SHORTHANDS = {
    "v5litepod-1": Machine("ct5lp-hightpu-1t", tpu_topology="1x1"),
    "v5litepod-4": Machine("ct5lp-hightpu-4t", tpu_topology="2x2"),
    "v5litepod-8": Machine("ct5lp-hightpu-8t", tpu_topology="2x4"),
    "v2-8": Machine("cloud-tpu", "TPU_V2", 8),
    "v3-8": Machine("cloud-tpu", "TPU_V3", 8),
}
# Where Vertex AI training offers each accelerator (Vertex AI "locations" page; extend as
# Google adds regions). A region missing here is rejected with the list of those that work.
ACCELERATOR_REGIONS = {
    "NVIDIA_TESLA_T4": {"us-central1", "us-east1", "us-east4", "us-west1", "us-west2",
                        "europe-west1", "europe-west2", "europe-west4", "asia-east1",
                        "asia-northeast1", "asia-northeast3", "asia-south1",
                        "asia-southeast1", "australia-southeast1", "northamerica-northeast1",
                        "southamerica-east1"},
    "NVIDIA_TESLA_V100": {"us-central1", "us-east1", "us-west1", "europe-west4", "asia-east1"},
    "NVIDIA_TESLA_P100": {"us-central1", "us-east1", "us-west1", "europe-west1",
                          "europe-west4", "asia-east1"},
    "NVIDIA_TESLA_P4": {"us-central1", "us-east4", "us-west2", "europe-west4",
                        "northamerica-northeast1", "asia-southeast1", "australia-southeast1"},
    "NVIDIA_TESLA_A100": {"us-central1", "us-east1", "us-west1", "us-west3", "us-west4",
                          "europe-west4", "asia-northeast1", "asia-northeast3",
                          "asia-southeast1", "me-west1"},
    "NVIDIA_A100_80GB": {"us-central1", "us-east4", "us-east5", "europe-west4",
                         "asia-southeast1"},
    "NVIDIA_L4": {"us-central1", "us-east1", "us-east4", "us-west1", "us-west4",
                  "europe-west1", "europe-west2", "europe-west3", "europe-west4",
                  "asia-east1", "asia-northeast1", "asia-southeast1"},
    "NVIDIA_H100_80GB": {"us-central1", "us-east4", "us-east5", "us-west1", "europe-west4",
                         "asia-southeast1"},
    "NVIDIA_H100_MEGA_80GB": {"us-central1", "us-east4", "us-east5", "europe-west4"},
    "NVIDIA_H200_141GB": {"us-central1", "us-east4", "europe-west1"},
    "NVIDIA_B200": {"us-central1", "us-east4"},
    "TPU_V2": {"us-central1", "europe-west4"},
    "TPU_V3": {"us-central1", "europe-west4"},
    "TPU_V5_LITEPOD": {"us-central1", "us-west1", "us-west4", "us-east1", "us-south1",
                       "europe-west4", "asia-southeast1"},
}


def parse_accelerator(text: str | None) -> tuple[str | None, int]:
    """`NVIDIA_TESLA_T4:2` -> ("NVIDIA_TESLA_T4", 2); a bare type means one."""
    if not text:
        return None, 0
    name, _, count = text.partition(":")
    if name not in ACCELERATOR_REGIONS:
        raise HardwareError(f"unknown accelerator {name!r}; one of: "
                            f"{', '.join(sorted(ACCELERATOR_REGIONS))}")
    try:
        number = int(count) if count else 1
    except ValueError:
        raise HardwareError(f"--accelerator {text!r}: the count after ':' must be a number"
                            ) from None
    if number < 1:
        raise HardwareError(f"--accelerator {text!r}: the count must be at least 1")
    return name, number


def _gpu_machine(machine_type: str, accelerator: str | None, count: int) -> Machine:
    for pattern, fixed in FIXED_GPU_FAMILIES:
        if match := pattern.match(machine_type):
            expected = int(match.group(1))
            if accelerator not in (None, fixed) or count not in (0, expected):
                raise HardwareError(f"{machine_type} comes with {fixed}:{expected}; drop "
                                    f"--accelerator or pass {fixed}:{expected}")
            return Machine(machine_type, fixed, expected)
    if machine_type.startswith("g2-standard-"):
        expected = G2_L4_COUNTS.get(machine_type.rsplit("-", 1)[1])
        if expected is None or accelerator not in (None, "NVIDIA_L4") or \
                count not in (0, expected):
            raise HardwareError(f"{machine_type} comes with NVIDIA_L4:{expected}; drop "
                                "--accelerator or pass that")
        return Machine(machine_type, "NVIDIA_L4", expected)
    if accelerator is None:
        if not machine_type.startswith(CPU_FAMILIES):
            raise HardwareError(f"unknown machine type {machine_type!r}")
        return Machine(machine_type)
    if not machine_type.startswith("n1-"):
        raise HardwareError(f"{accelerator} attaches to n1 machines only, not {machine_type}; "
                            "use e.g. --machine-type n1-standard-8")
    if accelerator not in N1_GPUS:
        raise HardwareError(f"{accelerator} does not attach to n1 machines; it comes with its "
                            "own family (a2-, a3-, a4-, g2-)")
    if count not in N1_GPUS[accelerator]:
        raise HardwareError(f"an n1 machine takes {accelerator} in counts "
                            f"{', '.join(map(str, N1_GPUS[accelerator]))}, not {count}")
    return Machine(machine_type, accelerator, count)


def _tpu_machine(machine_type: str, accelerator: str | None, count: int,
                 topology: str | None) -> Machine:
    if machine_type == "cloud-tpu":
        if accelerator not in ("TPU_V2", "TPU_V3") or count != 8:
            raise HardwareError("cloud-tpu machines take TPU_V2:8 or TPU_V3:8")
        if topology:
            raise HardwareError("cloud-tpu (v2/v3) takes no --tpu-topology")
        return Machine(machine_type, accelerator, 8)
    expected = V5E_TOPOLOGIES.get(machine_type)
    if expected is None:
        raise HardwareError(f"unknown TPU machine type {machine_type!r}; one of "
                            f"{', '.join(sorted(V5E_TOPOLOGIES))}")
    if accelerator is not None:
        raise HardwareError(f"{machine_type} is a TPU VM: drop --accelerator")
    if topology not in (None, expected):
        raise HardwareError(f"{machine_type} has topology {expected}, not {topology}")
    return Machine(machine_type, tpu_topology=expected)


def resolve_machine(*, region: str, machine_type: str | None = None,
                    accelerator: str | None = None, tpu: str | None = None,
                    tpu_topology: str | None = None) -> Machine:
    """One validated machine for a worker pool; raises HardwareError before any API call."""
    if tpu:
        if tpu not in TPU_SHORTHANDS:
            raise HardwareError(f"unknown --tpu {tpu!r}; one of {', '.join(TPU_SHORTHANDS)}")
        if machine_type or accelerator:
            raise HardwareError("--tpu chooses the machine: drop --machine-type/--accelerator")
        shorthand = TPU_SHORTHANDS[tpu]
        machine_type = shorthand.machine_type
        accelerator = shorthand.accelerator_type
        accelerator_text = f"{accelerator}:{shorthand.accelerator_count}" if accelerator else None
        return resolve_machine(region=region, machine_type=machine_type,
                               accelerator=accelerator_text, tpu_topology=tpu_topology)
    name, count = parse_accelerator(accelerator)
    machine_type = machine_type or "n1-standard-8"
    if machine_type == "cloud-tpu" or machine_type.startswith("ct5lp-"):
        machine = _tpu_machine(machine_type, name, count, tpu_topology)
    else:
        if tpu_topology:
            raise HardwareError("--tpu-topology applies to TPU machines only")
        machine = _gpu_machine(machine_type, name, count)
    offered = ACCELERATOR_REGIONS.get(machine.accelerator_type or
                                      ("TPU_V5_LITEPOD" if machine.is_tpu else ""))
    if offered is not None and region not in offered:
        kind = machine.accelerator_type or "TPU v5e"
        raise HardwareError(f"{kind} is not offered for training in {region}; regions: "
                            f"{', '.join(sorted(offered))}")
    return machine
