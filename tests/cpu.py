"""CPU-seconds by test, beside pytest's `--durations`: on a 2-core machine a test's cost to
the suite is its CPU time (its own and its child processes'), not its wall time, which the
other workers stretch. Each phase's `getrusage` difference rides on the test's report (xdist
carries `user_properties` to the controller), which prints the top ones at the end."""

from __future__ import annotations

import resource

import pytest

SHOWN = 25
SHOWN_FILES = 15  # and the files: where the many quick tests add up
PROPERTY = "cpu_seconds"


def used() -> float:
    """User and system seconds of this process and of its children waited for so far."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    before = used()
    yield
    item.user_properties.append((PROPERTY, ("setup", used() - before)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    before = used()
    yield
    item.user_properties.append((PROPERTY, ("call", used() - before)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    before = used()
    yield
    item.user_properties.append((PROPERTY, ("teardown", used() - before)))


SPENT: dict[str, dict[str, float]] = {}  # by test: each phase's seconds


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """On the controller (or a run without xdist): each test's phases as they arrive (the
    teardown's report carries the setup's and the call's too)."""
    phases = dict(value for name, value in report.user_properties if name == PROPERTY)
    if report.when == "teardown" and phases:
        SPENT[report.nodeid] = phases


def pytest_terminal_summary(terminalreporter) -> None:
    if not SPENT:
        return
    total = sum(sum(phases.values()) for phases in SPENT.values())
    rows = sorted(((seconds, phase, nodeid) for nodeid, phases in SPENT.items()
                   for phase, seconds in phases.items()), reverse=True)[:SHOWN]
    terminalreporter.write_sep("=", f"CPU-seconds by test phase (own and child processes; "
                                    f"{total:,.0f} in {len(SPENT)} tests)")
    for seconds, phase, nodeid in rows:
        terminalreporter.write_line(f"{seconds:8.1f}s {phase:8} {nodeid}")
    files: dict[str, list[float]] = {}
    for nodeid, phases in SPENT.items():
        files.setdefault(nodeid.split("::", 1)[0], []).append(sum(phases.values()))
    terminalreporter.write_sep("-", "by file")
    for seconds, count, name in sorted(((sum(v), len(v), k) for k, v in files.items()),
                                       reverse=True)[:SHOWN_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f}s {count:5} tests  {name}")
