"""A JSON-answering HTTP server on 127.0.0.1 for tests of a client: every GET and POST gets
200 and `answer(request)` as JSON (bytes as they are), so a test says only what the server
answers."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclasses.dataclass(frozen=True)
class Request:
    """What a client sent."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@contextlib.contextmanager
def json_server(answer: Callable[[Request], object]) -> Iterator[str]:
    """The server's base URL (`http://127.0.0.1:PORT`) while the block runs."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            found = answer(Request(self.command, self.path, dict(self.headers),
                                   self.rfile.read(length)))
            data = found if isinstance(found, bytes) else json.dumps(found).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
