"""Why a job failed, from its log: the first line that names a known failure, its cause and
its fix in one line, then the lines around it. Unknown failures show the first traceback.

The failures are data: `FAILURES`, one table of (name, pattern, cause, fix), tried on each
line in the order the log has them (the first failure, not the last symptom); on one line the
table's order decides. `classify` is pure: the adapters (the Vertex AI log reader in
launch/targets/vertex/logs.py, the local trainer's output in launch/targets/local/processes.py)
only feed it lines.

Each pattern quotes what the real services print; the comment above it says where that text
was read (2026-11-24). Cause and fix may name a pattern's groups (`{message}`) and the memory
facts `facts()` reads from the log (`{batch_fix}`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Sequence

from launch.text import printable
from trainer.cli.main import BATCH_SIZE_WORDS, ERROR_PREFIX
from trainer.model.hparams import PARAMETERS

# launch.values.jobfile's Model Garden parameters (trainer/model/hparams.py)
OVERRIDE = "--override"
BATCH_FLAG = f"{OVERRIDE} batch_size"  # the global batch size
BATCH_PATH = PARAMETERS["batch_size"]  # task.train_data.global_batch_size
DATA_REPORT = "invoke data.inspect"
QUOTAS_PAGE = "https://console.cloud.google.com/iam-admin/quotas"
KILLED_BY_SIGNAL = "the trainer was killed by signal"  # a local replica's end, to classify
LINES = 1000  # the newest lines of a log that the adapters feed `classify`
LINE_WIDTH, CONTEXT, TRACEBACK_LINES = 300, 2, 30
MESSAGE_WIDTH = 1000  # of the trainer's own line, as the verdict shows it


@dataclasses.dataclass(frozen=True)
class Failure:
    """A kind of failure: how its log line reads, what it means and what to do."""

    name: str
    pattern: re.Pattern[str]
    cause: str
    fix: str


FAILURES: tuple[Failure, ...] = (
    # TensorFlow's BFC allocator and kernels (tensorflow/core/common_runtime/bfc_allocator.cc,
    # framework/op_kernel.cc; strings checked in TF 2.20's libtensorflow_framework.so.2), as in
    # github.com/Azure/MachineLearningNotebooks/issues/880, tensorflow/tensorflow/issues/9790;
    # XLA on TPUs: github.com/tensorflow/tpu/issues/385 ("Ran out of memory in memory space hbm")
    Failure("gpu-oom", re.compile(
        r"OOM when allocating tensor|Allocator \(\w{1,100}\) ran out of memory|"
        r"Ran out of memory in memory space hbm"),
        "the replica ran out of accelerator memory{memory_note}", "{batch_fix}"),
    # Vertex AI's (and AI Platform's) replica epilogue: github.com/tensorflow/models/issues/5591
    # ("The replica master 0 ran out-of-memory and exited with a non-zero status of
    # 9(SIGKILL)"); exit 137 is 128 + SIGKILL, the kernel's OOM killer (Docker's OOMKilled);
    # a local trainer killed so is "killed by signal 9" (KILLED_BY_SIGNAL:
    # launch/targets/local/processes.py)
    Failure("host-oom", re.compile(
        r"replica \S{1,100}(?: \d{1,9})? ran out.of.memory|non-zero status of (?:137|9\b)|"
        rf"OOMKilled|{KILLED_BY_SIGNAL} 9\b",
        re.IGNORECASE),
        "the replica ran out of host memory and was killed (exit 137, SIGKILL)",
        f"lower the global batch size ({BATCH_FLAG}=N: {BATCH_PATH}) or pick a "
        "--machine-type with more memory"),
    # github.com/GoogleCloudPlatform/stable-diffusion-on-gcp/issues/12 and
    # google-deepmind/xmanager/issues/29 ("429 The following quota metrics exceed quota limits:
    # aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"),
    # GoogleCloudPlatform/training-data-analyst/issues/2284 ("Quota failure for project")
    Failure("quota", re.compile(
        r"exceed quota limits|quota metrics|Quota exceeded|Quota failure|"
        r"custom_model_training_\w", re.IGNORECASE),
        "the project's Vertex AI training quota for this hardware in this region is too low",
        f"ask for more ({QUOTAS_PAGE}, service Vertex AI API, the metric above), or choose "
        "another --region or hardware; --spot draws on the separate preemptible quota"),
    # github.com/openreview/openreview-expertise/issues/401 ("Resources are insufficient in
    # region: us-central1"); Compute Engine's stockout: googlefonts/fontbakery-dashboard/
    # issues/81 and kubernetes/k8s.io/issues/9834 (ZONE_RESOURCE_POOL_EXHAUSTED, "does not have
    # enough resources available to fulfill the request")
    Failure("stockout", re.compile(
        r"resources (?:are|is) insufficient|ZONE_RESOURCE_POOL_EXHAUSTED|stockout|"
        r"does not have enough resources available|"
        r"(?:not enough|insufficient|out of) (?:resources|capacity)", re.IGNORECASE),
        "Google Cloud had no free machines of this kind in the region (a stockout)",
        "resubmit later, climb --capacity spot,flex-start,standard, or fail over to other "
        "--regions or --fallback hardware"),
    # Docker and Artifact Registry: github.com/weaviate/weaviate/issues/4316 ("manifest for ...
    # not found: manifest unknown"), iterative/cml/issues/1136 (Permission
    # "artifactregistry.repositories.downloadArtifacts" denied), vanvalenlab/kiosk-console/
    # issues/86 (ImagePullBackOff)
    Failure("image-pull", re.compile(
        r"Unable to pull|Failed to pull image|ImagePullBackOff|ErrImagePull|manifest unknown|"
        r"pull access denied|artifactregistry\.repositories\.downloadArtifacts",
        re.IGNORECASE),
        "Vertex AI could not pull the job's image (missing, or not readable by Vertex AI)",
        "drop --image to build these sources' image (or `invoke image.build`), and run "
        "`invoke doctor` to check the registry's access"),
    # TensorFlow 2.20: python/tpu/tpu_strategy_util.py ("TPUs not found in the cluster. Failed
    # in initialization"), python/distribute/cluster_resolver/tpu/tpu_cluster_resolver.py
    # ("Failed to connect to master", "No TPUs with the specified names exist");
    # github.com/tensorflow/models/issues/10735 ("Please provide a TPU Name to connect to."),
    # jax-ml/jax/issues/21761 ("TPU initialization failed")
    Failure("tpu-init", re.compile(
        r"TPU initialization failed|Failed to connect to (?:the )?(?:TPU|master)|"
        r"TPUs not found in the cluster|Please provide a TPU Name|"
        r"No TPUs with the specified names exist|Unable to initialize backend 'tpu'",
        re.IGNORECASE),
        "the trainer could not start the TPU",
        "resubmit (a TPU host can fail to start); if it fails again, check the job ran the "
        "TPU image (trainer-tpu) on a --tpu type the region offers (`invoke doctor`)"),
    # Model Garden's RecoveryCondition (official/core/actions.py, tf-models-official 2.20),
    # which the trainer's run_experiment applies: "The loss value is NaN after training loop"
    # and "The loss value is inf, which is larger than the bound"; tf.debugging.check_numerics
    # ("Tensor had NaN values")
    Failure("nan-loss", re.compile(
        r"The loss value is (?:NaN|nan|inf|-inf)\b|Tensor had (?:NaN|Inf) values"),
        "the training loss became NaN or infinite",
        f"look for bad boxes and labels in the data report (`{DATA_REPORT}`), then lower "
        f"the learning rate ({OVERRIDE} learning_rate=...)"),
    # Cloud Storage through TensorFlow's file system: github.com/nyu-dl/dl4marco-bert/issues/19
    # ("does not have storage.objects.list access"), EleutherAI/gpt-neo/issues/160
    # (PermissionDeniedError, "does not have storage.objects.get access")
    Failure("permission", re.compile(
        r"PermissionDeniedError|does not have storage\.\w{1,50}\.\w{1,50} access|"
        r"HTTP response code 40[13]|Permission '[\w.]{1,200}' denied|403 Forbidden"),
        "the job's service account may not read or write something it needs",
        "grant the trainer's service account access to that bucket or object (the infra "
        "grants the stack's bucket), or point the job at what it may read; `invoke doctor` "
        "checks the stack's"),
    # github.com/nyu-dl/dl4marco-bert/issues/19 ("No such object: ..."),
    # tensorflow/models/issues/2553 (HTTP response code 404 reading gs://...)
    Failure("missing", re.compile(
        r"No such object|NotFoundError|FileNotFoundError|HTTP response code 404"),
        "the job looked for a file or object that is not there",
        "check the gs:// path named above exists (`gcloud storage ls PATH`): --data-dir, "
        "--init-from and --config-file are read where the trainer runs"),
    # The trainer's own one-line refusal (trainer/cli/main.py: ERROR_PREFIX, exit 2 for a usage
    # error, 1 for failed work): last, so a line that says more above wins. Only a line
    # that starts with the trainer's own prefix is its word; `error: ...` from anything else
    # (a library, a tool, data echoed into the log) is quoted log text like any other line
    Failure("trainer", re.compile(
        rf"^{re.escape(ERROR_PREFIX)}(?P<message>.{{1,{MESSAGE_WIDTH}}})"),
        "the trainer refused to go on: {message}",
        "correct the value it names and run again (the same flags fail the same way here, "
        "at once: --target local)"),
)

TRACEBACK = "Traceback (most recent call last)"
# The memory facts, read from a log that anyone's data may have written into: every
# repetition in these patterns (and the table's) is bounded, so a search costs a constant
# per position (linear in the line, whatever it holds), and every number has at most 20
# digits, so it converts (int() refuses more than 4,300; float() of 400 turns infinite)
BATCH = re.compile(rf"{BATCH_SIZE_WORDS} (\d{{1,9}})\b")
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
SIZE = r"(\d{1,15}(?:\.\d{1,6})?)\s?([KMGT]?)i?B?\b"
# bfc_allocator.cc's dump when an allocation fails: "Limit: N", "InUse: N" (bytes), and the
# request "(rounded to N)"; gpu_device.cc: "Created device ... with N MB memory"; XLA on TPUs:
# "Used 8.38G of 8.00G hbm"
LIMIT = re.compile(r"\bLimit:\s{1,100}(\d{1,20})\b")
IN_USE = re.compile(r"\bInUse:\s{1,100}(\d{1,20})\b")
REQUEST = re.compile(
    r"ran out of memory trying to allocate [^\n(]{0,100}\(rounded to (\d{1,20})\)")
DEVICE = re.compile(r"Created device \S{1,200} with (\d{1,12}) MB memory")
HBM = re.compile(rf"Used {SIZE} of {SIZE} hbm")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A failure's cause and fix, and the log lines that show it."""

    name: str
    cause: str
    fix: str
    excerpt: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """The one line: the cause, then what to do."""
        return f"{self.cause}: {self.fix}"

    def text(self) -> str:
        """The line, then the excerpt quoted below it: log text, shown and never obeyed."""
        return "\n".join([self.line, *(f"  | {printable(line)}" for line in self.excerpt)])


