"""Shared fixtures: one synthetic dataset, its conversion, and one trained model per session."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.once import once, session_root

pytest_plugins = ["tests.cpu"]  # CPU-seconds by test phase, printed at the end of a run
REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # as trainer/__main__.py: the trainer's runs here
# One intra-op thread a TensorFlow process, here and in the processes the tests start: the
# workers already keep every core busy, and a second thread a process only spins (a whole
# run: 8% less CPU time and 17 s less, 2026-11-27). Inter-op threads stay TensorFlow's: with
# one, a 60-step training alone took 12% less CPU time, but a whole run 8% more (2026-12-02).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
# Bytecode written once and read after, here and in every process the tests start: with
# PYTHONDONTWRITEBYTECODE set (as on the CI machine) each xdist worker rewrote every test
# module's assertions again and each trainer or invoke process compiled this project's
# modules again (the quick tier: 379 CPU-seconds, 365 with bytecode written, 2026-12-03).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# The bucket's local mirror (launch/stores/gcs/mirror.py, read when it is imported) in a
# folder of the run's, made by the first process and removed by it at the end, never the
# checkout's work/cache: the xdist workers and every process a test starts inherit it.
OWN_CACHE = None if os.environ.get("PETS_CACHE_DIR") else tempfile.mkdtemp(prefix="pets-cache-")
if OWN_CACHE:
    os.environ["PETS_CACHE_DIR"] = OWN_CACHE


def pytest_unconfigure(config: pytest.Config) -> None:
    if OWN_CACHE:
        shutil.rmtree(OWN_CACHE, ignore_errors=True)


BUILDS = ("trained", "mask_trained", "swept")  # session fixtures that take minutes
READS_BUILDS = {*BUILDS, "exported"}
# A process still running after this many seconds hangs: the longest, the mask model's training,
# takes 4 to 10 minutes here (quiet to loaded), so this guards against a hang and claims no speed.
HANG = 3000


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than there are cores. A fifth of a worker's time is spent
    waiting (on the processes and servers its tests start), which a third worker on two cores
    fills: a whole run 822 s with two, 709 to 753 s with three (2026-12-02)."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order the xdist workers take tests in: each build's first test (one that needs
    that build alone, so it never waits on another), the other slow tests, the quick ones,
    and last the tests that read the builds, by then ready. xdist hands each worker the next
    two tests at the start (then one at a time as it finishes one), so each build comes with
    a slow test after it: the builds start on different workers at once. Among the slow
    tests, the longest go first (`slow(SECONDS)`), so the suite does not end on one worker
    running one long test."""
    def builds(item: pytest.Item) -> set[str]:
        return READS_BUILDS & set(item.fixturenames)

    starters = [starter for build in BUILDS
                if (starter := next((item for item in items if builds(item) == {build}), None))]

    def rank(item: pytest.Item) -> tuple[int, float]:
        mark = item.get_closest_marker("slow")
        seconds = (mark.args[0] if mark.args else 1) if mark else 0
        return (3 if builds(item) else 1 if mark else 2, -seconds)

    rest = sorted((item for item in items if item not in starters), key=rank)
    head = []
    for starter in starters:
        head += [starter, *rest[:1]]
        rest = rest[1:]
    items[:] = head + rest


