"""The preflight every target's launch and sweep go through, in one order (a Template
Method): what the target accepts of the request, the run id, the config files read, where
the target places the request, its plan, the checks a dry run makes too, a dry run's
account, the price, the refusals of a real run, --save-job, then the dry run's answer, or
the run's own copy of its job file and the run. A target implements the hooks
(`Preflight`'s methods that raise NotImplementedError, and those whose default does not fit
it) and gets the order, the job file and --save-job; each check is written once, in the
hook of the target that needs it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

from launch.errors import InputError
from launch.stores.runs import configs
from launch.targets.base import job_text, save_job
from launch.values.jobs import Request
from launch.values.sweep import Sweep

Where = TypeVar("Where")  # where a target places a request: TrainerDirs here, a CloudSetup there
Plan = TypeVar("Plan")  # what a target runs: a TrainerJob here, each rung's CustomJob there


class Handing(Protocol):
    """How a target hands the job over (base.Handover, Vertex AI's VertexHandover)."""

    dry_run: bool
    save_job: str | None


@dataclasses.dataclass(frozen=True)
class Configs:
    """The --config-file paths as the user named them, and the text of each on this machine
    (read once, before anything is built or sent; the run keeps copies of them)."""

    files: tuple[str, ...]
    texts: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Placed(Generic[Where]):
    """A request where a target puts it: the request as it runs there (the run's own data,
    config files as the target passes them), its place, the data it reads, and what the job
    file records of the target's decisions (`decided`: the run id, region, directories)."""

    request: Request
    where: Where
    data_dir: str
    decided: Mapping[str, Any]
    configs: Configs
    run_id: str | None = None
    sweep: Sweep | None = None

    def text(self, **more: Any) -> str:
        """The resolved job file with the target's decisions (and `more`: what the run keeps,
        the image it runs)."""
        return job_text(self.request, **self.decided, **more)


class Preflight(Generic[Where, Plan]):
    """The steps of `launch` and `tune`, the same order for every target (`_preflight`); the
    executor provides the hooks below and its `handover` (dry run, --save-job)."""

    handover: Handing

    def launch(self, request: Request) -> str:
        """Runs (or submits, or shows with --dry-run) the job; what to tell the user."""
        return self._preflight(request, None)

    def tune(self, request: Request, sweep: Sweep) -> str:
        """The sweep: trials of the training `request`, through the same steps."""
        if not request.trains:
            raise InputError("a sweep tunes training runs")
        return self._preflight(request, sweep)

    def _preflight(self, request: Request, sweep: Sweep | None) -> str:
        self.accept(request, sweep)
        run_id = self.run_id(request, sweep)
        files = tuple(request.args.config_files)
        placed = self.place(request, run_id, Configs(files, configs.read_local(files)), sweep)
        plan = self.plan(placed)
        self.check(placed, plan)
        text = placed.text()
        dry_run = self.handover.dry_run
        if dry_run:
            self.say_dry_run(placed, plan, text)
        plan = self.price(placed, plan)
        if not dry_run:
            self.refuse(placed, plan)
        save_job(text, self.handover.save_job)
        if dry_run:
            return self.show(placed, plan)
        if sweep is None and placed.request.trains and text:
            self.keep(placed, plan)  # the run's job file names the run's copies of configs
        return self.run(placed, plan)

    def accept(self, request: Request, sweep: Sweep | None) -> None:
        """Refuses what this target cannot do with the request as asked (before any read)."""

    def run_id(self, request: Request, sweep: Sweep | None) -> str | None:
        """The run's name where runs are named (None: a directory names it)."""
        return None

    def place(self, request: Request, run_id: str | None, config: Configs,
              sweep: Sweep | None) -> Placed[Where]:
        """Where the run's files live and the data it reads; an evaluation's own data."""
        raise NotImplementedError

    def plan(self, placed: Placed[Where]) -> Plan:
        """What would run, checked against what the target offers."""
        raise NotImplementedError

    def check(self, placed: Placed[Where], plan: Plan) -> None:
        """Refusals a dry run makes too (the data is there and passes its checks)."""

    def say_dry_run(self, placed: Placed[Where], plan: Plan, text: str) -> None:
        """A dry run's account on stderr: where it would run, and its job file `text`."""
        raise NotImplementedError

    def price(self, placed: Placed[Where], plan: Plan) -> Plan:
        """The plan within quota and --max-cost, its price said (none by default)."""
        return plan

    def refuse(self, placed: Placed[Where], plan: Plan) -> None:
        """Refusals of a real run, after the price: the live state it would change (a busy
        directory, a second writer, data a dry run does not read)."""

    def show(self, placed: Placed[Where], plan: Plan) -> str:
        """A dry run's answer on stdout: the request it would send or the command it runs."""
        raise NotImplementedError

    def keep(self, placed: Placed[Where], plan: Plan) -> None:
        """Stores a training run's job file and its copies of the config files."""
        raise NotImplementedError

    def run(self, placed: Placed[Where], plan: Plan) -> str:
        """Runs or submits the plan; what to tell the user."""
        raise NotImplementedError
