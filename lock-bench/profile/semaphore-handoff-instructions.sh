#!/usr/bin/env bash
# Redis' instructions per handoff of a busy semaphore (S9's shape: every
# permit taken, waiters in line): redis-server under callgrind collecting
# evalShaCommand only (the scripts and the commands they call). 4 permits,
# 8 owners; 4 hold, 4 wait in line with what a grant needs. Each step, the
# oldest holder gives its permit back (family_release.lua hands it to the
# first in line) and asks again at once (family_acquire.lua, busy: it
# joins the back of the line), as S9's tasks do.
#
#   bash lock-bench/profile/semaphore-handoff-instructions.sh [steps]
#
# Run from the repository's root; the scripts are concatenated as their
# SOURCE in lock-core/src/backend/scripts/family_{acquire,release}.rs.
set -u
n=${1:-2000}
scripts=lock-core/src/backend/scripts
dir=$(mktemp -d)
cat "$scripts/family_acquire.lua" "$scripts/typed.lua" "$scripts/family.lua" \
  "$scripts/family_acquire_contended.lua" >"$dir/acquire.lua"
cat "$scripts/typed.lua" "$scripts/family.lua" "$scripts/family_release.lua" \
  "$scripts/family_hand_on.lua" >"$dir/release.lua"
port=$((20000 + RANDOM % 10000))
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" --toggle-collect=evalShaCommand \
  redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
vg=$!
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.3; done
acquire=$(redis-cli -p "$port" script load "$(cat "$dir/acquire.lua")")
release=$(redis-cli -p "$port" script load "$(cat "$dir/release.lua")")
key='leasehold:{sem}:lock'
# token, kind, lease, fence life, grace, permits, (channel, publish), place life,
# attempt, the client's wake-ups' name (one client, as in S9: the release's
# own reply tells the waiter, no PUBLISH)
here=0123456789abcdef
ask() { echo "EVALSHA $acquire 1 $key t$1 s 60000 60000 1000 4 '' '' 60000 $2 $here"; }
give() { echo "EVALSHA $release 1 $key t$1 s 0 4 $here"; }
{
  for t in 0 1 2 3 4 5 6 7; do ask "$t" 1; done
  for i in $(seq 0 $((n - 1))); do
    t=$((i % 8))
    give "$t"
    ask "$t" $((i + 2))
  done
} | redis-cli -p "$port" --pipe >"$dir/pipe.log"
holders=$(redis-cli -p "$port" hlen "$key")
waiting=$(redis-cli -p "$port" llen 'leasehold:{sem}:line')
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1; echo "callgrind output: $dir" >&2
wait "$vg"
total=$(callgrind_annotate "$dir"/cg.* 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
echo "semaphore handoff (release + busy ask): $((total / n)) instructions per step (8 first asks included); holders $holders, in line $waiting (4 and 4: every step handed on)"
