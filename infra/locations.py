"""Where things are, as data, in one place: the continent of each Google Cloud region the
platform may use, and of the Cloud Storage and Artifact Registry locations that span several
regions. The environment's checks (infra/config.py) and the launcher's locality rule (a job
runs only where its data and image are read without crossing a continent,
launch/targets/vertex/locality.py) both read these tables.

Sources, read 2026-11-24 with the search tool over Google's documentation:
- regions: https://cloud.google.com/vertex-ai/docs/general/locations (the regions, grouped by
  the page's headings: United States, Canada, South America, Europe, Asia Pacific, Middle
  East, Africa). Continents here follow geography: the United States, Canada and Mexico are
  North America; Asia Pacific is split into Asia and Oceania (Australia); the Middle East is
  kept apart, as the page keeps it (no multi-region below has data centres there).
- Cloud Storage: https://cloud.google.com/storage/docs/locations. Multi-regions US ("data
  centers in the United States"), EU (in member states of the European Union), ASIA (in
  Asia); predefined dual-regions ASIA1 (Tokyo and Osaka), EUR4 (europe-north1 and
  europe-west4) and NAM4 (us-central1 and us-east1). A configurable dual-region takes a
  multi-region's name as its location ("two eligible regions within the same Multiregion",
  Cloud Storage's CustomPlacementConfig), so it is that multi-region here. The page lists
  more predefined dual-regions than the excerpts read showed in full; those are refused until
  added here with their regions.
- Artifact Registry: https://cloud.google.com/artifact-registry/docs/repositories/repo-locations
  (a repository lives in a region or a multi-region, "a large geographic area, such as Asia
  or the United States"): us, europe and asia, as Google's own images use them
  (us-docker.pkg.dev, europe-docker.pkg.dev, asia-docker.pkg.dev).
"""

from __future__ import annotations

READ = "2026-11-24"
CONTINENTS = ("north-america", "south-america", "europe", "asia", "middle-east", "oceania",
              "africa")

_BY_CONTINENT = {
    "north-america": ("us-central1", "us-east1", "us-east4", "us-east5", "us-south1",
                      "us-west1", "us-west2", "us-west3", "us-west4", "northamerica-northeast1",
                      "northamerica-northeast2"),
    "south-america": ("southamerica-east1", "southamerica-west1"),
    "europe": ("europe-central2", "europe-north1", "europe-southwest1", "europe-west1",
               "europe-west2", "europe-west3", "europe-west4", "europe-west6", "europe-west8",
               "europe-west9", "europe-west12"),
    "asia": ("asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2",
             "asia-northeast3", "asia-south1", "asia-southeast1", "asia-southeast2"),
    "middle-east": ("me-central1", "me-central2", "me-west1"),
    "oceania": ("australia-southeast1", "australia-southeast2"),
    "africa": ("africa-south1",),
}
# region -> its continent
REGIONS = {region: continent for continent, regions in _BY_CONTINENT.items()
           for region in regions}

# Cloud Storage locations beyond one region (upper case, as the API reports them).
BUCKET_MULTI_REGIONS = {"US": "north-america", "EU": "europe", "ASIA": "asia"}
BUCKET_DUAL_REGIONS = {"NAM4": ("us-central1", "us-east1"),
                       "EUR4": ("europe-north1", "europe-west4"),
                       "ASIA1": ("asia-northeast1", "asia-northeast2")}
# Artifact Registry multi-regions (lower case, as in LOCATION-docker.pkg.dev).
REGISTRY_MULTI_REGIONS = {"us": "north-america", "europe": "europe", "asia": "asia"}


def region_continent(region: str) -> str | None:
    return REGIONS.get(region)


def bucket_continent(location: str) -> str | None:
    """The continent of a bucket location (a region, a dual-region or a multi-region, in
    either case); None for a location not listed here."""
    upper = location.upper()
    if upper in BUCKET_MULTI_REGIONS:
        return BUCKET_MULTI_REGIONS[upper]
    if upper in BUCKET_DUAL_REGIONS:
        return REGIONS[BUCKET_DUAL_REGIONS[upper][0]]
    return REGIONS.get(location.lower())


def registry_continent(location: str) -> str | None:
    """The continent of a repository location (a region or us, europe, asia)."""
    return REGISTRY_MULTI_REGIONS.get(location) or REGIONS.get(location)


def is_region(location: str) -> bool:
    """Whether a bucket or repository location is one region (not two, not many)."""
    return location.lower() in REGIONS

