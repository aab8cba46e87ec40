"""The pipeline's graph as a picture, from its compiled spec: each step a box, each condition a
frame around the steps it guards, arrows for what waits for what. Drawn with matplotlib (no
Graphviz on the machines this runs on), so the docs' picture is the spec's, not a drawing of
it by hand.
"""

from __future__ import annotations

import dataclasses
import itertools
import textwrap
from pathlib import Path

import yaml

PICTURE = Path(__file__).parents[3] / "docs" / "images" / "pipeline.png"  # the docs' copy


@dataclasses.dataclass(frozen=True)
class Step:
    name: str  # the task's name in the spec
    label: str  # what the picture says
    group: str  # the condition it sits in ("" for none)
    after: tuple[str, ...]


def steps(spec_text: str) -> tuple[list[Step], dict[str, str]]:
    """The spec's steps in the order they run (a condition's steps where the condition is),
    and each condition group's condition."""
    spec = yaml.safe_load(spec_text)
    groups: dict[str, str] = {}

    def walk(dag: dict, group: str) -> list[Step]:
        pending = dict(dag["tasks"])
        done: list[Step] = []
        while pending:  # a task after everything it waits for, at this level
            name = next((n for n, task in pending.items()
                         if set(task.get("dependentTasks", [])) <= {s.name for s in done}),
                        None)
            if name is None:
                raise ValueError("the pipeline's steps wait for each other in a circle")
            task = pending.pop(name)
            component = spec["components"][task["componentRef"]["name"]]
            done.append(Step(name, task.get("taskInfo", {}).get("name", name), group,
                             tuple(sorted(task.get("dependentTasks", [])))))
            if "dag" in component:  # a condition: its steps follow it
                groups[name] = task.get("triggerPolicy", {}).get("condition", "")
                done += walk(component["dag"], name)
        return done

    return walk(spec["root"]["dag"], ""), groups


def draw(spec_text: str, path: str | Path) -> Path:
    """The picture of the pipeline, left to right, written to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    order, groups = steps(spec_text)
    boxes = [s for s in order if s.name not in groups]
    depth = {s.name: 0 for s in order}
    for s in order:  # how many conditions deep
        depth[s.name] = depth[s.group] + 1 if s.group else 0
    width = 2.2
    x = {s.name: i * width for i, s in enumerate(boxes)}
    figure, axes = plt.subplots(figsize=(width * len(boxes) * 0.95, 3.2), dpi=110)
    for name in groups:
        inside = [b for b in boxes if _within(b, name, order)]
        left, right = min(x[b.name] for b in inside), max(x[b.name] for b in inside)
        level = depth[name]
        axes.add_patch(FancyBboxPatch(
            (left - 0.95 + 0.08 * level, -0.9 + 0.12 * level),
            right - left + 1.9 - 0.16 * level, 1.8 - 0.24 * level + 0.55,
            boxstyle="round,pad=0.02", fill=False, linestyle="--", edgecolor="#888888"))
        label = next(s.label for s in order if s.name == name).replace("-", " ")
        axes.text(left - 0.85 + 0.08 * level, 1.35 - 0.12 * level, f"only if {label}",
                  fontsize=8, color="#555555")
    for step in boxes:
        axes.add_patch(FancyBboxPatch((x[step.name] - 0.8, -0.4), 1.6, 0.8,
                                      boxstyle="round,pad=0.05", facecolor="#e8f0fe",
                                      edgecolor="#1a73e8"))
        axes.text(x[step.name], 0, textwrap.fill(step.label, 14), ha="center",
                  va="center", fontsize=8)
    for left, right in itertools.pairwise(boxes):
        axes.annotate("", xy=(x[right.name] - 0.85, 0), xytext=(x[left.name] + 0.85, 0),
                      arrowprops={"arrowstyle": "->", "color": "#444444"})
    axes.set_xlim(-1.1, x[boxes[-1].name] + 1.1)
    axes.set_ylim(-1.1, 1.7)
    axes.axis("off")
    out = Path(path)
    figure.savefig(out, bbox_inches="tight")
    plt.close(figure)
    return out


def _within(step: Step, group: str, order: list[Step]) -> bool:
    by_name = {s.name: s for s in order}
    while step.group:
        if step.group == group:
            return True
        step = by_name[step.group]
    return False
