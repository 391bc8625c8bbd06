#!/usr/bin/env bash
# Redis' instructions per acquire + release pair, for each implementation
# named: the bench's `--count N` mode (S2's shape, see
# benches/locks/count.rs) against a redis-server under callgrind.
#
#   cargo bench --workspace --bench locks --no-run
#   bash lock-bench/profile/server-instructions.sh target/release/deps/locks-<hash> 20000 raw leasehold
#
# The harness kills its servers (no dump at exit), so callgrind is asked
# for a dump every second and the dumps are summed. The 500 pairs of
# warm-up are counted too: per pair = total / (N + 500).
set -uo pipefail
bin=$1; n=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
export CALLGRIND_DIR
for impl in "$@"; do
  CALLGRIND_DIR=$(mktemp -d)
  LEASEHOLD_REDIS_SERVER="$here/redis-under-callgrind.sh" \
    "$bin" --bench --count "$n" --impls "$impl" >"$CALLGRIND_DIR/bench.log" 2>&1 &
  bench=$!
  while kill -0 "$bench" 2>/dev/null; do
    sleep 1
    callgrind_control -d >/dev/null 2>&1
  done
  total=0
  for f in "$CALLGRIND_DIR"/cg.*; do
    [ -s "$f" ] || continue
    t=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
    total=$((total + ${t:-0}))
  done
  echo "$impl: $((total / (n + 500))) instructions per pair (dumps in $CALLGRIND_DIR)"
done
