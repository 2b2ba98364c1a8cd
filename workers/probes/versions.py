"""Version consistency: what each GPU server of a region says it serves, against the policy.

One task per region reads every GPU server's ``/v1/models`` concurrently and decides, for
each server and each model the policy gives it, whether the balancer may send that model
there:

- the policy declares the fingerprint (``revision <model> <rev> fingerprint <text>``): the
  entry's ``root`` (vLLM and SGLang: the path or hub name the weights were loaded from)
  must equal it;
- else the region's servers that serve the model at the same declared revision (or with
  none declared) must agree with one another: when their roots differ the pool is mixed
  and only the largest group keeps the model (a tie: the group of the first of them in
  policy order); the others are refused for it, so two revisions nobody declared never
  serve one model side by side;
- a server that answers without listing the model is refused for it.

A server that cannot be read keeps its last record (its health probe judges it). Records
(``state.records.VersionRecord``) are written with their time, and the key is published on
the change channel whenever what a server is refused for changes, so the balancers apply
it at once: within one probe interval of the change on the server.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence

from state.guard import describe, redis_errors
from state.records import VersionRecord
from state.store import StateStore
from workers.probes.batch import fetch_all
from workers.probes.http import HttpResult
from workers.probes.session import ProbeSession
from workers.targets import GpuTarget

log = logging.getLogger(__name__)

Listing = dict[str, str]  # model id -> root


def read_listing(result: HttpResult) -> Listing | None:
    """The models of a ``/v1/models`` answer with their roots; None if it is not one."""
    if result.status != 200:
        return None
    try:
        data = json.loads(result.body).get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    listing: Listing = {}
    for entry in data:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            root = entry.get("root")
            listing[entry["id"]] = root if isinstance(root, str) and root else entry["id"]
    return listing


def judge(targets: Sequence[GpuTarget],
          listings: Mapping[str, Listing | None]) -> dict[str, dict[str, str]]:
    """For each target read (a listing), the models it is refused for with the reason:
    ``"<kind>: <detail>"``, the kind one of ``fingerprint``, ``mixed``, ``unlisted``."""
    refused: dict[str, dict[str, str]] = {}
    pools: dict[tuple[str, str | None], list[tuple[str, str]]] = {}  # (name, root)
    for target in targets:
        listing = listings.get(target.name)
        if listing is None:
            continue
        refused[target.name] = {}
        fingerprints = dict(target.fingerprints)
        revisions = dict(target.revisions)
        for model in target.models:
            if model not in listing:
                refused[target.name][model] = "unlisted: the server does not list it"
            elif model in fingerprints:
                if listing[model] != fingerprints[model]:
                    refused[target.name][model] = (
                        f"fingerprint: reports {listing[model]!r}, revision {revisions.get(model)} "
                        f"is {fingerprints[model]!r}")
            else:
                pools.setdefault((model, revisions.get(model)), []).append(
                    (target.name, listing[model]))
    for (model, revision), members in pools.items():
        groups: dict[str, list[str]] = {}
        for name, root in members:
            groups.setdefault(root, []).append(name)
        if len(groups) < 2:
            continue
        kept = max(groups, key=lambda root: len(groups[root]))  # first largest: policy order
        what = f"revision {revision}" if revision is not None else "no declared revision"
        for root, names in groups.items():
            if root == kept:
                continue
            for name in names:
                refused[name][model] = (
                    f"mixed: reports {root!r}, {len(groups[kept])} of {len(members)} "
                    f"servers of {model} ({what}) report {kept!r}")
    return refused


def probe_versions(store: StateStore, targets: Sequence[GpuTarget], *,
                   session: ProbeSession | None = None) -> dict[str, VersionRecord]:
    """Read every target's models, judge them, store each record read (publishing the key
    of each whose refusals changed); returns the records written, by server name."""
    fetched = fetch_all(targets, "models_path", session=session)
    listings = {item.target.name: read_listing(item.result) for item in fetched}
    refused = judge(targets, listings)
    now = time.time()
    records = {name: VersionRecord(seen=listings[name] or {}, refused=refused[name],
                                   timestamp=now) for name in refused}
    if not records:
        return records
    by_name = {t.name: t for t in targets}
    keys = {name: store.keys.gpu_version(by_name[name].region, name) for name in records}
    client = store.client
    with redis_errors(describe(client)):
        pipe = client.pipeline(transaction=False)
        for name in records:
            pipe.hget(keys[name], "refused")
        before = pipe.execute()
        pipe = client.pipeline(transaction=False)
        for (name, record), old in zip(records.items(), before, strict=True):
            fields = record.to_fields()
            pipe.hset(keys[name], mapping=fields)
            if (old.decode() if isinstance(old, bytes) else old) != fields["refused"]:
                if record.refused:
                    log.warning("versions: %s/%s refused for %s", by_name[name].region, name,
                                "; ".join(f"{m}: {why}" for m, why in record.refused.items()))
                pipe.publish(store.keys.changes, keys[name])
        pipe.execute()
    return records
