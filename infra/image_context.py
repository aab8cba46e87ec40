"""The trainer image's build context and its content hash: the image tag, shared by the infra
stack (which builds the image on `cdktf deploy`) and the launcher (which looks the tag up).

Same sources give the same tag; a change to a file the image is built from (or to the
Dockerfile or .dockerignore) gives a new one; files .dockerignore excludes do not count.

Run as a script (`python3 infra/image_context.py IMAGE...`, the first step of
cloudbuild.yaml), it checks that each image's tag is the hash of the sources beside it, so a
build of cloudbuild.yaml cannot push `trainer:<hash>` for other sources. It imports only the
standard library: the build runs it in a plain Python image, uploaded with the sources.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_DEFINITION = ("Dockerfile", ".dockerignore")
CLOUDBUILD_CONFIG = "cloudbuild.yaml"  # the build of the images, for Cloud Build
TAG_CHECK = "infra/image_context.py"  # this file: uploaded with the sources, run by the build
TAG_LENGTH = 16


@lru_cache(maxsize=64)
def _pattern(pattern: str) -> re.Pattern:
    """A .dockerignore pattern (Go filepath.Match plus `**`) as a regex over posix paths."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if pattern.startswith("/", i):
                out, i = out + "(?:/)?", i + 1
            continue
        char = pattern[i]
        out += {"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char))
        i += 1
    return re.compile(out + "(?:/.*)?")  # a pattern matching a directory covers its contents


def read_dockerignore(root: Path) -> list[tuple[bool, re.Pattern, str]]:
    """(is_exception, pattern, text) per line, in order: the last matching line decides."""
    path = root / ".dockerignore"
    rules = []
    for line in path.read_text().splitlines() if path.exists() else []:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        cleaned = line.lstrip("!").strip().strip("/")
        rules.append((exception, _pattern(cleaned), cleaned))
    return rules


def is_ignored(relative: str, rules: list[tuple[bool, re.Pattern, str]]) -> bool:
    ignored = False
    for exception, pattern, _ in rules:
        if pattern.fullmatch(relative):
            ignored = not exception
    return ignored


def _may_hold_exceptions(directory: str, rules: list[tuple[bool, re.Pattern, str]]) -> bool:
    """Whether an ignored directory could still contain a re-included (`!`) file."""
    return any(exception and (text.startswith(("*", "?")) or text.startswith(f"{directory}/"))
               for exception, _, text in rules)


def context_files(root: Path = REPO_ROOT) -> Iterator[Path]:
    """Files Docker would send as the build context, sorted. Ignored directories that no
    exception reaches are not walked (a virtualenv would take seconds)."""
    rules = read_dockerignore(root)
    found = []
    for directory, subdirectories, files in os.walk(root):
        relative_dir = Path(directory).relative_to(root).as_posix()
        prefix = "" if relative_dir == "." else f"{relative_dir}/"
        subdirectories[:] = [
            d for d in subdirectories
            if not (prefix == "" and d == ".git")
            and not (is_ignored(f"{prefix}{d}", rules)
                     and not _may_hold_exceptions(f"{prefix}{d}", rules))
        ]
        found += [Path(directory) / name for name in files
                  if not is_ignored(f"{prefix}{name}", rules)]
    yield from sorted(found)


def context_hash(root: Path = REPO_ROOT) -> str:
    """The image tag: a hash of the build definition and every file in the context."""
    digest = hashlib.sha256()
    files = {*context_files(root), *(root / name for name in BUILD_DEFINITION
                                     if (root / name).exists())}
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:TAG_LENGTH]


def tag_of(image: str) -> str:
    """`host/project/repo/image:tag` -> `tag` ("" when the name carries none)."""
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def check_tags(images: Sequence[str], root: Path = REPO_ROOT) -> str | None:
    """None when every image is tagged with the content hash of `root`; else why not."""
    expected = context_hash(root)
    for image in images:
        if tag_of(image) != expected:
            return (f"refusing to build {image}: its tag is not the content hash of these "
                    f"sources ({expected}); build them with `invoke image.build`, which tags "
                    "them by their hash")
    return None


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(f"usage: python3 {TAG_CHECK} IMAGE...")
    if (problem := check_tags(sys.argv[1:])) is not None:
        sys.exit(problem)
    print(f"tag {context_hash()} is the content hash of these sources")
