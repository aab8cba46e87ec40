"""Every YAML a user hands in is read one way (trainer/common/yamlfile.py): a job file, a rerun's
stored job.yaml, a sweep, `--classes`, a YOLO data.yaml and a Model Garden `--config-file`.
What YAML 1.1 reads otherwise than YAML 1.2 (`010` is 8, `1:30` is 90, `0x10` is 16, `yes` is
true), a repeated key, an overlong number and a non-finite one are refused in one line naming
the file and the line; files our writer wrote read back unchanged."""

from __future__ import annotations

import pytest
import yaml

from launch.errors import InputError, UserError
from launch.stores.runs import configs
from launch.values import jobfile, sweep
from tests.cli import REPO, refused
from tests.test_jobfile import invoke
from trainer.common.errors import USAGE_ERRORS
from trainer.data.changes import ClassChanges
from trainer.data.formats import yolo

# (a file's text, where the mistake is, what the line says): each a number or a key YAML 1.1
# and YAML 1.2 read differently, or that no reader should guess at.
MISTAKES = [
    ("steps: 5\nsteps: 999999999\n", 2, "the key 'steps' again (first at line 1) — keep one"),
    ("steps: 010\n", 1, "010 is 8 in YAML 1.1, not a plain decimal number — write the number "
                        "in decimal, or quote it for text"),
    ("steps: 1:30\n", 1, "1:30 is 90 in YAML 1.1"),
    ("steps: 0x10\n", 1, "0x10 is 16 in YAML 1.1"),
    ("steps: 1_000\n", 1, "1_000 is 1000 in YAML 1.1"),
    ("steps: " + "9" * 5000 + "\n", 1, "a number of 5,000 characters — write at most 100"),
    ("steps: 1e999\n", 1, "1e999 is not a finite number"),
    ("x:\n  on: 1\n", 2, "on is true or false in YAML 1.1 and text in YAML 1.2 — write true or "
                         "false, or quote it for text"),
    ("a: !!python/object/apply:os.system [ls]\n", 1, "the tag tag:yaml.org,2002:python/object/"
                                                      "apply:os.system — write plain values"),
]
IDS = ["duplicate", "octal", "sexagesimal", "hex", "underscores", "digits", "inf", "yes-no",
       "tag"]


def expected(where: str, line: int, what: str) -> str:
    return f"{where}: line {line}: {what}"


@pytest.mark.parametrize(("text", "line", "what"), MISTAKES, ids=IDS)
def test_a_job_file_is_refused_in_one_line_exit_2(text, line, what, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(text)
    assert refused(invoke("train", f"--job={job}")).startswith(
        "error: " + expected(f"--job {job}", line, what))


@pytest.mark.parametrize(("text", "line", "what"), MISTAKES[:2], ids=IDS[:2])
def test_a_stored_job_file_a_rerun_replays_is_refused_the_same(text, line, what, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "job.yaml").write_text(text + "target: local\n")
    assert refused(invoke("train", f"--rerun={run}")).startswith(
        "error: " + expected(f"--rerun {run} ({run}/job.yaml)", line, what))


def readers() -> dict:
    """Each reader of a user's YAML file, by the flag that names it: a function of the
    file's path, and the name its refusal starts with."""
    return {
        "--sweep": (lambda path: sweep.load(str(path)), lambda path: f"--sweep {path}"),
        "--classes": (ClassChanges.read, lambda path: f"--classes {path}"),
        "data.yaml": (yolo.read_config, str),
        "--config-file": (lambda path: configs.read_local([str(path)]),
                          lambda path: f"--config-file {path}"),
    }


@pytest.mark.parametrize("reader", ["--sweep", "--classes", "data.yaml", "--config-file"])
@pytest.mark.parametrize(("text", "line", "what"), MISTAKES, ids=IDS)
def test_every_other_yaml_a_user_hands_in_is_read_the_same_way(reader, text, line, what,
                                                               tmp_path):
    read, shown = readers()[reader]
    path = tmp_path / "data.yaml"
    path.write_text(text + "names: [cat]\ntrain: images\n")
    with pytest.raises(Exception) as raised:
        read(path)
    assert isinstance(raised.value, (UserError, *USAGE_ERRORS)), raised.value  # exit 2
    assert str(raised.value).startswith(expected(shown(path), line, what)), raised.value


def test_plain_yaml_12_reads_as_written():
    job = jobfile.parse("steps: 2000\noverride: {learning_rate: 1e-3, input_size: [640, 640, 3],"
                        " norm: .5, flag: true, none: null}\nlabel: {day: 2026-12-02, sep: _}\n",
                        "j")
    assert job == {"version": 2, "steps": 2000, "override": {"learning_rate": 0.001,
                                               "input_size": [640, 640, 3], "norm": 0.5,
                                               "flag": True, "none": None},
                   "label": {"day": "2026-12-02", "sep": "_"}}


def test_what_our_writer_wrote_reads_back_and_old_job_files_still_load():
    """Text that either YAML version would read as a number or a boolean is quoted when we
    write it; job files written by the previous version (PyYAML's safe_dump) still load."""
    training = jobfile.resolve("train", {"run_id": "1e5", "label": ["team=010"],
                                         "override": ["learning_rate=1e-9"]})
    again = jobfile.resolve("train", {}, jobfile.parse(training.to_yaml("train"), "saved"),
                            "saved")
    assert again == training
    assert (again.run_id, again.label, again.override) == \
        ("1e5", {"team": "010"}, {"learning_rate": 1e-9})
    golden = (REPO / "tests" / "golden" / "train-vertex-finetune.job.yaml").read_text()
    assert jobfile.parse(golden, "golden") == yaml.safe_load(golden)


def test_an_override_flag_is_read_as_the_job_file_is():
    with pytest.raises(InputError, match=r"^--override: line 1: 010 is 8 in YAML 1\.1"):
        jobfile.resolve("train", {"override": ["batch_size=010"]})
