"""The serving story after 2027-01-14: Google's newest prebuilt TensorFlow
prediction container is 2.15 and ends that day, so nothing the project says may suggest a newer
prebuilt one; the project's own serving image is the default and the only advice."""

from __future__ import annotations

import re
from pathlib import Path

from launch.targets.vertex import hardware, lifecycle

REPO = Path(__file__).resolve().parent.parent
# "a newer prebuilt TensorFlow version", "prebuilt ... in a later version", and the like
NEWER = re.compile(r"\b(newer|later|next|upcoming)\b[^.;:\n]{0,40}\b(pre-?built)\b|"
                   r"\bpre-?built\b[^.;:\n]{0,60}\b(newer|later) (version|release|container)",
                   re.IGNORECASE)


def said_by_the_project() -> dict[str, str]:
    """Every text a user reads about serving: the README, docs/, the catalogue, the tasks'
    help and the serving feature's messages."""
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
             hardware.CATALOGUE_FILE, REPO / "tasks.py",
             *sorted((REPO / "launch" / "features" / "serving").glob("*.py"))]
    return {str(path.relative_to(REPO)): " ".join(path.read_text().split()) for path in files}


def test_nothing_suggests_a_newer_prebuilt_container():
    found = {name: match.group(0) for name, text in said_by_the_project().items()
             if (match := NEWER.search(text))}
    assert found == {}
    assert NEWER.search("or a newer prebuilt TensorFlow version in the catalogue")  # the old fix


def test_the_prebuilt_containers_end_advises_only_our_serving_image():
    containers = hardware.catalogue()["prediction_containers"]
    assert containers["tensorflow"][0] == "2.15"  # Google's newest, read 2026-12-02
    prebuilt = [e for e in lifecycle.endings() if e.about.endswith("prediction containers")]
    assert {e.end_of_availability.isoformat() for e in prebuilt} == {"2027-01-14"}
    for ending in prebuilt:
        assert ending.source.startswith("https://docs.cloud.google.com/gemini-enterprise-"
                                        "agent-platform/")
        assert "the project's own serving image, the default" in ending.fix
        assert "without --container prebuilt" in ending.fix
        assert "no prebuilt TensorFlow prediction container after this day" in ending.fix
