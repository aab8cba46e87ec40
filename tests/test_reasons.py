"""The conversion report's reasons are explained in one place each: `trainer.data.reasons.CORE`
for the converter's core and the whole-conversion checks, a format's `REASONS` for that
format's own. The source of trainer/data is read (`ast`) for every reason it can emit, so a
reason without its meaning, a meaning declared twice, or one no code emits fails here; and a
conversion's report explains every reason it counts."""

from __future__ import annotations

import ast
import collections
import dataclasses
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from trainer.common.files import CONVERSION_REPORT_FILE
from trainer.data import changes, convert, formats, reasons
from trainer.data.planning import Limits
from trainer.data.problems import ACTIONS

DATA = Path(__file__).resolve().parents[1] / "trainer" / "data"
# Modules of trainer/data outside formats/ whose reasons may be their format's own:
# trainer.data.coco parses COCO JSON for formats/coco.py (its masks are the core's: CORE)
OWNED = {DATA / "coco.py": "coco"}
# The bucket's named datasets convert nothing: a Broken one's `reason` is no report's
NOT_CONVERSION = {DATA / "datasets.py"}
# a reason: snake_case with an underscore ({} where an f-string puts a value)
NAME = re.compile(r"[a-z][a-z0-9]*(?:_(?:[a-z0-9]+|\{\}))+")
# how a reason that is not a literal reaches a Problem: a variable named so (a parameter, a
# loop over (reason, detail) pairs, an image's repairs), or an error's or a Problem's .reason;
# each is fed by the literals the scan collects
PASSED_ON = {"reason", "repair"}


@dataclasses.dataclass(frozen=True)
class Emitted:
    module: Path
    line: int
    reason: str  # an f-string's as a template: reencoded_{}_as_jpeg

    def __str__(self) -> str:
        return f"{self.module.relative_to(DATA.parents[1])}:{self.line}: {self.reason}"


def _texts(node: ast.AST | None) -> set[str]:
    """The strings an expression can be: a literal, an f-string (as a template), either
    branch of `a if c else b`, the operands of `a or b`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.JoinedStr):
        return {"".join(part.value if isinstance(part, ast.Constant) else "{}"
                        for part in node.values)}
    if isinstance(node, ast.IfExp):
        return _texts(node.body) | _texts(node.orelse)
    if isinstance(node, ast.BoolOp):
        return set().union(*map(_texts, node.values))
    return set()


def _called(node: ast.Call) -> str | None:
    return node.func.id if isinstance(node.func, ast.Name) else \
        node.func.attr if isinstance(node.func, ast.Attribute) else None


def _argument(node: ast.Call, position: int, keyword: str) -> ast.AST | None:
    before = node.args[:position + 1]
    if len(before) > position and not any(isinstance(a, ast.Starred) for a in before):
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg == keyword), None)


def _parameters(trees: dict[Path, ast.Module], name: str) -> dict[str, int]:
    """Every callable with a parameter (or a dataclass field) called `name`: its name (a
    class's for its __init__ or its fields) -> that parameter's position."""
    found: dict[str, set[int]] = collections.defaultdict(set)
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                fields = [s.target.id for s in node.body
                          if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
                if name in fields:
                    found[node.name].add(fields.index(name))
                for init in (s for s in node.body
                             if isinstance(s, ast.FunctionDef) and s.name == "__init__"):
                    args = [a.arg for a in init.args.args][1:]
                    if name in args:
                        found[node.name].add(args.index(name))
            elif isinstance(node, ast.FunctionDef) and node.name != "__init__":
                args = [a.arg for a in node.args.args]
                if name in args:
                    found[node.name].add(args.index(name))
    assert all(len(positions) == 1 for positions in found.values()), \
        f"callables of one name take {name!r} at different positions: {dict(found)}"
    return {callee: positions.pop() for callee, positions in found.items()}


def _returned(tree: ast.Module, function: str, index: int) -> set[str]:
    """What a module's function returns at `index` of the tuples it returns."""
    texts: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple) and \
                        index < len(ret.value.elts):
                    texts |= _texts(ret.value.elts[index])
    return texts


def _repairs_list(node: ast.AST) -> bool:
    """`repairs`, `x.repairs` or `x["repairs"]`: an image's repairs or (reason, detail)s."""
    return (isinstance(node, ast.Name) and node.id == "repairs") or \
        (isinstance(node, ast.Attribute) and node.attr == "repairs") or \
        (isinstance(node, ast.Subscript) and _texts(node.slice) == {"repairs"})


