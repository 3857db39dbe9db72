#!/usr/bin/env bash
# Builds llama-cpp-python (the benchmark-only peer of `specfill bench peers`) from its sdist
# into the project's venv. Idempotent: does nothing when the pinned version imports already.
#
# No Linux x86_64 wheel of it exists on the package registry, so pip compiles the vendored
# llama.cpp: about 9 minutes on 2 cores, at the lowest CPU priority so editors and other
# work stay responsive. Needs a C/C++ compiler and cmake (apt: build-essential cmake).
#
#   scripts/install-llama-cpp.sh            # into .venv
#   VENV=/path/to/venv scripts/install-llama-cpp.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
VERSION="0.3.36"

log() { printf '\033[36m[llama-cpp]\033[0m %s\n' "$*"; }

[ -x "$PY" ] || { echo "error: no Python at $PY; run 'make setup' first (or set VENV)" >&2; exit 1; }
for tool in cc c++ cmake; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "error: '$tool' is required to build llama.cpp (apt-get install build-essential cmake)" >&2; exit 1; }
done

if "$PY" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$VERSION')" 2>/dev/null; then
  log "llama-cpp-python $VERSION already installed in $VENV"
  exit 0
fi

# LLAMA_CURL=OFF: no libcurl needed (models come from local files). The web UI is otherwise
# fetched from the network at build time. Tests, examples, tools and the server are not
# needed by the Python bindings and would double the build time. No AMX: this llama.cpp's
# AMX matmul crashes (SIGSEGV) where -march=native has it (scripts/build-llama-server.sh);
# ggml builds it only under __AMX_INT8__, and one flag without spaces survives CMAKE_ARGS' splitting.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
-DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

log "building llama-cpp-python $VERSION from source (about 9 min on 2 cores; CMAKE_ARGS=$CMAKE_ARGS)"
start=$(date +%s)
nice -n 19 "$PY" -m pip install --no-binary llama-cpp-python -c "$ROOT/constraints.txt" \
  "llama-cpp-python==$VERSION"
log "built in $(( $(date +%s) - start )) s"
"$PY" -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__)"
