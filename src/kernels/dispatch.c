/* Kernel levels and the per-level dot tables (see kernels.h).
 *
 * The tables are built once (pthread_once) from the CPU features: a level starts as a copy of
 * the level below it and overrides the types its file implements, so every level covers every
 * type the scalar reference covers (avx512vbmi starts from avx512, the level below it in
 * features though not in number). GMLX_KERNELS is read once, at the first gm_kernels_init. */
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sysinfo.h"
#include "gguf/types.h"
#include "gmlx.h"
#include "kernels/attn_impl.h"
#include "kernels/dot_impl.h"

struct gm_kernels {
    gm_kernel_level level;
    bool available;
    gm_dot_fn dot[GM_TYPE_COUNT];
    uint8_t dot_level[GM_TYPE_COUNT]; /* gm_kernel_level of dot[type] */
    gm_dot_multi_fn multi[GM_TYPE_COUNT]; /* several tokens per row of dot[type]'s code, or NULL */
    gm_dot_rows2_fn rows2[GM_TYPE_COUNT]; /* two rows per call of dot[type]'s code, or NULL */
    gm_attn_fn attn;                       /* attention, head_dim a multiple of 16 */
};

static const char *const k_level_names[GM_KERNEL_LEVEL_COUNT] = {"scalar", "avx2", "avx512",
                                                                 "neon", "avx512vbmi", "neondot"};

static gm_kernels g_tables[GM_KERNEL_LEVEL_COUNT];
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

#define AVX2_FEATURES (GM_CPU_AVX2 | GM_CPU_FMA | GM_CPU_F16C)
#define AVX512_FEATURES (GM_CPU_AVX512F | GM_CPU_AVX512BW | GM_CPU_AVX512VL | GM_CPU_AVX512VNNI)

uint32_t gm_kernels_cpu_features(void)
{
    uint32_t f = gm_cpu_features();
#if defined(GM_KERNELS_HAVE_AVX512VBMI) && (defined(__GNUC__) || defined(__clang__))
    /* the compiler's CPU model checks the CPUID bits and, for AVX-512, that the OS saves the
     * registers */
    __builtin_cpu_init();
    if ((f & AVX512_FEATURES) == AVX512_FEATURES && __builtin_cpu_supports("avx512vbmi") &&
        __builtin_cpu_supports("avx512bitalg"))
        f |= GM_KERNELS_CPU_AVX512VBMI_BITALG;
#endif
    return f;
}

const char *gm_kernel_level_name(gm_kernel_level level)
{
    return (unsigned)level < GM_KERNEL_LEVEL_COUNT ? k_level_names[level] : "unknown";
}

bool gm_kernel_level_available(gm_kernel_level level, uint32_t f)
{
    switch (level) {
    case GM_KERNEL_SCALAR:
        return true;
    case GM_KERNEL_AVX2:
#if defined(GM_KERNELS_HAVE_AVX2)
        return (f & AVX2_FEATURES) == AVX2_FEATURES;
#else
        return false;
#endif
    case GM_KERNEL_AVX512:
#if defined(GM_KERNELS_HAVE_AVX2) && defined(GM_KERNELS_HAVE_AVX512)
        return (f & AVX2_FEATURES) == AVX2_FEATURES && (f & AVX512_FEATURES) == AVX512_FEATURES;
#else
        return false;
#endif
    case GM_KERNEL_AVX512VBMI:
#if defined(GM_KERNELS_HAVE_AVX2) && defined(GM_KERNELS_HAVE_AVX512) &&                            \
    defined(GM_KERNELS_HAVE_AVX512VBMI)
        return (f & AVX2_FEATURES) == AVX2_FEATURES && (f & AVX512_FEATURES) == AVX512_FEATURES &&
               (f & GM_KERNELS_CPU_AVX512VBMI_BITALG) != 0;
#else
        return false;
#endif
    case GM_KERNEL_NEON:
#if defined(GM_KERNELS_HAVE_NEON)
        return (f & GM_CPU_NEON) != 0;
#else
        return false;
#endif
    case GM_KERNEL_NEONDOT:
#if defined(GM_KERNELS_HAVE_NEON)
        return (f & GM_CPU_NEON) != 0 && (f & GM_CPU_DOTPROD) != 0;
#else
        return false;
#endif
    default:
        return false;
    }
}

