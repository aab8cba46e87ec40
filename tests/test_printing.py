"""What the project prints is its own, whole: piped output is never wrapped
(launch/text.py `console`), and a note's reason is cut only where the words are not ours
(launch/errors.py `reason`)."""

from __future__ import annotations

from launch.errors import InputError, reason
from launch.text import console


def test_piped_output_keeps_each_line_whole(capsys):
    line = "annotated 6 image(s) in /work/demo/predictions, detections scoring at least " \
           "0.01 (export.json: the F1-best score of eval/ckpt-40.json (F1 0.000))"
    shown = console()  # pytest's captured stdout: not a terminal, as a pipe or a log
    shown.print(line, markup=False, highlight=False)
    shown.print(f"{'x' * 150} end", markup=False, highlight=False)
    assert capsys.readouterr().out == f"{line}\n{'x' * 150} end\n"


def test_a_notes_reason_in_the_projects_words_is_whole():
    ours = ("no bucket for environment 'dev': give bucket by --bucket, PETS_BUCKET, invoke.yaml's "
            "vertex.bucket or infra/outputs.json's bucket. A platform engineer's `npx cdktn "
            "deploy pets-dev --outputs-file infra/outputs.json` writes them all")
    assert len(ours) > 200 and reason(InputError(ours)) == ours
    assert reason(ValueError("y" * 300 + "\nsecond line")) == "y" * 200 + "..."
    assert reason(ValueError("short\nsecond")) == "short"
