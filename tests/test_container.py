"""The Dockerfile: lint, the entrypoints it runs (the trainer's; the serving image's, which
configures TF Serving from Vertex AI's variables), and pins that agree with pyproject.toml."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from serving import contract, entrypoint
from serving.fetch import Backoff, FetchError, access_token, fetch, plan, safe_relative
from tests.conftest import HANG, REPO
from tests.fakes.json_http import Request, json_server


def stage_instructions() -> dict[str, dict[str, list[str]]]:
    """Each target of the Dockerfile -> its instructions' arguments, by instruction (lines
    continued with a backslash joined; comments dropped); "" holds the global ARGs."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    stages: dict[str, dict[str, list[str]]] = {"": defaultdict(list)}
    current = stages[""]
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, arguments = line.strip().partition(" ")
        if instruction == "FROM":
            base, _, name = arguments.partition(" AS ")
            current = stages[name] = defaultdict(list)
            current["FROM"].append(base)
        else:
            current[instruction].append(arguments.strip())
    return stages


def dockerfile_entrypoints() -> list[list[str]]:
    return [json.loads(entry) for stage in stage_instructions().values()
            for entry in stage.get("ENTRYPOINT", [])]


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(REPO / ".venv" / "bin" / "hadolint")
    result = subprocess.run([hadolint, "--failure-threshold", "warning", "Dockerfile"],
                            cwd=REPO, capture_output=True, text=True, timeout=HANG)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_target_runs_as_non_root():
    stages = stage_instructions()
    assert set(stages) >= {"gpu", "tpu", "serving"}
    for name in ("gpu", "tpu"):
        assert stages[name]["ENTRYPOINT"] == ['["python", "-m", "trainer"]']
    assert stages["serving"]["ENTRYPOINT"] == ['["python3", "-m", "serving"]']
    for name in ("gpu", "tpu", "serving"):
        assert stages[name]["USER"] == ["1000"]


def test_entrypoint_command_works_locally(tmp_path):
    trainer = ["python", "-m", "trainer"]
    assert trainer in dockerfile_entrypoints()
    command = [sys.executable, *trainer[1:]]  # the venv's python in place of the image's
    result = subprocess.run([*command, "data", "sample", f"--output_dir={tmp_path}",
                             "--num_images=3"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=HANG)
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "images").glob("*.jpg"))) == 3
    help_text = subprocess.run([*command, "--help"], capture_output=True, text=True,
                               timeout=HANG, cwd=REPO)
    for flag in ("--experiment", "--config_file", "--params_override", "--mode", "--model_dir",
                 "--tpu", "--data_dir", "--label_map", "--init_checkpoint"):
        assert flag in help_text.stdout


def test_container_variants_pin_the_same_tensorflow():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]

    def version(extra: str, package: str) -> str:
        (pin,) = [r for r in extras[extra] if re.match(rf"{re.escape(package)}(\[.*\])?==", r)]
        return pin.split("==")[1]

    assert version("trainer", "tensorflow") == version("gpu", "tensorflow") == \
        version("tpu", "tensorflow-tpu")


def test_dockerignore_keeps_only_what_the_images_need():
    lines = (REPO / ".dockerignore").read_text().split()
    assert "*" in lines and "!trainer/" in lines and "!pyproject.toml" in lines
    assert "!serving/" in lines
    stage = stage_instructions()["serving"]
    assert stage["COPY"] == ["serving/ serving/"]  # nothing of the trainer's


# --- The serving image ----------------------------------------------------------------------

