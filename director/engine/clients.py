"""Build a ``Client`` from an address or an ECS prefix, locating it with a ``GeoLocator``."""

from __future__ import annotations

import ipaddress

from director.engine.types import Client, ClientSource
from director.geo import GeoLocator


class ClientInputError(ValueError):
    """What an operator typed as a client is neither an address nor a prefix where one goes."""


def client_from_address(locator: GeoLocator, address: str,
                        source: str = ClientSource.GIVEN) -> Client:
    ip = ipaddress.ip_address(address)
    network = ipaddress.ip_network((ip, ip.max_prefixlen))
    return Client(ip, network, source, locator.locate(ip))


def client_from_ecs(locator: GeoLocator, prefix: str) -> Client:
    """A client known by its EDNS Client Subnet, e.g. '81.2.69.0/24' (prefix 0: opt out)."""
    network = ipaddress.ip_network(prefix, strict=False)
    address = network.network_address
    if network.prefixlen == 0:
        return Client(address, network, ClientSource.ECS, None)
    return Client(address, network, ClientSource.ECS, locator.locate(address))


def client_from_input(locator: GeoLocator, client: str | None, ecs: str | None, *,
                      client_option: str = "client=", ecs_option: str = "ecs=") -> Client:
    """The client an operator asks about: the ECS prefix when given, else the address.

    Raises ``ClientInputError`` naming the option to use, e.g. a prefix given as the client
    address is sent to the ECS option. The option spellings differ between the admin API
    (``client=``) and the CLI (``--client``)."""
    if not client and not ecs:
        raise ClientInputError(f"give {client_option}ADDRESS, {ecs_option}PREFIX, or both")
    if ecs:
        try:
            return client_from_ecs(locator, ecs)
        except ValueError:
            raise ClientInputError(
                f"{ecs_option}{ecs} is not a prefix (e.g. {ecs_option}81.2.69.0/24, or "
                f"{ecs_option}0.0.0.0/0 for a resolver that sends no location)") from None
    client = client or ""
    try:
        return client_from_address(locator, client)
    except ValueError:
        pass
    try:
        ipaddress.ip_network(client, strict=False)
    except ValueError:
        raise ClientInputError(f"{client_option}{client} is not an IP address "
                               f"(e.g. {client_option}81.2.69.142)") from None
    raise ClientInputError(f"{client_option}{client} is a prefix, and {client_option} takes "
                           f"one address: pass a prefix as {ecs_option}{client}")
