"""The regional tier: ``regions.balancer`` (one balancer per region, in front of its GPU
servers) and ``regions.simulator`` (a vLLM-like GPU server for tests, drills and
benchmarks). Each lists its own public API; both load on first use."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["balancer", "simulator"]


def __getattr__(name: str) -> ModuleType:
    if name not in __all__:
        raise AttributeError(f"module 'regions' has no attribute {name!r}")
    return importlib.import_module(f"regions.{name}")
