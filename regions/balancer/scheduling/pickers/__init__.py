# SPDX-License-Identifier: Apache-2.0
"""Pickers: choose one backend from the weighted scores (one algorithm per module)."""
