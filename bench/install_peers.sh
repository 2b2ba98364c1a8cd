#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The routing benchmark's peers, benchmark-only (never product dependencies): smg, the SGLang
# Model Gateway (a Rust binary in a PyPI wheel), into the project's virtualenv, pinned; nginx
# and HAProxy from Debian when missing and when run as root. Idempotent: what is there already
# is left alone.
#
#   bash bench/install_peers.sh            # then: bench/routing_live.py --setups ...,smg:cache_aware
set -euo pipefail
cd "$(dirname "$0")/.."

SMG_VERSION="1.13.0"
PYTHON=".venv/bin/python"

if [ ! -x "$PYTHON" ]; then
    echo "install_peers: no virtualenv at .venv (create it first)" >&2
    exit 1
fi
installed="$("$PYTHON" -m pip show smg 2>/dev/null | sed -n 's/^Version: //p')"
if [ "$installed" != "$SMG_VERSION" ]; then
    "$PYTHON" -m pip install --quiet "smg==$SMG_VERSION"
fi
echo "smg $("$PYTHON" -m pip show smg | sed -n 's/^Version: //p') in .venv/bin/smg"

missing=()
for binary in nginx haproxy; do
    if ! command -v "$binary" >/dev/null && [ ! -x "/usr/sbin/$binary" ]; then
        missing+=("$binary")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = "0" ]; then
        apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
        echo "installed ${missing[*]}"
    else
        echo "install_peers: ${missing[*]} missing (apt-get install ${missing[*]}, as root)" >&2
    fi
fi
