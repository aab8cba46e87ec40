"""What Vertex AI custom training can run on, and the checks a job must pass before any API
call: accelerator vs machine family, counts, TPU slices and their hosts, regions, and which
scheduling each shape accepts. The facts are data (catalogue.yaml, with the date and the
pages they were taken from); this module only reads them."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import yaml

from launch.errors import InputError
from launch.targets.vertex.resources import Resources
from launch.values.resources import Accelerator

CATALOGUE_FILE = Path(__file__).with_name("catalogue.yaml")


class HardwareError(InputError):
    """An impossible machine/accelerator/TPU/region/scheduling combination; the message says
    what fits."""


class NotOffered(HardwareError):
    """Hardware the catalogue does not offer for training in a region."""


@functools.cache
def catalogue() -> dict:
    return yaml.safe_load(CATALOGUE_FILE.read_text())


@dataclasses.dataclass(frozen=True)
class Machine:
    machine_type: str
    accelerator: Accelerator | None = None
    tpu_topology: str | None = None
    hosts: int = 1  # VMs a replica spans: more than one for a multi-host TPU slice

    @property
    def is_tpu(self) -> bool:
        return self.machine_type in catalogue()["tpu_machines"] or \
            self.machine_type == "cloud-tpu"

    @property
    def tpu_generation(self) -> str | None:
        if self.machine_type == "cloud-tpu":
            return self.accelerator.type.removeprefix("TPU_").lower()
        return catalogue()["tpu_machines"].get(self.machine_type, {}).get("generation")

    def regions(self) -> tuple[str, list[str] | None]:
        """What limits where this machine trains (its accelerator or TPU generation), and
        the regions that offer it (None: wherever Vertex AI trains)."""
        facts = catalogue()
        if self.accelerator:
            return self.accelerator.type, facts["regions"].get(self.accelerator.type)
        if self.is_tpu:
            return f"TPU {self.tpu_generation}", facts["tpu_regions"].get(self.tpu_generation)
        return self.machine_type, None

    def describe(self) -> str:
        if self.tpu_topology:
            hosts = f", {self.hosts} hosts" if self.hosts > 1 else ""
            return f"{self.machine_type} {self.tpu_topology}{hosts}"
        if self.accelerator:
            return f"{self.machine_type} with {self.accelerator}"
        return self.machine_type


def machine_shape(machine_type: str) -> tuple[int, float]:
    """(vCPUs, GB of memory) of a CPU or GPU machine type (TPU VMs are priced by chip)."""
    facts = catalogue()
    if machine_type in facts["machine_shapes"]:
        vcpus, memory = facts["machine_shapes"][machine_type]
        return vcpus, float(memory)
    family, _, size = machine_type.rpartition("-")
    return int(size), int(size) * float(facts["memory_per_vcpu"][family])


def tpu_chips(machine: Machine) -> int:
    """Chips in a TPU VM slice: the product of its topology (`4x4` -> 16)."""
    chips = 1
    for side in (machine.tpu_topology or "").split("x"):
        chips *= int(side) if side.isdigit() else 1
    return chips


def multi_region(region: str) -> str:
    """The multi-region (us, europe, asia) of Google's images nearest `region`."""
    return next((name for name, prefixes in catalogue()["multi_regions"].items()
                 if region.startswith(tuple(prefixes))), "us")


def reduction_server_image(region: str) -> str:
    """Google's Reduction Server image in the multi-region of `region`, as Vertex AI's
    distributed-training page lists it (choosing the nearest "might reduce latency")."""
    return catalogue()["reduction_server"]["image"].format(geo=multi_region(region))


def reduction_server_images() -> frozenset[str]:
    """Every multi-region's Reduction Server image: Google's, not ours to build or pin."""
    return frozenset(catalogue()["reduction_server"]["image"].format(geo=geo)
                     for geo in ("us", *catalogue()["multi_regions"]))


def _listed(values) -> str:
    return ", ".join(map(str, values))


