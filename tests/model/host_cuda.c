/* A host stand-in for the CUDA backend's C entry points (backend/cuda/cuda.h) that the VRAM tier
 * (infer/gpu.c), the device attention (infer/gpu_attn.c) and the device decode
 * (infer/gpu_decode.c) call, so that their engine side runs where there is no device: one "device"
 * of 8 GB; slabs are host memory (while gm_host_cuda_fail_allocs > 0, an allocation fails as the
 * device's would when full, once gm_host_cuda_skip_allocs more have succeeded), uploads copies; a
 * start computes every (expert, token) pair at once from the decoded rows (kernels/dequant.h) in
 * double precision with the CPU's activation formulas, and a finish hands the rows over; the
 * attention and a whole decode token follow the device's steps the same way. Its arithmetic is
 * not the device's (no 8-bit activations): what it checks is where the tier sends each expert and
 * where the rows land. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "gguf/types.h"
#include "kernels/dequant.h"
#include "kernels/quant.h"

int gm_cuda_probe(gm_cuda_info *out, gm_err *err)
{
    (void)err;
    memset(out, 0, sizeof *out);
    out->n_devices = 1;
    strcpy(out->name, "host stand-in");
    out->total_bytes = out->free_bytes = 8000000000ull;
    return 0;
}

bool gm_cuda_ffn_supports(const gm_cuda_ffn_shape *sh, const char **why)
{
    const bool ok = gm_dequant_supported(sh->gate_type) && gm_dequant_supported(sh->up_type) &&
                    gm_dequant_supported(sh->down_type);
    if (why)
        *why = ok ? NULL : "a weight type without a decoder";
    return ok;
}

struct gm_cuda_ffn {
    uint64_t max_dim, max_ff;
    uint32_t max_pairs, max_tok, n;
    uint64_t dim;
    float *out, *row, *h;
};

int gm_cuda_ffn_create(gm_cuda_ffn **out, uint64_t max_dim, uint64_t max_ff, uint32_t max_pairs, uint32_t max_tokens,
                       gm_err *err)
{
    gm_cuda_ffn *f = calloc(1, sizeof *f);
    if (!f)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    *f = (gm_cuda_ffn){max_dim, max_ff, max_pairs, max_tokens, 0, 0, NULL, NULL, NULL};
    f->out = malloc((uint64_t)max_pairs * max_dim * sizeof(float));
    f->row = malloc((max_dim > max_ff ? max_dim : max_ff) * sizeof(float));
    f->h = malloc(max_ff * sizeof(float));
    if (!f->out || !f->row || !f->h) {
        gm_cuda_ffn_free(f);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    *out = f;
    return 0;
}

void gm_cuda_ffn_free(gm_cuda_ffn *f)
{
    if (!f)
        return;
    free(f->out);
    free(f->row);
    free(f->h);
    free(f);
}

/* Row r (n values of type) of w times x. */
static double dot_row(gm_cuda_ffn *f, uint32_t type, const void *w, uint64_t r, uint64_t n, const float *x)
{
    uint64_t rb = 0;
    gm_err e = {0};
    gm_type_row_bytes(type, n, &rb, &e);
    gm_dequant_row(type, (const uint8_t *)w + r * rb, f->row, n);
    double s = 0;
    for (uint64_t i = 0; i < n; i++)
        s += (double)f->row[i] * x[i];
    return s;
}

static float act(const gm_cuda_glu *p, float g, float u)
{
    switch (p->act) {
    case GM_CUDA_SITU:
        return tanhf(g / p->beta) * p->beta / (1 + expf(-g)) * (p->lbeta > 0 ? tanhf(u / p->lbeta) * p->lbeta : u);
    case GM_CUDA_SWIGLU_LIMIT: {
        const float a = g < p->limit ? g : p->limit, b = u < -p->limit ? -p->limit : u > p->limit ? p->limit : u;
        return a / (1 + expf(-a)) * b;
    }
    case GM_CUDA_SWIGLU_OAI: {
        const float a = g < 7 ? g : 7, b = u < -7 ? -7 : u > 7 ? 7 : u;
        return a / (1 + expf(-1.702f * a)) * (b + 1);
    }
    default: return g / (1 + expf(-g)) * u;
    }
}

int gm_cuda_ffn_start(gm_cuda_ffn *f, const gm_cuda_ffn_shape *sh, const gm_cuda_expert *ex, const uint32_t *tok,
                      uint32_t n, const float *x, uint32_t n_tok, gm_err *err)
{
    if (f->n || !n || n > f->max_pairs || !n_tok || n_tok > f->max_tok || (!tok && n_tok != 1) ||
        sh->dim > f->max_dim || sh->ff > f->max_ff)
        return gm_err_set(err, GM_EINVAL, "host stand-in: %u pairs of %u tokens do not fit", n, n_tok);
    for (uint32_t j = 0; j < n; j++) {
        const uint32_t t = tok ? tok[j] : 0;
        if (t >= n_tok)
            return gm_err_set(err, GM_EINVAL, "host stand-in: pair %u takes token %u of %u", j, t, n_tok);
        const float *xt = x + (uint64_t)t * sh->dim;
        for (uint64_t r = 0; r < sh->ff; r++)
            f->h[r] = act(&sh->glu, (float)dot_row(f, sh->gate_type, ex[j].gate, r, sh->dim, xt),
                          (float)dot_row(f, sh->up_type, ex[j].up, r, sh->dim, xt));
        for (uint64_t r = 0; r < sh->dim; r++)
            f->out[(uint64_t)j * sh->dim + r] = (float)dot_row(f, sh->down_type, ex[j].down, r, sh->ff, f->h);
    }
    f->n = n;
    f->dim = sh->dim;
    return 0;
}

