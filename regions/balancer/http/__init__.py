# SPDX-License-Identifier: Apache-2.0
"""The balancer's HTTP: the request parsed once (``request_info``), the data path
(``proxy``: bind, forward over ``upstream``, ``relay`` the answer back), the client
deadlines, header hygiene, the metrics and the admin listener. Imports ``scheduling``."""
