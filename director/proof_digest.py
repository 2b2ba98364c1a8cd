"""A digest that names one engine proof across processes: the proof's input and the code
that ran it.

Two processes with the same digest ran, or would run, the same decisions with the same
code, so a proof one of them completed holds for the other. The digest covers:

- **the input**: a policy cut as ``policy_gate.service_proof_key`` cuts it (its spillover
  threshold at 1, ``policy_gate.proof_class``), encoded
  canonically (dataclass fields that take part in equality, sets sorted, floats exact), so
  it is the same in every process whatever its hash seed;
- **the code**: a fingerprint of every Python source file of the packages a decision reads
  (``director``, ``routing``, ``policies``). Any edit, or another version in a rolling
  upgrade, gives other digests, and that process runs the proof itself.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib
import json
import sys
import uuid
from pathlib import Path

from policies.model import Policy

FINGERPRINTED = ("director", "routing", "policies")


def proof_digest(key: Policy) -> str:
    """The hex digest naming the engine proof of ``key`` run by this code."""
    return _digest(source_fingerprint(), key)


@functools.lru_cache(maxsize=256)
def _digest(fingerprint: str, key: Policy) -> str:
    # Remembered by key equality, as the gate remembers proofs: encoding a key costs
    # about half a millisecond, and a follower meets the same keys at every edit.
    text = json.dumps(canonical(key), separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(f"{fingerprint}\n{text}".encode()).hexdigest()


@functools.cache
def source_fingerprint() -> str:
    """SHA-256 over the Python version and the paths and bytes of the fingerprinted
    packages' ``.py`` files. Where a package's sources cannot be read (no files on disk: a
    zipped install), a value of this process alone: its digests then match no other's,
    and every reader runs its own proofs."""
    digest = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]}\0".encode())
    for package in FINGERPRINTED:
        location = importlib.import_module(package).__file__
        root = Path(location).parent if location else None
        sources = sorted(root.rglob("*.py")) if root is not None else []
        if root is None or not sources:
            return f"unshared {uuid.uuid4()}"
        for path in sources:
            digest.update(f"{package}/{path.relative_to(root).as_posix()}\0".encode())
            try:
                digest.update(path.read_bytes())
            except OSError:
                return f"unshared {uuid.uuid4()}"
            digest.update(b"\0")
    return digest.hexdigest()


def canonical(value: object) -> object:
    """``value`` as JSON-ready data that is equal exactly when the values are equal."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"@": type(value).__name__,
                **{f.name: canonical(getattr(value, f.name))
                   for f in dataclasses.fields(value) if f.compare}}
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, float):
        return {"f": repr(value)}  # exact, and never confused with an int
    if value is None or isinstance(value, str | int | bool):
        return value
    if isinstance(value, tuple | list):
        return [canonical(item) for item in value]
    if isinstance(value, frozenset | set):
        items = [canonical(item) for item in value]
        return {"set": sorted(items, key=lambda item: json.dumps(item, sort_keys=True))}
    if isinstance(value, dict):
        pairs = [[canonical(k), canonical(v)] for k, v in value.items()]
        return {"map": sorted(pairs, key=lambda pair: json.dumps(pair, sort_keys=True))}
    return {type(value).__name__: str(value)}  # addresses, networks
