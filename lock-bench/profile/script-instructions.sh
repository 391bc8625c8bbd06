#!/usr/bin/env bash
# Redis' instructions per call of a release script: redis-server under
# callgrind collecting evalShaCommand only (the script and the commands it
# calls), 2,000 owned keys each set and then released by the script.
#
#   bash lock-bench/profile/script-instructions.sh <script.lua> <args>
#
# <args>: 1 sends the token alone (the shortest form of release.lua, or a
# bare compare-and-delete); 2 sends the token and a keep of 0 (the compact
# form). release.lua as Redis runs it is the concatenation in
# lock-core/src/backend/scripts/release.rs (SOURCE).
set -u
script=$1; nargs=${2:-1}; n=2000
dir=$(mktemp -d)
port=$((20000 + RANDOM % 10000))
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" --toggle-collect=evalShaCommand \
  redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
vg=$!
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.3; done
sha=$(redis-cli -p "$port" script load "$(cat "$script")")
tok=0123456789abcdef0123456789abcdef:bench
for i in $(seq 1 "$n"); do
  echo "SET leasehold:{k$i}:lock $tok PX 60000"
  if [ "$nargs" = 1 ]; then echo "EVALSHA $sha 1 leasehold:{k$i}:lock $tok"
  else echo "EVALSHA $sha 1 leasehold:{k$i}:lock $tok 0"; fi
done | redis-cli -p "$port" --pipe >/dev/null
left=$(redis-cli -p "$port" dbsize)
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1
wait "$vg"
total=$(callgrind_annotate "$dir"/cg.* 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
echo "$script ($nargs argument(s)): $((total / n)) instructions per call; keys left: $left (0: every release deleted its key)"