def regions() -> list[str]:
    """Every region where the catalogue knows Vertex AI trains on some accelerator."""
    facts = catalogue()
    return sorted({region for offered in (*facts["regions"].values(),
                                          *facts["tpu_regions"].values())
                   for region in offered})


class Catalogue:
    """The Vertex AI target's `base.Hardware`: its catalogue (catalogue.yaml)."""

    def regions(self) -> list[str]:
        return regions()


def check_region(region: str, flag: str = "--region") -> str:
    if region not in regions():
        raise HardwareError(f"{flag} {region[:80]!r} is not a Vertex AI training region the "
                            f"catalogue knows: {_listed(regions())}")
    return region


def check_x86_host(machine_type: str | None = None,
                   accelerator: Accelerator | None = None) -> None:
    """Refuses machines whose hosts are Arm (catalogue `arm_hosts`): they run only images
    built for Arm, and the project builds x86-64 images."""
    series = (machine_type or "").partition("-")[0]
    for name, host in catalogue()["arm_hosts"].items():
        if series == name or (accelerator and accelerator.type in host["accelerators"]):
            asked = machine_type if series == name else accelerator.type
            raise HardwareError(
                f"{asked[:80]}: {host['what']} hosts are Arm, which run only container images "
                "built for Arm, and the project builds x86-64 images; choose an x86-64 "
                f"machine, e.g. {host['instead']}")


def _check_known(accelerator: Accelerator | None) -> None:
    known = catalogue()["regions"]
    if accelerator and accelerator.type not in known:
        raise HardwareError(f"unknown accelerator {accelerator.type!r}; one of: "
                            f"{_listed(sorted(known))}")


def _gpu_machine(machine_type: str, accelerator: Accelerator | None) -> Machine:
    facts = catalogue()
    if machine_type in facts["gpu_machines"]:
        fixed = Accelerator(*facts["gpu_machines"][machine_type])
        if accelerator not in (None, fixed):
            raise HardwareError(f"{machine_type} comes with {fixed}; drop "
                                f"--accelerator or pass {fixed}")
        return Machine(machine_type, fixed)
    family, _, size = machine_type.rpartition("-")
    if family not in facts["memory_per_vcpu"] or not size.isdigit() or int(size) < 1:
        raise HardwareError(f"unknown machine type {machine_type!r}; Vertex AI trains on "
                            f"{_listed(facts['memory_per_vcpu'])} (FAMILY-vCPUs), "
                            f"{_listed(facts['gpu_machines'])}, and the TPU machines "
                            f"{_listed(facts['tpu_machines'])}")
    if accelerator is None:
        return Machine(machine_type)
    n1_gpus, name = facts["n1_gpus"], accelerator.type
    if not machine_type.startswith("n1-"):
        raise HardwareError(f"{name} attaches to n1 machines only, not {machine_type}; "
                            "use e.g. --machine-type n1-standard-8")
    if name not in n1_gpus:
        owners = [m for m, (a, _) in facts["gpu_machines"].items() if a == name]
        raise HardwareError(f"{name} does not attach to n1 machines; it comes with its "
                            f"own machine types: {_listed(owners) or 'none for training'}")
    if accelerator.count not in n1_gpus[name]:
        raise HardwareError(f"an n1 machine takes {name} in counts "
                            f"{_listed(n1_gpus[name])}, not {accelerator.count}")
    return Machine(machine_type, accelerator)