def test_serving_image_is_tf_serving_at_the_trainers_tensorflow():
    """One version: pyproject.toml's tensorflow pin; the base image's tag must equal it, for
    CPUs and (its -gpu build) for GPUs, which cloudbuild.yaml selects by SERVING_DEVICE."""
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["trainer"]
    (tensorflow,) = [pin.split("==")[1] for pin in pins if pin.startswith("tensorflow==")]
    stages = stage_instructions()
    assert stages["serving-base-cpu"]["FROM"] == [f"tensorflow/serving:{tensorflow}"]
    assert stages["serving-base-gpu"]["FROM"] == [f"tensorflow/serving:{tensorflow}-gpu"]
    assert stages[""]["ARG"] == ["SERVING_DEVICE=cpu"]  # a plain build is the CPU image
    assert stages["serving"]["FROM"] == ["serving-base-${SERVING_DEVICE}"]
    import yaml

    builds = [step["args"] for step in yaml.safe_load(
        (REPO / "cloudbuild.yaml").read_text())["steps"] if "serving" in step["args"]]
    assert [args[args.index("-t") + 1] for args in builds] == [
        "${_SERVING_IMAGE}", "${_SERVING_GPU_IMAGE}"]
    assert "SERVING_DEVICE=gpu" in builds[1] and "--build-arg" not in builds[0]


def test_serving_stage_serves_the_contracts_port():
    assert stage_instructions()["serving"]["EXPOSE"] == [str(contract.HTTP_PORT)]


def test_serving_code_is_standard_library_python_3_10():
    """The image has Ubuntu 22.04's Python 3.10 and nothing installed with pip."""
    for path in sorted((REPO / "serving").glob("*.py")):
        tree = ast.parse(path.read_text(), feature_version=(3, 10))
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        outside = imported - sys.stdlib_module_names - {"serving", "__future__"}
        assert not outside, f"{path.name} imports {outside}"
        assert not {"tomllib"} & imported  # new in 3.11


def vertex_variables(storage_uri: str, **changes: str) -> dict[str, str]:
    return {contract.PORT: "8080", contract.PREDICT_ROUTE: "/v1/models/detector:predict",
            contract.HEALTH_ROUTE: "/v1/models/detector", contract.STORAGE_URI: storage_uri,
            **changes}


def test_serving_entrypoint_copies_the_model_below_a_version_and_starts_tf_serving(tmp_path):
    from tests.fakes.gcs import FakeGcs

    files = {"saved_model.pb": b"graph", "variables/variables.index": b"index",
             "variables/variables.data-00000-of-00001": b"weights", "label_map.pbtxt": b"map"}
    with FakeGcs() as gcs:
        bucket = gcs.client().create_bucket("pets-data")
        for name, data in files.items():
            bucket.blob(f"runs/r1/model/{name}").upload_from_string(data)
        bucket.blob("runs/r1/model-other/saved_model.pb").upload_from_string(b"not this")
        command = entrypoint.prepare(
            {**vertex_variables("gs://pets-data/runs/r1/model", AIP_HTTP_PORT="9000"),
             "STORAGE_EMULATOR_HOST": gcs.url}, tmp_path)
    parameters = tmp_path / "batching_parameters.txt"
    # TF Serving's REST API behind the request front, which takes AIP_HTTP_PORT (9000)
    assert command == ["tensorflow_model_server", "--port=8500", "--rest_api_port=8501",
                       "--model_name=detector", f"--model_base_path={tmp_path}",
                       "--file_system_poll_wait_seconds=0", "--enable_batching=true",
                       f"--batching_parameters_file={parameters}", "--enable_model_warmup=true"]
    assert parameters.is_file() and not parameters.name.isdigit()  # TF Serving loads no version
    copied = {p.relative_to(tmp_path / "1").as_posix(): p.read_bytes()
              for p in (tmp_path / "1").rglob("*") if p.is_file()}
    assert copied == files


