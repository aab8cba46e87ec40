"""PASCAL VOC annotation XML: parsed into an `Annotation` (trainer/data/annotation.py; strict,
with named errors), and written."""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

from lxml import etree

from trainer.data.annotation import AnnotatedObject, Annotation, AnnotationError, valid_side


def _text(node: etree._Element, tag: str, default: str | None = None) -> str | None:
    child = node.find(tag)
    if child is None or child.text is None or not child.text.strip():
        return default
    return child.text.strip()


def _float(text: str) -> float:
    """Any text as a float; what is not a number is NaN (and so refused by the callers)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _number(node: etree._Element, tag: str, where: str) -> float:
    value = _text(node, tag)
    if value is None:
        raise AnnotationError(f"{where}: missing <{tag}>")
    try:
        return float(value)  # nan, inf and 1e400 parse: parse_voc drops such objects
    except ValueError:
        raise AnnotationError(f"{where}: <{tag}> is {value[:40]!r}, not a number") from None


def _flag(node: etree._Element, tag: str, where: str, repairs: list) -> int:
    """`truncated` and `difficult` are 0 or 1; anything else is read as 1 if it is a finite
    positive number, else 0, and reported."""
    value = _text(node, tag)
    if value is None:
        return 0
    number = _float(value)
    if number in (0.0, 1.0):
        return int(number)
    flag = int(math.isfinite(number) and number > 0)
    repairs.append(("invalid_flag", f"{where}: <{tag}> is {value[:40]!r}, not 0 or 1; "
                                    f"read as {flag}"))
    return flag


def _size(size: etree._Element | None, tag: str, repairs: list) -> int | None:
    """A declared image side: a whole number from 1 to MAX_SIDE, else unknown (reported)."""
    value = None if size is None else _text(size, tag)
    if value is None:
        return None
    if (side := valid_side(_float(value))) is not None:
        return side
    repairs.append(("invalid_size", f"<size><{tag}> is {value[:40]!r}; the image's own size "
                                    "is used"))
    return None


def parse_voc(xml_bytes: bytes, max_objects: int | None = None) -> Annotation:
    """Parses one VOC annotation; raises AnnotationError on anything unusable. Objects with a
    non-finite coordinate (nan, inf, 1e400) are dropped, odd flags and sizes repaired, and
    each fix is named in `repairs`."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        root = etree.fromstring(xml_bytes, parser=parser)
    except etree.XMLSyntaxError as error:
        raise AnnotationError(f"not well-formed XML ({error})") from None
    if root.tag != "annotation":
        raise AnnotationError(f"root element is <{root.tag}>, expected <annotation>")
    found = root.findall("object")
    if max_objects is not None and len(found) > max_objects:
        raise AnnotationError(f"{len(found)} objects, more than the cap of {max_objects} "
                              "(--max-objects)", "too_many_objects")
    repairs: list[tuple[str, str]] = []
    objects = []
    for index, obj in enumerate(found):
        where = f"object {index}"
        box = obj.find("bndbox")
        if box is None:
            raise AnnotationError(f"{where}: missing <bndbox>")
        corners = {tag: _number(box, tag, where) for tag in ("xmin", "ymin", "xmax", "ymax")}
        if bad := [f"<{tag}> {_text(box, tag)!r}" for tag, value in corners.items()
                   if not math.isfinite(value)]:
            repairs.append(("nonfinite_box", f"{where}: {', '.join(bad)} is not a finite "
                                             "number; object dropped"))
            continue
        objects.append(
            AnnotatedObject(
                name=_text(obj, "name", "") or "",
                **corners,
                pose=_text(obj, "pose", "Unspecified") or "Unspecified",
                truncated=_flag(obj, "truncated", where, repairs),
                difficult=_flag(obj, "difficult", where, repairs),
            )
        )
    size = root.find("size")
    return Annotation(
        filename=_text(root, "filename", "") or "",
        width=_size(size, "width", repairs),
        height=_size(size, "height", repairs),
        objects=tuple(objects),
        repairs=tuple(repairs),
    )


def format_voc(annotation: Annotation, folder: str = "OXIIIT", depth: int = 3) -> str:
    """Writes the XML the Pets dataset ships (one <object> per head box)."""
    objects = "".join(
        f"\t<object>\n\t\t<name>{escape(o.name)}</name>\n\t\t<pose>{escape(o.pose)}</pose>\n"
        f"\t\t<truncated>{o.truncated}</truncated>\n\t\t<occluded>0</occluded>\n"
        f"\t\t<bndbox>\n\t\t\t<xmin>{o.xmin:g}</xmin>\n\t\t\t<ymin>{o.ymin:g}</ymin>\n"
        f"\t\t\t<xmax>{o.xmax:g}</xmax>\n\t\t\t<ymax>{o.ymax:g}</ymax>\n\t\t</bndbox>\n"
        f"\t\t<difficult>{o.difficult}</difficult>\n\t</object>\n"
        for o in annotation.objects
    )
    return (
        f"<annotation>\n\t<folder>{folder}</folder>\n"
        f"\t<filename>{escape(annotation.filename)}</filename>\n"
        "\t<source>\n\t\t<database>OXFORD-IIIT Pet Dataset</database>\n"
        "\t\t<annotation>OXIIIT</annotation>\n\t\t<image>flickr</image>\n\t</source>\n"
        f"\t<size>\n\t\t<width>{annotation.width}</width>\n\t\t<height>{annotation.height}</height>\n"
        f"\t\t<depth>{depth}</depth>\n\t</size>\n\t<segmented>0</segmented>\n{objects}</annotation>\n"
    )
