# SPDX-License-Identifier: Apache-2.0
"""Graceful degradation of a region's answers: the exact-match response cache."""
