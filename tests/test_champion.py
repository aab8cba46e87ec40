"""Champion and challenger (launch/targets/champion.py) against the fake Model and
Endpoint services and the fake bucket: a run is uploaded or deployed only when its gate
metric on the test split is no worse than the serving version's, on the same test data;
refusals name both figures; --force goes ahead and the version says why; the dry run shows
the comparison."""

from __future__ import annotations

import json

import pytest

from launch.errors import InputError
from launch.targets import champion
from launch.targets.champion import Challenge, GateError
from launch.targets.vertex import registry
from launch.targets.vertex import serving as vertex_serving
from tests.test_confusion import IMAGES, NAMES
from tests.test_serving import cpu, put, write_run
from trainer.evaluation import confusion
from trainer.model.eval_record import EvaluationRecord

TEST_DATA = "gs://pets-data/datasets/pets/v3/test.record-*"
MODEL = "projects/pets-detector-dev/locations/us-central1/models/pets-retinanet-mobilenet"


def versions(services) -> list:
    return services.models.versions.get(MODEL, [])


def evaluated_on_test(storage, run_id: str, ap50: float, data: str = TEST_DATA,
                      step: int = 1000) -> None:
    """The run's test evaluation of its exported checkpoint (eval-test/ckpt-N.json)."""
    point = confusion.operating_point(IMAGES, NAMES).as_json()
    put(storage, f"runs/{run_id}/checkpoints/eval-test/ckpt-{step}.json", json.dumps(
        EvaluationRecord(step, {"AP": ap50 - 0.2, "AP50": ap50}, f"ckpt-{step}",
                         operating_point=point, data=data).to_json()))


def serving_run(services, ap50: float = 0.90) -> None:
    """Run `champ` uploaded (the model's first version: its default) and tested."""
    write_run(services.storage, "champ")
    evaluated_on_test(services.storage, "champ", ap50)
    said = vertex_serving.upload_model(services.cloud(), "champ")
    assert "champion: no version serving yet; nothing to compare against" in said


def test_a_worse_challenger_is_refused_with_both_figures_and_a_better_one_passes(services):
    serving_run(services)
    write_run(services.storage, "worse")
    evaluated_on_test(services.storage, "worse", 0.85)
    with pytest.raises(GateError) as refused:
        vertex_serving.upload_model(services.cloud(), "worse")
    assert str(refused.value) == (
        "run worse's AP50 on the test split is 0.850 (run worse, ckpt-1000), the serving "
        "version's (projects/pets-detector-dev/locations/us-central1/models/"
        "pets-retinanet-mobilenet@1) 0.900 (run champ, ckpt-1000): worse by 0.050, more than "
        "0.01 (--max-drop); train it further, or pass --force REASON to go ahead anyway")
    assert len(versions(services)) == 1  # nothing uploaded

    write_run(services.storage, "better")
    evaluated_on_test(services.storage, "better", 0.895)  # within 0.01 below: no worse
    said = vertex_serving.upload_model(services.cloud(), "better")
    assert "champion: AP50 on the test split 0.895 against the serving version's 0.900 " \
           "(run champ, ckpt-1000)" in said and "uploaded as" in said
    assert vertex_serving.upload_model(services.cloud(), "worse", rules=Challenge(max_drop=0.1))


def test_force_goes_ahead_and_the_version_says_why(services):
    serving_run(services)
    write_run(services.storage, "worse")
    evaluated_on_test(services.storage, "worse", 0.5)
    said = vertex_serving.upload_model(services.cloud(), "worse",
                                       rules=Challenge(force="new  classes\nadded"))
    assert "going ahead: --force 'new classes added'" in said
    version = versions(services)[-1]
    assert version.labels["forced"] == "true"
    assert version.version_description.endswith("; forced: new classes added")
    with pytest.raises(InputError, match="--force: give the reason"):
        vertex_serving.upload_model(services.cloud(), "worse", rules=Challenge(force="x"))


def test_other_test_data_or_no_test_evaluation_is_refused(services):
    serving_run(services)
    write_run(services.storage, "other")
    evaluated_on_test(services.storage, "other", 0.99, data="gs://pets-data/datasets/pets/v4/test.record-*")
    with pytest.raises(GateError, match=r"run other was tested on gs://pets-data/datasets/"
                                        r"pets/v4/test.record-\*, the serving version .* on "
                                        r"gs://pets-data/datasets/pets/v3/test.record-\*"):
        vertex_serving.upload_model(services.cloud(), "other")
    write_run(services.storage, "untested")
    with pytest.raises(GateError, match=r"run untested's ckpt-1000 has no test evaluation "
                                        r"to set against the serving version's AP50 0\.900 .*"
                                        r"invoke eval --target vertex --run-id untested "
                                        r"--split test"):
        vertex_serving.upload_model(services.cloud(), "untested")


