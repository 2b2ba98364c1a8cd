"""Hypothesis strategies for valid policies written with random (but legal) layout.

``policies()`` draws a policy as a tree of directives that compiles and passes the residency
proof, then writes it out with random indentation, spacing, one-line blocks, semicolons,
comments and blank lines, so that ``fmt`` has real work to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

APEX = "infer.example.com"
REGION_POOL = ("us-east", "us-west", "eu-west", "eu-central", "ap-south")
JURISDICTION_OF = {"us-east": "US", "us-west": "US", "eu-west": "EU", "eu-central": "EU",
                   "ap-south": "IN"}
EU_COUNTRIES = ("DE", "FR", "IE", "IT", "NL", "SE", "AT", "BE")


@dataclass
class Node:
    head: list[str]  # name and arguments
    block: list[Node] | None = None

    @property
    def leaf(self) -> bool:
        return self.block is None


def _leaf(*words: str) -> Node:
    return Node(list(words))


def _duration() -> st.SearchStrategy[str]:
    return st.builds(lambda n, unit: f"{n}{unit}", st.integers(1, 59),
                     st.sampled_from(["ms", "s", "m", "h"]))


@st.composite
def _zone(draw) -> Node:
    body = [_leaf("ns", f"ns1.{APEX}", "127.0.0.1")]
    if draw(st.booleans()):
        body.append(_leaf("ns", "ns2.example.net"))
    if draw(st.booleans()):
        body.insert(0, _leaf("ttl", draw(_duration())))
    if draw(st.booleans()):
        body.append(Node(["soa"], [_leaf("refresh", "1h"), _leaf("serial",
                                                                str(draw(st.integers(0, 99))))]))
    return Node(["zone", APEX], body)


@st.composite
def _region(draw, name: str) -> Node:
    lat = draw(st.decimals(-90, 90, places=2, allow_nan=False))
    lon = draw(st.decimals(-180, 180, places=2, allow_nan=False))
    body = [
        _leaf("location", str(lat), str(lon)),
        _leaf("jurisdiction", JURISDICTION_OF[name]),
        _leaf("endpoints", f"127.0.{REGION_POOL.index(name) + 1}.1",
              *(["::1"] if draw(st.booleans()) else [])),
    ]
    if draw(st.booleans()):
        body.append(_leaf("capacity", f"{draw(st.integers(1, 999))}rps"))
    else:
        body.append(_leaf("capacity", str(draw(st.integers(1, 16))), "gpus", "x",
                          f"{draw(st.integers(1, 50))}rps"))
    if draw(st.booleans()):
        body.append(_leaf("weight", str(draw(st.integers(1, 100)))))
    for k in range(draw(st.integers(0, 2))):
        gpu = [_leaf("url", f"http://127.0.{REGION_POOL.index(name) + 1}.{11 + k}:8000"),
               _leaf("models", *draw(st.lists(st.sampled_from(["llama-3.1-8b", "bge-large"]),
                                              min_size=1, max_size=2, unique=True)))]
        if draw(st.booleans()):
            gpu.append(_leaf("engine", draw(st.sampled_from(["vllm", "sglang", "tgi"]))))
        body.append(Node(["gpu", f"{name}-gpu{k}"], gpu))
    draw(st.randoms()).shuffle(body)
    return Node(["region", name], body)


@st.composite
def _service(draw, host: str, regions: list[str]) -> Node:
    served = draw(st.lists(st.sampled_from(regions), min_size=1, unique=True))
    steer = draw(st.lists(st.sampled_from(["latency", "geo", "weighted", "priority"]),
                          min_size=1, max_size=3, unique=True))
    body = [_leaf("regions", *served), _leaf("steer", *steer)]
    if "priority" in steer:
        body.append(_leaf("priority", *served))
    if draw(st.booleans()):
        body.append(_leaf("ttl", f"{draw(st.integers(5, 300))}s"))
    if draw(st.booleans()):
        body.append(Node(["spillover"], [_leaf("at", f"{draw(st.integers(50, 99))}%"),
                                         _leaf("max", f"{draw(st.integers(1, 100))}%")]))
    if draw(st.booleans()):
        body.append(Node(["failover"], [_leaf("fall", str(draw(st.integers(1, 9)))),
                                        _leaf("interval", "2s"), _leaf("timeout", "1s")]))
    eu = [r for r in served if JURISDICTION_OF[r] == "EU"]
    if eu and draw(st.booleans()):
        allow = (_leaf("allow", "jurisdiction", "EU") if set(eu) == set(
            r for r in regions if JURISDICTION_OF[r] == "EU") and draw(st.booleans())
            else _leaf("allow", *eu))
        rule = [_leaf("clients", "jurisdiction", "EU"), allow,
                _leaf("all-down", draw(st.sampled_from(["answer-allowed", "answer-nothing"])))]
        if draw(st.booleans()):
            rule.append(_leaf("spillover-to", "none"))
        body.append(Node(["residency", "eu"], rule))
        body.append(_leaf("unknown-location", "refuse"))
    if draw(st.booleans()):
        body.append(_leaf("affinity", draw(st.sampled_from(["none", "subnet"]))))
    body.append(_leaf("all-down", draw(st.sampled_from(["answer-nothing", "answer-allowed"]))))
    draw(st.randoms()).shuffle(body)
    return Node(["service", host], body)


@st.composite
def _identity(draw) -> Node:
    body = []
    api_keys = draw(st.sampled_from(["on", "off", None]))
    if api_keys is not None:
        body.append(_leaf("api-keys", api_keys))
    if api_keys == "off" or draw(st.booleans()):
        jwt = [_leaf("jwks", draw(st.sampled_from(
            ["https://auth.example.com/.well-known/jwks.json", "https://idp.example.net/k"])))]
        if draw(st.booleans()):
            jwt.append(_leaf("issuer", "https://auth.example.com/"))
        jwt.append(_leaf("audience", "director"))  # required
        if draw(st.booleans()):
            jwt.append(_leaf("tenant-claim", draw(st.sampled_from(["org", "tenant"]))))
        if draw(st.booleans()):
            jwt.append(_leaf("leeway", f"{draw(st.integers(0, 60))}s"))
        draw(st.randoms()).shuffle(jwt)
        body.append(Node(["jwt"], jwt))
    return Node(["identity"], body)


def _quota_rate(draw) -> str:
    scale = draw(st.sampled_from(["", "k", "M"]))
    return f"{draw(st.integers(1, 999))}{scale}/{draw(st.sampled_from(['s', 'min', 'h']))}"


def _burst(draw) -> tuple[str, ...]:
    if not draw(st.booleans()):
        return ()
    return ("burst", f"{draw(st.integers(1, 999))}{draw(st.sampled_from(['', 'k', 'M']))}")


@st.composite
def _tenant(draw, name: str, services: dict[str, list[str]]) -> Node:
    body = []
    if draw(st.booleans()):
        body.append(_leaf("weight", str(draw(st.integers(1, 10)))))
    if draw(st.booleans()):
        body.append(_leaf("priority", str(draw(st.integers(-5, 5)))))
    if draw(st.booleans()):
        quota = [_leaf(key, _quota_rate(draw), *_burst(draw))
                 for key in ("requests", "input-tokens", "output-tokens")
                 if draw(st.booleans())]
        if draw(st.booleans()):
            quota.append(_leaf("concurrent", str(draw(st.integers(1, 64)))))
        body.append(Node(["quota"], quota))
    used = list(services)
    if draw(st.booleans()):
        used = draw(st.lists(st.sampled_from(sorted(services)), min_size=1, unique=True))
        body.append(_leaf("services", *used))
    if draw(st.booleans()):
        body.append(_leaf("models", "llama-3.1-8b"))
    serving = sorted({r for host in used for r in services[host]})
    if serving and draw(st.booleans()):
        # a tenant's regions may narrow where its services run, never leave one with none
        needed = {draw(st.sampled_from(services[host])) for host in used}
        extra = draw(st.lists(st.sampled_from(serving), unique=True))
        body.append(_leaf("regions", *sorted(needed | set(extra))))
    if draw(st.booleans()):
        body.append(_leaf("redis-down", draw(st.sampled_from(["open", "closed"]))))
    if draw(st.booleans()):
        body.append(_leaf("reserve", f"{draw(st.integers(0, 30))}%"))
    draw(st.randoms()).shuffle(body)
    return Node(["tenant", name], body)


def _served(service: Node) -> list[str]:
    return next(child.head[1:] for child in service.block or () if child.head[0] == "regions")


@st.composite
def policy_trees(draw) -> list[Node]:
    regions = draw(st.lists(st.sampled_from(REGION_POOL), min_size=1, max_size=4, unique=True))
    countries = draw(st.lists(st.sampled_from(EU_COUNTRIES), min_size=1, unique=True))
    nodes = [draw(_zone()), Node(["jurisdiction", "EU"], [_leaf("countries", *countries)])]
    nodes += [draw(_region(name)) for name in regions]
    hosts = draw(st.lists(st.sampled_from(["chat", "embed", "code"]), min_size=1, unique=True))
    services = [draw(_service(f"{host}.{APEX}", regions)) for host in hosts]
    nodes += services
    if draw(st.booleans()):
        nodes.append(draw(_identity()))
        served = {service.head[1]: _served(service) for service in services}
        names = draw(st.lists(st.sampled_from(["acme", "globex", "free_tier"]), max_size=3,
                              unique=True))
        nodes += [draw(_tenant(name, served)) for name in names]
    if draw(st.booleans()):
        nodes.insert(1, Node(["state"], [_leaf("stale-after", draw(_duration()))]))
    return nodes


_COMMENT = st.text(st.sampled_from("abc xyz-#{};\"'"), max_size=12).map(lambda t: "#" + t)
_SPACE = st.sampled_from([" ", "  ", "\t", " \t "])
_INDENT = st.sampled_from(["", " ", "  ", "    ", "\t", "        "])


@st.composite
def _lines(draw, nodes: list[Node]) -> list[str]:
    out: list[str] = []
    for node in nodes:
        out += [""] * draw(st.integers(0, 2))
        if draw(st.integers(0, 4)) == 0:
            out.append(draw(_INDENT) + draw(_COMMENT))
        indent = draw(_INDENT)
        head = draw(_SPACE).join(node.head)
        trailing = draw(st.one_of(st.just(""), _COMMENT.map(lambda c: draw(_SPACE) + c)))
        if node.leaf:
            out.append(indent + head + draw(st.sampled_from(["", ";", " ;"])) + trailing)
        elif all(child.leaf for child in node.block) and draw(st.booleans()):
            inner = draw(st.sampled_from(["; ", ";", " ; "])).join(
                " ".join(child.head) for child in node.block)
            out.append(f"{indent}{head}{draw(_SPACE)}{{{draw(_SPACE)}{inner}{draw(_SPACE)}}}"
                       + trailing)
        else:
            opening = draw(st.one_of(st.just(""), _COMMENT.map(lambda c: " " + c)))
            out.append(f"{indent}{head} {{{opening}")
            out += draw(_lines(node.block))
            out.append(indent + "}" + trailing)
    return out


@st.composite
def policies(draw) -> str:
    """The text of a valid policy, laid out at random."""
    lines = draw(_lines(draw(policy_trees())))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n"]))
