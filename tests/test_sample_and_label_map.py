"""The synthetic sample follows the Oxford-IIIT Pets layout; label maps round-trip."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from trainer.data import pets
from trainer.data.label_map import (
    PETS_CLASSES,
    LabelMapError,
    format_label_map,
    parse_label_map,
    pets_label_map,
    species_of,
)
from trainer.data.sample import SAMPLE_BREEDS, write_sample
from trainer.data.voc import parse_voc


def test_sample_has_the_pets_layout(tmp_path):
    root = write_sample(tmp_path, num_images=12)
    trainval = pets.read_example_list(root / pets.TRAINVAL_LIST)
    test = pets.read_example_list(root / pets.TEST_LIST)
    everything = pets.read_example_list(root / pets.ALL_LIST)
    assert sorted(trainval + test) == sorted(everything) and len(everything) == 12
    assert not set(trainval) & set(test)
    for name in everything:
        breed = pets.breed_of(name)
        assert breed in SAMPLE_BREEDS
        assert breed[0].isupper() == (species_of(breed) == "cat")
        with Image.open(pets.image_path(root, name)) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            size = image.size
        annotation = parse_voc(pets.xml_path(root, name).read_bytes())
        assert (annotation.width, annotation.height) == size
        (head,) = annotation.objects
        assert head.name == species_of(breed)
        assert 0 <= head.xmin < head.xmax <= size[0] and 0 <= head.ymin < head.ymax <= size[1]
        trimap = np.asarray(Image.open(pets.trimap_path(root, name)))
        assert trimap.shape == size[::-1] and set(np.unique(trimap)) == {1, 2, 3}


def test_list_lines_use_pets_ids():
    assert pets.list_line("Abyssinian_7") == "Abyssinian_7 1 1 1"
    assert pets.list_line("yorkshire_terrier_3") == "yorkshire_terrier_3 37 2 25"
    assert pets.list_line("Sphynx_1") == "Sphynx_1 34 1 12"


def test_sample_is_deterministic(tmp_path):
    a, b = write_sample(tmp_path / "a", 6, seed=3), write_sample(tmp_path / "b", 6, seed=3)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def test_label_map_round_trips_with_37_pets_classes():
    label_map = pets_label_map()
    assert len(label_map) == 37 == len(set(PETS_CLASSES))
    assert label_map["Abyssinian"] == 1 and label_map["yorkshire_terrier"] == 37
    assert parse_label_map(format_label_map(label_map)) == label_map


def test_label_map_parses_object_detection_api_files():
    text = 'item {\n  id: 1\n  name: "cat"\n  display_name: "Cat"\n}\nitem { id: 2 name: \'dog\' }'
    assert parse_label_map(text) == {"cat": 1, "dog": 2}


@pytest.mark.parametrize("text", ["", "item { name: 'cat' }", "item { id: 0 name: 'bg' }",
                                  "item { id: 99999999999999999999 name: 'x' }"])
def test_bad_label_maps_are_rejected(text):
    with pytest.raises(LabelMapError):
        parse_label_map(text)


@pytest.mark.parametrize("count", ["0", "2", "-1"])
def test_too_few_sample_images_is_one_line_from_the_task_and_the_trainer(count, tmp_path):
    """One image a breed at least (SampleArgs' bound, checked by `invoke data.sample` before
    anything is written and by `python -m trainer data sample`): never a traceback."""
    from tests.cli import invoke, refused
    from trainer.args import parse
    from trainer.common.errors import SettingsError
    from trainer.data.defaults import MIN_SAMPLE_IMAGES

    assert len(SAMPLE_BREEDS) == MIN_SAMPLE_IMAGES
    message = f"--num-images must be at least 3 (one per breed), got '{count}'"
    ran = invoke("data.sample", "--num-images", count, "--output-dir", str(tmp_path / "s"))
    assert refused(ran) == f"error: {message}"
    with pytest.raises(SettingsError, match=rf"^{re.escape(message)}$"):
        parse(["data", "sample", "--output-dir", str(tmp_path / "s"), f"--num-images={count}"])
    assert not (tmp_path / "s").exists()
