"""The trainer's log in its own words: lines TensorFlow's libraries print on every run that say
nothing a user can act on are dropped before they reach the log, each pattern with why.

TensorFlow's C++ code logs through absl before any log level applies (`TF_CPP_MIN_LOG_LEVEL`
does not reach it), so the filter sits on the file descriptor: `python -m trainer` hands its
stderr to a small child process that copies it, line by line, less these lines. The child
outlives the trainer (it ends when the last writer is gone), so a crash's last lines, which
failure triage reads, are never lost; a partial line (a progress bar's `\\r` update) is passed
on as soon as nothing more comes for a moment.
"""

from __future__ import annotations

import atexit
import os
import re
import select
import signal
import sys

NOISE = re.compile("|".join((
    # absl's notice, before TensorFlow's first C++ warning, that it has no log settings
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    r"STDERR$",
    # Grappler has no cost model for CropAndResize (Mask R-CNN's mask head): a warning a step
    r"^W\d{4} [\d:.]+ +\d+ op_level_cost_estimator\.cc:\d+\] Error in PredictCost\(\)",
    # a machine without a GPU (every CPU run) and CPUs without AVX-512: nothing to fix
    r"^\S+ \S+: E \S*cuda_platform\.cc:\d+\] failed call to cuInit",
    r"^\S+ \S+: E \S*util\.cc:\d+\] oneDNN supports DT_BOOL only on platforms with AVX-512",
    # the MobileNet backbone's last block, which no FPN level reads: it has no gradient
    r"^WARNING:tensorflow:Gradients do not exist for variables \[",
    # Model Garden's own call of a deprecated TensorFlow argument, with its two-line advice
    r"^WARNING:tensorflow:From \S+deprecation\.py:\d+: calling map_fn_v2 \(from "
    r"tensorflow\.python\.ops\.map_fn\) with dtype is deprecated",
    r"^Instructions for updating:$",
    # the TFLite converter's MLIR passes, on every conversion: options it ignores by design
    # (TensorFlow's own converter sets them) and a pass it does not run
    r"^W\d{4} [\d:.]+ +\d+ tf_tfl_flatbuffer_helpers\.cc:\d+\] Ignored "
    r"(output_format|drop_control_dependency)\.$",
    r"^I\d{4} [\d:.]+ +\d+ mlir_graph_optimization_pass\.cc:\d+\] MLIR V1 optimization "
    r"pass is not enabled$",
    r"^Use fn_output_signature instead$",
)))
MAX_PARTIAL = 1 << 20  # bytes of an unended line held back, at most (a line of NOISE: < 4 KB)
PARTIAL_WAIT = 0.2  # seconds a partial line waits for its end before it is passed on
DRAIN_WAIT = 5.0  # seconds an exit waits for the filter (a helper holding stderr: no longer)


def noise(line: str) -> bool:
    return bool(NOISE.search(line.rstrip("\r\n")))


def copy_without_noise(source: int, sink: int) -> None:
    """Copies `source` to `sink` until end of file, less the NOISE lines (a line ends at
    `\\n` or `\\r`)."""
    pending = b""
    while True:
        ready, _, _ = select.select([source], [], [], PARTIAL_WAIT if pending else None)
        if not ready:  # a partial line and a pause: pass it on (a progress bar)
            _write(sink, pending)
            pending = b""
            continue
        chunk = os.read(source, 1 << 16)
        if not chunk:
            _write(sink, pending)
            return
        pending += chunk
        *lines, pending = re.split(rb"(?<=[\r\n])", pending)
        _write(sink, b"".join(line for line in lines
                              if not noise(line.decode("utf-8", "replace"))))
        if len(pending) > MAX_PARTIAL:  # no line of NOISE is this long: pass it on
            _write(sink, pending)
            pending = b""


def _write(sink: int, data: bytes) -> None:
    while data:
        data = data[os.write(sink, data):]


def filter_stderr() -> None:
    """From here on, this process's stderr (fd 2) reaches the log through the filter. Call
    it before TensorFlow loads, while the process has one thread (it forks). The filter is
    no child of this process (forked twice), so tools that count its children (a conversion's
    workers) see only theirs."""
    read, write = os.pipe()
    done_read, done_write = os.pipe()  # the filter holds its end until it has copied all
    middle = os.fork()
    if middle == 0:
        if os.fork() == 0:  # the filter: it ends at end of file, not by a signal to the group
            for fd in (write, done_read, 0, 1):  # holds no other end open
                os.close(fd)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                copy_without_noise(read, 2)
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(middle, 0)
    os.close(read)
    os.close(done_write)
    sys.stderr.flush()
    os.dup2(write, 2)
    os.close(write)
    atexit.register(_drained, done_read)


def _drained(done: int) -> None:
    """At a normal exit, the filter's last lines are out before this process ends (a shell
    prompt never comes before them); a crash leaves the filter to finish alone."""
    sys.stderr.flush()
    os.close(2)  # the filter's end of file, unless a helper process still holds it
    select.select([done], [], [], DRAIN_WAIT)  # readable at the filter's exit (end of file)
