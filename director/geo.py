"""Client location from a MaxMind-format database (GeoIP2 / GeoLite2 City or Country).

``GeoLocator.locate`` returns the country, continent, coordinates and the database network
the answer came from (its prefix bounds the ECS scope of any answer that depended on it).
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

    @property
    def found(self) -> bool:
        return self.country is not None or self.continent is not None

    @property
    def has_coordinates(self) -> bool:
        return self.latitude is not None and self.longitude is not None


class RecordFields(NamedTuple):
    """What a decision may read from a database record."""

    country: str | None
    continent: str | None
    latitude: float | None
    longitude: float | None


def record_fields(record: dict[str, Any]) -> RecordFields:
    """The country (else the registered country), continent and coordinates of a record."""
    country = (record.get("country") or record.get("registered_country") or {}).get("iso_code")
    continent = (record.get("continent") or {}).get("code")
    location = record.get("location") or {}
    return RecordFields(country, continent, location.get("latitude"), location.get("longitude"))


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
        return Location(*record_fields(record), network)

    def close(self) -> None:
        self._reader.close()
