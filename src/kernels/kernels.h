/* kernels/kernels: the fast CPU kernels and how one is chosen, and matrix products built on them.
 *
 * Owns: the kernel levels (scalar reference, AVX2, AVX-512, AVX-512 with VBMI, NEON), the choice
 * of one level per process (CPU features detected once; GMLX_KERNELS=scalar|avx2|avx512|
 * avx512vbmi|neon|neondot|auto forces one for tests and benchmarks), the table that gives the best dot
 * product of that level per weight type (a level falls back to a lower level's kernel for types
 * it does not specialise), and the matrix x vector (decode) and matrix x matrix (prefill)
 * products split across a gm_pool.
 *
 * Activations: the caller prepares each activation row once with gm_act_quantize (Q8_0, Q8_K or
 * float32 rows, see dot.h: gm_dot_act_type; Q8_0 rows carry their block scales once more as
 * float32 after the blocks, then the codes of every group of 4 blocks once more, regrouped, with
 * sums of 4 codes: 43/16 = 2.6875 bytes per element, see dot_impl.h) into a buffer it owns, sized
 * by gm_act_row_bytes; one prepared row serves every matrix of the same activation type (e.g.
 * the gate and up projections of all experts of a layer, whatever their weight types). The dot
 * products of gm_kernels_dot take prepared rows; the reference dots of dot.h read only the blocks
 * at the start of one.
 *
 * Results: matmul computes every (row, token) pair with the same dot function as matvec (or its
 * multi-token form, equal to it bit for bit), so the batch result equals the per-token matvec
 * result bit for bit, whatever the thread count and split. Kernels of different levels agree with the scalar reference within per-type budgets
 * (tests/unit/test_kernels_simd.c); they are not bit-identical to it.
 *
 * Memory: nothing is allocated per call; the gm_kernels tables are static and immutable.
 * Threads: gm_kernels_* are callable from any thread. gm_matvec/gm_matmul run on the calling
 * thread plus the pool's workers; only the pool's owner thread may pass a pool.
 */
#ifndef GM_KERNELS_KERNELS_H
#define GM_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "kernels/attn.h"
#include "kernels/dot.h"
#include "kernels/pool.h"

typedef enum gm_kernel_level {
    GM_KERNEL_SCALAR = 0,     /* dot_ref.c: portable C, the reference */
    GM_KERNEL_AVX2 = 1,       /* x86-64 with AVX2, FMA, F16C */
    GM_KERNEL_AVX512 = 2,     /* x86-64 with AVX-512 F, BW, VL, VNNI (on top of AVX2) */
    GM_KERNEL_NEON = 3,       /* aarch64 Advanced SIMD */
    GM_KERNEL_AVX512VBMI = 4, /* avx512 plus VBMI and BITALG (Ice Lake, Zen 4 and later); above
                               * avx512 in features, after neon in number so no value moves */
    GM_KERNEL_NEONDOT = 5,    /* neon plus the dot-product extension (Armv8.2 dotprod: Neoverse,
                               * Cortex-A76 and later, Apple M1 and later) */
    GM_KERNEL_LEVEL_COUNT
} gm_kernel_level;

/* A CPU feature the kernels detect themselves, on top of base/sysinfo.h's gm_cpu_feature bits
 * (in a bit those leave free): AVX512-VBMI and AVX512-BITALG, both usable. */
#define GM_KERNELS_CPU_AVX512VBMI_BITALG (1u << 31)

/* gm_cpu_features() plus the bits above that this CPU has; what the level choice uses. */
uint32_t gm_kernels_cpu_features(void);

/* A level's table: immutable, static storage. */
typedef struct gm_kernels gm_kernels;

/* "scalar", "avx2", "avx512", "neon", "avx512vbmi", "neondot". */
const char *gm_kernel_level_name(gm_kernel_level level);

/* True when this build has the level's code and a CPU with cpu_features (gm_cpu_feature bits,
 * with the kernels' own bit above for avx512vbmi) can run it. The scalar level is always
 * available. */
bool gm_kernel_level_available(gm_kernel_level level, uint32_t cpu_features);

/* The best level available with cpu_features. */
gm_kernel_level gm_kernel_level_best(uint32_t cpu_features);

/* Chooses a level from a GMLX_KERNELS value: NULL, "" or "auto" give the best available; a
 * level name gives that level. GM_EINVAL for an unknown name, GM_EUNSUPPORTED for a level this
 * build or CPU cannot run (a forced level is never silently replaced by another). */
int gm_kernel_level_parse(const char *value, uint32_t cpu_features, gm_kernel_level *out,
                          gm_err *err);

/* The table of a level, or NULL when the level is not available on this machine. */
const gm_kernels *gm_kernels_for_level(gm_kernel_level level);

/* The table of the level a GMLX_KERNELS value names (NULL, "" or "auto": the best this CPU
 * runs). Fails as gm_kernel_level_parse. */
int gm_kernels_init(const char *level, const gm_kernels **out, gm_err *err);

gm_kernel_level gm_kernels_level(const gm_kernels *k);

/* The dot product this table uses for wtype (NULL when wtype has none) and the level whose code
 * it is (a lower level when this level does not specialise wtype). */
gm_dot_fn gm_kernels_dot(const gm_kernels *k, uint32_t wtype);
gm_kernel_level gm_kernels_dot_level(const gm_kernels *k, uint32_t wtype);

/* Several tokens at once (prefill): out[t] = the gm_kernels_dot result of one weight row w with
 * the prepared activation row a + t * a_stride bytes, for t < GM_DOT_MULTI, each equal to it bit
 * for bit (the weight blocks are unpacked once for all the tokens, then every token runs the
 * single-token kernel's operations in the same order). */
