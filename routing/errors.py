# SPDX-License-Identifier: Apache-2.0
"""The routing core's one error: a registry or profile that cannot be built as asked."""

from __future__ import annotations


class RegistryError(ValueError):
    """An unknown or duplicate plugin, a write to a frozen registry, a refused parameter."""