gm_kernel_level gm_kernel_level_best(uint32_t f)
{
    for (int l = GM_KERNEL_LEVEL_COUNT - 1; l > GM_KERNEL_SCALAR; l--)
        if (gm_kernel_level_available((gm_kernel_level)l, f))
            return (gm_kernel_level)l;
    return GM_KERNEL_SCALAR;
}

int gm_kernel_level_parse(const char *value, uint32_t f, gm_kernel_level *out, gm_err *err)
{
    if (!value || !*value || strcmp(value, "auto") == 0) {
        *out = gm_kernel_level_best(f);
        return 0;
    }
    for (int l = 0; l < GM_KERNEL_LEVEL_COUNT; l++) {
        if (strcmp(value, k_level_names[l]) != 0)
            continue;
        if (!gm_kernel_level_available((gm_kernel_level)l, f))
            return gm_err_set(err, GM_EUNSUPPORTED,
                              "GMLX_KERNELS=%s: this build or CPU cannot run the %s kernels", value,
                              value);
        *out = (gm_kernel_level)l;
        return 0;
    }
    return gm_err_set(err, GM_EINVAL,
                      "GMLX_KERNELS=%s: unknown kernel level (want scalar, avx2, avx512, "
                      "avx512vbmi, neon, neondot or auto)",
                      value);
}

static void fill_level(gm_kernels *t, const gm_kernels *below, gm_kernel_level level,
                       void (*fill)(gm_dot_fn table[GM_TYPE_COUNT]))
{
    *t = *below;
    t->level = level;
    t->available = true;
    gm_dot_fn before[GM_TYPE_COUNT];
    memcpy(before, t->dot, sizeof before);
    fill(t->dot);
    for (int i = 0; i < GM_TYPE_COUNT; i++)
        if (t->dot[i] != before[i]) {
            t->dot_level[i] = (uint8_t)level;
            t->multi[i] = NULL; /* written for the kernel this level replaced */
            t->rows2[i] = NULL;
        }
}

