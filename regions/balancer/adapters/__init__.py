# SPDX-License-Identifier: Apache-2.0
"""LoRA adapters on demand: where each is held (``placement``), loading them through the
engines' runtime API (``loader``) and the request stage that ties both to routing
(``stage``)."""