def run_trainer(*args: str, env: dict | None = None, timeout: float = HANG,
                check: bool = True) -> subprocess.CompletedProcess:
    """`python -m trainer ...` exactly as the container runs it."""
    result = subprocess.run([sys.executable, "-m", "trainer", *args], cwd=REPO, text=True,
                            capture_output=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f"trainer {args} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def trainer_here(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`python -m trainer ...` in this process: the container's `main`, for tests whose subject
    is not the process. A TensorFlow start costs 20-30 CPU-s (its import, then Autograph
    converting Model Garden's functions), and this process has done both once already."""
    from trainer.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    if check and code != 0:
        raise AssertionError(f"trainer {args} returned {code}:\n{out.getvalue()[-3000:]}\n"
                             f"{err.getvalue()[-5000:]}")
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory) -> Path:
    from trainer.data.sample import write_sample

    return write_sample(tmp_path_factory.mktemp("pets"), num_images=60, bad_inputs=True)


@pytest.fixture(scope="session")
def records_dir(sample_dir, tmp_path_factory) -> Path:
    from trainer.data.convert import convert_directory

    out = tmp_path_factory.mktemp("records")
    convert_directory(sample_dir, out, num_shards=3, processes=2, progress=False)
    return out


@pytest.fixture(scope="session")
def train_records(shared) -> Path:
    """A clean sample big enough to learn from, converted once for the session (whichever
    worker asks first): the demo's sample, from its COCO JSON (the same records as from its
    Pets files but for VOC's pose field, tests/test_coco.py shows), so the trained model is a
    run on COCO-format data. Read-only: a test that changes records copies them."""
    def build(root: Path) -> dict:
        from trainer.data.convert import convert_coco
        from trainer.data.sample import write_coco_sample, write_sample

        data = write_sample(root / "pets")
        convert_coco(write_coco_sample(data), data / "images", root / "records", num_shards=2,
                     progress=False)
        return {"records": str(root / "records")}

    return Path(once(shared, "train-records", build)["records"])


@pytest.fixture(scope="session")
def small_records(tmp_path_factory) -> Path:
    """A few images converted (8 to validate): for the tests of training's mechanics (a
    resumed run, two workers, a sweep), whose assertions hold on any data, so that each
    evaluation they make costs a tenth of one on `train_records` (98 to validate)."""
    from trainer.data.convert import convert_directory
    from trainer.data.sample import write_sample

    out = tmp_path_factory.mktemp("small-records")
    convert_directory(write_sample(tmp_path_factory.mktemp("small-pets"), num_images=30), out,
                      num_shards=1, progress=False)
    return out


# The demo's whole run, 400 steps. At 300, the model sat on the steep part of its curve and
# varied from run to run: AP50 0.965 and 0.989, F1 at the operating point 0.908 and 0.964, and
# on 3 x 30 fresh images 2 to 5 misses each (one clean-clone run: 10, against the bound of 6).
# At 400 (2026-11-28, three runs): AP50 0.993 to 1.0, F1 0.985 to 0.995, 0 to 2 misses. (Each
# run: this fixture's training, then the fresh-image check of
# test_export_signature_and_prediction_on_a_sample_image on samples of seeds 99, 7 and 123.)
# The cost: this build took 165 to 168 s in clean-clone .ci/runs, against 104 s at 300.
TRAIN_STEPS = 400
AP50_BOUND = 0.9  # the demo reaches 1.0; the issue asks 0.9
# The shared model's seed: unseeded, a clean-clone .ci/run's model came out at AP50 0.806
# (2026-11-28; other runs 0.997 to 1.0) and six quality bounds failed; seeded, it still varies
# (TensorFlow's threads reorder some work), which the 400 steps above absorb.
SEED = 1


def trainer_process(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainer", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def data_flags(records: Path, model_dir: Path) -> list[str]:
    return [f"--data_dir={records}", f"--model_dir={model_dir}"]


@pytest.fixture(scope="session", autouse=True)
def jobs_table(tmp_path_factory) -> Path:
    """The local jobs table (launch/targets/local/jobs.py) of every run the tests start, here
    and in their processes: in the session's directory, not the checkout's work/jobs."""
    from launch.targets.local.jobs import JOBS_DIR_VARIABLE

    root = tmp_path_factory.mktemp("jobs")
    os.environ[JOBS_DIR_VARIABLE] = str(root)
    return root


@pytest.fixture(scope="session")
def shared(tmp_path_factory, worker_id) -> Path:
    return session_root(tmp_path_factory, worker_id)


class CapturedDay(datetime.date):
    """2026-12-02, the day the tests' price expectations were written, as the price
    table's `today`: a price's age (table.STALE_MONTHS) would otherwise change what an
    estimate says as the calendar moves on."""

    @classmethod
    def today(cls) -> datetime.date:
        return datetime.date(2026, 12, 2)


@pytest.fixture
def prices_today(monkeypatch) -> None:
    """Estimates priced on CapturedDay."""
    import types

    from launch.stores.pricing import table

    monkeypatch.setattr(table, "datetime", types.SimpleNamespace(
        **{**vars(datetime), "date": CapturedDay}))


@pytest.fixture(scope="session")
def built_site(shared) -> Path:
    """The documentation site as `invoke docs --build` writes it (strict), once for the
    session: the docs' tests and the page tests in the browser read the same build."""
    from docsite import site

    def build(out: Path) -> dict:
        site.run(build=True, port=8000, site_dir=out)
        return {"site": str(out)}

    return Path(once(shared, "site", build)["site"])


@pytest.fixture(scope="session")
def stacks(shared) -> dict[str, dict]:
    """The synthesised stacks, once for the session (the provider's import and a synth are
    15 CPU-seconds): whichever xdist worker asks first."""
    from infra.main import synthesised

    return once(shared, "stacks", synthesised)


@pytest.fixture(scope="session")
def trained(train_records, shared):
    """Trains while a continuous-eval process evaluates checkpoints beside it; once for the
    session, whichever xdist worker asks first."""
    def build(model_dir: Path) -> dict:
        flags = data_flags(train_records, model_dir)
        evaluator = trainer_process(*flags, "--mode=continuous_eval", "--eval_poll_interval=2",
                                    f"--eval_idle_timeout={HANG}", f"--train_steps={TRAIN_STEPS}")
        training = trainer_process(*flags, "--mode=train", f"--train_steps={TRAIN_STEPS}",
                                   f"--seed={SEED}",
                                   "--params_override=trainer.checkpoint_interval=250",
                                   env={"PETS_HARDWARE": "this CPU x 1"})
        try:
            train_out, _ = training.communicate(timeout=HANG)
            assert training.returncode == 0, train_out[-5000:]
            eval_out, _ = evaluator.communicate(timeout=HANG)  # must exit by itself
            assert evaluator.returncode == 0, eval_out[-5000:]
        finally:  # after a failure, no process outlives the build
            for process in (training, evaluator):
                process.kill()
                process.wait()
        return {"model_dir": str(model_dir), "records": str(train_records), "eval": eval_out}

    built = once(shared, "trained", build)
    return Path(built["model_dir"]), Path(built["records"]), built["eval"]


SERVED_MAX_DETECTIONS, SERVED_MIN_SCORE = 20, 0.1
SERVED_OPTIONS = (f"--max_detections={SERVED_MAX_DETECTIONS}", f"--min_score={SERVED_MIN_SCORE}")


@pytest.fixture(scope="session")
def exported(trained, shared) -> Path:
    """The trained model exported once, as Vertex AI serves it: encoded files by default
    (`serving_uint8` beside it), fewer detections from a higher score (a response that stays
    small)."""
    def build(export_dir: Path) -> dict:
        trainer_here("export", f"--model_dir={trained[0]}", f"--export_dir={export_dir}",
                     "--default_signature=bytes", *SERVED_OPTIONS)
        return {"export_dir": str(export_dir)}

    return Path(once(shared, "exported", build)["export_dir"])


# Enough held-out images that an agreement bar measures the export, not the draw (an export's
# misses are a few percent of images: tests/test_edge_export.py)
HELD_OUT_IMAGES = 300


@pytest.fixture(scope="session")
def held_out(shared, exported):
    """A fresh sample the model never saw, labelled as the training records are (from its COCO
    form: the whole pet's box), with the SavedModel's answers: the records and the answers
    made once for the session (whichever worker asks first), the images read here."""
    from trainer.export.agreement import labelled_images

    def build(root: Path) -> dict:
        from trainer.data.convert import convert_coco
        from trainer.data.sample import write_coco_sample, write_sample
        from trainer.export.agreement import detect_all
        from trainer.prediction.predict import load_detector

        data = write_sample(root / "pets", num_images=HELD_OUT_IMAGES, seed=99)
        convert_coco(write_coco_sample(data), data / "images", root / "records", num_shards=1,
                     progress=False)
        truth = labelled_images(f"{root / 'records'}/*.record-*")
        saved_model, _ = load_detector(str(exported))
        (root / "answers.pickle").write_bytes(pickle.dumps(detect_all(saved_model, truth)))
        return {"records": f"{root / 'records'}/*.record-*",
                "answers": str(root / "answers.pickle")}

    built = once(shared, "held-out", build)
    return list(labelled_images(built["records"])), \
        pickle.loads(Path(built["answers"]).read_bytes())


def interruptible() -> None:
    """Ctrl-C as a terminal delivers it, even when the tests run where SIGINT is ignored (a
    background job, nohup): an ignored signal is inherited across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(path: Path, process: subprocess.Popen) -> None:
    """Returns once `path` exists; fails if `process` ends first. No deadline of its own
    (pytest-timeout bounds a hang): how long it takes is the machine's business."""
    while not path.exists():
        assert process.poll() is None, f"{process.args} ended before {path} appeared"
        time.sleep(0.1)


@dataclasses.dataclass(frozen=True)
class Finished:
    returncode: int
    out: str


@pytest.fixture(scope="session")
def swept(small_records, shared):
    """`invoke tune --target local`: three two-step trials, stopped with Ctrl-C while the
    second runs, then the same command again (with two trials at a time) to the end."""
    def build(sweep_dir: Path) -> dict:
        command = [sys.executable, "-m", "invoke", "tune", "--param=learning_rate=0.001:0.05:log",
                   "--param=batch_size=2,4", "--metric=AP50", "--trials=3", "--steps=2",
                   f"--model-dir={sweep_dir}", f"--data-dir={small_records}"]
        first = subprocess.Popen([*command, "--parallel=1"], cwd=REPO, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True, preexec_fn=interruptible)
        seen = []
        for line in first.stdout:
            seen.append(line)
            if line.startswith("trial 1: ") and " -> " in line:
                break
        wait_for(sweep_dir / "trial-001" / "trainer.log", first)  # its trainer is starting
        os.killpg(first.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        rest, _ = first.communicate(timeout=HANG)
        second = subprocess.run([*command, "--parallel=2"], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=HANG)
        return {"sweep_dir": str(sweep_dir),
                "first": [first.returncode, "".join(seen) + rest],
                "second": [second.returncode, second.stdout]}

    built = once(shared, "swept", build)
    return Path(built["sweep_dir"]), Finished(*built["first"]), Finished(*built["second"])


@dataclasses.dataclass(frozen=True)
class MaskRun:
    data: Path  # the synthetic sample (Pets layout, trimaps beside the images)
    records: Path  # converted with --masks
    model_dir: Path
    export_dir: Path  # the last checkpoint, as `train --export_dir` writes it (Vertex AI's)


@pytest.fixture(scope="session")
def mask_trained(shared) -> MaskRun:
    """The CPU Mask R-CNN experiment trained on the demo's sample converted with masks (its
    own 200 steps) and exported by the training run (`train --export_dir`, Vertex AI's), then
    its last checkpoint evaluated, both in this process: once for the session."""
    def build(root: Path) -> dict:
        from trainer.data.convert import convert_directory
        from trainer.data.sample import write_sample
        from trainer.model.experiments import MASK_DEMO_EXPERIMENT

        data = write_sample(root / "pets")
        records = root / "records"
        convert_directory(data, records, masks=True, num_shards=2, progress=False)
        model_dir, export_dir = root / "model", root / "exported"
        flags = (f"--experiment={MASK_DEMO_EXPERIMENT}", *data_flags(records, model_dir))
        trainer_here(*flags, "--mode=train", f"--export_dir={export_dir}")
        trainer_here(*flags, "--mode=eval")  # eval/ckpt-200.json
        return {"data": str(data), "records": str(records), "model_dir": str(model_dir),
                "export_dir": str(export_dir)}

    return MaskRun(**{k: Path(v) for k, v in once(shared, "mask_trained", build).items()})


@pytest.fixture
def services(tmp_path):
    """The fake Vertex AI, Cloud Storage and Artifact Registry of tests/fakes, for a test."""
    from tests.fakes.cloud import fake_cloud

    with fake_cloud(tmp_path) as fakes:
        yield fakes


@pytest.fixture
def serving_prices(tmp_path, monkeypatch):
    """A price table with known prediction prices in us-central1 (a refreshed table's
    shape), in place of the pinned one: n1-standard-4 (4 vCPUs, 15 GB) costs 0.26/h."""
    import datetime

    from launch.stores.pricing import table

    path = tmp_path / "prices.yaml"
    table.PriceTable("USD", {
        table.Key("prediction", "us-central1", kind, name, "standard"):
            table.Row(usd, "SKU 0000-TEST-0001", datetime.date.today().isoformat(), True)
        for kind, name, usd in (("cores", "n1", 0.05), ("ram", "n1", 0.004),
                                ("accelerators", "NVIDIA_TESLA_T4", 0.4))}).write(path)
    monkeypatch.setattr(table, "PRICES_FILE", path)
