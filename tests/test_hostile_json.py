"""Hostile JSON (issue 27): 64-bit ids keep their identity, out-of-range numbers are named
problems, deep or huge documents are one clear error, for COCO and for the launcher's
metrics alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.common import jsonnum
from trainer.data.coco import CocoError, parse_coco, read_json

HUGE = 10 ** 400  # a valid JSON integer no float can hold


def coco(images: list, annotations: list, categories: list | None = None) -> dict:
    return {"images": images, "annotations": annotations,
            "categories": categories or [{"id": 1, "name": "cat"}]}


def image(image_id, name: str, width=100, height=80) -> dict:
    return {"id": image_id, "file_name": name, "width": width, "height": height}


def box(image_id, bbox=(1, 2, 10, 20), category_id=1) -> dict:
    return {"image_id": image_id, "category_id": category_id, "bbox": list(bbox)}


def test_64_bit_image_ids_stay_distinct_and_keep_their_boxes():
    """Case 1: 2^53 and 2^53 + 1 are one float; as integers they are two images."""
    ids = [2 ** 53 + i for i in range(11)]
    text = json.dumps(coco([image(i, f"{i}.jpg") for i in ids],
                           [box(i, (i - 2 ** 53 + 1, 2, 10, 20)) for i in ids]))
    parsed = parse_coco(json.loads(text))
    assert not parsed.problems
    assert [i.image_id for i in parsed.images] == ids
    for found in parsed.images:
        (obj,) = found.annotation.objects
        assert obj.xmin == found.image_id - 2 ** 53 + 1  # its own box, not a neighbour's


@pytest.mark.parametrize("field", ["bbox", "width", "category_id", "image_id", "category"])
def test_a_400_digit_integer_is_a_named_problem(field):
    """Case 4: never an OverflowError; the entry it spoils is named and skipped."""
    data = coco([image(1, "a.jpg"), image(2, "b.jpg")], [box(1), box(2)])
    if field == "bbox":
        data["annotations"][1]["bbox"][2] = HUGE
    elif field == "width":
        data["images"][1]["width"] = HUGE
    elif field == "category_id":
        data["annotations"][1]["category_id"] = HUGE
    elif field == "image_id":
        data["images"][1]["id"] = HUGE
    else:
        data["categories"].append({"id": HUGE, "name": "dog"})
    parsed = parse_coco(json.loads(json.dumps(data)))
    reasons = parsed.problems.reasons() | {
        r[0] for i in parsed.images for r in i.annotation.repairs}
    expected = {"bbox": {"nonfinite_box"}, "width": {"invalid_size"},
                "category_id": {"unknown_category"},
                "image_id": {"invalid_image_id", "unknown_image_id"},
                "category": {"invalid_category"}}[field]
    assert reasons == expected
    if field == "width":  # an unusable size is read from the image instead
        assert parsed.images[1].annotation.width is None


def test_deep_json_is_one_clear_error(tmp_path):
    """Case 5: 100,000 nested lists are a named refusal, not a RecursionError."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CocoError, match=r"deep\.json is nested too deeply to read$"):
        read_json(path)


def test_huge_json_is_one_clear_error():
    with pytest.raises(jsonnum.JsonError, match=r"^x\.json is more than 10 bytes$"):
        jsonnum.loads(b"[1, 2, 3, 4]"[:11], 10, "x.json")


def test_numbers_are_read_one_way():
    assert jsonnum.whole(2 ** 53 + 1) == 2 ** 53 + 1
    assert jsonnum.whole(3.0) == 3 and jsonnum.whole(3.5) is None
    assert jsonnum.whole(True) is None and jsonnum.number(False) is None
    assert jsonnum.whole(HUGE) is None and jsonnum.number(HUGE) is None
    assert jsonnum.number(float("nan")) is None and jsonnum.number(float("inf")) is None
    assert jsonnum.number(1e308) is None and jsonnum.number(0.5) == 0.5
    assert jsonnum.number(Path) is None


DEEP = "[" * 100_000 + "]" * 100_000