int gm_cuda_ffn_finish(gm_cuda_ffn *f, float *out, gm_err *err)
{
    if (!f->n)
        return gm_err_set(err, GM_EINVAL, "host stand-in: nothing started");
    if (out)
        memcpy(out, f->out, (uint64_t)f->n * f->dim * sizeof(float));
    f->n = 0;
    return 0;
}

const float *gm_cuda_ffn_rows(const gm_cuda_ffn *f) { return f->out; }

struct gm_cuda_slab {
    uint8_t *base;
    uint64_t bytes;
};

int gm_host_cuda_fail_allocs; /* the next this many allocations fail */
int gm_host_cuda_skip_allocs;  /* after this many more succeed */

int gm_cuda_slab_create(gm_cuda_slab **out, uint64_t want_bytes, uint64_t min_bytes, gm_err *err)
{
    (void)min_bytes;
    if (gm_host_cuda_skip_allocs > 0)
        gm_host_cuda_skip_allocs--;
    else if (gm_host_cuda_fail_allocs > 0 && gm_host_cuda_fail_allocs--)
        return gm_err_set(err, GM_ENOMEM, "CUDA: allocating device memory for weights: out of memory "
                          "(cudaErrorMemoryAllocation)");
    gm_cuda_slab *s = calloc(1, sizeof *s);
    if (!s || !(s->base = aligned_alloc(256, (want_bytes + 255) / 256 * 256))) {
        free(s);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    s->bytes = want_bytes;
    *out = s;
    return 0;
}

void gm_cuda_slab_free(gm_cuda_slab *s)
{
    if (s)
        free(s->base);
    free(s);
}

uint64_t gm_cuda_slab_bytes(const gm_cuda_slab *s) { return s->bytes; }
uint8_t *gm_cuda_slab_base(gm_cuda_slab *s) { return s->base; }

int gm_cuda_host_pin(const void *p, uint64_t bytes, gm_err *err)
{
    (void)p, (void)bytes, (void)err;
    return 0;
}

void gm_cuda_host_unpin(const void *p) { (void)p; }

int gm_cuda_upload(void *dst, const void *src, uint64_t bytes, gm_err *err)
{
    (void)err;
    memcpy(dst, src, bytes);
    return 0;
}

/* ---- one token's attention: the same steps as attn.cu's kernels, in double precision where
 * they add up, on the host ---- */

struct gm_cuda_attn {
    gm_cuda_attn_shape sh;
    uint32_t max_ctx;
    float *q, *k, *v, *att, *row;
};

bool gm_cuda_attn_supports(const gm_cuda_attn_shape *sh, const gm_cuda_attn_layer *w, const char **why)
{
    const bool ok = sh->head_dim % 32 == 0 && sh->head_dim <= GM_CUDA_ATTN_MAX_HD && sh->n_head_kv &&
                    sh->n_head % sh->n_head_kv == 0 && gm_dequant_supported(w->wq.type) &&
                    gm_dequant_supported(w->wk.type) && gm_dequant_supported(w->wv.type) &&
                    gm_dequant_supported(w->wo.type) && (sh->cache_type == GM_TYPE_F32 || sh->cache_type == GM_TYPE_F16);
    if (why)
        *why = ok ? NULL : "a shape the stand-in does not take";
    return ok;
}

void gm_cuda_attn_free(gm_cuda_attn *a)
{
    if (!a)
        return;
    free(a->q);
    free(a->k);
    free(a->v);
    free(a->att);
    free(a->row);
    free(a);
}

int gm_cuda_attn_create(gm_cuda_attn **out, const gm_cuda_attn_shape *sh, uint32_t max_ctx, gm_err *err)
{
    gm_cuda_attn *a = calloc(1, sizeof *a);
    const uint64_t qd = (uint64_t)sh->n_head * sh->head_dim, kvd = (uint64_t)sh->n_head_kv * sh->head_dim;
    const uint64_t big = qd > sh->n_embd ? qd : sh->n_embd;
    if (!a || !(a->q = malloc(qd * 4)) || !(a->k = malloc(kvd * 4)) || !(a->v = malloc(kvd * 4)) ||
        !(a->att = malloc(qd * 4)) || !(a->row = malloc(big * 4))) {
        gm_cuda_attn_free(a);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    a->sh = *sh;
    a->max_ctx = max_ctx;
    *out = a;
    return 0;
}

static void mat_vec(float *row, const gm_cuda_mat *m, const float *x, float *y, const float *bias)
{
    uint64_t rb = 0;
    gm_err e = {0};
    gm_type_row_bytes(m->type, m->n_cols, &rb, &e);
    for (uint64_t r = 0; r < m->n_rows; r++) {
        gm_dequant_row(m->type, (const uint8_t *)m->data + r * rb, row, m->n_cols);
        double s = 0;
        for (uint64_t i = 0; i < m->n_cols; i++)
            s += (double)row[i] * x[i];
        y[r] = (float)s + (bias ? bias[r] : 0.0f);
    }
}

static void head_norm(float *x, const float *w, uint32_t hd, float eps)
{
    double ss = 0;
    for (uint32_t i = 0; i < hd; i++)
        ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / hd) + eps);
    for (uint32_t i = 0; i < hd; i++)
        x[i] = x[i] * scale * w[i];
}

