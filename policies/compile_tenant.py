"""Compile ``tenant`` blocks (with their ``quota``) and the ``identity`` block (with its
``jwt``) into ``Tenant`` and ``Identity`` objects.

Names a tenant uses (services, regions) are recorded as ``Ref`` objects for the validator;
a JWKS file is recorded as a ``FileRef`` for the loader. Nothing here reads a file.
"""

from __future__ import annotations

import os

from policies import values
from policies.grammar import DEFAULT_TENANT_CLAIM, TENANT_PRIORITY_RANGE
from policies.model import Identity, JwtIdentity, RedisDown, Tenant, TenantQuota
from policies.reading import Args, FileRef, Ref, Reporter, keyword, read_block, single
from policies.syntax import Directive

_RATE = "<count>/<unit>"


def _first(found: dict[str, list[Directive]], key: str) -> Directive | None:
    return found[key][0] if key in found else None


def compile_tenant(directive: Directive, report: Reporter, refs: list[Ref]) -> Tenant | None:
    """A ``tenant <name> { ... }`` block; None when its name is invalid (reported)."""
    args = Args(directive, report)
    name = args.take(values.tenant_name, "<name>")
    args.end("<name>")
    found = read_block(directive.directives(), "tenant", directive, report)
    context = f"tenant {name}"

    weight = single(_first(found, "weight"),
                    lambda t: values.number(t, None, 1_000_000, "weight"), "<number>", report, 1.0)
    if weight <= 0:
        report.at_arg(found["weight"][0].args[0], "a tenant's weight must be above zero",
                      expected="a number above 0 such as 1 or 2.5",
                      hint="the weight is the tenant's share of a region's queue")
        weight = 1.0
    low, high = TENANT_PRIORITY_RANGE
    priority = single(_first(found, "priority"),
                      lambda t: values.integer(t, low, high, "priority", signed=True),
                      "<tier>", report, 0)
    quota = _quota(_first(found, "quota"), report)
    services: list[str] = []
    for d in found.get("services", ()):
        for host, arg in Args(d, report).rest(values.hostname, "<host name> ..."):
            services.append(host)
            refs.append(Ref("service", host, arg.pos, arg.width, context))
    models: list[str] = []
    for d in found.get("models", ()):
        models += [m for m, _ in Args(d, report).rest(lambda t: values.name(t, "model name"),
                                                      "<model> ...")]
    regions: list[str] = []
    if (listed := _first(found, "regions")) is not None:
        for region, arg in Args(listed, report).rest(lambda t: values.name(t, "region name"),
                                                     "<region> ..."):
            regions.append(region)
            refs.append(Ref("region", region, arg.pos, arg.width, context))
    redis_down = RedisDown.OPEN
    if (chosen := _first(found, "redis-down")) is not None:
        redis_down = keyword(chosen, RedisDown, report) or redis_down
    reserve = single(_first(found, "reserve"), values.percent, "<percent of capacity>", report,
                     0.0)
    if reserve > 1.0:
        report.at_arg(found["reserve"][0].args[0], "a tenant's reserve must be at most 100%",
                      expected="a percentage of capacity from 0% to 100%, such as 20%")
        reserve = 0.0
    if name is None:
        return None
    return Tenant(
        name=name, weight=weight, priority=priority, quota=quota,
        services=tuple(dict.fromkeys(services)), models=tuple(dict.fromkeys(models)),
        regions=tuple(dict.fromkeys(regions)), redis_down=redis_down, reserve=reserve,
        pos=directive.pos,
    )


