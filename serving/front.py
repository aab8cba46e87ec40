"""The request front: a small HTTP server on the container's port (AIP_HTTP_PORT) in front of
TF Serving's REST API, which listens on an internal port (contract.REST_PORT).

TF Serving merges concurrent requests into one batch before the graph sees them, so a
per-request pixel budget cannot live in the graph. The front holds it (docs/guides/serving.md,
"A request's pixel budget"): every POST (TF Serving's predict, classify and regress, by any
of its paths) is read whole, with a Content-Length of at most MAX_BODY, its JSON parsed, and
the `{"b64": ...}` images' headers added up (serving/pixels.py); a request over the export's
`max_pixels` is refused with HTTP 400 and the reason, and never reaches TF Serving. Anything
else (the health check, other routes) and every request within the budget is forwarded as
it came, and TF Serving's answer is relayed as it left: status, headers, body. With a
Keeper (serving/asked.py, opt-in), each forwarded POST is offered to it: a sample of the images
endpoints are asked about, kept for labelling.
"""

from __future__ import annotations

import http.client
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from serving import pixels
from serving.asked import Keeper
from serving.replies import read_body, send_json

# Vertex AI takes an online prediction request of up to 1.5 MB ("the service itself will
# accept instances up to the payload limit size (currently, 1.5MB)",
# https://cloud.google.com/sdk/gcloud/reference/ai/endpoints/predict, read 2026-12-02) and
# forwards it as JSON; 2 MiB leaves room for JSON's punctuation around the same values.
MAX_BODY = 2 << 20
UPSTREAM_TIMEOUT = 600  # seconds TF Serving may take to answer before the front gives up
IDLE_TIMEOUT = 60  # seconds a client may stall mid-request (or idle on a kept-alive connection)
# Headers about one connection, not the request or answer (RFC 9110 section 7.6.1)
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer",
                         "transfer-encoding", "upgrade", "host", "content-length"})


class Front(ThreadingHTTPServer):
    """Listens on `address`, forwards to TF Serving on 127.0.0.1:`upstream`, refuses a POST
    whose images add up to more than `budget` pixels, offers the others to `keeper`."""

    daemon_threads = True
    # connections the kernel queues before the server accepts them (socketserver's default is
    # 5: a burst of clients past it is reset or waits out a SYN retry)
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], upstream: int, budget: int,
                 keeper: Keeper | None = None) -> None:
        self.upstream, self.budget, self.keeper = upstream, budget, keeper
        super().__init__(address, _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]


class _Handler(BaseHTTPRequestHandler):
    server: Front
    protocol_version = "HTTP/1.1"  # keep-alive, as TF Serving's own server
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed ACK
    timeout = IDLE_TIMEOUT

    def _handle(self) -> None:
        body = read_body(self, MAX_BODY)
        if body is None:
            return
        if self.command == "POST":
            try:
                images = pixels.body_images(body)
            except ValueError as error:
                self._refuse(400, f"the body is not JSON: {str(error)[:200]}")
                return
            if (reason := pixels.refusal(pixels.pixels_of(images), self.server.budget)):
                self._refuse(400, reason)
                return
            if self.server.keeper:
                self.server.keeper.offer(images)
            del images  # not held while TF Serving answers (up to UPSTREAM_TIMEOUT)
        self._forward(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    def _forward(self, body: bytes) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        if body or self.command == "POST":
            headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream,
                                              timeout=UPSTREAM_TIMEOUT)
        try:
            upstream.request(self.command, self.path, body or None, headers)
            answer = upstream.getresponse()
            data = answer.read()
        except (OSError, http.client.HTTPException) as error:
            self._refuse(503, f"TF Serving did not answer: {error}")
            return
        finally:
            upstream.close()
        self.send_response(answer.status, answer.reason)
        for key, value in answer.getheaders():
            if key.lower() not in _HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self, status: int, error: str) -> None:
        """An error as TF Serving's REST API words one: `{"error": ...}`."""
        send_json(self, status, {"error": error})

    def log_message(self, *args) -> None:
        """Quiet: Vertex AI's health checks would fill the container's log."""
