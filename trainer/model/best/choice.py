"""`--checkpoint best | latest | STEP | PATH`: which checkpoint export, TFLite and the
launcher's features use. Its own module because it only reads best/ (`keeping.read_best`) and
is what most callers need."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

from trainer.common import files, io
from trainer.common.errors import JsonError, SettingsError
from trainer.model import model_dir as model_dir_lib
from trainer.model.best.keeping import Best, best_dir, read_best

BEST, LATEST = "best", "latest"


@dataclasses.dataclass(frozen=True)
class Choice:
    """What `--checkpoint` asks for: the best (the default), the newest, a step, or (the
    trainer's tools only) a checkpoint prefix."""

    kind: str = BEST  # BEST, LATEST, "step" or "path"
    step: int | None = None
    path: str | None = None

    @classmethod
    def parse(cls, text: str | None, flag: str = "--checkpoint", paths: bool = True
              ) -> Choice:
        """`best` (or nothing), `latest`, `1200`, `ckpt-1200`, or with `paths` a prefix
        (`.../ckpt-1200`); SettingsError naming `flag` for anything else."""
        text = (text or BEST).strip()
        if text in (BEST, LATEST):
            return cls(text)
        match = files.CHECKPOINT_NAME.fullmatch(text)
        if text.isdigit() or match:
            return cls("step", int(text if text.isdigit() else match[1]))
        if paths and "/" in text.rstrip("/"):
            return cls("path", path=text.rstrip("/"))
        where = ", or a checkpoint prefix (.../ckpt-1200)" if paths else ""
        raise SettingsError(f"{flag} {text[:80]!r}: give best (the default), latest, a step "
                            f"(1200) or a checkpoint name (ckpt-1200){where}")

    def __str__(self) -> str:
        if self.kind == "step":
            return files.checkpoint_name(self.step)
        return self.path if self.kind == "path" else self.kind


DEFAULT_CHOICE = Choice()


@dataclasses.dataclass(frozen=True)
class Chosen:
    path: str  # the checkpoint prefix
    choice: str  # BEST or LATEST as decided (a fallback says LATEST), or "asked"
    reason: str  # for people: the record of an export says it


def note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr, flush=True)


def choose(model_dir: str, choice: Choice, model=None, say: Callable[[str], None] = note
           ) -> Chosen:
    """The checkpoint `choice` names in `model_dir`, checked to restore (into `model`, when
    given). The best falls back to the newest, saying why, in a run that keeps none."""
    if choice.kind == "path":
        return Chosen(model_dir_lib.export_checkpoint(model_dir, choice.path, model),
                      "asked", f"{choice.path}, as asked (--checkpoint)")
    if choice.kind == "step":
        prefix = f"{model_dir}/{choice}"
        kept = _readable_best(model_dir, say)
        if not io.exists(f"{prefix}.index") and kept and kept.step == choice.step:
            prefix = f"{best_dir(model_dir)}/{kept.checkpoint}"  # rotated away, kept as best
        return Chosen(model_dir_lib.export_checkpoint(model_dir, prefix, model), "asked",
                      f"{choice}, as asked (--checkpoint)")
    if choice.kind == BEST:
        kept = _readable_best(model_dir, say)
        if kept is None:
            say(f"{model_dir} keeps no best checkpoint yet ({files.BEST_DIR}/"
                f"{files.BEST_FILE} is written when a checkpoint is evaluated): using the "
                "newest")
        else:
            prefix = f"{best_dir(model_dir)}/{kept.checkpoint}"
            problem = model_dir_lib.checkpoint_problem(prefix, model)
            if problem is None:
                return Chosen(prefix, BEST, f"the best evaluated: {kept.describe()}")
            say(f"the best checkpoint {prefix} cannot be restored ({problem}): using the "
                "newest")
        return Chosen(model_dir_lib.export_checkpoint(model_dir, None, model), LATEST,
                      "the newest that restores (no usable best checkpoint)")
    return Chosen(model_dir_lib.export_checkpoint(model_dir, None, model), LATEST,
                  "the newest that restores (--checkpoint latest)")


def _readable_best(model_dir: str, say: Callable[[str], None]) -> Best | None:
    try:
        return read_best(model_dir)
    except JsonError as error:
        say(str(error))
        return None
