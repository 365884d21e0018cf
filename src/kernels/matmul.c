/* Activation preparation, matrix x vector and matrix x matrix (see kernels.h).
 *
 * Work is cut into items of consecutive rows. Each thread owns a contiguous run of items and
 * takes them in order through its own atomic counter, so its reads are one long sequential
 * stream (the hardware prefetchers lose ~30 % of the bandwidth when items of two threads
 * interleave); a thread that finishes early takes items from the other runs, so one slowed by
 * the machine's other load does not hold the others up. Which thread computes a row never changes
 * the row's result. An item of a batch product is worked in tiles: a few rows small enough to
 * stay in L1 against a tile of tokens whose activations stay in L2. */
#include "kernels/kernels.h"

#include <stdatomic.h>
#include <string.h>

#include "gguf/types.h"
#include "gmlx.h"
#include "kernels/dot_impl.h"
#include "kernels/quant.h"

/* Tile sizes in bytes (see the file comment); items aim at ITEM_BYTES of weights each, and at
 * least ITEMS_PER_THREAD items per thread so the dynamic split can balance. */
#define ROW_TILE_BYTES (16u * 1024u)
#define TOK_TILE_BYTES (256u * 1024u)
#define ITEM_BYTES (64u * 1024u)
#define ITEMS_PER_THREAD 4u
#define MAX_PARTS 256 /* threads per product; a counter each */

/* ---- activations ---------------------------------------------------------------------------- */

int gm_act_row_bytes(uint32_t wtype, uint64_t n_cols, uint64_t *bytes, gm_err *err)
{
    const int act = gm_dot_act_type(wtype);
    if (act < 0)
        return gm_err_set(err, GM_EUNSUPPORTED, "no dot product for weight type %s",
                          gm_type_name(wtype));
    const gm_type_info *wi = gm_type_get(wtype);
    if (n_cols % wi->block_elems != 0)
        return gm_err_set(err, GM_EINVAL, "%llu columns do not fill %s blocks",
                          (unsigned long long)n_cols, wi->name);
    if (gm_type_row_bytes((uint32_t)act, n_cols, bytes, NULL) != 0)
        return gm_err_set(err, GM_EINVAL, "%llu columns do not fill %s activation blocks",
                          (unsigned long long)n_cols, gm_type_name((uint32_t)act));
    if (act == GM_TYPE_Q8_0) /* the float scales and the regrouped codes (dot_impl.h) */
        *bytes += n_cols / GM_QK8_0 * sizeof(float) + n_cols / (4 * GM_QK8_0) * GM_ACT_Q8_0_GROUP;
    return 0;
}

/* One prepared row: the activation blocks, and for Q8_0 the blocks' scales as float32 after
 * them (GM_ACT_Q8_0_SCALES), then the codes of every full group of 4 blocks regrouped, with
 * their sums of 4 (GM_ACT_Q8_0_GROUPS, layout in dot_impl.h). */
static void prepare_row(uint32_t act_type, const float *x, uint8_t *dst, uint64_t n)
{
    gm_quantize_act(act_type, x, dst, n);
    if (act_type != GM_TYPE_Q8_0)
        return;
    const uint64_t nb = n / GM_QK8_0;
    uint8_t *sc = dst + nb * sizeof(gm_block_q8_0);
    for (uint64_t b = 0; b < nb; b++) {
        uint16_t h;
        memcpy(&h, dst + b * sizeof(gm_block_q8_0), sizeof h);
        const float f = gm_f16_to_f32(h);
        memcpy(sc + b * sizeof f, &f, sizeof f);
    }
    uint8_t *grp = sc + nb * sizeof(float);
    for (uint64_t g = 0; g < nb / 4; g++, grp += GM_ACT_Q8_0_GROUP) {
        int16_t sums[32];
        for (int k = 0; k < 4; k++) {
            gm_block_q8_0 b;
            memcpy(&b, dst + (4 * g + (uint64_t)k) * sizeof b, sizeof b);
            memcpy(grp + 16 * k, b.qs, 16);
            memcpy(grp + 64 + 16 * k, b.qs + 16, 16);
            for (int j = 0; j < 4; j++) {
                int lo = 0, hi = 0;
                for (int e = 0; e < 4; e++) {
                    lo += b.qs[4 * j + e];
                    hi += b.qs[16 + 4 * j + e];
                }
                sums[2 * (4 * k + j)] = (int16_t)lo;
                sums[2 * (4 * k + j) + 1] = (int16_t)hi;
            }
        }
        memcpy(grp + 128, sums, sizeof sums);
    }
}

