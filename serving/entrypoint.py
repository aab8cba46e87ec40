"""The serving image's entrypoint: reads what Vertex AI tells the container (the AIP_*
variables of serving/contract.py), copies the model below a numbered version directory, and
starts TensorFlow Serving with its REST API on an internal port (contract.REST_PORT), batching
concurrent requests with parameters for this machine (serving/batching.py) and warming the
model up with the requests every export carries (assets.extra/tf_serving_warmup_requests)
before it answers. The request front (serving/front.py) listens on AIP_HTTP_PORT in its
place: it refuses a request over the export's pixel budget and forwards the rest. The
entrypoint lives as long as TF Serving does, passes it SIGTERM and SIGINT, and exits with its
status.

TF Serving's routes are fixed by its model name, so the routes the ContainerSpec gives are
checked, not configured: a Model whose routes TF Serving would not answer fails here, at
start, with the reason in the container's log, instead of failing every health check.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from serving import asked, batching, contract, pixels
from serving.fetch import FetchError, fetch
from serving.front import Front

SERVER = "tensorflow_model_server"


class ContractError(Exception):
    """A variable Vertex AI set (or a Docker run's -e) that this image cannot serve."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """The container's configuration, from its environment."""

    port: int
    model: str  # TF Serving's model name, which both routes carry
    storage_uri: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        port_text = environ.get(contract.PORT, str(contract.HTTP_PORT))
        # ASCII digits only: "²".isdigit() holds, but int("²") raises
        port = int(port_text) if port_text.isascii() and port_text.isdigit() else 0
        if not 0 < port < 65536 or port in (contract.GRPC_PORT, contract.REST_PORT):
            raise ContractError(f"{contract.PORT}={port_text[:20]!r}: need a port from 1 to "
                                f"65535 other than {contract.GRPC_PORT} (TF Serving's gRPC) "
                                f"and {contract.REST_PORT} (its REST API, behind the front)")
        predict = environ.get(contract.PREDICT_ROUTE, contract.predict_route())
        health = environ.get(contract.HEALTH_ROUTE, contract.health_route())
        model = contract.model_of_routes(predict, health)
        if model is None:
            raise ContractError(
                f"{contract.PREDICT_ROUTE}={predict[:100]!r} and {contract.HEALTH_ROUTE}="
                f"{health[:100]!r} are not TF Serving's routes of one model "
                f"({contract.predict_route()} and {contract.health_route()}): upload the "
                "model with the routes of serving/contract.py (`invoke model.upload` does)")
        storage_uri = environ.get(contract.STORAGE_URI, "")
        if not storage_uri:
            raise ContractError(f"{contract.STORAGE_URI} is not set: Vertex AI sets it from the "
                                "Model's artifactUri; with Docker, pass -e "
                                f"{contract.STORAGE_URI}=gs://BUCKET/runs/RUN/model (or a "
                                "mounted directory)")
        return cls(port, model, storage_uri)


def server_command(settings: Settings, base_path: Path, batching_file: Path,
                   rest_port: int = contract.REST_PORT) -> list[str]:
    """TF Serving for one model, whose versions are below `base_path`, loaded once (the copy
    never changes, so the directory is not polled), batching as `batching_file` says, its
    REST API on `rest_port` behind the front."""
    return [SERVER, f"--port={contract.GRPC_PORT}", f"--rest_api_port={rest_port}",
            f"--model_name={settings.model}", f"--model_base_path={base_path}",
            "--file_system_poll_wait_seconds=0", "--enable_batching=true",
            f"--batching_parameters_file={batching_file}", "--enable_model_warmup=true"]


def prepare(environ: Mapping[str, str], workdir: Path,
            rest_port: int = contract.REST_PORT) -> list[str]:
    """Everything but starting the server: the settings checked, the model copied to
    `workdir`/VERSION, the batching parameters written beside it; the command that serves
    it."""
    settings = Settings.from_environ(environ)
    version = workdir / contract.MODEL_VERSION
    count = fetch(settings.storage_uri, version, environ)
    if not (version / "saved_model.pb").is_file():
        raise FetchError(f"{settings.storage_uri} has no saved_model.pb ({count} files "
                         "copied): is it an export's model/ directory?")
    parameters = workdir / batching.FILE_NAME  # not a number: TF Serving loads no version
    parameters.write_text(batching.this_machine(environ).text())
    return server_command(settings, workdir, parameters, rest_port)


def start(environ: Mapping[str, str], workdir: Path, host: str = "",
          rest_port: int = contract.REST_PORT) -> tuple[list[str], Front]:
    """The model prepared and the front listening on `host` (every interface: Vertex AI
    sends from outside the container) at AIP_HTTP_PORT, with the export's pixel budget; TF
    Serving's command, not yet run."""
    settings = Settings.from_environ(environ)
    try:
        keeping = asked.Keeping.from_environ(environ)
    except asked.KeepingError as error:
        raise ContractError(str(error)) from None
    command = prepare(environ, workdir, rest_port)
    budget = pixels.budget_of(workdir / contract.MODEL_VERSION)
    keeper = asked.Keeper(keeping, environ) if keeping else None
    try:
        return command, Front((host, settings.port), rest_port, budget, keeper)
    except OSError as error:
        raise ContractError(f"{contract.PORT}={settings.port}: cannot listen there: "
                            f"{error.strerror or error}") from None


def run(command: list[str], front: Front) -> int:
    """TF Serving behind the front until it exits; its exit status (128 + N for signal N, as
    a shell reports it). SIGTERM and SIGINT are passed on to it: Vertex AI stops a container
    with SIGTERM, and TF Serving stops itself."""
    threading.Thread(target=front.serve_forever, daemon=True).start()
    keeping = front.keeper and front.keeper.keeping
    kept = (f"; keeping the images of {keeping.rate:g} of requests in "
            f"gs://{keeping.bucket}/{keeping.folder}/" if keeping else "")
    print(f"serving: front on port {front.port}, a request's pixel budget {front.budget:,}"
          f"{kept}; {' '.join(command)}", flush=True)
    try:
        server = subprocess.Popen(command)
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda signum, _: server.send_signal(signum))
        code = server.wait()
    finally:
        front.shutdown()
        front.server_close()
    return code if code >= 0 else 128 - code


def main() -> None:
    try:
        command, front = start(os.environ, Path(tempfile.mkdtemp(prefix="model-")))
    except (ContractError, FetchError) as error:
        sys.exit(f"serving: {error}")
    except OSError as error:  # no room for the working directory: still one line, no traceback
        sys.exit(f"serving: cannot prepare the model's local copy: {error}")
    try:
        sys.exit(run(command, front))
    except OSError as error:  # no tensorflow_model_server on PATH
        sys.exit(f"serving: cannot start {command[0]}: {error}")
