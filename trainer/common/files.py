"""The names of the files and directories the trainer writes and the launcher reads (or
writes beside the trainer's), declared once so that neither side can rename one alone.

Imports nothing heavy: the launcher's quick paths (`invoke runs.list`, the data checks)
import it without loading TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# The data bucket's two top-level prefixes; the infra's IAM conditions name them too.
RECORDS_PREFIX = "records"  # gs://BUCKET/records/: the converted dataset
RUNS_PREFIX = "runs"  # gs://BUCKET/runs/RUN_ID/: everything a run's jobs write
# gs://BUCKET/datasets/NAME/: named datasets, each a manifest naming one version's objects
# (trainer/data/datasets.py)
DATASETS_PREFIX = "datasets"
RAW_PREFIX = "raw"  # gs://BUCKET/raw/...: raw data, which conversion jobs may read
PIPELINES_PREFIX = "pipelines"  # gs://BUCKET/pipelines/: the pipeline root and its state
# gs://BUCKET/asked/MODEL/DAY/: images endpoints were asked about, kept for labelling
# (serving/asked.py, which imports nothing of ours, names it too)
ASKED_PREFIX = "asked"
PIPELINE_RUN_PREFIX = "ct-"  # the runs the pipeline trains: gs://BUCKET/runs/ct-VERSION/

# A converted dataset: what `data convert` writes and the trainer's --data-dir reads. Train
# and val always; a held-out test split when the data has one (its own list, or --split with
# two fractions): nothing trains on it or picks a checkpoint by it, `invoke eval --split test`
# measures the chosen checkpoint on it.
TRAIN, VAL, TEST = "train", "val", "test"
SPLITS = (TRAIN, VAL)  # every converted dataset has these
EVERY_SPLIT = (TRAIN, VAL, TEST)
DATA_LABEL_MAP_FILE = "label_map.pbtxt"
# the name conversions gave it before 2026-11-28, after the Pets quick start's file: read
# still, never written (a dataset of any classes is no pet label map)
LEGACY_DATA_LABEL_MAP_FILE = "pet_label_map.pbtxt"
DATA_LABEL_MAP_FILES = (DATA_LABEL_MAP_FILE, LEGACY_DATA_LABEL_MAP_FILE)
CONVERSION_REPORT_FILE = "conversion_report.json"
DATA_REPORT_FILE = "data_report.json"  # a named dataset's data checks, beside its records
DATASET_MANIFEST_FILE = "manifest.json"  # written last: a dataset exists once it does
SHARD = re.compile(r"(?P<index>\d{5})-of-(?P<total>\d{5})")  # a shard name after its glob
SAMPLE_COCO_FILE = "annotations/instances.json"  # `data sample --format coco`, beside Pets'


def data_label_map(data_dir: str, exists: Callable[[str], bool]) -> str:
    """A converted dataset's label map: its file by today's name, else by the earlier one
    (`exists` says which is there), else today's (for the error that names it)."""
    for name in DATA_LABEL_MAP_FILES:
        if exists(path := f"{data_dir}/{name}"):
            return path
    return f"{data_dir}/{DATA_LABEL_MAP_FILE}"


def shard_glob(split: str) -> str:
    return f"{split}.record-*"


def shard_name(split: str, index: int, num_shards: int) -> str:
    return f"{split}.record-{index:05d}-of-{num_shards:05d}"


# A model directory (--model-dir): beside the checkpoints, what rebuilds the run's model.
RUN_FILE = "run.json"
PARAMS_FILE = "params.yaml"  # written by Model Garden's train_utils.serialize_config
LABEL_MAP_FILE = "label_map.pbtxt"  # copied beside an export too
TRAINING_SUMMARY_FILE = "training_summary.json"  # how fast it trained, for cost estimates
JOB_FILE = "job.yaml"  # the run's resolved job file, written by the launcher beside its checkpoints
# No JSON file of a model directory (run.json, eval/ckpt-N.json, export.json, the training
# summary) is read past this: they are KB, an evaluation with its worst images under 1 MB.
MAX_RUN_JSON_BYTES = 16 << 20
METRICS_DIR = "eval"  # one evaluation a checkpoint, with its worst images
# evaluations on the test split, apart: best/ and early stopping read only METRICS_DIR
TEST_METRICS_DIR = "eval-test"
METRICS_FILE = re.compile(r"ckpt-(\d+)\.json")  # in METRICS_DIR; the group is the step
WORST_IMAGE_FILE = re.compile(r"ckpt-\d+/worst-\d+\.jpg")  # in METRICS_DIR


# The run's best checkpoint (trainer/model/best/): a copy of its files beside BEST_FILE, apart from
# the checkpoint manager's rotation; and the early-stopping verdict the trainer obeys.
BEST_DIR = "best"
BEST_FILE = "best.json"  # in BEST_DIR: which checkpoint, its metric and value
EARLY_STOP_FILE = "early_stop.json"
CHECKPOINT_NAME = re.compile(r"ckpt-(\d+)")  # a checkpoint's name; the group is its step


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step}"


def metrics_file(step: int) -> str:
    """The evaluation of the checkpoint at `step`, in METRICS_DIR."""
    return f"ckpt-{step}.json"


def worst_image_file(step: int, rank: int) -> str:
    """The checkpoint's `rank`-th worst validation image, in METRICS_DIR."""
    return f"ckpt-{step}/worst-{rank:02d}.jpg"


# An export directory, and prediction's output directory.
EXPORT_INFO_FILE = "export.json"  # how it was exported: read without loading TensorFlow
TFLITE_FILE = "model.tflite"
# Each single-file format an export directory may hold beside the SavedModel: its file, which
# is also its export.json section's name (export --format; OpenVINO's .bin sits beside its .xml)
MODEL_FILES = {"tflite": TFLITE_FILE, "onnx": "model.onnx", "openvino": "model.xml"}


def model_format(model: str) -> str | None:
    """The format a model path's ending names (tflite, onnx, openvino), None for a
    SavedModel directory."""
    return next((name for name, file in MODEL_FILES.items()
                 if model.endswith(file[file.index("."):])), None)
DETECTIONS_FILE = "detections.json"
# predict --results: each form other tools read, and its file (yolo: a directory) beside it
RESULT_FILES = {"coco": "coco_results.json", "yolo": "yolo", "supervision": "supervision.json",
                "labelstudio": "label_studio.json"}

# Where a tuning trial reports its metric, below a directory (cloudml-hypertune's is /tmp).
HYPERTUNE_METRIC_FILE = "hypertune/output.metrics"
