"""The HA lab: the deployment laid out over Linux network namespaces, one per host, so that
faults are real (a process killed, packets between hosts dropped), and drills against it.

- :mod:`~director.lab.network`: hosts, their addresses, partitions;
- :mod:`~director.up.redis_set`: the Redis master, replicas and Sentinels;
- :mod:`~director.lab.shape`: which hosts, the policy, a process per component;
- :mod:`~director.lab.run`: start, fault, stop.
"""
