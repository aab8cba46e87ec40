"""Checks on converted data that are worth refusing a training run for, from the records'
metadata alone (the conversion report and the label map beside them): fast enough to run
before every `invoke train` and in `invoke doctor`.

Refused (unless --force): the label map and the records disagree, or a class has validation
objects but no training example (its AP is 0 however long the run). Warned: a class with few
training examples, one that validation never measures, one the held-out test split has but
training never sees, label-map classes without examples (named), names that differ only in
case or spacing. A dataset without a test split is checked on train and val alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from trainer.common.files import TEST, TRAIN, VAL
from trainer.data import label_map
from trainer.data.label_map import alike

FEW_EXAMPLES = 10  # training images of a class below which it is flagged
MASKS_ENTRY = "masks"  # the conversion report's: whether its records have instance masks


@dataclasses.dataclass(frozen=True)
class Finding:
    refuse: bool  # False: a warning
    text: str


def listed(names, limit: int = 5) -> str:
    """Sorted names, the first `limit` of them and how many more: a check's line lists
    fewer than label_map's messages do."""
    return label_map.listed(names, limit)


def lacks_masks(report: Mapping) -> bool:
    """Whether the conversion report says its records have no instance masks (a report
    written before it said so says nothing: the trainer reads the records themselves)."""
    return report.get(MASKS_ENTRY) is False


def masks_missing(experiment: str, where: str) -> str:
    """The refusal of a mask experiment given records without masks, launcher and trainer
    alike: it could not even read them."""
    return (f"--experiment {experiment} trains instance masks, but the records in {where} "
            "have none: convert the data with masks (`invoke data.convert --masks`, or "
            "`python -m trainer data convert --masks`)")


def findings(report: Mapping, label_map: Mapping[str, int]) -> list[Finding]:
    """What the conversion report and the label map the trainer will read say, refusals
    first."""
    classes = report.get("classes")
    converted_with = report.get("label_map_ids")
    if not isinstance(classes, Mapping) or not isinstance(converted_with, Mapping):
        return [Finding(False, "the conversion report predates the data checks: run "
                               "`invoke data.convert` again to have them")]
    out = []
    if dict(converted_with) != dict(label_map):
        changed = {n for n in set(converted_with) | set(label_map)
                   if converted_with.get(n) != label_map.get(n)}
        out.append(Finding(True, f"the label map and the records disagree on "
                                 f"{listed(changed)}: the records were written with another "
                                 "label map; convert again, or restore the label map the "
                                 "conversion wrote"))
    train, val, test = ({n for n, c in found.items() if isinstance(c, Mapping) and
                         c.get("objects")} if isinstance(found := classes.get(split), Mapping)
                        else set() for split in (TRAIN, VAL, TEST))
    if unknown := (train | val | test) - set(label_map):
        out.append(Finding(True, f"classes in the records are not in the label map: "
                                 f"{listed(unknown)}"))
    if untrained := val - train:
        out.append(Finding(True, f"{listed(untrained)}: validation objects but no training "
                                 "example (their AP is 0 however long training runs); "
                                 "relabel, or re-split so each class is in train"))
    few = {n for n in train if (classes["train"][n].get("images") or 0) < FEW_EXAMPLES}
    if few:
        out.append(Finding(False, f"few training images (under {FEW_EXAMPLES}): "
                                  f"{listed(few)}"))
    if unmeasured := train - val:
        out.append(Finding(False, f"no validation objects, so no AP, for {listed(unmeasured)}"))
    if untested := test - train - val:
        out.append(Finding(False, f"{listed(untested)}: test objects but no training example "
                                  "(their test AP is 0)"))
    if unused := set(label_map) - train - val - test:
        out.append(Finding(False, f"label-map classes without any example, never learnt or "
                                  f"measured: {listed(unused)}"))
    for group in alike(label_map):
        out.append(Finding(False, f"class names that differ only in case or spacing are "
                                  f"separate classes: {', '.join(group)}"))
    return sorted(out, key=lambda finding: not finding.refuse)
