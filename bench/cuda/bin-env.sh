# Sourced by the scripts of bench/cuda (set BIN and LIB first): how they start one of BIN_DIR's
# programs on a GPU machine. With a LIB_DIR (the libraries the programs were linked against and
# that system's loader, ld-linux-x86-64.so.2, for a machine that lacks gmlx's build dependencies)
# they run through that loader, the CUDA driver's libcuda taken from the machine; without one,
# directly.
#   x PROGRAM ARGS...        runs BIN/PROGRAM
#   gm_wrapper PROGRAM FILE  writes FILE, a script that starts BIN/PROGRAM as x does (for a tool
#                            that takes a program's path)
gm_sys_libs=$(ldconfig -p 2>/dev/null | awk '/libcuda.so.1/ {print $NF}' | xargs -r -n1 dirname | sort -u | paste -sd:)
gm_loader=()
[ -n "$LIB" ] && gm_loader=("$LIB/ld-linux-x86-64.so.2" --library-path "$LIB:${gm_sys_libs:-/usr/lib/x86_64-linux-gnu}")
x() { "${gm_loader[@]}" "$BIN/$1" "${@:2}"; }
gm_wrapper() {
  { printf '#!/bin/bash\nexec'; printf ' %q' "${gm_loader[@]}" "$BIN/$1"; printf ' "$@"\n'; } >"$2" && chmod +x "$2"
}
