/* A decode token's attention and output head on the CUDA device (see gpu_attn.h). */
#include "infer/gpu_attn.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "infer/internal.h"

#ifdef GMLX_HAVE_CUDA

#include "backend/cuda/cuda.h"
#include "gguf/types.h"
#include "stream/stream.h"

#define ALIGN 256u /* each array's start in the weights' slab */

struct gm_gpu_attn {
    gm_engine *e;
    gm_cuda_slab *slab;      /* every layer's weights */
    bool *ok;                /* [n_layer] */
    gm_cuda_attn_layer *w;   /* [n_layer]: device pointers */
    uint32_t n_ok;
    gm_cuda_mat head;        /* the output head in device memory (data NULL: on the CPU) */
    gm_cuda_mv *mv;          /* its product's scratch */
    uint64_t heads;          /* tokens whose logits the device computed */
    double head_s;
    uint64_t tokens;         /* layer attentions computed on the device */
    uint64_t put_rows;       /* prompt rows copied up */
    double token_s, put_s;
};

struct gm_gpu_kv {
    gm_cuda_attn *ca;
    gm_cuda_slab *slab;
    uint64_t *off;           /* [n_layer]: the layer's K rows; its V rows follow */
    uint64_t row_bytes;
    uint8_t *hk, *hv;        /* the token's rows as the device cached them */
};

static uint64_t up(uint64_t b) { return (b + ALIGN - 1) / ALIGN * ALIGN; }

static uint32_t cache_type(gm_kv_type t) { return t == GM_KV_F32 ? GM_TYPE_F32 : t == GM_KV_F16 ? GM_TYPE_F16 : GM_TYPE_Q8_0; }

static gm_cuda_attn_shape shape(const gm_engine *e, uint32_t cache)
{
    return (gm_cuda_attn_shape){.n_embd = e->n_embd, .n_head = e->n_head, .n_head_kv = e->n_head_kv,
                                .head_dim = e->head_dim, .n_rot = e->n_rot, .neox = e->ops.rope == GM_ROPE_NEOX,
                                .norm_after_rope = e->ops.qk_norm_after_rope, .eps = e->rms_eps,
                                .scale = e->attn_scale, .cache_type = cache};
}

static gm_cuda_mat cmat(const gm_mat *m) { return (gm_cuda_mat){m->data, m->type, m->n_rows, m->n_cols}; }

/* Whether layer l's attention can run on the device; why not in *why. */
static bool layer_ok(const gm_engine *e, uint32_t l, const char **why)
{
    const gm_layer_w *w = &e->layers[l];
    *why = e->mla                     ? "latent attention"
           : w->recurrent             ? NULL /* no attention to run */
           : w->window                ? "a sliding window"
           : e->n_idx_layers          ? "sparse attention"
           : e->ops.attn_out_gate     ? "an output gate"
           : e->ops.qk_norm_joint     ? "q/k norms over all heads"
                                      : "";
    if (!*why || **why) /* a reason, or none needed: it stays on the CPU */
        return false;
    const gm_mat *m[4] = {&w->wq, &w->wk, &w->wv, &w->wo};
    for (int i = 0; i < 4; i++) {
        uint64_t rb;
        gm_err sub = {0};
        if (!m[i]->data || gm_type_row_bytes(m[i]->type, m[i]->n_cols, &rb, &sub) || rb != m[i]->row_bytes) {
            *why = "projections with padded rows";
            return false;
        }
    }
    const gm_cuda_attn_shape sh = shape(e, GM_TYPE_F16);
    const gm_cuda_attn_layer cl = {.wq = cmat(&w->wq), .wk = cmat(&w->wk), .wv = cmat(&w->wv), .wo = cmat(&w->wo)};
    return gm_cuda_attn_supports(&sh, &cl, why);
}

/* The bytes of layer l's arrays in the slab, in the order upload_layer places them. */
static uint64_t layer_bytes(const gm_engine *e, uint32_t l)
{
    const gm_layer_w *w = &e->layers[l];
    const uint64_t qd = (uint64_t)e->n_head * e->head_dim, kvd = (uint64_t)e->n_head_kv * e->head_dim;
    uint64_t b = up(w->wq.n_rows * w->wq.row_bytes) + up(w->wk.n_rows * w->wk.row_bytes) +
                 up(w->wv.n_rows * w->wv.row_bytes) + up(w->wo.n_rows * w->wo.row_bytes);
    b += (w->bq ? up(qd * 4) : 0) + (w->bk ? up(kvd * 4) : 0) + (w->bv ? up(kvd * 4) : 0) +
         (w->bo ? up((uint64_t)e->n_embd * 4) : 0) + (w->q_norm ? up(e->head_dim * 4ull) : 0) +
         (w->k_norm ? up(e->head_dim * 4ull) : 0) + (w->sinks ? up(e->n_head * 4ull) : 0);
    return b;
}

