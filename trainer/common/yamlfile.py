"""One way to read YAML a user hands in (a job file, a rerun's stored job.yaml, a sweep,
`--classes`, a YOLO data.yaml, a Model Garden `--config-file`): YAML 1.2's core schema,
checked. PyYAML reads YAML 1.1, where `010` is 8, `1:30` is 90, `0x10` is 16, `yes` is true
and a repeated key wins silently; here each of those is refused, as are aliases (a few bytes
of nested `*anchor`s expand to gigabytes), tags other than the plain types, numbers longer
than MAX_DIGITS characters and non-finite numbers (`.nan`, `.inf`, `1e999`), wherever they
stand. A refusal is one line: `WHERE: line N: what — fix`. TensorFlow-free: the launcher
reads job files with it, the trainer its inputs."""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar, NoReturn

import yaml

MAX_DIGITS = 100  # characters in one number: int() of 5,000 digits is a ValueError

TAG = "tag:yaml.org,2002:"
INT = re.compile(r"[-+]?[0-9]+")
FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
NULL = re.compile(r"~|null|Null|NULL|")
# What YAML 1.1 (PyYAML, Model Garden, most tools) reads as a number or a boolean and YAML
# 1.2 as text or another number: written plain, its meaning depends on the reader.
LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+")
NOT_DECIMAL = re.compile(r"[-+]?(?:0[xob][0-9a-fA-F_]+|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"
                         r"|[0-9][0-9_]*_[0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?"
                         r"|[0-9][0-9_]*\.[0-9_]*_[0-9_]*(?:[eE][-+]?[0-9]+)?)")
YES_NO = re.compile(r"yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF")
NOT_FINITE = re.compile(r"[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
QUOTE = "quote it for text"
AMBIGUOUS = TAG + "ambiguous"  # this module's own: refused when constructed


class _Refused(yaml.MarkedYAMLError):
    """A value this reader refuses; its problem says what and the fix."""


def _refuse(node: yaml.Node | yaml.Event, problem: str) -> NoReturn:
    raise _Refused(problem=problem, problem_mark=node.start_mark)


class _Resolver(yaml.resolver.BaseResolver):
    """YAML 1.2's core schema, plus the YAML 1.1 forms it reads otherwise, marked to refuse."""

    yaml_implicit_resolvers: ClassVar[dict] = {}


for _tag, _pattern, _first in (
        (AMBIGUOUS, LEADING_ZERO, "-+0"),
        (AMBIGUOUS, NOT_DECIMAL, "-+0123456789"),
        (AMBIGUOUS, YES_NO, "yYnNoO"),
        (AMBIGUOUS, NOT_FINITE, "-+."),
        (TAG + "int", INT, "-+0123456789"),
        (TAG + "float", FLOAT, "-+.0123456789"),
        (TAG + "bool", BOOL, "tTfF"),
        (TAG + "null", NULL, ["~", "n", "N", ""])):
    _Resolver.add_implicit_resolver(_tag, re.compile(rf"^(?:{_pattern.pattern})$"),
                                    list(_first))


def _number_text(constructor: yaml.constructor.SafeConstructor, node: yaml.Node,
                 pattern: re.Pattern) -> str:
    text = constructor.construct_scalar(node)
    if len(text) > MAX_DIGITS:
        _refuse(node, f"a number of {len(text):,} characters — write at most {MAX_DIGITS}, "
                      f"or {QUOTE}")
    if not pattern.fullmatch(text):
        _refuse(node, f"{text[:40]!r} is not a plain decimal number — write one, e.g. 16 "
                      "or 0.5")
    return text


class _Constructor(yaml.constructor.SafeConstructor):
    """The plain types only (no timestamps, sets, binary or other tags), repeated keys
    refused, numbers checked."""

    yaml_constructors: ClassVar[dict] = {}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # the base refuses an unhashable key, in its own words
            if first is not None:
                _refuse(key_node, f"the key {str(key)[:40]!r} again (first at line {first}) "
                                  "— keep one")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_int(self, node: yaml.Node) -> int:
        return int(_number_text(self, node, INT))

    def construct_float(self, node: yaml.Node) -> float:
        value = float(_number_text(self, node, FLOAT))
        if not math.isfinite(value):
            _refuse(node, f"{self.construct_scalar(node)[:40]} is not a finite number — "
                          "write a smaller one")
        return value

    def construct_bool(self, node: yaml.Node) -> bool:
        text = self.construct_scalar(node)
        if not BOOL.fullmatch(text):
            _refuse(node, f"{text[:40]!r} is not true or false — write one")
        return text.lower() == "true"

    def construct_ambiguous(self, node: yaml.Node) -> NoReturn:
        text = self.construct_scalar(node)
        if YES_NO.fullmatch(text):
            _refuse(node, f"{text} is true or false in YAML 1.1 and text in YAML 1.2 — "
                          f"write true or false, or {QUOTE}")
        if NOT_FINITE.fullmatch(text):
            _refuse(node, f"{text} is not a finite number — write a number, or {QUOTE}")
        read = yaml.safe_load(text)  # what YAML 1.1 makes of it, for the message
        meaning = "a number in YAML 1.2 and text in YAML 1.1" if isinstance(read, str) else \
            f"{read!r} in YAML 1.1"
        _refuse(node, f"{text} is {meaning}, not a plain decimal number — write the number "
                      f"in decimal, or {QUOTE}")

    def construct_undefined(self, node: yaml.Node) -> NoReturn:
        _refuse(node, f"the tag {node.tag[:60]} — write plain values (numbers, true/false, "
                      "text, lists, mappings) without tags")


for _tag, _method in (("int", "construct_int"), ("float", "construct_float"),
                      ("bool", "construct_bool"), ("null", "construct_yaml_null"),
                      ("str", "construct_yaml_str"), ("seq", "construct_yaml_seq"),
                      ("map", "construct_yaml_map")):
    _Constructor.add_constructor(TAG + _tag, getattr(_Constructor, _method))
_Constructor.add_constructor(AMBIGUOUS, _Constructor.construct_ambiguous)
_Constructor.add_constructor(None, _Constructor.construct_undefined)


class _Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
              yaml.composer.Composer, _Constructor, _Resolver):

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            _refuse(self.peek_event(), "aliases (*name) are not allowed — write the value out")
        return super().compose_node(parent, index)


