"""How long and how much converting a dataset takes on one machine, from the speed
`invoke bench.convert` measures, and the size at which one machine stops being enough.

The conversion job runs in three stages, one after the other: it stages the raw objects onto
its pd-ssd boot disk, converts them there, then uploads the records (launch's Vertex AI
conversion). So the wall time is the sum of the stages, not the slowest one alone:

    stage in   raw bytes      at min(network, disk, objects a second: the bucket's limit,
                              or the downloads at once / the time one request takes)
    convert    raw bytes      at min(cores x a core's rate x scaling efficiency, disk)
    upload     record bytes   at min(network, disk)

A core's rate is the slower of its measured images/s and its measured MB/s for the dataset's
mean image: on the shared machine the runs could not tell a per-image cost from a per-byte
one, so each dataset pays whichever is larger. A pd-ssd disk's throughput grows with its
size up to a cap, so the disk is sized at least for raw + records + margin and never below
the boot disk's default. Cost is the hours at the machine's training price by the pinned
table (the disk's own price is not in that table and not counted). The facts, each with its
source, and the datasets: capacity.yaml.

    python -m launch.targets.vertex.capacity  # the capacity table from capacity.yaml's figures
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from trainer.data.objects import STAGING_STREAMS

CAPACITY_FILE = Path(__file__).with_name("capacity.yaml")
MB, GB, MIB, GIB = 10**6, 10**9, 2**20, 2**30


@dataclasses.dataclass(frozen=True)
class Speed:
    """What `bench.convert` measures."""

    images_per_core_second: float  # one process
    mb_per_core_second: float  # input MB (images + annotations) a second, one process
    scaling_efficiency: float  # all-cores rate / (cores x one-process rate)
    records_per_input_byte: float  # record bytes written per input byte


@dataclasses.dataclass(frozen=True)
class Machine:
    name: str
    vcpus: int
    network_gbps: float
    hourly_usd: float

    @property
    def network_bytes_per_second(self) -> float:
        return self.network_gbps * GB / 8


@dataclasses.dataclass(frozen=True)
class Storage:
    """The bucket the raw objects come from, and the pd-ssd boot disk they are staged on,
    whose throughput (read and write each) grows with its size."""

    reads_per_second: float  # a bucket's object reads a second, before it autoscales
    request_seconds: float  # one object's download, request to last byte (a small object)
    streams: int  # downloads at once while staging
    disk_min_gb: float
    disk_mib_per_s_per_gib: float
    disk_max_mib_per_s: float

    def disk_bytes_per_second(self, size_gb: float) -> float:
        return min(self.disk_max_mib_per_s,
                   self.disk_mib_per_s_per_gib * size_gb * GB / GIB) * MIB


@dataclasses.dataclass(frozen=True)
class Limits:
    """Where one machine stops being enough."""

    max_hours: float
    max_disk_gb: float
    disk_margin: float  # disk beyond raw + records, as a fraction of them


@dataclasses.dataclass(frozen=True)
class ConversionPlan:
    """One conversion of `input_bytes` on `machine`: each stage's hours and what bounds it."""

    machine: Machine
    input_bytes: int
    disk_gb: float
    stages: tuple[tuple[str, float, str], ...]  # (stage, hours, "cores" | "disk" | "network")

    @property
    def hours(self) -> float:
        return sum(hours for _, hours, _ in self.stages)

    @property
    def cost(self) -> float:
        return self.hours * self.machine.hourly_usd

    @property
    def bound(self) -> str:
        """What limits the longest stage."""
        return max(self.stages, key=lambda stage: stage[1])[2]

    def over(self, limits: Limits) -> str:
        """Why one machine is not enough ("" when it is)."""
        if self.hours > limits.max_hours:
            return f"more than {limits.max_hours:g} h"
        if self.disk_gb > limits.max_disk_gb:
            return f"more than a {limits.max_disk_gb:,.0f} GB disk"
        return ""


