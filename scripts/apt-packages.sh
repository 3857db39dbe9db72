#!/usr/bin/env bash
# Sourced by the install scripts: apt packages installed once, checked first.
#   install_apt_packages LOG_PREFIX PACKAGE...

apt_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

install_apt_packages() {
  local prefix="$1" missing=()
  shift
  for package in "$@"; do
    apt_installed "$package" || missing+=("$package")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    printf '\033[36m[%s]\033[0m apt packages present (%s)\n' "$prefix" "$*"
    return
  fi
  printf '\033[36m[%s]\033[0m apt-get install %s\n' "$prefix" "${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
