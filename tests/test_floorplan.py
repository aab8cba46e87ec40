"""launch/'s floor plan as the code holds it (docs/design/layers.md): tasks.py imports no
target's package, a target with job options and capabilities of its own is one package plus
one line in the registry (layers.md lists what a real one touches besides), and a job kind
one class registered by its decorator (`@kind`), in KINDS once its module is imported: a toy
target and a toy kind, each in a temporary package, go through the preflight every target
shares (launch/targets/preflight.py) in its order, with the job file, --save-job and the
refusals it gives them; the toy target's own option is a flag and a key of its section, its
own capability the words another target's refusal says, its jobs reached by jobs.*."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launch import targets
from launch.errors import InputError
from launch.targets.base import Handover, LaunchFlags
from launch.targets.local.executor import Local
from launch.values import jobfile, jobs
from launch.values.jobs import TrainerDirs
from launch.values.sweep import Sweep
from tests.conftest import REPO

TASKS = Path(__file__).resolve().parents[1] / "tasks.py"

TOY_SPEC = '''
import dataclasses

from launch.values import capabilities
from launch.values.capabilities import Capability, TargetSpec
from launch.values.jobfile import option

PAINT = Capability("paint", "paint its boxes")  # a capability no other target has


@dataclasses.dataclass(frozen=True)
class ToyOptions:
    colour: str | None = option("the colour of its boxes", needs=PAINT)


TOY = TargetSpec("toy_target.executor:Toy", frozenset({PAINT, capabilities.SPOT}), ToyOptions)
'''
TOY_EXECUTOR = '''
import dataclasses
import sys
from pathlib import Path

from launch.errors import InputError
from launch.targets.base import JobLine, LaunchFlags, say_job
from launch.targets.preflight import Placed, Preflight

RAN = {}  # job id -> what it ran: its jobs, for jobs.*


def said(hook):
    print(f"toy: {hook}", file=sys.stderr)


class ToyJobs:
    poll_seconds = 0.0

    def holds(self, job):
        return job in RAN

    def list(self):
        return [self.status(job) for job in RAN]

    def status(self, job):
        return JobLine(job, "SUCCEEDED", None, "toy", notes=(f"ran: {RAN[job]}",))

    def logs(self, job, lines, follow, poll):
        return RAN[job]

    def cancel(self, job):
        return f"{job} has ended: nothing to cancel"


@dataclasses.dataclass(frozen=True)
class Toy(Preflight):
    """A target whose run writes the trainer's command line into the model directory."""

    flags: LaunchFlags
    title = "the toy"

    @classmethod
    def from_flags(cls, flags):
        return cls(flags)

    @classmethod
    def jobs(cls, cloud):
        return ToyJobs()

    def colour(self):
        """Its own option, from the job (None without one)."""
        return self.flags.job and self.flags.job.target_options.colour

    @property
    def handover(self):
        return self.flags.handover

    def accept(self, request, sweep):
        said("accept")

    def run_id(self, request, sweep):
        said("run_id")
        return request.run_id or "toy-run"

    def place(self, request, run_id, config, sweep):
        said("place")
        dirs = self.flags.dirs
        data_dir = request.data_dir or dirs.data_dir
        return Placed(request, dirs, data_dir, {"run_id": run_id, "data_dir": data_dir,
                                                  "model_dir": dirs.model_dir},
                      config, run_id, sweep)

    def plan(self, placed):
        said("plan")
        return placed.request.trainer_job(placed.where)

    def check(self, placed, plan):
        said("check")

    def say_dry_run(self, placed, plan, text):
        said("say_dry_run")
        say_job(text, "runs nowhere")

    def price(self, placed, plan):
        said("price")
        return plan

    def refuse(self, placed, plan):
        said("refuse")
        if Path(placed.where.model_dir, "busy").exists():
            raise InputError(f"--model-dir {placed.where.model_dir}: another run writes there")

    def show(self, placed, plan):
        said("show")
        return " ".join(plan.args) + (f" in {self.colour()}" if self.colour() else "")

    def keep(self, placed, plan):
        said("keep")
        Path(placed.where.model_dir, "job.yaml").write_text(placed.text())

    def run(self, placed, plan):
        said("run")
        Path(placed.where.model_dir, "ran").write_text(" ".join(plan.args))
        RAN[f"toy-{len(RAN) + 1}"] = " ".join(plan.args) + (
            f" in {self.colour()}" if self.colour() else "")
        return f"{plan.name} ran"
