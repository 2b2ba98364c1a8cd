"""What an operator types as a client (API ``client=``/``ecs=``, CLI ``--client``/``--ecs``)."""

from __future__ import annotations

import re

import pytest

from director.engine.clients import ClientInputError, client_from_input
from director.engine.types import ClientSource


def test_an_address_is_a_given_client(maxmind_test_locator) -> None:
    client = client_from_input(maxmind_test_locator, "81.2.69.142", None)
    assert client.source == ClientSource.GIVEN and client.location.country == "GB"


def test_ecs_wins_over_the_address(maxmind_test_locator) -> None:
    client = client_from_input(maxmind_test_locator, "10.0.0.1", "81.2.69.0/24")
    assert client.source == ClientSource.ECS and str(client.network) == "81.2.69.0/24"


@pytest.mark.parametrize(("client", "ecs", "message"), [
    (None, None, "give client=ADDRESS, ecs=PREFIX, or both"),
    ("", "", "give client=ADDRESS, ecs=PREFIX, or both"),
    ("2.2.2.0/24", None,
     "client=2.2.2.0/24 is a prefix, and client= takes one address: pass a prefix as "
     "ecs=2.2.2.0/24"),
    ("nope", None, "client=nope is not an IP address (e.g. client=81.2.69.142)"),
    (None, "2.2.2.2/40", "ecs=2.2.2.2/40 is not a prefix"),
], ids=["nothing", "empty", "prefix-as-client", "garbage", "bad-prefix"])
def test_bad_input_names_the_option_to_use(maxmind_test_locator, client, ecs, message) -> None:
    with pytest.raises(ClientInputError) as caught:
        client_from_input(maxmind_test_locator, client, ecs)
    assert str(caught.value).startswith(message)


def test_the_cli_spells_its_options(maxmind_test_locator) -> None:
    with pytest.raises(ClientInputError, match=re.escape("pass a prefix as --ecs 2.2.2.0/24")):
        client_from_input(maxmind_test_locator, "2.2.2.0/24", None,
                          client_option="--client ", ecs_option="--ecs ")
