"""Where a job may run, given where its data and its image live (pure; the facts are
infra/locations.py). A job reads its records and checkpoints from the bucket and pulls its
image from the repository; it runs only where both are read without crossing a continent:

- a location that is one region offers that region alone (Vertex AI reads a regional bucket
  from its own region; its TensorBoard integration requires it, below);
- a dual- or multi-region offers every region of its continent.

So failing over to other regions (`--regions`) needs a multi-region bucket and repository
(`bucket_location`, `registry_location` in infra/environments.py).

A Vertex AI TensorBoard takes a job's summaries only when "the bucket must be regional, that
is, not multi-region or dual-region, and the following resources must be in same region:
Cloud Storage bucket, Vertex AI training job, Vertex AI TensorBoard instance"
(https://cloud.google.com/vertex-ai/docs/experiments/tensorboard-setup, read 2026-11-24): a
job anywhere else runs without it, its summaries still in the run's directory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from infra import locations
from launch.errors import InputError
from launch.settings import Locations


class TooFar(InputError):
    """A region whose jobs would read their data or image across a continent."""


def _offers(location: str, continent_of: Callable[[str], str | None], region: str) -> bool:
    if locations.is_region(location):
        return location.lower() == region
    found = continent_of(location)
    return found is not None and found == locations.region_continent(region)


def _multi_region(table: dict[str, str], continent: str | None) -> str | None:
    return next((name for name, where in table.items() if where == continent), None)


def refuse_far(regions: Iterable[str], where: Locations, flag: str) -> None:
    """TooFar for the first region the bucket or the repository does not offer, naming the
    flag, the region, the location and the fix."""
    for region in regions:
        for what, location, continent_of, field, table in (
                ("data bucket", where.bucket, locations.bucket_continent, "bucket_location",
                 locations.BUCKET_MULTI_REGIONS),
                ("image repository", where.repository, locations.registry_continent,
                 "registry_location", locations.REGISTRY_MULTI_REGIONS)):
            if _offers(location, continent_of, region):
                continue
            continent = locations.region_continent(region)
            wider = _multi_region(table, continent)
            kind = what.split()[-1]
            if locations.is_region(location):
                why = f"the {what} is in {location} alone, so jobs run there only"
                fix = (f"for other regions give the environment a multi-region {kind} "
                       f"({field}: {wider!r} in infra/environments.py, then `npx cdktf "
                       "deploy`)" if wider else
                       f"no multi-region spans {continent or region}: a {kind} there is needed")
            else:
                home = continent_of(location)
                why = (f"the {what} is in {location} ({home}) and {region} is in "
                       f"{continent or 'no continent infra/locations.py knows'}")
                fix = f"choose regions in {home}, where the {kind} is read without crossing one"
            assumed = f" ({where.assumed})" if where.assumed else ""
            raise TooFar(f"{flag} {region}: {why}{assumed}; {fix}")


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
