"""Why a job failed, said in one line: realistic failing logs served by the fake Cloud
Logging service (tests/fakes/logs.py) and read through the real client by `jobs.status`,
`jobs.wait`, `train --follow`, the capacity ladder and a tuning job's trials; and a local
trainer process's own output. Each log quotes what TensorFlow, Model Garden, Cloud Storage,
Docker and Vertex AI print (the sources are cited in launch/targets/triage.py)."""

from __future__ import annotations

import random
import re
import stat

import pytest

from launch.errors import StepFailed
from launch.features.jobs import job_command
from launch.stores.gcs.records import upload_records
from launch.targets import triage
from launch.targets.local.processes import LocalExecutor, run_job
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import sweeps
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.ladder import Ladder
from launch.targets.vertex.resources import Resources
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Request, tool_job
from launch.values.resources import Accelerator
from launch.values.sweep import Sweep
from tests.fakes.cloud import OUTPUTS, fake_cloud, write_records
from tests.fakes.logs import job_entry
from tests.on_vertex import with_vertex
from tests.test_vertex import SETUP, train_custom_job
from trainer.args import SampleArgs
from trainer.cli.main import ERROR_PREFIX

T4 = Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1))
EXITED = ("The replica workerpool0-0 exited with a non-zero status of {code}. To find out more "
          "about why your job exited please check the logs: https://console.cloud.google.com/"
          "logs/viewer?project=pets-detector-dev&resource=ml_job%2Fjob_id%2F1")
START = ("experiment pets_retinanet_resnetfpn, mode train, strategy one_device, precision "
         "mixed_float16, global batch size 64, model_dir gs://pets-data/runs/gpu1/checkpoints")
STEPS = [f"train | step: {step} | training until step 5000..." for step in (100, 200, 300)]
FRAMES = ["Traceback (most recent call last):",
          '  File "/usr/local/lib/python3.11/runpy.py", line 198, in _run_module_as_main',
          '  File "/app/trainer/__main__.py", line 5, in <module>',
          '  File "/app/trainer/training/train.py", line 65, in _train',
          '  File "/usr/local/lib/python3.11/site-packages/official/core/train_lib.py", line '
          '117, in run_experiment']
GPU_OOM = [
    START,
    "I0000 tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device "
    "/job:localhost/replica:0/task:0/device:GPU:0 with 13598 MB memory:  -> device: 0, name: "
    "Tesla T4, pci bus id: 0000:00:04.0, compute capability: 7.5",
    *STEPS[:1],
    "W0000 tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out "
    "of memory trying to allocate 1.17GiB (rounded to 1258291200)requested by op "
    "retina_net_model/resnet/conv2d_12/Conv2D",
    "I0000 tensorflow/core/common_runtime/bfc_allocator.cc:1101] Stats:\n"
    "Limit:                     14258536448\nInUse:                     13997170432\n"
    "MaxInUse:                  14001412352",
    *FRAMES,
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:",
    "OOM when allocating tensor with shape[64,256,160,160] and type half on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
]
NAN = [START, *STEPS, *FRAMES,
       '  File "/usr/local/lib/python3.11/site-packages/official/core/actions.py", line 163, '
       "in __call__",
       "RuntimeError: The loss value is NaN after training loop and it happens 1 times."]
TPU = [START.replace("one_device", "tpu"), *FRAMES,
       '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/tpu/'
       'tpu_strategy_util.py", line 142, in initialize_tpu_system_impl',
       "tensorflow.python.framework.errors_impl.NotFoundError: TPUs not found in the cluster. "
       "Failed in initialization: No OpKernel was registered to support Op "
       "'ConfigureDistributedTPU'"]
PERMISSION = [START, *FRAMES,
              "tensorflow.python.framework.errors_impl.PermissionDeniedError: Error executing "
              "an HTTP request: HTTP response code 403 with body '{\"error\": {\"code\": 403, "
              "\"message\": \"pets-trainer@pets-detector-dev.iam.gserviceaccount.com does not "
              "have storage.objects.get access to the Google Cloud Storage object.\"}}'"]
MISSING = [START, *FRAMES,
           "tensorflow.python.framework.errors_impl.NotFoundError: Error executing an HTTP "
           "request: HTTP response code 404 with body '{\"error\": {\"code\": 404, \"message\": "
           "\"No such object: pets-data/pretrained/resnet50/ckpt-28080.index\"}}'"]
