"""A gRPC server on 127.0.0.1 serving hand-written handlers for one Google API service."""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures

import grpc


def unary(fn: Callable, request_type, response_serialize: Callable):
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=request_type.deserialize,
        response_serializer=response_serialize)


class GrpcFake:
    """Subclasses set SERVICE and return their method handlers from `handlers()`."""

    SERVICE = ""

    def __init__(self) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(self.SERVICE, self.handlers()),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def handlers(self) -> dict:
        raise NotImplementedError

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=None).wait(timeout=5)

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(f"127.0.0.1:{self.port}")
