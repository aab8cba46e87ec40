"""What each reason in a conversion report means, in one place per reason: `CORE` holds those
the converter's core and the whole-conversion checks emit for any format (and those several
formats share: a report maps a key to one meaning), each format's `REASONS` its own. The
report's `reasons` and the docs' reference page are made from these tables, and
tests/test_reasons.py reads trainer/data's source for every reason emitted, so none is
missing or dead. Plain data, importing nothing heavy: the docs build reads it.

A key with `{...}` stands for every key it matches (`reencoded_{format}_as_jpeg`:
`reencoded_png_as_jpeg`, ...): `meaning` finds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from trainer.data import formats

CORE: Mapping[str, str] = {
    # skipped: the image left out for its defect
    "path_outside_data_dir": "a file of the example resolves outside the data directory "
                             "(through '..' or a symlink), or a LabelMe JSON is not a "
                             "regular file; the image skipped",
    "invalid_name": "a listed name with '..', a leading '/', '\\' or NUL (COCO: no file_name, "
                    "or one that leaves --images); skipped",
    "missing_xml": "no annotation XML for a listed image; skipped",
    "missing_image": "no image file for the example; skipped",
    "xml_too_large": "an annotation XML over the label size cap (4 MiB); the image skipped",
    "label_too_large": "a YOLO label file, or a LabelMe JSON's labels (all but its embedded "
                       "image and indentation), over the label size cap (4 MiB), or a JSON "
                       "over the size of an embedded image of --max-pixels; the image skipped "
                       "unparsed",
    "too_many_objects": "more objects than --max-objects (a YOLO line or a LabelMe shape, a "
                        "polygon too, is one); the image skipped, its objects never made",
    "image_too_large": "an image over --max-pixels (read from its header), or a file larger "
                       "than such an image needs; skipped undecoded",
    "malformed_xml": "an annotation XML that is not well-formed VOC (a <bndbox> or a "
                     "coordinate missing or not a number); the image skipped",
    "corrupt_image": "an image that does not decode (empty, truncated, corrupt, not an "
                     "image); skipped",
    "no_valid_objects": "no usable object left once the defective ones were dropped; the "
                        "image skipped",
    "classes_dropped": "--classes drops every object's class; the image skipped",
    "missing_trimap": "--masks (Pets): the example has no trimap; the image skipped",
    "corrupt_trimap": "--masks (Pets): the trimap does not decode; the image skipped",
    "empty_trimap": "--masks (Pets): the trimap marks no pet pixel; the image skipped",
    "unexpected_error": "anything else that failed while converting the example; the image "
                        "skipped, with the exception's text",
    # dropped: a second copy of an image left out (the first is converted)
    "duplicate_name": "a name listed twice in one split (COCO: one file_name for two image "
                      "ids); kept once",
    "in_train_and_val": "an image listed in train and in val (also through a symlink); kept "
                        "once, in the first split",
    "duplicate_image": "the same image bytes in an earlier source or split; kept once",
    "in_test_split": "an image of the test split (by name, through a symlink, or by its "
                     "bytes) listed in train or val too; dropped there, kept in test: no "
                     "test image is trained or validated on",
    # repaired: converted after a repair
    "unknown_class": "a class not in the label map: the object dropped (Pets: the breed in "
                     "the name, the image skipped)",
    "box_clipped": "a box reaching outside the image; clipped to it",
    "rotated_box": "a rotated box (CVAT's rotation, Label Studio's): the bounds of its "
                   "turned corners",
    "not_a_box": "a shape that is no box (CVAT's points, polylines, ellipses, masks, "
                 "cuboids, skeletons, tags; Label Studio's keypoints, brushes, choices, "
                 "text); dropped",
    "box_corners_swapped": "a box's min and max corners swapped; swapped back",
    "degenerate_box": "a box with no area inside the image; object dropped",
    "nonfinite_box": "a box coordinate (a YOLO value, a LabelMe point) that is nan, inf or "
                     "beyond 1e300; object dropped",
    "invalid_size": "a stated image size (VOC's <size>, COCO's width and height, LabelMe's "
                    "imageWidth/imageHeight) that is no whole number of 1 to 65,536; the "
                    "image's own used",
    "invalid_flag": "truncated or difficult (VOC), or iscrowd (COCO), other than 0 or 1; "
                    "read as 1 if a positive number (iscrowd: 0), else 0",
    "size_mismatch": "the size the labels state is not the image's: boxes normalised by the "
                     "stated size (VOC, COCO), or the image's used (LabelMe)",
    "class_renamed": "a --label-map class name the label map cannot hold as it is, or taken "
                     "already; renamed in the label map, the records and the report",
    "non_utf8_name": "a file name that is not UTF-8; image/filename has U+FFFD for its bad "
                     "bytes",
    "reencoded_{format}_as_jpeg": "an image in another format than JPEG (PNG, GIF, ...), "
                                  "whatever its name; re-encoded as JPEG",
    "converted_{mode}_to_rgb": "an image in another colour mode than RGB (CMYK, grayscale, "
                               "palette, ...); converted to RGB",
    "kept_first_frame": "an animated image (GIF, WebP); its first frame kept, the only one "
                        "decoded",
    "exif_orientation_applied": "a photo its EXIF orientation turns, labelled as shown "
                                "turned; its pixels turned for good and re-encoded",
    "mask_resized": "--masks (Pets): a trimap of another size than the image; resized to it",
    "pets_merged": "--masks (Pets): several heads, one pet outline; written as one object",
    "too_many_points": "--masks: over 10,000 polygon points in one object; the box filled",
    "mask_too_large": "--masks: an RLE over --max-pixels; the box filled",
    "missing_mask": "--masks: no usable polygon or RLE (a box-only object); the box filled",
    "invalid_mask": "--masks: a segmentation pycocotools cannot read; the box filled",
    # flagged: converted as it is, with something worth a look
    "class_names_alike": "class names that differ only in case or spacing: converted as "
                         "separate classes",
}


def _pattern(key: str) -> re.Pattern[str]:
    return re.compile(".+".join(map(re.escape, re.split(r"\{\w*\}", key))))


def meaning(key: str, *tables: Mapping[str, str]) -> str | None:
    """What a report key means: from `tables` (a format's REASONS) or CORE, the key itself
    or a `{...}` key that matches it; None when none explains it."""
    for table in (*tables, CORE):
        if key in table:
            return table[key]
    for table in (*tables, CORE):
        for general, text in table.items():
            if "{" in general and _pattern(general).fullmatch(key):
                return text
    return None


def explain(keys: Iterable[str], *tables: Mapping[str, str]) -> dict[str, str]:
    """Each of `keys` that `meaning` explains -> its meaning, sorted by key."""
    found = {key: meaning(key, *tables) for key in keys}
    return {key: text for key, text in sorted(found.items()) if text is not None}


def every() -> dict[str, Mapping[str, str]]:
    """Every reason a conversion can report: CORE's ("every format"), then each format's own
    in the registry's order."""
    return {"every format": CORE,
            **{name: module.REASONS for name, module in formats.FORMATS.items()}}
