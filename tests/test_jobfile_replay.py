"""Stored job files replay: each file under tests/golden/jobfiles/ is what `--save-job` wrote
(the text a run stores as its job.yaml, with what the target decided: the run id, the region)
for one command, captured from the code of 2026-12-02, before the job value changed shape.
`invoke TASK --job FILE --dry-run` on it must still print the request it printed then
(FILE.request), byte for byte but for the placeholders of tests/test_dry_run_golden.py.

The corpus is data, not regenerated: a change to how job files are read must keep reading
these. `PETS_WRITE_GOLDEN=1` adds the files of a command that has none yet (an existing
file is never rewritten: it is a file some run already stored)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from tests.cli import invoke
from tests.test_dry_run_golden import GOLDEN, placeholders, researcher

CORPUS = GOLDEN / "jobfiles"
VERTEX = "--target vertex"
# name: the task and the command that wrote the file (the task is the file's first word)
COMMANDS = {
    "train-local-defaults": "train --steps 2000",
    "train-local-finetune": (
        "train --init-from mobilenetv2-imagenet --steps 500 --override learning_rate=0.02 "
        "--override batch_size=4 --seed 7 --label team=vision --early-stop-patience 3 "
        "--early-stop-min-delta 0.01"),
    "train-local-workers": (
        "train --workers 1 --steps 100 --params-override trainer.steps_per_loop=5 "
        "--model-dir work/two --data-dir work/records"),
    "train-vertex-gpu": (
        f"train {VERTEX} --experiment pets_retinanet_resnetfpn --machine-type g2-standard-8 "
        "--accelerator NVIDIA_L4:1 --spot --timeout-hours 6 --web-access --max-cost 20 "
        "--label team=vision --run-id l4-spot"),
    "train-vertex-ladder": (
        f"train {VERTEX} --experiment pets_retinanet_resnetfpn --machine-type a2-highgpu-1g "
        "--fallback g2-standard-8 --regions us-central1,us-east4 --capacity spot,standard "
        "--max-preemptions 3 --timeout-hours 12 --run-id a100"),
    "train-vertex-workers": (
        f"train {VERTEX} --experiment pets_retinanet_resnetfpn --machine-type n1-standard-8 "
        "--accelerator NVIDIA_TESLA_T4:1 --workers 2 --reduction-servers 1 --run-id t4x3"),
    "train-vertex-tpu": (
        f"train {VERTEX} --experiment pets_retinanet_resnetfpn --tpu v5litepod-8 "
        "--run-id tpu8"),
    "train-vertex-reservation": (
        f"train {VERTEX} --experiment pets_retinanet_resnetfpn --machine-type a2-highgpu-1g "
        "--reservation any --early-stop-patience 2 --early-stop-evaluator eval-job "
        "--run-id reserved"),
    "eval-local-test": "eval --split test --once",
    "eval-vertex": (
        f"eval {VERTEX} --run-id gpu1 --machine-type n1-standard-4 --once"),
    "tune-local": (
        "tune --param learning_rate=0.001:0.05:log --param batch_size=4,8 --trials 6 "
        "--parallel 2 --steps 300"),
    "tune-vertex": (
        f"tune --sweep sweep.yaml {VERTEX} --accelerator NVIDIA_TESLA_T4:1 --run-id lr1"),
}


def replay(name: str, root: Path) -> str:
    """`invoke TASK --job FILE --dry-run` on the corpus file, in a researcher's directory."""
    task = COMMANDS[name].split()[0]
    with researcher(root) as env:
        result = invoke(task, "--job", str(CORPUS / f"{name}.yaml"), "--dry-run", env=env,
                        cwd=root)
    assert result.returncode == 0, result.stderr
    return placeholders(result.stdout)


def write(name: str, root: Path) -> None:
    """The command's job file (as --save-job writes it) and its replay, for a new name."""
    saved = root / "saved.yaml"
    with researcher(root) as env:
        result = invoke(*shlex.split(COMMANDS[name]), "--dry-run", f"--save-job={saved}",
                        env=env, cwd=root)
    assert result.returncode == 0, result.stderr
    CORPUS.mkdir(exist_ok=True)
    (CORPUS / f"{name}.yaml").write_text(saved.read_text())
    (CORPUS / f"{name}.request").write_text(replay(name, root))


@pytest.mark.parametrize("name", COMMANDS)
def test_a_stored_job_file_replays_to_the_request_it_was_saved_from(name, tmp_path):
    if not (CORPUS / f"{name}.yaml").exists():
        if os.environ.get("PETS_WRITE_GOLDEN") != "1":
            pytest.fail(f"tests/golden/jobfiles/{name}.yaml is missing (PETS_WRITE_GOLDEN=1 "
                        "writes a new command's)")
        write(name, tmp_path)
        pytest.skip(f"wrote tests/golden/jobfiles/{name}.*")
    assert replay(name, tmp_path) == (CORPUS / f"{name}.request").read_text(), \
        f"tests/golden/jobfiles/{name}.yaml replays to another request"


def test_the_corpus_holds_every_shape_of_job_file():
    """Every task, both targets, and the Vertex AI options a file can carry."""
    texts = {path.stem: path.read_text() for path in CORPUS.glob("*.yaml")}
    assert set(texts) == set(COMMANDS)
    for task in ("train", "eval", "tune"):
        for target in ("local", "vertex"):
            assert any(name.startswith(f"{task}-{target}") for name in texts), (task, target)
    written = "\n".join(texts.values())
    for key in ("accelerator:", "spot:", "web-access:", "fallback:", "capacity:", "regions:",
                "tpu:", "workers:", "reduction-servers:", "reservation:", "init-from:",
                "override:", "label:", "sweep:", "eval:", "run-id:", "region:"):
        assert key in written, key
