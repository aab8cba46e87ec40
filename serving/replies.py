"""A JSON answer as TF Serving's REST API sends one, for the servers that stand where it does
(the serving image's request front, the local stand-in)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


def send_json(handler: BaseHTTPRequestHandler, status: int, body: object) -> None:
    """`body` as JSON with `status`, saying `Connection: close` when the handler will close
    (a body it did not read leaves the connection unusable)."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    if handler.close_connection:
        handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(data)
