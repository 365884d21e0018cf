#!/bin/sh
# Builds the kernels for 64-bit ARM with Debian's cross compiler and runs their tests under
# qemu-user, so the NEON kernels are compiled and checked against the scalar reference on an x86
# machine (on an ARM machine the normal build and `make test` do this natively).
# Usage: scripts/neon-check.sh [--install]
#   --install  first install what is missing (as root or through sudo): gcc-aarch64-linux-gnu,
#              qemu-user, and the arm64 -dev packages of jansson, pcre2, libedit, libyaml, libcurl, libssl and cmocka (adds the
#              arm64 architecture to dpkg); exit status 3 when that fails
# Exit status: 0 all passed, 1 a build or test failed, 2 bad usage or tools missing.
# Build directory: build/aarch64 (cmake/toolchain-aarch64.cmake). The tests run with
# GMLX_TEST_THREADS=1: thread creation under qemu-user hangs in some sandboxes, and the thread
# pool is tested by the native build.
set -eu
cd "$(dirname "$0")/.."

install=0
case "${1:-}" in
  --install) install=1 ;;
  "") ;;
  -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
  *) echo "neon-check.sh: unknown option '$1' (use --install or nothing)" >&2; exit 2 ;;
esac

pkgs="gcc-aarch64-linux-gnu qemu-user libjansson-dev:arm64 libpcre2-dev:arm64 libcmocka-dev:arm64 libedit-dev:arm64 libyaml-dev:arm64 libcurl4-openssl-dev:arm64 libssl-dev:arm64 libmicrohttpd-dev:arm64"
missing=""
for p in $pkgs; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ] && [ "$install" -eq 1 ]; then
  echo "neon-check: installing:$missing"
  as_root=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "neon-check: not root and no sudo: cannot install:$missing" >&2
      exit 3
    fi
    as_root="sudo -n env DEBIAN_FRONTEND=noninteractive"
  fi
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  if ! { $as_root dpkg --add-architecture arm64 && $as_root apt-get update -q >/dev/null &&
         $as_root apt-get install -y -q $missing >/dev/null; }; then
    echo "neon-check: could not install:$missing" >&2
    exit 3
  fi
fi

for tool in aarch64-linux-gnu-gcc qemu-aarch64; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "neon-check: $tool not found; run scripts/neon-check.sh --install" >&2
    exit 2
  fi
done

# From here on every failure is exit status 1 (3 means only "could not install", which CI
# reports as a skip: a test program's own status, its count of failed cases, must not be
# mistaken for it).
if ! cmake -S . -B build/aarch64 --toolchain cmake/toolchain-aarch64.cmake \
       -DCMAKE_BUILD_TYPE=Release -DGMLX_WERROR=ON -DGMLX_CUDA=OFF >/dev/null; then
  echo "neon-check: configuring the aarch64 build failed" >&2
  exit 1
fi
tests="test_kernels_dequant test_kernels_dot test_kernels_simd test_kernels_matmul test_kernels_attn"
# shellcheck disable=SC2086
if ! cmake --build build/aarch64 -j "$(nproc)" --target $tests; then
  echo "neon-check: the aarch64 build failed" >&2
  exit 1
fi
export GMLX_TEST_THREADS=1
for t in $tests; do
  echo "neon-check: $t (qemu-aarch64)"
  # KILL: qemu-user does not always act on TERM
  if ! timeout -s KILL 900 qemu-aarch64 -L /usr/aarch64-linux-gnu "build/aarch64/tests/unit/$t"; then
    echo "neon-check: $t failed under qemu-aarch64" >&2
    exit 1
  fi
done
echo "neon-check: all passed"
