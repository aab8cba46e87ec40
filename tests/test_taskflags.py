"""tasks.py declares no flag a value already declares (launch/cli/taskflags.py): a tool task's
flags are its trainer command's `Args` fields, with their help, and the command is built from
them in one place; the cloud flags are declared once; a flag the chosen target would ignore is
refused by the target registry, as train's are."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest
from invoke import Collection, Context, Exit

import tasks
from launch.cli.taskflags import CLOUD, Flag, args_task
from tests.cli import invoke, refused
from trainer.args import ConvertArgs, DownloadArgs, ExportArgs, PredictArgs, SampleArgs, shown

TASKS = Collection.from_module(tasks)
# task -> its trainer command, the fields it leaves out, the flags whose help says more
TOOL_TASKS = {
    "data.convert": (ConvertArgs, {"processes"}, set()),
    "data.sample": (SampleArgs, {"seed"}, set()),
    "data.download": (DownloadArgs, {"base_url"}, set()),
    "export": (ExportArgs, set(), {"model_dir", "output_dir"}),  # local or gs://
    "predict": (PredictArgs, set(), {"model", "images", "output_dir"}),
}
CLOUD_FLAG_NAMES = set(CLOUD)


def parameters(name: str) -> list[str]:
    return list(inspect.signature(TASKS[name].body).parameters)[1:]


@pytest.mark.parametrize("name", TOOL_TASKS)
def test_a_tool_tasks_flags_are_its_args_fields_with_their_help(name):
    command, left_out, said_more = TOOL_TASKS[name]
    flags = {shown(command, field.name)[2:].replace("-", "_"): field
             for field in dataclasses.fields(command) if field.name not in left_out}
    assert set(flags) <= set(parameters(name))
    for flag, field in flags.items():
        text = TASKS[name].help[flag]
        assert field.metadata["help"], f"{command.__name__}.{field.name} has no help"
        assert text.startswith(field.metadata["help"]) != (flag in said_more), (flag, text)


def test_the_command_is_built_from_its_flags_in_one_place():
    """Numbers read by the one reader and named as typed; a flag not given keeps the
    task's default, else the field's; a repeatable flag is the field's tuple."""
    @args_task(ConvertArgs, {"target": Flag("where", "local")},
               defaults={"output_dir": "work/records"}, skip=("processes",))
    def body(c, args, target):
        return args, target

    def call(**given):
        values = {name: p.default for name, p in
                  list(inspect.signature(body.body).parameters.items())[1:]}
        return body(Context(), **{**values, **given})

    made, target = call(source=["coco:a.json:images"], num_shards="1e1", split="0.8",
                        masks=True)
    assert (made, target) == (ConvertArgs(None, "work/records", num_shards=10, masks=True,
                                          sources=("coco:a.json:images",), split="0.8"),
                              "local")
    with pytest.raises(Exit) as stopped:
        call(num_shards="abc")
    assert (stopped.value.code, stopped.value.message) == (
        2, "error: --num-shards must be a whole number, got 'abc'")


def test_the_cloud_flags_are_declared_once():
    """No task of tasks.py spells a cloud flag as a parameter (each names those it takes),
    and each has one help text wherever it appears."""
    for node in ast.walk(ast.parse(inspect.getsource(tasks))):
        if isinstance(node, ast.FunctionDef) and node.name != "_cloud":
            spelled = {a.arg for a in node.args.args + node.args.kwonlyargs}
            assert not spelled & CLOUD_FLAG_NAMES, (node.name, spelled & CLOUD_FLAG_NAMES)
    seen = 0
    for name in TASKS.task_names:
        for flag in CLOUD_FLAG_NAMES & set(parameters(name)):
            assert TASKS[name].help[flag] == CLOUD[flag].described(), (name, flag)
            seen += 1
    assert seen > 50  # 24 tasks take some


@pytest.mark.parametrize(("flag", "cannot"), [
    ("--follow", "submit a job to a service (to follow until it ends)"),
    ("--local-docker", "run a container image"), ("--max-cost=5", "price a job before it runs"),
    ("--region=us-east4", "run in a chosen cloud region")])
def test_a_convert_flag_the_local_target_cannot_take_is_refused(flag, cannot, tmp_path):
    """As train's `--spot`: from the capability the flag needs (jobs.Conversion.NEEDS), which
    the target's spec does not declare."""
    typed = flag.partition("=")[0]
    line = refused(invoke("data.convert", f"--data-dir={tmp_path}",
                          f"--output-dir={tmp_path / 'records'}", flag))
    assert line == (f"error: {typed}: the local target cannot {cannot}: add --target vertex, "
                    f"or drop {typed}")
    assert not (tmp_path / "records").exists()


@pytest.mark.parametrize("args", [("runs.list", "--target=tpu"),
                                  ("predict", "--target=tpu")])
def test_a_task_that_reads_the_target_asks_the_registry(args):
    assert refused(invoke(*args)) == ("error: --target 'tpu' is not available; use one of "
                                      "local, vertex")


@pytest.mark.parametrize(("args", "message"), [
    (("predict", "--score-threshold", "2"), "--score-threshold must be at most 1, got '2'"),
    (("export", "--min-score", "-0.5"), "--min-score must be at least 0, got '-0.5'"),
])
def test_a_tool_flags_bound_is_the_args_one_from_invoke_and_the_trainer(args, message):
    """The bound lives on the Args field: invoke refuses before any file is read, and the
    trainer's parser refuses the same value in the same words."""
    from trainer.args import parse
    from trainer.common.errors import SettingsError

    assert refused(invoke(*args)) == f"error: {message}"
    command = {"predict": ["predict", "--model=m", "--images=i", "--output_dir=o"],
               "export": ["export", "--model_dir=m", "--export_dir=e"]}[args[0]]
    with pytest.raises(SettingsError) as error:
        parse([*command, f"{args[1]}={args[2]}"])
    assert str(error.value) == message


def test_a_flag_without_a_default_says_it_is_required():
    """`invoke jobs.logs --help` once printed `default <class 'inspect._empty'>`."""
    from launch.cli.taskflags import describe

    assert describe("job id", str, inspect.Parameter.empty) == "job id [text; required]"
    assert describe("workers", int, 0) == "workers [whole number; default 0]"
    assert describe("spot", bool, False) == "spot"
    printed = invoke("--help", "jobs.logs").stdout
    assert "required]" in printed and "_empty" not in printed
