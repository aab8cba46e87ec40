"""OpenVINO export: the ONNX file (trainer/export/onnx.py) through OpenVINO's converter into
its own format (`model.xml`, the graph, beside `model.bin`, the weights), run here by
OpenVINO Runtime on the CPU. From the ONNX file, not the SavedModel: OpenVINO's TensorFlow
reader has no rule for CombinedNonMaxSuppression, its ONNX reader has one for the
NonMaxSuppression tf2onnx writes (docs/guides/export-formats.md)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from trainer.export import pixels

WEIGHTS_SUFFIX = ".bin"  # beside the .xml, same stem


def quiet() -> None:
    """No usage report to Intel from a training job or a test (openvino-telemetry asks
    nothing in a non-interactive run, and may send)."""
    os.environ.setdefault("OPENVINO_TELEMETRY", "0")


def convert(onnx_file: Path, output: Path) -> None:
    """`onnx_file` as OpenVINO's model at `output` (.xml, the .bin beside it), weights kept
    in float32: the self-check compares them with the SavedModel's."""
    quiet()
    import openvino  # start-up time

    model = openvino.convert_model(str(onnx_file))
    openvino.save_model(model, str(output), compress_to_fp16=False)


class OpenvinoDetector:
    """OpenVINO's model in OpenVINO Runtime on the CPU: an RGB image in, letterboxed here,
    the SavedModel's detections (boxes normalised to the image) out. In float32 unless told
    `precision="bf16"`: OpenVINO's CPU default where the CPU has bfloat16 (AVX-512 BF16, AMX),
    which moved scores by about 0.002 and boxes by 0.002 of the image against float32 on the
    demo's model (docs/guides/export-formats.md)."""

    def __init__(self, path: str, threads: int | None = None, precision: str = "f32") -> None:
        quiet()
        import openvino  # start-up time

        core = openvino.Core()
        config = {"INFERENCE_PRECISION_HINT": precision,
                  **({"INFERENCE_NUM_THREADS": threads} if threads else {})}
        self.compiled = core.compile_model(core.read_model(path), "CPU", config)
        (given,) = self.compiled.inputs
        self.size = int(given.get_partial_shape()[1].get_length())
        self.dtype = given.get_element_type().to_dtype().name
        self.request = self.compiled.create_infer_request()

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        square, filled = pixels.letterbox(image, self.size, self.dtype)
        found = self.request.infer([square])
        return pixels.answer({name: found[port] for port in self.compiled.outputs
                              for name in port.get_names() if name in pixels.OUTPUTS}, filled)
