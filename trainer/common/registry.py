"""One registry for what a name picks: targets, job kinds, data formats, experiments, the
trainer's commands. As in Model Garden's `official/core/registry.py`, a thing registers itself
by a decorator beside it and a name is registered once; an unknown name is one line naming
the choices and the close matches. An entry may be lazy, "package.module:attr" imported on
its first lookup, so a registry lists its names without importing what they name (a target's
SDK, a format's parser)."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T]):
    """Names -> things, read-only but for registering, in the order they were registered (the
    first is the default where a registry has one). `what` names the choice in messages
    (`--target`); an unknown name raises `error`, the type its callers catch."""

    def __init__(self, what: str, error: type[Exception] = LookupError) -> None:
        self.what, self.error = what, error
        self._references: dict[str, str] = {}  # name -> "module:attr", lazy or loaded
        self._loaded: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator registering what it decorates as `name`; it returns it unchanged."""
        def add(entry: T) -> T:
            named = entry if hasattr(entry, "__qualname__") else type(entry)  # an instance's
            self._add(name, f"{named.__module__}:{named.__qualname__}")  # class, for messages
            self._loaded[name] = entry
            return entry
        return add

    def register_lazy(self, name: str, reference: str) -> None:
        """Registers `reference` as `name`: "package.module:attr", or a module, imported when
        the name is first looked up."""
        self._add(name, reference)

    def _add(self, name: str, reference: str) -> None:
        if name in self._references:
            raise ValueError(f"{self.what} {name!r} is registered twice: "
                             f"{self._references[name]}, then {reference}")
        self._references[name] = reference

    def __getitem__(self, name: str) -> T:
        if name not in self._references:
            close = difflib.get_close_matches(str(name), self._references)
            raise self.error(f"{self.what} {str(name)[:80]!r} is not available; use one of "
                             f"{', '.join(self._references)}" +
                             (f" (did you mean {' or '.join(close)}?)" if close else ""))
        if name not in self._loaded:
            module, _, attr = self._references[name].partition(":")
            found = importlib.import_module(module)
            self._loaded[name] = getattr(found, attr) if attr else found
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:  # neither imports nor raises `error`
        return name in self._references

    def get(self, name: str, default: T | None = None) -> T | None:
        return self[name] if name in self._references else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._references)

    def __len__(self) -> int:
        return len(self._references)