def test_a_class_recall_can_be_the_measure(services):
    serving_run(services)
    write_run(services.storage, "same")
    evaluated_on_test(services.storage, "same", 0.5)
    said = vertex_serving.upload_model(services.cloud(), "same", rules=Challenge(gate_class="dog"))
    assert "champion: recall of 'dog' on the test split 0.500 against the serving " \
           "version's 0.500" in said
    with pytest.raises(InputError, match="--gate-class 'lion': run same's test evaluation "
                                         "has no such class"):
        vertex_serving.upload_model(services.cloud(), "same", rules=Challenge(gate_class="lion"))
    with pytest.raises(InputError, match="--max-drop nan"):
        vertex_serving.upload_model(services.cloud(), "same",
                                    rules=Challenge(max_drop=float("nan")))


def test_the_dry_run_prints_the_comparison(services, capsys):
    serving_run(services)
    write_run(services.storage, "better")
    evaluated_on_test(services.storage, "better", 0.93)
    said = vertex_serving.upload_model(services.cloud(), "better", dry_run=True)
    assert json.loads(said)["model"]["labels"]["run"] == "better"  # the request alone
    lines = capsys.readouterr().err.splitlines()
    assert lines[1].startswith("champion: AP50 on the test split 0.930 against the serving "
                               "version's 0.900 (run champ, ckpt-1000)")
    assert len(versions(services)) == 1


def test_deploy_sets_the_run_against_what_serves_on_the_endpoint(services, serving_prices,
                                                                  capsys):
    serving_run(services)
    vertex_serving.deploy(services.cloud(), "champ", cpu, dry_run=False)
    write_run(services.storage, "worse")
    evaluated_on_test(services.storage, "worse", 0.8)
    vertex_serving.upload_model(services.cloud(), "worse", rules=Challenge(force="to deploy it"))
    endpoint = next(iter(services.endpoints.endpoints)).rsplit("/", 1)[-1]
    with pytest.raises(GateError, match=r"run worse's AP50 on the test split is 0.800 .* "
                                        r"0.900 \(run champ, ckpt-1000\)"):
        vertex_serving.deploy(services.cloud(), "worse", cpu, endpoint=endpoint)
    capsys.readouterr()
    vertex_serving.deploy(services.cloud(), "worse", cpu, endpoint=endpoint, dry_run=True,
                          rules=Challenge(force="a canary"))
    assert "going ahead: --force 'a canary'" in capsys.readouterr().err


def test_the_judgement_alone():
    measure = champion.Measure("AP50")
    one = champion.Figure("a", 1, 0.8, "d")
    assert champion.judge(measure, one, None, "m@1", 0.01, None, "a", 1).line.startswith(
        "champion: m@1 has no test evaluation of its checkpoint; not compared")
    assert champion.judge(measure, one, champion.Figure("b", 2, 0.805, "d"), "m@1", 0.01,
                          None, "a", 1).forced is None
    with pytest.raises(GateError):
        champion.judge(measure, one, champion.Figure("b", 2, 0.82, "d"), "m@1", 0.01, None,
                       "a", 1)


def test_the_champion_is_the_version_taking_the_traffic_not_the_first(services,
                                                                      serving_prices):
    """Version 1 keeps the `default` alias; version 2 takes all the endpoint's traffic: a run
    is held to version 2's figure."""
    serving_run(services)  # champ: version 1, AP50 0.90
    write_run(services.storage, "better")
    evaluated_on_test(services.storage, "better", 0.95)
    vertex_serving.upload_model(services.cloud(), "better")  # version 2
    vertex_serving.deploy(services.cloud(), "better", cpu)  # 100% of the new endpoint's traffic
    write_run(services.storage, "mid")
    evaluated_on_test(services.storage, "mid", 0.92)  # above version 1, below version 2
    with pytest.raises(GateError, match=r"0\.920 .*/models/pets-retinanet-mobilenet@2\) "
                                        r"0\.950 \(run better, ckpt-1000\)"):
        vertex_serving.upload_model(services.cloud(), "mid")


def test_test_data_is_compared_by_what_was_read_not_how_it_was_named():
    named = "gs://b/datasets/pets/v3/test.record-00000-of-00001 (1 files, sha256 0123abcd)"
    globbed = "gs://b/datasets/pets/v3/test.record-* (1 files, sha256 0123abcd)"
    redone = "gs://b/records/test.record-* (1 files, sha256 99999999)"
    assert champion.digest(named) == champion.digest(globbed) != champion.digest(redone)
    assert champion.digest("gs://b/records/test.record-*") == "gs://b/records/test.record-*"


CHAMP_RECORD = "runs/champ/checkpoints/eval-test/ckpt-1000.json"


def champion_record(ap50: float = 0.95, **fields) -> str:
    """The champion's test record, with `fields` over it (None: left out)."""
    data = EvaluationRecord(1000, {"AP": ap50 - 0.2, "AP50": ap50}, "ckpt-1000",
                            data=TEST_DATA).to_json()
    return json.dumps({k: v for k, v in {**data, **fields}.items() if v is not None})


