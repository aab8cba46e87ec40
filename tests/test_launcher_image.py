"""The launcher image, which continuous training's pipeline steps run in (launcher.Dockerfile):
its own build context and tag, apart from the trainer images'; its build in the stack; what
it holds is what the steps import, without TensorFlow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from infra import names
from infra.environments import ENVIRONMENTS
from infra.image_context import (
    CLOUDBUILD_CONFIG,
    DOCKERFILE,
    LAUNCHER_CLOUDBUILD_CONFIG,
    LAUNCHER_DOCKERFILE,
    TAG_CHECK,
    context_files,
    context_hash,
    ignore_file,
    main,
)
from infra.synthesized import resources
from tests.conftest import HANG, REPO


def test_the_launcher_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(REPO / ".venv" / "bin" / "hadolint")
    result = subprocess.run([hadolint, "--failure-threshold", "warning", LAUNCHER_DOCKERFILE],
                            cwd=REPO, capture_output=True, text=True, timeout=HANG)
    assert result.returncode == 0, result.stdout + result.stderr


def two_contexts(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for folder in ("trainer", "launch", "infra", "serving"):
        (root / folder).mkdir(parents=True)
        (root / folder / "a.py").write_text("print(1)\n")
    for name in ("Dockerfile", ".dockerignore", LAUNCHER_DOCKERFILE,
                 f"{LAUNCHER_DOCKERFILE}.dockerignore", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    return root


def test_a_launcher_edit_retags_the_launcher_alone_and_a_trainer_edit_both(tmp_path):
    """Each image's tag is the hash of its own context (its Dockerfile's ignore file): the
    launcher's code is not in the trainer images, so editing it rebuilds only the launcher;
    the trainer's modules are in both."""
    root = two_contexts(tmp_path)
    trainer, launcher = context_hash(root), context_hash(root, LAUNCHER_DOCKERFILE)
    assert trainer != launcher
    (root / "launch" / "a.py").write_text("print(2)\n")
    assert context_hash(root) == trainer
    assert context_hash(root, LAUNCHER_DOCKERFILE) != launcher
    launcher = context_hash(root, LAUNCHER_DOCKERFILE)
    (root / "trainer" / "a.py").write_text("print(2)\n")
    assert context_hash(root) != trainer
    assert context_hash(root, LAUNCHER_DOCKERFILE) != launcher
    serving, launcher = context_hash(root), context_hash(root, LAUNCHER_DOCKERFILE)
    (root / "serving" / "a.py").write_text("print(2)\n")  # the serving image's, not the steps'
    assert context_hash(root) != serving
    assert context_hash(root, LAUNCHER_DOCKERFILE) == launcher  # not in the steps' image
    with (root / f"{LAUNCHER_DOCKERFILE}.dockerignore").open("a") as f:
        f.write("launch/a.py\n")
    assert context_hash(root, LAUNCHER_DOCKERFILE) != launcher


def test_the_launcher_build_checks_its_tag_first_then_builds_with_its_ignore_file(tmp_path):
    """launcher.cloudbuild.yaml's first step, run as Cloud Build runs it (its args with the
    image substituted), passes the launcher context's own hash and refuses the trainer's; the
    build uses BuildKit, the builder that reads launcher.Dockerfile.dockerignore."""
    config = yaml.safe_load((REPO / "launcher.cloudbuild.yaml").read_text())
    check, build = config["steps"]
    image = "us-central1-docker.pkg.dev/p/pets-images/launcher:{}"

    def run(tag: str) -> subprocess.CompletedProcess:
        args = [a.replace("${_LAUNCHER_IMAGE}", image.format(tag)) for a in check["args"]]
        assert check["name"].startswith("python:") and args[0] == "python3"
        return subprocess.run([sys.executable, *args[1:]], cwd=REPO, capture_output=True,
                              text=True, timeout=HANG)

    tag = context_hash(REPO, LAUNCHER_DOCKERFILE)
    passed = run(tag)
    assert passed.returncode == 0 and tag in passed.stdout
    refused = run(context_hash(REPO))
    assert refused.returncode == 1 and "is not the content hash" in refused.stderr
    assert build["env"] == ["DOCKER_BUILDKIT=1"]
    assert build["args"][:3] == ["build", "-f", LAUNCHER_DOCKERFILE]
    assert config["images"] == ["${_LAUNCHER_IMAGE}"]
    with pytest.raises(SystemExit, match="usage"):
        main(["--dockerfile", "../Dockerfile", "x:1"])