def test_batching_parameters_follow_tf_servings_guide_per_machine_and_parse_as_its_proto(
        tmp_path):
    """Issue 41 item 2: the file the entrypoint writes is read with TF Serving's
    BatchingParameters message (the fake server's reader); CPUs: no timeout, a thread and a
    queued batch a core; a GPU (the image's PETS_SERVING_DEVICE): a 2 ms window, 64 images."""
    from serving import batching
    from tests.fakes.tf_serving import batching_parameters_message, parse_flags, read_batching

    assert batching.for_machine(4, "cpu") == batching.Batching(
        max_batch_size=32, batch_timeout_micros=0, max_enqueued_batches=4, num_batch_threads=4)
    assert batching.for_machine(8, "gpu") == batching.Batching(
        max_batch_size=64, batch_timeout_micros=2000, max_enqueued_batches=8,
        num_batch_threads=8)
    assert batching.for_machine(0, "cpu").num_batch_threads == 1
    model = tmp_path / "model"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"graph")
    for device, expected in (("cpu", 0), ("gpu", 2000)):
        work = tmp_path / device
        command = entrypoint.prepare({contract.STORAGE_URI: str(model),
                                      batching.DEVICE: device}, work)
        flags = parse_flags(command)
        parsed = read_batching(flags["batching_parameters_file"])
        assert parsed == batching.this_machine({batching.DEVICE: device})
        assert parsed.batch_timeout_micros == expected
    assert stage_instructions()["serving"]["ENV"][0].endswith(
        "PETS_SERVING_DEVICE=${SERVING_DEVICE}")
    from google.protobuf import text_format

    with pytest.raises(text_format.ParseError):  # a wrapped field takes { value: N }
        text_format.Parse("max_batch_size: 3\n", batching_parameters_message()())


def test_a_docker_smoke_test_serves_a_mounted_directory(tmp_path):
    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"graph")
    (model / "variables" / "variables.index").write_bytes(b"index")
    command = entrypoint.prepare({contract.STORAGE_URI: str(model)}, tmp_path / "work")
    assert "--rest_api_port=8501" in command and "--model_name=detector" in command
    assert (tmp_path / "work" / "1" / "variables" / "variables.index").read_bytes() == b"index"


@pytest.mark.parametrize("changes, message", [
    ({contract.PREDICT_ROUTE: "/predict"}, "are not TF Serving's routes of one model"),
    ({contract.HEALTH_ROUTE: "/v1/models/other"}, "are not TF Serving's routes of one model"),
    ({contract.PORT: "8500"}, "other than 8500 (TF Serving's gRPC) and 8501"),
    ({contract.PORT: "8501"}, "and 8501 (its REST API, behind the front)"),
    ({contract.PORT: "http"}, "need a port from 1 to 65535"),
    ({contract.PORT: "\u00b2"}, "need a port from 1 to 65535"),  # a digit int() refuses
    ({contract.PORT: "70000"}, "need a port from 1 to 65535"),
    ({contract.STORAGE_URI: ""}, "AIP_STORAGE_URI is not set"),
])
def test_serving_entrypoint_refuses_what_tf_serving_would_not_serve(changes, message):
    with pytest.raises(entrypoint.ContractError, match=re.escape(message)):
        entrypoint.Settings.from_environ(vertex_variables("gs://b/m", **changes))


def test_serving_entrypoint_names_a_directory_that_is_not_a_model(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "notes.txt").write_text("x")
    with pytest.raises(FetchError, match=r"has no saved_model\.pb"):
        entrypoint.prepare(vertex_variables(str(tmp_path / "model")), tmp_path / "work")
    with pytest.raises(FetchError, match="neither gs://BUCKET/PREFIX nor a local directory"):
        entrypoint.prepare(vertex_variables(str(tmp_path / "none")), tmp_path / "work")


@pytest.mark.parametrize("name", ["../escape", "a//b", "/abs", "a/./b", "a/../../b"])
def test_object_names_that_would_leave_the_model_directory_are_refused(name):
    with pytest.raises(FetchError, match="would leave the model directory"):
        safe_relative(name, f"gs://b/m/{name}")