'''
# The shared preflight's order (launch/targets/preflight.py), as the toy's hooks say it.
DRY_RUN = ["accept", "run_id", "place", "plan", "check", "say_dry_run", "price", "show"]
REAL_RUN = ["accept", "run_id", "place", "plan", "check", "price", "refuse", "keep", "run"]


def imported(path: Path) -> set[str]:
    """Every module (and module.name) `path` imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.fixture
def scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a test registers (the toy target's line, the toy kind by its import) gone after
    it, as are the toy packages it imports: a registry refuses a name twice, and the other
    tests see the real registries."""
    for registry in (targets.TARGETS, jobs.KINDS):
        for store in ("_references", "_loaded"):
            monkeypatch.setattr(registry, store, dict(getattr(registry, store)))
    for name in ("toy_target", "toy_target.executor", "toy_kind", "toy_kind.kind"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_tasks_asks_the_registry_and_imports_no_target():
    packages = {spec.executor.rsplit(".", 1)[0] for spec in targets.TARGETS.values()}
    assert packages == {"launch.targets.local", "launch.targets.vertex"}
    names = imported(TASKS)
    assert "launch.targets.executor_for" in names
    assert sorted(name for name in names for package in packages
                  if name == package or name.startswith(f"{package}.")) == []


def toy_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TrainerDirs:
    """The toy target in a temporary package (its spec in `__init__.py`, its executor in
    executor.py) and its registry line (as in launch/values/target_names.py); its directories.
    The test takes `scratch`."""
    package = tmp_path / "toy_target"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(TOY_SPEC)
    (package / "executor.py").write_text(TOY_EXECUTOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    targets.TARGETS.register_lazy("toy", "toy_target:TOY")
    return TrainerDirs(str(tmp_path / "model"), str(tmp_path / "records"))


def hooks(stderr: str) -> list[str]:
    """The toy's hooks in the order the preflight called them."""
    return [line.removeprefix("toy: ") for line in stderr.splitlines()
            if line.startswith("toy: ")]


def test_a_target_is_one_module_and_one_registry_line(tmp_path, monkeypatch, capsys, scratch):
    """The toy implements the hooks; the shared preflight gives it the order, the job file
    (its dry run's account) and --save-job, and runs nothing in a dry run."""
    dirs = toy_target(tmp_path, monkeypatch)
    saved = tmp_path / "job.yaml"
    flags = LaunchFlags(dirs, handover=Handover(dry_run=True, save_job=str(saved)))
    request = jobfile.request(jobfile.resolve("train", {"steps": "100"}), "train")
    said = targets.executor_for("toy", flags).launch(request)
    assert said == " ".join(request.trainer_job(dirs).args)
    printed = capsys.readouterr().err
    assert hooks(printed) == DRY_RUN
    written = yaml.safe_load(saved.read_text())  # --save-job: the decided values in it
    assert (written["run-id"], written["data-dir"], written["steps"]) == \
        ("toy-run", dirs.data_dir, 100)
    assert f"runs nowhere\njob file:\n{saved.read_text().rstrip()}\n" in printed
    assert not Path(dirs.model_dir).exists()
    assert isinstance(targets.executor_for("local", flags), Local)
    with pytest.raises(InputError, match=r"^--target 'gke' is not available; use one of "
                                         r"local, vertex, toy$"):
        targets.executor_for("gke", flags)


def test_a_toy_targets_run_and_its_refusal_go_through_the_shared_preflight(
        tmp_path, monkeypatch, capsys, scratch):
    """A real run: the hooks in the preflight's order, --save-job and the run's own job file
    written, the toy's run done; its refusal stops before anything is saved or run."""
    dirs = toy_target(tmp_path, monkeypatch)
    model = Path(dirs.model_dir)
    model.mkdir()
    saved = tmp_path / "job.yaml"
    toy = targets.executor_for("toy", LaunchFlags(dirs, handover=Handover(save_job=str(saved))))
    request = jobfile.request(jobfile.resolve("train", {"run_id": "toy1"}), "train")
    assert toy.launch(request) == "train-pets_retinanet_mobilenet ran"
    assert hooks(capsys.readouterr().err) == REAL_RUN
    assert (model / "ran").read_text() == " ".join(request.trainer_job(dirs).args)
    assert (model / "job.yaml").read_text() == saved.read_text()  # kept as saved
    assert yaml.safe_load(saved.read_text())["run-id"] == "toy1"

    sweep = Sweep.from_mapping({"params": {"learning_rate": [0.01, 0.02]}})
    tuning = jobfile.request(jobfile.resolve("tune", {"sweep": sweep.as_mapping()}), "tune")
    assert toy.tune(tuning, sweep) == "train-pets_retinanet_mobilenet ran"
    assert hooks(capsys.readouterr().err) == [hook for hook in REAL_RUN if hook != "keep"]
    with pytest.raises(InputError, match=r"^a sweep tunes training runs$"):  # every target's
        toy.tune(jobfile.request(jobfile.resolve("eval", {}), "eval"), sweep)
    assert hooks(capsys.readouterr().err) == []

    saved.unlink()
    (model / "ran").unlink()
    (model / "busy").touch()
    with pytest.raises(InputError, match=r"another run writes there$"):
        toy.launch(request)
    assert hooks(capsys.readouterr().err) == REAL_RUN[:REAL_RUN.index("refuse") + 1]
    assert not saved.exists() and not (model / "ran").exists()


def test_a_targets_own_option_and_capability_come_from_its_package(tmp_path, monkeypatch,
                                                                  capsys, scratch):
    """The toy's option (`colour`) is a flag of the job tasks and a key of the file's `toy:`
    section, read by its executor; its capability (PAINT) is the words another target's
    refusal says, and the neutral capabilities it declares (spot) let the job ask for them.
    Its jobs are jobs.*'s, through the registry. Nothing outside its package was edited."""
    from launch.cli import taskflags
    from launch.context.cloud import Cloud
    from launch.features.jobs import job_command

    dirs = toy_target(tmp_path, monkeypatch)
    colour = {field.name: field for field in jobfile.flag_fields("train")}["colour"]
    assert jobfile.help_of(colour) == "the colour of its boxes (toy)"
    train = taskflags.job_task("train", {})(lambda c, **flags: flags)
    assert "colour" in {argument.name for argument in train.get_arguments()}

    job = jobfile.resolve("train", {"target": "toy", "colour": "red", "spot": True})
    assert (job.target_options.colour, job.spot) == ("red", True)
    written = yaml.safe_load(job.to_yaml("train"))
    assert written["toy"] == {"colour": "red"} and written["spot"] is True
    assert jobfile.resolve("train", {}, written, "f") == job  # the file reads back

    with pytest.raises(InputError, match=r"^--colour: the local target cannot paint its "
                                         r"boxes: add --target toy, or drop --colour$"):
        jobfile.resolve("train", {"colour": "red"})
    with pytest.raises(InputError, match=r"^toy: colour \(in f\): the vertex target cannot "
                                         r"paint its boxes: add --target toy, or drop toy: "
                                         r"colour from f$"):
        jobfile.resolve("train", {"target": "vertex"}, written, "f")
    with pytest.raises(InputError, match=r"^--accelerator: the toy target cannot attach GPUs: "
                                         r"add --target vertex, or drop --accelerator$"):
        jobfile.resolve("train", {"target": "toy", "accelerator": "NVIDIA_L4:1"})
    with pytest.raises(InputError, match=r"^f: `toy: spot` is not an option of the toy "
                                         r"target here; it belongs at the top"):
        jobfile.resolve("train", {}, {"version": 2, "toy": {"spot": True}}, "f")

    Path(dirs.model_dir).mkdir()
    toy = targets.executor_for("toy", LaunchFlags(dirs, job=job))
    request = jobfile.request(job, "train")
    assert request.resources.capacity == "SPOT"
    assert toy.launch(request) == "train-pets_retinanet_mobilenet ran"
    capsys.readouterr()
    cloud = Cloud()
    assert job_command(cloud, "list", target="toy").startswith("               toy-1  "
                                                               "SUCCEEDED")
    assert job_command(cloud, "status", "toy-1").endswith(" in red")  # found by its id
    assert job_command(cloud, "logs", "toy-1", target="toy").endswith(" in red")
    assert job_command(cloud, "cancel", "toy-1") == "toy-1 has ended: nothing to cancel"


TOY_KIND = '''
import dataclasses
from typing import ClassVar

