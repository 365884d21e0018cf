#!/usr/bin/env bash
# Builds and runs the CUDA backend's tests on a GPU machine that has the CUDA toolkit and a C
# compiler but none of gmlx's other build dependencies (the device tool's machines): the backend's
# .cu files and the few CPU modules its test compares against, compiled directly, then
# tests/unit/test_cuda, then bench/cuda/matvec-bench for each type it is given. CMake builds the
# same test where the whole project builds (ctest -R test_cuda; skipped without a device).
#   bench/cuda/device-check.sh [ARCH [TYPE...]]   (ARCH: nvcc's -arch, default sm_90 for the
#                                                  H100/H200; TYPEs for the bench, default q4_k;
#                                                  e.g. q2_k q3_k q5_k iq4_xs mxfp4)
set -euo pipefail
cd "$(dirname "$0")/../.."
ARCH=${1:-sm_90}
shift || true
TYPES=("${@:-q4_k}")
B=$(mktemp -d)
trap 'rm -rf "$B"' EXIT
for f in src/backend/cuda/*.cu; do  # in parallel: a GPU machine has the cores
  fmad=; [ "$(basename "$f")" = dequant.cu ] && fmad=-fmad=false  # as src/backend/cuda/CMakeLists.txt
  nvcc -std=c++17 -O2 $fmad -arch="$ARCH" -I src -I include -c "$f" -o "$B/$(basename "$f" .cu).o" &
done
for j in $(jobs -p); do wait "$j" || exit 1; done
for f in src/base/err.c src/gguf/types.c src/kernels/dequant_ref.c src/kernels/quant_tables.c tests/unit/test_cuda.c; do
  cc -std=c11 -D_GNU_SOURCE -O2 -ffp-contract=off -Wall -Wextra -I src -I include -c "$f" -o "$B/$(basename "$f" .c).o"
done
nvcc -arch="$ARCH" -o "$B/test_cuda" "$B"/*.o
"$B/test_cuda"
rm "$B/test_cuda.o"
nvcc -std=c++17 -O2 -arch="$ARCH" -I src -I include -o "$B/matvec-bench" bench/cuda/matvec-bench.cu "$B"/*.o
for t in "${TYPES[@]}"; do "$B/matvec-bench" "$t"; done
