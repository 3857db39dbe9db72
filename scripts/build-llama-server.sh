#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` and `llama-bench` from the llama.cpp vendored in the
# llama-cpp-python sdist (the same sources `bench peers` uses), and caches them OUTSIDE git:
#
#   ${SPECFILL_CACHE:-~/.cache/specfill}/llama-server/<version>/bin/{llama-server,llama-bench}
#
# The remote-backend tests (tests/remote) start this server on 127.0.0.1; `bench peers` can use
# llama-bench. Idempotent: when the cached binary exists and `--version` runs, it does nothing.
#
# LLAMA_ISA=avx2 builds llama-bench alone for AVX2 + FMA + F16C with no AVX-512, into
# <version>-avx2/bin, so that an AVX-512 machine can compare specfill's AVX2 kernels
# (SPECFILL_KERNEL=avx2) against llama.cpp at the same ISA level (`make llama-bench-avx2`).
# About 8 minutes on 2 cores the first time, at the lowest CPU priority. Needs cc, c++, cmake and
# OpenSSL's headers (apt: build-essential cmake libssl-dev; scripts/install-system-deps.sh cmake)
# and pip (only to download the sdist from the package registry).
#
#   scripts/build-llama-server.sh              # uses .venv/bin/python for pip, else python3
#   PY=/usr/bin/python3 scripts/build-llama-server.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="0.3.36"
CACHE="${SPECFILL_CACHE:-$HOME/.cache/specfill}"
ISA="${LLAMA_ISA:-native}"
case "$ISA" in
  # No AMX: this llama.cpp's AMX matmul (built wherever -march=native has amx-int8, as on
  # Intel Sapphire Rapids) crashed llama-bench and llama-server with SIGSEGV in
  # ggml_backend_amx_mul_mat on their first batch. GCC's explicit -mno-* wins over
  # -march=native whatever their order.
  native) DEST="$CACHE/llama-server/$VERSION"; TARGETS="llama-server llama-bench"
          NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
          ISA_FLAGS="-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" ;;
  avx2)   DEST="$CACHE/llama-server/$VERSION-avx2"; TARGETS="llama-bench"
          ISA_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
                     -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF
                     -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF" ;;
  *) echo "error: LLAMA_ISA must be native or avx2, not '$ISA'" >&2; exit 1 ;;
esac
BIN="$DEST/bin"
PY="${PY:-}"
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi

log() { printf '\033[36m[llama-server]\033[0m %s\n' "$*"; }

NO_AMX="${NO_AMX:-}"
# What the build was made with: a cached build made otherwise (an older script's, with AMX)
# is built again.
STAMP="$ISA_FLAGS $NO_AMX"
# A server built where OpenSSL's headers were missing has no HTTPS (llama.cpp only warns), and
# the remote tests start it with TLS: such a cached build is made again.
# grep reads all of ldd's output (no -q): with pipefail, ldd killed by SIGPIPE after an early
# match would fail the check at random and rebuild a good server.
has_https() { ldd "$BIN/llama-server" 2>/dev/null | grep 'libssl\.so' >/dev/null; }
works() {
  [ "$(cat "$DEST/build-flags" 2>/dev/null)" = "$STAMP" ] || return 1
  if [ "$ISA" = native ]; then LD_LIBRARY_PATH="$BIN" "$BIN/llama-server" --version >/dev/null 2>&1 && has_https
  else LD_LIBRARY_PATH="$BIN" "$BIN/llama-bench" --help >/dev/null 2>&1; fi
}

if [ -x "$BIN/llama-bench" ] && works; then
  log "already built ($ISA): $BIN"
  exit 0
fi

for tool in cc c++ cmake; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "error: '$tool' is required to build llama.cpp (apt-get install build-essential cmake)" >&2; exit 1; }
done

mkdir -p "$CACHE/llama-server"
WORK="$(mktemp -d "$CACHE/llama-server/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

log "downloading the llama-cpp-python $VERSION sdist"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip download -q --no-deps --no-binary=:all: \
  -d "$WORK" "llama-cpp-python==$VERSION"
tar -xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -f "$SRC/CMakeLists.txt" ] || { echo "error: no vendor/llama.cpp in the sdist" >&2; exit 1; }

# LLAMA_CURL=OFF: models come from local files. The web UI would otherwise be fetched from the
# network at build time. GGML_NATIVE: the binary is for this machine only (it lives in its cache).
# Static libraries, so the cached binaries run from anywhere without LD_LIBRARY_PATH.
JOBS="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
log "building $TARGETS for $ISA (about 8 min on 2 cores, -j$JOBS, nice 19)"
start=$(date +%s)
nice -n 19 cmake -S "$SRC" -B "$WORK/build" -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $ISA_FLAGS \
  -DCMAKE_C_FLAGS="$NO_AMX" -DCMAKE_CXX_FLAGS="$NO_AMX" \
  -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log" 2>&1 || { tail -40 "$WORK/cmake.log" >&2; exit 1; }
# llama.cpp goes on without HTTPS when OpenSSL is missing; fail here, not at the first TLS start.
grep -q "OpenSSL found" "$WORK/cmake.log" || {
  grep -i -A2 openssl "$WORK/cmake.log" >&2
  echo "error: cmake found no usable OpenSSL, so llama-server would have no HTTPS (apt-get install libssl-dev)" >&2; exit 1; }
nice -n 19 cmake --build "$WORK/build" -j"$JOBS" --target $TARGETS \
  >"$WORK/build.log" 2>&1 || { tail -60 "$WORK/build.log" >&2; exit 1; }

# Copy executables and the shared libraries they load (run with LD_LIBRARY_PATH=bin), then swap
# the directory in whole so a half-copied cache is never mistaken for a build.
STAGE="$DEST.new"
rm -rf "$STAGE" && mkdir -p "$STAGE/bin"
for t in $TARGETS; do cp -a "$WORK/build/bin/$t" "$STAGE/bin/"; done
printf '%s' "$STAMP" > "$STAGE/build-flags"
find "$WORK/build/bin" -maxdepth 1 -name '*.so*' -exec cp -a {} "$STAGE/bin/" \;
rm -rf "$DEST" && mv "$STAGE" "$DEST"
log "built in $(( $(date +%s) - start )) s"
works || { echo "error: the $ISA build in $BIN does not run" >&2; exit 1; }
[ "$ISA" = native ] && { LD_LIBRARY_PATH="$BIN" "$BIN/llama-server" --version 2>&1 | head -2
                         log "llama-server: $BIN/llama-server"; }
log "llama-bench:  $BIN/llama-bench  (run with LD_LIBRARY_PATH=$BIN)"