def test_a_local_json_file_is_read_no_further_than_its_cap(tmp_path):
    """jsonnum.read_file: a file over the cap is refused by its size, a missing one named."""
    path = tmp_path / "big.json"
    path.write_text("[" + "1," * 100 + "1]")
    with pytest.raises(jsonnum.JsonError, match=r"big\.json is 203 bytes, more than 100$"):
        jsonnum.read_file(path, 100)
    assert jsonnum.read_file(path, 203) == [1] * 101
    with pytest.raises(jsonnum.JsonError, match=r"none\.json: No such file"):
        jsonnum.read_file(tmp_path / "none.json", 100)
    (tmp_path / "deep.json").write_text(DEEP)
    with pytest.raises(jsonnum.JsonError, match="nested too deeply"):
        jsonnum.read_file(tmp_path / "deep.json", 1 << 20)


def test_a_run_json_in_a_model_directory_is_read_bounded(tmp_path):
    """The trainer's own reader (export, eval, predict rebuild the model from run.json): a
    JsonError naming the file, which `python -m trainer` prints in one line (exit 2)."""
    from trainer.common.errors import USAGE_ERRORS
    from trainer.model.model_dir import read_run_info

    for text, message in ((DEEP, "nested too deeply"), ('{"experiment": 7}', "names no "
                                                        "experiment"), ("[]", "names no")):
        (tmp_path / "run.json").write_text(text)
        with pytest.raises(jsonnum.JsonError, match=message) as caught:
            read_run_info(str(tmp_path))
        assert isinstance(caught.value, USAGE_ERRORS)
    (tmp_path / "run.json").write_text('{"experiment": "pets_retinanet_mobilenet"}')
    assert read_run_info(str(tmp_path)) == {"experiment": "pets_retinanet_mobilenet"}


def test_pricing_ignores_summaries_that_are_deep_or_hold_numbers_no_float_can(tmp_path):
    """Before every launch the newest runs' training summaries are read for their speed: a
    deep one, or one with a 400-digit seconds_per_step, is no measurement, not a crash."""
    from launch.stores.pricing.estimate import Speed, read_summaries, speed_of
    from tests.fakes.gcs import FakeGcs

    def summary(seconds) -> str:
        return json.dumps({"experiment": "e", "hardware": "h", "seconds_per_step": seconds})

    with FakeGcs() as server:
        client = server.client()
        bucket = client.create_bucket("pets-data")
        deep = "[" * 30_000 + "]" * 30_000  # under the 64 KB read: deep, not cut short
        for run, text in (("r1", summary(0.5)), ("r2", deep), ("r3", summary(HUGE)),
                          ("r4", "not json"), ("r5", summary(1.5))):
            bucket.blob(f"runs/{run}/checkpoints/training_summary.json").upload_from_string(
                text)
        found = read_summaries(client, "pets-data")
    assert len(found) == 3  # r1, r3 and r5 are JSON; r2 is too deep, r4 is not JSON
    assert speed_of(found, "e", "h") == Speed(1.0, 2)


def test_batch_results_that_are_deep_or_out_of_range_are_not_trusted():
    """Lines of a batch job's output: a deep line is no row; a prediction with a number no
    float can hold is that image's error, never an OverflowError."""
    from launch.targets.vertex import answers

    good = {"num_detections": 1, "detection_boxes": [[0.1, 0.1, 0.5, 0.5]],
            "detection_classes": [1], "detection_scores": [0.9]}
    lines = [json.dumps({"instance": "gs://b/a.jpg", "prediction": good}), DEEP,
             json.dumps({"instance": "gs://b/huge.jpg",
                         "prediction": {**good, "detection_boxes": [[HUGE, 0, 0, 0]]}}),
             json.dumps({"instance": "gs://b/count.jpg",
                         "prediction": {**good, "num_detections": HUGE}})]
    found, errors = answers.batch_results(lines)
    assert set(found) == {"gs://b/a.jpg"}
    assert set(errors) == {"gs://b/huge.jpg", "gs://b/count.jpg"}


def test_a_sweep_directory_whose_sweep_json_is_deep_is_another_sweep(tmp_path):
    from launch.errors import InputError
    from launch.targets.local import tuning as local

    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / local.SWEEP_FILE).write_text(DEEP)
    with pytest.raises(InputError, match="holds a different sweep"):
        local._claim(tmp_path / "sweep", {"sweep": {}})
