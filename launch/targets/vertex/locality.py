"""Where a job may run, given where its data and its image live (pure; the facts are
infra/locations.py). A job reads its records and checkpoints from the bucket and pulls its
image from the repository; it runs only where both are read without crossing a continent:

every region of the location's continent is offered, whether the location is one region, a
dual-region or a multi-region (a regional bucket in us-central1 serves us-east4 too, at
inter-region rates; a multi-region bucket and repository, `bucket_location` and
`registry_location` in infra/environments.py, serve their continent at one rate).

A Vertex AI TensorBoard takes a job's summaries only when "the bucket must be regional, that
is, not multi-region or dual-region, and the following resources must be in same region:
Cloud Storage bucket, Vertex AI training job, Vertex AI TensorBoard instance"
(https://cloud.google.com/vertex-ai/docs/experiments/tensorboard-setup, read 2026-11-24): a
job anywhere else runs without it, its summaries still in the run's directory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from infra import locations
from launch.context.settings import ENV_PREFIX, Locations
from launch.errors import InputError


class TooFar(InputError):
    """A region whose jobs would read their data or image across a continent."""


def _offers(location: str, continent_of: Callable[[str], str | None], region: str) -> bool:
    found = continent_of(location)
    return found is not None and found == locations.region_continent(region)


def refuse_far(regions: Iterable[str], where: Locations, flag: str) -> None:
    """TooFar for the first region the bucket or the repository does not offer: one
    sentence naming the flag, the region, the location (and what was assumed) and the fix."""
    for region in regions:
        for kind, what, location, continent_of in (
                ("bucket", "data bucket", where.bucket, locations.bucket_continent),
                ("repository", "image repository", where.repository,
                 locations.registry_continent)):
            if _offers(location, continent_of, region):
                continue
            home = continent_of(location)
            continent = locations.region_continent(region)
            assumed = (f", taken to be {where.assumed} as its location is not known"
                       if kind in where.unknown else "")
            regions_in = "regions" if flag == "--regions" else "a region"
            fix = (f"choose {regions_in} in {home}, where the {kind} is read without crossing "
                   "a continent" if home else
                   f"name the {kind}'s location as infra/locations.py lists it")
            if kind in where.unknown:
                fix += f", or set {ENV_PREFIX}{kind.upper()}_LOCATION"
            raise TooFar(f"{flag} {region} is in "
                         f"{continent or 'no continent infra/locations.py knows'}, but the "
                         f"{what} is in {location} "
                         f"({home or 'a location infra/locations.py does not know'}){assumed}: "
                         f"{fix}")


def tensorboard_in(region: str, tensorboard: str | None, bucket: str
                   ) -> tuple[str | None, str]:
    """The TensorBoard a job in `region` may stream to, or (None, why not)."""
    if not tensorboard:
        return None, ""
    home = tensorboard.split("/")[3]  # projects/P/locations/REGION/tensorboards/ID
    if home != region:
        return None, (f"the TensorBoard is in {home}, and a job streams to a TensorBoard of "
                      "its own region")
    if not locations.is_region(bucket) or bucket.lower() != region:
        return None, (f"the bucket is in {bucket}, and a TensorBoard reads summaries from a "
                      "regional bucket in its own region")
    return tensorboard, ""