#define GM_DOT_MULTI 4
typedef void (*gm_dot_multi_fn)(const void *w, const void *a, uint64_t a_stride, uint64_t n,
                                float *out);

/* The multi-token dot product this table has for wtype, or NULL (matmul then calls the
 * single-token one per token). */
gm_dot_multi_fn gm_kernels_dot_multi(const gm_kernels *k, uint32_t wtype);

/* Two weight rows at once (decode): out[0] and out[1] = the gm_kernels_dot results of rows w0
 * and w1 with the prepared activation row a, each equal to it bit for bit (the two rows' steps
 * interleaved, every row running the single-row kernel's operations in the same order). For
 * the types whose one-row kernels are bound by their own instruction chains (the IQ2 and IQ1
 * grids): two independent rows give the core twice the work to overlap, and no row pays the
 * pipeline's start and end alone. A type has one only where it measured faster from memory. */
typedef void (*gm_dot_rows2_fn)(const void *w0, const void *w1, const void *a, uint64_t n,
                                float out[2]);

/* The two-row dot product this table has for wtype, or NULL (matmul then calls the single-row
 * one per row). */
gm_dot_rows2_fn gm_kernels_dot_rows2(const gm_kernels *k, uint32_t wtype);

/* The attention kernel (attn.h) of this table's level for head_dim: the level's own for a
 * multiple of 16, the scalar reference otherwise. */
gm_attn_fn gm_kernels_attn(const gm_kernels *k, uint32_t head_dim);

/* ---- activations ---------------------------------------------------------------------------- */

/* Bytes of one prepared activation row of n_cols elements for weights of type wtype. GM_EUNSUPPORTED
 * when wtype has no dot product, GM_EINVAL when n_cols is not a multiple of the block sizes. */
int gm_act_row_bytes(uint32_t wtype, uint64_t n_cols, uint64_t *bytes, gm_err *err);

/* Prepares n_tok activation rows for weights of type wtype: row t of x (x + t * x_stride floats,
 * n_cols of them) into dst + t * dst_stride bytes (dst_stride >= gm_act_row_bytes). Splits the
 * rows over n_threads of pool (pool may be NULL: the calling thread only). */
int gm_act_quantize(uint32_t wtype, const float *x, uint64_t x_stride, uint64_t n_cols,
                    uint64_t n_tok, void *dst, uint64_t dst_stride, gm_pool *pool,
                    int n_threads, gm_err *err);

/* ---- matrix products ------------------------------------------------------------------------- */

/* A weight matrix: n_rows rows of n_cols elements of type, row r at data + r * row_bytes. */
typedef struct gm_mat {
    uint32_t type;      /* gm_type id of the weights */
    uint64_t n_cols;    /* elements per row (a multiple of the type's block) */
    uint64_t n_rows;
    uint64_t row_bytes; /* distance between rows, at least the packed row size */
    const void *data;   /* row 0; any alignment */
} gm_mat;

/* Describes a matrix of packed rows. GM_EINVAL for a NULL pointer or a shape that does not fit
 * the type's blocks; GM_EUNSUPPORTED for a type that has no dot product. */
int gm_mat_init(gm_mat *m, uint32_t type, const void *data, uint64_t n_cols, uint64_t n_rows,
                gm_err *err);

/* Decode: y[r - r0] = W[r, :] . a for rows r0 <= r < r1, with a prepared activation row a
 * (gm_act_quantize for w->type). Rows are split over n_threads of pool (NULL: caller only).
 * GM_EINVAL for bad arguments (r1 > n_rows, r0 > r1, NULL pointers); GM_EUNSUPPORTED when k has
 * no dot product for w->type. */
int gm_matvec(const gm_kernels *k, const gm_mat *w, uint64_t r0, uint64_t r1, const void *a,
              float *y, gm_pool *pool, int n_threads, gm_err *err);

/* Prefill: y[t * y_stride + (r - r0)] = W[r, :] . a_t for t < n_tok and r0 <= r < r1, where a_t
 * = a + t * a_stride bytes is a prepared activation row. Rows are split over the threads; each
 * thread dots a few rows (kept in cache) with a tile of tokens at a time. Equal bit for bit to
 * n_tok calls of gm_matvec. Errors as gm_matvec, and GM_EINVAL when y_stride < r1 - r0 with
 * n_tok > 1. */
int gm_matmul(const gm_kernels *k, const gm_mat *w, uint64_t r0, uint64_t r1, const void *a,
              uint64_t a_stride, uint64_t n_tok, float *y, uint64_t y_stride, gm_pool *pool,
              int n_threads, gm_err *err);

/* One product of gm_matmul_multi: y[t * y_stride + r] = w[r, :] . (a + t * a_stride) for every
 * row r of w and t < n_tok (a_stride and y_stride as gm_matmul's, unused for one token). */
typedef struct gm_mm_op {
    const gm_mat *w;
    const void *a;
    uint64_t a_stride, n_tok;
    float *y;
    uint64_t y_stride;
} gm_mm_op;

/* Products that may run in one pool run, at most (a MoE layer's experts' gates and ups). */
#define GM_MATMUL_MULTI_MAX 64u

/* Computes n_ops products (each of every row of its matrix) in one run of the pool: their items
 * shared out among the threads together, so that the threads meet once instead of once a
 * product (a decode token's experts are a few megabytes each: on many threads the meetings cost
 * more than the reads). Each product equals gm_matmul's bit for bit. Errors as gm_matmul's (the
 * first product that has one; nothing is computed then), and GM_EINVAL for more than
 * GM_MATMUL_MULTI_MAX products. */
int gm_matmul_multi(const gm_kernels *k, const gm_mm_op *ops, uint32_t n_ops, gm_pool *pool,
                    int n_threads, gm_err *err);

#endif
