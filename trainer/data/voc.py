"""PASCAL VOC annotation XML: parsing (strict, with named errors) and writing."""

from __future__ import annotations

import dataclasses
from xml.sax.saxutils import escape

from lxml import etree


class AnnotationError(ValueError):
    """An annotation file that cannot be used; the message names what is wrong."""


@dataclasses.dataclass(frozen=True)
class VocObject:
    name: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    pose: str = "Unspecified"
    truncated: int = 0
    difficult: int = 0


@dataclasses.dataclass(frozen=True)
class VocAnnotation:
    filename: str
    width: int | None
    height: int | None
    objects: tuple[VocObject, ...]


def _text(node: etree._Element, tag: str, default: str | None = None) -> str | None:
    child = node.find(tag)
    if child is None or child.text is None or not child.text.strip():
        return default
    return child.text.strip()


def _number(node: etree._Element, tag: str, where: str) -> float:
    value = _text(node, tag)
    if value is None:
        raise AnnotationError(f"{where}: missing <{tag}>")
    try:
        return float(value)
    except ValueError:
        raise AnnotationError(f"{where}: <{tag}> is {value!r}, not a number") from None


def _flag(node: etree._Element, tag: str) -> int:
    value = _text(node, tag, "0")
    try:
        return int(float(value))
    except ValueError:
        return 0


def _optional_size(size: etree._Element | None, tag: str) -> int | None:
    if size is None:
        return None
    value = _text(size, tag)
    try:
        number = int(float(value)) if value is not None else 0
    except ValueError:
        return None
    return number if number > 0 else None


def parse_voc(xml_bytes: bytes) -> VocAnnotation:
    """Parses one VOC annotation; raises AnnotationError on anything unusable."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        root = etree.fromstring(xml_bytes, parser=parser)
    except etree.XMLSyntaxError as error:
        raise AnnotationError(f"not well-formed XML ({error})") from None
    if root.tag != "annotation":
        raise AnnotationError(f"root element is <{root.tag}>, expected <annotation>")
    size = root.find("size")
    objects = []
    for index, obj in enumerate(root.findall("object")):
        where = f"object {index}"
        box = obj.find("bndbox")
        if box is None:
            raise AnnotationError(f"{where}: missing <bndbox>")
        objects.append(
            VocObject(
                name=_text(obj, "name", "") or "",
                xmin=_number(box, "xmin", where),
                ymin=_number(box, "ymin", where),
                xmax=_number(box, "xmax", where),
                ymax=_number(box, "ymax", where),
                pose=_text(obj, "pose", "Unspecified") or "Unspecified",
                truncated=_flag(obj, "truncated"),
                difficult=_flag(obj, "difficult"),
            )
        )
    return VocAnnotation(
        filename=_text(root, "filename", "") or "",
        width=_optional_size(size, "width"),
        height=_optional_size(size, "height"),
        objects=tuple(objects),
    )


def format_voc(annotation: VocAnnotation, folder: str = "OXIIIT", depth: int = 3) -> str:
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
