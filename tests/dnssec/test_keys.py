"""Zone keys: generation, the key directory's files, DS records, malformed files."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import dns.dnssec
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import pytest

from director.dnssec.key_directory import directory_version, key_file, load_keys, save_keys
from director.dnssec.keys import ED25519, SEP, Role, ZoneKey, generate


@pytest.mark.parametrize("algorithm", [13, ED25519])
def test_keys_round_trip_through_their_files(tmp_path: Path, algorithm: int) -> None:
    csk = generate("Z.Test.", Role.CSK, 10.0, algorithm=algorithm)
    zsk = generate("z.test", Role.ZSK, 10.0, algorithm=algorithm)
    save_keys(tmp_path, [csk, zsk])
    assert stat.S_IMODE(key_file(tmp_path, csk).stat().st_mode) == 0o600
    loaded = {k.tag: k for k in load_keys(tmp_path, "z.test.")}
    assert set(loaded) == {csk.tag, zsk.tag}
    assert loaded[csk.tag].dnskey == csk.dnskey and loaded[csk.tag].dnskey.flags & SEP
    assert not loaded[zsk.tag].dnskey.flags & SEP
    assert loaded[zsk.tag].role is Role.ZSK and loaded[zsk.tag].publish == 10.0


def test_the_ds_record_matches_the_dnskey() -> None:
    key = generate("z.test", Role.CSK, 0.0)
    text = key.ds_text()
    assert text.startswith(f"z.test. IN DS {key.tag} 13 2 ")
    ds = dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.DS, text.split(" DS ")[1])
    assert ds == dns.dnssec.make_ds(dns.name.from_text("z.test"), key.dnskey, "SHA256")


def test_malformed_and_mismatched_files_are_skipped(tmp_path: Path) -> None:
    good = generate("z.test", Role.CSK, 0.0)
    save_keys(tmp_path, [good])
    (tmp_path / "Kz.test+013+00001.json").write_text("{")
    data = good.to_json() | {"tag": (good.tag + 1) % 65536}
    (tmp_path / "Kz.test+013+00002.json").write_text(json.dumps(data))
    wrong_alg = good.to_json() | {"algorithm": 15}
    (tmp_path / "Kz.test+013+00003.json").write_text(json.dumps(wrong_alg))
    assert [k.tag for k in load_keys(tmp_path, "z.test")] == [good.tag]
    with pytest.raises(ValueError):
        ZoneKey.from_json({"zone": "z.test"})


def test_the_directory_version_follows_its_key_files(tmp_path: Path) -> None:
    assert directory_version(tmp_path / "missing", "z.test") == ()
    key = generate("z.test", Role.CSK, 0.0)
    save_keys(tmp_path, [key])
    first = directory_version(tmp_path, "z.test")
    save_keys(tmp_path, [key.with_times(retire=5.0)])
    assert directory_version(tmp_path, "z.test") != first
