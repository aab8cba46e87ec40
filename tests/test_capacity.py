"""The capacity model behind the docs' conversion table (launch/targets/vertex/capacity.py;
docs/reference/capacity.md is generated from it and tests/test_docs.py checks it is fresh): its
figures agree with each other, with the pinned price table and with the definition of where
one machine stops being enough. Pure arithmetic: no TensorFlow, no conversion."""

from __future__ import annotations

import dataclasses
import re

import pytest
from google.cloud import aiplatform_v1

from launch.stores.pricing.table import PriceTable
from launch.targets.vertex import capacity
from launch.targets.vertex.capacity import Capacity, Machine, Speed, most_images, plan
from launch.targets.vertex.costs import machine_hourly

CAPACITY = Capacity.load()
SPEED = Speed(images_per_core_second=1000.0, mb_per_core_second=150.0, scaling_efficiency=0.8,
              records_per_input_byte=1.0)
SLOW = dataclasses.replace(SPEED, images_per_core_second=5.0)  # time-bound before disk-bound
GB = capacity.GB


def machines(*names: str) -> list[Machine]:
    return [CAPACITY.machine(name) for name in names]


def test_more_cores_never_make_a_conversion_slower():
    shapes = machines("n2-highcpu-2", "n2-highcpu-4", "n2-highcpu-8", "n2-highcpu-16",
                      "n2-highcpu-32", "n2-highcpu-64", "n2-highcpu-96")
    for speed in (SPEED, SLOW, CAPACITY.speed):
        for dataset in CAPACITY.datasets:
            hours = [plan(dataset.images, dataset.bytes, m, speed, CAPACITY.storage,
                          CAPACITY.limits).hours for m in shapes]
            assert hours == sorted(hours, reverse=True), (dataset.name, speed, hours)
            if speed is SLOW:  # cores bound it: more of them help
                assert hours[0] > hours[-1]


def test_parallel_downloads_never_slow_staging_and_one_at_a_time_bounds_every_shape():
    shapes = machines("n2-highcpu-8", "n2-highcpu-96")
    open_images = next(d for d in CAPACITY.datasets if d.name.startswith("Open Images"))

    def hours(machine: Machine, streams: int) -> float:
        storage = dataclasses.replace(CAPACITY.storage, streams=streams)
        return plan(open_images.images, open_images.bytes, machine, CAPACITY.speed, storage,
                    CAPACITY.limits).hours

    for machine in shapes:
        by_streams = [hours(machine, streams) for streams in (1, 2, 8, 32, 128, 10**6)]
        assert by_streams == sorted(by_streams, reverse=True)
    one_at_a_time = [hours(machine, 1) for machine in shapes]
    assert one_at_a_time[0] == pytest.approx(one_at_a_time[1], rel=0.01)
    assert one_at_a_time[0] > open_images.images * CAPACITY.storage.request_seconds / 3600


def test_the_cost_is_the_hours_at_the_pinned_training_price():
    for machine in machines(*CAPACITY.machine_names):
        pinned = machine_hourly(PriceTable.load(), "training", "us-central1",
                                aiplatform_v1.MachineSpec(machine_type=machine.name))
        assert machine.hourly_usd == pinned.total > 0
        coco = plan(118_287, 18 * GB, machine, SPEED, CAPACITY.storage, CAPACITY.limits)
        assert coco.cost == pytest.approx(coco.hours * pinned.total)


def test_the_wall_time_is_the_sum_of_its_stages_each_at_its_slowest_resource():
    machine = CAPACITY.machine("n2-highcpu-8")
    one = plan(1_000_000, 100 * GB, machine, SLOW, CAPACITY.storage, CAPACITY.limits)
    stages = dict((name, (hours, bound)) for name, hours, bound in one.stages)
    assert set(stages) == {"stage in", "convert", "upload"}
    assert one.hours == pytest.approx(sum(hours for hours, _ in stages.values()))
    # converting at 5 images/s a core x 8 cores x 0.8: 10^6 images in 8.7 hours
    assert stages["convert"] == (pytest.approx(1e6 / (5 * 8 * 0.8) / 3600), "cores")
    assert one.bound == "cores"
    # the disk holds raw + records + margin, and its throughput follows its size
    assert one.disk_gb == pytest.approx(200 * (1 + CAPACITY.limits.disk_margin))


def test_one_machine_is_enough_up_to_the_size_the_definition_gives():
    machine = CAPACITY.machine("n2-highcpu-96")
    limits, per_image = CAPACITY.limits, 156_000
    storage = dataclasses.replace(CAPACITY.storage, streams=1000)  # the bucket's limit binds
    for speed, reason in ((SLOW, f"more than {limits.max_hours:g} h"),
                          (SPEED, f"more than a {limits.max_disk_gb:,.0f} GB disk")):
        most = most_images(machine, speed, storage, limits, per_image)
        last = plan(most, most * per_image, machine, speed, storage, limits)
        beyond = plan(most + 1, (most + 1) * per_image, machine, speed, storage, limits)
        assert last.over(limits) == "" and beyond.over(limits) == reason
        assert last.hours <= limits.max_hours and last.disk_gb <= limits.max_disk_gb


def test_the_table_prices_every_dataset_on_every_machine_and_names_its_facts():
    lines = capacity.table(CAPACITY, SPEED)
    assert len(lines) == 2 + len(CAPACITY.datasets) + len(CAPACITY.staging_streams)
    for line in lines[2:]:
        assert line.count("|") == 2 + len(CAPACITY.machine_names)
    assert all(name in lines[0] for name in CAPACITY.machine_names)
    notes = capacity.assumptions(CAPACITY)
    assert len(notes) == len(CAPACITY.facts)
    for name, fact in CAPACITY.facts.items():
        assert re.match(r"https://", fact["source"]) and fact["read"] == "2026-11-25", name
        note = next(line for line in notes if line.startswith(f"- {name} "))
        assert ("ASSUMPTION" in note) == bool(fact.get("assumption")), name


def test_a_core_pays_per_image_or_per_byte_whichever_costs_more():
    """1,000 images/s and 150 MB/s a core break even at 150 KB an image."""
    machine = CAPACITY.machine("n2-highcpu-2")
    for images, per_image, seconds in ((10**7, 50_000, 10**7 / (2 * 0.8 * 1000)),
                                       (10**6, 500_000, 10**6 * 500_000 / (2 * 0.8 * 150e6))):
        convert = plan(images, images * per_image, machine, SPEED, CAPACITY.storage,
                       CAPACITY.limits).stages[1]
        assert convert == ("convert", pytest.approx(seconds / 3600), "cores")
