"""How `tasks.py` declares its flags: invoke's `@task` with the choices this project makes
once. No automatic short flags (`-h` stays help, and one letter never means two things);
every option's help shows its type and default; numbers are parsed here, so `--steps abc`
is one line naming the flag (exit 2), not invoke's traceback. Flags come from the values they
fill, declared once: `job_task` builds train, tune and eval from the fields of
`launch.values.jobfile.JobFile` and of each target's own options (through the registry),
`args_task` a tool's task from its trainer command's `Args` fields, and `CLOUD` holds the
flags that say which cloud (a task names the ones it takes)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any

from invoke import Exit
from invoke import task as invoke_task

from launch.values import jobfile
from trainer.args import Args, shown
from trainer.common import options
from trainer.common.errors import SettingsError

KIND_WORDS = {bool: "", int: "whole number", float: "number", str: "text",
              tuple: "repeatable", dict: "KEY=VALUE, repeatable"}


def describe(help: str, kind: type, default: Any, bound: str = "") -> str:
    """`help [type; default X]`: what invoke prints beside the flag."""
    facts = [f"{KIND_WORDS[kind]}{bound}".strip()]
    if default is inspect.Parameter.empty:  # a flag the task cannot run without
        facts.append("required")
    unset = any(default is nothing for nothing in (None, False, inspect.Parameter.empty)) or (
        not isinstance(default, (int, float)) and not default)
    if not unset and "default" not in help:
        facts.append(f"default {default:g}" if isinstance(default, float)
                     else f"default {default}")
    shown = "; ".join(fact for fact in facts if fact)
    return f"{help} [{shown}]" if shown else help


def _number(flag: str, value: Any, kind: type, bound: options.Bound | None = None
            ) -> int | float:
    """A number as typed after `flag`, by the one reader; a mistake is one line, exit 2."""
    try:
        return options.number(value, kind, flag, bound)
    except SettingsError as error:
        raise Exit(f"error: {error}", code=2) from None


def parse_errors_exit_2(program) -> None:
    """invoke's parser exits 1 for an unknown task or flag; here a user's mistake exits 2
    (trainer/common/errors.py has the rule): the running program's task parsing, wrapped once when
    tasks.py loads, says it as one `error:` line with status 2."""
    from invoke.exceptions import ParseError

    parse = program.parse_tasks
    if getattr(parse, "exits_2", False):
        return

    def parse_tasks() -> None:
        try:
            parse()
        except ParseError as error:
            raise Exit(f"error: {error} (`invoke --list` lists the tasks, `invoke TASK "
                       "--help` its flags)", code=2) from None

    parse_tasks.exits_2 = True
    program.parse_tasks = parse_tasks


@dataclasses.dataclass(frozen=True)
class Flag:
    """A flag that fills no trainer or job field: how to run a task, or where."""

    help: str
    default: Any = None
    iterable: bool = False
    kind: type = str  # what invoke's text becomes (numbers are parsed: `task` and `args_task`)

    def described(self) -> str:
        return describe(self.help, tuple if self.iterable else
                        bool if self.default is False else self.kind, self.default)


# Which cloud a task talks to, declared once; each task names the ones it takes. The region
# and the image are a target's job options too (Vertex AI's): their help is the option's.
CLOUD: Mapping[str, Flag] = {
    "env": Flag("infra environment whose outputs to use (default: invoke.yaml's)"),
    "project": Flag("GCP project (default: the infra outputs')"),
    "region": Flag(jobfile.help_of(jobfile.field_named("region"))),
    "bucket": Flag("data bucket (default: the infra outputs')"),
    "image": Flag(jobfile.help_of(jobfile.field_named("image"))),
}


def cloud(*names: str) -> dict[str, Flag]:
    """The cloud flags `names` (`cloud("env", "project")`), for a task's `flags`."""
    return {name: CLOUD[name] for name in names}


def task(*args, help: Mapping[str, str] | None = None,
         flags: Mapping[str, Flag] | None = None, **kwargs):
    """invoke's `@task` (with or without options), as described above; `flags` (the cloud's,
    say) are keyword arguments of the body too, declared by their `Flag`."""
    def decorate(body: Callable) -> Any:
        declared = inspect.signature(body)
        signature = declared.replace(parameters=[  # a flag the body names is still a flag
            p for p in declared.parameters.values()
            if p.kind != p.VAR_KEYWORD and p.name not in (flags or {})])
        kinds = {name: tuple if name in kwargs.get("iterable", ()) else _kind(parameter)
                 for name, parameter in signature.parameters.items()}
        texts = {name: describe(text, kinds[name], signature.parameters[name].default)
                 for name, text in (help or {}).items()}
        return _declared(body, signature, texts, kinds, flags or {}, kwargs)

    if len(args) == 1 and callable(args[0]) and not kwargs and help is None:
        return decorate(args[0])
    return decorate