IMAGE = ["Error response from daemon: manifest for us-central1-docker.pkg.dev/"
         "pets-detector-dev/pets-images/trainer:3f2a not found: manifest unknown: Failed to "
         "fetch \"3f2a\""]
TRAINER = [f"{ERROR_PREFIX}--data_dir gs://pets-data/records: no train.record-* files; "
           "convert and upload the data first (invoke data.upload)"]
UNKNOWN = [START, *(f"train | step: {step}" for step in range(100, 3000, 100)), *FRAMES,
           "ZeroDivisionError: division by zero", "", *FRAMES,
           "ValueError: a later failure, not the first"]

# class -> (the replica's log, Vertex AI's error message, the one line `jobs.status` prints)
CASES = {
    "gpu-oom": (GPU_OOM, EXITED.format(code=1),
                "the replica ran out of accelerator memory (global batch size 64 needed at "
                "least 14.2 GiB; it had 13.3 GiB): lower the global batch size to 32: "
                "--override batch_size=32 (task.train_data.global_batch_size)"),
    "host-oom": ([START, *STEPS], "The replica workerpool0-0 ran out of memory and exited "
                 "with a non-zero status of 137.",
                 "the replica ran out of host memory and was killed (exit 137, SIGKILL): "
                 "lower the global batch size (--override batch_size=N: "
                 "task.train_data.global_batch_size) or pick a --machine-type with more "
                 "memory"),
    "quota": ([], "The following quota metrics exceed quota limits: aiplatform.googleapis.com/"
              "custom_model_training_nvidia_t4_gpus",
              "the project's Vertex AI training quota for this hardware in this region is too "
              "low: ask for more (https://console.cloud.google.com/iam-admin/quotas, service "
              "Vertex AI API, the metric above), or choose another --region or hardware; "
              "--spot draws on the separate preemptible quota"),
    "stockout": ([], "Resources are insufficient in region: us-central1. Please try a "
                 "different region.",
                 "Google Cloud had no free machines of this kind in the region (a stockout): "
                 "resubmit later, climb --capacity spot,flex-start,standard, or fail over to "
                 "other --regions or --fallback hardware"),
    "image-pull": (IMAGE, EXITED.format(code=1),
                   "Vertex AI could not pull the job's image (missing, or not readable by "
                   "Vertex AI): drop --image to build these sources' image (or `invoke "
                   "image.build`), and run `invoke doctor` to check the registry's access"),
    "tpu-init": (TPU, EXITED.format(code=1),
                 "the trainer could not start the TPU: resubmit (a TPU host can fail to "
                 "start); if it fails again, check the job ran the TPU image (trainer-tpu) on "
                 "a --tpu type the region offers (`invoke doctor`)"),
    "nan-loss": (NAN, EXITED.format(code=1),
                 "the training loss became NaN or infinite: look for bad boxes and labels in "
                 "the data report (`invoke data.inspect`), then lower the learning rate "
                 "(--override learning_rate=...)"),
    "permission": (PERMISSION, EXITED.format(code=1),
                   "the job's service account may not read or write something it needs: "
                   "grant the trainer's service account access to that bucket or object (the "
                   "infra grants the stack's bucket), or point the job at what it may read; "
                   "`invoke doctor` checks the stack's"),
    "missing": (MISSING, EXITED.format(code=1),
                "the job looked for a file or object that is not there: check the gs:// path "
                "named above exists (`gcloud storage ls PATH`): --data-dir, --init-from and "
                "--config-file are read where the trainer runs"),
    "trainer": (TRAINER, EXITED.format(code=2),
                "the trainer refused to go on: --data_dir gs://pets-data/records: no "
                "train.record-* files; convert and upload the data first (invoke "
                "data.upload): correct the value it names and run again (the same flags fail "
                "the same way here, at once: --target local)"),
    "unknown": (UNKNOWN, EXITED.format(code=1),
                "no known cause in the log: read the first traceback below"),
}


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        yield services


def failed_job(fakes, log: list[str], error: str, code: int = 13) -> str:
    """A training job that ended FAILED with `error`, its replica workerpool0-0 having
    written `log` (and another replica a line of its own); the job's id."""
    client = fakes.vertex.client()
    job = vertex_client.submit(client, OUTPUTS.project, OUTPUTS.region,
                               train_custom_job(SETUP, "gpu1", T4))
    fakes.vertex.failing[job.name] = (code, error)
    vertex_client.wait(client, job.name, on_state=lambda state: None, poll_seconds=0)
    number = job.name.rsplit("/", 1)[-1]
    fakes.logs.entries += [job_entry(number, second, line) for second, line in enumerate(log)]
    fakes.logs.entries.append(job_entry(number, 1, "another replica's line",
                                        replica="workerpool1-0"))
    return number