def network_gbps(vcpus: int, gbps_per_vcpu: float, max_gbps: float) -> float:
    return min(vcpus * gbps_per_vcpu, max_gbps)


def _stage(name: str, size: float, rates: dict[str, float]) -> tuple[str, float, str]:
    """A stage moving `size` bytes at the slowest of `rates` (bytes/s by resource)."""
    limit = min(rates, key=rates.__getitem__)
    return name, size / rates[limit] / 3600, limit


def plan(images: int, input_bytes: int, machine: Machine, speed: Speed, storage: Storage,
         limits: Limits) -> ConversionPlan:
    """Converting `images` (one object each in the bucket) of `input_bytes` with their
    annotations on `machine`."""
    records = input_bytes * speed.records_per_input_byte
    disk_gb = max(storage.disk_min_gb,
                  (input_bytes + records) * (1 + limits.disk_margin) / GB)
    on_disk = storage.disk_bytes_per_second(disk_gb)
    network = machine.network_bytes_per_second
    bytes_per_image = input_bytes / max(images, 1)
    objects_per_second = min(storage.reads_per_second,
                             storage.streams / storage.request_seconds)
    seconds_per_image = max(1 / speed.images_per_core_second,
                            bytes_per_image / (speed.mb_per_core_second * MB))
    cores = machine.vcpus * speed.scaling_efficiency * bytes_per_image / seconds_per_image
    return ConversionPlan(machine, input_bytes, disk_gb, (
        _stage("stage in", input_bytes, {"network": network, "disk": on_disk,
                                         "object requests": objects_per_second *
                                         bytes_per_image}),
        # reading the raw bytes and writing the records proceed together
        _stage("convert", input_bytes, {"cores": cores, "disk": on_disk * input_bytes /
                                        max(input_bytes, records)}),
        _stage("upload", records, {"network": network, "disk": on_disk}),
    ))


def most_images(machine: Machine, speed: Speed, storage: Storage, limits: Limits,
                bytes_per_image: int) -> int:
    """The most images (one object each) of `bytes_per_image` one conversion on `machine`
    stays within the limits for (a plan only grows with its images, so a bisection finds
    it)."""
    def fits(images: int) -> bool:
        return not plan(images, images * bytes_per_image, machine, speed, storage,
                        limits).over(limits)

    low, high = 0, 1
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


# --------------------------------------------------------------- the file and the table


@dataclasses.dataclass(frozen=True)
class Dataset:
    name: str
    images: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class Capacity:
    """capacity.yaml, read."""

    speed: Speed
    measured_on: str
    storage: Storage
    limits: Limits
    facts: dict
    datasets: tuple[Dataset, ...]
    machine_names: tuple[str, ...]
    region: str
    staging_streams: tuple[int, ...]  # the table's: today's first, then what more would give

    @classmethod
    def load(cls, path: Path = CAPACITY_FILE) -> Capacity:
        data = yaml.safe_load(Path(path).read_text())
        facts = data["facts"]
        measured = data["measured"]
        speed = Speed(float(measured["images_per_core_second"]),
                      float(measured["mb_per_core_second"]),
                      float(measured["scaling_efficiency"]),
                      float(measured["records_per_input_byte"]))
        value = {name: float(fact["value"]) for name, fact in facts.items()}
        storage = Storage(value["bucket_reads_per_second"], value["request_seconds"],
                          STAGING_STREAMS, value["boot_disk_default_gb"],
                          value["pd_ssd_mib_per_s_per_gib"], value["pd_ssd_max_mib_per_s"])
        limits = Limits(float(data["max_hours"]), value["boot_disk_max_gb"],
                        float(data["disk_margin"]))
        datasets = tuple(Dataset(d["name"], int(d["images"]), int(d["bytes"]))
                         for d in data["datasets"])
        return cls(speed, str(measured["date"]), storage, limits, facts, datasets,
                   tuple(data["machines"]), str(data["region"]),
                   (STAGING_STREAMS, *(int(n) for n in data["other_staging_streams"])))

    def machine(self, name: str) -> Machine:
        """A catalogue shape: its vCPUs, network bandwidth and training price per hour."""
        from google.cloud import aiplatform_v1

        from launch.stores.pricing.table import PriceTable
        from launch.targets.vertex.costs import machine_hourly
        from launch.targets.vertex.hardware import machine_shape

        vcpus, _ = machine_shape(name)
        hourly = machine_hourly(PriceTable.load(), "training", self.region,
                                aiplatform_v1.MachineSpec(machine_type=name))
        return Machine(name, vcpus, network_gbps(vcpus, self.facts["gbps_per_vcpu"]["value"],
                                                 self.facts["default_max_gbps"]["value"]),
                       hourly.total)