/* Copies bytes of src (NULL: nothing) to the slab at *at; its device address, or NULL. */
static const void *put(uint8_t *base, uint64_t *at, const void *src, uint64_t bytes, int *rc, gm_err *err)
{
    if (!src || *rc)
        return NULL;
    uint8_t *dst = base + *at;
    *rc = gm_cuda_upload(dst, src, bytes, err);
    *at += up(bytes);
    return dst;
}

static int upload_layer(gm_gpu_attn *a, uint32_t l, uint64_t *at, gm_err *err)
{
    const gm_engine *e = a->e;
    const gm_layer_w *w = &e->layers[l];
    uint8_t *base = gm_cuda_slab_base(a->slab);
    const uint64_t qd = (uint64_t)e->n_head * e->head_dim, kvd = (uint64_t)e->n_head_kv * e->head_dim;
    gm_cuda_attn_layer *d = &a->w[l];
    int rc = 0;
    *d = (gm_cuda_attn_layer){.wq = cmat(&w->wq), .wk = cmat(&w->wk), .wv = cmat(&w->wv), .wo = cmat(&w->wo)};
    d->wq.data = put(base, at, w->wq.data, w->wq.n_rows * w->wq.row_bytes, &rc, err);
    d->wk.data = put(base, at, w->wk.data, w->wk.n_rows * w->wk.row_bytes, &rc, err);
    d->wv.data = put(base, at, w->wv.data, w->wv.n_rows * w->wv.row_bytes, &rc, err);
    d->wo.data = put(base, at, w->wo.data, w->wo.n_rows * w->wo.row_bytes, &rc, err);
    d->bq = put(base, at, w->bq, qd * 4, &rc, err);
    d->bk = put(base, at, w->bk, kvd * 4, &rc, err);
    d->bv = put(base, at, w->bv, kvd * 4, &rc, err);
    d->bo = put(base, at, w->bo, (uint64_t)e->n_embd * 4, &rc, err);
    d->q_norm = put(base, at, w->q_norm, e->head_dim * 4ull, &rc, err);
    d->k_norm = put(base, at, w->k_norm, e->head_dim * 4ull, &rc, err);
    d->sinks = put(base, at, w->sinks, e->n_head * 4ull, &rc, err);
    return rc;
}

void gm_gpu_attn_free(gm_gpu_attn *a)
{
    if (!a)
        return;
    gm_cuda_slab_free(a->slab);
    gm_cuda_mv_free(a->mv);
    free(a->ok);
    free(a->w);
    free(a);
}

/* A session's cache and scratch on the device for n_ctx positions of row_bytes rows. */
static uint64_t kv_bytes(const gm_gpu_attn *a, uint32_t n_ctx, uint64_t row_bytes)
{
    const gm_engine *e = a->e;
    const uint64_t parts = 64ull * e->n_head * (e->head_dim + 2) * 4; /* attn.cu's parts of a token */
    return 2ull * a->n_ok * e->n_head_kv * n_ctx * row_bytes + parts;
}

