#!/usr/bin/env bash
# Builds llama.cpp's llama-bench (CPU) for side-by-side benchmarks (bench/llamacpp/side-by-side.sh),
# and with --server its llama-server too (bench/serve/serve-bench.sh).
# llama.cpp is not packaged in Debian 12; its source comes from the npm registry, as the git
# bundle that the node-llama-cpp package carries (a pinned version, so figures name one build).
# Nothing of it enters gmlx's build or tests.
#
# Usage: bench/llamacpp/build-llamacpp.sh [DIR] [--version V] [--no-repack] [--no-amx] [--server]
#                                         [--cuda [ARCH]] [--pack FILE] [--from FILE]
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
#   --cuda       build the CUDA backend too, for compute capability ARCH (default 90: H100, H200),
#                one static llama-bench (in DIR/build-cuda), with the flags of the figures in
#                docs/cuda.md: -DGGML_CUDA=ON -DGGML_CUDA_FA_ALL_QUANTS=OFF; needs nvcc
#   --pack FILE  write the source, less what a CPU or CUDA build does not read, to FILE (.tar.xz,
#                about 5 MB) and stop: for a machine that cannot reach npm (a GPU machine)
#   --from FILE  take the source from such a FILE instead of npm
# Prints the path of llama-bench on success. Needs npm, git, cmake and a C++ compiler.
set -euo pipefail
dir=/var/tmp/gmlx-llamacpp version=3.22.1 build=build repack=ON cpu=(-DGGML_NATIVE=ON) server=OFF
targets=(llama-bench)
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    --version) version=${2:?--version needs a value}; shift 2 ;;
    --no-repack) build=build-norepack repack=OFF; shift ;;
    --no-amx) noamx=1; shift ;;
    --server) server=ON targets+=(llama-server); shift ;;
    --cuda) cuda=90; shift; case "${1:-}" in [0-9]*) cuda=$1; shift ;; esac ;;
    --pack) pack=${2:?--pack needs a file}; shift 2 ;;
    --from) from=$(realpath "${2:?--from needs a file}"); shift 2 ;;
    -*) echo "build-llamacpp.sh: unknown option $1" >&2; exit 2 ;;
    *) dir=$1; shift ;;
  esac
done
need=(git cmake c++); [ -z "${from:-}" ] && need+=(npm)
for tool in "${need[@]}"; do
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
if [ -n "${from:-}" ] && [ ! -f src/CMakeLists.txt ]; then
  mkdir -p src && tar xJf "$from" -C src
elif [ ! -f src/CMakeLists.txt ]; then
  rm -rf pkg src && mkdir pkg
  echo "build-llamacpp.sh: fetching node-llama-cpp@$version from npm" >&2
  (cd pkg && npm pack --silent "node-llama-cpp@$version" >/dev/null && tar xzf ./*.tgz)
  bundle=pkg/package/llama/gitRelease.bundle
  [ -f "$bundle" ] || { echo "build-llamacpp.sh: node-llama-cpp@$version has no llama.cpp bundle" >&2; exit 1; }
  git -c advice.detachedHead=false clone -q "$bundle" src
  rm -rf pkg
fi
if [ -n "${pack:-}" ]; then
  ex=()
  for d in src/ggml/src/ggml-*/; do
    case $d in */ggml-cpu/|*/ggml-cuda/) ;; *) ex+=("--exclude=./${d#src/}") ;; esac
  done
  out=$(cd "$OLDPWD" && realpath -m "$pack")
  tar -C src --exclude=.git --exclude=./models --exclude=./docs --exclude=./media --exclude=./tools/ui \
      --exclude=./tools/server --exclude=./pocs --exclude=./examples --exclude=./gguf-py "${ex[@]}" -cf - . | xz -T0 >"$out"
  echo "$out"
  exit 0
fi
extra=()
if [ -n "${cuda:-}" ]; then
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "build-llamacpp.sh: --cuda needs nvcc" >&2; exit 1; }
  build=build-cuda
  extra=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cuda" -DGGML_CUDA_FA_ALL_QUANTS=OFF -DBUILD_SHARED_LIBS=OFF
         -DLLAMA_BUILD_EXAMPLES=OFF)
  command -v nvcc >/dev/null || extra+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
echo "build-llamacpp.sh: building ${targets[*]} in $dir/$build (a few minutes)" >&2
cmake -S src -B "$build" -DCMAKE_BUILD_TYPE=Release "${cpu[@]}" -DGGML_CPU_REPACK=$repack -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server "${extra[@]}" >build.log 2>&1 ||
  { tail -20 build.log >&2; exit 1; }
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >>build.log 2>&1 || { tail -20 build.log >&2; exit 1; }
echo "$dir/$build/bin/llama-bench"
[ "$server" = OFF ] || echo "$dir/$build/bin/llama-server"
