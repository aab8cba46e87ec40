"""Datasets of any registered format (`trainer.data.formats`) -> sharded TFRecords, a label
map and a conversion report: the converter's core, the same for every format. It plans the
sources, has the shards written (`shards`, each example by `example`), writes the label map
and the report, and swaps the output in (`output_dir`); the `data convert` entry points.

Conversion never crashes on one bad example and never drops one silently: each example is
written, repaired and written, or skipped, and every repair and skip is counted by reason in
`conversion_report.json` beside the records. Everything it reads is treated as hostile: the
names in the split lists, the numbers in the XML, the image bytes. Its memory is bounded
whatever the labels hold: every planner and this core share one set of caps and parse one
label file at a time (planning.Limits states the bound).

Output is deterministic (the same input gives byte-identical files whatever the number of
processes, in any process) and all or nothing: the records are written into a temporary
sibling of the output directory and swapped in only when complete, so an error, Ctrl-C or a
killed run leaves the previous output exactly as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from trainer.common import files
from trainer.common.errors import ConversionError, ConversionFailed, SettingsError
from trainer.data import changes, checks, defaults, formats
from trainer.data.example import Classes
from trainer.data.label_map import alike, listed, write_label_map
from trainer.data.output_dir import check_replaceable, remove_abandoned, swap_in
from trainer.data.planning import Limits, Split, SplitPlan, check_split, resplit
from trainer.data.problems import ACTIONS, Problem, ProblemLog
from trainer.data.reasons import CORE, explain
from trainer.data.shards import ClassCounts, plan_shards, write_all

# the report keys of the checks on the whole conversion: their meanings are the core's
REASONS = {key: CORE[key] for key in ("class_names_alike",)}

def record_pattern(output_dir: str | Path, split: str) -> str:
    """The glob of a split's shards; the trainer reads the same pattern."""
    return str(Path(output_dir) / files.shard_glob(split))


def _summarise(report: dict) -> str:
    classes = report["label_map_ids"]
    lines = [f"wrote {report['written']} examples: " + ", ".join(
        f"{split} {info['examples']}" for split, info in report["splits"].items()),
        f"{len(classes)} class{'' if len(classes) == 1 else 'es'} from "
        f"{report['classes_from']}: {listed(classes)}"]
    for action in ACTIONS:
        counts = report[action]
        if counts:
            total = sum(counts.values())
            detail = ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items()))
            lines.append(f"{action} {total}: {detail}")
    lines.append(f"details: {report['report_path']}")
    return "\n".join(lines)


# -------------------------------------------------------------------------- writing


def _write_splits(plan: SplitPlan, classes: Classes, staging: Path, num_shards: int,
                  processes: int, limits: Limits, progress: bool
                  ) -> tuple[dict[str, int], ProblemLog, dict]:
    """Each split's shards into `staging`; returns the examples written per split, the
    problems (planning's first, then each split's in input order; where: (split, example))
    and each split's images and objects per class, written and (with --classes) before."""
    from tqdm import tqdm

    shards = plan_shards(plan, staging, num_shards)
    total = sum(len(sources) for sources in plan.splits.values())
    with tqdm(total=total, desc="converting", unit="img", disable=not progress) as bar:
        results = write_all(shards, classes, limits, processes, bar.update)
    problems = classes.renamed()
    problems.extend([plan.problems])
    written, counts = {}, {}
    for split in plan.splits:
        done = [r for shard, r in zip(shards, results, strict=True) if shard.split == split]
        written[split] = sum(r.examples for r in done)
        problems.extend([r.problems for r in done], order=lambda where: where[0],
                        relabel=lambda where, problem, split=split: ((split, where[1]), problem))
        counts.setdefault("classes", {})[split] = ClassCounts.table([r.classes for r in done])
        counts.setdefault("background", {})[split] = sum(r.background for r in done)
        counts.setdefault("classes_before", {})[split] = ClassCounts.table(
            [r.before for r in done])
    return written, problems, counts


