"""Options declared once, for the trainer's `Args` and the launcher's `JobFile`: one field
helper (`option`) and one reader of numbers as people type them (`number`), so a value means
the same, and is refused in the same words, on the command line, in a job file and in the
container. A bound (`Bound`) lives on the field that owns the value; whoever reads or builds
that value checks it through `number`. No TensorFlow, nothing of `launch/`."""

from __future__ import annotations

import dataclasses
import decimal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainer.common.errors import SettingsError

# Beyond any count, step or hour we take, and within a float's whole numbers: `1e400` is a
# typing slip, not a number of steps.
MAX_MAGNITUDE = 10**15


@dataclasses.dataclass(frozen=True)
class Bound:
    """The values a number may take. `above`: strictly more than `minimum`; `minimum_shown`:
    the minimum in words; `zero`: what 0 means, allowed below the minimum."""

    minimum: float | None = None
    above: bool = False
    maximum: float | None = None
    minimum_shown: str | None = None
    zero: str | None = None

    def words(self) -> str:
        """The least value in words: `more than 0`, `0 (no limit) or at least 1 minute`."""
        least = self.minimum_shown or f"{self.minimum:g}"
        bound = f"more than {least}" if self.above else f"at least {least}"
        return f"0 ({self.zero}) or {bound}" if self.zero else bound

    def symbols(self) -> str:
        """The least value for a help line: ` >= 1`, ` > 0`, ` 0 or >= 0.0167`."""
        if self.minimum is None:
            return ""
        least = f" > {self.minimum:g}" if self.above else f" >= {self.minimum:.3g}"
        return f" 0 or{least}" if self.zero else least

    def problem(self, number: float) -> str | None:
        """What is wrong with `number` here, in words after "must be" (None: nothing)."""
        if self.zero and number == 0:
            return None
        low = self.minimum
        if low is not None and (number <= low if self.above else number < low):
            return self.words()
        if self.maximum is not None and number > self.maximum:
            return f"at most {self.maximum:g}"
        return None


def option(help: str = "", *, default: Any = None, flag: str | None = None,
           choices: Sequence[str] | None = None, required: bool = False,
           always: bool = False, shown: str | None = None, bound: Bound | None = None,
           checked_as: tuple[type, str] | None = None, **owner: Any) -> Any:
    """A dataclass field that is also an option. `flag` names it where the field's name
    differs (a repeated `--config_file` fills `config_files`); `always` writes it even at its
    default (a job's spec then says what it runs); `shown` is the invoke task's flag for it,
    which messages name; `bound` limits a number. `checked_as=(Args, field)`: the value lands
    on that field, so it takes that field's bound and choices (one check, not a copy).
    `owner`: facts only the declaring class reads (a JobFile field's tasks and section)."""
    if checked_as:
        landing = field_of(*checked_as).metadata
        bound, choices = bound or landing["bound"], choices or landing["choices"]
    metadata = {"help": help, "flag": flag, "choices": choices, "required": required,
                "always": always or required, "shown": shown, "bound": bound, **owner}
    if isinstance(default, Mapping):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=metadata)
    if isinstance(default, (list, tuple)):
        return dataclasses.field(default=tuple(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_of(owner: type, name: str) -> dataclasses.Field:
    """The field `name` of the dataclass `owner`, where its option facts are read."""
    return next(field for field in dataclasses.fields(owner) if field.name == name)


def kind(annotation: object) -> type:
    """bool, int, float, tuple (repeatable), dict (KEY=VALUE) or str, from an annotation as
    written (`int | None`, `tuple[str, ...]`, `Mapping[str, Any]`) or a type."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__",
                                                                  str(annotation))
    if text.startswith(("Mapping", "dict")):
        return dict
    return next((k for k in (bool, int, float, tuple) if text.startswith(k.__name__)), str)


def number(value: object, wanted: type, shown: str, bound: Bound | None = None,
           fault: type[Exception] = SettingsError) -> Any:
    """`value` (text as typed, a YAML or JSON number, or a field's value) as a finite `wanted`
    (int or float) within `bound`, or `fault` naming `shown`, the flag as the user typed it.
    One answer everywhere: ` 5` and `1_000` are numbers, `1e1` is the whole number 10, `1.5`
    is none, and `nan`, `inf`, `0x10`, `true` and anything beyond 10**15 are not numbers."""
    word = "a whole number" if wanted is int else "a number"
    got = repr(value[:80]) if isinstance(value, str) else repr(value)[:80]  # as given
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise decimal.InvalidOperation
        exact = decimal.Decimal(value)
        if not exact.is_finite() or abs(exact) > MAX_MAGNITUDE:
            raise decimal.InvalidOperation
        if wanted is int and exact != exact.to_integral_value():
            raise decimal.InvalidOperation
    except (decimal.InvalidOperation, ValueError):
        raise fault(f"{shown} must be {word}, got {got}") from None
    result = int(exact) if wanted is int else float(exact)
    if bound and (problem := bound.problem(result)):
        raise fault(f"{shown} must be {problem}, got {got}")
    return result


def optional_number(value: object, wanted: type, shown: str, bound: Bound | None = None,
                    fault: type[Exception] = SettingsError) -> Any:
    """`number`, with None or "" (not given) as None."""
    return None if value is None or value == "" else number(value, wanted, shown, bound, fault)


def choice(value: str, choices: Sequence[str], shown: str,
           fault: type[Exception] = SettingsError) -> str:
    """`value` if it is one of `choices`, else `fault` naming `shown` and the choices."""
    if value not in choices:
        raise fault(f"{shown} must be one of {', '.join(choices)}, got "
                    f"{str(value)[:80]!r}")
    return value


def check_fields(values: object, shown: Callable[[str], str],
                 fault: type[Exception] = SettingsError) -> None:
    """Every set field of the dataclass `values` within its bound or among its choices,
    checked as `number` and `choice` read them (`shown(name)`: how messages name a field)."""
    for field in dataclasses.fields(values):
        bound, choices = field.metadata.get("bound"), field.metadata.get("choices")
        value = getattr(values, field.name)
        if bound and value is not None:
            number(value, kind(field.type), shown(field.name), bound, fault)
        if choices and value is not None:
            choice(value, choices, shown(field.name), fault)
