/* AVX-512 dot products of IQ1_S and IQ1_M (see dot_impl.h: gm_dot_fill_avx512_iq1). */
#include <stdbool.h>

#include "kernels/avx512_util.h"
#include "kernels/dot_impl.h"
#include "kernels/quant_tables.h"

void gm_dot_fill_avx512_iq1(gm_dot_fn t[GM_TYPE_COUNT], bool vbmi)
{
    (void)t;
    (void)vbmi;
}
