"""Where the project's vendored data lives: request traces and GeoIP test databases.

The repository carries them in ``data/`` (each data set with its README and license). Set
``DIRECTOR_DATA`` to read the same layout from another folder.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "DIRECTOR_DATA"
REPOSITORY_DATA = Path(__file__).resolve().parents[1] / "data"


def data_dir() -> Path:
    """The data folder: ``$DIRECTOR_DATA`` when set, else the repository's ``data/``."""
    configured = os.environ.get(DATA_ENV)
    return Path(configured).expanduser() if configured else REPOSITORY_DATA


def traces_dir() -> Path:
    """Request traces (Azure LLM inference 2023, Mooncake FAST'25), one folder per trace."""
    return data_dir() / "traces"


def trace_path(relative: str) -> Path:
    """A trace file by its path under ``traces/``, e.g.
    ``azure-llm-2023/AzureLLMInferenceTrace_conv.csv.gz``."""
    return traces_dir() / relative


def maxmind_test_db(name: str = "GeoIP2-City-Test") -> Path:
    """One of MaxMind's test databases (fake mappings, real format), e.g. ``GeoIP2-City-Test``."""
    return data_dir() / "geoip" / "maxmind-test" / f"{name}.mmdb"
