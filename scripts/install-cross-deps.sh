#!/usr/bin/env bash
# Installs what the native kernels' ARM test needs (tests/kernels: the C self-test built for
# aarch64 and run under qemu-user): a cross compiler, its C library and qemu. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=apt-packages.sh
source "$ROOT/scripts/apt-packages.sh"
install_apt_packages cross-deps gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
