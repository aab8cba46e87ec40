"""An endpoint under load (`invoke bench.endpoint`): concurrency levels, each bounded in requests
and time, with p50/p95/p99 latency, images a second per replica, errors and USD per 1,000
images at the replica's prediction price.

Against a Vertex AI endpoint (`--endpoint ID`): its busiest deployed model, priced from its
machine, images sent as `predict --endpoint` sends them. Without one: the local stand-in
(launch/features/serving/standin.py) serving an export on 127.0.0.1 over TF Serving's REST
API, with the batching parameters the serving image would choose on this machine, priced as
`--machine-type` (this CPU stands in for it: a real replica's figure is the endpoint's).
"""

from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path

from launch.errors import InputError, MissingError
from launch.features.serving import loadtest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
SAMPLE_IMAGES = 20
MAX_IMAGE_BYTES = 1_000_000  # Vertex AI takes 1.5 MB a request after base64


def _images(pattern: str | None, root: Path) -> list[bytes]:
    """The images to send: `--images`, or held-out synthetic pets at Pets' photo size."""
    if pattern:
        paths = sorted(glob.glob(pattern))[:1000]
        if not paths:
            raise InputError(f"--images {pattern!r} matches no file")
    else:
        from trainer.data.sample import write_sample

        paths = sorted(glob.glob(str(write_sample(root, num_images=SAMPLE_IMAGES, seed=99,
                                                   scale=2) / "images" / "*.jpg")))
    images = [data for path in paths if len(data := Path(path).read_bytes()) <= MAX_IMAGE_BYTES]
    if not images:
        raise InputError(f"--images: no file of at most {MAX_IMAGE_BYTES:,} bytes to send")
    return images


def _progress(levels, bounds: loadtest.Bounds):
    """A bar a level, advanced by each answer."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        transient=True)

    def on_level(concurrency: int):
        task = progress.add_task(f"{concurrency} client(s)", total=bounds.requests)
        return lambda: progress.advance(task)

    return progress, on_level


def local_standin(model: str, machine_type: str | None, region: str, batching: bool):
    """The stand-in serving `model`, and the price of the machine it stands in for."""
    from launch.features.serving.standin import ModelServer
    from launch.targets.vertex.hardware import catalogue, resolve_machine
    from launch.targets.vertex.serving import prediction_hourly
    from launch.targets.vertex.spec import machine_spec
    from serving import batching as batching_lib
    from trainer.cli import quiet

    if not Path(model, "saved_model.pb").is_file():
        raise MissingError(f"--model {model}: no SavedModel there; `invoke demo` exports one to "
                           "work/demo/exported, or pass an export's directory")
    machine_type = machine_type or catalogue()["prediction_containers"]["default_machine"]
    machine = resolve_machine(region=region, machine_type=machine_type, accelerator=None)
    hourly, notes = prediction_hourly(region, machine_spec(machine))
    parameters = batching_lib.this_machine(os.environ) if batching else None
    quiet.filter_stderr()  # TensorFlow loads next: its start-up lines, as the trainer drops them
    return ModelServer(model, "detector", parameters), machine_type, hourly, notes, parameters


def main(endpoint: str | None, cloud_of, model: str, concurrency: str, requests: int,
         seconds: float, images: str | None, machine_type: str | None, batching: bool) -> None:
    levels = loadtest.check_levels(concurrency)
    bounds = loadtest.Bounds(requests, seconds)
    with tempfile.TemporaryDirectory() as tmp:
        pictures = _images(images, Path(tmp))
        if endpoint:
            from launch.targets.vertex.serving import endpoint_under_load

            measured = endpoint_under_load(cloud_of(), endpoint)
            where, send, replicas, hourly, notes = (
                f"{measured.name} ({measured.machine}, {measured.replicas} replica(s) at least)",
                measured.send, measured.replicas, measured.hourly, measured.price_notes)
            server = None
        else:
            server, priced_as, hourly, notes, parameters = local_standin(
                model, machine_type, "us-central1", batching)
            send = loadtest.rest_sender(f"{server.url}:predict", "serving_bytes")
            where = (f"the local stand-in serving {model} on {os.cpu_count()} CPU(s), "
                     f"{parameters.describe() if parameters else 'no batching'}; "
                     f"priced as one {priced_as}")
            replicas = 1
        print(f"{len(pictures)} image(s), one a request, to {where}", flush=True)
        progress, on_level = _progress(levels, bounds)
        try:
            with progress:
                results = loadtest.sweep(send, pictures, levels, bounds, on_level)
        finally:
            if server is not None:
                server.close()
    print(loadtest.table(results, replicas, hourly))
    for level in results:
        if level.errors:
            print(f"{level.concurrency} client(s): first error: {level.first_error}")
    for note in notes:
        print(note.strip())
    best = max(results, key=lambda level: level.images_per_second(replicas))
    print(f"most images/s per replica: {best.images_per_second(replicas):.2f} at "
          f"{best.concurrency} client(s); at 1 client p50 {results[0].percentile(50) or 0:.0f} ms")
