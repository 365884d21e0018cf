#!/usr/bin/env bash
# Builds llama.cpp's llama-bench (CPU) for side-by-side benchmarks (bench/llamacpp/side-by-side.sh),
# and with --server its llama-server too (bench/serve/serve-bench.sh).
# llama.cpp is not packaged in Debian 12; its source comes from the npm registry, as the git
# bundle that the node-llama-cpp package carries (a pinned version, so figures name one build).
# Nothing of it enters gmlx's build or tests.
#
# Usage: bench/llamacpp/build-llamacpp.sh [DIR] [--version V] [--no-repack] [--no-amx] [--server]
#   DIR          where to put the source and build (default /var/tmp/gmlx-llamacpp)
#   --version    node-llama-cpp version whose bundled llama.cpp to build (default 3.22.1)
#   --no-repack  build without runtime weight repacking (in DIR/build-norepack): llama-bench has
#                no switch for it, and repacking copies Q4_0/Q4_K/IQ4_NL/Q8_0 weights, experts
#                included, into anonymous memory, which a file larger than RAM cannot fit in
#                (llama-cli's --no-repack makes the same choice)
#   --no-amx     build for this CPU's AVX-512 levels without the AMX kernels (in DIR/build...-noamx):
#                a virtual machine can list amx_tile in /proc/cpuinfo and still refuse the
#                instructions (llama-bench then dies of SIGILL in tinygemm_kernel_amx on a
#                batch of more than a few tokens, as on the 2-core development VM)
#   --server     also build llama-server (its path is printed on a second line)
# Prints the path of llama-bench on success. Needs npm, git, cmake and a C++ compiler.
set -euo pipefail
dir=/var/tmp/gmlx-llamacpp version=3.22.1 build=build repack=ON cpu=(-DGGML_NATIVE=ON) server=OFF
targets=(llama-bench)
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    --version) version=${2:?--version needs a value}; shift 2 ;;
    --no-repack) build=build-norepack repack=OFF; shift ;;
    --no-amx) noamx=1; shift ;;
    --server) server=ON targets+=(llama-server); shift ;;
    -*) echo "build-llamacpp.sh: unknown option $1" >&2; exit 2 ;;
    *) dir=$1; shift ;;
  esac
done
for tool in npm git cmake c++; do
  command -v "$tool" >/dev/null || { echo "build-llamacpp.sh: $tool not found (apt-get install npm git cmake g++)" >&2; exit 1; }
done
if [ "${noamx:-0}" = 1 ]; then
  build=$build-noamx
  cpu=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  grep -qw avx512f /proc/cpuinfo && cpu+=(-DGGML_AVX512=ON)
  grep -qw avx512vbmi /proc/cpuinfo && cpu+=(-DGGML_AVX512_VBMI=ON)
  grep -qw avx512_vnni /proc/cpuinfo && cpu+=(-DGGML_AVX512_VNNI=ON)
  grep -qw avx512_bf16 /proc/cpuinfo && cpu+=(-DGGML_AVX512_BF16=ON)
fi
mkdir -p "$dir"
cd "$dir"
if [ ! -d src/.git ]; then
  rm -rf pkg src && mkdir pkg
  echo "build-llamacpp.sh: fetching node-llama-cpp@$version from npm" >&2
  (cd pkg && npm pack --silent "node-llama-cpp@$version" >/dev/null && tar xzf ./*.tgz)
  bundle=pkg/package/llama/gitRelease.bundle
  [ -f "$bundle" ] || { echo "build-llamacpp.sh: node-llama-cpp@$version has no llama.cpp bundle" >&2; exit 1; }
  git -c advice.detachedHead=false clone -q "$bundle" src
  rm -rf pkg
fi
echo "build-llamacpp.sh: building ${targets[*]} in $dir/$build (a few minutes)" >&2
cmake -S src -B "$build" -DCMAKE_BUILD_TYPE=Release "${cpu[@]}" -DGGML_CPU_REPACK=$repack -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server >build.log 2>&1 ||
  { tail -20 build.log >&2; exit 1; }
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >>build.log 2>&1 || { tail -20 build.log >&2; exit 1; }
echo "$dir/$build/bin/llama-bench"
[ "$server" = OFF ] || echo "$dir/$build/bin/llama-server"
