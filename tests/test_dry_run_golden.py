"""The documentation's dry runs print, byte for byte, what they printed when the golden files in
tests/golden/ were captured from `python -m invoke` (main at 1bed4ef): the request on stdout
(CustomJob, HyperparameterTuningJob, UploadModelRequest, DeployModelRequest JSON, or the
trainer's command here), and on stderr the settings, job file, resources, prices and notes.

Each command runs as the guides type it, in a directory of its own (`work/records`, the
tuning guide's sweep.yaml, the job file an earlier example saved), with a deployed stack's settings
as PETS_* variables and no Google credentials; the conversion reads its raw data from the
fake Cloud Storage. What changes by itself is pinned by a flag (`--run-id` where the clock
would choose it) or replaced by a named placeholder, each an exact string: the image tag
(the content hash of these sources), the git revision label and this interpreter's path.

A change you mean: `PETS_WRITE_GOLDEN=1 pytest tests/test_dry_run_golden.py` rewrites the
files (those tests skip), and the diff of tests/golden/ is the change to review."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from docsite.commands import block_starting, every_block
from infra.image_context import context_hash
from launch.context.cloud import standard_labels
from tests.cli import invoke

GOLDEN = Path(__file__).parent / "golden"
BUCKET = "pets-detector-dev-pets-data"
REPOSITORY = "us-central1-docker.pkg.dev/pets-detector-dev/pets-images"
PROJECT = "pets-detector-dev"
STACK = {  # a deployed dev stack's outputs, as PETS_* variables
    "PETS_PROJECT": PROJECT, "PETS_REGION": "us-central1", "PETS_BUCKET": BUCKET,
    "PETS_IMAGE": f"{REPOSITORY}/trainer:deployed",
    "PETS_TPU_IMAGE": f"{REPOSITORY}/trainer-tpu:deployed",
    "PETS_SERVING_IMAGE": f"{REPOSITORY}/serving:deployed",
    "PETS_SERVING_GPU_IMAGE": f"{REPOSITORY}/serving-gpu:deployed",
    "PETS_SERVICE_ACCOUNT": f"pets-trainer@{PROJECT}.iam.gserviceaccount.com",
    "PETS_CONVERTER_SERVICE_ACCOUNT": f"pets-converter@{PROJECT}.iam.gserviceaccount.com",
    "PETS_SERVING_SERVICE_ACCOUNT": f"pets-serving@{PROJECT}.iam.gserviceaccount.com",
    "PETS_PIPELINES_SERVICE_ACCOUNT": f"pets-pipelines@{PROJECT}.iam.gserviceaccount.com",
    "PETS_LAUNCHER_IMAGE": f"{REPOSITORY}/launcher:deployed",
    "PETS_TENSORBOARD": f"projects/{PROJECT}/locations/us-central1/tensorboards/7",
    "PETS_BUCKET_LOCATION": "US", "PETS_REPOSITORY_LOCATION": "us",  # as the guide's ladder
    "GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/no-credentials.json",
    "LOGNAME": "researcher"}  # the `user` label


@dataclasses.dataclass(frozen=True)
class Example:
    command: str  # after `invoke`, exactly as the docs have it
    pinned: tuple[str, ...] = ()  # flags the test adds: `--dry-run`, or what the clock picks
    after: str = ""  # the example whose saved job file this one reads

    def args(self) -> list[str]:
        return [*shlex.split(self.command.replace("gs://BUCKET/", f"gs://{BUCKET}/")),
                *self.pinned]


FINETUNE = "train-vertex-finetune"
EXAMPLES = {
    FINETUNE: Example(
        "train --target vertex --experiment pets_retinanet_resnetfpn --init-from "
        "retinanet-resnet50fpn-coco --machine-type g2-standard-8 --accelerator NVIDIA_L4:1 "
        "--override batch_size=16 --override learning_rate=0.01 --steps 5000 --run-id "
        "l4-finetune --dry-run --save-job finetune.yaml"),
    "train-vertex-job-file": Example("train --job finetune.yaml", ("--dry-run",), FINETUNE),
    "eval-vertex-job-file": Example("eval --job finetune.yaml", ("--dry-run",), FINETUNE),
    "train-vertex-ladder": Example(
        "train --target vertex --experiment pets_retinanet_resnetfpn --machine-type "
        "a2-highgpu-1g --fallback g2-standard-8 --regions us-central1,us-east4 --capacity "
        "spot,standard --timeout-hours 12 --run-id a100 --dry-run"),
    "tune-vertex": Example(
        "tune --sweep sweep.yaml --target vertex --accelerator NVIDIA_TESLA_T4:1 --dry-run",
        ("--run-id=lr1",)),
    "convert-vertex": Example(
        "data.convert --target vertex --format coco --data-dir gs://BUCKET/raw/shelter "
        "--annotations gs://BUCKET/raw/shelter/labels.json --images "
        "gs://BUCKET/raw/shelter/photos --dataset shelter-2026 --max-cost 2 --dry-run"),
    "model-upload": Example("model.upload --run-id gpu1 --dry-run"),
    "endpoint-deploy": Example("endpoint.deploy --run-id gpu1", ("--dry-run",)),
    "train-local": Example("train --init-from mobilenetv2-imagenet --steps 2000",
                           ("--dry-run",)),
    "eval-local": Example("eval --once", ("--dry-run",)),
    "tune-local": Example(
        "tune --param learning_rate=0.001:0.05:log --param batch_size=4,8 --trials 6 "
        "--parallel 2 --steps 300", ("--dry-run",)),
}


def placeholders(text: str) -> str:
    """What changes by itself, named: the image tag, the git revision and this interpreter's
    path, each replaced as an exact string."""
    return (text.replace(f":{context_hash()}", ":<context-hash>")
            .replace(f'"git-revision": "{standard_labels()["git-revision"]}"',
                     '"git-revision": "<git-revision>"')
            .replace(f"{sys.executable} -m trainer", "<python> -m trainer"))


@contextlib.contextmanager
def workspace(root: Path, example: Example) -> Iterator[dict[str, str]]:
    """A researcher's directory for `example` (converted records, the tuning guide's sweep
    file, an earlier example's job file) and the variables it runs with."""
    with researcher(root, gcs=example.command.startswith("data.convert")) as env:
        if example.after:
            assert invoke(*EXAMPLES[example.after].args(), env=env, cwd=root).returncode == 0
        yield env