def scan() -> tuple[list[Emitted], list[str]]:
    """Every reason trainer/data can emit, where; and the reasons given to a Problem (or a
    helper that makes one) in a way the scan cannot follow.

    The paths a reason takes to a Problem: the `reason` parameter of `Problem`, of the errors
    that carry one (ImageError, AnnotationError: its default too) and of the helpers that
    make one (example's `skipped`, coco's `note`); a variable `reason` assigned a literal or
    a function's returned one; a (reason, detail) pair, as annotations' `repairs`, the mask
    and category changes carry them; an image's repairs (`repairs.append(...)`, a
    `CheckedImage`'s `repairs`)."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(DATA.rglob("*.py"))
             if path not in NOT_CONVERSION}
    takes_reason = _parameters(trees, "reason")
    takes_repairs = _parameters(trees, "repairs")
    found: list[Emitted] = []
    unfollowed: list[str] = []

    def emit(module: Path, node: ast.AST, texts: set[str]) -> None:
        found.extend(Emitted(module, node.lineno, text) for text in sorted(texts))

    for module, tree in trees.items():
        for node in ast.walk(tree):
            callee = _called(node) if isinstance(node, ast.Call) else None
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                defaults = [*zip(args.args[len(args.args) - len(args.defaults):],
                                 args.defaults, strict=True),
                            *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
                for param, default in defaults:
                    if param.arg == "reason" and default is not None:
                        emit(module, default, _texts(default))
            elif callee in takes_reason:
                given = _argument(node, takes_reason[callee], "reason")
                if texts := _texts(given):
                    emit(module, node, texts)
                elif given is None and any(isinstance(a, ast.Starred) for a in node.args):
                    unfollowed.append(f"{module.name}:{node.lineno}: {ast.unparse(node)}")
                elif given is not None and not (
                        (isinstance(given, ast.Name) and given.id in PASSED_ON) or
                        (isinstance(given, ast.Attribute) and given.attr == "reason")):
                    unfollowed.append(f"{module.name}:{node.lineno}: {ast.unparse(given)}")
            elif callee in takes_repairs:
                given = _argument(node, takes_repairs[callee], "repairs")
                if isinstance(given, (ast.Tuple, ast.List)):
                    emit(module, node, set().union(*map(_texts, given.elts)))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "append" and _repairs_list(node.func.value) and \
                    node.args:
                emit(module, node, _texts(node.args[0]))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id == "reason":
                        emit(module, node, _texts(node.value))
                    elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Call):
                        for index, element in enumerate(target.elts):
                            if isinstance(element, ast.Name) and element.id == "reason":
                                emit(module, node, _returned(tree, _called(node.value), index))
            elif isinstance(node, ast.Tuple) and len(node.elts) == 2 and \
                    (first := _texts(node.elts[0])) and all(map(NAME.fullmatch, first)):
                emit(module, node, first)  # a (reason, detail) pair
    return found, unfollowed


def _template(key: str) -> str:
    return re.sub(r"\{\w*\}", "{}", key)


def _format_of(module: Path) -> str | None:
    if module.parent == DATA / "formats" and module.stem in formats.FORMATS:
        return module.stem
    return OWNED.get(module)


def _tables() -> dict[str | None, dict[str, str]]:
    """None: CORE; each format's name: its REASONS; keys as the scan writes them."""
    return {None: {_template(k): v for k, v in reasons.CORE.items()},
            **{name: {_template(k): v for k, v in module.REASONS.items()}
               for name, module in formats.FORMATS.items()}}


@pytest.fixture(scope="module")
def emitted() -> list[Emitted]:
    found, unfollowed = scan()
    assert not unfollowed, ("reasons reach a Problem in a way tests/test_reasons.py's scan "
                            f"does not follow (extend scan()): {unfollowed}")
    assert len({e.reason for e in found}) > 40  # the scan finds them: a sanity floor
    return found


def test_every_reason_emitted_is_explained_by_the_core_or_its_format(emitted):
    tables = _tables()
    unexplained = [str(e) for e in emitted
                   if e.reason not in tables[None] and
                   e.reason not in tables.get(_format_of(e.module), {})]
    assert not unexplained, "reasons without a meaning in trainer/data/reasons.py's CORE " \
        f"(or, a format's own, in its REASONS): {unexplained}"


