"""Relaunching with unchanged trainer sources: the whole `invoke train --target vertex` path
(settings, content hash, tag lookups, data check, submit), timed against the local fakes of
Vertex AI, Artifact Registry, Cloud Build and GCS. It must not build."""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
from pathlib import Path

from launch.stores.gcs.records import upload_records
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.options import VertexOptions
from launch.values.jobs import Request
from launch.values.resources import Accelerator, Resources
from tests.fakes.cloud import fake_cloud, write_records


def main(relaunches: int = 20) -> dict:
    with tempfile.TemporaryDirectory() as workdir, fake_cloud(Path(workdir)) as services:
        cloud = services.cloud()
        upload_records(cloud, str(write_records(Path(workdir) / "records")))

        def launch(run: int) -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                t4 = Resources(Accelerator("NVIDIA_TESLA_T4", 1))
                Vertex(cloud).launch(Request.training(
                    None, None, t4, f"bench{run}",
                    target_options=VertexOptions(machine_type="n1-standard-8")))

        start = time.perf_counter()
        launch(0)  # first launch: uploads the build context, submits a build, then the job
        first = time.perf_counter() - start
        start = time.perf_counter()
        for run in range(1, relaunches + 1):
            launch(run)
        relaunch = (time.perf_counter() - start) / relaunches
        builds, jobs = len(services.builds.requests), len(services.vertex.received)
    print(f"\nfirst launch (context upload + build + submit): {first:6.3f} s")
    print(f"relaunch, unchanged sources (no build + submit): {relaunch:6.3f} s")
    print(f"builds submitted: {builds} for {jobs} jobs (1 expected: the first launch only)")
    return {"first": first, "relaunch": relaunch, "builds": builds, "jobs": jobs}


if __name__ == "__main__":
    main()