typedef struct act_job {
    uint32_t act_type;
    const float *x;
    uint64_t x_stride, n_cols, n_tok;
    uint8_t *dst;
    uint64_t dst_stride;
} act_job;

static void act_part(void *ctx, int part, int n_parts)
{
    const act_job *j = ctx;
    const uint64_t t0 = j->n_tok * (uint64_t)part / (uint64_t)n_parts;
    const uint64_t t1 = j->n_tok * (uint64_t)(part + 1) / (uint64_t)n_parts;
    for (uint64_t t = t0; t < t1; t++)
        prepare_row(j->act_type, j->x + t * j->x_stride, j->dst + t * j->dst_stride, j->n_cols);
}

int gm_act_quantize(uint32_t wtype, const float *x, uint64_t x_stride, uint64_t n_cols,
                    uint64_t n_tok, void *dst, uint64_t dst_stride, gm_pool *pool,
                    int n_threads, gm_err *err)
{
    uint64_t row_bytes = 0;
    const int rc = gm_act_row_bytes(wtype, n_cols, &row_bytes, err);
    if (rc != 0)
        return rc;
    if (n_tok == 0 || n_cols == 0)
        return 0;
    if (!x || !dst)
        return gm_err_set(err, GM_EINVAL, "activations: NULL buffer");
    if (n_tok > 1 && (x_stride < n_cols || dst_stride < row_bytes))
        return gm_err_set(err, GM_EINVAL, "activations: strides %llu, %llu are too small",
                          (unsigned long long)x_stride, (unsigned long long)dst_stride);
    act_job j = {(uint32_t)gm_dot_act_type(wtype), x, x_stride, n_cols, n_tok, dst, dst_stride};
    const uint64_t parts = n_tok < (uint64_t)(n_threads > 0 ? n_threads : 1)
                               ? n_tok
                               : (uint64_t)(n_threads > 0 ? n_threads : 1);
    gm_pool_run(pool, act_part, &j, (int)parts);
    return 0;
}

/* ---- matrices -------------------------------------------------------------------------------- */

int gm_mat_init(gm_mat *m, uint32_t type, const void *data, uint64_t n_cols, uint64_t n_rows,
                gm_err *err)
{
    if (!m || (!data && n_rows > 0 && n_cols > 0))
        return gm_err_set(err, GM_EINVAL, "matrix: NULL pointer");
    if (gm_dot_act_type(type) < 0)
        return gm_err_set(err, GM_EUNSUPPORTED, "matrix: no dot product for type %s",
                          gm_type_name(type));
    uint64_t row_bytes = 0;
    if (gm_type_row_bytes(type, n_cols, &row_bytes, NULL) != 0)
        return gm_err_set(err, GM_EINVAL, "matrix: %llu columns do not fill %s blocks",
                          (unsigned long long)n_cols, gm_type_name(type));
    m->type = type;
    m->n_cols = n_cols;
    m->n_rows = n_rows;
    m->row_bytes = row_bytes;
    m->data = data;
    return 0;
}

/* One product's rows r0.. of w against its activations, cut into n_items items of item_rows. */
typedef struct mm_op {
    gm_dot_fn dot;
    gm_dot_multi_fn multi; /* GM_DOT_MULTI tokens per call, or NULL */
    gm_dot_rows2_fn rows2; /* two rows per call, or NULL */
    const uint8_t *w; /* row r0 */
    uint64_t row_bytes, n_cols, n_rows;
    const uint8_t *a;
    uint64_t a_stride, n_tok;
    float *y;
    uint64_t y_stride;
    uint64_t item_rows, n_items;
    uint64_t row_tile, tok_tile;
} mm_op;

