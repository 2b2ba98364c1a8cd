"""``tenant`` and ``identity`` blocks: what they compile to, and what is rejected where."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from policies import check_policy, load_policy, load_policy_text
from policies.errors import Diagnostic
from policies.formatter import format_text
from policies.loader import CheckResult, memory_reader
from policies.model import Identity, JwtIdentity, RedisDown, Tenant, TenantQuota
from policies.values import ValueProblem, jwks_source, per_minute, tenant_name

EXAMPLE = Path(__file__).resolve().parents[2] / "policies" / "examples" / "tenants" / "tenants.dp"
MINIMAL = EXAMPLE.parents[1] / "minimal.dp"

BASE = """\
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps
    gpu use1-a { url http://127.0.1.11:8000; models llama-3-8b }
}
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
region ap-south { location 19.1 72.9; jurisdiction IN; endpoints 127.0.4.1; capacity 10rps }
service chat.infer.example.com { regions us-east eu-west; all-down answer-nothing }
service embed.infer.example.com { regions us-east; all-down answer-nothing }
service sovereign.infer.example.com { regions ap-south; all-down answer-nothing }
identity { api-keys on }
"""
BASE_LINES = BASE.count("\n")
# the same lines, with no identity block
NO_IDENTITY = BASE.replace("identity { api-keys on }", "# no identity block")


def check(extra: str, base: str = BASE) -> CheckResult:
    text = base + extra
    return check_policy("tenants.dp", reader=memory_reader({"tenants.dp": text}))


def errors(extra: str, base: str = BASE) -> list[Diagnostic]:
    result = check(extra, base)
    assert not result.ok, "expected the policy to be rejected"
    return result.diagnostics


def only_error(extra: str, base: str = BASE) -> Diagnostic:
    found = errors(extra, base)
    assert len(found) == 1, [d.message for d in found]
    return found[0]


def at(diagnostic: Diagnostic) -> tuple[int, int]:
    """Line (counted from the first line of ``extra``) and column of a diagnostic."""
    return diagnostic.pos.line - BASE_LINES, diagnostic.pos.col


# --- the example -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example():
    return load_policy(str(EXAMPLE))


def test_example_tenants(example) -> None:
    acme, batch, free = example.tenants
    assert acme == Tenant(
        name="acme", weight=2.0, priority=1,
        quota=TenantQuota(requests_per_minute=600.0, input_tokens_per_minute=200000.0,
                          output_tokens_per_minute=100000.0, concurrent=16),
        services=("chat.infer.example.com", "embed.infer.example.com"),
        models=("llama-3-8b", "bge-large-en"), regions=("eu-west", "eu-central"),
        redis_down=RedisDown.CLOSED, reserve=0.2)
    # 10/s: ten at once, not a minute's worth (600)
    assert batch == Tenant(name="batch-jobs", priority=-5,
                           quota=TenantQuota(requests_per_minute=600.0, concurrent=64,
                                             requests_burst=10.0),
                           services=("chat.infer.example.com",))
    assert free.quota == TenantQuota(requests_per_minute=50.0, requests_burst=100.0,
                                     output_tokens_per_minute=1_000_000 / 60,
                                     output_tokens_burst=20_000.0)
    assert (free.weight, free.priority, free.services, free.models, free.regions,
            free.redis_down, free.reserve) == (1.0, 0, (), (), (), RedisDown.OPEN, 0.0)
    assert example.tenant("acme") is acme
    assert example.tenant("nobody") is None


def test_example_identity(example) -> None:
    assert example.identity == Identity(api_keys=True, jwt=JwtIdentity(
        jwks="https://auth.example.com/.well-known/jwks.json",
        issuer="https://auth.example.com/", audience="director", tenant_claim="org",
        leeway=30.0))


def test_example_positions(example) -> None:
    text = EXAMPLE.read_text(encoding="utf-8").splitlines()
    acme = example.tenants[0]
    assert text[acme.pos.line - 1].startswith("tenant acme {")
    assert example.identity is not None
    assert text[example.identity.pos.line - 1] == "identity {"


def test_example_is_canonical_and_fmt_keeps_its_meaning(example) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert format_text(text) == text
    squashed = text.replace("\n    ", "\n  ")
    assert load_policy_text(format_text(squashed), "tenants.dp") == example


def test_example_has_no_warnings() -> None:
    result = check_policy(str(EXAMPLE))
    assert result.ok and result.warnings == []


# --- defaults and policies without the blocks ---------------------------------------------


def test_a_policy_without_the_blocks_is_unchanged() -> None:
    plain = load_policy(str(MINIMAL))
    assert plain.tenants == ()
    assert plain.identity is None
    text = MINIMAL.read_text(encoding="utf-8")
    extended = load_policy_text(text + "identity { api-keys on }\ntenant acme {}\n")
    assert extended.tenants == (Tenant("acme"),)
    assert replace(extended, tenants=(), identity=None) == plain


def test_defaults() -> None:
    policy = load_policy_text(BASE + "tenant t {}\n", prove=False)
    assert policy.tenants == (Tenant("t"),)
    assert policy.identity == Identity(api_keys=True, jwt=None)
    jwt = load_policy_text(BASE.replace("identity { api-keys on }",
                                        "identity { jwt { jwks keys.json; audience d } }"),
                           prove=False).identity
    assert jwt == Identity(api_keys=True, jwt=JwtIdentity(jwks="keys.json", audience="d"))
    assert jwt is not None and jwt.jwt is not None
    assert (jwt.jwt.tenant_claim, jwt.jwt.leeway, jwt.jwt.issuer) == ("tenant", 0.0, None)


QUOTA_RATES = {
    "per-minute": ("600/min", 600.0),
    "per-second": ("10/s", 600.0),
    "per-hour": ("36000/h", 600.0),
    "thousands": ("200k/min", 200000.0),
    "millions": ("1.5M/min", 1500000.0),
    "thousands-per-second": ("2k/s", 120000.0),
    "fraction": ("0.5/s", 30.0),
}


@pytest.mark.parametrize(("text", "value"), QUOTA_RATES.values(), ids=QUOTA_RATES.keys())
def test_quota_rates_are_per_minute(text: str, value: float) -> None:
    assert per_minute(text) == value


BAD_QUOTA_RATES = {
    "no-unit": ("600", "'600' has no unit", "write 600/min for a count per minute"),
    "rps": ("10rps", "'10rps' is not a quota rate", "quotas are written per unit of time: 10/s"),
    "rpm": ("60rpm", "'60rpm' is not a quota rate",
            "quotas are written per unit of time: 60/min"),
    "minute-as-m": ("600/m", "'600/m' is not a quota rate", "known units: /s /min /h"),
    "upper-k": ("200K/min", "'200K/min' is not a quota rate", "known units: /s /min /h"),
    "word": ("lots", "'lots' is not a quota rate", None),
}


@pytest.mark.parametrize(("text", "message", "hint"), BAD_QUOTA_RATES.values(),
                         ids=BAD_QUOTA_RATES.keys())
def test_bad_quota_rates(text: str, message: str, hint: str | None) -> None:
    with pytest.raises(ValueProblem) as caught:
        per_minute(text)
    assert caught.value.message == message
    assert (caught.value.hint or "").startswith(hint or "")
    assert (hint is None) == (caught.value.hint is None)


@pytest.mark.parametrize("text", ["acme", "a", "team_7", "batch-jobs", "0day", "x" * 64])
def test_tenant_names(text: str) -> None:
    assert tenant_name(text) == text


BAD_TENANT_NAMES = {
    "upper-case": ("Acme", "'Acme' is not a valid tenant name", "write acme"),
    "dot": ("acme.eu", "'acme.eu' is not a valid tenant name", None),
    "leading-dash": ("-acme", "'-acme' is not a valid tenant name", None),
    "too-long": ("x" * 65, "is 65 characters long", None),
}


@pytest.mark.parametrize(("text", "message", "hint"), BAD_TENANT_NAMES.values(),
                         ids=BAD_TENANT_NAMES.keys())
def test_bad_tenant_names(text: str, message: str, hint: str | None) -> None:
    with pytest.raises(ValueProblem) as caught:
        tenant_name(text)
    assert message in caught.value.message
    assert caught.value.hint == hint


@pytest.mark.parametrize("text", ["https://auth.example.com/jwks.json", "keys/jwks.json",
                                  "/etc/director/jwks.json", "HTTPS://auth.example.com/k"])
def test_jwks_sources(text: str) -> None:
    assert jwks_source(text) == text


@pytest.mark.parametrize("text", ["http://auth.example.com/jwks.json", "file:///etc/jwks",
                                  "https:///no-host", ""])
def test_bad_jwks_sources(text: str) -> None:
    with pytest.raises(ValueProblem):
        jwks_source(text)


# --- errors, each at its word ---------------------------------------------------------------


def test_duplicate_tenant() -> None:
    found = only_error("tenant acme {}\ntenant globex {}\ntenant acme { weight 2 }\n")
    assert found.message == "tenant 'acme' is declared twice"
    assert at(found) == (3, 8)
    assert found.hint is not None and "tenants.dp:11:1" in found.hint


def test_unknown_service_with_did_you_mean() -> None:
    found = only_error("tenant acme { services chat.infer.example.com embd.infer.example.com }\n")
    assert found.message == "unknown service 'embd.infer.example.com'"
    assert found.hint == "did you mean 'embed.infer.example.com'?"
    assert at(found) == (1, 47)
    assert found.expected is not None and "chat.infer.example.com" in found.expected


def test_unknown_region_with_did_you_mean() -> None:
    found = only_error("tenant acme { regions eu-wst }\n")
    assert found.message == "unknown region 'eu-wst'"
    assert found.hint == "did you mean 'eu-west'?"
    assert at(found) == (1, 23)


def test_region_serving_none_of_the_tenants_services() -> None:
    found = only_error("tenant acme {\n    services chat.infer.example.com\n"
                       "    regions eu-west ap-south\n}\n")
    assert found.message == "tenant acme: region 'ap-south' serves none of its services"
    assert at(found) == (3, 21)
    assert found.expected == "a region that serves chat.infer.example.com"


def test_listed_service_that_no_tenant_region_serves() -> None:
    """Regions only narrow: every service a tenant lists runs in one of its regions."""
    found = only_error("tenant acme {\n"
                       "    services chat.infer.example.com embed.infer.example.com\n"
                       "    regions eu-west\n}\n")
    assert found.message == ("tenant acme: none of its regions serves embed.infer.example.com, "
                             "so its requests to it would always be refused")
    assert at(found) == (2, 37)
    assert found.expected == "a region of embed.infer.example.com in 'regions' (us-east)"
    assert found.hint is not None and "drop it from 'services'" in found.hint


def test_a_tenant_region_serving_none_of_its_services_is_reported_once() -> None:
    found = only_error("tenant acme {\n    services embed.infer.example.com\n"
                       "    regions eu-west\n}\n")
    assert found.message == "tenant acme: region 'eu-west' serves none of its services"
    assert at(found) == (3, 13)


def test_regions_that_narrow_each_listed_service_are_accepted() -> None:
    result = check("tenant acme {\n    services chat.infer.example.com embed.infer.example.com\n"
                   "    regions us-east\n}\ntenant globex {\n"
                   "    services chat.infer.example.com\n    regions eu-west\n}\n")
    assert result.ok, [d.message for d in result.diagnostics]
    assert result.warnings == []


def test_regions_narrow_every_service_by_default() -> None:
    policy = load_policy_text(BASE + "tenant acme { regions ap-south eu-west }\n", prove=False)
    assert policy.tenants[0].regions == ("ap-south", "eu-west")


@pytest.mark.parametrize("weight", ["0", "-1", "0.0"])
def test_weight_must_be_above_zero(weight: str) -> None:
    found = only_error(f"tenant acme {{ weight {weight} }}\n")
    assert found.message == "a tenant's weight must be above zero"
    assert at(found) == (1, 22)


def test_weight_must_be_a_number() -> None:
    assert only_error("tenant acme { weight heavy }\n").message == "'heavy' is not a number"


def test_reserve_out_of_range() -> None:
    found = only_error("tenant acme { reserve 150% }\n")
    assert found.message == "a tenant's reserve must be at most 100%"
    assert at(found) == (1, 23)
    assert only_error("tenant acme { reserve 20 }\n").hint == "write 20%"


def test_reserves_add_up_to_at_most_100_percent() -> None:
    assert check("tenant a { reserve 70% }\ntenant b { reserve 20% }\n"
                 "tenant c { reserve 10% }\n").ok  # exactly 100%, despite 0.7 + 0.2 + 0.1
    found = only_error("tenant a { reserve 50% }\ntenant b {}\ntenant c { reserve 40% }\n"
                       "tenant d { reserve 30% }\n")
    assert found.message == ("the tenants' reserves add up to 120%, more than 100% of a "
                             "region's capacity")
    assert at(found) == (4, 20)  # where the sum passes 100%
    assert found.hint == "a 50%, c 40%, d 30%: lower some"


def test_priority_is_a_signed_tier() -> None:
    policy = load_policy_text(BASE + "tenant a { priority -10 }\ntenant b { priority +3 }\n",
                              prove=False)
    assert [t.priority for t in policy.tenants] == [-10, 3]
    found = only_error("tenant a { priority 1000 }\n")
    assert found.message == "priority 1000 is too large"
    assert found.expected == "from -100 to 100"
    assert only_error("tenant a { priority high }\n").message == "'high' is not a whole number"


def test_quota_errors() -> None:
    found = errors("tenant a {\n    quota {\n        requests 600\n        input-tokens 0/min\n"
                   "        concurrent 0\n        tokens 5/s\n    }\n}\n")
    messages = {d.message: at(d) for d in found}
    assert messages == {
        "'600' has no unit": (3, 18),
        "a quota of zero input-tokens admits nothing": (4, 22),
        "concurrent 0 is too small": (5, 20),
        "unknown directive 'tokens' in a quota block": (6, 9),
    }


@pytest.mark.parametrize(("line", "per_minute", "burst"), [
    pytest.param("requests 10/s", 600.0, 10.0, id="per-second-holds-a-second"),
    pytest.param("requests 600/min", 600.0, None, id="per-minute-holds-a-minute"),
    pytest.param("requests 3600/h", 60.0, 3600.0, id="per-hour-holds-an-hour"),
    pytest.param("requests 10/s burst 40", 600.0, 40.0, id="declared-burst"),
    pytest.param("requests 10/min burst 1", 10.0, 1.0, id="burst-of-one"),
    pytest.param("requests 1k/s burst 2.5k", 60_000.0, 2500.0, id="scaled-burst"),
])
def test_a_quota_rate_holds_its_count_as_written_unless_it_declares_a_burst(
        line: str, per_minute: float, burst: float | None) -> None:
    policy = load_policy_text(BASE + f"tenant a {{ quota {{ {line} }} }}\n", prove=False)
    quota = policy.tenants[0].quota
    assert (quota.requests_per_minute, quota.requests_burst) == (per_minute, burst)


def test_burst_errors() -> None:
    found = errors("tenant a {\n    quota {\n        requests 10/s burst\n"
                   "        input-tokens 1k/s burst 0.5\n        output-tokens 1k/s burst 5/s\n"
                   "    }\n}\ntenant b { quota { requests 10/s bursts 40 } }\n")
    messages = {d.message: (at(d), d.expected, d.hint) for d in found}
    assert messages == {
        "'requests' is missing an argument": (
            (3, 28), "requests <count>/<unit> burst <count>", None),
        "a burst of 0.5 admits less than one unit at once": (
            (4, 33), "a count of at least 1 such as 40, 500k or 2M", None),
        "'5/s' is not a burst": (
            (5, 34), "a count of at least 1 such as 40, 500k or 2M",
            "a burst is a count, without a unit"),
        "unexpected argument 'bursts' to 'requests'": (
            (8, 34), "requests <count>/<unit> [burst <count>]",
            "a rate may be followed by its burst: burst 40"),
    }


def test_redis_down_keyword() -> None:
    found = only_error("tenant a { redis-down close }\n")
    assert found.message == "unknown value 'close' for 'redis-down'"
    assert found.hint == "did you mean 'closed'?"


def test_tenant_name_errors_point_at_the_name() -> None:
    found = only_error("tenant Acme {}\n")
    assert found.message == "'Acme' is not a valid tenant name"
    assert at(found) == (1, 8)
    assert found.hint == "write acme"


def test_unknown_directive_in_a_tenant() -> None:
    found = only_error("tenant a { wieght 2 }\n")
    assert found.message == "unknown directive 'wieght' in a tenant block"
    assert found.hint == "did you mean 'weight'?"
    misplaced = only_error("tenant a { ttl 30s }\n")
    assert misplaced.hint is not None and "service block" in misplaced.hint


def test_tenant_needs_a_name_and_a_block() -> None:
    assert only_error("tenant {}\n").message == "'tenant' is missing an argument"
    assert only_error("tenant a\n").message == "'tenant' needs a block"


def test_identity_at_most_once() -> None:
    found = only_error("identity { api-keys off; jwt { jwks keys.json } }\n")
    assert found.message == "'identity' is set twice at the top level of the policy"
    assert at(found) == (1, 1)


def test_identity_must_identify_someone() -> None:
    found = only_error("identity { api-keys off }\n", NO_IDENTITY)
    assert found.message == ("the identity block identifies nobody: api-keys is off and "
                             "there is no jwt block")
    assert only_error("identity { api-keys maybe }\n", NO_IDENTITY).message == \
        "'maybe' is neither on nor off"


def test_jwt_without_jwks() -> None:
    found = only_error("identity {\n    jwt { issuer https://auth.example.com; audience d }\n}\n",
                       NO_IDENTITY)
    assert found.message == "jwt is missing 'jwks'"
    assert at(found) == (2, 5)
    assert found.expected == "jwks <file> | <https url>"


def test_jwt_requires_an_audience() -> None:
    """Without ``audience`` any token of the identity provider would do, whichever
    application it was issued to: an error, not a default."""
    found = only_error("identity {\n    jwt { jwks keys.json; issuer https://a.example }\n}\n",
                       NO_IDENTITY)
    assert found.message == "jwt is missing 'audience'"
    assert at(found) == (2, 5)
    assert found.expected == "audience <audience>"
    assert found.hint is not None and "any other application" in found.hint


@pytest.mark.parametrize(("jwks", "hint"), [
    ("http://auth.example.com/jwks.json", "keys are only fetched over https"),
    ("ftp://auth.example.com/jwks.json", None),
])
def test_jwks_neither_file_nor_https(jwks: str, hint: str | None) -> None:
    found = only_error(f"identity {{ jwt {{ jwks {jwks}; audience d }} }}\n", NO_IDENTITY)
    assert found.message == f"'{jwks}' is neither a file path nor an https URL"
    assert at(found) == (1, 23)
    assert (found.hint or "").startswith(hint or "") and (hint is None) == (found.hint is None)


def test_leeway_is_a_duration() -> None:
    found = only_error("identity { jwt { jwks keys.json; audience d; leeway 30 } }\n",
                       NO_IDENTITY)
    assert found.message == "'30' has no unit"


# --- the JWKS file, on disk and in memory --------------------------------------------------


def _identity_policy(jwks: str) -> str:
    return BASE.replace("identity { api-keys on }",
                        f'identity {{ jwt {{ jwks "{jwks}"; audience director }} }}')


def test_jwks_file_is_resolved_like_an_include(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "jwks.json").write_text('{"keys": []}', encoding="utf-8")
    path = tmp_path / "policy.dp"
    path.write_text(_identity_policy("keys/jwks.json"), encoding="utf-8")
    policy = load_policy(str(path), prove=False)
    assert policy.identity is not None and policy.identity.jwt is not None
    assert policy.identity.jwt.jwks == str(tmp_path / "keys" / "jwks.json")


def test_missing_jwks_file_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "policy.dp"
    path.write_text(_identity_policy("keys/jwks.json"), encoding="utf-8")
    result = check_policy(str(path))
    assert [d.message for d in result.diagnostics] == [
        "the JWKS file 'keys/jwks.json' does not exist"]
    found = result.diagnostics[0]
    assert found.hint == f"looked for {tmp_path / 'keys' / 'jwks.json'}"
    assert (found.pos.line, found.pos.col) == (BASE_LINES, 23)
    (tmp_path / "keys" / "jwks.json").mkdir(parents=True)
    assert check_policy(str(path)).diagnostics[0].message == \
        "the JWKS file 'keys/jwks.json' is a folder, not a file"


def test_jwks_file_is_not_checked_from_memory() -> None:
    policy = load_policy_text(_identity_policy("keys/jwks.json"), "policy.dp", prove=False)
    assert policy.identity is not None and policy.identity.jwt is not None
    assert policy.identity.jwt.jwks == "keys/jwks.json"


# --- warnings ------------------------------------------------------------------------------


def test_tenants_without_identity_warn() -> None:
    result = check("tenant acme {}\n", NO_IDENTITY)
    assert result.ok
    assert [w.message for w in result.warnings] == [
        "the policy declares tenants but no identity block, so no request is identified and "
        "no tenant's settings apply"]
    assert at(result.warnings[0]) == (1, 8)


def test_jwt_without_issuer_warns_and_with_one_does_not() -> None:
    block = "identity {\n    jwt { jwks https://a.example/k; audience d%s }\n}\ntenant acme {}\n"
    result = check(block % "", NO_IDENTITY)
    assert result.ok
    assert [(w.message, at(w)) for w in result.warnings] == [
        ("jwt: no 'issuer', so a token signed by any key of the key set is accepted whoever "
         "issued it", (2, 5))]
    assert result.warnings[0].hint is not None and "issuer" in result.warnings[0].hint
    assert check(block % "; issuer https://a.example/", NO_IDENTITY).warnings == []


def test_model_no_gpu_serves_warns() -> None:
    result = check("tenant acme { models llama-3-8b lama-3-8b }\n")
    assert result.ok
    assert [(w.message, w.hint, at(w)) for w in result.warnings] == [
        ("tenant acme: no GPU server of the policy serves the model 'lama-3-8b'",
         "did you mean 'llama-3-8b'?", (1, 33))]



GPU_POLICY = """zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
region eu-west {
    location 53.35 -6.26
    jurisdiction EU
    endpoints 127.0.2.1
    capacity 10rps
    gpu a { url http://127.0.2.11:8000; models m; SCHEDULING }
    gpu b { url http://127.0.2.12:8000; models m }
}
service chat.infer.example.com { steer geo; all-down answer-nothing }
"""


def test_a_gpu_server_may_schedule_by_priority() -> None:
    policy = load_policy_text(GPU_POLICY.replace("SCHEDULING", "scheduling priority"))
    gpus = {g.name: g.priority_scheduling for g in policy.region("eu-west").gpus}
    assert gpus == {"a": True, "b": False}
    result = check_policy("p.dp", reader=memory_reader({
        "p.dp": GPU_POLICY.replace("SCHEDULING", "scheduling prio")}))
    assert result.policy is None
    assert any("unknown scheduling 'prio'" in d.message for d in result.diagnostics)
