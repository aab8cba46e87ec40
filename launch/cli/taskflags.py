"""How `tasks.py` declares its flags: invoke's `@task` with the choices this project makes
once. No automatic short flags (`-h` stays help, and one letter never means two things);
every option's help shows its type and default; numbers are parsed here, so `--steps abc`
is one line naming the flag (exit 2), not invoke's traceback. `job_task` builds train, tune
and eval from the fields of `launch.values.jobfile.JobFile`, the one place they are declared."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from invoke import Exit
from invoke import task as invoke_task

from launch.values import jobfile
from trainer import options
from trainer.errors import SettingsError

KIND_WORDS = {bool: "", int: "whole number", float: "number", str: "text",
              tuple: "repeatable", dict: "KEY=VALUE, repeatable"}


def describe(help: str, kind: type, default: Any, bound: str = "") -> str:
    """`help [type; default X]`: what invoke prints beside the flag."""
    facts = [f"{KIND_WORDS[kind]}{bound}".strip()]
    unset = default is None or default is False or (not isinstance(default, (int, float))
                                                     and not default)
    if not unset and "default" not in help:
        facts.append(f"default {default:g}" if isinstance(default, float)
                     else f"default {default}")
    shown = "; ".join(fact for fact in facts if fact)
    return f"{help} [{shown}]" if shown else help


def _number(name: str, value: Any, kind: type) -> int | float:
    try:
        return options.number(value, kind, jobfile.flag(name))
    except SettingsError as error:
        raise Exit(f"error: {error}", code=2) from None


def task(*args, help: Mapping[str, str] | None = None, **kwargs):
    """invoke's `@task` (with or without options), as described above."""
    def decorate(body: Callable) -> Any:
        signature = inspect.signature(body)
        kinds = {name: tuple if name in kwargs.get("iterable", ()) else _kind(parameter)
                 for name, parameter in signature.parameters.items()}
        numbers = {name: kind for name, kind in kinds.items() if kind in (int, float)}
        # `model_upload` is `model.upload` (a collection's task, renamed by name=)
        shown_as = body.__name__.replace("_", ".", 1) if "name" in kwargs else body.__name__
        required = [name for name, parameter in list(signature.parameters.items())[1:]
                    if parameter.default is inspect.Parameter.empty]
        texts = {name: describe(text, kinds[name], signature.parameters[name].default)
                 for name, text in (help or {}).items()}

        @functools.wraps(body)
        def run(context, *positional, **values):
            given = {**dict(zip(required, positional, strict=False)), **values}
            for name in required:  # invoke gives a positional the next word, even `--help`
                if (value := str(given.get(name, ""))).startswith("-"):
                    raise Exit(f"error: --{name.replace('_', '-')} needs a value, not "
                               f"{value[:40]}; this task's options: invoke --help {shown_as}",
                               code=2)
            for name, kind in numbers.items():
                if values.get(name) is not None and not isinstance(values[name], kind):
                    values[name] = _number(name, values[name], kind)
            return body(context, *positional, **values)

        # invoke parses numbers itself (a traceback on `abc`) unless their default is text
        run.__signature__ = signature.replace(parameters=[
            p.replace(default=str(p.default)) if type(p.default) in (int, float) else p
            for p in signature.parameters.values()])
        return invoke_task(run, auto_shortflags=False, help=texts, **kwargs)

    if len(args) == 1 and callable(args[0]) and not kwargs and help is None:
        return decorate(args[0])
    return decorate


def _kind(parameter: inspect.Parameter) -> type:
    """A task parameter's type: its default's, else its annotation's (`int | None`)."""
    default = parameter.default
    if isinstance(default, bool) or type(default) in (int, float, str):
        return type(default)
    kind = options.kind(parameter.annotation)
    return kind if kind in (int, float) else str


@dataclasses.dataclass(frozen=True)
class Flag:
    """A flag of a job task that is not part of the job: how to run it, or where."""

    help: str
    default: Any = None
    iterable: bool = False
    kind: type = str  # what invoke's text becomes (numbers are parsed by the task)


def job_task(kind: str, flags: Mapping[str, Flag], name: str | None = None) -> Callable:
    """`@job_task("train", {...})` over `def train(c, **flags)`: the task takes every
    JobFile field `kind` takes, with the field's help, plus `flags` (which win over a field
    of the same name); the body gets them all as keyword arguments (None: not given)."""
    def decorate(body: Callable) -> Any:
        parameters = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        texts, iterable = {}, []
        for field in jobfile.options(kind):
            if field.name in flags:
                continue
            field_kind = options.kind(field.type)
            parameters.append(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY,
                                                default=False if field_kind is bool else None))
            repeatable = field_kind in (tuple, dict) and field.name not in jobfile.COMMA_LISTS
            bound = field.metadata["bound"]
            texts[field.name] = describe(field.metadata["help"],
                                         str if field.name in jobfile.COMMA_LISTS
                                         else field_kind,
                                         jobfile.default(field),
                                         bound.symbols() if bound else "")
            if repeatable:
                iterable.append(field.name)
        for flag_name, extra in flags.items():
            parameters.append(inspect.Parameter(flag_name, inspect.Parameter.KEYWORD_ONLY,
                                                default=extra.default))
            texts[flag_name] = describe(extra.help, tuple if extra.iterable else
                                        bool if extra.default is False else extra.kind, None)
            if extra.iterable:
                iterable.append(flag_name)

        body.__signature__ = inspect.Signature(parameters)  # what invoke reads
        return invoke_task(body, auto_shortflags=False, help=texts, iterable=iterable,
                           **({"name": name} if name else {}))

    return decorate