def test_the_stack_builds_the_launcher_image_and_outputs_it(stacks):
    for env_name, stack in stacks.items():
        env = ENVIRONMENTS[env_name]
        tag = context_hash(REPO, LAUNCHER_DOCKERFILE)
        builds = {json.dumps(b["triggers_replace"]): b for b in
                  resources(stack, "terraform_data")}
        build = builds[json.dumps([tag])]
        local_exec = build["provisioner"][0]["local-exec"]
        command = [*local_exec["interpreter"], local_exec["command"]]
        uri = names.image_uri(env, tag, names.LAUNCHER_IMAGE)
        assert f"--substitutions=_LAUNCHER_IMAGE={uri}" in command
        assert any(a.endswith("/launcher.cloudbuild.yaml") for a in command
                   if a.startswith("--config="))
        assert stack["output"]["launcher_image_uri"]["value"] == uri


def test_the_image_holds_every_module_the_steps_import_and_no_tensorflow():
    """The steps' imports, in a fresh Python (a KFP step imports its function's module):
    each of our modules they load is in the launcher's context, and TensorFlow is not
    loaded; the image installs the trainer's packages but TensorFlow's."""
    probe = ("import json, sys\n"
             "from launch.features.pipeline import definition, on_vertex, steps\n"
             "from launch.features import launching\n"
             "from launch.targets.vertex import executor\n"
             "from launch.targets.vertex import serving\n"
             "mods = [m.__file__ for n, m in list(sys.modules.items()) if "
             "n.split('.')[0] in ('launch', 'trainer', 'infra') and getattr(m, '__file__', "
             "None)]\n"
             "print(json.dumps({'files': mods, 'tf': 'tensorflow' in sys.modules}))\n")
    found = json.loads(subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True,
                                      capture_output=True, text=True,
                                      timeout=HANG).stdout.splitlines()[-1])
    assert not found["tf"]
    context = {p.resolve() for p in context_files(REPO, LAUNCHER_DOCKERFILE)}
    imported = {Path(f).resolve() for f in found["files"]}
    assert imported and imported <= context, sorted(map(str, imported - context))[:5]
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    run = next(line for line in (REPO / LAUNCHER_DOCKERFILE).read_text().splitlines()
               if line.startswith("RUN python -c"))
    program = run.split("'")[1]  # the RUN's own program, run on the real pyproject.toml
    listed = subprocess.run([sys.executable, "-c", program], cwd=REPO, check=True,
                            capture_output=True, text=True, timeout=HANG).stdout.split()
    assert listed and not any(d.startswith(("tensorflow", "tf-")) for d in listed)
    assert set(listed) == {d for d in extras["trainer"]
                           if not d.startswith(("tensorflow", "tf-"))}
    assert ".[workstation]" in (REPO / LAUNCHER_DOCKERFILE).read_text()


def test_the_launcher_image_starts_from_the_trainers_python_image():
    """One Python base for both images, and one image for both builds' tag checks."""
    base = next(line for line in (REPO / "Dockerfile").read_text().splitlines()
                if line.startswith("FROM python:")).split()[1]
    launcher = [line for line in (REPO / LAUNCHER_DOCKERFILE).read_text().splitlines()
                if line.startswith("FROM ")]
    assert launcher == [f"FROM {base}"]
    checks = {yaml.safe_load((REPO / name).read_text())["steps"][0]["name"]
              for name in ("cloudbuild.yaml", "launcher.cloudbuild.yaml")}
    assert checks == {base}


def test_the_build_upload_holds_every_file_of_both_contexts(tmp_path):
    """`gcloud builds submit` uploads what .gcloudignore admits (gitignore's rules, which git
    itself applies here): every file of the trainer's and the launcher's build contexts, their
    build definitions and the tag check, so each build's first step hashes what was hashed
    here; the stack's outputs file stays behind."""
    wanted = {p.relative_to(REPO).as_posix() for dockerfile in (DOCKERFILE, LAUNCHER_DOCKERFILE)
              for p in context_files(REPO, dockerfile)}
    wanted |= {DOCKERFILE, ignore_file(REPO), LAUNCHER_DOCKERFILE,
               ignore_file(REPO, LAUNCHER_DOCKERFILE), CLOUDBUILD_CONFIG,
               LAUNCHER_CLOUDBUILD_CONFIG, TAG_CHECK}
    left_behind = {"infra/outputs.json", "notes.md", "tests/test_x.py"}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=HANG)
    shutil.copy(REPO / ".gcloudignore", tmp_path / ".gitignore")
    for name in wanted | left_behind:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    checked = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", "--no-index",
                              "--stdin"], input="\n".join(sorted(wanted | left_behind)),
                             capture_output=True, text=True, timeout=HANG)
    assert set(checked.stdout.split()) == left_behind
