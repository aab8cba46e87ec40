"""An image's build context and its content hash: the image tag, shared by the infra stack
(which builds the images on `cdktn deploy`) and the launcher (which looks the tag up).

Same sources give the same tag; a change to a file the image is built from (or to its
Dockerfile or ignore file) gives a new one; files the ignore file excludes do not count. The
trainer and serving images are built from `Dockerfile` (ignore file `.dockerignore`); the
pipeline's launcher image from `launcher.Dockerfile`, whose ignore file is
`launcher.Dockerfile.dockerignore` (BuildKit: "will first look for an ignore file named
`myapp.Dockerfile.dockerignore`", docker/cli docs/reference/commandline/build.md, read
2026-11-28), so a launcher edit does not retag (and rebuild) the trainer images, nor the
reverse.

Run as a script (`python3 infra/image_context.py [--dockerfile F] IMAGE...`, the first step of
each Cloud Build config), it checks that each image's tag is the hash of the sources beside it,
so a build cannot push `trainer:<hash>` for other sources. It imports only the standard
library: the build runs it in a plain Python image, uploaded with the sources.
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
DOCKERFILE = "Dockerfile"  # the trainer and serving images'
LAUNCHER_DOCKERFILE = "launcher.Dockerfile"  # the pipeline steps' image
CLOUDBUILD_CONFIG = "cloudbuild.yaml"  # the build of the trainer and serving images
LAUNCHER_CLOUDBUILD_CONFIG = "launcher.cloudbuild.yaml"  # the build of the launcher image
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


def ignore_file(root: Path, dockerfile: str = DOCKERFILE) -> str:
    """The ignore file BuildKit reads for `dockerfile`: its own, else `.dockerignore`."""
    own = f"{dockerfile}.dockerignore"
    return own if (root / own).exists() else ".dockerignore"


def read_dockerignore(root: Path, dockerfile: str = DOCKERFILE
                      ) -> list[tuple[bool, re.Pattern, str]]:
    """(is_exception, pattern, text) per line, in order: the last matching line decides."""
    path = root / ignore_file(root, dockerfile)
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


def context_files(root: Path = REPO_ROOT, dockerfile: str = DOCKERFILE) -> Iterator[Path]:
    """Files Docker would send as `dockerfile`'s build context, sorted. Ignored directories
    that no exception reaches are not walked (a virtualenv would take seconds)."""
    rules = read_dockerignore(root, dockerfile)
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


def context_hash(root: Path = REPO_ROOT, dockerfile: str = DOCKERFILE) -> str:
    """The image tag: a hash of the build definition (`dockerfile`, its ignore file) and
    every file in its context."""
    digest = hashlib.sha256()
    files = {*context_files(root, dockerfile),
             *(root / name for name in (dockerfile, ignore_file(root, dockerfile))
               if (root / name).exists())}
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:TAG_LENGTH]


def tag_of(image: str) -> str:
    """`host/project/repo/image:tag` -> `tag` ("" when the name carries none)."""
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def check_tags(images: Sequence[str], root: Path = REPO_ROOT, dockerfile: str = DOCKERFILE
               ) -> str | None:
    """None when every image is tagged with the content hash of `root`'s context for
    `dockerfile`; else why not."""
    expected = context_hash(root, dockerfile)
    for image in images:
        if tag_of(image) != expected:
            return (f"refusing to build {image}: its tag is not the content hash of these "
                    f"sources ({expected}); build them with `invoke image.build`, which tags "
                    "them by their hash")
    return None


def main(argv: Sequence[str]) -> str:
    """The script: `[--dockerfile F] IMAGE...`; what it prints, or SystemExit."""
    dockerfile, images = DOCKERFILE, list(argv)
    if images[:1] == ["--dockerfile"] and len(images) > 1:
        dockerfile, images = images[1], images[2:]
    if not images or dockerfile not in (DOCKERFILE, LAUNCHER_DOCKERFILE):
        sys.exit(f"usage: python3 {TAG_CHECK} [--dockerfile {LAUNCHER_DOCKERFILE}] IMAGE...")
    if (problem := check_tags(images, dockerfile=dockerfile)) is not None:
        sys.exit(problem)
    return f"tag {context_hash(dockerfile=dockerfile)} is the content hash of these sources"


if __name__ == "__main__":
    print(main(sys.argv[1:]))
