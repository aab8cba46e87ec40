"""An endpoint's traffic split, as data: a new version takes its share and the versions
deployed share the rest as before; an undeployed one's share goes to the others. Vertex AI's
endpoints (vertex/serving.py) and the local pipeline's endpoint.json (launch/features/
pipeline/steps.py) split the same way."""

from __future__ import annotations

from launch.errors import InputError

NEW = "0"  # a DeployModelRequest's traffic split names the model being deployed "0"


def _shares(weights: dict[str, int], total: int) -> dict[str, int]:
    """`total` percent shared in proportion to `weights`, in whole percents (largest
    remainders), so the split always adds up."""
    if not weights:
        return {}
    whole = sum(weights.values())
    if whole == 0:  # nothing had traffic: share evenly
        weights, whole = dict.fromkeys(weights, 1), len(weights)
    exact = {k: total * w / whole for k, w in weights.items()}
    shares = {k: int(v) for k, v in exact.items()}
    for key in sorted(exact, key=lambda k: exact[k] - shares[k], reverse=True)[
            :total - sum(shares.values())]:
        shares[key] += 1
    return shares


def split_with_new(current: dict[str, int], traffic: int) -> dict[str, int]:
    """The new version gets `traffic` percent; the versions deployed now share the rest as
    they shared it before."""
    if not current and traffic != 100:
        raise InputError(f"--traffic {traffic}: nothing is deployed on this endpoint to share "
                         "the rest with; deploy with --traffic 100")
    return {NEW: traffic, **_shares(current, 100 - traffic)} if current else {NEW: 100}


def split_without(current: dict[str, int], removed: str) -> dict[str, int]:
    """The undeployed version's traffic goes to the others, as they share it now."""
    rest = {k: v for k, v in current.items() if k != removed}
    return _shares(rest, 100)