def loads(text: str, where: str, error: type[Exception]) -> Any:
    """The document (None if empty), or `error` in one line: `WHERE: line N: what — fix`."""
    try:
        return yaml.load(text, Loader=_Loader)
    except _Refused as refused:
        raise error(f"{where}: line {refused.problem_mark.line + 1}: {refused.problem}") \
            from None
    except yaml.MarkedYAMLError as problem:
        mark = problem.problem_mark or problem.context_mark
        line = f"line {mark.line + 1}: " if mark else ""
        raise error(f"{where}: {line}not YAML ({problem.problem}) — check the indentation, "
                    "the colons and the quotes") from None
    except yaml.reader.ReaderError as problem:
        line = text.count("\n", 0, problem.position) + 1
        raise error(f"{where}: line {line}: a character YAML does not allow "
                    f"(#x{problem.character if isinstance(problem.character, int) else 0:04x}) "
                    "— remove it") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply to read — flatten it") from None


def scalar(text: str, where: str, error: type[Exception]) -> Any:
    """A command-line value as `loads` reads it plain: a number, true/false or null; anything
    else (a form YAML 1.1 reads as a number or a boolean too) is the text itself, as given.
    A number that is too long or not finite is refused."""
    tag = _Resolver().resolve(yaml.ScalarNode, text, (True, False))
    if tag == TAG + "str" or (tag == AMBIGUOUS and not NOT_FINITE.fullmatch(text)):
        return text
    return loads(text, where, error)


class _Dumper(yaml.SafeDumper):
    """PyYAML's writer, quoting text that either YAML 1.1 or `loads` would read as another
    type (`'010'`, `'1e5'`), so a file we write reads back the same with both."""


for _tag, _pattern in (("int", INT), ("float", FLOAT), ("bool", BOOL)):
    _Dumper.add_implicit_resolver(TAG + _tag, re.compile(rf"^(?:{_pattern.pattern})$"),
                                  list("-+.0123456789tTfF"))


def dumps(data: Any) -> str:
    """`data` as YAML that `loads` and YAML 1.1 readers read back alike, keys in order."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