def _tpu_machine(machine_type: str, accelerator: Accelerator | None,
                 topology: str | None) -> Machine:
    facts = catalogue()
    if machine_type == "cloud-tpu":
        cores = [Accelerator(*pair) for pair in facts["cloud_tpu_accelerators"].items()]
        if accelerator not in cores:
            raise HardwareError(f"cloud-tpu machines take {_listed(cores)}")
        if topology:
            raise HardwareError("cloud-tpu (v2/v3) takes no --tpu-topology")
        return Machine(machine_type, accelerator)
    shape = facts["tpu_machines"][machine_type]
    if accelerator is not None:
        raise HardwareError(f"{machine_type} is a TPU VM: drop --accelerator")
    topologies = shape["topologies"]
    if topology is None:  # the machine's own chips: the single-host slice
        topology = next(t for t, hosts in topologies.items() if hosts == 1)
    if topology not in topologies:
        raise HardwareError(f"{machine_type} trains on topologies {_listed(topologies)}, "
                            f"not {topology or 'none'} (pass --tpu-topology, or --tpu NAME)")
    return Machine(machine_type, tpu_topology=topology, hosts=topologies[topology])


def tpu_machine_type(tpu: str) -> tuple[str, Accelerator | None, str | None]:
    """`--tpu v5litepod-16` -> (machine type, its accelerator (v2, v3), topology)."""
    facts = catalogue()
    if tpu not in facts["tpu_names"]:
        generation = tpu.split("-", 1)[0]
        if generation in facts["tpus_not_offered"]:
            raise HardwareError(f"{facts['tpus_not_offered'][generation]}; Vertex AI trains "
                                "on v2-8, v3-8, v5litepod-N and v6e-N")
        raise HardwareError(f"unknown --tpu {tpu!r}; one of {_listed(facts['tpu_names'])}")
    name = facts["tpu_names"][tpu]
    kind = name.get("accelerator")  # v2, v3: a Cloud TPU accelerator of a fixed core count
    accelerator = Accelerator(kind, facts["cloud_tpu_accelerators"][kind]) if kind else None
    return name["machine_type"], accelerator, name.get("topology")


def resolve_machine(*, region: str | None, machine_type: str | None = None,
                    accelerator: Accelerator | None = None, tpu: str | None = None,
                    tpu_topology: str | None = None) -> Machine:
    """One validated machine for a worker pool (offered in `region`, unless None); raises
    HardwareError before any API call."""
    if tpu:
        if machine_type or accelerator:
            raise HardwareError("--tpu chooses the machine: drop --machine-type/--accelerator")
        machine_type, accelerator, named_topology = tpu_machine_type(tpu)
        if tpu_topology and named_topology and tpu_topology != named_topology:
            raise HardwareError(f"--tpu {tpu} is topology {named_topology}, not {tpu_topology}")
        tpu_topology = named_topology
    check_x86_host(machine_type, accelerator)
    _check_known(accelerator)
    machine_type = machine_type or catalogue()["default_machine"]
    if machine_type == "cloud-tpu" or machine_type in catalogue()["tpu_machines"]:
        machine = _tpu_machine(machine_type, accelerator, tpu_topology)
    else:
        if tpu_topology:
            raise HardwareError("--tpu-topology applies to TPU machines only")
        machine = _gpu_machine(machine_type, accelerator)
    what, offered = machine.regions()
    if region is not None and offered is not None and region not in offered:
        raise NotOffered(f"{what} is not offered for training in {region}; "
                         f"regions: {_listed(sorted(offered))}")
    return machine


def boot_disk_type(machine_type: str) -> str:
    """The boot disk a replica of `machine_type` gets (catalogue `boot_disks`): pd-ssd, or
    Hyperdisk where the family takes no Persistent Disk; "" leaves it to Vertex AI."""
    disks = catalogue()["boot_disks"]
    family = machine_type.rpartition("-")[0]
    return disks["families"].get(family, {"type": disks["default"]})["type"]


def check_trains(machine: Machine) -> None:
    """Custom training's own floor: the smallest standard and highcpu machines it refuses."""
    family, _, size = machine.machine_type.rpartition("-")
    least = catalogue()["training_min_vcpus"].get(family.partition("-")[2])
    if least and size.isdigit() and int(size) < least:
        raise HardwareError(f"{machine.machine_type}: Vertex AI custom training takes "
                            f"{family} machines of {least} vCPUs or more (e.g. "
                            f"{family}-{least}); endpoints take smaller ones")


