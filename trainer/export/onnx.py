"""ONNX export: the fixed-size graph (trainer/export/pixels.py) through tf2onnx, with the
SavedModel's own non-maximum suppression inside (TensorFlow's CombinedNonMaxSuppression
becomes ONNX NonMaxSuppression), run here by ONNX Runtime on the CPU. The same file feeds
OpenVINO's converter (trainer/export/openvino.py) and, on a GPU machine, TensorRT's
(docs/guides/export-formats.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.common.errors import SettingsError
from trainer.export import pixels

OPSET = 17  # ONNX Runtime, OpenVINO and TensorRT 8.6+ all read it


def convert(saved_model: str, output: Path, size: int) -> None:
    """The fixed-size SavedModel's default signature as an ONNX file at `output`; an op
    tf2onnx has no rule for is refused by name (it would leave it in the file as TensorFlow's,
    which no ONNX runtime runs)."""
    import tensorflow as tf
    import tf2onnx  # start-up time

    loaded = tf.saved_model.load(saved_model)  # held: the signature's variables are its
    spec = tf.TensorSpec([1, size, size, 3], pixels.FLOAT, name=pixels.INPUT)
    function = tf.function(lambda images: loaded.signatures["serving_default"](images=images))
    proto, _ = tf2onnx.convert.from_function(function, input_signature=[spec], opset=OPSET)
    foreign = sorted({node.op_type for node in proto.graph.node
                      if node.domain not in ("", "ai.onnx")})
    if foreign:
        raise SettingsError(f"--format onnx: tf2onnx {tf2onnx.__version__} has no rule for "
                            f"{', '.join(foreign)} at opset {OPSET}; export a SavedModel")
    output.write_bytes(proto.SerializeToString())


class OnnxDetector:
    """A `.onnx` detector in ONNX Runtime on the CPU: an RGB image in, letterboxed here, the
    SavedModel's detections (boxes normalised to the image) out."""

    def __init__(self, path: str, threads: int | None = None) -> None:
        import onnxruntime  # start-up time

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or 0  # 0: ONNX Runtime's own choice
        options.log_severity_level = 3  # errors only
        self.session = onnxruntime.InferenceSession(path, options,
                                                    providers=["CPUExecutionProvider"])
        (given,) = self.session.get_inputs()
        self.input, self.size = given.name, int(given.shape[1])
        self.dtype = "float32" if given.type == "tensor(float)" else "uint8"
        self.names = [output.name for output in self.session.get_outputs()]

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        square, filled = pixels.letterbox(image, self.size, self.dtype)
        found = self.session.run(None, {self.input: square})
        return pixels.answer(dict(zip(self.names, found, strict=True)), filled)