/* The products of one pool run (one for gm_matmul, several for gm_matmul_multi): their items
 * numbered one after the other (op i's from first[i]), each part's run of them. */
typedef struct mm_job {
    const mm_op *ops;
    const uint64_t *first; /* [n_ops + 1] */
    uint32_t n_ops;
    int n_parts;
    struct {
        _Atomic uint64_t next; /* next item of this part's run */
        uint64_t end;          /* one past its last item */
        char pad[48];          /* one cache line per counter */
    } run[MAX_PARTS];
} mm_job;

/* y[r] for rows r0..r1 of one activation row a: two rows per call where the type has a
 * two-row kernel (the same results bit for bit). The pairs are rows r0 + i and r0 + h + i (h
 * half the range), so that each of the two rows a call reads continues where the last call's
 * left off: two long sequential streams, as the one-row loop reads one. Neighbouring rows
 * instead (short streams that restart every pair, a load's stride broken at every row end)
 * left the hardware prefetchers behind: up to 3x slower from memory for rows under ~1.5 KB. */
static void mm_rows(const mm_op *j, const uint8_t *a, float *y, uint64_t r0, uint64_t r1)
{
    uint64_t r = r0;
    if (j->rows2) {
        const uint64_t h = (r1 - r0) / 2;
        for (uint64_t i = 0; i < h; i++) {
            float out[2];
            j->rows2(j->w + (r0 + i) * j->row_bytes, j->w + (r0 + h + i) * j->row_bytes, a,
                     j->n_cols, out);
            y[r0 + i] = out[0];
            y[r0 + h + i] = out[1];
        }
        r = r0 + 2 * h;
    }
    for (; r < r1; r++)
        y[r] = j->dot(j->w + r * j->row_bytes, a, j->n_cols);
}

static void mm_item(const mm_op *j, uint64_t i0, uint64_t i1)
{
    if (j->n_tok == 1) {
        mm_rows(j, j->a, j->y, i0, i1);
        return;
    }
    for (uint64_t t0 = 0; t0 < j->n_tok; t0 += j->tok_tile) {
        const uint64_t t1 = t0 + j->tok_tile < j->n_tok ? t0 + j->tok_tile : j->n_tok;
        for (uint64_t r0 = i0; r0 < i1; r0 += j->row_tile) {
            const uint64_t r1 = r0 + j->row_tile < i1 ? r0 + j->row_tile : i1;
            uint64_t t = t0;
            for (; j->multi && t + GM_DOT_MULTI <= t1; t += GM_DOT_MULTI) {
                const uint8_t *a = j->a + t * j->a_stride;
                for (uint64_t r = r0; r < r1; r++) {
                    float out[GM_DOT_MULTI];
                    j->multi(j->w + r * j->row_bytes, a, j->a_stride, j->n_cols, out);
                    for (uint64_t u = 0; u < GM_DOT_MULTI; u++)
                        j->y[(t + u) * j->y_stride + r] = out[u];
                }
            }
            for (; t < t1; t++)
                mm_rows(j, j->a + t * j->a_stride, j->y + t * j->y_stride, r0, r1);
        }
    }
}

static void mm_part(void *ctx, int part, int n_parts)
{
    mm_job *j = ctx;
    (void)n_parts;
    uint32_t o = 0; /* the op of the last item: runs go through the ops in order */
    /* this part's own run first, then the others' leftovers */
    for (int k = 0; k < j->n_parts; k++) {
        const int q = (part + k) % j->n_parts;
        for (;;) {
            const uint64_t i = atomic_fetch_add_explicit(&j->run[q].next, 1, memory_order_relaxed);
            if (i >= j->run[q].end)
                break;
            if (i < j->first[o])
                o = 0;
            while (i >= j->first[o + 1])
                o++;
            const mm_op *op = &j->ops[o];
            const uint64_t r0 = (i - j->first[o]) * op->item_rows;
            const uint64_t r1 = r0 + op->item_rows < op->n_rows ? r0 + op->item_rows : op->n_rows;
            mm_item(op, r0, r1);
        }
    }
}

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Checks one product's arguments and describes it in *op, its items at least min_items where
 * it has the rows (op->n_items 0: nothing to compute). */
