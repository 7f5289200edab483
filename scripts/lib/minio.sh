# Sourced, not run: `ensure_minio` installs the MinIO server that object-storage tests run
# against (crates/testkit starts it on free 127.0.0.1 ports) and exports SLUICE_MINIO_BIN.
#
# MinIO's release tags are not Go module versions, so the pin is a pseudo-version (a commit):
# every machine builds the same server. The build takes about 6-10 minutes on 2 cores, so the
# binary is cached in ${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools} and reused while
# `minio --version` works there.
#
#   SLUICE_TOOLS_DIR   where the binary is cached (default ~/.cache/sluice/tools)
#   SLUICE_MINIO_BIN   set by ensure_minio to the cached binary

SLUICE_MINIO_MODULE="github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"

ensure_minio() {
  local tools="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}"
  local bin="$tools/minio"
  if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
    export SLUICE_MINIO_BIN="$bin"
    return 0
  fi
  if ! command -v go >/dev/null 2>&1; then
    echo "error: MinIO is needed by the object-storage tests and is built with Go, but 'go'" \
      "is not on PATH. Install Go (https://go.dev/dl/) and re-run, or put a MinIO server" \
      "binary at $bin." >&2
    return 1
  fi
  echo "==> installing MinIO ($SLUICE_MINIO_MODULE) into $tools (takes several minutes, once)"
  mkdir -p "$tools"
  if ! GOBIN="$tools" go install "$SLUICE_MINIO_MODULE"; then
    echo "error: 'go install $SLUICE_MINIO_MODULE' failed (see above)" >&2
    return 1
  fi
  if ! "$bin" --version >/dev/null 2>&1; then
    echo "error: $bin was built but '$bin --version' fails" >&2
    return 1
  fi
  export SLUICE_MINIO_BIN="$bin"
}
