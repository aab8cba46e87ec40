"""launch/'s floor plan as the code holds it (docs/design.md "Layers, and where to add
things"): tasks.py imports no target's package, and a target is one package plus one line in
the registry (a toy target in a temporary package gets the request every target gets)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from launch import targets
from launch.errors import InputError
from launch.targets.base import Handover, Target
from launch.targets.local.executor import Local
from launch.values import jobfile
from launch.values.jobs import Places

TASKS = Path(__file__).resolve().parents[1] / "tasks.py"

TOY_EXECUTOR = '''
import dataclasses

from launch.targets.base import Target, job_text, save_job


@dataclasses.dataclass(frozen=True)
class Toy:
    target: Target

    @classmethod
    def from_target(cls, target):
        return cls(target)

    def launch(self, request):
        job = request.trainer_job(self.target.places)
        save_job(job_text(request, data_dir=self.target.places.data_dir),
                 self.target.handover.save_job)
        return " ".join(job.args)
'''


def imported(path: Path) -> set[str]:
    """Every module (and module.name) `path` imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_tasks_asks_the_registry_and_imports_no_target():
    packages = {spec.partition(":")[0].rsplit(".", 1)[0] for spec in targets.TARGETS.values()}
    assert packages == {"launch.targets.local", "launch.targets.vertex"}
    names = imported(TASKS)
    assert "launch.targets.executor_for" in names
    assert sorted(name for name in names for package in packages
                  if name == package or name.startswith(f"{package}.")) == []


def test_a_target_is_one_module_and_one_registry_line(tmp_path, monkeypatch):
    package = tmp_path / "toy_target"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "executor.py").write_text(TOY_EXECUTOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(targets.TARGETS, "toy", "toy_target.executor:Toy")

    places = Places(str(tmp_path / "model"), str(tmp_path / "records"))
    saved = tmp_path / "job.yaml"
    where = Target(places, handover=Handover(dry_run=True, save_job=str(saved)))
    request = jobfile.request(jobfile.resolve("train", {"steps": "100"}), "train")
    said = targets.executor_for("toy", where).launch(request)
    assert said == " ".join(request.trainer_job(places).args)
    assert yaml.safe_load(saved.read_text())["data-dir"] == places.data_dir  # --save-job
    assert isinstance(targets.executor_for("local", where), Local)
    with pytest.raises(InputError, match=r"^--target 'gke' is not available; use one of "
                                         r"local, vertex, toy$"):
        targets.executor_for("gke", where)


TOY_KIND = '''
import dataclasses
from typing import ClassVar

from launch.values.jobs import Request, TrainerJob


@dataclasses.dataclass(frozen=True)
class Profile(Request):
    """Times the input pipeline over a run's data: one replica, no checkpoints written."""

    task: ClassVar[str] = "profile"
    mode: ClassVar[str] = "eval"
    needs_run_id: ClassVar[bool] = True
    reads_run_data: ClassVar[bool] = True
    role: ClassVar[str] = "profile"
    output: ClassVar[str] = "profile"
    local_dir: ClassVar[str] = "profiles"

    batches: int = 50

    @classmethod
    def own_values(cls, job):
        return {"batches": job.steps or 50}

    def trainer_job(self, places):
        args = self.placed(places).to_argv()
        return TrainerJob(f"profile-{self.experiment}", (*args, f"--batches={self.batches}"))
'''


def test_a_job_kind_is_one_class_and_one_entry(tmp_path, monkeypatch):
    """A toy kind in a temporary package goes through the steps every kind takes: the job
    file, the targets' refusals, the request, the local target's dry run and Vertex AI's
    job, which take its answers (role, output, data, run id) from the class."""
    from launch.context.places import CloudTarget
    from launch.targets.vertex.jobs import vertex_job
    from launch.values import jobs

    package = tmp_path / "toy_kind"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kind.py").write_text(TOY_KIND)
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_kind.kind

    monkeypatch.setitem(jobs.KINDS, "profile", toy_kind.kind.Profile)
    job = jobfile.resolve("profile", {})
    targets.refuse_unsupported(job, "profile", set(), "")
    request = jobfile.request(job, "profile")
    assert type(request) is toy_kind.kind.Profile and request.batches == 50

    (tmp_path / "records").mkdir()
    places = Places(str(tmp_path / "model"), str(tmp_path / "records"))
    local = targets.executor_for("local", Target(places, handover=Handover(dry_run=True)))
    command = request.hand_to(local)  # the local target's launch, as `invoke` hands it
    assert command.endswith(f"--data_dir={places.data_dir} --batches=50")

    cloud = CloudTarget(project="p", region="us-central1", bucket="b",
                        image="us-central1-docker.pkg.dev/p/r/trainer:1",
                        tpu_image="us-central1-docker.pkg.dev/p/r/trainer-tpu:1",
                        service_account="t@p.iam.gserviceaccount.com")
    custom = vertex_job(cloud, request, "run1")
    assert custom.labels["role"] == "profile" and custom.labels["run"] == "run1"
    assert custom.job_spec.base_output_directory.output_uri_prefix == "gs://b/runs/run1/profile"
    assert custom.job_spec.worker_pool_specs[0].container_spec.args[-1] == "--batches=50"