def convert(
    plan: SplitPlan,
    label_map: Mapping[str, int] | Classes,
    output_dir: str | Path,
    num_shards: int = defaults.NUM_SHARDS,
    processes: int | None = None,
    progress: bool = True,
    limits: Limits | None = None,
    reasons: Mapping[str, str] | None = None,
    classes_from: str = "the label map given",
    say: Callable[[str], None] = print,
) -> dict:
    """Writes each split's shards, the label map and the report, swapping them in for the
    previous output only when all is written; returns the report. The report's `reasons`
    explains each key it counts: the core's (`reasons.CORE`), the formats' from `reasons`;
    its `classes_from` says where the label map's classes came from. `say` takes the
    summary (label.pull, which converts into a folder it renames, says its own)."""
    if problem := defaults.num_shards_problem(num_shards):
        raise SettingsError(problem)
    limits = limits or Limits()
    # train, val, then a test split when one is planned (none: no test records at all)
    splits = {split: sources for split, sources in plan.splits.items() if split != files.TEST}
    if plan.splits.get(files.TEST):
        splits[files.TEST] = plan.splits[files.TEST]
    plan = dataclasses.replace(plan, splits=splits)
    output_dir = Path(output_dir).resolve()
    check_replaceable(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(output_dir)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.partial-{os.getpid()}-",
                                    dir=output_dir.parent))
    try:
        classes = label_map if isinstance(label_map, Classes) else Classes.of(label_map)
        flagged = ProblemLog.of((("classes", group[0]), Problem(
            "class_names_alike", "flagged", f"{', '.join(map(repr, group))} differ only in case "
            f"or spacing and are {len(group)} classes: if they are one, merge them with a "
            "--classes file's rename")) for group in alike(classes.written()))
        merged = ProblemLog()
        merged.extend([plan.problems, flagged])
        written, problems, counts = _write_splits(
            dataclasses.replace(plan, problems=merged), classes, staging, num_shards,
            processes or os.cpu_count() or 1, limits, progress)
        write_label_map(classes.written(), staging / files.DATA_LABEL_MAP_FILE)
        total = sum(written.values())
        # nothing valid: the previous output stays, and the report goes beside it
        report_path = output_dir / files.CONVERSION_REPORT_FILE if total else \
            output_dir.with_name(f"{output_dir.name}.{files.CONVERSION_REPORT_FILE}")
        report = _report(written, problems, output_dir, num_shards, limits, report_path)
        report.update({"classes": counts["classes"], "label_map_ids": classes.written(),
                       "classes_from": classes_from, checks.MASKS_ENTRY: plan.masks})
        if any(counts["background"].values()):  # images labelled as showing no object
            report["background_images"] = counts["background"]
        if found := explain({key for action in ACTIONS for key in report[action]},
                            reasons or {}):
            report["reasons"] = found
        if classes.aliases or classes.dropped:  # --classes
            report.update({"classes_before": counts["classes_before"], "class_changes": {
                "renamed": dict(sorted(classes.aliases.items())),
                "dropped": sorted(classes.dropped)}})
        (staging / files.CONVERSION_REPORT_FILE if total else report_path).write_text(
            json.dumps(report, indent=2) + "\n")
        say(_summarise(report))
        if total == 0:
            raise ConversionFailed(f"no valid example to write; see {report['report_path']}")
        swap_in(staging, output_dir)
        return report
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        shutil.rmtree(staging, ignore_errors=True)  # first: the free space is then the disk's
        raise ConversionFailed(_disk_full(plan, output_dir.parent)) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _disk_full(plan: SplitPlan, where: Path) -> str:
    """The full disk's line: where, about how much the records need (the images' size:
    records hold the encoded images as read, most of their bytes) and how much is free
    with the partial output removed."""
    needed = 0
    for source in (source for sources in plan.splits.values() for source in sources):
        with contextlib.suppress(OSError):  # an unreadable image is skipped: writes nothing
            needed += source.image_path.stat().st_size
    return (f"the disk of {where} is full: the records need about {_size(needed)} (the "
            f"images' size) and {_size(shutil.disk_usage(where).free)} is free there; free "
            "some space or convert to another disk (--output-dir). Nothing was replaced")


def _size(count: int) -> str:
    return f"{count / (1 << 20):,.1f} MiB"


def _report(written: Mapping[str, int], problems: ProblemLog, output_dir: Path,
            num_shards: int, limits: Limits, report_path: Path) -> dict:
    listed = [{"example": name, "split": split, **dataclasses.asdict(problem)}
              for (split, name), problem in problems.listed]
    return {
        "written": sum(written.values()),
        "splits": {split: {"examples": n, "pattern": record_pattern(output_dir, split)}
                   for split, n in written.items()},
        "num_shards": num_shards,
        "limits": dataclasses.asdict(limits),
        "label_map": str(output_dir / files.DATA_LABEL_MAP_FILE),
        **{action: dict(sorted(problems.counts[action].items())) for action in ACTIONS},
        "problems": listed,  # the first MAX_LISTED_PER_REASON of each reason; counts above
        "problems_not_listed": len(problems) - len(listed),
        "report_path": str(report_path),
    }


