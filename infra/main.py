"""The CDK for Terraform app: `npx cdktf synth|diff|deploy pets-dev` (or `pets-prod`).

Deploy with `--outputs-file infra/outputs.json`: the launcher reads project, bucket, image
and service-account names from there, so none is typed twice.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # cdktf runs this file as a script
# jsii's banner about Node 20's end of life, on every synth: the runtime it names is the
# one this project supports (docs/platform/index.md), so it says nothing to act on
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from cdktf import App  # noqa: E402

from infra.environments import ENVIRONMENTS  # noqa: E402
from infra.image_context import LAUNCHER_DOCKERFILE, context_hash  # noqa: E402
from infra.outputs import stack_name  # noqa: E402
from infra.stack import TrainingPlatformStack  # noqa: E402

# Terraform runs in cdktf.out/stacks/<stack>/: the repository root, relative to it, keeps
# machine-specific paths out of the synthesised configuration.
SOURCE_DIR_FROM_STACK = "../../.."


def build_app(outdir: str | None = None) -> App:
    app = App(outdir=outdir) if outdir else App()
    tag, launcher_tag = context_hash(REPO_ROOT), context_hash(REPO_ROOT, LAUNCHER_DOCKERFILE)
    for env in ENVIRONMENTS.values():
        TrainingPlatformStack(app, env, image_tag=tag, launcher_tag=launcher_tag,
                              source_dir=SOURCE_DIR_FROM_STACK)
    return app


def synthesised(outdir: Path) -> dict[str, dict]:
    """Each environment's stack as `cdktf synth` writes it into `outdir` (the tests' IAM
    checks and the docs' IAM page read it)."""
    build_app(str(outdir)).synth()
    return {env: json.loads((outdir / "stacks" / stack_name(env) / "cdk.tf.json").read_text())
            for env in ENVIRONMENTS}


if __name__ == "__main__":
    build_app().synth()