int gm_gpu_attn_create(gm_gpu_attn **out, gm_engine *e, const gm_gpu_device *dev, double vram_gb, uint32_t kv_ctx,
                       uint32_t kv_bits, uint64_t *held_bytes, uint64_t *later_bytes, gm_err *err)
{
    *out = NULL;
    *held_bytes = *later_bytes = 0;
    gm_gpu_attn *a = calloc(1, sizeof *a);
    if (!a)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    a->e = e;
    a->ok = calloc(e->n_layer, sizeof *a->ok);
    a->w = calloc(e->n_layer, sizeof *a->w);
    if (!a->ok || !a->w) {
        gm_gpu_attn_free(a);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    const char *why = NULL, *w1;
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < e->n_layer; l++) {
        if (!layer_ok(e, l, &w1)) {
            why = w1 ? w1 : why;
            continue;
        }
        a->ok[l] = true;
        a->n_ok++;
        bytes += layer_bytes(e, l);
    }
    /* the output head: a token's largest every-token product after the attention */
    const gm_mat *o = &e->output;
    uint64_t orb;
    gm_err osub = {0};
    a->head = cmat(o);
    const bool head = o->data && gm_type_row_bytes(o->type, o->n_cols, &orb, &osub) == 0 && orb == o->row_bytes &&
                      gm_cuda_mv_supports(&a->head);
    const uint64_t head_bytes = head ? up(o->n_rows * o->row_bytes) : 0;
    a->head.data = NULL;
    if (!a->n_ok)
        gm_log(GM_LOG_NOTE, "[gpu] attention runs on the CPU (%s)", why ? why : "no attention layer");
    if (!a->n_ok && !head) {
        gm_gpu_attn_free(a);
        return 0;
    }
    bytes += head_bytes;
    const uint64_t later = a->n_ok ? kv_bytes(a, kv_ctx ? kv_ctx : 4096, (uint64_t)e->head_dim * (kv_bits == 32 ? 4 : 2))
                                   : 0;
    const double room = vram_gb > 0 ? vram_gb * 1e9 : (double)dev->free_bytes;
    if ((double)(bytes + later) > room / 2) {
        gm_log(GM_LOG_NOTE, "[gpu] attention and output head on the CPU: their weights and cache (%.2f GB) would "
               "take more than half of the %.2f GB of device memory", (double)(bytes + later) / 1e9, room / 1e9);
        gm_gpu_attn_free(a);
        return 0;
    }
    gm_err aerr = {0};
    int rc = gm_cuda_slab_create(&a->slab, bytes, bytes, &aerr);
    if (rc == GM_ENOMEM) { /* the experts' tier may still fit in what the device has */
        gm_log(GM_LOG_NOTE, "[gpu] attention and output head on the CPU: %s", aerr.msg);
        gm_gpu_attn_free(a);
        return 0;
    }
    if (rc) {
        gm_gpu_attn_free(a);
        return gm_err_set(err, rc, "%s", aerr.msg);
    }
    uint64_t at = 0;
    for (uint32_t l = 0; l < e->n_layer && !rc; l++)
        if (a->ok[l])
            rc = upload_layer(a, l, &at, err);
    if (!rc && head) {
        a->head.data = put(gm_cuda_slab_base(a->slab), &at, o->data, o->n_rows * o->row_bytes, &rc, err);
        if (!rc)
            rc = gm_cuda_mv_create(&a->mv, o->n_rows, o->n_cols, err);
    }
    if (rc) {
        gm_gpu_attn_free(a);
        return rc;
    }
    if (a->n_ok)
        gm_log(GM_LOG_NOTE, "[gpu] attention of %u of %u layers on the device (%.2f GB of weights, a cache of %.2f "
               "GB for %u positions)", a->n_ok, e->n_layer - e->n_recurrent, (double)(bytes - head_bytes) / 1e9,
               (double)later / 1e9, kv_ctx ? kv_ctx : 4096);
    if (head)
        gm_log(GM_LOG_NOTE, "[gpu] output head on the device (%.2f GB)", (double)head_bytes / 1e9);
    if (why && a->n_ok)
        gm_log(GM_LOG_NOTE, "[gpu] the other layers' attention runs on the CPU (%s)", why);
    *held_bytes = bytes;
    *later_bytes = later;
    *out = a;
    return 0;
}

bool gm_gpu_attn_layer(const gm_gpu_attn *a, uint32_t l) { return a && l < a->e->n_layer && a->ok[l]; }

void gm_gpu_kv_free(gm_gpu_kv *kv)
{
    if (!kv)
        return;
    gm_cuda_attn_free(kv->ca);
    gm_cuda_slab_free(kv->slab);
    free(kv->off);
    free(kv->hk);
    free(kv->hv);
    free(kv);
}

int gm_gpu_kv_create(gm_gpu_kv **out, gm_gpu_attn *a, const gm_fwd *s, gm_err *err)
{
    *out = NULL;
    const gm_engine *e = a->e;
    if (!a->n_ok) /* the output head alone */
        return 0;
    const uint32_t ct = cache_type(s->kv_type);
    if (ct == GM_TYPE_Q8_0)
        return gm_err_set(err, GM_EUNSUPPORTED, "the device's attention reads a float32 or half cache, not 8-bit");
    gm_gpu_kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    kv->row_bytes = s->kv_row_bytes;
    kv->off = calloc(e->n_layer, sizeof *kv->off);
    kv->hk = malloc((uint64_t)e->n_head_kv * kv->row_bytes);
    kv->hv = malloc((uint64_t)e->n_head_kv * kv->row_bytes);
    int rc = 0;
    if (!kv->off || !kv->hk || !kv->hv)
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < e->n_layer && !rc; l++) {
        if (!a->ok[l])
            continue;
        kv->off[l] = bytes;
        bytes += up(2ull * e->n_head_kv * s->kv_cap[l] * kv->row_bytes);
    }
    const gm_cuda_attn_shape sh = shape(e, ct);
    if (!rc)
        rc = gm_cuda_slab_create(&kv->slab, bytes, bytes, err);
    if (!rc)
        rc = gm_cuda_attn_create(&kv->ca, &sh, s->n_ctx, err);
    if (rc) {
        gm_gpu_kv_free(kv);
        return rc;
    }
    *out = kv;
    return 0;
}