def test_the_serving_image_reads_the_bucket_as_its_service_account(tmp_path):
    """The metadata server's token (GCE_METADATA_HOST moves it, as for google-auth)."""
    asked = []

    def token(request: Request) -> dict:
        asked.append((request.path, request.headers["Metadata-Flavor"]))
        return {"access_token": "ya29.token", "token_type": "Bearer"}

    with json_server(token) as url:
        host = url.removeprefix("http://")
        assert access_token({"GCE_METADATA_HOST": host}) == "ya29.token"
    assert asked == [("/computeMetadata/v1/instance/service-accounts/default/token", "Google")]
    with pytest.raises(FetchError, match="no access token from the metadata server"):
        fetch("gs://b/m", tmp_path, {"GCE_METADATA_HOST": "127.0.0.1:9"})


@pytest.mark.parametrize("listing, body, message", [
    (b"<html>", b"", "is not one"),  # not JSON
    (b"[1, 2]", b"", "is not one"),  # JSON, but not the listing the API documents
    (b'{"items": [{"size": 3}]}', b"", "is not one"),  # an item without a name
    (b'{"items": [{"name": "m/saved_model.pb"}]}', b"cut", "failed"),  # body cut short
])
def test_a_bucket_that_answers_badly_is_one_fetch_error(tmp_path, listing, body, message):
    """The image's copy step: whatever Cloud Storage (here an emulator) answers, a FetchError
    the entrypoint prints in one line, and no partial file left behind."""

    class Gcs(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            media = "alt=media" in self.path
            self.send_response(200)
            self.send_header("Content-Length", str(100 if media else len(listing)))
            self.end_headers()
            self.wfile.write(body if media else listing)  # media: 100 promised, 3 sent

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Gcs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(FetchError, match=message):
            fetch("gs://b/m", tmp_path / "copy", {  # a cut body is tried again: quickly
                "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{server.server_address[1]}"},
                Backoff(first=0.001))
    finally:
        server.shutdown()
        server.server_close()
    assert not [path for path in tmp_path.rglob("*") if path.is_file()]


def test_a_model_object_that_is_also_a_folder_is_one_serving_line(tmp_path):
    """`m/variables` beside `m/variables/variables.index` (a disk holds a file or a folder
    there): the image's entrypoint says so in one line naming both, exit 1, before writing."""
    from tests.fakes.gcs import FakeGcs

    with FakeGcs() as gcs:
        bucket = gcs.client().create_bucket("pets-data")
        for name in ("saved_model.pb", "variables", "variables/variables.index"):
            bucket.blob(f"m/{name}").upload_from_string(b"x")
        result = subprocess.run(
            [sys.executable, "-m", "serving"], cwd=REPO, capture_output=True, text=True,
            timeout=HANG, env={**vertex_variables("gs://pets-data/m"), "PATH": "/usr/bin:/bin",
                             "STORAGE_EMULATOR_HOST": gcs.url, "TMPDIR": str(tmp_path)})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "serving: gs://pets-data/m/variables is both an object and a folder of objects "
        "(gs://pets-data/m/variables/variables.index): a disk holds one or the other; delete "
        "the one the export did not write"]
    assert not [path for path in tmp_path.rglob("*") if path.is_file()]


@pytest.mark.parametrize("names, message", [
    (["m/a/b", "m/a"], "gs://b/m/a is both an object and a folder of objects (gs://b/m/a/b)"),
    (["m/a", "m/a-b", "m/a/b"], "gs://b/m/a is both an object and a folder"),  # - sorts < /
    (["m/ok", "m/x\n\x1b]0;owned\x07/../../etc"], "'gs://b/m/x\\n\\x1b]0;owned\\x07/"),
    ([f"m/{i}" for i in range(10_002)], "gs://b/m/ holds more than 10,000 objects"),
])
def test_hostile_object_names_are_refused_before_anything_is_written(names, message):
    with pytest.raises(FetchError) as refused:
        plan("b", "m/", names)
    assert message in str(refused.value)
    assert len(str(refused.value).splitlines()) == 1 and "\x1b" not in str(refused.value)


