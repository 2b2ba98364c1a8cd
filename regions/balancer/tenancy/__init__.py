# SPDX-License-Identifier: Apache-2.0
"""Who may send a request, and how much: the policy's identity and tenants (``access``),
their quotas at this balancer (``tenant_quota``) and the residency re-check
(``residency_check``). Imports ``http`` and ``scheduling``."""
