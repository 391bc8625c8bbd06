#!/usr/bin/env bash
# redis-server under callgrind, collecting what serves clients' commands:
# reading and executing them (processInputBuffer) and writing the replies.
# The bench starts it in place of redis-server when LEASEHOLD_REDIS_SERVER
# names this file (see server-instructions.sh). Output: $CALLGRIND_DIR/cg.<pid>.
exec valgrind --tool=callgrind --callgrind-out-file="${CALLGRIND_DIR:?}/cg.%p" \
  --toggle-collect=processInputBuffer --toggle-collect=writeToClient \
  --toggle-collect=handleClientsWithPendingWrites \
  redis-server "$@"