def test_names_the_disk_cannot_hold_or_that_look_like_a_partial_file(tmp_path):
    """A partial download has a name of its own (no object's `.x.partial` is overwritten);
    a name too long for the disk, or a bucket that is not there, is a FetchError naming it."""
    from tests.fakes.gcs import FakeGcs

    with FakeGcs() as gcs:
        environ = {"STORAGE_EMULATOR_HOST": gcs.url}
        bucket = gcs.client().create_bucket("pets-data")
        files = {"saved_model.pb": b"graph", ".saved_model.pb.partial": b"an object too"}
        for name, data in files.items():
            bucket.blob(f"m/{name}").upload_from_string(data)
        assert fetch("gs://pets-data/m", tmp_path / "copy", environ) == 2
        assert {p.name: p.read_bytes() for p in (tmp_path / "copy").iterdir()} == files
        for long in (f"m/{'d' * 300}/saved_model.pb", f"n/{'f' * 300}"):
            bucket.blob(long).upload_from_string(b"x")
            with pytest.raises(FetchError, match=f"gs://pets-data/{long[:2]}d*f*.*name too long"):
                fetch(f"gs://pets-data/{long[:1]}", tmp_path / long[:1], environ)
        with pytest.raises(FetchError, match="answered 404"):
            fetch("gs://no-such-bucket/m", tmp_path / "none", environ)
    assert not list((tmp_path / "n").rglob(".partial-*"))


def test_serving_entrypoint_command_fails_in_one_line():
    """`python3 -m serving` as the image runs it: a bad variable is one line in the log."""
    result = subprocess.run(
        [sys.executable, "-m", "serving"], cwd=REPO, capture_output=True, text=True,
        timeout=HANG, env={"AIP_PREDICT_ROUTE": "/predict", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1
    assert result.stderr.startswith("serving: AIP_PREDICT_ROUTE='/predict' and ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_image_build_copies_every_file_the_serving_stage_needs():
    from infra.image_context import context_files

    context = {p.relative_to(REPO).as_posix() for p in context_files(REPO)}
    sources = {p.relative_to(REPO).as_posix() for p in Path(REPO / "serving").glob("*.py")}
    assert sources <= context


def test_the_gpu_image_has_what_reduction_server_requires():
    """Vertex AI's distributed-training page: the chief's and workers' container needs NCCL
    2.7 or later and the google-reduction-server package, from Google's apt repository."""
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement
    from packaging.version import Version

    from launch.targets.vertex.hardware import catalogue

    wanted = catalogue()["reduction_server"]
    stages = stage_instructions()
    gpu = "\n".join(stages["gpu"]["RUN"])
    source = re.search(r'echo "deb \[signed-by=(\S+)\] (\S+) (\S+) main"', gpu)
    assert source and source.group(2, 3) == ("https://packages.cloud.google.com/apt",
                                            "google-fast-socket")
    assert f"urlretrieve('https://packages.cloud.google.com/apt/doc/apt-key.gpg', " \
        f"'{source.group(1)}')" in gpu  # the key is trusted for that repository alone
    assert re.search(rf"apt-get install .*\b{wanted['package']}\b", gpu)
    text = (REPO / "Dockerfile").read_text()  # installed as root, before the gpu stage's USER
    assert text.index(wanted["package"]) < text.index("USER 1000", text.index(" AS gpu"))
    assert wanted["package"] not in str(stages["tpu"])  # TPU VMs have no NCCL to extend

    # NCCL: the gpu extra's tensorflow[and-cuda] requires it; this machine has the same pin.
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    (pin,) = [Requirement(r) for r in extras["gpu"] if r.startswith("tensorflow[")]
    assert "and-cuda" in pin.extras and version("tensorflow") in pin.specifier
    (nccl,) = [Requirement(r) for r in requires("tensorflow")
               if r.startswith("nvidia-nccl-cu12") and 'extra == "and-cuda"' in r]
    lowest = min(Version(spec.version) for spec in nccl.specifier if spec.operator == ">=")
    assert lowest >= Version(wanted["min_nccl"])
