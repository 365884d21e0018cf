#!/bin/sh
# Installs the Debian packages gmlx needs to build and test, by name, only when missing.
# Usage: scripts/setup.sh [--with-fuzz]   (--with-fuzz adds clang for the libFuzzer targets)
set -eu

pkgs="gcc g++ make cmake pkg-config libjansson-dev libcmocka-dev liburing-dev libpcre2-dev libedit-dev libyaml-dev libcurl4-openssl-dev libssl-dev libmicrohttpd-dev python3-jinja2 python3-yaml tmux curl"
# Node.js and npm for the server's tests (the official API clients come from npm); a machine
# that has a newer Node.js from elsewhere keeps it
command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs npm"
case "${1:-}" in
  --with-fuzz) pkgs="$pkgs clang libclang-rt-dev" ;;
  "") ;;
  -h|--help) sed -n '2,3p' "$0"; exit 0 ;;
  *) echo "setup.sh: unknown option '$1' (use --with-fuzz or nothing)" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -z "$missing" ]; then
  echo "setup: all build packages are installed"
  exit 0
fi

echo "setup: installing:$missing"
if [ "$(id -u)" -eq 0 ]; then
  as_root=""
elif command -v sudo >/dev/null 2>&1; then
  as_root="sudo env DEBIAN_FRONTEND=noninteractive"  # sudo resets the environment
else
  echo "setup: these packages are missing:$missing" >&2
  echo "setup: run this script as root (or install sudo) to install them" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$as_root apt-get update -qq
# shellcheck disable=SC2086
$as_root apt-get install -y -qq --no-install-recommends $missing