@pytest.mark.parametrize("name", CASES)
def test_jobs_status_says_why_a_job_failed_in_one_line(fakes, name):
    log, error, expected = CASES[name]
    number = failed_job(fakes, log, error, code=8 if name in ("quota", "stockout") else 13)
    status, line, *excerpt = job_command(fakes.cloud(), "status", number).splitlines()
    assert status.split()[:2] == [number, "FAILED"]
    assert line == expected
    assert excerpt and all(row.startswith("  | ") for row in excerpt)
    if error in (EXITED.format(code=1), EXITED.format(code=2)):  # one replica's log was read
        assert "another replica's line" not in "\n".join(excerpt)
        (request,) = fakes.logs.requests
        assert 'resource.labels.task_name="workerpool0-0"' in request.filter
    assert triage.classify([*log, error]).name == name


def test_an_unknown_failure_shows_its_first_traceback_not_the_last_lines(fakes):
    number = failed_job(fakes, *CASES["unknown"][:2])
    excerpt = job_command(fakes.cloud(), "status", number).splitlines()[2:]
    assert [row.removeprefix("  | ") for row in excerpt] == [
        *FRAMES, "ZeroDivisionError: division by zero"]


def test_jobs_wait_and_train_follow_fail_with_the_cause(fakes, tmp_path, capsys):
    number = failed_job(fakes, *CASES["nan-loss"][:2])
    with pytest.raises(StepFailed) as waited:
        job_command(fakes.cloud(), "wait", number, poll_seconds=0)
    first, second, *_ = str(waited.value).splitlines()
    assert "FAILED" in first and "non-zero status of 1" in first  # Vertex AI's own words
    assert second == CASES["nan-loss"][2]

    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    fakes.vertex.fail_next = EXITED.format(code=1)
    following = str(len(fakes.vertex.jobs) + 1)
    fakes.logs.entries += [job_entry(following, s, line) for s, line in enumerate(GPU_OOM)]
    with pytest.raises(StepFailed) as followed:
        Vertex(cloud, VertexHandover(follow=True, poll_seconds=0)).launch(
            with_vertex(Request.training("pets_retinanet_resnetfpn", 100, run_id="gpu2"), T4))
    assert str(followed.value).splitlines()[1] == CASES["gpu-oom"][2]
    assert "OOM when allocating tensor" in capsys.readouterr().out  # the log, as it came


def test_a_failed_rung_of_the_ladder_says_why(fakes, tmp_path):
    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    fakes.vertex.script = [(8, CASES["stockout"][1]), (13, EXITED.format(code=1))]
    fakes.logs.entries += [job_entry("2", s, line) for s, line in enumerate(TPU)]
    with pytest.raises(StepFailed) as failed:
        Vertex(cloud, VertexHandover(ladder=Ladder(("SPOT", "STANDARD")), poll_seconds=0)).launch(
            with_vertex(Request.training("pets_retinanet_resnetfpn", 100, run_id="ladder1"), T4))
    lines = str(failed.value).splitlines()
    assert "customJobs/2 failed on STANDARD capacity" in lines[0]
    assert lines[1] == CASES["tpu-init"][2]


def test_a_failed_trial_says_why(fakes, tmp_path):
    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    fakes.vertex.tuning.metric_dir = tmp_path / "hypertune"
    sweep = Sweep.from_yaml("metric: AP50\ntrials: 1\nparams:\n  batch_size: [64]\n")
    Vertex(cloud).tune(with_vertex(
        Request.training("pets_retinanet_resnetfpn", 100, run_id="sweep1"), T4), sweep)
    fakes.logs.entries += [job_entry("901", s, line) for s, line in enumerate(GPU_OOM)]
    said: list[str] = []
    with pytest.raises(StepFailed, match="all trials failed"):
        sweeps.follow(cloud.clients.jobs("us-central1"), next(iter(fakes.vertex.tuning.jobs)),
                      0, said.append, sleep=lambda seconds: None,
                      why=sweeps.trial_failure(cloud, OUTPUTS.project))
    trial = said.index("trial 1: INFEASIBLE")
    assert said[trial + 1].splitlines()[0] == CASES["gpu-oom"][2]


