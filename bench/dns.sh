#!/usr/bin/env bash
# DNS benchmark: the director's DNS server against gdnsd, side by side, on loopback.
# Installs what it needs (Debian dnsperf, gdnsd, dig), then runs bench/dns_bench.py:
# three query mixes (plain A; ECS from one /24; ECS from 30,000 distinct /24s), servers
# pinned to CPU 0 and dnsperf to CPU 1 (--workers 1), and on shared cores (--workers 2).
# Each dnsperf run is <= 10 s.
#   bench/dns.sh [--seconds 8] [--repeats 3] [--workdir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v dnsperf >/dev/null || need+=(dnsperf)
command -v gdnsd >/dev/null || need+=(gdnsd)
command -v dig >/dev/null || need+=(bind9-dnsutils)
command -v taskset >/dev/null || need+=(util-linux)
if ((${#need[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The Debian package may start its own gdnsd on port 53; ours runs on 5301 with its own config.
python="${PYTHON:-.venv/bin/python}"
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
     "$($python -c 'import sys; print(sys.version.split()[0])')," \
     "uvloop $($python -c 'import uvloop; print(uvloop.__version__)' 2>/dev/null || echo none)"
exec "$python" bench/dns_bench.py "$@"
