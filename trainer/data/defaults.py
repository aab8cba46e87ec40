"""The data tools' defaults and caps, in a module without imports, so the command line
(`trainer/args.py`) and the launchers name them without loading PIL, numpy or TensorFlow."""

NUM_SAMPLE_IMAGES = 360  # `data sample`: enough for the demo to reach its AP50 bar
MIN_SAMPLE_IMAGES = 3  # `data sample`: one a breed of the sample's (sample.SAMPLE_BREEDS)
NUM_SHARDS = 10  # `data convert`: shards per split
MAX_PIXELS = 40_000_000  # a 40 MP photo decodes to 120 MB of RGB
# TensorFlow's decode_jpeg takes RGB under 2**29 bytes; Pillow refuses more pixels too (twice
# its Image.MAX_IMAGE_PIXELS): no cap above this means anything.
MAX_DECODABLE_PIXELS = ((1 << 29) - 1) // 3
MAX_OBJECTS = 1000  # objects in one annotation
# bytes of one label file (VOC XML, a YOLO .txt, a LabelMe JSON outside its image and its
# indentation): a thousand polygons of 200 points (about 20 bytes a point) fit in 4 MiB
MAX_LABEL_BYTES = 4 << 20


def max_pixels_problem(max_pixels: int) -> str | None:
    """What is wrong with a --max-pixels (`data convert`, `predict`: one rule), or None."""
    if max_pixels < 1:
        return f"--max-pixels must be at least 1, got {max_pixels}"
    if max_pixels > MAX_DECODABLE_PIXELS:
        return (f"--max-pixels must be at most {MAX_DECODABLE_PIXELS:,}: TensorFlow's JPEG "
                "decoder refuses larger images in training, and Pillow in predict")
    return None


def num_shards_problem(num_shards: int) -> str | None:
    """What is wrong with a --num-shards, or None."""
    return None if num_shards >= 1 else f"--num-shards must be at least 1, got {num_shards}"
