"""The Vertex AI TensorBoard that training jobs stream their summaries to."""

from __future__ import annotations

from collections.abc import Mapping

from cdktn_provider_google.vertex_ai_tensorboard import VertexAiTensorboard
from constructs import Construct


class TrainingTensorboard(Construct):
    def __init__(self, scope: Construct, id_: str, *, project: str, region: str,
                 display_name: str, labels: Mapping[str, str]) -> None:
        super().__init__(scope, id_)
        self.tensorboard = VertexAiTensorboard(
            self, "tensorboard", project=project, region=region, display_name=display_name,
            description="Summaries of the trainer's Vertex AI custom jobs", labels=dict(labels))
