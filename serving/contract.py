"""Vertex AI's custom-container contract for our serving image, as data: the port and the
routes the image serves, and the variables Vertex AI sets in it. `model.upload` builds the
Model's ContainerSpec from these values (launch/targets/vertex/registry.py); the entrypoint
(serving/entrypoint.py) configures TensorFlow Serving from the variables they become.

Source: https://cloud.google.com/vertex-ai/docs/predictions/custom-container-requirements
(read 2026-11-24). Vertex AI sends health checks (GET) and prediction requests (POST, the
body of the `predict` call: `{"instances": [...]}`) to the routes the ContainerSpec names,
on its first port (8080 if none), and tells the container the same values as AIP_HTTP_PORT,
AIP_HEALTH_ROUTE and AIP_PREDICT_ROUTE; AIP_STORAGE_URI is the gs:// directory holding a copy
of the Model's artifacts.
"""

from __future__ import annotations

import re

MODEL_NAME = "detector"  # TF Serving's name for the one model; it is part of both routes
HTTP_PORT = 8080  # the request front (serving/front.py): Vertex AI's health checks and predictions
GRPC_PORT = 8500  # TF Serving always opens a gRPC port too; nothing sends to it
REST_PORT = 8501  # TF Serving's REST API, behind the front: only the front sends to it
MODEL_VERSION = "1"  # TF Serving loads numbered version directories below its base path

PORT = "AIP_HTTP_PORT"
HEALTH_ROUTE = "AIP_HEALTH_ROUTE"
PREDICT_ROUTE = "AIP_PREDICT_ROUTE"
STORAGE_URI = "AIP_STORAGE_URI"

# TF Serving's REST API: `POST /v1/models/NAME:predict` and `GET /v1/models/NAME` (the
# model's status: 200 once a version is loaded, 404 before).
_PREDICT = re.compile(r"/v1/models/(?P<name>[A-Za-z0-9_.-]+):predict")
_HEALTH = re.compile(r"/v1/models/(?P<name>[A-Za-z0-9_.-]+)")


def predict_route(model: str = MODEL_NAME) -> str:
    return f"/v1/models/{model}:predict"


def health_route(model: str = MODEL_NAME) -> str:
    return f"/v1/models/{model}"


def model_of_routes(predict: str, health: str) -> str | None:
    """The model name both routes are TF Serving's routes of, or None if they are not."""
    served, status = _PREDICT.fullmatch(predict), _HEALTH.fullmatch(health)
    if served and status and served["name"] == status["name"]:
        return served["name"]
    return None
