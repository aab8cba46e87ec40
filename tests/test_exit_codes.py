"""Issue 38 item 7: one exit-code rule for every task (trainer/common/errors.py,
docs/design/exit-codes.md): a user's mistake (a flag, a setting, an input that is missing or of
the wrong kind) exits 2 with one `error:` line; work that ran and failed exits 1, naming its
output."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import invoke, refused
from trainer.data import pets
from trainer.data.sample import write_sample


def task_names() -> list[str]:
    import tasks

    return sorted(tasks.namespace.task_names)


@pytest.mark.parametrize("name", task_names())
def test_every_task_refuses_an_unknown_flag_with_exit_2(name):
    line = refused(invoke(name, "--no-such-flag"))  # exit 2, one line, no traceback
    assert line in (  # a task with a required value names that first
        "error: No idea what '--no-such-flag' is! (`invoke --list` lists the tasks, `invoke "
        "TASK --help` its flags)") or line.endswith(
        f"needs a value, not --no-such-flag; this task's options: invoke --help {name}") or \
        f"'{name}' did not receive required positional arguments" in line


def test_an_unknown_task_is_exit_2_too():
    assert refused(invoke("trian")).startswith("error: No idea what 'trian' is!")


MISSING = "/nonexistent/input"
MISTAKES = {  # a task and an input of it that is not there, as a user mistypes it
    "data.convert": ("data.convert", f"--data-dir={MISSING}"),
    "data.convert coco": ("data.convert", "--format=coco", f"--annotations={MISSING}/a.json",
                          f"--images={MISSING}"),
    "data.convert yolo": ("data.convert", "--format=yolo", f"--data-dir={MISSING}"),
    "data.inspect": ("data.inspect", f"--records={MISSING}"),
    "data.upload": ("data.upload", f"--records-dir={MISSING}", "--bucket=b-x", "--project=p"),
    "predict no image": ("predict", f"--images={MISSING}/*.jpg"),
    "predict no model": ("predict", f"--model={MISSING}"),
    "export": ("export", f"--model-dir={MISSING}", f"--output-dir={MISSING}-out"),
    "eval": ("eval", f"--model-dir={MISSING}", f"--data-dir={MISSING}"),
    "train steps 0": ("train", "--steps=0"),
    "runs.compare": ("runs.compare", f"--run={MISSING}", f"--run={MISSING}-2"),
}


@pytest.mark.parametrize("command", MISTAKES.values(), ids=MISTAKES)
def test_a_missing_input_is_a_mistake_exit_2_in_one_line(command, tmp_path):
    line = refused(invoke(*command, cwd=tmp_path))
    assert "failed with exit status" not in line


def test_work_that_ran_and_failed_exits_1_naming_why(tmp_path: Path):
    root = write_sample(tmp_path / "pets", num_images=3)
    for xml in (root / pets.XMLS_DIR).iterdir():
        xml.write_text("<annotation><object>")  # every example unreadable: nothing to write
    ran = invoke("data.convert", f"--data-dir={root}", f"--output-dir={tmp_path / 'out'}")
    assert ran.returncode == 1, (ran.stdout, ran.stderr)
    (line,) = [line for line in ran.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith("error: convert failed with exit status 1: no valid example to "
                           "write; see ")


def test_a_lock_another_writer_holds_or_a_linked_lock_file_is_exit_2_in_one_line(tmp_path):
    """DirectoryBusy from any lock a task takes (the pipeline's state, the local jobs table,
    a model directory) is the user's to resolve: one `error:` line, exit 2, no traceback."""
    from invoke import Exit

    import tasks
    from launch.features.pipeline import steps

    state = tmp_path / "state"
    state.mkdir()
    (state / steps.STATE_LOCK).symlink_to(tmp_path / "elsewhere")

    def change_state() -> str:
        with steps.turn(str(state)):
            return "changed"

    with pytest.raises(Exit) as stopped:
        tasks._guarded(change_state)
    assert stopped.value.code == 2 and str(stopped.value.message) == (
        f"error: {state / steps.STATE_LOCK} is a symbolic link, not a lock file: remove it "
        "(nothing was written through it)")
    assert not (tmp_path / "elsewhere").exists()
