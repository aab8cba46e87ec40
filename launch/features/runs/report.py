"""Runs side by side: a table, plots (PNG) and one self-contained HTML page.

    table(records)              the text `invoke runs.compare` prints
    write_report(records, dir)  table.csv, ap_by_step.png, loss_by_step.png,
                                per_class_ap.png, pr_curve.png and report.html (the plots and
                                each run's worst validation images embedded, so the page can
                                be mailed or attached to a review as one file)
"""

from __future__ import annotations

import csv
import dataclasses
import html
from collections.abc import Callable, Sequence
from pathlib import Path

from launch.features.runs.record import RunRecord
from launch.plots import (
    PAGE_STYLE,
    embedded,
    embedded_plots,
    figure,
    grouped_bars,
    heatmap,
    html_table,
    text_table,
)
from launch.text import spreadsheet_cell
from trainer.common import jsonnum
from trainer.common.files import METRICS_DIR
from trainer.evaluation.analysis import SHOWN_SCORE
from trainer.model.experiments import AP_METRICS, MASK_AP_METRICS, MASK_PREFIX

MASK_COLUMNS = MASK_AP_METRICS[:3]  # mask AP, AP50, AP75: when a run shown has masks
RUN_COLUMNS = ("run", "experiment", "hardware", "steps", "wall time", "cost", "checkpoint")
# the operating point of the evaluation shown (trainer/evaluation/confusion.py): its score
# threshold and what it gives, when a run shown has one
OPERATING_COLUMNS = {"threshold": "threshold", "precision": "P", "recall": "R", "f1": "F1"}
MAX_PICTURED = 200  # classes of a confusion matrix still drawn (LVIS has 1,203)
# the test split's evaluation of the checkpoint shown (`invoke eval --split test`), when a
# run shown has one: its AP, AP50 and the F1 at its operating point
TEST_COLUMNS = {"AP": "test AP", "AP50": "test AP50", "f1": "test F1"}
# what a reader looks for first: the page puts these left of the other columns (on a phone, at
# the top of each run's card), so they are on screen without scrolling sideways
KEY_COLUMNS = ("run", "AP", *OPERATING_COLUMNS.values(), *TEST_COLUMNS.values())
PLOTS = {"ap_by_step.png": "AP against step", "loss_by_step.png": "Loss against step",
         "per_class_ap.png": "AP per class (the checkpoint shown)",
         "per_class_mask_ap.png": "Mask AP per class (the checkpoint shown)",
         "pr_curve.png": "Precision against recall at IoU 0.5 (the checkpoint shown)"}


def metrics(records: Sequence[RunRecord]) -> tuple[str, ...]:
    """The metric columns: COCO's box metrics, the masks' when a run has them, the
    operating point's when a run has one, and the test split's when a run has one."""
    masks = any(r.shown and MASK_COLUMNS[0] in r.shown.metrics for r in records)
    point = any(r.shown and r.shown.operating_point for r in records)
    test = any(r.shown_test for r in records)
    return (*AP_METRICS, *(MASK_COLUMNS if masks else ()),
            *(OPERATING_COLUMNS.values() if point else ()),
            *(TEST_COLUMNS.values() if test else ()))


def _values(record: RunRecord) -> dict[str, float]:
    """The numbers of the evaluation shown, by column: COCO's, the operating point's and
    the test split's."""
    if not record.shown:
        return {}
    point = record.shown.operating_point or {}
    test = record.shown_test
    on_test = {**test.metrics, **(test.operating_point or {})} if test else {}
    return {**record.shown.metrics,
            **{column: point[key] for key, column in OPERATING_COLUMNS.items() if key in point},
            **{column: on_test[key] for key, column in TEST_COLUMNS.items() if key in on_test}}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def row(record: RunRecord, shown_metrics: Sequence[str] = AP_METRICS) -> dict[str, str]:
    """The run's cells as printed: metrics of the evaluation shown (its best checkpoint's,
    unless --checkpoint says otherwise), 4 decimals."""
    shown = _values(record)
    return {"run": record.name, "experiment": record.experiment or "-",
            "hardware": record.hardware or "-",
            "steps": "-" if record.steps is None else str(record.steps),
            "wall time": _duration(record.seconds), "cost": record.cost or "-",
            "checkpoint": record.shown_as,
            # COCO's -1: no object of that size to measure
            **{m: f"{shown[m]:.4f}" if shown.get(m, -1) >= 0 else "-" for m in shown_metrics}}


def stops(records: Sequence[RunRecord]) -> list[str]:
    """`RUN: stopped early at step S: ...` for each run that stopped early."""
    return [f"{record.name}: {record.stopped}" for record in records if record.stopped]


