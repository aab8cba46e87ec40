"""The continuous-training pipeline, as Kubeflow Pipelines v2 describes it: our own steps, each a
small component that calls the launcher's code (launch/features/pipeline/steps.py), in the
order a person types them today.

    resolve the dataset --(newer data)--> train -> evaluate on the test split
      -> compare with the serving version --(no worse)--> upload -> deploy a canary -> promote

A run with no newer data stops after the first step, successfully; a run whose model is worse
than the one serving stops after the comparison, with both figures in its outputs. Every
parameter comes from the job file (`job`, its text: the file `invoke train --job` takes) and
the few the pipeline adds; on Vertex AI, `settings` carries the environment's (project,
bucket, images, accounts), which a step's container has no outputs file to read. The
compiled spec names its image by a placeholder (IMAGE) that a run binds to the environment's
launcher image (launcher.Dockerfile), so the spec is the same file everywhere and a test
holds the checked-in copy to what this module compiles.
"""

# No `from __future__ import annotations`: KFP reads the components' annotations as types.
from pathlib import Path

from kfp import dsl

from launch.features.pipeline.steps import NO_SETTINGS

NAME = "pets-continuous-training"
IMAGE = "LAUNCHER_IMAGE"  # bound per run (requests.with_image)
SPEC_FILE = Path(__file__).with_name("pipeline.yaml")  # the compiled spec, checked in
DEFAULT_CANARY = 10  # percent of the endpoint's traffic the new version takes first
DEFAULT_MAX_DROP = 0.01  # the champion gate's margin (launch/targets/champion.py)


def _component(function):
    """A step in the launcher's image; the image runs kfp itself (no install at start)."""
    return dsl.component(base_image=IMAGE, install_kfp_package=False)(function)


@_component
def resolve_dataset(job: str, state: str, settings: str) -> str:
    """The dataset version to train on, "" to stop. Only the function is shipped to a step
    (KFP lightweight components): it imports what it calls."""
    from launch.features.pipeline import steps

    return steps.resolve_dataset(job, state, settings)


@_component
def train(job: str, state: str, version: str, settings: str) -> str:
    from launch.features.pipeline import steps

    return steps.train(job, state, version, settings)


@_component
def evaluate(job: str, state: str, run_id: str, version: str, settings: str) -> float:
    from launch.features.pipeline import steps

    return steps.evaluate(job, state, run_id, version, settings)


@_component
def compare(job: str, state: str, run_id: str, max_drop: float, settings: str) -> bool:
    """Whether the run is no worse than the serving version; both figures go to the state."""
    from launch.features.pipeline import steps

    return steps.compare(job, state, run_id, max_drop, settings)


@_component
def upload(job: str, state: str, run_id: str, version: str, max_drop: float, settings: str,
           model: dsl.Output[dsl.Model]):
    """The version is the run's Model artifact (Vertex ML Metadata keeps it with the run),
    its lineage in its metadata: dataset version, run, checkpoint, test figure."""
    from launch.features.pipeline import steps

    model.metadata.update(steps.upload(job, state, run_id, version, max_drop, settings))


@_component
def deploy_canary(job: str, state: str, model: dsl.Input[dsl.Model], traffic: int,
                  max_drop: float, settings: str) -> str:
    from launch.features.pipeline import steps

    return steps.deploy_canary(job, state, dict(model.metadata), traffic, max_drop, settings)


@_component
def promote(job: str, state: str, deployed: str, settings: str) -> str:
    from launch.features.pipeline import steps

    return steps.promote(job, state, deployed, settings)


@dsl.pipeline(name=NAME, description="New data in, a better model serving: resolve, train, "
                                     "evaluate, compare, upload, canary, promote")
def continuous_training(job: str, state: str, canary_traffic: int = DEFAULT_CANARY,
                        max_drop: float = DEFAULT_MAX_DROP, settings: str = NO_SETTINGS):
    common = {"job": job, "state": state, "settings": settings}
    fresh = resolve_dataset(**common).set_display_name("resolve dataset")
    with dsl.If(fresh.output != "", name="newer-data"):
        trained = train(**common, version=fresh.output)
        tested = evaluate(**common, run_id=trained.output,
                          version=fresh.output).set_display_name(
            "evaluate on the test split")
        verdict = compare(**common, run_id=trained.output,
                          max_drop=max_drop).after(tested).set_display_name(
            "compare with the serving version")
        with dsl.If(verdict.output == True, name="no-worse"):  # noqa: E712 (KFP's syntax)
            uploaded = upload(**common, run_id=trained.output, version=fresh.output,
                              max_drop=max_drop)
            canary = deploy_canary(**common, model=uploaded.outputs["model"],
                                   traffic=canary_traffic,
                                   max_drop=max_drop).set_display_name("deploy a canary")
            promoted = promote(**common, deployed=canary.output)
    for task in (fresh, trained, tested, verdict, uploaded, canary, promoted):
        task.set_caching_options(False)  # every step reads or changes the world


def compile_spec() -> str:
    """The compiled pipeline spec (YAML), byte-identical for the same sources and kfp: KFP's
    header, then its documents written again with every style stated (KFP's own dump leaves
    list style to PyYAML's defaults, which a test session found changed: flow in one
    process, block in another)."""
    import tempfile

    import yaml
    from kfp import compiler

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "pipeline.yaml")
        compiler.Compiler().compile(continuous_training, package_path=str(path))
        text = path.read_text()
    header = "".join(line for line in text.splitlines(keepends=True)
                     if line.startswith("#"))
    return header + yaml.safe_dump_all(list(yaml.safe_load_all(text)), sort_keys=True,
                                       default_flow_style=False, width=100)
