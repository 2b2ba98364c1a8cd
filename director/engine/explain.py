"""The global tier's explain steps (``types.Step``) from the routing core's trace: where the
client was located, what each filter kept and dropped, what each steering method scored."""

from __future__ import annotations

from director.engine.scorers import Scores
from director.engine.types import Client, Step
from director.geo import Location
from policies.model import ResidencyRule
from routing import FilterStep, ScoreStep


def locate_step(client: Client, rules: tuple[ResidencyRule, ...],
                partial: tuple[ResidencyRule, ...] = ()) -> Step:
    """Where the client was located, and the residency rules it is (or may be) under."""
    location = client.location
    if location is None:
        note = f"{client.source} {client.network}: no location"
    elif not location.found:
        told = "/".join(c for c in (location.country, location.continent) if c)
        where = f"'{told}' places no client" if told else "not in the GeoIP database"
        note = f"{client.source} {client.network}: {where}"
    else:
        coords = (f" ({location.latitude:.2f}, {location.longitude:.2f})"
                  if location.has_coordinates else "")
        note = (f"{client.source} {client.network}: {_where(location)}"
                f"{coords}, database network {location.network}")
    names = ", ".join(rule.name + (" (may hold)" if rule in partial else "")
                      for rule in rules) or "none"
    return Step("locate", "geoip", (), note=f"{note}; residency rules: {names}")


def filter_step(step: FilterStep) -> Step:
    return Step("filter", step.plugin, step.kept, step.dropped, step.note)


def score_step(step: ScoreStep) -> Step:
    """A steering method's scores, or that it had none for this client."""
    values = step.values
    if values is None:
        return Step("score", step.plugin, step.candidates, note="no data for this client")
    note = values.note if isinstance(values, Scores) else ""
    shown = ", ".join(f"{name}={value:.3f}"
                      for name, value in zip(step.candidates, values, strict=True))
    return Step("score", step.plugin, step.candidates, note=f"{note}; scores {shown}")


def _where(location: Location) -> str:
    """``FR/EU``, ``EU (continent only)``, ``CU/NA, representing US``."""
    place = location.place
    if location.country not in place.countries:
        return place.describe()
    where = f"{location.country}/{location.continent}"
    if location.represented in place.countries - {location.country}:
        where += f", representing {location.represented}"
    return where