def _declared(body: Callable, signature: inspect.Signature, texts: Mapping[str, str],
              kinds: Mapping[str, type], flags: Mapping[str, Flag],
              kwargs: Mapping[str, Any]) -> Any:
    """The invoke task of `body`: its parameters (`signature`, then `flags`), their help
    (`texts`) and kinds; numbers parsed and a required option's value checked first."""
    signature = signature.replace(parameters=[*signature.parameters.values(), *(
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=flag.default)
        for name, flag in flags.items())])
    kinds = {**kinds, **{name: flag.kind for name, flag in flags.items()}}
    texts = {**texts, **{name: flag.described() for name, flag in flags.items()}}
    iterable = [*kwargs.get("iterable", ()), *(name for name, flag in flags.items()
                                              if flag.iterable)]
    numbers = {name: kind for name, kind in kinds.items() if kind in (int, float)}
    # `model_upload` is `model.upload` (a collection's task, renamed by name=)
    shown_as = body.__name__.replace("_", ".", 1) if "name" in kwargs else body.__name__
    required = [name for name, parameter in list(signature.parameters.items())[1:]
                if parameter.default is inspect.Parameter.empty]

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
                values[name] = _number(jobfile.flag(name), values[name], kind)
        return body(context, *positional, **values)

    # invoke parses numbers itself (a traceback on `abc`) unless their default is text
    run.__signature__ = signature.replace(parameters=[
        p.replace(default=str(p.default)) if type(p.default) in (int, float) else p
        for p in signature.parameters.values()])
    return invoke_task(run, auto_shortflags=False, help=texts,
                       **{**kwargs, "iterable": iterable})


def _kind(parameter: inspect.Parameter) -> type:
    """A task parameter's type: its default's, else its annotation's (`int | None`)."""
    default = parameter.default
    if isinstance(default, bool) or type(default) in (int, float, str):
        return type(default)
    kind = options.kind(parameter.annotation)
    return kind if kind in (int, float) else str


def job_task(kind: str, flags: Mapping[str, Flag], name: str | None = None) -> Callable:
    """`@job_task("train", {...})` over `def train(c, **flags)`: the task takes every
    JobFile field and target option `kind` takes (`jobfile.flag_fields`), with its help,
    plus `flags` (which win over a field of the same name); the body gets them all as
    keyword arguments (None: not given)."""
    def decorate(body: Callable) -> Any:
        parameters = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        texts, iterable = {}, []
        for field in jobfile.flag_fields(kind):
            if field.name in flags:
                continue
            field_kind = options.kind(field.type)
            parameters.append(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY,
                                                default=False if field_kind is bool else None))
            commas = field.metadata["commas"]
            repeatable = field_kind in (tuple, dict) and not commas
            bound = field.metadata["bound"]
            texts[field.name] = describe(jobfile.help_of(field),
                                         str if commas else field_kind,
                                         jobfile.default(field),
                                         bound.symbols() if bound else "")
            if repeatable:
                iterable.append(field.name)
        for flag_name, extra in flags.items():
            parameters.append(inspect.Parameter(flag_name, inspect.Parameter.KEYWORD_ONLY,
                                                default=extra.default))
            texts[flag_name] = extra.described()
            if extra.iterable:
                iterable.append(flag_name)

        body.__signature__ = inspect.Signature(parameters)  # what invoke reads
        return invoke_task(body, auto_shortflags=False, help=texts, iterable=iterable,
                           **({"name": name} if name else {}))

    return decorate


def args_task(command: type[Args], flags: Mapping[str, Flag] | None = None, *,
              defaults: Mapping[str, Any] | None = None, skip: Collection[str] = (),
              only: Collection[str] | None = None, help: Mapping[str, str] | None = None,
              **kwargs: Any) -> Callable:
    """`@args_task(ConvertArgs, {...})` over `def convert(c, args, **flags)`: the task takes
    each field of the trainer command `command` (`only` these, or all but `skip`) under the
    flag its messages name (`trainer.args.shown`: `--source` fills `sources`), with the
    field's help (`help`, by flag: where the task's flag says more, a gs:// path), kind,
    bound and default (`defaults`, by field: the task's own), and `flags` besides. The body
    gets `command` built from its flags (one not given keeps the default), then the others
    by name."""
    fields = {shown(command, field.name)[2:].replace("-", "_"): field
              for field in dataclasses.fields(command)
              if field.name not in skip and (only is None or field.name in only)}
    defaults, help = defaults or {}, help or {}

    def decorate(body: Callable) -> Any:
        parameters, texts, iterable = [], {}, []
        for name, field in fields.items():
            kind, bound = options.kind(field.type), field.metadata["bound"]
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                                default=False if kind is bool else None))
            texts[name] = describe(help.get(name) or field.metadata["help"], kind,
                                   defaults.get(field.name, field.default),
                                   bound.symbols() if bound else "")
            if kind is tuple:
                iterable.append(name)

        def value(name: str, given: Any) -> Any:
            """A flag's value as its field takes it; None: not given."""
            field = fields[name]
            kind = options.kind(field.type)
            if given in (None, "", []):
                return defaults.get(field.name)
            if kind in (int, float):
                return _number(shown(command, field.name), given, kind,
                               field.metadata["bound"])
            return tuple(given) if kind is tuple else given

        def run(context, **values):
            built = {fields[name].name: value(name, values.pop(name)) for name in fields}
            made = command(**{name: given for name, given in built.items()
                              if given is not None})
            return body(context, made, **values)

        run.__name__, run.__doc__ = body.__name__, body.__doc__
        signature = inspect.Signature(
            [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD), *parameters])
        return _declared(run, signature, texts, {}, flags or {},
                         {**kwargs, "iterable": iterable})

    return decorate
