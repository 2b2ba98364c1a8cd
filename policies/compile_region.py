"""Compile ``region`` blocks (and their ``gpu`` blocks) into ``Region`` objects."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from policies import values
from policies.errors import did_you_mean, one_of
from policies.grammar import ENGINES
from policies.model import Adapter, Capacity, GpuServer, Region
from policies.reading import Args, Ref, Reporter, read_block
from policies.syntax import Directive


def compile_region(directive: Directive, body: list[Directive], report: Reporter,
                   refs: list[Ref]) -> Region | None:
    args = Args(directive, report)
    name = args.take(lambda t: values.name(t, "region name"), "<name>")
    args.end("<name>")
    found = read_block(body, "region", directive, report)
    context = f"region {name}"

    lat = lon = 0.0
    for d in found.get("location", ()):
        a = Args(d, report)
        lat = a.take(lambda t: values.number(t, -90, 90, "latitude"),
                     "<latitude> <longitude>") or 0.0
        lon = a.take(lambda t: values.number(t, -180, 180, "longitude"),
                     "<latitude> <longitude>") or 0.0
        a.end("<latitude> <longitude>")

    jurisdiction = ""
    for d in found.get("jurisdiction", ()):
        a = Args(d, report)
        jurisdiction = a.take(lambda t: values.name(t, "jurisdiction label"), "<label>") or ""
        a.end("<label>")

    v4: list[str] = []
    v6: list[str] = []
    for d in found.get("endpoints", ()):
        for address, _arg in Args(d, report).rest(values.ip_address, "<address> ..."):
            if isinstance(address, ipaddress.IPv4Address):
                v4.append(str(address))
            else:
                v6.append(str(address))

    capacity = Capacity(0.0)
    for d in found.get("capacity", ()):
        capacity = _capacity(d, report) or capacity

    weight = 100.0
    for d in found.get("weight", ()):
        a = Args(d, report)
        weight = a.take(lambda t: values.number(t, 0, 1_000_000, "weight"), "<number>") or 0.0
        a.end("<number>")

    healthcheck = None
    for d in found.get("healthcheck", ()):
        a = Args(d, report)
        arg = a.take_arg("<healthcheck name>")
        a.end("<healthcheck name>")
        if arg is not None:
            healthcheck = arg.text
            refs.append(Ref("healthcheck", arg.text, arg.pos, arg.width, context))

    gpus = []
    for d in found.get("gpu", ()):
        gpu = _gpu(d, report)
        if gpu is not None:
            gpus.append(gpu)

    splits = _splits(found.get("split", ()), gpus, report)
    adapters = _adapters(found.get("adapter", ()), gpus, report)
    if name is None:
        if not directive.args:
            return None
        name = directive.args[0].text  # reported; keep the region so references resolve
    return Region(
        name=name, latitude=lat, longitude=lon, jurisdiction=jurisdiction,
        endpoints_v4=tuple(v4), endpoints_v6=tuple(v6), capacity=capacity, weight=weight,
        gpus=tuple(gpus), healthcheck=healthcheck, splits=splits, adapters=adapters,
        pos=directive.pos,
    )


_ADAPTER_USAGE = "<name> base <model> path <path>"


def _adapters(found: Iterable[Directive], gpus: list[GpuServer], report: Reporter
              ) -> tuple[Adapter, ...]:
    """``adapter`` directives: a name no gpu serves as a model, named once, of a base
    model some gpu of the region serves."""
    adapters: dict[str, Adapter] = {}
    served = {m for g in gpus for m in g.models}
    for d in found:
        a = Args(d, report)
        name = a.take(lambda t: values.name(t, "adapter name"), _ADAPTER_USAGE)
        base = path = None
        if a.expect("base", _ADAPTER_USAGE):
            base = a.take(lambda t: values.name(t, "model name"), _ADAPTER_USAGE)
        if a.expect("path", _ADAPTER_USAGE):
            path = a.take(_adapter_path, _ADAPTER_USAGE)
        if not a.end(_ADAPTER_USAGE) or name is None or base is None or path is None:
            continue
        if name in adapters:
            report.at_name(d.pos, f"adapter {name} is declared twice in this region")
        elif name in served:
            report.at_name(d.pos, f"adapter {name}: a gpu of this region serves a model of "
                                  "that name")
        elif base not in served:
            report.at_name(d.pos, f"adapter {name}: no gpu of this region serves its base "
                                  f"model {base}")
        else:
            adapters[name] = Adapter(name, base, path, d.pos)
    return tuple(adapters.values())


def _adapter_path(text: str) -> str:
    """Where the engine reads the adapter: a directory on the GPU server or a hub name."""
    if not 0 < len(text) <= 1024 or not text.isprintable():
        raise values.ValueProblem(f"'{text[:40]}' is not an adapter path",
                                  expected="up to 1,024 printable characters")
    return text


_SPLIT_USAGE = "<model> <revision> <percent>% ..."


def _splits(found: Iterable[Directive], gpus: list[GpuServer], report: Reporter
            ) -> tuple[tuple[str, tuple[tuple[str, float], ...]], ...]:
    """``split`` directives: a model, then revisions each with its share; the shares add to
    100 %, a revision is named once, and some GPU server of the region declares it."""
    splits: dict[str, tuple[tuple[str, float], ...]] = {}
    for d in found:
        args = Args(d, report)
        model = args.take(lambda t: values.name(t, "model name"), _SPLIT_USAGE)
        pairs: list[tuple[str, float]] = []
        while args.remaining:
            revision = args.take(lambda t: values.name(t, "revision"), _SPLIT_USAGE)
            share = args.take(values.percent, _SPLIT_USAGE)
            if revision is not None and share is not None:
                pairs.append((revision, share * 100.0))
        if model is None or not pairs:
            continue
        declared = {r for g in gpus for m, r in g.revisions if m == model}
        names = [r for r, _ in pairs]
        if model in splits:
            report.at_name(d.pos, f"model {model} is split twice in this region")
        elif len(set(names)) != len(names):
            report.at_name(d.pos, f"split {model}: a revision is named twice")
        elif abs(sum(p for _, p in pairs) - 100.0) > 1e-6:
            report.at_name(d.pos, f"split {model}: the shares add to "
                                  f"{sum(p for _, p in pairs):g}%, not 100%")
        elif missing := sorted(set(names) - declared):
            report.at_name(d.pos, f"split {model}: no gpu of this region declares revision "
                                  f"{', '.join(missing)} (gpu ... {{ revision {model} "
                                  f"{missing[0]} }})")
        else:
            splits[model] = tuple(pairs)
    return tuple(splits.items())


_CAPACITY_USAGE = "<rate> | <gpus> gpus x <rate>"


def _capacity(directive: Directive, report: Reporter) -> Capacity | None:
    args = Args(directive, report)
    words = [arg.text for arg in directive.args]
    if len(words) == 1:
        rps = args.take(values.rate, _CAPACITY_USAGE)
        args.end(_CAPACITY_USAGE)
        if rps is not None and rps <= 0:
            report.at_arg(directive.args[0], "capacity must be above zero",
                          expected="a rate such as 300rps")
            return None
        return Capacity(rps) if rps is not None else None
    gpus = args.take(lambda t: values.integer(t, 1, 100_000, "GPU count"), _CAPACITY_USAGE)
    for keyword in ("gpus", "x"):
        arg = args.take_arg(_CAPACITY_USAGE)
        if arg is not None and arg.text not in (keyword, "gpu" if keyword == "gpus" else "*"):
            report.at_arg(arg, f"expected '{keyword}', got '{arg.text}'",
                          expected=f"capacity {_CAPACITY_USAGE}")
            return None
    per_gpu = args.take(values.rate, _CAPACITY_USAGE)
    if not args.end(_CAPACITY_USAGE) or gpus is None or per_gpu is None:
        return None
    return Capacity(gpus * per_gpu, gpus=gpus, per_gpu_rps=per_gpu)


def _gpu(directive: Directive, report: Reporter) -> GpuServer | None:
    args = Args(directive, report)
    name = args.take(lambda t: values.name(t, "GPU server name"), "<name>")
    args.end("<name>")
    found = read_block(directive.directives(), "gpu", directive, report)

    def single(key: str, convert, usage: str):
        for d in found.get(key, ()):
            a = Args(d, report)
            value = a.take(convert, usage)
            a.end(usage)
            return value
        return None

    url = single("url", values.url, "<url>")
    models: list[str] = []
    for d in found.get("models", ()):
        models += [m for m, _ in Args(d, report).rest(lambda t: values.name(t, "model name"),
                                                      "<model> ...")]
    kind = single("kind", lambda t: values.name(t, "GPU kind"), "<gpu kind>")
    speed = single("speed", lambda t: values.number(t, 0.01, 100, "speed"), "<relative speed>")
    engine = single("engine", _engine, "vllm | sglang | tgi | triton") or "vllm"
    max_seqs = single("max-seqs", lambda t: values.integer(t, 1, 1_000_000, "max-seqs"),
                      "<count>")
    kv_events, kv_replay = _kv_events(found.get("kv-events", ()), report)
    scheduling = single("scheduling", _scheduling, "fcfs | priority") or "fcfs"
    tokenizer = single("tokenizer", _tokenizer, TOKENIZER_USAGE)
    adapter_slots = single("adapter-slots",
                           lambda t: values.integer(t, 1, 100_000, "adapter-slots"), "<count>")
    standby, wake_s = False, None
    for d in found.get("standby", ()):
        a = Args(d, report)
        standby = True
        if a.peek() == "wake":
            a.index += 1
            wake_s = a.take(_wake, _STANDBY_USAGE)
        a.end(_STANDBY_USAGE)
    revisions: dict[str, str] = {}
    fingerprints: dict[str, str] = {}
    for d in found.get("revision", ()):
        a = Args(d, report)
        model = a.take(lambda t: values.name(t, "model name"), _REVISION_USAGE)
        revision = a.take(lambda t: values.name(t, "revision"), _REVISION_USAGE)
        fingerprint = None
        if a.peek() == "fingerprint":
            a.index += 1
            fingerprint = a.take(_fingerprint, _REVISION_USAGE)
        a.end(_REVISION_USAGE)
        if model is not None and revision is not None:
            if model not in models:
                report.at_name(d.pos, f"revision of {model}, which this gpu does not serve")
            elif revisions.setdefault(model, revision) != revision:
                report.at_name(d.pos, f"two revisions of {model} on one gpu")
            elif fingerprint is not None:
                fingerprints[model] = fingerprint
    if name is None or url is None:
        return None
    return GpuServer(name=name, url=url, models=tuple(models), kind=kind, speed=speed,
                     engine=engine, max_seqs=max_seqs, kv_events=kv_events,
                     kv_events_replay=kv_replay, priority_scheduling=scheduling == "priority",
                     tokenizer=tokenizer, revisions=tuple(revisions.items()),
                     fingerprints=tuple(fingerprints.items()), adapter_slots=adapter_slots,
                     standby=standby, wake_s=wake_s, pos=directive.pos)


_STANDBY_USAGE = "[wake <duration>]"


def _wake(text: str) -> float:
    seconds = values.duration(text)
    if not 0 < seconds <= 3600:
        raise values.ValueProblem(f"wake {text} is outside 0 to 1h",
                                  expected="the time a wake takes, such as 8s")
    return seconds


_REVISION_USAGE = "<model> <revision> [fingerprint <text>]"


def _fingerprint(text: str) -> str:
    """What a probe must read for the model on this server: its ``/v1/models`` entry's
    ``root`` (vLLM and SGLang: the weights' path or hub name), compared exactly."""
    if not 0 < len(text) <= 512 or not text.isprintable():
        raise values.ValueProblem(f"'{text[:40]}' is not a fingerprint",
                                  expected="up to 512 printable characters")
    return text


_KV_EVENTS_USAGE = "<zmq address> [replay <zmq address>]"


def _kv_events(found: Iterable[Directive], report: Reporter) -> tuple[str | None, str | None]:
    for d in found:
        args = Args(d, report)
        endpoint = args.take(values.zmq_endpoint, _KV_EVENTS_USAGE)
        replay = None
        if args.peek() == "replay":
            args.index += 1
            replay = args.take(values.zmq_endpoint, _KV_EVENTS_USAGE)
        args.end(_KV_EVENTS_USAGE)
        return endpoint, replay
    return None, None


SCHEDULING = ("fcfs", "priority")


def _scheduling(text: str) -> str:
    if text not in SCHEDULING:
        raise values.ValueProblem(f"unknown scheduling '{text}'", expected=one_of(SCHEDULING),
                                  hint=did_you_mean(text, SCHEDULING))
    return text


TOKENIZER_USAGE = "<directory> | simulator | estimate"


def _tokenizer(text: str) -> str:
    """A directory holding the model's tokenizer.json (read by the balancer at its start),
    or one of the two names."""
    if text in ("simulator", "estimate") or text.startswith(("/", "./", "../")):
        return text
    raise values.ValueProblem(f"'{text}' is not a tokenizer", expected=TOKENIZER_USAGE,
                              hint="a directory is written as a path: /models/llama or "
                                   "./tokenizers/llama")


def _engine(text: str) -> str:
    if text not in ENGINES:
        raise values.ValueProblem(f"unknown engine '{text}'", expected=one_of(ENGINES),
                                  hint=did_you_mean(text, ENGINES))
    return text
