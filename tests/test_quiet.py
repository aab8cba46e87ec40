"""Issue 38 item 8: the trainer's stderr, less the lines TensorFlow prints on every run that no
one can act on (trainer/cli/quiet.py); everything else, a progress bar's partial line included,
passes as it came, and a crash's last lines are never lost."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from tests.conftest import HANG, REPO
from trainer.cli import quiet

NOISE_LINES = [  # as TensorFlow 2.20 printed them in this project's runs (2026-11-27)
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    'W0000 00:00:1795822553.696317   24729 op_level_cost_estimator.cc:699] Error in '
    'PredictCost() for the op: op: "CropAndResize" attr { key: "T" value { type: DT_FLOAT } }',
    "2026-11-27 23:35:21.919477: E external/local_xla/xla/stream_executor/cuda/"
    "cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: "
    "UNKNOWN ERROR (303)",
    "2026-11-27 23:36:20.333547: E tensorflow/core/util/util.cc:131] oneDNN supports DT_BOOL "
    "only on platforms with AVX-512. Falling back to the default Eigen-based implementation if "
    "present.",
    "WARNING:tensorflow:Gradients do not exist for variables ['conv2dbn_block_1/batch_"
    "normalization/gamma:0'] when minimizing the loss.",
    "WARNING:tensorflow:From /x/tensorflow/python/util/deprecation.py:660: calling map_fn_v2 "
    "(from tensorflow.python.ops.map_fn) with dtype is deprecated and will be removed in a "
    "future version.",
    "Instructions for updating:",
    "Use fn_output_signature instead",
    # a TFLite export's MLIR logging (2026-12-02)
    "W0000 00:00:1796174772.034424   19144 tf_tfl_flatbuffer_helpers.cc:364] Ignored "
    "output_format.",
    "W0000 00:00:1796174772.039866   19144 tf_tfl_flatbuffer_helpers.cc:367] Ignored "
    "drop_control_dependency.",
    "I0000 00:00:1796174772.351863   19144 mlir_graph_optimization_pass.cc:437] MLIR V1 "
    "optimization pass is not enabled",
]
OURS = ["pets-trainer: error: --steps must be at least 1, got '0'",
        "WARNING:tensorflow:a warning we have not seen before stays",
        "E0000 00:00:1.0 1 other.cc:1] an absl error of another kind stays"]


def filtered(data: bytes) -> bytes:
    """`data` through the filter: written by one thread, copied by another, read here (a
    pipe holds 64 KB: no side may wait for the others to finish)."""
    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()

    def copy() -> None:
        quiet.copy_without_noise(read_in, write_out)
        os.close(write_out)

    def write() -> None:
        quiet._write(write_in, data)
        os.close(write_in)

    threads = [threading.Thread(target=copy), threading.Thread(target=write)]
    for thread in threads:
        thread.start()
    with os.fdopen(read_out, "rb") as out:
        result = out.read()
    for thread in threads:
        thread.join(timeout=HANG)
    os.close(read_in)
    return result


def test_the_noise_goes_and_every_other_byte_stays_in_order():
    lines = [NOISE_LINES[0], OURS[0], *NOISE_LINES[1:], *OURS[1:]]
    bar = "\rconverting:  50%|#####     | 162/324\rconverting: 100%|##########| 324/324\n"
    got = filtered(("\n".join(lines) + "\n" + bar + "no newline at the end").encode())
    assert got.decode() == "\n".join([OURS[0], *OURS[1:]]) + "\n" + bar + \
        "no newline at the end"


def test_a_line_longer_than_any_noise_passes_whole_without_waiting_for_its_end(monkeypatch):
    """Held back at most MAX_PARTIAL bytes: a writer of megabytes without a line end (a
    dumped tensor) is neither buffered without bound nor re-split at every read. With the
    pause that passes a partial line on made endless, only that bound lets it through."""
    endless = b"x" * (3 * quiet.MAX_PARTIAL + 5)
    assert filtered(endless + b"\n" + NOISE_LINES[0].encode() + b"\n") == endless + b"\n"

    monkeypatch.setattr(quiet, "PARTIAL_WAIT", HANG)
    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    got = bytearray()
    passed = threading.Event()  # more than MAX_PARTIAL bytes out, the line still unended

    def copy() -> None:
        quiet.copy_without_noise(read_in, write_out)
        os.close(write_out)

    def read() -> None:
        while chunk := os.read(read_out, 1 << 20):
            got.extend(chunk)
            if len(got) > quiet.MAX_PARTIAL:
                passed.set()

    threads = [threading.Thread(target=copy), threading.Thread(target=read),
               threading.Thread(target=quiet._write, args=(write_in, endless))]
    for thread in threads:
        thread.start()
    assert passed.wait(timeout=HANG), "the long line was held back"
    threads[2].join(timeout=HANG)
    os.close(write_in)  # end of file: the filter passes on the rest and ends
    for thread in threads[:2]:
        thread.join(timeout=HANG)
    assert bytes(got) == endless
    for fd in (read_in, read_out):
        os.close(fd)


def test_a_partial_line_is_passed_on_while_the_writer_waits():
    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    copier = threading.Thread(target=quiet.copy_without_noise, args=(read_in, write_out))
    copier.start()
    os.write(write_in, b"\rconverting:  10%")  # a progress bar's update: no line end
    got = b""
    while len(got) < len(b"\rconverting:  10%"):  # passed on without its end (a hang fails)
        got += os.read(read_out, 100)
    assert got == b"\rconverting:  10%"
    os.close(write_in)
    copier.join(timeout=HANG)
    for fd in (read_in, read_out, write_out):
        os.close(fd)


def test_the_trainer_process_says_its_error_in_its_one_line_through_the_filter():
    ran = subprocess.run([sys.executable, "-m", "trainer", "--mode=train", "--train_steps=0"],
                         cwd=REPO, capture_output=True, text=True, timeout=HANG)
    assert ran.returncode == 2
    assert ran.stderr.splitlines() == [
        "pets-trainer: error: --steps must be at least 1, got '0'"]
