"""Look up the regions and GPU servers that routes name, with errors that list the choices."""

from __future__ import annotations

from director.api.errors import ApiError, NotFound
from policies import Policy
from policies.model import GpuServer, Region


class BadTtl(ApiError):
    status = 422


def find_region(policy: Policy, name: str) -> Region:
    try:
        return policy.region(name)
    except KeyError:
        raise NotFound(f"no region '{name}' in the policy "
                       f"(regions: {', '.join(policy.region_names)})") from None


def find_gpu(policy: Policy, region_name: str, gpu_name: str) -> tuple[Region, GpuServer]:
    region = find_region(policy, region_name)
    for gpu in region.gpus:
        if gpu.name == gpu_name:
            return region, gpu
    names = ", ".join(g.name for g in region.gpus) or "none"
    raise NotFound(f"no GPU server '{gpu_name}' in region {region.name} (GPU servers: {names})")


def check_ttl(value: object, *, default: float | None, maximum: float | None = None
              ) -> float | None:
    """A ttl in seconds from a request body: a positive number, at most ``maximum``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise BadTtl(f"ttl: expected a positive number of seconds, got {value!r}")
    if maximum is not None and value > maximum:
        raise BadTtl(f"ttl: at most {maximum:g} seconds, got {value!r}")
    return float(value)