void gm_gpu_rope_cs(const gm_fwd *s, uint32_t t, float *cs)
{
    const uint32_t half = s->e->n_rot / 2;
    memcpy(cs, s->rope_cos + (uint64_t)t * half, half * sizeof(float));
    memcpy(cs + half, s->rope_sin + (uint64_t)t * half, half * sizeof(float));
}

void gm_gpu_kv_store(gm_fwd *s, uint32_t l, const void *k_rows, const void *v_rows)
{
    const uint64_t rb = s->kv_row_bytes;
    for (uint32_t h = 0; h < s->e->n_head_kv; h++) {
        const uint64_t at = gm_kv_at(s, l, h, s->pos);
        memcpy((uint8_t *)s->k_cache + at, (const uint8_t *)k_rows + h * rb, rb);
        memcpy((uint8_t *)s->v_cache + at, (const uint8_t *)v_rows + h * rb, rb);
    }
}

int gm_gpu_attn_token(gm_gpu_attn *a, gm_fwd *s, uint32_t l, float *out, gm_err *err)
{
    const gm_engine *e = s->e;
    gm_gpu_kv *kv = s->gkv;
    if (!kv || !gm_gpu_attn_layer(a, l) || e->n_rot > GM_CUDA_ATTN_MAX_HD)
        return gm_err_set(err, GM_EINVAL, "--gpu: layer %u's attention does not run on the device", l);
    const double t0 = gm_stream_now_s();
    const uint32_t cap = s->kv_cap[l];
    float cs[GM_CUDA_ATTN_MAX_HD];
    gm_gpu_rope_cs(s, 0, cs);
    void *kc = NULL, *vc = NULL;
    int rc = gm_gpu_kv_layer(kv, s, l, &kc, &vc, err);
    if (rc)
        return rc;
    rc = gm_cuda_attn_token(kv->ca, &a->w[l], kc, vc, cap, s->pos, cs, s->xn, out, kv->hk, kv->hv, err);
    if (rc)
        return rc;
    gm_gpu_kv_store(s, l, kv->hk, kv->hv);
    a->tokens++;
    a->token_s += gm_stream_now_s() - t0;
    return 0;
}

/* The rows of positions pos .. pos + n of layer l copied from the host's cache into the device's
 * (up), or back. */
static int kv_copy(gm_fwd *s, uint32_t l, uint32_t pos, uint32_t n, bool up, gm_err *err)
{
    const uint32_t cap = s->kv_cap[l];
    void *kcv = NULL, *vcv = NULL;
    int rc = gm_gpu_kv_layer(s->gkv, s, l, &kcv, &vcv, err);
    if (rc)
        return rc;
    uint8_t *dc[2] = {kcv, vcv}, *hc[2] = {s->k_cache, s->v_cache};
    const uint64_t rb = s->gkv->row_bytes, bytes = (uint64_t)n * rb; /* no ring: positions are rows */
    for (uint32_t h = 0; h < s->e->n_head_kv; h++) {
        const uint64_t at = gm_kv_at(s, l, h, pos), dev = ((uint64_t)h * cap + pos) * rb;
        for (int c = 0; c < 2; c++)
            if ((rc = up ? gm_cuda_upload(dc[c] + dev, hc[c] + at, bytes, err)
                         : gm_cuda_download(hc[c] + at, dc[c] + dev, bytes, err)))
                return rc;
    }
    return 0;
}

int gm_gpu_kv_get(gm_fwd *s, uint32_t l, uint32_t pos, uint32_t n, gm_err *err)
{
    return s->gkv && n ? kv_copy(s, l, pos, n, false, err) : 0;
}

int gm_gpu_kv_put(gm_gpu_attn *a, gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    gm_gpu_kv *kv = s->gkv;
    if (!kv || !gm_gpu_attn_layer(a, l) || !n)
        return 0;
    const double t0 = gm_stream_now_s();
    int rc = kv_copy(s, l, s->pos, n, true, err);
    if (rc)
        return rc;
    a->put_rows += n;
    a->put_s += gm_stream_now_s() - t0;
    return 0;
}

bool gm_gpu_head_on(const gm_gpu_attn *a) { return a && a->head.data; }

