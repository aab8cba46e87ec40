"""What a target offers features besides launching (launch/targets/base.py's `Offer`s), asked
through the registry: each offer a target declares answers its protocol, the first target
that has one is what a task without --target gets, and a target without it is one line
naming --target and the targets that have it."""

from __future__ import annotations

import inspect

import pytest

from launch import targets
from launch.context.cloud import Cloud
from launch.errors import InputError
from launch.targets import base

PROTOCOLS = {base.TOOLS: base.Tools, base.TUNING: base.Sweeps, base.HARDWARE: base.Hardware,
             base.DOCTOR: base.Checks, base.RUNS: base.KeptRuns, base.SERVING: base.Serving,
             base.PIPELINES: base.Pipelines}


def test_every_offer_has_its_protocol_here():
    assert set(PROTOCOLS) == {value for value in vars(base).values()
                              if isinstance(value, base.Offer)}


@pytest.mark.parametrize("offer", PROTOCOLS, ids=lambda offer: offer.name)
def test_each_target_that_offers_it_answers_its_protocol(offer):
    """Every method the protocol names, with the parameters it names (an answer made with
    no call to any service)."""
    wanted = {name: inspect.signature(method) for name, method in vars(PROTOCOLS[offer]).items()
              if inspect.isfunction(method) and not name.startswith("_")}
    offering = [name for name in targets.TARGETS if targets.offers(name, offer)]
    assert offering
    for name in offering:
        found = targets.offered(name, offer, Cloud())
        for method, signature in wanted.items():
            assert list(inspect.signature(getattr(found, method)).parameters) == \
                list(signature.parameters)[1:], (name, method)


def test_a_task_without_target_asks_the_first_target_that_offers_it():
    assert targets.offering(base.TOOLS) == "local"
    assert targets.offering(base.SERVING) == targets.offering(base.TUNING) == "vertex"
    assert type(targets.first(base.SERVING, Cloud())).__name__ == "VertexServing"


def test_a_target_without_it_says_so_in_one_line_with_the_targets_that_have_it():
    with pytest.raises(InputError) as refused:
        targets.offered("local", base.SERVING, Cloud())
    assert str(refused.value) == ("--target local: endpoints run on Vertex AI only: add "
                                  "--target vertex")
    with pytest.raises(InputError, match=r"^--target vertex: the trainer's tools run on this "
                                         r"machine only: add --target local$"):
        targets.offered("vertex", base.TOOLS, Cloud())