def fake_trainer(tmp_path, output: list[str], end: str) -> LocalExecutor:
    """An executor whose `python` prints `output` as the trainer would, then `end`s (an exit
    status, or a signal it sends itself): the local adapter reads a real process."""
    script = tmp_path / "python"
    (tmp_path / "output.txt").write_text("\n".join(output) + "\n")
    script.write_text(f"#!/bin/sh\ncat {tmp_path / 'output.txt'}\n{end}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return LocalExecutor(python=str(script))


@pytest.mark.parametrize(("output", "end", "name"), [
    (NAN, "exit 1", "nan-loss"),
    (GPU_OOM, "exit 1", "gpu-oom"),
    ([START, *STEPS], "kill -9 $$", "host-oom"),
])
def test_a_local_trainer_that_fails_says_why(tmp_path, output, end, name):
    job = tool_job(SampleArgs(str(tmp_path / "unused")))
    with pytest.raises(StepFailed) as failed:
        run_job(job, executor=fake_trainer(tmp_path, output, end))
    code = -9 if end.startswith("kill") else 1  # a signal: the kernel's OOM killer's
    assert str(failed.value).splitlines()[0] == \
        f"{job.name} failed with exit status {code}: {CASES[name][2]}"


def test_a_local_sweep_trial_killed_by_the_kernel_says_why(tmp_path):
    """The sweep's trials read the same exit status as `run_job`: SIGKILL is host memory."""
    import threading

    from rich.progress import Progress

    from launch.targets.local.tuning import TrialRunner

    runner = TrialRunner(100, Progress(disable=True), threading.Event(),
                         fake_trainer(tmp_path, [START, *STEPS], "kill -9 $$"))
    with pytest.raises(StepFailed) as failed:
        runner(tool_job(SampleArgs(str(tmp_path / "unused"))), tmp_path / "trial", "AP50")
    assert CASES["host-oom"][2] in str(failed.value)


@pytest.mark.parametrize(("log", "expected"), [
    # XLA on a TPU says what it had and needed itself
    ([START.replace("64", "256"), "RuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent "
      "error. Ran out of memory in memory space hbm. Used 21.95G of 15.48G hbm."],
     "lower the global batch size to 128: --override batch_size=128"),
    # no memory figures: the flag to lower, and from what
    ([START, "OOM when allocating tensor with shape[64,256,160,160]"],
     "lower the global batch size from 64: --override batch_size=N"),
    (["OOM when allocating tensor with shape[64,256,160,160]"],
     "lower the global batch size: --override batch_size=N"),
])
def test_out_of_memory_names_the_batch_size_that_fits_when_the_log_allows(log, expected):
    assert expected in triage.classify(log).fix


def test_the_first_failure_wins_and_on_one_line_the_table_order():
    assert triage.classify([*NAN, *GPU_OOM]).name == "nan-loss"  # the first, not the last
    # TF's NotFoundError of a TPU is a TPU failure, not a missing file
    assert triage.classify(TPU).name == "tpu-init"
    # Vertex AI's epilogue alone says nothing: the first traceback is shown
    assert triage.classify([EXITED.format(code=1)]).name == "unknown"
    assert triage.fitting_batch(64, 13 << 30, 13 << 30) is None  # it fit: no advice
    assert triage.fitting_batch(8, 1 << 30, 64 << 30) == 1


def test_an_unreadable_log_leaves_the_error_message_to_judge(fakes):
    number = failed_job(fakes, GPU_OOM, CASES["quota"][1], code=8)
    fakes.logs.deny = True
    _, line, *rest = job_command(fakes.cloud(), "status", number).splitlines()
    assert line == CASES["quota"][2]
    assert "(its log was not read: " in rest[-1] and "roles/logging.viewer" in rest[-1]


def test_the_guides_example_is_what_jobs_status_prints():
    from tests.conftest import REPO

    page = REPO / "docs" / "guides" / "failures.md"
    assert f"\n{CASES['gpu-oom'][2]}\n" in page.read_text()


# Log lines written to break triage: numbers too long for int() or float(), a memory figure
# that overflows, and lines that repeat a pattern's opening words without its end (what made
# one pattern quadratic: a 296 KB line took 122 s)
HUGE = "9" * 5000
CRAFTED = [
    f"Limit: {HUGE}", f"InUse: {HUGE}", f"{START[:60]} global batch size {HUGE}",
    f"ran out of memory trying to allocate 1.17GiB (rounded to {HUGE})",
    f"Created device /job:localhost/device:GPU:0 with {HUGE} MB memory",
    f"Used {'9' * 400}G of 8G hbm", f"Used {HUGE}.{HUGE}G of 8.00G hbm", "Used . of . hbm",
    "Used 1e999G of 8G hbm", "Used 8.38G of 0G hbm", "Limit: 0", "InUse: -1",
]
# the opening words of each pattern, to repeat along a line
OPENINGS = ["ran out of memory trying to allocate ", "Limit: ", "InUse:  ", "replica ",
            "Used 1", "Used 1.5G of ", "Created device ", "Allocator (", "Permission '",
            "does not have storage.", "global batch size ", "Traceback (most recent call last)",
            ERROR_PREFIX, "error: ", "9", " ", "\x1b[", "(rounded to "]


def test_crafted_log_lines_never_break_triage():
    """The failure stays the job's: whatever the log holds, `classify` gives a verdict (here
    with the memory facts it could not read left out), never a ValueError or OverflowError."""
    oom = "OOM when allocating tensor with shape[64,256,160,160]"
    for line in CRAFTED:
        verdict = triage.classify([START, line, oom])
        assert verdict.name == "gpu-oom", line
        assert verdict.fix.startswith("lower the global batch size"), line
    verdict = triage.classify(
        [*CRAFTED, "RuntimeError: Ran out of memory in memory space hbm. Used 9" + HUGE[:399]
         + "G of 8G hbm."])
    assert verdict.name == "gpu-oom" and "needed at least" not in verdict.cause
    rng = random.Random(36)
    pieces = [*OPENINGS, *CRAFTED, *(f.pattern.pattern[:40] for f in triage.FAILURES), "\n",
              "\r", "\x00", "\x9b", "\u202e", "\ud800", "{message}", "{}", "%s", "."]
    for _ in range(300):
        line = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        text = triage.classify([line, rng.choice(CRAFTED)]).text()
        assert isinstance(text, str)
        assert not set(text) & set("\x00\x1b\x9b\r\u202e\ud800")  # quoted, never obeyed


def oom_then(opening: str, size: int) -> list[str]:
    """An OOM line (so the memory facts are read too), then `size` characters of a
    pattern's opening words repeated: the log line that would cost most were a pattern
    quadratic. `invoke bench.scaling` times it at 30 KB and 300 KB."""
    return ["OOM when allocating tensor", (opening * (size // len(opening) + 1))[:size]]


@pytest.mark.parametrize("opening", OPENINGS)
def test_a_long_line_of_a_patterns_opening_words_is_classified_as_a_short_one(opening):
    """Whatever its length, the line gives the same verdict, the OOM it follows. Its time
    (linear: ten times the line, ten times as long) is `invoke bench.scaling`'s, since a
    time bound fails on a slower or busier machine; the rule below keeps it linear."""
    verdict = triage.classify(oom_then(opening, 300_000))
    assert verdict.name == "gpu-oom"
    assert verdict.text() == triage.classify(oom_then(opening, 30_000)).text()


def test_every_repetition_in_triage_patterns_is_bounded():
    """The rule that keeps triage linear: no `+`, `*` or open `{n,}` in any pattern, so a
    match attempt costs a bounded number of steps wherever it starts."""
    patterns = [*(f.pattern for f in triage.FAILURES), triage.BATCH, triage.LIMIT,
                triage.IN_USE, triage.REQUEST, triage.DEVICE, triage.HBM]
    unbounded = re.compile(r"(?<!\\)[+*]|\{\d*,\}")
    assert [p.pattern for p in patterns if unbounded.search(p.pattern.replace("\\\\", ""))] \
        == []


def test_only_the_trainers_own_line_is_shown_as_its_word(fakes, capsys):
    """`error: ...` from anything but the trainer (a library, a tool, a dataset's text that
    reached the log) is quoted log text; the trainer's line carries its own prefix, alone on
    its line whatever its message holds."""
    forged = [START, *STEPS, "error: the data is fine; to fix this run `curl x | sh`"]
    verdict = triage.classify(forged)
    assert verdict.name == "unknown" and "curl" not in verdict.line
    assert "  | error: the data is fine; to fix this run `curl x | sh`" in verdict.text()
    number = failed_job(fakes, forged, EXITED.format(code=2))
    status = job_command(fakes.cloud(), "status", number).splitlines()
    assert status[1] == "no known cause in the log: read the first traceback below"

    from trainer.cli.main import main

    assert main(["data", "convert", "--format=pets", f"--bogus=x\n{ERROR_PREFIX}forged"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(ERROR_PREFIX) and line.endswith(f"x {ERROR_PREFIX}forged")
    assert triage.classify([line]).name == "trainer"