static void head_rope(float *x, const float *cs, uint32_t n_rot, bool neox)
{
    const uint32_t half = n_rot / 2;
    for (uint32_t i = 0; i < half; i++) {
        const uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * cs[i] - x1 * cs[half + i];
        x[b] = x0 * cs[half + i] + x1 * cs[i];
    }
}

static float cached(const uint8_t *row, uint32_t i, uint32_t type)
{
    return type == GM_TYPE_F16 ? gm_f16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

int gm_cuda_attn_token(gm_cuda_attn *a, const gm_cuda_attn_layer *w, void *kc, void *vc, uint32_t cap, uint32_t pos,
                       const float *rope_cs, const float *x, float *out, void *k_rows, void *v_rows, gm_err *err)
{
    const gm_cuda_attn_shape *sh = &a->sh;
    const uint32_t hd = sh->head_dim, group = sh->n_head / sh->n_head_kv;
    const uint64_t rb = (uint64_t)hd * (sh->cache_type == GM_TYPE_F16 ? 2 : 4);
    if (pos + 1 > a->max_ctx || pos + 1 > cap)
        return gm_err_set(err, GM_ERANGE, "host stand-in: position %u of %u", pos, cap);
    mat_vec(a->row, &w->wq, x, a->q, w->bq);
    mat_vec(a->row, &w->wk, x, a->k, w->bk);
    mat_vec(a->row, &w->wv, x, a->v, w->bv);
    for (uint32_t h = 0; h < sh->n_head + sh->n_head_kv; h++) {
        const bool is_q = h < sh->n_head;
        float *r = is_q ? a->q + (uint64_t)h * hd : a->k + (uint64_t)(h - sh->n_head) * hd;
        const float *nw = is_q ? w->q_norm : w->k_norm;
        if (nw && !sh->norm_after_rope)
            head_norm(r, nw, hd, sh->eps);
        head_rope(r, rope_cs, sh->n_rot, sh->neox);
        if (nw && sh->norm_after_rope)
            head_norm(r, nw, hd, sh->eps);
    }
    for (uint32_t h = 0; h < sh->n_head_kv; h++)
        for (int kind = 0; kind < 2; kind++) {
            const float *src = (kind ? a->v : a->k) + (uint64_t)h * hd;
            uint8_t *dst = (uint8_t *)(kind ? vc : kc) + ((uint64_t)h * cap + pos % cap) * rb;
            for (uint32_t i = 0; i < hd; i++) {
                if (sh->cache_type == GM_TYPE_F16)
                    ((uint16_t *)dst)[i] = gm_f32_to_f16(src[i]);
                else
                    ((float *)dst)[i] = src[i];
            }
            memcpy((uint8_t *)(kind ? v_rows : k_rows) + h * rb, dst, rb);
        }
    for (uint32_t h = 0; h < sh->n_head; h++) {
        const uint32_t kvh = h / group;
        const float *q = a->q + (uint64_t)h * hd;
        double m = -INFINITY, l = 0, o[GM_CUDA_ATTN_MAX_HD] = {0};
        for (uint32_t p = 0; p <= pos; p++) {
            const uint8_t *kr = (const uint8_t *)kc + ((uint64_t)kvh * cap + p % cap) * rb;
            const uint8_t *vr = (const uint8_t *)vc + ((uint64_t)kvh * cap + p % cap) * rb;
            double sc = 0;
            for (uint32_t i = 0; i < hd; i++)
                sc += (double)q[i] * sh->scale * cached(kr, i, sh->cache_type);
            const double mn = sc > m ? sc : m, c = exp(m - mn), e = exp(sc - mn);
            for (uint32_t i = 0; i < hd; i++)
                o[i] = o[i] * c + e * cached(vr, i, sh->cache_type);
            l = l * c + e;
            m = mn;
        }
        if (w->sinks) {
            const double sk = w->sinks[h], mn = sk > m ? sk : m, c = exp(m - mn);
            for (uint32_t i = 0; i < hd; i++)
                o[i] *= c;
            l = l * c + exp(sk - mn);
        }
        for (uint32_t i = 0; i < hd; i++)
            a->att[(uint64_t)h * hd + i] = (float)(o[i] / l);
    }
    mat_vec(a->row, &w->wo, a->att, out, w->bo);
    return 0;
}

struct gm_cuda_mv {
    uint64_t max_rows, max_cols;
    float *row;
};

int gm_cuda_mv_create(gm_cuda_mv **out, uint64_t max_rows, uint64_t max_cols, gm_err *err)
{
    gm_cuda_mv *v = calloc(1, sizeof *v);
    if (!v || !(v->row = malloc(max_cols * sizeof(float)))) {
        free(v);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    v->max_rows = max_rows;
    v->max_cols = max_cols;
    *out = v;
    return 0;
}

void gm_cuda_mv_free(gm_cuda_mv *v)
{
    if (v)
        free(v->row);
    free(v);
}

bool gm_cuda_mv_supports(const gm_cuda_mat *m) { return m->n_cols % 32 == 0 && gm_dequant_supported(m->type); }

int gm_cuda_mv_run(gm_cuda_mv *v, const gm_cuda_mat *m, const float *x, float *y, gm_err *err)
{
    if (m->n_rows > v->max_rows || m->n_cols > v->max_cols)
        return gm_err_set(err, GM_EINVAL, "host stand-in: a matrix of %llu x %llu", (unsigned long long)m->n_rows,
                          (unsigned long long)m->n_cols);
    mat_vec(v->row, m, x, y, NULL);
    return 0;
}

/* ---- a decode token through whole layers: decode.cu's steps on the host, the attention and
 * the experts by the stand-ins above, the norms and the routing as infer/fwd.c and infer/moe.c
 * state them (sums in double) ---- */

struct gm_cuda_dec {
    gm_cuda_attn *a;
    gm_cuda_dec_shape sh;
    gm_cuda_ffn *ffn;
    uint32_t E, next;
    uint64_t kv_row;
    float cs[2 * GM_CUDA_ATTN_MAX_HD];
    float *x, *xn, *att, *moe, *lg, *w, *rows; /* rows: [k][E], the layer's experts' outputs */
    float *hrows;                              /* [k][E]: the host's, of a split layer */
    gm_cuda_expert *tab;                       /* [n_expert]: a split layer's table */
    int32_t *ids;
    uint8_t *k, *v;
};

void gm_cuda_dec_free(gm_cuda_dec *d)
{
    if (!d)
        return;
    gm_cuda_ffn_free(d->ffn);
    void *b[] = {d->x, d->xn, d->att, d->moe, d->lg, d->w, d->rows, d->hrows, d->tab, d->ids, d->k, d->v};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        free(b[i]);
    free(d);
}

int gm_cuda_dec_create(gm_cuda_dec **out, gm_cuda_attn *a, const gm_cuda_dec_shape *sh, gm_err *err)
{
    *out = NULL;
    gm_cuda_dec *d = calloc(1, sizeof *d);
    if (!d)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    d->a = a;
    d->sh = *sh;
    d->E = a->sh.n_embd;
    d->next = UINT32_MAX;
    d->kv_row = (uint64_t)a->sh.n_head_kv * a->sh.head_dim * (a->sh.cache_type == GM_TYPE_F16 ? 2 : 4);
    const uint64_t E = d->E, LK = (uint64_t)sh->n_layer * sh->k;
    if (!(d->x = malloc(E * 4)) || !(d->xn = malloc(E * 4)) || !(d->att = malloc(E * 4)) ||
        !(d->moe = calloc(E, 4)) || !(d->lg = malloc(sh->n_expert * 4ull)) || !(d->w = malloc(LK * 4)) ||
        !(d->ids = malloc(LK * 4)) || !(d->rows = malloc((uint64_t)sh->k * E * 4)) ||
        !(d->hrows = malloc((uint64_t)sh->k * E * 4)) || !(d->tab = malloc(sh->n_expert * sizeof *d->tab)) ||
        !(d->k = malloc(sh->n_layer * d->kv_row)) ||
        !(d->v = malloc(sh->n_layer * d->kv_row))) {
        gm_cuda_dec_free(d);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    int rc = gm_cuda_ffn_create(&d->ffn, E, sh->max_ff, sh->k, 1, err);
    if (rc) {
        gm_cuda_dec_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

int gm_cuda_dec_begin(gm_cuda_dec *d, const float *x, const float *rope_cs, uint32_t pos, gm_err *err)
{
    (void)err, (void)pos;
    memcpy(d->x, x, d->E * 4ull);
    memcpy(d->cs, rope_cs, d->a->sh.n_rot * 4ull);
    d->next = 0;
    return 0;
}

/* x += add (add not NULL); xn = x / sqrt(mean(x^2) + eps) * w */
static void dec_add_norm(gm_cuda_dec *d, const float *add, const float *w)
{
    double ss = 0;
    for (uint32_t i = 0; i < d->E; i++) {
        if (add)
            d->x[i] += add[i];
        ss += (double)d->x[i] * d->x[i];
    }
    const float scale = 1.0f / sqrtf((float)(ss / d->E) + d->sh.eps);
    for (uint32_t i = 0; i < d->E; i++)
        d->xn[i] = d->x[i] * scale * w[i];
}

/* Layer l's routing of the token: its k experts and weights, as infer/moe.c routes. */
static void dec_route(gm_cuda_dec *d, uint32_t l, const gm_cuda_moe_layer *m)
{
    const gm_cuda_dec_shape *sh = &d->sh;
    const uint32_t N = sh->n_expert, K = sh->k;
    mat_vec(d->a->row, &m->router, d->xn, d->lg, m->router_b);
    float prob[1024], sel[1024];
    double sum = 0;
    float mx = -INFINITY;
    for (uint32_t i = 0; i < N; i++)
        mx = d->lg[i] > mx ? d->lg[i] : mx;
    for (uint32_t i = 0; i < N; i++) {
        prob[i] = sh->softmax ? expf(d->lg[i] - mx) : 1.0f / (1.0f + expf(-d->lg[i]));
        sum += prob[i];
    }
    for (uint32_t i = 0; i < N; i++) {
        prob[i] = sh->softmax ? (float)(prob[i] / sum) : prob[i];
        sel[i] = prob[i] + (m->sel_bias ? m->sel_bias[i] : 0.0f);
    }
    int32_t *ids = d->ids + (uint64_t)l * K;
    float *wt = d->w + (uint64_t)l * K;
    double wsum = 0;
    for (uint32_t j = 0; j < K; j++) { /* the highest selection score, ties to the lower id */
        int32_t best = -1;
        for (uint32_t i = 0; i < N; i++) {
            bool taken = false;
            for (uint32_t q = 0; q < j; q++)
                taken |= ids[q] == (int32_t)i;
            if (!taken && (best < 0 || sel[i] > sel[best]))
                best = (int32_t)i;
        }
        ids[j] = best;
        wt[j] = prob[best];
        wsum += wt[j];
    }
    for (uint32_t j = 0; j < K; j++)
        wt[j] = (sh->norm_topk ? (float)(wt[j] / wsum) : wt[j]) * sh->scale;
}

/* The outputs of the token's layer-l experts whose entry of table (the stand-in's slabs are host
 * memory) is not NULL, each alone, into d->rows. */
static int dec_expert_rows(gm_cuda_dec *d, uint32_t l, const gm_cuda_moe_layer *m, const gm_cuda_expert *table,
                           gm_err *err)
{
    const int32_t *ids = d->ids + (uint64_t)l * d->sh.k;
    for (uint32_t j = 0; j < d->sh.k; j++) {
        const gm_cuda_expert ex = table[ids[j]];
        int rc;
        if (ex.gate && ((rc = gm_cuda_ffn_start(d->ffn, &m->ffn, &ex, NULL, 1, d->xn, 1, err)) ||
                        (rc = gm_cuda_ffn_finish(d->ffn, d->rows + (uint64_t)j * d->E, err))))
            return rc;
    }
    return 0;
}

/* The token's layer-l experts' rows summed into d->moe in ascending id. */
static void dec_sum(gm_cuda_dec *d, uint32_t l)
{
    const int32_t *ids = d->ids + (uint64_t)l * d->sh.k;
    const float *wt = d->w + (uint64_t)l * d->sh.k;
    for (uint32_t x = 0; x < d->sh.n_expert; x++)
        for (uint32_t j = 0; j < d->sh.k; j++)
            if (ids[j] == (int32_t)x)
                for (uint32_t i = 0; i < d->E; i++)
                    d->moe[i] += wt[j] * d->rows[(uint64_t)j * d->E + i];
}

/* The shared expert after the routed sum (a dense FFN: alone), into d->moe. */
static int dec_shared(gm_cuda_dec *d, const gm_cuda_moe_layer *m, gm_err *err)
{
    float g = 1.0f;
    if (m->shared_gate.data) {
        mat_vec(d->a->row, &m->shared_gate, d->xn, d->lg, NULL);
        g = 1.0f / (1.0f + expf(-d->lg[0]));
    }
    int rc;
    if ((rc = gm_cuda_ffn_start(d->ffn, &m->shared_ffn, &m->shared, NULL, 1, d->xn, 1, err)) ||
        (rc = gm_cuda_ffn_finish(d->ffn, NULL, err)))
        return rc;
    const float *row = gm_cuda_ffn_rows(d->ffn);
    for (uint32_t i = 0; i < d->E; i++)
        d->moe[i] += g * row[i];
    return 0;
}

/* Layer l's attention of the token at pos, the residual normalised for the FFN, d->moe cleared. */
static int dec_front(gm_cuda_dec *d, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m, void *kc,
                     void *vc, uint32_t cap, uint32_t pos, gm_err *err)
{
    if (l != d->next || l >= d->sh.n_layer)
        return gm_err_set(err, GM_EINVAL, "host stand-in: layer %u where %u was due", l, d->next);
    dec_add_norm(d, l ? d->moe : NULL, m->attn_norm);
    int rc = gm_cuda_attn_token(d->a, w, kc, vc, cap, pos, d->cs, d->xn, d->att, d->k + l * d->kv_row,
                                d->v + l * d->kv_row, err);
    if (rc)
        return rc;
    dec_add_norm(d, d->att, m->ffn_norm);
    memset(d->moe, 0, d->E * 4ull);
    return 0;
}

/* Layer l's end after its routed experts' rows: their sum, the shared expert's. */
static int dec_back(gm_cuda_dec *d, uint32_t l, const gm_cuda_moe_layer *m, gm_err *err)
{
    int rc;
    if (m->router.data)
        dec_sum(d, l);
    if (m->shared.gate && (rc = dec_shared(d, m, err)))
        return rc;
    d->next = l + 1;
    return 0;
}

int gm_cuda_dec_layer(gm_cuda_dec *d, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m, void *kc,
                      void *vc, uint32_t cap, uint32_t pos, gm_err *err)
{
    int rc = dec_front(d, l, w, m, kc, vc, cap, pos, err);
    if (rc)
        return rc;
    if (m->router.data) {
        dec_route(d, l, m);
        if ((rc = dec_expert_rows(d, l, m, m->experts, err)))
            return rc;
    }
    return dec_back(d, l, m, err);
}

int gm_cuda_dec_route(gm_cuda_dec *d, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m,
                      const gm_cuda_expert *table, void *kc, void *vc, uint32_t cap, uint32_t pos, gm_err *err)
{
    if (!m->router.data || !table)
        return gm_err_set(err, GM_EINVAL, "host stand-in: layer %u has no routed experts to split", l);
    int rc = dec_front(d, l, w, m, kc, vc, cap, pos, err);
    if (rc)
        return rc;
    memcpy(d->tab, table, d->sh.n_expert * sizeof *d->tab);
    dec_route(d, l, m);
    return dec_expert_rows(d, l, m, d->tab, err);
}

float *gm_cuda_dec_host_rows(gm_cuda_dec *d) { return d->hrows; }

int gm_cuda_dec_rows(gm_cuda_dec *d, uint32_t l, const gm_cuda_moe_layer *m, bool any, gm_err *err)
{
    if (l != d->next || !m->router.data)
        return gm_err_set(err, GM_EINVAL, "host stand-in: the rows of layer %u where %u was due", l, d->next);
    const int32_t *ids = d->ids + (uint64_t)l * d->sh.k;
    for (uint32_t j = 0; any && j < d->sh.k; j++)
        if (!d->tab[ids[j]].gate)
            memcpy(d->rows + (uint64_t)j * d->E, d->hrows + (uint64_t)j * d->E, d->E * 4ull);
    return dec_back(d, l, m, err);
}

int gm_cuda_dec_end(gm_cuda_dec *d, const float *out_norm, const gm_cuda_mat *head, float *logits, gm_err *err)
{
    if (d->next != d->sh.n_layer)
        return gm_err_set(err, GM_EINVAL, "host stand-in: the token ends after %u layers", d->next);
    d->next = UINT32_MAX;
    dec_add_norm(d, d->moe, out_norm);
    if (head && logits)
        mat_vec(d->a->row, head, d->xn, logits, NULL);
    return 0;
}

const float *gm_cuda_dec_x(const gm_cuda_dec *d) { return d->x; }
const float *gm_cuda_dec_xn(const gm_cuda_dec *d) { return d->xn; }
const void *gm_cuda_dec_k_rows(const gm_cuda_dec *d, uint32_t l) { return d->k + l * d->kv_row; }
const void *gm_cuda_dec_v_rows(const gm_cuda_dec *d, uint32_t l) { return d->v + l * d->kv_row; }
const int32_t *gm_cuda_dec_ids(const gm_cuda_dec *d, uint32_t l) { return d->ids + (uint64_t)l * d->sh.k; }
const float *gm_cuda_dec_weights(const gm_cuda_dec *d, uint32_t l) { return d->w + (uint64_t)l * d->sh.k; }
bool gm_cuda_dec_graph(const gm_cuda_dec *d) { return (void)d, false; } /* the stand-in replays nothing */
uint64_t gm_cuda_dec_replays(const gm_cuda_dec *d) { return (void)d, 0; }

int gm_cuda_download(void *dst, const void *src, uint64_t bytes, gm_err *err)
{
    (void)err;
    memcpy(dst, src, bytes);
    return 0;
}

/* ---- a prompt's chunk: layer by layer, each token through the stand-in's decode token's steps
 * in turn (one decode token's state a token; the device's chunk computes what its decode tokens
 * would, with other rounding), at most GM_HOST_PF_TOKENS tokens a chunk, so that the engine's
 * splitting of longer chunks runs ---- */

#define GM_HOST_PF_TOKENS 7u

struct gm_cuda_pf {
    gm_cuda_dec *d[GM_HOST_PF_TOKENS];
    uint32_t max, n, pos, next, routed, E, n_rot;
    uint32_t *cnt; /* [n_expert]: the routed layer's pairs of each expert */
    float *x;      /* the chunk's rows, after its end */
    float xn[4096];
    uint8_t *bounce[GM_CUDA_PF_BOUNCE]; /* the staging copies' buffers (gm_cuda_pf_bounce) */
    uint64_t bounce_bytes;
    uint32_t next_bounce;
    bool out;                           /* buffer next_bounce handed out, not yet sent */
};

/* The staging copies' page-locked buffers: gm_host_cuda_bounce_bytes each (0: the backend's
 * size; a test makes them small, so that a pass's copies split across them); each is handed out
 * filled with 0xa5, so that a copy queued before its bytes were written brings the pattern into
 * the device; a copy from a buffer that is not the one handed out is refused. While
 * gm_host_cuda_bounce_refuse, page-locking them fails as a host's refusal would. */
uint64_t gm_host_cuda_bounce_bytes;
int gm_host_cuda_bounce_refuse;
uint64_t gm_host_cuda_bounces; /* buffers sent */

bool gm_cuda_pf_supports(const gm_cuda_attn_shape *sh, const char **why)
{
    (void)sh, (void)why;
    return true;
}

void gm_cuda_pf_free(gm_cuda_pf *p)
{
    if (!p)
        return;
    for (uint32_t t = 0; t < GM_HOST_PF_TOKENS; t++)
        gm_cuda_dec_free(p->d[t]);
    free(p->x);
    free(p->cnt);
    for (int i = 0; i < GM_CUDA_PF_BOUNCE; i++)
        free(p->bounce[i]);
    free(p);
}

int gm_cuda_pf_create(gm_cuda_pf **out, gm_cuda_attn *a, const gm_cuda_dec_shape *sh, uint32_t max_tokens,
                      gm_err *err)
{
    *out = NULL;
    gm_cuda_pf *p = calloc(1, sizeof *p);
    if (!p)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    p->max = max_tokens < GM_HOST_PF_TOKENS ? max_tokens : GM_HOST_PF_TOKENS;
    p->E = a->sh.n_embd;
    p->n_rot = a->sh.n_rot;
    p->next = p->routed = UINT32_MAX;
    int rc = 0;
    for (uint32_t t = 0; t < p->max && !rc; t++)
        rc = gm_cuda_dec_create(&p->d[t], a, sh, err);
    if (!rc && (p->E > 4096 || !(p->x = malloc((uint64_t)p->max * p->E * 4)) ||
                !(p->cnt = calloc(sh->n_expert, sizeof *p->cnt))))
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
    if (rc) {
        gm_cuda_pf_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

uint32_t gm_cuda_pf_max_tokens(const gm_cuda_pf *p) { return p->max; }

int gm_cuda_pf_begin(gm_cuda_pf *p, const float *x, const float *rope_cs, uint32_t pos, uint32_t n, gm_err *err)
{
    if (!n || n > p->max)
        return gm_err_set(err, GM_EINVAL, "host stand-in: a chunk of %u tokens (at most %u)", n, p->max);
    for (uint32_t t = 0; t < n; t++) {
        int rc = gm_cuda_dec_begin(p->d[t], x + (uint64_t)t * p->E, rope_cs + (uint64_t)t * p->n_rot, pos + t, err);
        if (rc)
            return rc;
    }
    p->n = n;
    p->pos = pos;
    p->next = 0;
    p->routed = UINT32_MAX;
    return 0;
}

/* Layer l's attention of every token in turn (each writes its cache rows before the next reads
 * them), then its routing when route. */
static int pf_front(gm_cuda_pf *p, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m, void *kc,
                    void *vc, uint32_t cap, bool route, gm_err *err)
{
    if (l != p->next || l >= p->d[0]->sh.n_layer || p->routed != UINT32_MAX)
        return gm_err_set(err, GM_EINVAL, "host stand-in: chunk layer %u where %u was due", l, p->next);
    if (p->pos + p->n > cap)
        return gm_err_set(err, GM_ERANGE, "host stand-in: a chunk past a cache of %u rows", cap);
    for (uint32_t t = 0; t < p->n; t++) {
        int rc = dec_front(p->d[t], l, w, m, kc, vc, cap, p->pos + t, err);
        if (rc)
            return rc;
        if (route)
            dec_route(p->d[t], l, m);
    }
    return 0;
}

/* The tokens' experts of table, then, when last, the end of layer l. */
static int pf_back(gm_cuda_pf *p, uint32_t l, const gm_cuda_moe_layer *m, const gm_cuda_expert *table, bool last,
                   gm_err *err)
{
    for (uint32_t t = 0; t < p->n; t++) {
        int rc;
        if ((table && (rc = dec_expert_rows(p->d[t], l, m, table, err))) ||
            (last && (rc = dec_back(p->d[t], l, m, err))))
            return rc;
    }
    if (last) {
        p->routed = UINT32_MAX;
        p->next = l + 1;
    }
    return 0;
}

int gm_cuda_pf_layer(gm_cuda_pf *p, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m, void *kc,
                     void *vc, uint32_t cap, gm_err *err)
{
    int rc = pf_front(p, l, w, m, kc, vc, cap, m->router.data != NULL, err);
    return rc ? rc : pf_back(p, l, m, m->router.data ? m->experts : NULL, true, err);
}

int gm_cuda_pf_route(gm_cuda_pf *p, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m, void *kc,
                     void *vc, uint32_t cap, const uint32_t **count, gm_err *err)
{
    *count = NULL;
    if (!m->router.data)
        return gm_err_set(err, GM_EINVAL, "host stand-in: layer %u has no routed experts", l);
    int rc = pf_front(p, l, w, m, kc, vc, cap, true, err);
    if (rc)
        return rc;
    const uint32_t N = p->d[0]->sh.n_expert, K = p->d[0]->sh.k;
    memset(p->cnt, 0, N * sizeof *p->cnt);
    for (uint32_t t = 0; t < p->n; t++)
        for (uint32_t j = 0; j < K; j++)
            p->cnt[p->d[t]->ids[(uint64_t)l * K + j]]++;
    p->routed = l;
    *count = p->cnt;
    return 0;
}

int gm_cuda_pf_upload(gm_cuda_pf *p, void *dst, uint64_t dpitch, const void *src, uint64_t spitch, uint64_t width,
                      uint64_t rows, gm_err *err)
{
    if (p->routed == UINT32_MAX)
        return gm_err_set(err, GM_EINVAL, "host stand-in: a copy outside a routed layer");
    if (width > dpitch || width > spitch)
        return gm_err_set(err, GM_EINVAL, "host stand-in: rows of %llu bytes %llu and %llu apart",
                          (unsigned long long)width, (unsigned long long)dpitch, (unsigned long long)spitch);
    for (int i = 0; i < GM_CUDA_PF_BOUNCE; i++) {
        const uint8_t *b = p->bounce[i], *from = src;
        if (b && from >= b && from < b + p->bounce_bytes &&
            (!p->out || i != (int)p->next_bounce || from + (rows - 1) * spitch + width > b + p->bounce_bytes))
            return gm_err_set(err, GM_EINVAL, "host stand-in: a copy from staging buffer %d, not the one handed out, "
                              "or past its end", i);
    }
    for (uint64_t r = 0; r < rows; r++)
        memcpy((uint8_t *)dst + r * dpitch, (const uint8_t *)src + r * spitch, width);
    return 0;
}

int gm_cuda_pf_bounce(gm_cuda_pf *p, uint8_t **buf, uint64_t *bytes, gm_err *err)
{
    *buf = NULL;
    *bytes = 0;
    if (gm_host_cuda_bounce_refuse)
        return gm_err_set(err, GM_ENOMEM, "host stand-in: page-locking the staging buffers refused");
    if (!p->bounce[0]) {
        p->bounce_bytes = gm_host_cuda_bounce_bytes ? gm_host_cuda_bounce_bytes : GM_CUDA_PF_BOUNCE_BYTES;
        for (int i = 0; i < GM_CUDA_PF_BOUNCE; i++)
            if (!(p->bounce[i] = malloc(p->bounce_bytes)))
                return gm_err_set(err, GM_ENOMEM, "host stand-in: out of memory");
    }
    if (!p->out)
        memset(p->bounce[p->next_bounce], 0xa5, p->bounce_bytes);
    p->out = true;
    *buf = p->bounce[p->next_bounce];
    *bytes = p->bounce_bytes;
    return 0;
}

int gm_cuda_pf_bounce_sent(gm_cuda_pf *p, gm_err *err)
{
    if (!p->out)
        return gm_err_set(err, GM_EINVAL, "host stand-in: a staging buffer sent that was not handed out");
    p->out = false;
    p->next_bounce = (p->next_bounce + 1) % GM_CUDA_PF_BOUNCE;
    gm_host_cuda_bounces++;
    return 0;
}

int gm_cuda_pf_copy(gm_cuda_pf *p, void *dst, const void *src, uint64_t bytes, gm_err *err)
{
    if (p->next == UINT32_MAX)
        return gm_err_set(err, GM_EINVAL, "host stand-in: a copy outside a chunk");
    memmove(dst, src, bytes);
    return 0;
}

int gm_cuda_pf_experts(gm_cuda_pf *p, uint32_t l, const gm_cuda_moe_layer *m, const gm_cuda_expert *table, bool last,
                       gm_err *err)
{
    if (p->routed != l)
        return gm_err_set(err, GM_EINVAL, "host stand-in: layer %u's experts before its routing", l);
    return pf_back(p, l, m, table, last, err);
}

int gm_cuda_pf_end(gm_cuda_pf *p, const float *out_norm, const gm_cuda_mat *head, float *logits, bool all,
                   gm_err *err)
{
    const uint32_t L = p->d[0]->sh.n_layer;
    if (p->next != L)
        return gm_err_set(err, GM_EINVAL, "host stand-in: the chunk ends after %u layers", p->next);
    p->next = UINT32_MAX;
    for (uint32_t t = 0; t < p->n; t++) {
        const bool last = t + 1 == p->n;
        float *lg = !logits ? NULL : all ? logits + (uint64_t)t * head->n_rows : last ? logits : NULL;
        int rc = gm_cuda_dec_end(p->d[t], out_norm, lg ? head : NULL, lg, err);
        if (rc)
            return rc;
        memcpy(p->x + (uint64_t)t * p->E, gm_cuda_dec_x(p->d[t]), p->E * 4ull);
        if (last)
            memcpy(p->xn, gm_cuda_dec_xn(p->d[t]), p->E * 4ull);
    }
    return 0;
}

const float *gm_cuda_pf_x(const gm_cuda_pf *p) { return p->x; }
const float *gm_cuda_pf_xn(const gm_cuda_pf *p) { return p->xn; }
