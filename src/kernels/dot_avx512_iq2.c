/* AVX-512 dot products of IQ2_XS and IQ2_S (see dot_impl.h: gm_dot_fill_avx512_iq2). */
#include <stdbool.h>

#include "kernels/avx512_util.h"
#include "kernels/dot_impl.h"
#include "kernels/quant_tables.h"

void gm_dot_fill_avx512_iq2(gm_dot_fn t[GM_TYPE_COUNT], bool vbmi)
{
    (void)t;
    (void)vbmi;
}
