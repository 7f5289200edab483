# Sourced, not run: `ensure_postgres` makes sure PostgreSQL's server binaries are installed
# (the metadata store of a cluster of brokers; crates/testkit starts it on a free 127.0.0.1
# port, as the `postgres` user when run as root) and exports SLUICE_PG_BIN_DIR.
#
# It uses the newest /usr/lib/postgresql/<version>/bin with initdb, else installs Debian's
# `postgresql` package (its service is not started: tests run their own servers).
#
#   SLUICE_PG_BIN_DIR   PostgreSQL's bin directory; set by ensure_postgres when unset

pg_newest_bin() {
  local best="" best_v=0 d v
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] || continue
    v="$(basename "$(dirname "$d")")"
    case "$v" in *[!0-9]*) continue ;; esac
    if [ "$v" -gt "$best_v" ]; then best="$d" best_v="$v"; fi
  done
  [ -n "$best" ] && echo "$best"
}

ensure_postgres() {
  if [ -n "${SLUICE_PG_BIN_DIR:-}" ] && [ -x "$SLUICE_PG_BIN_DIR/initdb" ]; then
    return 0
  fi
  local bin
  bin="$(pg_newest_bin || true)"
  if [ -z "$bin" ] || ! id postgres >/dev/null 2>&1; then
    echo "==> installing PostgreSQL (Debian's postgresql package)"
    local sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    # policy-rc.d-free: the package's service may start; tests never use it.
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 \
      || { $sudo_cmd apt-get update -qq \
        && $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
    bin="$(pg_newest_bin || true)"
  fi
  if [ -z "$bin" ]; then
    echo "error: PostgreSQL is needed by the cluster tests, and no /usr/lib/postgresql/*/bin/initdb" \
      "was found after installing it; set SLUICE_PG_BIN_DIR to its bin directory" >&2
    return 1
  fi
  export SLUICE_PG_BIN_DIR="$bin"
}
