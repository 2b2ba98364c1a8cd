"""Key timelines: what keys do at a moment, and rollover timings from the zone's TTLs
(RFC 7583), with worked examples."""

from __future__ import annotations

import pytest

from director.dnssec.keys import Role, generate
from director.dnssec.timeline import (
    Ttls,
    confirm_ds,
    due_rollovers,
    next_change,
    start_rollover,
    state_at,
)

TTLS = Ttls(dnskey=300.0, largest=600.0, propagation=60.0, parent_ds=3600.0)


def test_zsk_pre_publication_timings() -> None:
    ksk = generate("z.test", Role.KSK, 0.0)
    zsk = generate("z.test", Role.ZSK, 0.0)
    keys = start_rollover([ksk, zsk], Role.ZSK, 1000.0, TTLS)
    new = next(k for k in keys if k.role is Role.ZSK and k.created == 1000.0)
    old = next(k for k in keys if k.tag == zsk.tag)
    assert new.publish == 1000.0 and new.activate == 1000.0 + 60 + 300
    assert old.retire == new.activate and old.remove == new.activate + 60 + 600
    during = state_at(keys, 1100.0)
    assert {k.tag for k in during.published} == {ksk.tag, zsk.tag, new.tag}
    assert [k.tag for k in during.zone_signers] == [zsk.tag]
    after = state_at(keys, 1400.0)
    assert [k.tag for k in after.zone_signers] == [new.tag]
    assert {k.tag for k in after.published} == {ksk.tag, zsk.tag, new.tag}
    gone = state_at(keys, 2100.0)
    assert {k.tag for k in gone.published} == {ksk.tag, new.tag}
    assert [k.tag for k in gone.key_signers] == [ksk.tag]
    assert next_change(keys, 1000.0) == 1360.0


def test_csk_double_signature_waits_for_the_parent() -> None:
    csk = generate("z.test", Role.CSK, 0.0)
    keys = start_rollover([csk], Role.CSK, 1000.0, TTLS)
    new = next(k for k in keys if k.tag != csk.tag)
    both = state_at(keys, 1000.0)
    assert {k.tag for k in both.zone_signers} == {k.tag for k in both.key_signers} \
        == {k.tag for k in both.for_parent} == {csk.tag, new.tag}
    assert next_change(keys, 1000.0) is None  # nothing happens until the DS is confirmed
    with pytest.raises(ValueError, match="already under way"):
        start_rollover(keys, Role.CSK, 1001.0, TTLS)
    confirmed = confirm_ds(keys, new.tag, 5000.0, TTLS)
    old = next(k for k in confirmed if k.tag == csk.tag)
    assert old.retire == 5000.0 + 3600 + 60 and old.remove == old.retire + 60 + 600
    assert [k.tag for k in state_at(confirmed, 5000.0).for_parent] == sorted(
        [csk.tag, new.tag])
    later = state_at(confirmed, old.retire)
    assert [k.tag for k in later.zone_signers] == [new.tag]
    assert [k.tag for k in later.for_parent] == [new.tag]
    assert {k.tag for k in later.published} == {csk.tag, new.tag}
    assert [k.tag for k in state_at(confirmed, old.remove).published] == [new.tag]


def test_confirming_a_zsk_or_an_unknown_tag_is_an_error() -> None:
    zsk = generate("z.test", Role.ZSK, 0.0)
    with pytest.raises(ValueError, match="ZSK"):
        confirm_ds([zsk], zsk.tag, 10.0, TTLS)
    with pytest.raises(ValueError, match="no key"):
        confirm_ds([zsk], (zsk.tag + 1) % 65536, 10.0, TTLS)
    with pytest.raises(ValueError, match="no active"):
        start_rollover([zsk], Role.CSK, 10.0, TTLS)


def test_a_zone_with_no_active_signer_signs_with_its_published_keys() -> None:
    pending = generate("z.test", Role.CSK, 0.0, activate=500.0)
    state = state_at([pending], 100.0)
    assert [k.tag for k in state.zone_signers] == [pending.tag]
    assert state_at([pending], -1.0).zone_signers == ()


def test_due_rollovers_by_lifetime() -> None:
    ksk = generate("z.test", Role.KSK, 0.0)
    zsk = generate("z.test", Role.ZSK, 0.0)
    lifetimes = {Role.ZSK: 1000.0, Role.KSK: 5000.0}
    assert due_rollovers([ksk, zsk], 999.0, lifetimes) == []
    assert due_rollovers([ksk, zsk], 1000.0, lifetimes) == [Role.ZSK]
    rolling = start_rollover([ksk, zsk], Role.ZSK, 1000.0, TTLS)
    assert due_rollovers(rolling, 1001.0, lifetimes) == []  # under way
    assert due_rollovers([ksk, zsk], 6000.0, lifetimes) == [Role.ZSK, Role.KSK]
