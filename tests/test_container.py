"""The Dockerfile: lint, the entrypoint it runs, and pins that agree with pyproject.toml."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib

from tests.conftest import REPO


def dockerfile_entrypoints() -> list[list[str]]:
    text = (REPO / "Dockerfile").read_text()
    return [json.loads(m) for m in re.findall(r"^ENTRYPOINT (\[.*\])$", text, re.MULTILINE)]


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(REPO / ".venv" / "bin" / "hadolint")
    result = subprocess.run([hadolint, "--failure-threshold", "warning", "Dockerfile"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_target_runs_the_trainer_as_non_root():
    text = (REPO / "Dockerfile").read_text()
    assert set(re.findall(r"^FROM .* AS (\w+)$", text, re.MULTILINE)) >= {"gpu", "tpu"}
    assert dockerfile_entrypoints() == [["python", "-m", "trainer"]] * 2
    assert re.findall(r"^USER (\S+)$", text, re.MULTILINE) == ["1000", "1000"]


def test_entrypoint_command_works_locally(tmp_path):
    (entrypoint,) = {tuple(e) for e in dockerfile_entrypoints()}
    command = [sys.executable, *entrypoint[1:]]  # the venv's python in place of the image's
    result = subprocess.run([*command, "data", "sample", f"--output_dir={tmp_path}",
                             "--num_images=3"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "images").glob("*.jpg"))) == 3
    help_text = subprocess.run([*command, "--help"], capture_output=True, text=True,
                               timeout=120, cwd=REPO)
    for flag in ("--experiment", "--config_file", "--params_override", "--mode", "--model_dir",
                 "--tpu", "--data_dir", "--label_map", "--init_checkpoint"):
        assert flag in help_text.stdout


def test_container_variants_pin_the_same_tensorflow():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]

    def version(extra: str, package: str) -> str:
        (pin,) = [r for r in extras[extra] if re.match(rf"{re.escape(package)}(\[.*\])?==", r)]
        return pin.split("==")[1]

    assert version("trainer", "tensorflow") == version("gpu", "tensorflow") == \
        version("tpu", "tensorflow-tpu")


def test_dockerignore_keeps_only_what_the_image_needs():
    lines = (REPO / ".dockerignore").read_text().split()
    assert "*" in lines and "!trainer/" in lines and "!pyproject.toml" in lines
