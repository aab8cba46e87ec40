"""The deployed environments. Edit the values here; `infra/config.py` validates them.

The values shipped are the example's, not yours: its project ids and state buckets, groups
at example.com (a domain reserved for examples) and the numeric ids of another GitHub
repository. Replace each (docs/platform/deploy.md, "Make the environments yours" says where
each comes from). `EXAMPLE` records them, so `infra/main.py`, which `cdktn synth`, `diff` and
`deploy` run, refuses an environment that still holds one, naming its fields, unless
PETS_INFRA_EXAMPLE=1 says the example is meant (.ci/run's synthesis; never a deploy)."""

from __future__ import annotations

from infra.config import Environment, Retention

# The example's values as shipped: leave this as it is when you replace the values below.
EXAMPLE = frozenset({
    "pets-detector-dev", "pets-detector-prod", "pets-detector-dev-tfstate",
    "pets-detector-prod-tfstate", "pets-detector/pets-detector", 812664310, 182466201,
    "ml-researchers@example.com", "ml-platform@example.com",
})

GITHUB_REPOSITORY = "pets-detector/pets-detector"
# Numeric ids of that repository and its owner: `gh api repos/OWNER/NAME --jq '.id, .owner.id'`
GITHUB_REPOSITORY_ID, GITHUB_OWNER_ID = 812664310, 182466201
RESEARCHERS_GROUP = "ml-researchers@example.com"
PLATFORM_ALERTS = "ml-platform@example.com"  # emailed when a Vertex AI job fails

ENVIRONMENTS = {
    env.name: env.validate()
    for env in (
        Environment(
            name="dev", project_id="pets-detector-dev", region="us-central1",
            name_prefix="pets", researchers_group=RESEARCHERS_GROUP,
            github_repository=GITHUB_REPOSITORY, github_repository_id=GITHUB_REPOSITORY_ID,
            github_owner_id=GITHUB_OWNER_ID, state_bucket="pets-detector-dev-tfstate",
            alert_emails=(PLATFORM_ALERTS,),
            labels={"app": "pets-detector", "env": "dev"},
            retention=Retention(noncurrent_version_days=7, scratch_expiry_days=7),
        ),
        Environment(
            name="prod", project_id="pets-detector-prod", region="us-central1",
            name_prefix="pets", researchers_group=RESEARCHERS_GROUP,
            github_repository=GITHUB_REPOSITORY, github_repository_id=GITHUB_REPOSITORY_ID,
            github_owner_id=GITHUB_OWNER_ID, state_bucket="pets-detector-prod-tfstate",
            alert_emails=(PLATFORM_ALERTS,),
            labels={"app": "pets-detector", "env": "prod"},
            retention=Retention(noncurrent_version_days=90, soft_delete_days=30,
                                scratch_expiry_days=30, keep_image_versions=20),
        ),
    )
}
