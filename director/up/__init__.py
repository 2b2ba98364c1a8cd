"""``director up``: the whole system on one machine, as supervised child processes.

- :mod:`director.up.plan`: which processes a policy needs, with their commands and addresses;
- :mod:`director.up.child`: one supervised process (restart with backoff, kill/freeze holds);
- :mod:`director.up.supervisor`: start order, readiness, shutdown, chaos actions;
- :mod:`director.up.control`: the supervisor's control API on a Unix socket;
- :mod:`director.up.rundir`: the run directory (tokens, logs, ``up.json``);
- :mod:`director.up.console`: what is printed for the operator.
"""