from launch.values.jobs import Request, TrainerJob, kind


@kind
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

    def trainer_job(self, dirs):
        args = self.args_at(dirs).to_argv()
        return TrainerJob(f"profile-{self.experiment}", (*args, f"--batches={self.batches}"))
'''


REGISTERED_BEFORE_IMPORT = """
import sys
sys.path.insert(0, sys.argv[1])
import toy_kind.kind  # its `@kind` registers it in KINDS
from launch.values import jobfile
request = jobfile.request(jobfile.resolve("profile", {"steps": 80}), "profile")
print(jobfile.TASKS, type(request).__name__, request.batches)
"""


def test_a_fourth_kind_imported_before_the_job_file_is_among_its_tasks(tmp_path):
    """The job file reads KINDS when it is imported, so a kind is one registered class
    only if nothing unpacks KINDS by position (`TRAIN, TUNE, EVAL = TASKS` failed with
    four). In a fresh interpreter the toy kind's module is imported first, which registers
    it; the job file then imports, lists it among the tasks, and its fields for every task
    (--steps) reach it."""
    package = tmp_path / "toy_kind"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kind.py").write_text(TOY_KIND)
    result = subprocess.run([sys.executable, "-c", REGISTERED_BEFORE_IMPORT, str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "('train', 'tune', 'eval', 'profile') Profile 80\n"


def test_a_job_kind_is_one_class_registered_by_its_decorator(tmp_path, monkeypatch, capsys,
                                                              scratch):
    """A toy kind in a temporary package, registered by importing its module, goes through
    the steps every kind takes: the job file, the targets' refusals, the request, the local
    target's dry run, Vertex AI's job (which take its answers: role, output, data, run id,
    from the class) and the toy target's real run, through the shared preflight."""
    from launch.context.places import CloudSetup
    from launch.targets.vertex.jobs import vertex_job

    package = tmp_path / "toy_kind"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "kind.py").write_text(TOY_KIND)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "profile" not in jobs.KINDS
    import toy_kind.kind  # its `@kind` registers it

    assert jobs.KINDS["profile"] is toy_kind.kind.Profile
    job = jobfile.resolve("profile", {})  # the targets' refusals come with it
    request = jobfile.request(job, "profile")
    assert type(request) is toy_kind.kind.Profile and request.batches == 50

    (tmp_path / "records").mkdir()
    dirs = TrainerDirs(str(tmp_path / "model"), str(tmp_path / "records"))
    local = targets.executor_for("local", LaunchFlags(dirs, handover=Handover(dry_run=True)))
    command = request.hand_to(local)  # the local target's launch, as `invoke` hands it
    assert command.endswith(f"--data_dir={dirs.data_dir} --batches=50")

    cloud = CloudSetup(project="p", region="us-central1", bucket="b",
                       image="us-central1-docker.pkg.dev/p/r/trainer:1",
                       tpu_image="us-central1-docker.pkg.dev/p/r/trainer-tpu:1",
                       service_account="t@p.iam.gserviceaccount.com")
    custom = vertex_job(cloud, request, "run1")
    assert custom.labels["role"] == "profile" and custom.labels["run"] == "run1"
    assert custom.job_spec.base_output_directory.output_uri_prefix == "gs://b/runs/run1/profile"
    assert custom.job_spec.worker_pool_specs[0].container_spec.args[-1] == "--batches=50"

    toy = targets.executor_for("toy", LaunchFlags(toy_target(tmp_path, monkeypatch)))
    Path(dirs.model_dir).mkdir()
    capsys.readouterr()
    assert request.hand_to(toy) == "profile-pets_retinanet_mobilenet ran"
    assert hooks(capsys.readouterr().err) == [hook for hook in REAL_RUN if hook != "keep"]
    ran = (Path(dirs.model_dir) / "ran").read_text()  # it trains nothing: no job file kept
    assert ran.startswith("--experiment=pets_retinanet_mobilenet --mode=eval ")
    assert ran.endswith(" --batches=50") and not (Path(dirs.model_dir) / "job.yaml").exists()
