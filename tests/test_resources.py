"""One resources value: the flags become it in one place, and it refuses what cannot run."""

from __future__ import annotations

import re

import pytest

from launch.errors import InputError
from launch.targets.vertex.hardware import machine_for
from launch.targets.vertex.resources import Resources, Scheduling
from launch.values.resources import Accelerator

SCHEDULING_FLAGS = ("spot", "flex_start", "timeout_hours")


def from_flags(**flags) -> Resources:
    """As tasks.py parses them: the scheduling flags, then the rest."""
    scheduling = Scheduling.from_flags(**{k: v for k, v in flags.items()
                                          if k in SCHEDULING_FLAGS})
    return Resources.from_flags(scheduling=scheduling, **{
        k: v for k, v in flags.items() if k not in SCHEDULING_FLAGS})


def test_flags_as_invoke_passes_them_become_one_value():
    resources = from_flags(machine_type="n1-standard-16", accelerator="NVIDIA_TESLA_V100:2",
                           workers="9", reduction_servers="2", spot=True, timeout_hours="6")
    assert resources == Resources("n1-standard-16", Accelerator("NVIDIA_TESLA_V100", 2), workers=9,
                                  reduction_servers=2,
                                  scheduling=Scheduling(timeout_hours=6, strategy="SPOT"))
    assert resources.replicas == (1, 9)
    assert resources.describe() == ("n1-standard-16 with NVIDIA_TESLA_V100:2; chief + 9 "
                                    "workers, 2 reduction servers; SPOT scheduling, timeout 6 h")
    assert from_flags(tpu="v5litepod-4", flex_start=True).describe() == \
        "v5litepod-4; 1 replica; FLEX_START scheduling, timeout 24 h"
    assert Resources.from_flags().replicas == (1,)
    assert machine_for(Resources(), "us-central1").machine_type == "n1-standard-8"


@pytest.mark.parametrize("flags, message", [
    ({"workers": "two"}, "--workers must be a whole number, got 'two'"),
    ({"workers": "-1"}, "--workers must be at least 0, got '-1'"),
    ({"workers": "1.5"}, "--workers must be a whole number, got '1.5'"),
    ({"reduction_servers": "2"}, "Reduction Server needs GPU workers"),
    ({"reduction_servers": "-3", "workers": "1"}, "--reduction-servers must be at least 0"),
    ({"tpu": "v5litepod-4", "workers": "2"}, "a TPU job is one slice (every host of a "
                                             "multi-host slice runs the trainer): drop --workers"),
    ({"spot": True, "flex_start": True}, "--spot and --flex-start exclude each other"),
    ({"timeout_hours": "nan"}, "--timeout-hours must be a number, got 'nan'"),
    ({"timeout_hours": "inf"}, "--timeout-hours must be a number, got 'inf'"),
    ({"timeout_hours": "0"}, "--timeout-hours must be at least 1 minute"),
    ({"timeout_hours": "1e-300"}, "--timeout-hours must be at least 1 minute (0.0167 h), got "
                                  "'1e-300'"),  # was sent as "0s": Vertex AI's 7 days
    ({"timeout_hours": "1e400x"}, "--timeout-hours must be a number"),
])
def test_what_cannot_run_is_refused_with_the_flag_named(flags, message):
    with pytest.raises(InputError, match=re.escape(message)):
        from_flags(**flags)


def test_the_accelerator_is_parsed_once_into_its_type_and_count():
    assert Accelerator.parse("NVIDIA_TESLA_T4:2") == Accelerator("NVIDIA_TESLA_T4", 2)
    assert Accelerator.parse("NVIDIA_L4") == Accelerator("NVIDIA_L4", 1)  # a bare type: one
    assert str(Accelerator.parse("NVIDIA_L4")) == "NVIDIA_L4:1"
    assert from_flags(accelerator="NVIDIA_L4").describe().startswith(
        "n1-standard-8 with NVIDIA_L4:1; 1 replica")
    assert from_flags(accelerator="").accelerator is None


@pytest.mark.parametrize("text, message", [
    ("NVIDIA_TESLA_T4:two", "--accelerator 'NVIDIA_TESLA_T4:two': the count after ':' must be "
                            "a number (TYPE:COUNT, e.g. NVIDIA_TESLA_T4:2)"),
    ("NVIDIA_TESLA_T4:", "the count after ':' must be a number"),
    ("NVIDIA_TESLA_T4: 2", "the count after ':' must be a number"),
    ("NVIDIA_TESLA_T4:2_0", "the count after ':' must be a number"),
    ("NVIDIA_TESLA_T4:0", "--accelerator 'NVIDIA_TESLA_T4:0': the count must be at least 1"),
    (":2", "--accelerator ':2' is not TYPE:COUNT (e.g. NVIDIA_TESLA_T4:2)"),
])
def test_an_accelerator_that_is_not_type_count_is_refused_when_the_flags_are_read(text, message):
    with pytest.raises(InputError, match=re.escape(message)):
        from_flags(accelerator=text)


def test_a_tpu_machine_type_takes_no_workers_either():
    with pytest.raises(InputError, match="drop --workers and --reduction-servers"):
        machine_for(Resources("ct5lp-hightpu-4t", workers=2), "us-central1")
