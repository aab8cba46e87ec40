"""The CDK Terrain app (CDKTF's continuation): `npx cdktn synth|diff|deploy pets-dev` (or
`pets-prod`).

Deploy with `--outputs-file infra/outputs.json`: the launcher reads project, bucket, image
and service-account names from there, so none is typed twice.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # cdktn runs this file as a script (cdktf.json's app)
# jsii's banner about Node 20's end of life, on every synth: the runtime it names is the
# one this project supports (docs/platform/index.md), so it says nothing to act on
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from infra.config import Environment  # noqa: E402
from infra.environments import ENVIRONMENTS, EXAMPLE  # noqa: E402
from infra.image_context import LAUNCHER_DOCKERFILE, context_hash  # noqa: E402
from infra.outputs import stack_name  # noqa: E402

if TYPE_CHECKING:
    from cdktn import App

# Terraform runs in cdktf.out/stacks/<stack>/: the repository root, relative to it, keeps
# machine-specific paths out of the synthesised configuration.
SOURCE_DIR_FROM_STACK = "../../.."
# =1: synthesise the example's environments as shipped (.ci/run and checkov scan them); the
# GitOps workflow never sets it, so a copy of the example deploys nothing until it is yours
EXAMPLE_OPT_IN = "PETS_INFRA_EXAMPLE"


def not_yours(environments: Mapping[str, Environment], environ: Mapping[str, str]
              ) -> str | None:
    """The one line refusing environments that still hold the example's values (None: each
    is its owner's, or the example is meant): deploying them would point at projects,
    groups and a repository that are someone else's."""
    if environ.get(EXAMPLE_OPT_IN) == "1":
        return None
    held = {name: fields for name, env in environments.items()
            if (fields := env.example_fields(EXAMPLE))}
    if not held:
        return None
    listed = "; ".join(f"{name}: {', '.join(fields)}" for name, fields in held.items())
    return (f"infra/environments.py holds the example's values, not yours ({listed}): replace "
            "them with your projects, groups and repository (docs/platform/deploy.md, \"Make "
            f"the environments yours\"); {EXAMPLE_OPT_IN}=1 synthesises the example as it is")


def build_app(outdir: str | None = None) -> App:
    from cdktn import App  # jsii starts Node: only once the environments are accepted

    from infra.stack import TrainingPlatformStack

    app = App(outdir=outdir) if outdir else App()
    tag, launcher_tag = context_hash(REPO_ROOT), context_hash(REPO_ROOT, LAUNCHER_DOCKERFILE)
    for env in ENVIRONMENTS.values():
        TrainingPlatformStack(app, env, image_tag=tag, launcher_tag=launcher_tag,
                              source_dir=SOURCE_DIR_FROM_STACK)
    return app


def synthesised(outdir: Path) -> dict[str, dict]:
    """Each environment's stack as `cdktn synth` writes it into `outdir` (the tests' IAM
    checks and the docs' IAM page read it)."""
    build_app(str(outdir)).synth()
    return {env: json.loads((outdir / "stacks" / stack_name(env) / "cdk.tf.json").read_text())
            for env in ENVIRONMENTS}


if __name__ == "__main__":
    if refusal := not_yours(ENVIRONMENTS, os.environ):
        print(f"error: {refusal}", file=sys.stderr)
        sys.exit(2)
    build_app().synth()
