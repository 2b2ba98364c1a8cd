# SPDX-License-Identifier: Apache-2.0
"""Which GPU server takes a request, and when: the pool of backends and what is learned of
them (capacity, speed, time to first token, cached prefixes, output lengths), the routing
profile (``filters``, ``scorers``, ``pickers`` run by ``pipeline``, registered in
``registry``) and admission (bind now or hold in the region queue, fair share between
tenants). Imports nothing of the other wings."""