def plan_sources(inputs: Sequence[formats.Input], options: formats.Options
                 ) -> formats.Planned:
    """Each source planned by its format; several merged into one (`changes.merge`)."""
    planned = [(given, formats.FORMATS[given.format].plan(given, options)) for given in inputs]
    if len(planned) == 1:
        return planned[0][1]
    plan, label_map = changes.merge(planned)
    return formats.Planned(plan, label_map, "the sources' classes merged by name ("
                           + "; ".join(f"{given}: {p.classes_from}" for given, p in planned)
                           + ")", frozenset().union(*(p.labelled for _, p in planned)))


def _check_label_map(label_map: Mapping[str, int], planned: formats.Planned) -> None:
    """A --label-map must hold every class the data's labels name: one it lacks would have
    each of its objects dropped (and an image of only those skipped), so it is refused."""
    if missing := planned.labelled - set(label_map):
        raise SettingsError(
            f"--label-map lacks {listed(missing)}, which the data names (its classes: "
            f"{listed(planned.labelled)}): add them to the label map, or leave --label-map "
            "out to take the classes from the data (--classes renames, drops or keeps some)")


def convert_sources(inputs: Sequence[formats.Input], output_dir: str | Path,
                    options: formats.Options | None = None,
                    label_map: Mapping[str, int] | None = None,
                    class_changes: changes.ClassChanges | None = None, **convert_options) -> dict:
    """`data convert`: plans every source, applies the class and split changes, converts.
    The label map is the data's (merged by name), `label_map` instead when given."""
    if label_map and class_changes:
        raise SettingsError(f"{class_changes.where} and --label-map: give one (--classes "
                            "makes the label map from the data's)")
    options = options or formats.Options()
    if "limits" in convert_options:  # one set of caps for the planners and the core
        options = dataclasses.replace(options, limits=convert_options.pop("limits"))
    planned = plan_sources(inputs, options)
    plan, found = planned.plan, planned.label_map
    if label_map:
        _check_label_map(label_map, planned)
    if len(inputs) > 1 and options.split.given:
        plan = resplit(plan, options.split)
    plan = changes.hold_out_test(plan)  # no test image in train or val, by its bytes either
    check_split(plan, options.split)
    classes = Classes.of(label_map or found)
    classes_from = "--label-map" if label_map else planned.classes_from
    if class_changes:
        classes = Classes.of(*class_changes.apply(found))
        classes_from = f"{planned.classes_from}, changed by {class_changes.where}"
    reasons = {key: text for given in inputs
               for key, text in formats.FORMATS[given.format].REASONS.items()}
    return convert(plan, classes, output_dir, reasons=reasons, limits=options.limits,
                   classes_from=classes_from, **convert_options)


def convert_coco(annotations: str | Path, images_dir: str | Path, output_dir: str | Path,
                 val_annotations: str | Path | None = None, masks: bool = False,
                 dense_ids: bool = False, label_map: Mapping[str, int] | None = None,
                 split: Split | None = None, test_annotations: str | Path | None = None,
                 **options) -> dict:
    """`data convert --format coco`: the label map from the categories unless given."""
    return convert_sources([formats.Input("coco", annotations=Path(annotations),
                                          images=Path(images_dir),
                                          val_annotations=Path(val_annotations)
                                          if val_annotations else None,
                                          test_annotations=Path(test_annotations)
                                          if test_annotations else None)],
                           output_dir, formats.Options(masks, dense_ids, split or Split()),
                           label_map, **options)


def convert_directory(data_dir: str | Path, output_dir: str | Path, format: str = "pets",
                      masks: bool = False, label_map: Mapping[str, int] | None = None,
                      split: Split | None = None, **options) -> dict:
    """`data convert` of a format read from one directory (all but COCO)."""
    if format == "coco":
        raise ConversionError(f"a {format!r} dataset is not a directory layout")
    return convert_sources([formats.Input(format, Path(data_dir))], output_dir,
                           formats.Options(masks, split=split or Split()), label_map, **options)
