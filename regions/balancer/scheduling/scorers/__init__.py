# SPDX-License-Identifier: Apache-2.0
"""Scorers: rank the remaining backends with values in [0, 1] (one algorithm per module)."""