def hardware_name(resources: Resources) -> str:
    """The job's hardware as the user named it: its --tpu, or its machine type."""
    return resources.tpu or resources.machine_type or catalogue()["default_machine"]


def fallback_resources(resources: Resources, machine_type: str) -> Resources:
    """`--fallback g2-standard-8`: the job's replicas and scheduling on another machine type,
    with the accelerator the catalogue says it comes with (a g2-standard-8 has one L4; a TPU
    machine its single-host slice; a CPU family other than n1 none). An n1 machine, whose
    GPUs are chosen separately, cannot be inferred and is refused."""
    facts = catalogue()
    family = machine_type.rpartition("-")[0]
    if machine_type == "cloud-tpu" or family.startswith("n1-"):
        raise HardwareError(f"--fallback {machine_type}: the accelerator cannot be inferred "
                            "(it is chosen separately); name a machine type that comes with "
                            f"its GPUs or TPU, e.g. {_listed(list(facts['gpu_machines'])[:3])}")
    try:
        resolve_machine(region=None, machine_type=machine_type)  # where: each rung's business
    except HardwareError as error:
        raise HardwareError(f"--fallback {machine_type}: {error}") from None
    return dataclasses.replace(resources, machine_type=machine_type, accelerator=None,
                               tpu=None, tpu_topology=None)


def machine_for(resources: Resources, region: str) -> Machine:
    """The one machine every pool of `resources` runs on, checked against what `region`
    offers and against the resources' replicas and scheduling."""
    machine = resolve_machine(region=region, machine_type=resources.machine_type,
                              accelerator=resources.accelerator, tpu=resources.tpu,
                              tpu_topology=resources.tpu_topology)
    resources.check_one_slice(machine.is_tpu)
    check_trains(machine)
    check_scheduling(machine, resources.scheduling.strategy, resources.scheduling.timeout_hours,
                     extra_pools=bool(resources.reduction_servers))
    return machine


def tensorflow_note(machine: Machine) -> str | None:
    """A warning for TPU generations Vertex AI documents without TensorFlow."""
    if machine.tpu_generation in catalogue()["tpu_generations_without_tensorflow"]:
        return (f"note: Vertex AI documents TPU {machine.tpu_generation} for JAX and PyTorch, "
                "not TensorFlow (see catalogue.yaml's sources); v5litepod-N is the TPU "
                "our TensorFlow trainer is documented on")
    return None


def check_scheduling(machine: Machine, strategy: str, timeout_hours: float,
                     extra_pools: bool) -> None:
    """The scheduling rules of each shape: Flex-start's accelerators, timeout bound and single
    machine shape; Spot not on multi-host TPU slices."""
    rules = catalogue()["scheduling"]
    if strategy == "FLEX_START":
        flex = rules["flex_start"]
        if not machine.accelerator or machine.accelerator.type not in flex["accelerators"]:
            raise HardwareError(f"--flex-start takes jobs on {_listed(flex['accelerators'])}; "
                                f"{machine.describe()} is not one: drop --flex-start, or "
                                "choose e.g. --machine-type g2-standard-8 (L4) or "
                                "a2-highgpu-1g (A100)")
        if timeout_hours > flex["max_timeout_hours"]:
            raise HardwareError(f"--flex-start jobs time out after at most "
                                f"{flex['max_timeout_hours']} hours (7 days), not "
                                f"{timeout_hours:g}: lower --timeout-hours")
        if extra_pools and flex["same_machine_in_every_pool"]:
            raise HardwareError("--flex-start needs the same machine in every worker pool, "
                                "and Reduction Server runs on its own: drop "
                                "--reduction-servers or --flex-start")
    if strategy == "SPOT" and machine.hosts > 1 and not rules["spot"]["multi_host_tpu"]:
        raise HardwareError(f"Spot VMs are not offered for multi-host TPU slices "
                            f"({machine.describe()}): drop --spot, or use a single-host "
                            "slice (v5litepod-8 or smaller)")
