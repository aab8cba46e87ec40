"""`tensorflow_model_server` on 127.0.0.1: started from the command line the serving image's
entrypoint builds (the same flags, refused if unknown or inconsistent, and the batching
parameters file read with TF Serving's own BatchingParameters message), it loads the newest
numbered version below --model_base_path, as TF Serving does, and serves it through the local
stand-in (launch/features/serving/standin.py): TF Serving's REST API, batching, warm-up.

A container's port is not the host's: `--rest_api_port` is the port inside the container,
and `host_port` maps it to the one this server listens on, as `docker run -p` would.
"""

from __future__ import annotations

import re
from pathlib import Path

from launch.features.serving.standin import ModelServer
from serving.batching import Batching

FLAGS = {"port", "rest_api_port", "model_name", "model_base_path",
         "file_system_poll_wait_seconds", "enable_batching", "batching_parameters_file",
         "enable_model_warmup"}
BOOLEAN = {"enable_batching", "enable_model_warmup"}


class ServerFlagError(ValueError):
    """A command line the real server would refuse."""


def parse_flags(command: list[str]) -> dict[str, str]:
    if not command or command[0] != "tensorflow_model_server":
        raise ServerFlagError(f"not TF Serving's command: {command[:1]}")
    flags = {}
    for arg in command[1:]:
        match = re.fullmatch(r"--([a-z_]+)=(.*)", arg)
        if not match or match[1] not in FLAGS:
            raise ServerFlagError(f"unknown flag {arg!r}")
        if match[1] in BOOLEAN and match[2] not in ("true", "false"):
            raise ServerFlagError(f"{arg}: a boolean flag takes true or false")
        flags[match[1]] = match[2]
    if flags.get("port") == flags.get("rest_api_port"):
        raise ServerFlagError("the gRPC and REST ports are the same")
    if flags.get("batching_parameters_file") and flags.get("enable_batching") != "true":
        # server.cc at 2.20.0
        raise ServerFlagError("server_options.batching_parameters_file is set without setting "
                              "server_options.enable_batching to true.")
    return flags


def batching_parameters_message():
    """TF Serving's BatchingParameters (tensorflow_serving/servables/tensorflow/
    session_bundle_config.proto at tag 2.20.0, transcribed: the pip package leaves it out),
    built with protobuf's descriptors, so a file our entrypoint writes is read as the server
    reads it, field numbers and wrapper types included."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    proto = descriptor_pb2.FileDescriptorProto(
        name="session_bundle_config.proto", package="tensorflow.serving",
        dependency=["google/protobuf/wrappers.proto"], syntax="proto3")
    message = proto.message_type.add(name="BatchingParameters")
    field = descriptor_pb2.FieldDescriptorProto
    for name, number, wrapper in (
            ("max_batch_size", 1, "Int64Value"), ("batch_timeout_micros", 2, "Int64Value"),
            ("max_enqueued_batches", 3, "Int64Value"), ("num_batch_threads", 4, "Int64Value"),
            ("thread_pool_name", 5, "StringValue"),
            ("enable_large_batch_splitting", 8, "BoolValue"),
            ("max_execution_batch_size", 9, "Int64Value")):
        message.field.add(name=name, number=number, type=field.TYPE_MESSAGE,
                          label=field.LABEL_OPTIONAL, type_name=f".google.protobuf.{wrapper}")
    message.field.add(name="allowed_batch_sizes", number=6, type=field.TYPE_INT64,
                      label=field.LABEL_REPEATED)
    message.field.add(name="pad_variable_length_inputs", number=7, type=field.TYPE_BOOL,
                      label=field.LABEL_OPTIONAL)
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


def read_batching(path: str) -> Batching:
    """The parameters file as TF Serving parses it (text format; unknown fields refused)."""
    from google.protobuf import text_format

    parsed = text_format.Parse(Path(path).read_text(), batching_parameters_message()())
    values = {name: getattr(parsed, name).value for name in (
        "max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads")}
    if values["num_batch_threads"] < 1:
        raise ServerFlagError("num_batch_threads must be positive")
    return Batching(**values)


class FakeModelServer(ModelServer):
    def __init__(self, command: list[str]) -> None:
        flags = parse_flags(command)
        self.container_port = int(flags["rest_api_port"])
        versions = [p for p in Path(flags["model_base_path"]).iterdir() if p.name.isdigit()]
        if not versions:
            raise ServerFlagError(f"no numbered version below {flags['model_base_path']}")
        self.version = max(versions, key=lambda p: int(p.name))
        batching = read_batching(flags["batching_parameters_file"]) \
            if flags.get("enable_batching") == "true" else None
        super().__init__(self.version, flags["model_name"], batching)
        self.host_port = {self.container_port: self.port}