def _duration(hours: float) -> str:
    if hours < 1:
        return f"{max(1, round(hours * 60))} min"
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


def table(capacity: Capacity, speed: Speed | None = None) -> list[str]:
    """The capacity table (docs/reference/capacity.md): wall time and cost of each dataset on
    each machine, and the most images of COCO's mean size one machine converts within the
    limits."""
    speed = speed or capacity.speed
    machines = [capacity.machine(name) for name in capacity.machine_names]
    storage, limits = capacity.storage, capacity.limits
    head = [f"{m.name} ({m.vcpus} vCPUs, {m.network_gbps:g} Gbps, ${m.hourly_usd:.2f}/h)"
            for m in machines]
    lines = ["| dataset | " + " | ".join(head) + " |",
             "| --- |" + " --- |" * len(machines)]
    for dataset in capacity.datasets:
        cells = []
        for machine in machines:
            one = plan(dataset.images, dataset.bytes, machine, speed, storage, limits)
            over = one.over(limits)
            cells.append(f"{_duration(one.hours)}, ${one.cost:,.2f} ({one.bound}"
                         f"{f'; **{over}**' if over else ''})")
        lines.append(f"| {dataset.name}: {dataset.images:,} images, "
                     f"{dataset.bytes / GB:,.1f} GB | " + " | ".join(cells) + " |")
    coco = next(d for d in capacity.datasets if d.name.startswith("COCO"))
    per_image = coco.bytes // coco.images
    for streams in capacity.staging_streams:
        staging = dataclasses.replace(storage, streams=streams)
        cells = []
        for machine in machines:
            most = most_images(machine, speed, staging, limits, per_image)
            beyond = plan(most + 1, (most + 1) * per_image, machine, speed, staging, limits)
            cells.append(f"{most / 10**6:,.1f} million images ({beyond.over(limits)} beyond)")
        lines.append(f"| one machine is enough up to (images of {per_image / 1000:.0f} KB, "
                     f"{streams} download{'s' * (streams > 1)} at a time) | "
                     + " | ".join(cells) + " |")
    return lines


def assumptions(capacity: Capacity) -> list[str]:
    """The facts the table rests on, each with its source; assumptions said plainly."""
    lines = []
    for name, fact in capacity.facts.items():
        kind = "ASSUMPTION" if fact.get("assumption") else "fact"
        lines.append(f"- {name} = {fact['value']:g} ({kind}): {' '.join(fact['note'].split())}"
                     f" [{fact['source']}, read {fact['read']}]")
    return lines


def main() -> None:
    capacity = Capacity.load()
    speed = capacity.speed
    print(f"measured {capacity.measured_on}: {speed.images_per_core_second:g} images/s and "
          f"{speed.mb_per_core_second:g} MB/s a core, "
          f"scaling efficiency {speed.scaling_efficiency:g}, "
          f"{speed.records_per_input_byte:g} record bytes per input byte\n")
    print("\n".join(table(capacity)))
    print()
    print("\n".join(assumptions(capacity)))


if __name__ == "__main__":
    main()