# what an unknown failure says, above its first traceback
UNKNOWN = Verdict("unknown", "no known cause in the log", "read the first traceback below")


def exit_lines(code: int) -> list[str]:
    """What a local replica's exit status adds to its output for `classify`: subprocess's
    negative status is a signal, and SIGKILL is the kernel's out-of-memory killer."""
    return [f"{KILLED_BY_SIGNAL} {-code}"] if code < 0 else []


def classify(lines: Iterable[str]) -> Verdict:
    """The first known failure in `lines` (oldest first), or the first traceback's."""
    lines = [part for line in lines for part in str(line).splitlines()]
    for index, line in enumerate(lines):
        for failure in FAILURES:
            if match := failure.pattern.search(line):
                fields = {**facts(lines), **{key: printable(value) for key, value in
                                             match.groupdict(default="").items()}}
                return Verdict(failure.name, failure.cause.format(**fields),
                               failure.fix.format(**fields), _around(lines, index))
    return dataclasses.replace(UNKNOWN, excerpt=first_traceback(lines))


def facts(lines: Sequence[str]) -> dict[str, str]:
    """What the log says about memory, in the OOM entry's words: the global batch size the
    trainer printed, the accelerator memory the replica had and what the step needed."""
    text = "\n".join(lines)
    batch = _last_int(BATCH, text)
    had, needed = _memory(text)
    note = f"global batch size {batch} " if batch else ""
    memory_note = f" ({note}needed at least {_size(needed)}; it had {_size(had)})" \
        if had and needed else ""
    if fit := fitting_batch(batch, had, needed):
        batch_fix = f"lower the global batch size to {fit}: {BATCH_FLAG}={fit} ({BATCH_PATH})"
    else:
        batch_fix = (f"lower the global batch size{f' from {batch}' if batch else ''}: "
                     f"{BATCH_FLAG}=N ({BATCH_PATH})")
    return {"memory_note": memory_note, "batch_fix": batch_fix}