def test_every_reason_explained_is_emitted_and_explained_once(emitted):
    tables = _tables()
    anywhere = {e.reason for e in emitted}
    dead = [key for key in tables[None] if key not in anywhere]
    for name, table in tables.items():
        if name is not None:
            own = {e.reason for e in emitted if _format_of(e.module) == name}
            dead += [f"{name}: {key}" for key in table if key not in own]
    assert not dead, f"reasons explained that no code emits: {dead}"
    declared = collections.Counter(key for table in tables.values() for key in table)
    assert not (twice := [key for key, n in declared.items() if n > 1]), \
        f"reasons explained in more than one place (a report maps each to one meaning): {twice}"
    for name, table in tables.items():
        for key, meaning in table.items():
            assert NAME.fullmatch(key), (name, key)  # the scan finds pairs by this shape
            assert meaning.strip() and "\n" not in meaning, (name, key)


def test_the_whole_conversion_checks_reasons_are_the_cores():
    for table in (convert.REASONS, changes.REASONS):
        assert table and all(reasons.CORE[key] == meaning for key, meaning in table.items())


def test_every_lists_the_core_then_each_format_in_the_registrys_order():
    every = reasons.every()
    assert list(every) == ["every format", *formats.FORMATS]
    assert every["every format"] is reasons.CORE
    assert all(every[name] is formats.FORMATS[name].REASONS for name in formats.FORMATS)


def test_a_template_explains_each_key_it_stands_for():
    assert reasons.meaning("reencoded_png_as_jpeg") == \
        reasons.CORE["reencoded_{format}_as_jpeg"]
    assert reasons.meaning("converted_i;16_to_rgb") == reasons.CORE["converted_{mode}_to_rgb"]
    assert reasons.meaning("box_clipped") == reasons.CORE["box_clipped"]
    assert reasons.meaning("no_such_reason") is None
    assert reasons.meaning("val_is_train", formats.FORMATS["yolo"].REASONS) == \
        formats.FORMATS["yolo"].REASONS["val_is_train"]


def _assert_explained(report: dict, *tables) -> None:
    counted = {key for action in ACTIONS for key in report[action]}
    assert counted, "the conversion was meant to have problems"
    assert report["reasons"] == {key: reasons.meaning(key, *tables) for key in sorted(counted)}
    assert all(report["reasons"].values())


def test_a_conversions_report_explains_every_reason_it_counts(records_dir):
    """The Pets sample with its bad inputs: skips and repairs of the core alone, image
    re-encodings (a template's keys) among them."""
    report = json.loads((records_dir / CONVERSION_REPORT_FILE).read_text())
    assert "reencoded_png_as_jpeg" in report["repaired"]
    _assert_explained(report)


def test_a_formats_report_explains_its_own_reasons_and_the_cores(tmp_path):
    """YOLO with --masks: the format's defects (yolo.REASONS) beside the core's (a box
    clipped, a mask filled from its box, a shared cap: CORE)."""
    dataset = tmp_path / "yolo"
    for folder in ("images/train", "labels/train"):
        (dataset / folder).mkdir(parents=True)
    for name, text in {"good": "0 0.5 0.5 0.2 0.25\n0 0.5 0.5 0.2 0.25\n",
                       "bad": "7 0.5 0.5 0.2 0.2\n0 nan 0.5 0.2 0.2\n0 0.9 0.5 0.4 0.2\n",
                       "crowded": "0 0.5 0.5 0.2 0.2\n" * 5}.items():
        Image.new("RGB", (100, 80), (90, 120, 40)).save(dataset / "images/train" / f"{name}.jpg")
        (dataset / "labels/train" / f"{name}.txt").write_text(text)
    (dataset / "data.yaml").write_text("train: images/train\nval: images/train\n"
                                       "names: [cat, dog]\n")
    report = convert.convert_directory(dataset, tmp_path / "out", format="yolo", masks=True,
                                       limits=Limits(max_objects=4), progress=False)
    assert {"val_is_train", "class_id_out_of_range"} <= set(report["repaired"])  # YOLO's
    assert {"box_clipped", "missing_mask", "nonfinite_box"} <= set(report["repaired"])
    assert "too_many_objects" in report["skipped"]
    _assert_explained(report, formats.FORMATS["yolo"].REASONS)
