"""launch/stores/cvat.py against a CVAT server on 127.0.0.1 (tests/fakes/cvat.py: the REST
calls cvat-sdk makes, answered with the SDK's own models): a push's pre-labels come back
from a pull as the same boxes, in an export `--format cvat` converts, under names of our
making; a second push adds nothing; a hostile server's answers are refused or skipped, and
named; the token is never shown."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from launch.errors import InputError
from launch.stores import cvat
from tests.fakes.cvat import Cvat, cvat_server
from trainer.data.convert import convert_directory
from trainer.data.formats.cvat import read_images

TOKEN = "s3cret-t0ken-for-the-fake"
LABELS = ["cat", "dog"]
PRELABELS = {"a cat.jpg": [("cat", 1.0, 2.0, 30.0, 40.0)],
             "dog.png": [("dog", 3.5, 4.25, 20.0, 21.0), ("cat", 0.0, 0.0, 10.0, 10.0)]}


def images(folder: Path) -> list[Path]:
    """Three images of distinct bytes, and a fourth of the first's bytes."""
    folder.mkdir()
    paths = []
    for index, name in enumerate(["a cat.jpg", "dog.png", "empty.jpg"]):
        path = folder / name
        Image.new("RGB", (64 + index, 48), (index * 60, 20, 0)).save(path)
        paths.append(path)
    (folder / "again.jpg").write_bytes(paths[0].read_bytes())
    return [*paths, folder / "again.jpg"]


def connect(url: str) -> object:
    return cvat.connect(cvat.Settings(url), env={cvat.TOKEN_VARIABLE: TOKEN})


def complete_jobs(client, task_id: int) -> None:
    """What a labeller does when done: each job of the task marked completed, by the SDK."""
    for job in client.tasks.retrieve(task_id).get_jobs():
        job.update({"state": "completed"})


@dataclasses.dataclass
class Served:
    """A fake CVAT on 127.0.0.1, a client of it, and the images of `images`."""

    fake: Cvat
    url: str
    client: object
    paths: list[Path]

    def labelled(self, prelabels=PRELABELS) -> int:
        """The images pushed with `prelabels` and their jobs completed: the task's id."""
        task_id, _ = cvat.push(self.client, "pets", self.paths, LABELS, prelabels)
        complete_jobs(self.client, task_id)
        return task_id


@pytest.fixture
def served(tmp_path) -> Iterator[Served]:
    fake = Cvat(TOKEN)
    with cvat_server(fake) as url:
        yield Served(fake, url, connect(url), images(tmp_path / "in"))


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * \
        max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    area = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / area


def test_prelabels_pushed_come_back_as_the_same_boxes_under_names_of_ours(served, tmp_path):
    client, paths = served.client, served.paths
    task_id, added = cvat.push(client, "pets", paths, LABELS, PRELABELS)
    assert added == 3  # again.jpg: the bytes of a cat.jpg
    assert sorted(name.split("-", 1)[1] for name, _ in served.fake.tasks[task_id].frames) == [
        "a_cat.jpg", "dog.png", "empty.jpg"]  # uploaded as SHA256-NAME
    unfinished = cvat.pull(client, "pets", tmp_path / "early")
    assert unfinished.images == 0 and unfinished.skipped == {"job not completed": 3}
    complete_jobs(client, task_id)
    pulled = cvat.pull(client, "pets", tmp_path / "out")
    assert pulled == cvat.Pulled(2, 3, {"no shapes": 1})
    shas = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in paths[:2]}
    ours = {f"{shas['a cat.jpg'][:16]}-a_cat.jpg": "a cat.jpg",
            f"{shas['dog.png'][:16]}-dog.png": "dog.png"}
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == sorted(
        ["annotations.xml", "images", *ours])
    for name, original in ours.items():
        assert (tmp_path / "out" / "images" / name).read_bytes() == \
            (tmp_path / "in" / original).read_bytes()
    read = {name: found for name, _, found in read_images(tmp_path / "out" / "annotations.xml",
                                                           max_objects=100)}
    assert set(read) == set(ours)
    for name, original in ours.items():
        got = [(o.name, (o.xmin, o.ymin, o.xmax, o.ymax)) for o in read[name].objects]
        want = [(label, tuple(box)) for label, *box in PRELABELS[original]]
        assert [label for label, _ in got] == [label for label, _ in want]
        assert [iou(a, b) for (_, a), (_, b) in zip(got, want, strict=True)] == [1.0] * len(want)
    report = convert_directory(tmp_path / "out", tmp_path / "records", format="cvat",
                               num_shards=1, processes=1, progress=False)
    assert report["label_map_ids"] == {"cat": 1, "dog": 2}
    assert sum(split["examples"] for split in report["splits"].values()) == 2


def test_a_second_push_adds_nothing_and_a_new_image_makes_a_task_the_pull_reads_too(
        served, tmp_path):
    client, paths, fake = served.client, served.paths, served.fake
    first = cvat.push(client, "pets", paths, LABELS, PRELABELS)
    calls = len(fake.calls)
    assert cvat.push(client, "pets", paths, LABELS, PRELABELS) == cvat.Pushed(None, 0)
    assert not any(call.startswith("POST") for call in fake.calls[calls:])
    extra = tmp_path / "in" / "new.jpg"
    Image.new("RGB", (40, 30), (1, 2, 3)).save(extra)
    second = cvat.push(client, "pets", [*paths, extra], LABELS,
                       {"new.jpg": [("dog", 5.0, 5.0, 25.0, 25.0)]})
    assert second.added == 1 and second.task_id != first.task_id
    assert cvat.push(client, "pets-other", [extra], LABELS).added == 1  # another name
    for task in (first.task_id, second.task_id):
        complete_jobs(client, task)
    pulled = cvat.pull(client, "pets", tmp_path / "out")
    assert (pulled.images, pulled.shapes) == (3, 4)