def _quota(directive: Directive | None, report: Reporter) -> TenantQuota:
    if directive is None:
        return TenantQuota()
    Args(directive, report).end("")
    found = read_block(directive.directives(), "quota", directive, report)

    def rate(key: str) -> tuple[float | None, float | None]:
        """The rate per minute and the bucket's size (the count as written, or the
        declared burst); (None, None) for no limit."""
        directive = _first(found, key)
        if directive is None:
            return None, None
        args = Args(directive, report)
        taken = args.take(values.quota_rate, _RATE)
        size = None
        if args.peek() is not None:
            keyword = args.take_arg(_RATE)
            if keyword is not None and keyword.text != "burst":
                report.at_arg(keyword, f"unexpected argument '{keyword.text}' to '{key}'",
                              expected=f"{key} {_RATE} [burst <count>]",
                              hint="a rate may be followed by its burst: burst 40")
                return None, None
            size = args.take(values.burst, f"{_RATE} burst <count>")
            if size is None:
                return None, None
        args.end(f"{_RATE} [burst <count>]")
        if taken is None:
            return None, None
        per_minute, written = taken
        if per_minute <= 0:
            report.at_arg(directive.args[0], f"a quota of zero {key} admits nothing",
                          expected="a rate above zero such as 600/min",
                          hint="leave the line out for no limit")
            return None, None
        size = size if size is not None else written
        return per_minute, None if size == per_minute else size  # None: a minute's worth

    concurrent = single(_first(found, "concurrent"),
                        lambda t: values.integer(t, 1, 1_000_000, "concurrent"), "<count>",
                        report, None)
    requests, input_tokens, output_tokens = (
        rate("requests"), rate("input-tokens"), rate("output-tokens"))
    return TenantQuota(
        requests_per_minute=requests[0],
        input_tokens_per_minute=input_tokens[0],
        output_tokens_per_minute=output_tokens[0],
        concurrent=concurrent,
        requests_burst=requests[1],
        input_tokens_burst=input_tokens[1],
        output_tokens_burst=output_tokens[1],
    )


def compile_identity(directive: Directive, report: Reporter,
                     files: list[FileRef]) -> Identity | None:
    """The ``identity { ... }`` block; None when it identifies nobody (reported)."""
    Args(directive, report).end("")
    found = read_block(directive.directives(), "identity", directive, report)
    api_keys = single(_first(found, "api-keys"), values.on_off, "on | off", report, True)
    jwt = _jwt(found["jwt"][0], report, files) if "jwt" in found else None
    if not api_keys and "jwt" not in found:
        report.at_directive(directive, "the identity block identifies nobody: api-keys is off "
                            "and there is no jwt block",
                            expected="api-keys on, or a jwt { jwks ... } block",
                            hint="leave the identity block out to serve requests unidentified")
        return None
    return Identity(api_keys=api_keys, jwt=jwt, pos=directive.pos)


def _jwt(directive: Directive, report: Reporter, files: list[FileRef]) -> JwtIdentity | None:
    Args(directive, report).end("")
    found = read_block(directive.directives(), "jwt", directive, report)

    def text(key: str, what: str, usage: str) -> str | None:
        return single(_first(found, key), lambda t: values.word(t, what), usage, report, None)

    issuer = text("issuer", "issuer", "<issuer>")
    audience = text("audience", "audience", "<audience>")
    claim = text("tenant-claim", "claim name", "<claim name>") or DEFAULT_TENANT_CLAIM
    leeway = single(_first(found, "leeway"), values.duration, "<duration>", report, 0.0)
    if "audience" not in found:
        report.at_directive(
            directive, "jwt is missing 'audience'", expected="audience <audience>",
            hint="name the 'aud' your identity provider puts in the tokens it issues for "
            "this deployment; without it, a token it issued to any other application "
            "would be accepted here")
    if "jwks" not in found:
        return None  # reported by read_block
    d = found["jwks"][0]
    args = Args(d, report)
    jwks = args.take(values.jwks_source, "<file> | <https url>")
    args.end("<file> | <https url>")
    if jwks is None or audience is None:
        return None
    if "://" not in jwks:  # a file path
        arg = d.args[0]
        # like include: relative to the folder of the file that names it
        jwks = os.path.normpath(os.path.join(os.path.dirname(arg.pos.file), jwks))
        files.append(FileRef(arg.text, jwks, arg.pos, arg.width))
    return JwtIdentity(jwks=jwks, issuer=issuer, audience=audience, tenant_claim=claim,
                       leeway=leeway)
