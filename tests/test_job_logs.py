"""`invoke jobs.logs` through the real Cloud Logging and Vertex AI clients against fakes on
127.0.0.1: the newest lines, following until the job ends, paging, and clear errors."""

from __future__ import annotations

import unicodedata

import pytest
from invoke.exceptions import Exit

from launch.errors import InputError
from launch.features.jobs import job_command
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import logs as job_logs
from launch.text import UNSAFE_CATEGORIES
from tests.fakes.cloud import fake_cloud
from tests.fakes.logs import FakeLoggingService, job_entry
from tests.fakes.vertex import FakeJobService
from tests.test_triage import failed_job
from tests.test_vertex import SETUP, eval_custom_job

PROJECT = SETUP.project


@pytest.fixture
def logging_fake():
    with FakeLoggingService() as service:
        yield service


def test_tail_shows_the_newest_lines_of_that_job_oldest_first(logging_fake):
    logging_fake.entries += [job_entry("7", s, f"step {s}") for s in range(30)]
    logging_fake.entries += [job_entry("8", s, "another job") for s in range(5)]
    entries = job_logs.tail(logging_fake.client(), PROJECT, "7", lines=4)
    assert [e.text_payload for e in entries] == ["step 26", "step 27", "step 28", "step 29"]
    (request,) = logging_fake.requests
    assert list(request.resource_names) == [f"projects/{PROJECT}"]
    line = job_logs.format_entry(entries[-1])
    assert line == "2026-11-22 01:00:29 workerpool0-0 INFO    step 29"


def test_follow_prints_every_line_once_until_the_job_ends(logging_fake):
    with FakeJobService() as vertex:
        jobs = vertex.client()
        job = vertex_client.submit(jobs, PROJECT, SETUP.region,
                                   eval_custom_job(SETUP, "run1"))
        job_id = job.name.rsplit("/", 1)[-1]
        logging_fake.entries += [job_entry(job_id, s, f"old {s}") for s in range(3)]
        arriving = iter([[job_entry(job_id, 3, "starting"), job_entry(job_id, 3, "same second",
                                                                    replica="workerpool1-0")],
                         [job_entry(job_id, s, f"step {s}") for s in range(4, 2504)]])
        printed = []
        done = job_logs.follow(logging_fake.client(), jobs, PROJECT, job.name,
                               on_entry=lambda e: printed.append(e.text_payload), lines=2,
                               poll_seconds=0,
                               sleep=lambda s: logging_fake.entries.extend(next(arriving, [])))
    assert done.state.name == "JOB_STATE_SUCCEEDED"
    assert printed[:4] == ["old 1", "old 2", "starting", "same second"]
    assert printed[4:] == [f"step {s}" for s in range(4, 2504)]  # three pages, none twice


def test_bad_job_ids_and_api_errors_are_clear(logging_fake):
    with pytest.raises(InputError, match="not a custom job id"):
        job_logs.tail(logging_fake.client(), PROJECT, 'x" OR "1', lines=1)
    with FakeJobService() as vertex, pytest.raises(vertex_client.VertexError, match="not found"):
        job_logs.follow(logging_fake.client(), vertex.client(), PROJECT,
                        "projects/p/locations/us-central1/customJobs/404", print)


def test_a_refused_log_read_names_the_logging_role(logging_fake):
    logging_fake.deny = True
    with pytest.raises(vertex_client.VertexError,
                       match=r"permission denied .*roles/logging\.viewer"):
        job_logs.tail(logging_fake.client(), PROJECT, "7")


# What a replica's log may hold when training code or data writes it: a window-title (OSC),
# clear-screen and cursor (CSI) sequences, BEL, a carriage return, C1's CSI (\x9b), a bidi
# override, a zero-width space and NUL
HOSTILE = ["\x1b]0;owned\x07title", "\x1b[2J\x1b[Hcleared", "\x1b[1A\x1b[2Kup", "bell\x07",
           "over\rwritten", "c1\x9b31m", "bidi \u202eexe.txt", "zero\u200bwidth", "nul\x00"]
SHOWN = ["?]0;owned?title", "?[2J?[Hcleared", "?[1A?[2Kup", "bell?", "over?written",
         "c1?31m", "bidi ?exe.txt", "zero?width", "nul?"]


def obeyed(text: str) -> set[str]:
    """The characters of `text` a terminal would act on rather than show."""
    return {c for c in text if c not in "\t\n" and unicodedata.category(c) in UNSAFE_CATEGORIES}


def test_log_lines_and_job_errors_are_shown_never_obeyed(tmp_path, capsys):
    """`jobs.logs --follow` (what `train --follow` prints too), `jobs.logs` and the failure
    the task prints: one cleaner, launch.text.printable, shows every control as '?'."""
    import tasks

    with fake_cloud(tmp_path) as fakes:
        number = failed_job(fakes, HOSTILE, "The replica \x1b]0;api\x07 failed\x9b2J")
        entry = job_entry(number, 99, "")  # a JSON payload's message, as Python loggers send
        entry.json_payload = {"message": "json \x1b[31mred\u2028line"}
        fakes.logs.entries.append(entry)
        with pytest.raises(Exit) as failed:
            tasks._guarded(lambda: job_command(fakes.cloud(), "logs", number, follow=True,
                                               poll_seconds=0))
        tailed = job_command(fakes.cloud(), "logs", number)
    followed = capsys.readouterr().out
    for text in (followed, tailed, failed.value.message):
        assert obeyed(text) == set(), text
    for shown in (followed, tailed):
        assert [line.split(None, 4)[4] for line in shown.splitlines()
                if "workerpool0-0" in line] == [*SHOWN, "json ?[31mred?line"]
    assert "The replica ?]0;api? failed?2J" in failed.value.message
