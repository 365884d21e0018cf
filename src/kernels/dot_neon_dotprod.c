/* The neon kernels of dot_neon.c built for the neondot level: compiled with the dot-product
 * extension (src/kernels/CMakeLists.txt) and GM_NEON_DOTPROD, which makes dot_neon.c's product
 * helpers use vdotq_s32 and its fill function gm_dot_fill_neondot (dot_impl.h). */
#define GM_NEON_DOTPROD 1
#include "dot_neon.c"
