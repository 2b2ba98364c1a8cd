"""How large a policy may be, so that checking one is bounded work whoever wrote it.

A policy comes from whoever may ``PUT`` one to the admin API, and every instance of the
fleet checks it again, so its size is capped where the work grows with it: the directives
(each file's, counted again wherever an ``include`` splices it), the regions (the engine
proof places a client at each region and runs decisions that read every region), the
services and tenants (a proof or a table each), the GPU servers (polled and routed over),
and the problems reported (each is rendered with its source line). A policy over a cap is
refused with an error at the directive that crossed it. Beyond the caps, the policy gate
(``director.policy_gate``) gives the whole check a deadline.
"""

from __future__ import annotations

MAX_DIRECTIVES = 100_000  # every directive, blocks' contents and spliced includes counted
MAX_REGIONS = 256
MAX_SERVICES = 1_024
MAX_TENANTS = 10_000
MAX_GPUS = 10_000  # GPU servers across every region
MAX_REPORTED = 100  # problems listed; the rest are counted in one last line
