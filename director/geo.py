"""Client location from a MaxMind-format database (GeoIP2 / GeoLite2 City or Country).

``GeoLocator.locate`` returns the country, continent, coordinates and the database network
the answer came from (its prefix bounds the ECS scope of any answer that depended on it).
What a record says of where its clients are (``record_fields``): its ``country`` (a
``registered_country`` is who holds the block, never a location), its ``continent``, a
``represented_country`` (a base abroad), and nothing at all for an anonymous proxy or a
satellite provider, whose country is the exit's. ``Location.place`` is that, as residency
matching reads it (``policies.matching``).
Lookups are memoised per address (an LRU), since a lookup costs microseconds and the same
resolvers and client subnets ask again and again.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import maxminddb

from policies.matching import Place, place

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class GeoDatabaseError(Exception):
    """The GeoIP database could not be opened or is not a City/Country database."""


@dataclass(frozen=True)
class Location:
    country: str | None  # ISO 3166-1 alpha-2
    continent: str | None  # AF AN AS EU NA OC SA
    latitude: float | None
    longitude: float | None
    network: IPNetwork  # the database block the answer holds for (also for "not found")
    represented: str | None = None  # a country the network represents (a military base)

    @property
    def found(self) -> bool:
        """Whether residency can place the client anywhere (a code nobody knows cannot)."""
        return self.place.known

    @property
    def place(self) -> Place:
        """Where residency takes the client to be (``policies.matching.place``)."""
        return place(self.country, self.continent, self.represented)

    @property
    def has_coordinates(self) -> bool:
        return self.latitude is not None and self.longitude is not None


class RecordFields(NamedTuple):
    """What a decision may read from a database record."""

    country: str | None
    continent: str | None
    latitude: float | None
    longitude: float | None
    represented: str | None = None


_NOT_A_LOCATION = ("is_anonymous_proxy", "is_satellite_provider")


def record_fields(record: dict[str, Any]) -> RecordFields:
    """Where a record puts its clients (see the module docstring) and its coordinates."""
    location = record.get("location") or {}
    latitude, longitude = location.get("latitude"), location.get("longitude")
    traits = record.get("traits") or {}
    if any(traits.get(name) for name in _NOT_A_LOCATION):
        return RecordFields(None, None, latitude, longitude)
    country = (record.get("country") or {}).get("iso_code")
    continent = (record.get("continent") or {}).get("code")
    represented = (record.get("represented_country") or {}).get("iso_code")
    return RecordFields(country, continent, latitude, longitude, represented)


def default_database_path() -> str:
    """The GeoLite2 City (2018-07-03) database shipped by the maxminddb-geolite2 package."""
    import _maxminddb_geolite2

    return os.path.join(os.path.dirname(_maxminddb_geolite2.__file__), "GeoLite2-City.mmdb")


class GeoLocator:
    """Locates addresses in one MaxMind database; safe to share, cheap to call repeatedly."""

    def __init__(self, path: str | None = None, cache_size: int = 65536):
        self.path = path or default_database_path()
        try:
            self._reader = maxminddb.open_database(self.path)
        except (OSError, ValueError, maxminddb.InvalidDatabaseError) as exc:
            raise GeoDatabaseError(f"cannot open GeoIP database {self.path}: {exc}") from exc
        self.database_type = self._reader.metadata().database_type
        self._lookup = lru_cache(maxsize=cache_size)(self._lookup_uncached)

    def metadata(self) -> maxminddb.reader.Metadata:
        """The database's metadata (node count, record size, IP version, type)."""
        return self._reader.metadata()

    def locate(self, address: IPAddress) -> Location:
        """Where ``address`` is, as far as the database knows."""
        return self._lookup(address)

    def fields(self, address: IPAddress) -> RecordFields | None:
        """The decision-relevant fields of the record holding ``address`` (None: no record);
        uncached, without building a network."""
        try:
            record = self._reader.get(address)
        except ValueError:
            return None
        return record_fields(record) if isinstance(record, dict) else None

    def _lookup_uncached(self, address: IPAddress) -> Location:
        try:
            record, prefix = self._reader.get_with_prefix_len(address)
        except ValueError:  # an IPv6 address in an IPv4-only database
            record, prefix = None, address.max_prefixlen
        network = ipaddress.ip_network((address, prefix), strict=False)
        if not isinstance(record, dict):
            return Location(None, None, None, None, network)
        return location_of(record_fields(record), network)

    def close(self) -> None:
        self._reader.close()


def location_of(fields: RecordFields, network: IPNetwork) -> Location:
    """The ``Location`` of a record's fields, for ``network``."""
    return Location(fields.country, fields.continent, fields.latitude, fields.longitude,
                    network, fields.represented)
