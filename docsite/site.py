"""Serving and building the documentation site, and rewriting its generated pages: the
commands behind `invoke docs` and `invoke docs.reference` (argument lists, never a shell)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from docsite import pages
from launch.errors import InputError, StepFailed

CONFIG = pages.REPO / "mkdocs.yml"
SITE_DIR = pages.REPO / "site"
# Material for MkDocs prints its end of life (2027-05-05) on every build: the date is one of
# the project's dated facts (catalogue.yaml `lifecycle`), which `invoke doctor` warns of.
QUIET = {"NO_MKDOCS_2_WARNING": "1"}


def command(build: bool, port: int, site_dir: Path = SITE_DIR) -> list[str]:
    """mkdocs' own command line: a strict build into `site_dir`, or a server on this
    machine's loopback only."""
    if not 0 < port < 65536:
        raise InputError(f"--port {port} is not a TCP port: give 1 to 65535 (default 8000)")
    mkdocs = [sys.executable, "-m", "mkdocs"]
    if build:
        return [*mkdocs, "build", "--strict", "--config-file", str(CONFIG),
                "--site-dir", str(site_dir)]
    return [*mkdocs, "serve", "--strict", "--config-file", str(CONFIG),
            "--dev-addr", f"127.0.0.1:{port}"]


def run(build: bool, port: int, site_dir: Path = SITE_DIR) -> None:
    done = subprocess.run(command(build, port, site_dir), env={**os.environ, **QUIET},
                          check=False)
    if done.returncode:
        raise StepFailed(f"the documentation site did not build (mkdocs exited "
                         f"{done.returncode}): its messages above name each broken link "
                         "or page")
    if build:
        print(f"wrote {site_dir}/index.html")


def write_reference() -> None:
    """Every generated page, the IAM page from a fresh synth of both stacks."""
    from infra.main import synthesised

    with tempfile.TemporaryDirectory() as outdir:
        stacks = synthesised(Path(outdir))
    for path in pages.write(stacks):
        print(f"wrote {path.relative_to(pages.REPO)}")
