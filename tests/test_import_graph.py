"""The import graph: no cycle in the tree (`trainer`, `launch`, `serving` and `infra` as grimp
reads them, function-local and type-checking imports counted, hold no two modules that import
each other however indirectly: a cycle is a layer that cannot be read, tested or moved alone;
the floor plans, `lint-imports` and docs/design/layers.md, say which way imports go), and the
trainer's imports inside functions are there for start-up time only, not to hide a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

from tests.conftest import REPO

PACKAGES = ("trainer", "launch", "serving", "infra")
# What the trainer imports inside a function so that a command that does not need it starts
# without it (docs/design/trainer-start.md: `--help` and data commands load no TensorFlow):
# the heavy libraries, and its own rooms in the command line's runners, each marked so.
HEAVY = frozenset({"tensorflow", "tensorflow_serving", "official", "orbit", "tf_keras",
                   "ai_edge_litert", "PIL", "numpy", "pycocotools", "yaml", "google", "tqdm",
                   "tf2onnx", "onnxruntime", "openvino"})
MARK = "# start-up time"


def cycles(graph: grimp.ImportGraph) -> set[frozenset[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's,
    iterative): each is a set of modules every one of which imports every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(
                        other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.add(frozenset(component))
    return found


def test_the_import_graph_has_no_cycle():
    found = cycles(grimp.build_graph(*PACKAGES, include_external_packages=False))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(sorted(cycle))
                                                      for cycle in found)


def test_cycles_finds_a_cycle_through_three_modules():
    graph = grimp.ImportGraph()
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=importer, imported=imported)
    assert cycles(graph) == {frozenset({"p.a", "p.b", "p.c"})}


def test_the_trainer_imports_inside_a_function_only_what_costs_start_up_time():
    found = []
    for path in sorted((REPO / "trainer").rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                if not isinstance(inner, (ast.Import, ast.ImportFrom)):
                    continue
                names = [inner.module or ""] if isinstance(inner, ast.ImportFrom) else \
                    [alias.name for alias in inner.names]
                if all(name.split(".")[0] in HEAVY for name in names) or \
                        MARK in lines[inner.lineno - 1]:
                    continue
                found.append(f"{Path(path).relative_to(REPO)}:{inner.lineno}: "
                             f"{lines[inner.lineno - 1].strip()}")
    assert not found, "move to the module's top, or mark `" + MARK + "` and say why: " + \
        "; ".join(found)