@contextlib.contextmanager
def researcher(root: Path, gcs: bool = False) -> Iterator[dict[str, str]]:
    """`root` as a researcher's directory: converted records (`work/records`) and the tuning
    guide's sweep.yaml; the variables of a deployed stack, with no credentials; with `gcs`,
    a fake Cloud Storage holding the raw data the conversion example reads."""
    (root / "work" / "records").mkdir(parents=True, exist_ok=True)
    (root / "sweep.yaml").write_text(block_starting("# sweep.yaml").text)
    (root / "ct-vertex.yaml").write_text(block_starting("# ct-vertex.yaml").text)
    if not gcs:
        yield STACK
        return
    from tests.fakes.gcs import FakeGcs

    with FakeGcs() as gcs:
        bucket = gcs.client().create_bucket(BUCKET)
        bucket.blob("raw/shelter/labels.json").upload_from_string(json.dumps({
            "images": [{"id": 1, "file_name": "a.jpg", "width": 4, "height": 4}],
            "annotations": [], "categories": [{"id": 1, "name": "cat"}]}))
        bucket.blob("raw/shelter/photos/a.jpg").upload_from_string(b"\xff\xd8" + b"x" * 100)
        yield {**STACK, "STORAGE_EMULATOR_HOST": gcs.url}


def golden_files(name: str) -> dict[str, Path]:
    return {stream: GOLDEN / f"{name}.{stream}" for stream in ("stdout", "stderr")}


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_documented_dry_run_prints_what_it_printed(name, tmp_path, prices_today):
    example = EXAMPLES[name]
    with workspace(tmp_path, example) as env:
        result = invoke(*example.args(), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    printed = {"stdout": placeholders(result.stdout), "stderr": placeholders(result.stderr)}
    if name == FINETUNE:
        printed["job.yaml"] = (tmp_path / "finetune.yaml").read_text()
    files = {**golden_files(name), **({"job.yaml": GOLDEN / f"{name}.job.yaml"}
                                      if name == FINETUNE else {})}
    if os.environ.get("PETS_WRITE_GOLDEN") == "1":
        for stream, path in files.items():
            path.write_text(printed[stream])
        pytest.skip(f"wrote tests/golden/{name}.*")
    assert printed == {stream: path.read_text() for stream, path in files.items()}, \
        f"{name} prints other than tests/golden/{name}.*"


def test_the_examples_are_the_docs():
    """Each command above is typed so in the docs; the job file and the ladder's notes they
    show are those the golden runs printed."""
    commands = {command for block in every_block() for command in block.commands()}
    for example in EXAMPLES.values():
        assert f"invoke {example.command}" in commands, example.command
    assert block_starting("# invoke train --job FILE: this job again (flags given with it "
                          "win)").text == (GOLDEN / f"{FINETUNE}.job.yaml").read_text()
    ladder = block_starting("$ invoke train --target vertex --experiment "
                            "pets_retinanet_resnetfpn --machine-type a2-highgpu-1g \\").text
    printed = (GOLDEN / "train-vertex-ladder.stderr").read_text().splitlines()
    shown = [line for line in ladder.splitlines()[1:] if line[:1] not in ("", " ", "…")]
    assert shown and all(line in printed for line in shown), shown


def test_a_job_file_gives_the_request_it_was_saved_from():
    """As the fine-tuning guide says of `--save-job` and `--job`: the identical request,
    byte for byte."""
    assert (GOLDEN / "train-vertex-job-file.stdout").read_text() == \
        (GOLDEN / f"{FINETUNE}.stdout").read_text()