static int mm_setup(const gm_kernels *k, const gm_mat *w, uint64_t r0, uint64_t r1, const void *a,
                    uint64_t a_stride, uint64_t n_tok, float *y, uint64_t y_stride, uint64_t min_items,
                    mm_op *op, gm_err *err)
{
    op->n_items = 0;
    if (!k || !w)
        return gm_err_set(err, GM_EINVAL, "matmul: NULL kernels or matrix");
    if (r0 > r1 || r1 > w->n_rows)
        return gm_err_set(err, GM_EINVAL, "matmul: rows %llu..%llu outside the matrix's %llu",
                          (unsigned long long)r0, (unsigned long long)r1,
                          (unsigned long long)w->n_rows);
    const gm_dot_fn dot = gm_kernels_dot(k, w->type);
    if (!dot)
        return gm_err_set(err, GM_EUNSUPPORTED, "matmul: no dot product for type %s",
                          gm_type_name(w->type));
    uint64_t act_bytes = 0, packed = 0;
    int rc = gm_act_row_bytes(w->type, w->n_cols, &act_bytes, err);
    if (rc != 0)
        return rc;
    if (gm_type_row_bytes(w->type, w->n_cols, &packed, NULL) != 0 || w->row_bytes < packed)
        return gm_err_set(err, GM_EINVAL, "matmul: row stride %llu below the packed row size",
                          (unsigned long long)w->row_bytes);
    const uint64_t n_rows = r1 - r0;
    if (n_rows == 0 || n_tok == 0)
        return 0;
    if (!y || (w->n_cols > 0 && (!w->data || !a)))
        return gm_err_set(err, GM_EINVAL, "matmul: NULL buffer");
    if (n_tok > 1 && (y_stride < n_rows || a_stride < act_bytes))
        return gm_err_set(err, GM_EINVAL, "matmul: strides %llu (activations), %llu (results) "
                          "are too small", (unsigned long long)a_stride,
                          (unsigned long long)y_stride);
    if (w->n_cols == 0) {
        for (uint64_t t = 0; t < n_tok; t++)
            memset(y + t * y_stride, 0, n_rows * sizeof *y);
        return 0;
    }
    const uint64_t rb = w->row_bytes ? w->row_bytes : 1;
    op->dot = dot;
    op->multi = gm_kernels_dot_multi(k, w->type);
    op->rows2 = gm_kernels_dot_rows2(k, w->type);
    op->w = (const uint8_t *)w->data + r0 * w->row_bytes;
    op->row_bytes = w->row_bytes;
    op->n_cols = w->n_cols;
    op->n_rows = n_rows;
    op->a = a;
    op->a_stride = a_stride;
    op->n_tok = n_tok;
    op->y = y;
    op->y_stride = y_stride;
    op->row_tile = clamp_u64(ROW_TILE_BYTES / rb, 1, 64);
    if (op->rows2 && op->row_tile > 1)
        op->row_tile &= ~(uint64_t)1;
    op->tok_tile = clamp_u64(TOK_TILE_BYTES / (act_bytes ? act_bytes : 1), 1, 256);
    /* items of about ITEM_BYTES of weights for a vector (ROW_TILE_BYTES for a batch, whose
     * items carry n_tok times the work), but at least min_items */
    const uint64_t want_bytes = n_tok == 1 ? ITEM_BYTES : ROW_TILE_BYTES;
    uint64_t item_rows = clamp_u64(want_bytes / rb, 1, n_rows);
    if (min_items > 1 && (n_rows + item_rows - 1) / item_rows < min_items)
        item_rows = clamp_u64(n_rows / min_items, 1, n_rows);
    if (op->rows2 && item_rows > 1) /* whole pairs for the two-row kernel */
        item_rows &= ~(uint64_t)1;
    op->item_rows = item_rows;
    op->n_items = (n_rows + item_rows - 1) / item_rows;
    return 0;
}

