"""Model Garden's code traced as written (trainer/model/tracing.py): the parsers give the same
tensors as through Autograph, and Autograph stays wherever a configuration branches on tensors
or a model's paths are not all traced by the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.model import tracing

SAME_EVERY_TIME = ("--params_override=task.train_data.shuffle_buffer_size=1,"
                   "task.train_data.seed=7,task.train_data.parser.aug_rand_hflip=false,"
                   "task.train_data.parser.aug_scale_min=1.0,"
                   "task.train_data.parser.aug_scale_max=1.0")


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    from trainer.data.convert import convert_directory
    from trainer.data.sample import write_sample

    root = tmp_path_factory.mktemp("tracing")
    out = root / "records"
    convert_directory(write_sample(root / "pets", num_images=24), out, masks=True,
                      num_shards=1, progress=False)
    return out


def params_for(experiment: str, records: Path, tmp_path: Path, *flags: str):
    from trainer.training import settings
    from trainer.training.params import build_params

    return build_params(settings.parse([f"--experiment={experiment}", f"--model_dir={tmp_path}",
                                        f"--data_dir={records}", *flags], {}), "float32")


@pytest.mark.parametrize("experiment", ["pets_retinanet_mobilenet", "pets_maskrcnn_mobilenet"])
def test_parsers_traced_as_written_give_the_tensors_autograph_gives(experiment, records,
                                                                   tmp_path):
    import tensorflow as tf
    from official.core import task_factory
    from official.vision.dataloaders import maskrcnn_input, retinanet_input
    from tensorflow.python.autograph.impl import conversion

    params = params_for(experiment, records, tmp_path, SAME_EVERY_TIME)
    task = task_factory.get_task(params.task)
    parser = (maskrcnn_input if "maskrcnn" in experiment else retinanet_input).Parser

    def first_batches() -> list:
        batches = [next(iter(task.build_inputs(data)))
                   for data in (params.task.train_data, params.task.validation_data)]
        for _, labels in batches:  # Mask R-CNN samples the RPN's anchors at random
            for sampled in ("rpn_score_targets", "rpn_box_targets"):
                labels.pop(sampled, None)
        return tf.nest.map_structure(np.asarray, batches)

    with tracing.as_written(params) as modules:
        assert modules == tracing.PARSER_MODULES
        assert conversion.is_allowlisted(parser._parse_train_data)
        plain = first_batches()
    assert not conversion.is_allowlisted(parser._parse_train_data)  # the rule is gone after
    converted = first_batches()
    tf.nest.assert_same_structure(plain, converted)
    for ours, autograph in zip(tf.nest.flatten(plain), tf.nest.flatten(converted), strict=True):
        np.testing.assert_array_equal(ours, autograph)


@pytest.mark.parametrize("override, field", [
    ("task.train_data.parser.aug_type.type=randaug", "task.train_data.parser.aug_type"),
    ("task.validation_data.parser.aug_rand_jpeg.min_quality=30",
     "task.validation_data.parser.aug_rand_jpeg")])
def test_a_parser_that_branches_on_tensors_keeps_autograph(override, field, records, tmp_path):
    from tensorflow.python.autograph.core import config

    params = params_for("pets_retinanet_mobilenet", records, tmp_path,
                        f"--params_override={override}")
    assert tracing.needs_autograph(params) == f"{field} is set"
    before = config.CONVERSION_RULES
    with tracing.as_written(params) as modules:
        assert modules == () and before == config.CONVERSION_RULES


def test_the_models_of_the_cpu_experiments_only_are_traced_as_written():
    """Their every path is traced by the tests (trained, evaluated, exported, served); the
    GPU and TPU experiments' ResNet paths are not, so those keep Autograph."""
    from official.vision.modeling import retinanet_model
    from tensorflow.python.autograph.impl import conversion

    for experiment in ("pets_retinanet_mobilenet", "pets_maskrcnn_mobilenet"):
        assert tracing.written_modules(experiment=experiment) == tracing.MODEL_MODULES
    for experiment in ("pets_retinanet_resnetfpn", "pets_fasterrcnn_resnetfpn",
                       "pets_maskrcnn_resnetfpn", "retinanet_resnetfpn_coco", None):
        assert tracing.written_modules(experiment=experiment) == ()
    with tracing.as_written(experiment="pets_retinanet_mobilenet"):
        assert conversion.is_allowlisted(retinanet_model.RetinaNetModel.call)
    assert not conversion.is_allowlisted(retinanet_model.RetinaNetModel.call)
