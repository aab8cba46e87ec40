"""One writer per directory (trainer/common/locks.py): the lock's file is the directory's own,
never a file a symbolic link points at."""

from __future__ import annotations

import os
import re

import pytest

from trainer.common import locks
from trainer.common.errors import DirectoryBusy


def test_a_second_holder_is_refused_naming_the_first_and_the_lock_is_released_on_close(
        tmp_path):
    held = locks.hold(tmp_path / "run", "x.lock", "sweep directory")
    said = f"sweep directory {tmp_path / 'run'} is in use by process {os.getpid()}; wait"
    with pytest.raises(DirectoryBusy, match=re.escape(said)):
        locks.hold(tmp_path / "run", "x.lock", "sweep directory")
    held.close()
    locks.hold(tmp_path / "run", "x.lock", "sweep directory").close()
    assert (tmp_path / "run" / "x.lock").read_text() == f"{os.getpid()}\n"


def test_a_lock_file_that_is_a_symbolic_link_is_refused_and_its_target_kept(tmp_path):
    """A holder truncates its lock file and writes its process id there: through a link that
    would overwrite the file linked to (a checkpoint, a config), so a link is refused."""
    target = tmp_path / "precious.txt"
    target.write_text("not a lock\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / locks.MODEL_DIR_LOCK).symlink_to(target)
    (run / "best.lock").symlink_to(tmp_path / "missing")  # a dangling one: not created
    with pytest.raises(DirectoryBusy, match=r"\.writer\.lock is a symbolic link, not a lock "
                                            r"file: remove it \(nothing was written"):
        locks.hold_model_dir(str(run))
    with pytest.raises(DirectoryBusy, match=r"best\.lock is a symbolic link"), \
            locks.taking_turns(str(run), "best.lock"):
        pass
    assert target.read_text() == "not a lock\n" and not (tmp_path / "missing").exists()