/* Runs the n_ops products of ops (items numbered one after the other) on up to nt threads of
 * pool, each thread's run of items contiguous. */
static void mm_run(const mm_op *ops, uint32_t n_ops, gm_pool *pool, int nt)
{
    uint64_t first[GM_MATMUL_MULTI_MAX + 1];
    first[0] = 0;
    for (uint32_t i = 0; i < n_ops; i++)
        first[i + 1] = first[i] + ops[i].n_items;
    const uint64_t n_items = first[n_ops];
    if (n_items == 0)
        return;
    mm_job j; /* fields set one by one: the counters of unused parts stay untouched */
    j.ops = ops;
    j.first = first;
    j.n_ops = n_ops;
    int parts = (uint64_t)nt < n_items ? nt : (int)n_items;
    if (parts > gm_pool_size(pool))
        parts = gm_pool_size(pool);
    if (parts > MAX_PARTS)
        parts = MAX_PARTS;
    j.n_parts = parts;
    for (int p = 0; p < parts; p++) {
        atomic_init(&j.run[p].next, n_items * (uint64_t)p / (uint64_t)parts);
        j.run[p].end = n_items * (uint64_t)(p + 1) / (uint64_t)parts;
    }
    gm_pool_run(pool, mm_part, &j, parts);
}

int gm_matmul(const gm_kernels *k, const gm_mat *w, uint64_t r0, uint64_t r1, const void *a,
              uint64_t a_stride, uint64_t n_tok, float *y, uint64_t y_stride, gm_pool *pool,
              int n_threads, gm_err *err)
{
    const int nt = n_threads > 0 ? n_threads : 1;
    mm_op op;
    const int rc = mm_setup(k, w, r0, r1, a, a_stride, n_tok, y, y_stride,
                            nt > 1 ? (uint64_t)nt * ITEMS_PER_THREAD : 1, &op, err);
    if (rc == 0)
        mm_run(&op, 1, pool, nt);
    return rc;
}

int gm_matmul_multi(const gm_kernels *k, const gm_mm_op *ops, uint32_t n_ops, gm_pool *pool,
                    int n_threads, gm_err *err)
{
    if (n_ops > GM_MATMUL_MULTI_MAX || (n_ops && !ops))
        return gm_err_set(err, GM_EINVAL, "matmul: %u products in one run (at most %u)", n_ops,
                          GM_MATMUL_MULTI_MAX);
    const int nt = n_threads > 0 ? n_threads : 1;
    mm_op mo[GM_MATMUL_MULTI_MAX];
    uint64_t items = 0;
    for (int pass = 0; pass < 2; pass++) {
        /* the first pass sizes items alone; when together they give the threads too few, the
         * second cuts each product finer, into its share of nt * ITEMS_PER_THREAD */
        const uint64_t want = (uint64_t)nt * ITEMS_PER_THREAD;
        items = 0;
        for (uint32_t i = 0; i < n_ops; i++) {
            const uint64_t min_items = pass == 0 ? 1 : (want + n_ops - 1) / n_ops;
            const int rc = mm_setup(k, ops[i].w, 0, ops[i].w ? ops[i].w->n_rows : 0, ops[i].a,
                                    ops[i].a_stride, ops[i].n_tok, ops[i].y, ops[i].y_stride,
                                    min_items, &mo[i], err);
            if (rc)
                return rc;
            items += mo[i].n_items;
        }
        if (nt == 1 || items >= want)
            break;
    }
    mm_run(mo, n_ops, pool, nt);
    return 0;
}

int gm_matvec(const gm_kernels *k, const gm_mat *w, uint64_t r0, uint64_t r1, const void *a,
              float *y, gm_pool *pool, int n_threads, gm_err *err)
{
    return gm_matmul(k, w, r0, r1, a, 0, 1, y, 0, pool, n_threads, err);
}
