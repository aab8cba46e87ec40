"""A synthetic dataset in exactly the Oxford-IIIT Pets layout, with procedurally drawn pet faces.

Each image holds one pet (head and body) on a cluttered background; the head box is the
annotation, as in Pets. Breeds differ in fur colour, ear shape and markings, so a small
detector can learn them in minutes on a CPU. `bad_inputs` adds the defects real photo
collections have, to exercise conversion's error handling.
"""

from __future__ import annotations

import dataclasses
import io
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from trainer.common.files import SAMPLE_COCO_FILE, TEST
from trainer.data import coco, defaults, pets
from trainer.data.annotation import AnnotatedObject, Annotation, AnnotationError
from trainer.data.label_map import pets_label_map
from trainer.data.planning import split_names
from trainer.data.voc import format_voc, parse_voc

RGB = tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class BreedStyle:
    fur: RGB
    accent: RGB  # muzzle or markings
    ears: str  # "pointed" (cats) or "floppy" (dogs)


SAMPLE_BREEDS: dict[str, BreedStyle] = {
    "Abyssinian": BreedStyle(fur=(196, 112, 48), accent=(120, 60, 20), ears="pointed"),
    "Russian_Blue": BreedStyle(fur=(112, 124, 148), accent=(70, 78, 96), ears="pointed"),
    "beagle": BreedStyle(fur=(182, 128, 64), accent=(245, 242, 232), ears="floppy"),
}

TEST_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class DrawnPet:
    image: Image.Image
    trimap: Image.Image
    head_box: tuple[int, int, int, int]  # xmin, ymin, xmax, ymax in pixels


