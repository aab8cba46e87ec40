"""The serving image's entrypoint: reads what Vertex AI tells the container (the AIP_*
variables of serving/contract.py), copies the model below a numbered version directory, and
becomes TensorFlow Serving with its REST API on AIP_HTTP_PORT, batching concurrent requests
with parameters for this machine (serving/batching.py) and warming the model up with the
requests every export carries (assets.extra/tf_serving_warmup_requests) before it answers.

TF Serving's routes are fixed by its model name, so the routes the ContainerSpec gives are
checked, not configured: a Model whose routes TF Serving would not answer fails here, at
start, with the reason in the container's log, instead of failing every health check.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from serving import batching, contract
from serving.fetch import FetchError, fetch

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
        if not 0 < port < 65536 or port == contract.GRPC_PORT:
            raise ContractError(f"{contract.PORT}={port_text[:20]!r}: need a port from 1 to "
                                f"65535 other than {contract.GRPC_PORT} (TF Serving's gRPC)")
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


def server_command(settings: Settings, base_path: Path, batching_file: Path) -> list[str]:
    """TF Serving for one model, whose versions are below `base_path`, loaded once (the copy
    never changes, so the directory is not polled), batching as `batching_file` says."""
    return [SERVER, f"--port={contract.GRPC_PORT}", f"--rest_api_port={settings.port}",
            f"--model_name={settings.model}", f"--model_base_path={base_path}",
            "--file_system_poll_wait_seconds=0", "--enable_batching=true",
            f"--batching_parameters_file={batching_file}", "--enable_model_warmup=true"]


def prepare(environ: Mapping[str, str], workdir: Path) -> list[str]:
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
    return server_command(settings, workdir, parameters)


def main() -> None:
    try:
        command = prepare(os.environ, Path(tempfile.mkdtemp(prefix="model-")))
    except (ContractError, FetchError) as error:
        sys.exit(f"serving: {error}")
    except OSError as error:  # no room for the working directory: still one line, no traceback
        sys.exit(f"serving: cannot prepare the model's local copy: {error}")
    print(f"serving: {' '.join(command)}", flush=True)
    os.execvp(command[0], command)  # TF Serving takes over the process and its signals