def test_prelabels_off_the_labels_are_refused_before_any_task(served):
    with pytest.raises(InputError, match="pre-label 'bird' is not one of the labels"):
        cvat.push(served.client, "pets", served.paths, LABELS,
                  {"dog.png": [("bird", 1, 1, 5, 5)]})
    assert not served.fake.tasks  # the half-made task removed


def hostile_names(fake: Cvat, stranger: str):
    """Renames frame 0 to climb out of the export, frame 1 to an image never pushed."""
    def tamper(path: str, body: object) -> object:
        if path.endswith("/data/meta"):
            body["frames"][0]["name"] = "../../evil.jpg"
            body["frames"][1]["name"] = f"{stranger}-x.jpg"
        return body
    return tamper


def test_a_hostile_servers_names_and_images_are_skipped_and_named(served, tmp_path):
    client, fake = served.client, served.fake
    served.labelled({**PRELABELS, "empty.jpg": [("cat", 1, 1, 9, 9)]})
    fake.tamper = hostile_names(fake, hashlib.sha256(b"never pushed").hexdigest())
    pulled = cvat.pull(client, "pets", tmp_path / "out" / "export")
    assert pulled.images == 1 and pulled.skipped == {"not pushed by label.push": 1,
                                                      "image changed on the server": 1}
    fake.tamper = lambda path, body: b"\xff" * 100 if path.endswith("/data/") else body
    changed = cvat.pull(client, "pets", tmp_path / "changed")
    assert changed.images == 0 and changed.skipped == {"image changed on the server": 3}
    assert not (tmp_path / "evil.jpg").exists() and not (tmp_path / "out" / "evil.jpg").exists()
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                     if not p.is_relative_to(tmp_path / "in"))
    assert all(p.startswith(("out/export", "changed")) or p == "out" for p in written), written


def test_a_hostile_servers_huge_or_off_schema_answers_are_refused_in_one_line(served,
                                                                        tmp_path):
    client, fake, url = served.client, served.fake, served.url
    served.labelled()
    huge = b" " * (cvat.MAX_ANSWER_BYTES + 1)
    fake.tamper = lambda path, body: huge if path.endswith("/annotations/") else body
    with pytest.raises(cvat.CvatError, match=r"annotations at .*: the answer is more than "
                                             r"67,108,864 bytes: refused$"):
        cvat.pull(client, "pets", tmp_path / "out")
    assert not (tmp_path / "out" / "annotations.xml").exists()
    fake.tamper = lambda path, body: {**body, "count": "many"} \
        if path == "/api/tasks" else body
    with pytest.raises(cvat.CvatError, match=r"listing tasks named 'pets' at .*: the answer "
                                             r"is not CVAT's API") as raised:
        cvat.pull(client, "pets", tmp_path / "out")
    assert "\n" not in str(raised.value)
    first: dict[str, object] = {}

    def forever(path: str, body: object) -> object:  # the same page, a next one named
        if path != "/api/tasks":
            return body
        return first.setdefault("page", {**body, "next": f"{url}/api/tasks?page=2"})
    fake.tamper, calls = forever, len(fake.calls)
    assert cvat.pull(client, "pets", tmp_path / "again").images == 2
    assert fake.calls[calls:].count("GET /api/tasks") == 2  # page 2 added nothing: done


def test_a_server_that_never_finishes_the_upload_is_given_up_on_and_its_task_removed(served):
    served.fake.tamper = lambda path, body: {**body, "status": "started"} \
        if path.startswith("/api/requests/") else body
    with pytest.raises(cvat.CvatError, match=r"making task \d+'s frames at .*: not finished "
                                             r"after 0.5 s"):
        cvat.push(served.client, "pets", served.paths, LABELS, wait=0.5)
    assert not served.fake.tasks


def test_the_token_is_never_shown_nor_taken_from_a_flag(tmp_path, capsys):
    fake = Cvat(TOKEN)
    wrong = "wr0ng-t0ken-echoed-back"
    with cvat_server(fake) as url:
        fake.tamper = lambda path, body: {"detail": f"Invalid token {wrong}."} \
            if path == "/api/tasks" else body
        client = cvat.connect(cvat.Settings(url), env={cvat.TOKEN_VARIABLE: wrong})
        with pytest.raises(cvat.CvatError, match=r"HTTP 401: .*Invalid token \*\*\*") as raised:
            cvat.pull(client, "pets", tmp_path / "out")
        assert wrong not in str(raised.value)
        fake.tamper = None
        token_file = tmp_path / "token"
        token_file.write_text(f"{TOKEN}\n")
        from_file = cvat.connect(cvat.Settings(url, str(token_file)), env={})
        assert cvat.push(from_file, "pets", images(tmp_path / "in"), LABELS).added == 3
    with pytest.raises(InputError, match="no CVAT credentials: set CVAT_ACCESS_TOKEN"):
        cvat.connect(cvat.Settings("http://127.0.0.1:9"), env={})
    output = capsys.readouterr()
    assert TOKEN not in output.out + output.err and wrong not in output.out + output.err