def rows(records: Sequence[RunRecord]) -> tuple[list[dict[str, str]], tuple[str, ...]]:
    """Each run's cells, and the columns."""
    shown_metrics = metrics(records)
    return [row(r, shown_metrics) for r in records], (*RUN_COLUMNS, *shown_metrics)


def page_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """The table's columns on the page: KEY_COLUMNS (those shown) first, then the rest."""
    key = [c for c in KEY_COLUMNS if c in columns]
    return (*key, *(c for c in columns if c not in key))


def table(records: Sequence[RunRecord]) -> str:
    return "\n".join([text_table(*rows(records)), *stops(records)])


def _lines(records: Sequence[RunRecord], points: Callable[[RunRecord], list]) -> Callable:
    def draw(axes) -> bool:
        drawn = False
        for record in records:
            if found := points(record):
                xs, ys = zip(*found, strict=True)
                axes.plot(xs, ys, marker="o" if len(xs) < 30 else None, label=record.name)
                drawn = True
        return drawn
    return draw


def _per_class(records: Sequence[RunRecord], metric: str) -> Callable:
    def draw(axes) -> bool:
        having = [r for r in records if r.shown and
                  any(metric in values for values in r.shown.per_class.values())]
        classes = sorted({c for r in having for c in r.shown.per_class})
        if not classes or not having:
            return False
        grouped_bars(axes, classes, [
            (record.name, [record.shown.per_class.get(c, {}).get(metric, 0.0)
                           for c in classes])
            for record in having])
        axes.set_ylim(0, 1)
        return True
    return draw


def _pr(record: RunRecord) -> list:
    curve = record.shown.pr_curve if record.shown else None
    return list(zip(curve["recall"], curve["precision"], strict=True)) if curve else []


def write_plots(records: Sequence[RunRecord], out: Path) -> dict[str, Path]:
    """The plots that have data, by file name."""
    out.mkdir(parents=True, exist_ok=True)
    drawers = {
        "ap_by_step.png": (_lines(records, lambda r: [(e.step, e.metrics["AP"])
                                                      for e in r.evaluations
                                                      if "AP" in e.metrics]), "step", "AP"),
        "loss_by_step.png": (_lines(records, lambda r: list(r.losses)), "step", "total loss"),
        "per_class_ap.png": (_per_class(records, "AP"), "class", "AP"),
        "per_class_mask_ap.png": (_per_class(records, f"{MASK_PREFIX}AP"), "class", "mask AP"),
        "pr_curve.png": (_lines(records, _pr), "recall", "precision"),
    }
    return {name: out / name for name, (draw, x, y) in drawers.items()
            if figure(draw, out / name, PLOTS[name], x, y)}


def write_table(records: Sequence[RunRecord], path: Path) -> None:
    """Every number at full precision, for spreadsheets."""
    shown_metrics = metrics(records)
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow([*RUN_COLUMNS[:3], "steps", "seconds", "cost", "step evaluated",
                         *shown_metrics])
        for r in records:
            shown = _values(r)
            writer.writerow([spreadsheet_cell(cell) for cell in (
                r.name, r.experiment or "", r.hardware or "", r.steps or "", r.seconds or "",
                r.cost or "", r.shown.step if r.shown else "",
                *(shown.get(m, "") for m in shown_metrics))])


