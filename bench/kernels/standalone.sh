#!/bin/sh
# Builds gmlx-bench-kernels with only a C compiler (no CMake, no jansson/pcre2/cmocka): the
# kernel sources with the same per-file target flags as src/kernels/CMakeLists.txt, base, and
# the GGUF type table. For timing the kernels on a machine that lacks the project's build
# dependencies. x86-64 only (the aarch64 build goes through CMake, see scripts/neon-check.sh).
# Usage: bench/kernels/standalone.sh [OUTDIR]   (default build/standalone; CC overrides gcc)
# Then: OUTDIR/gmlx-bench-kernels --help
set -eu
case "${1:-}" in
  -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
esac
cd "$(dirname "$0")/../.."
out=${1:-build/standalone}
cc=${CC:-gcc}
case "$(uname -m)" in
  x86_64|amd64) ;;
  *) echo "standalone.sh: x86-64 only (this is $(uname -m)); use CMake" >&2; exit 2 ;;
esac
mkdir -p "$out/obj"
cf="-O2 -std=gnu11 -D_GNU_SOURCE -I src -I include"
kdefs="-DGM_KERNELS_HAVE_AVX2 -DGM_KERNELS_HAVE_AVX512 -DGM_KERNELS_HAVE_AVX512VBMI"
avx2="-mavx2 -mfma -mf16c"
avx512="$avx2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni"
objs=""
build() { # source, extra flags
  o="$out/obj/$(echo "$1" | tr / _ | sed 's/\.c$/.o/')"
  # shellcheck disable=SC2086
  $cc $cf $2 -c "$1" -o "$o"
  objs="$objs $o"
}
for f in quant_tables dequant_ref dot_ref dispatch matmul pool; do
  build "src/kernels/$f.c" "$kdefs -ffp-contract=off"
done
build src/kernels/dot_avx2.c "$kdefs -ffp-contract=off $avx2"
for f in dot_avx512 dot_avx512_iq2 dot_avx512_iq3s dot_avx512_iq1; do
  build "src/kernels/$f.c" "$kdefs -ffp-contract=off $avx512"
done
for f in src/base/err.c src/base/log.c src/base/sysinfo.c src/gguf/types.c bench/kernels/bench_matvec.c; do
  build "$f" ""
done
# shellcheck disable=SC2086
$cc -o "$out/gmlx-bench-kernels" $objs -lpthread -lm
echo "built $out/gmlx-bench-kernels"
