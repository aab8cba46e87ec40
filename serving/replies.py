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


def read_body(handler: BaseHTTPRequestHandler, limit: int) -> bytes | None:
    """The request's body, or None once a refusal is sent: a chunked body, a POST without a
    Content-Length, one that is not a whole number of bytes ("-1", "1e9"), or more than
    `limit` bytes. A refused body is not read, so the connection closes after the answer."""
    text = handler.headers.get("Content-Length")
    if handler.headers.get("Transfer-Encoding") or (text is None and handler.command == "POST"):
        status, error = 411, "send the body with a Content-Length, not without one"
    elif text is None:
        return b""
    elif not (text.isascii() and text.isdigit()):  # "-1", "1e9", "²"
        status, error = 400, f"Content-Length {text[:20]!r} is not a number of bytes"
    elif int(text) > limit:
        status, error = 413, f"a body of {int(text):,} bytes is over the limit of {limit:,}"
    else:
        return handler.rfile.read(int(text))
    handler.close_connection = True
    send_json(handler, status, {"error": error})
    return None