def _worst(record: RunRecord) -> str:
    """The run's worst validation images (the evaluation shown) with what went wrong."""
    if not record.shown or not record.shown.worst_images:
        return "<p>No worst images recorded (evaluated before the report existed?).</p>"
    eval_dir = (record.path / METRICS_DIR).resolve()
    cells = []
    for image in record.shown.worst_images:
        picture = str(image.get("picture", ""))
        path = (eval_dir / picture).resolve()
        if not picture or not path.is_relative_to(eval_dir) or not path.is_file():
            continue  # a name from the file that points elsewhere is not followed
        overlap = "mask IoU" if image.get("overlap") == "mask" else "IoU"
        caption = (f"{image.get('key', '?')}: {image.get('missed', '?')} of "
                   f"{image.get('objects', '?')} missed, mean {overlap} "
                   f"{_fraction(image.get('mean_iou'))}, {image.get('extra', '?')} extra")
        cells.append(f'<figure><img src="{embedded(path, "jpeg")}" alt="">'
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    return f'<p>{_drawn_at(record)}</p><div class="gallery">{"".join(cells)}</div>' \
        if cells else "<p>The worst images' files are missing.</p>"


def _drawn_at(record: RunRecord) -> str:
    """The score the run's worst images were drawn (and their errors counted) at: the
    operating point's, recorded with each picture; SHOWN_SCORE for an evaluation from before
    the gallery followed the operating point (it recorded none)."""
    found = {jsonnum.number(image.get("score", SHOWN_SCORE))
             for image in record.shown.worst_images}
    score = found.pop() if len(found) == 1 else None
    if score is None or not 0 <= score <= 1:
        return "Drawn at a score the evaluation does not record."
    point = record.shown.operating_point
    there = " (the operating point above)" if point and score == point["threshold"] else ""
    return f"Coloured: detections scored {score:.3g} or more{there}."


def write_confusion(records: Sequence[RunRecord], out: Path) -> list[Path | None]:
    """Each run's confusion matrix at its operating point (None: it has none), in order."""
    pictures: list[Path | None] = []
    for k, record in enumerate(records, 1):
        point = record.shown.operating_point if record.shown else None
        if point and len(point["classes"]) > MAX_PICTURED:  # the table below says it all
            point = None
        path = out / f"confusion-{k}.png"
        drawn = point and figure(
            lambda axes, p=point: heatmap(axes, p["confusion"], p["classes"]) or True, path,
            f"{record.name}: score >= {point['threshold']:.3g}", "detected as", "object",
            legend=False)
        pictures.append(path if drawn else None)
    return pictures


def _operating(record: RunRecord, picture: Path | None) -> str:
    """The run's operating point: the matrix, and each class's P/R/F1 there and at its own
    best threshold."""
    point = record.shown.operating_point if record.shown else None
    if not point:
        return "<p>No operating point recorded (evaluated before it existed?).</p>"
    overlap = "mask IoU" if point["overlap"] == "mask" else "IoU"
    rows = [{"class": name, "P": _fraction(v["precision"]), "R": _fraction(v["recall"]),
             "F1": _fraction(v["f1"]), "its best threshold": f"{v['best_threshold']:.3g}",
             "F1 there": _fraction(v["best_f1"])} for name, v in point["per_class"].items()]
    return (f"<p>At score {point['threshold']:.3g} ({overlap} {point['iou']:g}): precision "
            f"{_fraction(point['precision'])}, recall {_fraction(point['recall'])}, F1 "
            f"{_fraction(point['f1'])}.</p>"
            + (f'<div class="plots"><img src="{embedded(picture, "png")}" '
               'alt="confusion matrix"></div>' if picture else "")
            + html_table(rows, ("class", "P", "R", "F1", "its best threshold", "F1 there")))


def _fraction(value) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "?"


STYLE = PAGE_STYLE + """.gallery{display:flex;flex-wrap:wrap;gap:8px}
figure{margin:0;width:256px}figure img{width:256px}figcaption{font-size:12px}"""


def write_html(records: Sequence[RunRecord], plots: dict[str, Path], path: Path,
               confusions: Sequence[Path | None] = ()) -> None:
    galleries = "".join(f"<h3>{html.escape(r.name)}</h3>{_worst(r)}" for r in records)
    points = "".join(f"<h3>{html.escape(r.name)}</h3>{_operating(r, picture)}"
                     for r, picture in zip(records, confusions or [None] * len(records),
                                           strict=True))
    said = [f"{r.name}: no evaluation" for r in records if not r.evaluations] + \
        stops(records)
    notes = "".join(f"<li>{html.escape(m)}</li>" for m in said)
    shown, columns = rows(records)
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>Runs compared</title>"
        f"<style>{STYLE}</style></head><body><h1>Runs compared</h1>"
        f"{html_table(shown, page_columns(columns), cards=True)}"
        f"{f'<ul>{notes}</ul>' if notes else ''}"
        f"<h2>Curves</h2><div class='plots'>{embedded_plots(plots, PLOTS)}</div>"
        f"<h2>Operating point</h2><p>The score threshold with the best F1 over every "
        f"class, and the confusion matrix there: each object by row (what it was), each "
        f"detection by column (what it was detected as); the background row counts "
        f"detections of nothing, the background column objects missed. Each cell holds a "
        f"count; its colour is its share of the row (of that class's objects), so a rare "
        f"class's row reads as plainly as a common one's.</p>{points}"
        f"<h2>Worst validation images</h2><p>White: ground truth; coloured: detections at "
        f"the run's operating point (and their masks, for a mask experiment). Worst first: "
        f"objects missed, then poorer boxes (masks, for a mask experiment).</p>{galleries}"
        "</body></html>\n")


@dataclasses.dataclass(frozen=True)
class Report:
    table: str
    directory: Path
    plots: dict[str, Path]

    def summary(self) -> str:
        return (f"{self.table}\n\nreport: {self.directory / 'report.html'} "
                f"({len(self.plots)} plots, table.csv)")


def write_report(records: Sequence[RunRecord], out: Path) -> Report:
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(records, out)
    write_table(records, out / "table.csv")
    write_html(records, plots, out / "report.html", write_confusion(records, out))
    return Report(table(records), out, plots)
