"""The policy DSL: grammar, parser (positions kept), compiler to a frozen model, validator,
residency proof and formatter. No I/O outside ``policies.loader``; no globals."""

from policies.errors import Diagnostic, PolicyError
from policies.loader import (
    CheckResult,
    PolicySources,
    check_policy,
    load_policy,
    load_policy_text,
    read_sources,
)
from policies.model import Policy

__all__ = [
    "CheckResult",
    "Diagnostic",
    "Policy",
    "PolicyError",
    "PolicySources",
    "check_policy",
    "load_policy",
    "load_policy_text",
    "read_sources",
]
