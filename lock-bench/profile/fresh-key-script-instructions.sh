#!/usr/bin/env bash
# Redis' instructions per call of a script that creates its key (an
# acquisition on a free key): redis-server under callgrind collecting
# evalShaCommand only (the script and the commands it calls), 2,000 calls,
# each on a fresh key leasehold:{k<i>}:lock.
#
#   bash lock-bench/profile/fresh-key-script-instructions.sh <script.lua> "<ARGV after the token>"
#
# E.g. the free permit of family_acquire.lua as Redis runs it (the
# concatenation in lock-core/src/backend/scripts/family_acquire.rs, SOURCE),
# in its compact form:
#   cd lock-core/src/backend/scripts
#   cat family_acquire.lua typed.lua family.lua family_acquire_contended.lua > /tmp/fa.lua
#   bash ../../../../lock-bench/profile/fresh-key-script-instructions.sh /tmp/fa.lua "s 10000 3610000 0 4"
set -u
script=$1; args=${2:-}; n=2000
dir=$(mktemp -d)
port=$((20000 + RANDOM % 10000))
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" --toggle-collect=evalShaCommand \
  redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
vg=$!
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.3; done
sha=$(redis-cli -p "$port" script load "$(cat "$script")")
tok=0123456789abcdef0123456789abcdef:bench
for i in $(seq 1 "$n"); do
  echo "EVALSHA $sha 1 leasehold:{k$i}:lock $tok $args"
done | redis-cli -p "$port" --pipe >/dev/null
sample=$(redis-cli -p "$port" --raw hgetall "leasehold:{k5}:lock" | tail -1)
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1
wait "$vg"
total=$(callgrind_annotate "$dir"/cg.* 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
echo "$script [$args]: $((total / n)) instructions per call; a holder written: ${sample:-none}"