def fitting_batch(batch: int | None, had: int | None, needed: int | None) -> int | None:
    """The largest power of two at most `batch * had / needed`: activations grow with the
    batch, and `needed` is a lower bound (the first allocation that failed), so the margin
    a power of two leaves is welcome. None unless the log gave all three."""
    if not (batch and had and needed) or needed <= had:
        return None
    share = batch * had // needed
    return 1 << (share.bit_length() - 1) if share >= 1 else 1


def _memory(text: str) -> tuple[int | None, int | None]:
    """(bytes the accelerator had, bytes the failed step needed at least)."""
    if hbm := HBM.search(text):
        return _bytes(hbm[3], hbm[4]), _bytes(hbm[1], hbm[2])
    limit, in_use = _last_int(LIMIT, text), _last_int(IN_USE, text)
    if limit is None and (device := _last_int(DEVICE, text)):
        limit = device << 20
    request = _last_int(REQUEST, text)
    return limit, (in_use + request) if in_use is not None and request else None


def _last_int(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.findall(text)
    try:  # the patterns bound their digits; a log is still not trusted to fit them
        return int(found[-1]) if found else None
    except ValueError:
        return None


def _bytes(number: str, unit: str) -> int | None:
    try:
        value = float(number) * UNITS[unit.upper()]
    except (ValueError, KeyError):
        return None
    return int(value) if math.isfinite(value) else None


def _size(count: int) -> str:
    return f"{count / UNITS['G']:.1f} GiB"


def _clip(line: str) -> str:
    return line if len(line) <= LINE_WIDTH else line[:LINE_WIDTH - 3] + "..."


def _around(lines: Sequence[str], index: int) -> tuple[str, ...]:
    """The line that names the failure, with a little of what came before and after."""
    return tuple(_clip(line) for line in lines[max(0, index - CONTEXT):index + CONTEXT + 1]
                 if line.strip())


def first_traceback(lines: Sequence[str]) -> tuple[str, ...]:
    """The first Python traceback, to its exception line (long ones: head and tail); the
    last lines when there is none."""
    start = next((i for i, line in enumerate(lines) if TRACEBACK in line), None)
    if start is None:
        return tuple(_clip(line) for line in lines[-2 * CONTEXT - 1:] if line.strip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1].isspace()):
        end += 1  # frames are indented; the exception line is not
    block = lines[start:end + 1]
    if len(block) > TRACEBACK_LINES:
        block = [block[0], "  ...", *block[-(TRACEBACK_LINES - 2):]]
    return tuple(_clip(line) for line in block)
