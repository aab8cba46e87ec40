"""TF Serving's server-side batching, with parameters chosen for the machine the container runs
on: concurrent requests are run as one batch, so a replica answers more images a second.

The values follow TF Serving's own guide, tensorflow_serving/batching/README.md at tag 2.20.0
("Recommended Approach for Choosing Batching Parameters", read 2026-11-28):

- both: "num_batch_threads equal to the number of CPU cores"; "for online serving",
  max_enqueued_batches equal to num_batch_threads, so a request waits behind at most one
  batch a thread instead of queueing without bound (a full queue is refused at once and
  Vertex AI's autoscaling sees the load);
- CPU only: batch_timeout_micros 0 ("0 may be the optimal value": a batch is whatever has
  arrived when a thread is free), and a max_batch_size that never cuts a batch short; ours
  is 32 images, since one of our requests is at most a few images (Vertex AI's 1.5 MB);
- GPU: a batch waits "a few milliseconds" (2 ms) for more requests, up to 64 images, so the
  GPU runs full batches; the guide says to tune both by measuring (`invoke bench.endpoint`).

The file is a text BatchingParameters proto (tensorflow_serving/servables/tensorflow/
session_bundle_config.proto): the wrapped fields take `{ value: N }`.
"""

from __future__ import annotations

import dataclasses
import os

CPU, GPU = "cpu", "gpu"
DEVICE = "PETS_SERVING_DEVICE"  # set by the Dockerfile's serving stage: cpu or gpu
FILE_NAME = "batching_parameters.txt"


@dataclasses.dataclass(frozen=True)
class Batching:
    max_batch_size: int
    batch_timeout_micros: int
    max_enqueued_batches: int
    num_batch_threads: int

    def describe(self) -> str:
        wait = f"waiting {self.batch_timeout_micros} us" if self.batch_timeout_micros else \
            "no wait"
        return (f"batches of up to {self.max_batch_size}, {wait}, {self.num_batch_threads} "
                f"thread(s), {self.max_enqueued_batches} queued at most")

    def text(self) -> str:
        """The BatchingParameters text proto TF Serving's --batching_parameters_file reads."""
        return "".join(f"{field.name} {{ value: {getattr(self, field.name)} }}\n"
                       for field in dataclasses.fields(self))


def for_machine(cpus: int, device: str) -> Batching:
    """The parameters for a replica with `cpus` cores, on CPUs or with a GPU."""
    threads = max(1, cpus)
    if device == GPU:
        return Batching(max_batch_size=64, batch_timeout_micros=2000,
                        max_enqueued_batches=threads, num_batch_threads=threads)
    return Batching(max_batch_size=32, batch_timeout_micros=0, max_enqueued_batches=threads,
                    num_batch_threads=threads)


def this_machine(environ) -> Batching:
    """For the machine this container runs on: its usable cores, and the image's device."""
    device = GPU if environ.get(DEVICE) == GPU else CPU
    return for_machine(len(os.sched_getaffinity(0)), device)