def _background(rng: random.Random, width: int, height: int) -> Image.Image:
    base = np.array([rng.randint(40, 220) for _ in range(3)], dtype=np.float32)
    tilt = np.array([rng.uniform(-60, 60) for _ in range(3)], dtype=np.float32)
    ys = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    gradient = base + tilt * ys
    noise = np.random.default_rng(rng.getrandbits(32)).normal(0, 10, (height, width, 3))
    image = Image.fromarray(np.clip(gradient + noise, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(3, 8)):  # clutter the detector must learn to ignore
        x, y = rng.randint(0, width), rng.randint(0, height)
        w, h = rng.randint(8, width // 3), rng.randint(8, height // 3)
        colour = tuple(rng.randint(0, 255) for _ in range(3))
        shape = draw.rectangle if rng.random() < 0.5 else draw.ellipse
        shape((x, y, x + w, y + h), fill=colour)
    return image


def _draw_pet(rng: random.Random, style: BreedStyle, width: int, height: int) -> DrawnPet:
    image = _background(rng, width, height)
    mask = Image.new("L", (width, height), 0)
    draw, mask_draw = ImageDraw.Draw(image), ImageDraw.Draw(mask)
    r = int(min(width, height) * rng.uniform(0.16, 0.26))
    cx = rng.randint(int(1.6 * r), width - int(1.6 * r))
    cy = rng.randint(int(1.3 * r), height - int(1.0 * r))
    fur, accent = style.fur, style.accent

    def both(shape: Callable[[ImageDraw.ImageDraw], Callable], xy, colour) -> None:
        shape(draw)(xy, fill=colour)
        shape(mask_draw)(xy, fill=255)

    # Body below the head: same fur, not part of the head box.
    both(lambda d: d.ellipse, (cx - 1.4 * r, cy + 0.6 * r, cx + 1.4 * r, cy + 2.8 * r), fur)
    if style.ears == "pointed":
        for side in (-1, 1):
            tip = (cx + side * 0.75 * r, cy - 1.45 * r)
            both(lambda d: d.polygon, [(cx + side * 0.2 * r, cy - 0.8 * r), tip,
                                       (cx + side * 0.95 * r, cy - 0.3 * r)], fur)
        top, left, right = cy - 1.45 * r, cx - 1.0 * r, cx + 1.0 * r
    else:
        for side in (-1, 1):
            both(lambda d: d.ellipse, (cx + side * 0.75 * r - 0.35 * r, cy - 0.7 * r,
                                       cx + side * 0.75 * r + 0.35 * r, cy + 0.8 * r), accent)
        top, left, right = cy - 1.0 * r, cx - 1.1 * r, cx + 1.1 * r
    both(lambda d: d.ellipse, (cx - r, cy - r, cx + r, cy + r), fur)
    if style.ears == "pointed":  # tabby forehead stripes
        for dx in (-0.3, 0.0, 0.3):
            draw.line((cx + dx * r, cy - 0.9 * r, cx + dx * r, cy - 0.5 * r),
                      fill=accent, width=max(1, r // 10))
    else:  # white muzzle and blaze
        draw.ellipse((cx - 0.5 * r, cy + 0.05 * r, cx + 0.5 * r, cy + 0.85 * r), fill=accent)
        draw.rectangle((cx - 0.12 * r, cy - 0.9 * r, cx + 0.12 * r, cy + 0.2 * r), fill=accent)
    eye = (60, 160, 60) if style.ears == "pointed" else (60, 35, 20)
    for side in (-1, 1):
        ex = cx + side * 0.4 * r
        draw.ellipse((ex - 0.15 * r, cy - 0.35 * r, ex + 0.15 * r, cy - 0.05 * r), fill=eye)
    draw.ellipse((cx - 0.12 * r, cy + 0.15 * r, cx + 0.12 * r, cy + 0.35 * r), fill=(30, 20, 20))
    bottom = cy + 1.0 * r
    box = (max(0, int(left)), max(0, int(top)), min(width - 1, int(right)),
           min(height - 1, int(bottom)))
    return DrawnPet(image=image, trimap=_trimap(mask), head_box=box)


def _trimap(mask: Image.Image) -> Image.Image:
    """Pets trimap: 1 pet, 2 background, 3 the uncertain border between them."""
    grown, shrunk = mask.filter(ImageFilter.MaxFilter(5)), mask.filter(ImageFilter.MinFilter(5))
    grown_a, shrunk_a = np.asarray(grown) > 0, np.asarray(shrunk) > 0
    trimap = np.full(grown_a.shape, 2, np.uint8)
    trimap[grown_a] = 3
    trimap[shrunk_a] = 1
    return Image.fromarray(trimap, "L")


def _encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def _jpeg(image: Image.Image) -> bytes:
    return _encode(image, "JPEG", quality=90)


def _annotation(name: str, breed: str, width: int, height: int,
                box: tuple[float, float, float, float]) -> str:
    species = "cat" if breed[:1].isupper() else "dog"
    obj = AnnotatedObject(species, *box, pose="Frontal")
    return format_voc(Annotation(f"{name}.jpg", width, height, (obj,)))


@dataclasses.dataclass
class _Writer:
    root: Path

    def __post_init__(self) -> None:
        for sub in (pets.IMAGES_DIR, pets.XMLS_DIR, pets.TRIMAPS_DIR):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def write(self, name: str, image_bytes: bytes | None, xml: str | None,
              trimap: Image.Image | None) -> None:
        if image_bytes is not None:
            pets.image_path(self.root, name).write_bytes(image_bytes)
        if xml is not None:
            pets.xml_path(self.root, name).write_text(xml)
        if trimap is not None:
            trimap.save(pets.trimap_path(self.root, name), format="PNG")


def _bad_examples(rng: random.Random, next_number: Callable[[str], int]) -> list[tuple]:
    """(name, image bytes, xml, trimap) for each defect found in real photo collections."""
    breed = "Abyssinian"
    style = SAMPLE_BREEDS[breed]

    def fresh() -> tuple[str, DrawnPet, str]:
        name = f"{breed}_{next_number(breed)}"
        pet = _draw_pet(rng, style, 224, 192)
        return name, pet, _annotation(name, breed, 224, 192, pet.head_box)

    examples = []
    name, pet, xml = fresh()  # annotation missing
    examples.append((name, _jpeg(pet.image), None, pet.trimap))
    name, pet, xml = fresh()  # annotation cut off mid-element
    examples.append((name, _jpeg(pet.image), xml[: len(xml) // 2], pet.trimap))
    name, pet, xml = fresh()  # JPEG truncated by an interrupted copy
    data = _jpeg(pet.image)
    examples.append((name, data[: len(data) // 2], xml, pet.trimap))
    name, pet, xml = fresh()  # not an image at all
    examples.append((name, b"<html>404 Not Found</html>", xml, pet.trimap))
    name, pet, xml = fresh()  # PNG bytes behind a .jpg name (repairable)
    examples.append((name, _encode(pet.image, "PNG"), xml, pet.trimap))
    name, pet, xml = fresh()  # GIF bytes behind a .jpg name (repairable)
    examples.append((name, _encode(pet.image.convert("P"), "GIF"), xml, pet.trimap))
    name, pet, xml = fresh()  # CMYK JPEG (repairable)
    examples.append((name, _jpeg(pet.image.convert("CMYK")), xml, pet.trimap))
    name, pet, xml = fresh()  # grayscale JPEG (repairable)
    examples.append((name, _jpeg(pet.image.convert("L")), xml, pet.trimap))
    name, pet, _ = fresh()  # box runs past the image border (clipped)
    x0, y0, x1, y1 = pet.head_box
    examples.append((name, _jpeg(pet.image), _annotation(name, breed, 224, 192,
                                                         (x0 - 30, y0 - 40, x1 + 500, y1)),
                     pet.trimap))
    name, pet, _ = fresh()  # zero-width box (dropped; nothing valid left)
    examples.append((name, _jpeg(pet.image), _annotation(name, breed, 224, 192,
                                                         (x0, y0, x0, y1)), pet.trimap))
    unknown = f"Unicorn_{next_number('Unicorn')}"  # a breed not in the label map
    pet = _draw_pet(rng, style, 224, 192)
    examples.append((unknown, _jpeg(pet.image),
                     _annotation(unknown, "Unicorn", 224, 192, pet.head_box), pet.trimap))
    name, pet, xml = fresh()  # listed, annotated, but the image file is missing
    examples.append((name, None, xml, pet.trimap))
    return examples


def write_sample(output_dir: str | Path, num_images: int = defaults.NUM_SAMPLE_IMAGES,
                 seed: int = 0, bad_inputs: bool = False, scale: float = 1.0) -> Path:
    """Writes `num_images` synthetic pets (plus defects if asked) in the Pets layout.

    `scale` enlarges the images (2 gives Pets' typical 500x375 photos, for benchmarks).
    """
    root = Path(output_dir)
    writer = _Writer(root)
    rng = random.Random(seed)
    counters: dict[str, int] = {}

    def next_number(breed: str) -> int:
        counters[breed] = counters.get(breed, 0) + 1
        return counters[breed]

    breeds = list(SAMPLE_BREEDS)
    names = []
    for index in range(num_images):
        breed = breeds[index % len(breeds)]
        name = f"{breed}_{next_number(breed)}"
        width, height = int(scale * rng.randint(200, 320)), int(scale * rng.randint(170, 300))
        pet = _draw_pet(rng, SAMPLE_BREEDS[breed], width, height)
        writer.write(name, _jpeg(pet.image), _annotation(name, breed, width, height,
                                                           pet.head_box), pet.trimap)
        names.append(name)
    rng.shuffle(names)
    num_test = max(1, int(TEST_FRACTION * len(names)))
    test, trainval = sorted(names[:num_test]), sorted(names[num_test:])
    if bad_inputs:
        for name, image_bytes, xml, trimap in _bad_examples(rng, next_number):
            writer.write(name, image_bytes, xml, trimap)
            trainval.append(name)
    _write_lists(root, trainval, test)
    return root


def _write_lists(root: Path, trainval: list[str], test: list[str]) -> None:
    header = ("#Image CLASS-ID SPECIES BREED ID\n#ID: 1:37 Class ids\n#SPECIES: 1:Cat 2:Dog\n"
              "#BREED ID: 1-25:Cat 1:12:Dog\n#All images with 1st letter as captial are cat "
              "images\n#images with small first letter are dog images\n")
    (root / pets.TRAINVAL_LIST).write_text("".join(pets.list_line(n) + "\n" for n in trainval))
    (root / pets.TEST_LIST).write_text("".join(pets.list_line(n) + "\n" for n in test))
    everything = sorted(trainval + test)
    (root / pets.ALL_LIST).write_text(header + "".join(pets.list_line(n) + "\n"
                                                       for n in everything))


def pets_as_coco(root: Path, listed: str = pets.TRAINVAL_LIST) -> dict:
    """The trainval examples of a Pets directory (or those of `listed`: pets.TEST_LIST) as
    one COCO file: the objects `data convert --masks` writes from them (the whole pet
    outlined by its trimap, with that box; the annotated heads where there is no trimap),
    image ids numbered as the Pets conversion numbers them (trainval's 1..N, then test's).
    Examples whose XML or image the Pets path would refuse are left out."""
    names = list(dict.fromkeys(pets.read_example_list(root / listed)))
    before = 0 if listed == pets.TRAINVAL_LIST else \
        len(set(pets.read_example_list(root / pets.TRAINVAL_LIST)))
    ids = {name: index for index, name in enumerate(sorted(set(names)), start=before + 1)}
    label_map = pets_label_map()
    images = []
    for name in names:
        if (pets.breed_of(name) or name) not in label_map:  # Pets skips it: unknown_class
            continue
        try:
            annotation = parse_voc(pets.xml_path(root, name).read_bytes())
            with Image.open(pets.image_path(root, name)) as image:
                width, height = image.size
            with Image.open(pets.trimap_path(root, name)) as trimap:
                mask = pets.pet_mask(trimap)
        except (OSError, AnnotationError, ValueError):
            continue
        breed = pets.breed_of(name) or name
        bounds = pets.mask_bounds(mask) if mask.shape == (height, width) else None
        objects = [(breed, bounds, mask)] if bounds else \
            [(breed, (o.xmin, o.ymin, o.xmax, o.ymax), None) for o in annotation.objects]
        images.append({"id": ids[name], "file_name": f"{name}.jpg", "width": width,
                       "height": height, "objects": objects})
    used = {breed for image in images for breed, _, _ in image["objects"]}
    return coco.sample_coco(images, {n: i for n, i in label_map.items() if n in used})


def coco_defects(data: dict) -> dict:
    """The COCO file with the defects other tools' files have, one of each."""
    first = data["images"][0]
    box = data["annotations"][0]
    broken = [
        {**box, "id": 90001, "category_id": 999},  # a category the file does not have
        {**box, "id": 90002, "image_id": 424242},  # an image the file does not have
        {**box, "id": 90003, "bbox": [1.0, float("nan"), 20.0, 20.0]},  # NaN in the box
        {**box, "id": 90004, "bbox": [10.0, 10.0, -5.0, 20.0]},  # a negative width
        {**box, "id": 90005, "iscrowd": 7},  # not 0 or 1 (read as 0)
        {**box, "id": 90006, "image_id": 90001},  # the image outside the images directory
        {**box, "id": 90007, "image_id": 90002},  # the image file is missing
    ]
    return {**data,
            "images": [*data["images"], {**first, "id": first["id"]},  # duplicate image id
                       {**first, "id": 90001, "file_name": "../outside.jpg"},
                       {**first, "id": 90002, "file_name": "missing/none.jpg"}],
            "annotations": [*data["annotations"], *broken]}


def write_coco_sample(root: Path, bad_inputs: bool = False) -> Path:
    """Writes the Pets directory's trainval examples as COCO JSON into it."""
    data = pets_as_coco(root)
    path = root / SAMPLE_COCO_FILE
    path.write_text(json.dumps(coco_defects(data) if bad_inputs else data))
    return path


def coco_as_yolo(data: dict, images_dir: Path, out: Path, test: dict | None = None) -> Path:
    """A COCO file's images and boxes in Ultralytics' layout (data.yaml with names as the
    mapping {id: name}, ids 0 to nc - 1 in the order of the COCO ids, as Ultralytics requires;
    images/ and labels/ by split, seeded 70/30; labels with 6 decimals, as Ultralytics'
    converters write them); `test`, a COCO file of other images of the same categories, as
    its test split (images/test, data.yaml's `test`)."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    categories = sorted({c["id"]: c for c in [*(test or {}).get("categories", []),
                                              *data["categories"]]}.values(),
                        key=lambda c: c["id"])
    dense = {c["id"]: i for i, c in enumerate(categories)}
    names = {dense[c["id"]]: c["name"] for c in categories}
    every = [*data["images"], *(test or {}).get("images", [])]
    objects: dict[int, list[str]] = {image["id"]: [] for image in every}
    sizes = {image["id"]: (image["width"], image["height"]) for image in every}
    for entry in [*data["annotations"], *(test or {}).get("annotations", [])]:
        (x, y, w, h), (width, height) = entry["bbox"], sizes[entry["image_id"]]
        objects[entry["image_id"]].append(
            f"{dense[entry['category_id']]} {(x + w / 2) / width:.6f} "
            f"{(y + h / 2) / height:.6f} {w / width:.6f} {h / height:.6f}")
    splits = split_names(data["images"])
    if test:
        splits[TEST] = test["images"]
    for split, images in splits.items():
        for kind in ("images", "labels"):
            (out / kind / split).mkdir(parents=True, exist_ok=True)
        for image in images:
            shutil.copy(images_dir / image["file_name"], out / "images" / split)
            (out / "labels" / split / Path(image["file_name"]).with_suffix(".txt").name
             ).write_text("".join(line + "\n" for line in objects[image["id"]]))
    held_out = "test: images/test\n" if test else ""
    (out / "data.yaml").write_text(
        "# synthetic pets (trainer/data/sample.py), in Ultralytics' layout\n"
        f"path: .\ntrain: images/train\nval: images/val\n{held_out}"
        f"nc: {len(names)}\nnames:\n" + "".join(f"  {i}: {n}\n" for i, n in sorted(
            names.items())))
    return out / "data.yaml"


def coco_as_labelme(data: dict, images_dir: Path, out: Path) -> Path:
    """A COCO file's images and boxes as LabelMe writes them: a JSON beside each image, a
    rectangle a box (its two corners), imagePath the image's name, imageData null."""
    out.mkdir(parents=True, exist_ok=True)
    names = {c["id"]: c["name"] for c in data["categories"]}
    shapes: dict[int, list[dict]] = {image["id"]: [] for image in data["images"]}
    for entry in data["annotations"]:
        x, y, w, h = entry["bbox"]
        shapes[entry["image_id"]].append({
            "label": names[entry["category_id"]], "points": [[x, y], [x + w, y + h]],
            "group_id": None, "description": "", "shape_type": "rectangle", "flags": {}})
    for image in data["images"]:
        shutil.copy(images_dir / image["file_name"], out)
        (out / Path(image["file_name"]).with_suffix(".json").name).write_text(json.dumps({
            "version": "5.5.0", "flags": {}, "shapes": shapes[image["id"]],
            "imagePath": Path(image["file_name"]).name, "imageData": None,
            "imageHeight": image["height"], "imageWidth": image["width"]}, indent=2))
    return out


def coco_as_cvat(data: dict, images_dir: Path, out: Path) -> Path:
    """A COCO file's images and boxes as CVAT's "CVAT for images 1.1" export of a task:
    annotations.xml (a <box> per object, in pixels, two decimals as CVAT writes them) and
    the images below images/."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    names = {c["id"]: c["name"] for c in data["categories"]}
    boxes: dict[int, list[str]] = {image["id"]: [] for image in data["images"]}
    for entry in data["annotations"]:
        x, y, w, h = entry["bbox"]
        boxes[entry["image_id"]].append(
            f'    <box label={quoteattr(names[entry["category_id"]])} source="manual" '
            f'occluded="0" xtl="{x:.2f}" ytl="{y:.2f}" xbr="{x + w:.2f}" ybr="{y + h:.2f}" '
            'z_order="0">\n    </box>\n')
    labels = "".join(f"        <label>\n          <name>{names[i]}</name>\n          "
                     "<type>rectangle</type>\n        </label>\n" for i in sorted(names))
    lines = ['<?xml version="1.0" encoding="utf-8"?>\n<annotations>\n  <version>1.1</version>\n'
             f"  <meta>\n    <task>\n      <name>pets</name>\n      <size>{len(data['images'])}"
             f"</size>\n      <mode>annotation</mode>\n      <labels>\n{labels}      </labels>\n"
             "    </task>\n  </meta>\n"]
    for index, image in enumerate(data["images"]):
        name = Path(image["file_name"]).name
        shutil.copy(images_dir / image["file_name"], out / "images" / name)
        lines.append(f'  <image id="{index}" name={quoteattr(name)} width="{image["width"]}" '
                     f'height="{image["height"]}">\n{"".join(boxes[image["id"]])}  </image>\n')
    (out / "annotations.xml").write_text("".join(lines) + "</annotations>\n")
    return out / "annotations.xml"


def coco_as_label_studio(data: dict, images_dir: Path, out: Path) -> Path:
    """A COCO file's images and boxes as Label Studio's JSON export of a labelled project:
    one task an image (`data.image` as its local-files path), one submitted annotation each (a
    `rectanglelabels` result a box, in percent of the image), and the images in images/."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    names = {c["id"]: c["name"] for c in data["categories"]}
    results: dict[int, list[dict]] = {image["id"]: [] for image in data["images"]}
    sizes = {image["id"]: (image["width"], image["height"]) for image in data["images"]}
    for entry in data["annotations"]:
        (x, y, w, h), (width, height) = entry["bbox"], sizes[entry["image_id"]]
        results[entry["image_id"]].append({
            "id": f"r{entry['id']}", "type": "rectanglelabels", "from_name": "label",
            "to_name": "image", "original_width": width, "original_height": height,
            "image_rotation": 0, "origin": "manual",
            "value": {"x": 100 * x / width, "y": 100 * y / height, "width": 100 * w / width,
                      "height": 100 * h / height, "rotation": 0,
                      "rectanglelabels": [names[entry["category_id"]]]}})
    tasks = []
    for task_id, image in enumerate(data["images"], start=1):
        name = Path(image["file_name"]).name
        shutil.copy(images_dir / image["file_name"], out / "images" / name)
        tasks.append({"id": task_id, "data": {"image": f"/data/local-files/?d=pets/{name}"},
                      "annotations": [{"id": task_id, "was_cancelled": False,
                                       "result": results[image["id"]], "ground_truth": False,
                                       "updated_at": "2026-12-02T10:00:00.000000Z"}],
                      "predictions": [], "drafts": []})
    (out / "label_studio.json").write_text(json.dumps(tasks, indent=1))
    return out / "label_studio.json"