const gm_cuda_attn_layer *gm_gpu_attn_weights(const gm_gpu_attn *a, uint32_t l)
{
    return gm_gpu_attn_layer(a, l) ? &a->w[l] : NULL;
}

const gm_cuda_mat *gm_gpu_head_weights(const gm_gpu_attn *a) { return gm_gpu_head_on(a) ? &a->head : NULL; }

int gm_gpu_kv_layer(gm_gpu_kv *kv, const gm_fwd *s, uint32_t l, void **kc, void **vc, gm_err *err)
{
    const gm_engine *e = s->e;
    if (!kv || l >= e->n_layer || !kv->slab)
        return gm_err_set(err, GM_EINVAL, "--gpu: layer %u has no cache on the device", l);
    uint8_t *k = gm_cuda_slab_base(kv->slab) + kv->off[l];
    *kc = k;
    *vc = k + (uint64_t)e->n_head_kv * s->kv_cap[l] * kv->row_bytes;
    return 0;
}

gm_cuda_attn *gm_gpu_kv_attn(gm_gpu_kv *kv) { return kv ? kv->ca : NULL; }

int gm_gpu_head(gm_gpu_attn *a, const float *x, float *logits, gm_err *err)
{
    if (!gm_gpu_head_on(a))
        return gm_err_set(err, GM_EINVAL, "--gpu: the output head is not on the device");
    const double t0 = gm_stream_now_s();
    int rc = gm_cuda_mv_run(a->mv, &a->head, x, logits, err);
    a->heads += rc == 0;
    a->head_s += gm_stream_now_s() - t0;
    return rc;
}

void gm_gpu_attn_print_stats(const gm_gpu_attn *a, gm_strbuf *out)
{
    if (a && (a->tokens || a->put_rows))
        gm_strbuf_putf(out, "[gpu] attention on the device: %u layers, %llu layer-tokens in %.3f s (%.1f us each); "
                       "prompt rows copied up %llu in %.3f s\n",
                       a->n_ok, (unsigned long long)a->tokens, a->token_s,
                       a->tokens ? 1e6 * a->token_s / (double)a->tokens : 0.0,
                       (unsigned long long)(a->put_rows / (a->n_ok ? a->n_ok : 1)), a->put_s);
    if (a && a->heads)
        gm_strbuf_putf(out, "[gpu] output head on the device: %llu tokens in %.3f s (%.1f us each)\n",
                       (unsigned long long)a->heads, a->head_s, 1e6 * a->head_s / (double)a->heads);
}

#else /* no CUDA backend in this build: e->gpu_attn stays NULL */

int gm_gpu_attn_create(gm_gpu_attn **out, struct gm_engine *e, const gm_gpu_device *dev, double vram_gb,
                       uint32_t kv_ctx, uint32_t kv_bits, uint64_t *held_bytes, uint64_t *later_bytes, gm_err *err)
{
    (void)e, (void)dev, (void)vram_gb, (void)kv_ctx, (void)kv_bits, (void)err;
    *out = NULL;
    *held_bytes = *later_bytes = 0;
    return 0;
}
void gm_gpu_attn_free(gm_gpu_attn *a) { (void)a; }
bool gm_gpu_attn_layer(const gm_gpu_attn *a, uint32_t l) { return (void)a, (void)l, false; }
int gm_gpu_kv_create(gm_gpu_kv **out, gm_gpu_attn *a, const struct gm_fwd *s, gm_err *err)
{
    (void)a, (void)s;
    *out = NULL;
    return gm_err_set(err, GM_EUNSUPPORTED, "no CUDA backend");
}
void gm_gpu_kv_free(gm_gpu_kv *kv) { (void)kv; }
int gm_gpu_attn_token(gm_gpu_attn *a, struct gm_fwd *s, uint32_t l, float *out, gm_err *err)
{
    (void)a, (void)s, (void)l, (void)out;
    return gm_err_set(err, GM_EUNSUPPORTED, "no CUDA backend");
}
int gm_gpu_kv_put(gm_gpu_attn *a, struct gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    (void)a, (void)s, (void)l, (void)n, (void)err;
    return 0;
}
bool gm_gpu_head_on(const gm_gpu_attn *a) { return (void)a, false; }
int gm_gpu_head(gm_gpu_attn *a, const float *x, float *logits, gm_err *err)
{
    (void)a, (void)x, (void)logits;
    return gm_err_set(err, GM_EUNSUPPORTED, "no CUDA backend");
}
void gm_gpu_attn_print_stats(const gm_gpu_attn *a, gm_strbuf *out) { (void)a, (void)out; }

#endif