static void build_tables(void)
{
    const uint32_t f = gm_kernels_cpu_features();
    gm_kernels *s = &g_tables[GM_KERNEL_SCALAR];
    s->level = GM_KERNEL_SCALAR;
    s->available = true;
    s->attn = gm_attn_ref;
    for (uint32_t i = 0; i < GM_TYPE_COUNT; i++) {
        s->dot[i] = gm_dot_ref_fn(i);
        s->dot_level[i] = GM_KERNEL_SCALAR;
    }
#if defined(GM_KERNELS_HAVE_AVX2)
    if (gm_kernel_level_available(GM_KERNEL_AVX2, f))
    {
        fill_level(&g_tables[GM_KERNEL_AVX2], s, GM_KERNEL_AVX2, gm_dot_fill_avx2);
        g_tables[GM_KERNEL_AVX2].attn = gm_attn_avx2;
    }
#endif
#if defined(GM_KERNELS_HAVE_AVX2) && defined(GM_KERNELS_HAVE_AVX512)
    if (gm_kernel_level_available(GM_KERNEL_AVX512, f)) {
        fill_level(&g_tables[GM_KERNEL_AVX512], &g_tables[GM_KERNEL_AVX2], GM_KERNEL_AVX512,
                   gm_dot_fill_avx512);
        gm_dot_multi_fill_avx512(g_tables[GM_KERNEL_AVX512].multi);
        gm_dot_rows2_fill_avx512(g_tables[GM_KERNEL_AVX512].rows2);
        g_tables[GM_KERNEL_AVX512].attn = gm_attn_avx512;
    }
#endif
#if defined(GM_KERNELS_HAVE_AVX2) && defined(GM_KERNELS_HAVE_AVX512) &&                            \
    defined(GM_KERNELS_HAVE_AVX512VBMI)
    if (gm_kernel_level_available(GM_KERNEL_AVX512VBMI, f)) {
        fill_level(&g_tables[GM_KERNEL_AVX512VBMI], &g_tables[GM_KERNEL_AVX512],
                   GM_KERNEL_AVX512VBMI, gm_dot_fill_avx512vbmi);
        gm_dot_multi_fill_avx512vbmi(g_tables[GM_KERNEL_AVX512VBMI].multi);
        gm_dot_rows2_fill_avx512vbmi(g_tables[GM_KERNEL_AVX512VBMI].rows2);
    }
#endif
#if defined(GM_KERNELS_HAVE_NEON)
    if (gm_kernel_level_available(GM_KERNEL_NEON, f)) {
        fill_level(&g_tables[GM_KERNEL_NEON], s, GM_KERNEL_NEON, gm_dot_fill_neon);
        gm_dot_multi_fill_neon(g_tables[GM_KERNEL_NEON].multi);
        g_tables[GM_KERNEL_NEON].attn = gm_attn_neon;
    }
    if (gm_kernel_level_available(GM_KERNEL_NEONDOT, f)) {
        fill_level(&g_tables[GM_KERNEL_NEONDOT], &g_tables[GM_KERNEL_NEON], GM_KERNEL_NEONDOT,
                   gm_dot_fill_neondot);
        gm_dot_multi_fill_neondot(g_tables[GM_KERNEL_NEONDOT].multi);
    }
#endif
    (void)f;
}

const gm_kernels *gm_kernels_for_level(gm_kernel_level level)
{
    if ((unsigned)level >= GM_KERNEL_LEVEL_COUNT)
        return NULL;
    pthread_once(&g_tables_once, build_tables);
    return g_tables[level].available ? &g_tables[level] : NULL;
}

int gm_kernels_init(const char *level, const gm_kernels **out, gm_err *err)
{
    if (out)
        *out = NULL;
    gm_kernel_level lv = GM_KERNEL_SCALAR;
    int rc = gm_kernel_level_parse(level, gm_kernels_cpu_features(), &lv, err);
    if (rc)
        return rc;
    const gm_kernels *k = gm_kernels_for_level(lv);
    if (!k) /* cannot happen: the parse checked the level's availability */
        return gm_err_set(err, GM_EUNSUPPORTED, "kernel level %s is not available", gm_kernel_level_name(lv));
    if (out)
        *out = k;
    return 0;
}

gm_kernel_level gm_kernels_level(const gm_kernels *k)
{
    return k->level;
}

gm_dot_fn gm_kernels_dot(const gm_kernels *k, uint32_t wtype)
{
    return wtype < GM_TYPE_COUNT ? k->dot[wtype] : NULL;
}

gm_dot_multi_fn gm_kernels_dot_multi(const gm_kernels *k, uint32_t wtype)
{
    return wtype < GM_TYPE_COUNT ? k->multi[wtype] : NULL;
}

gm_dot_rows2_fn gm_kernels_dot_rows2(const gm_kernels *k, uint32_t wtype)
{
    return wtype < GM_TYPE_COUNT ? k->rows2[wtype] : NULL;
}

gm_attn_fn gm_kernels_attn(const gm_kernels *k, uint32_t head_dim)
{
    return head_dim % 16 == 0 ? k->attn : gm_attn_ref;
}

gm_kernel_level gm_kernels_dot_level(const gm_kernels *k, uint32_t wtype)
{
    return wtype < GM_TYPE_COUNT ? (gm_kernel_level)k->dot_level[wtype] : GM_KERNEL_SCALAR;
}
