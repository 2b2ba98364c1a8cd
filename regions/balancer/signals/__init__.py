# SPDX-License-Identifier: Apache-2.0
"""What the balancer learns from outside and tells it: its engines' metrics and KV events,
the shared state (load published, drains and health followed, the stored policy
followed), overflow to sibling regions, the model catalogue and usage reconciliation.
Imports every other wing."""
