# SPDX-License-Identifier: Apache-2.0
"""Filters: drop backends that must not take a request (one algorithm per module)."""