@pytest.mark.parametrize("damaged, problem", [
    (champion_record()[:-20], "cannot be read (is not JSON: "),
    (champion_record().replace("0.95", "NaN"), "has no finite AP50"),
    (champion_record(data=None), "has no `data` (which test records it read)"),
    (champion_record(metrics=None), "cannot be read (it holds no metrics)"),
    (champion_record(pad="x" * (16 << 20)), "cannot be read (is more than 16,777,216 bytes)"),
])
def test_a_damaged_champion_record_refuses_instead_of_opening_the_gate(services, damaged,
                                                                       problem):
    """A serving version (0.95) whose test record is truncated, holds NaN,
    lacks `data` or metrics, or is over the 16 MiB read bound is not "not evaluated": a run
    at 0.30 is refused in one line naming the record, unless --force REASON."""
    from tests.test_serving import put

    serving_run(services, 0.95)
    put(services.storage, CHAMP_RECORD, damaged)
    write_run(services.storage, "weak")
    evaluated_on_test(services.storage, "weak", 0.30)
    with pytest.raises(GateError) as refused:
        vertex_serving.upload_model(services.cloud(), "weak")
    said = str(refused.value)
    assert said.startswith(f"the serving version ({MODEL}@1): its test record "
                           f"gs://pets-data/{CHAMP_RECORD} ")
    assert problem in said and "\n" not in said
    assert said.endswith("and pass --force REASON to go ahead")
    assert len(versions(services)) == 1  # nothing uploaded
    forced = vertex_serving.upload_model(services.cloud(), "weak",
                                         rules=Challenge(force="the champion's record is lost"))
    assert "going ahead: --force \"the champion's record is lost\"" in forced
    assert versions(services)[-1].labels["forced"] == "true"


def test_a_champion_record_rewritten_since_its_judgement_refuses(services):
    """The version records the sha256 of the test record it was judged on;
    a champion's record rewritten down afterwards (0.95 to 0.10, to let a 0.30 run through)
    is found changed and refused, in one line."""
    from tests.test_serving import put

    serving_run(services, 0.95)
    judged = services.storage.bucket("pets-data").blob(CHAMP_RECORD).download_as_bytes()
    put(services.storage, CHAMP_RECORD, champion_record(0.10))
    write_run(services.storage, "weak")
    evaluated_on_test(services.storage, "weak", 0.30)
    with pytest.raises(GateError) as refused:
        vertex_serving.upload_model(services.cloud(), "weak")
    said = str(refused.value)
    assert f"the serving version ({MODEL}@1): its test record (run champ, ckpt-1000) is not " \
           "the one it was judged on (sha256 " in said
    assert said.count("...") == 2 and ", 0.100): it was rewritten or evaluated again since; " \
        "restore it" in said and "\n" not in said
    assert len(versions(services)) == 1
    put(services.storage, CHAMP_RECORD, judged)  # restored, byte for byte: judged again
    with pytest.raises(GateError, match=r"worse by 0\.650"):
        vertex_serving.upload_model(services.cloud(), "weak")


def test_a_version_records_the_test_records_it_was_judged_on(services):
    """Item 5: each version's labels say what it was judged on: its own test record (sha256
    of its bytes, the digest of the files it read, its figure; `run` and `step` name it)
    and the serving version's (run, checkpoint, sha256, figure)."""
    import hashlib

    serving_run(services, 0.90)
    first = versions(services)[0].labels
    champ = services.storage.bucket("pets-data").blob(CHAMP_RECORD).download_as_bytes()
    assert first[registry.TEST_SHA] == hashlib.sha256(champ).hexdigest()[:60]
    assert registry.CHAMPION_SHA not in first  # nothing served: judged against nothing
    write_run(services.storage, "better")
    data = "gs://pets-data/datasets/pets/v3/test.record-* (1 files, sha256 0123456789abcdef)"
    evaluated_on_test(services.storage, "better", 0.93, data=TEST_DATA)
    vertex_serving.upload_model(services.cloud(), "better")
    mine = services.storage.bucket("pets-data").blob(
        "runs/better/checkpoints/eval-test/ckpt-1000.json").download_as_bytes()
    labels = versions(services)[-1].labels
    assert {k: labels[k] for k in (
        registry.TEST_SHA, registry.TEST_FIGURE, registry.CHAMPION_RUN, registry.CHAMPION_STEP,
        registry.CHAMPION_SHA, registry.CHAMPION_FIGURE, "run", "step")} == {
        registry.TEST_SHA: hashlib.sha256(mine).hexdigest()[:60], registry.TEST_FIGURE: "0_9300",
        registry.CHAMPION_RUN: "champ", registry.CHAMPION_STEP: "1000",
        registry.CHAMPION_SHA: hashlib.sha256(champ).hexdigest()[:60],
        registry.CHAMPION_FIGURE: "0_9000", "run": "better", "step": "1000"}
    assert champion.data_label(data) == "0123456789abcdef"  # the files' digest, as a label
    assert all(len(v) <= 63 and v == v.lower() for v in labels.values())
