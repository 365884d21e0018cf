/* Hyper-connections (Hy4's independent form): n_hc parallel residual streams instead of one.
 *
 * The residual of a token is n_hc rows of n_embd, s->x + t * n_hc * n_embd; the embedding starts
 * every stream from the token's row (fwd.c). Around each block (llama.cpp's
 * src/models/hy-v4.cpp, the reference):
 *   f      = rms_norm(the n_hc streams as one row of n_hc n_embd)      no weight
 *   mix    = fn f                                                      2 n_hc values
 *   pre_j  = sigmoid(mix_j scale_0 + base_j) + eps
 *   post_j = magnitude sigmoid(mix_{n_hc + j} scale_1 + base_{n_hc + j}) + eps
 *   input  = sum_j pre_j x_j                                           the block's input row
 * and after the block, each stream takes its share of the output: x_j += post_j out. The output
 * head mixes the streams the same way (n_hc weights, pre only) into the row the output norm
 * reads. The streams never mix with each other; only the block input and output are weighted.
 * Summation order and float32 arithmetic follow the reference's. */
#include <math.h>
#include <string.h>

#include "infer/recipe.h"

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Into s->hc_mix (n rows of n_out): fn times the rms-normalised streams of the n tokens (the
 * normalised rows staged in s->tmp). */
static int mixes(gm_fwd *s, const float *x, const gm_mat *fn, uint32_t n, uint32_t n_out, gm_err *err)
{
    const gm_engine *e = s->e;
    const uint32_t W = e->n_hc * e->n_embd;
    gm_rms_norm(x, NULL, s->tmp, n, W, e->rms_eps);
    return gm_project(s, fn, s->tmp, W, n, s->hc_mix, n_out, err);
}

/* out[t] = sum_j w[t][j] x[t][j] over the streams, n rows of n_embd. */
static void reduce(const gm_engine *e, const float *x, const float *w, uint64_t w_stride, uint32_t n, float *out)
{
    const uint32_t H = e->n_hc, E = e->n_embd;
    for (uint32_t t = 0; t < n; t++) {
        const float *xt = x + (uint64_t)t * H * E, *wt = w + t * w_stride;
        float *o = out + (uint64_t)t * E;
        for (uint32_t d = 0; d < E; d++)
            o[d] = xt[d] * wt[0];
        for (uint32_t j = 1; j < H; j++)
            for (uint32_t d = 0; d < E; d++)
                o[d] += xt[(uint64_t)j * E + d] * wt[j];
    }
}

int gm_hc_pre(gm_fwd *s, const gm_mat *fn, const float *base, const float *scale, uint32_t n, float *out,
              gm_err *err)
{
    const gm_engine *e = s->e;
    const uint32_t H = e->n_hc;
    int rc;
    if ((rc = mixes(s, s->x, fn, n, 2 * H, err)))
        return rc;
    for (uint32_t t = 0; t < n; t++) {
        float *m = s->hc_mix + (uint64_t)t * 2 * H;
        for (uint32_t j = 0; j < H; j++) {
            m[j] = sigmoid(m[j] * scale[0] + base[j]) + e->hc_eps;
            m[H + j] = sigmoid(m[H + j] * scale[1] + base[H + j]) * e->hc_magnitude + e->hc_eps;
        }
    }
    reduce(e, s->x, s->hc_mix, 2ull * H, n, out);
    return 0;
}

void gm_hc_post(gm_fwd *s, const float *out, uint32_t n)
{
    const gm_engine *e = s->e;
    const uint32_t H = e->n_hc, E = e->n_embd;
    for (uint32_t t = 0; t < n; t++) {
        const float *post = s->hc_mix + (uint64_t)t * 2 * H + H, *o = out + (uint64_t)t * E;
        for (uint32_t j = 0; j < H; j++) {
            float *x = s->x + ((uint64_t)t * H + j) * E;
            for (uint32_t d = 0; d < E; d++)
                x[d] += o[d] * post[j];
        }
    }
}

int gm_hc_head(gm_fwd *s, uint32_t first, uint32_t m, float *out, gm_err *err)
{
    const gm_engine *e = s->e;
    const uint32_t H = e->n_hc;
    const float *x = s->x + (uint64_t)first * H * e->n_embd;
    int rc;
    if ((rc = mixes(s, x, &e->hc_head_fn, m, H, err)))
        return rc;
    for (uint32_t t = 0; t < m; t++)
        for (uint32_t j = 0; j < H; j++) {
            float *w = s->hc_mix + (uint64_t)t * H + j;
            *w = sigmoid(*w * e->hc_head_scale[0] + e->hc_head_base[j]) + e->hc_eps;
        }
    reduce(e, x, s->hc_mix, H, m, out);
    return 0;
}

/* ---- the low-rank form (qwen4exp; llama.cpp's src/models/qwen4exp.cpp, build_hc_mix and
 * build_hc_combine): around each block
 *   xn_j   = rms_norm(x_j) * norm_j                       each stream by itself
 *   gate   = up silu((down xn) / n_hc)                    xn the n_hc streams as one row
 *   input  = (sum_j xn_j sigmoid(gate_j)) / n_hc
 *   inj    = inject xn                                    n_hc values
 * and after the block x_j += out * 2 sigmoid(inj_j / n_hc). The output head mixes the same way
 * without an injection, and its mix is the row the output head reads (there is no output norm). */

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* The gated mean of the n tokens' streams at x into out; the normalised streams stay in s->tmp. */
static int hcl_mix(gm_fwd *s, const float *x, const float *norm, const gm_mat *down, const gm_mat *up, uint32_t n,
                   float *out, gm_err *err)
{
    const gm_engine *e = s->e;
    const uint32_t H = e->n_hc, E = e->n_embd, R = e->hc_lr;
    const uint64_t W = (uint64_t)H * E;
    float *xn = s->tmp, *gate = s->hc_gate, *lo = s->hc_gate + (uint64_t)s->max_chunk * W;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < H; j++)
            gm_rms_norm(x + t * W + (uint64_t)j * E, norm + (uint64_t)j * E, xn + t * W + (uint64_t)j * E, 1, E,
                        e->rms_eps);
    int rc;
    if ((rc = gm_project(s, down, xn, W, n, lo, R, err)))
        return rc;
    for (uint64_t i = 0; i < (uint64_t)n * R; i++)
        lo[i] = silu(lo[i] * (1.0f / (float)H));
    if ((rc = gm_project(s, up, lo, R, n, gate, W, err)))
        return rc;
    for (uint32_t t = 0; t < n; t++) {
        const float *xt = xn + t * W, *gt = gate + t * W;
        float *o = out + (uint64_t)t * E;
        for (uint32_t d = 0; d < E; d++)
            o[d] = xt[d] * sigmoid(gt[d]);
        for (uint32_t j = 1; j < H; j++)
            for (uint32_t d = 0; d < E; d++)
                o[d] += xt[(uint64_t)j * E + d] * sigmoid(gt[(uint64_t)j * E + d]);
        for (uint32_t d = 0; d < E; d++)
            o[d] *= 1.0f / (float)H;
    }
    return 0;
}

int gm_hcl_pre(gm_fwd *s, const float *norm, const gm_mat *down, const gm_mat *up, const gm_mat *inject, uint32_t n,
               float *out, gm_err *err)
{
    const gm_engine *e = s->e;
    int rc;
    if ((rc = hcl_mix(s, s->x, norm, down, up, n, out, err)))
        return rc;
    return gm_project(s, inject, s->tmp, (uint64_t)e->n_hc * e->n_embd, n, s->hc_mix, e->n_hc, err);
}

void gm_hcl_post(gm_fwd *s, const float *out, uint32_t n)
{
    const gm_engine *e = s->e;
    const uint32_t H = e->n_hc, E = e->n_embd;
    for (uint32_t t = 0; t < n; t++) {
        const float *o = out + (uint64_t)t * E;
        for (uint32_t j = 0; j < H; j++) {
            const float w = 2.0f * sigmoid(s->hc_mix[(uint64_t)t * H + j] * (1.0f / (float)H));
            float *x = s->x + ((uint64_t)t * H + j) * E;
            for (uint32_t d = 0; d < E; d++)
                x[d] += o[d] * w;
        }
    }
}

int gm_hcl_head(gm_fwd *s, uint32_t first, uint32_t m, float *out, gm_err *err)
{
    const gm_engine *e = s->e;
    return hcl_mix(s, s->x + (uint64_t)first * e->n_hc * e->n_embd, e->hc_head_norm, &e->hc_head_down,
                   &e->hc_head_up, m, out, err);
}

/* ---- Sinkhorn mixing (DeepSeek-V4; llama.cpp's src/models/deepseek4.cpp, build_hc_pre,
 * build_hc_sinkhorn and build_hc_post): around each block, from f as in Hy4's form,
 *   mix    = fn f                                                     (2 + n_hc) n_hc values
 *   pre_j  = sigmoid(mix_j scale_0 + base_j) + eps
 *   post_j = 2 sigmoid(mix_{n_hc + j} scale_1 + base_{n_hc + j})
 *   C      = the n_hc x n_hc matrix mix_{2 n_hc + ..} scale_2 + base_{2 n_hc + ..}, element
 *            (dst, src) at src n_hc + dst, made doubly stochastic: a softmax over dst for each src,
 *            + eps, then columns (the sum over src for each dst, + eps) normalised, then
 *            (sinkhorn_iterations - 1) times rows (over dst for each src) and columns again
 *   input  = sum_j pre_j x_j
 * and after the block every stream is rebuilt from all of them:
 *   x'_dst = post_dst out + sum_src C(dst, src) x_src. */

/* The Sinkhorn normalisation of one token's c[src * H + dst]. */
static void sinkhorn(float *c, uint32_t H, uint32_t iters, float eps)
{
    for (uint32_t src = 0; src < H; src++) {
        float *r = c + (uint64_t)src * H, mx = -INFINITY;
        for (uint32_t d = 0; d < H; d++)
            mx = r[d] > mx ? r[d] : mx;
        double sum = 0;
        for (uint32_t d = 0; d < H; d++) {
            r[d] = expf(r[d] - mx);
            sum += r[d];
        }
        const float inv = (float)(1.0 / sum);
        for (uint32_t d = 0; d < H; d++)
            r[d] = r[d] * inv + eps;
    }
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) /* rows: over dst for each src */
            for (uint32_t src = 0; src < H; src++) {
                float *r = c + (uint64_t)src * H, sum = 0.0f;
                for (uint32_t d = 0; d < H; d++)
                    sum += r[d];
                sum += eps;
                for (uint32_t d = 0; d < H; d++)
                    r[d] /= sum;
            }
        for (uint32_t d = 0; d < H; d++) { /* columns: over src for each dst */
            float sum = 0.0f;
            for (uint32_t src = 0; src < H; src++)
                sum += c[(uint64_t)src * H + d];
            sum += eps;
            for (uint32_t src = 0; src < H; src++)
                c[(uint64_t)src * H + d] /= sum;
        }
    }
}

int gm_hcs_pre(gm_fwd *s, const gm_mat *fn, const float *base, const float *scale, uint32_t n, float *out,
               gm_err *err)
{
    const gm_engine *e = s->e;
    const uint32_t H = e->n_hc;
    const uint64_t M = (2ull + H) * H;
    int rc;
    if ((rc = mixes(s, s->x, fn, n, (uint32_t)M, err)))
        return rc;
    for (uint32_t t = 0; t < n; t++) {
        float *m = s->hc_mix + t * M;
        for (uint32_t j = 0; j < H; j++) {
            m[j] = sigmoid(m[j] * scale[0] + base[j]) + e->hc_eps;
            m[H + j] = 2.0f * sigmoid(m[H + j] * scale[1] + base[H + j]);
        }
        for (uint32_t i = 2 * H; i < M; i++)
            m[i] = m[i] * scale[2] + base[i];
        sinkhorn(m + 2 * H, H, e->hc_sinkhorn, e->hc_eps);
    }
    reduce(e, s->x, s->hc_mix, M, n, out);
    return 0;
}

void gm_hcs_post(gm_fwd *s, const float *out, uint32_t n)
{
    const gm_engine *e = s->e;
    const uint32_t H = e->n_hc, E = e->n_embd;
    const uint64_t M = (2ull + H) * H, W = (uint64_t)H * E;
    float *nx = s->xn; /* the block has consumed its input: the new streams are staged there */
    for (uint32_t t = 0; t < n; t++) {
        const float *m = s->hc_mix + t * M, *post = m + H, *c = m + 2 * H, *o = out + (uint64_t)t * E;
        const float *x = s->x + t * W;
        for (uint32_t dst = 0; dst < H; dst++) {
            float *y = nx + (uint64_t)dst * E;
            for (uint32_t d = 0; d < E; d++)
                y[d] = o[d] * post[dst];
            for (uint32_t src = 0; src < H; src++) {
                const float w = c[(uint64_t)src * H + dst], *xs = x + (uint64_t)src * E;
                for (uint32_t d = 0; d < E; d++)
                    y[d] += xs[d] * w;
            }
        }
        memcpy(s->x + t * W, nx, W * sizeof(float));
    }
}

/* ---- a layer on the streams ---- */

int gm_layer_hc(gm_fwd *s, uint32_t l, uint32_t n, gm_block_fn attn, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    int (*pre)(gm_fwd *, const gm_mat *, const float *, const float *, uint32_t, float *, gm_err *) =
        e->hc_sinkhorn ? gm_hcs_pre : gm_hc_pre;
    void (*post)(gm_fwd *, const float *, uint32_t) = e->hc_sinkhorn ? gm_hcs_post : gm_hc_post;
    const bool timed = e->profile && n == 1;
    int rc;
    const uint64_t t0 = timed ? gm_now_ns() : 0;
    if ((rc = pre(s, &w->hc_attn_fn, w->hc_attn_base, w->hc_attn_scale, n, s->xn, err)))
        return rc;
    gm_rms_norm(s->xn, w->attn_norm, s->xn, n, e->n_embd, e->rms_eps);
    if ((rc = attn(s, l, n, s->tmp, err)))
        return rc;
    post(s, s->tmp, n);
    const uint64_t t1 = timed ? gm_now_ns() : 0;
    if ((rc = pre(s, &w->hc_ffn_fn, w->hc_ffn_base, w->hc_ffn_scale, n, s->xn, err)))
        return rc;
    gm_rms_norm(s->xn, w->ffn_norm, s->xn, n, e->n_embd, e->rms_eps);
    if ((rc = gm_ffn_block(s, l, n, s->moe_out, err)))
        return rc;
    post(s, s->moe_out, n);
    if (timed) {
        e->prof_attn_ns[l] += t1 - t0;
        e->prof_ffn_ns[l] += gm_now_ns() - t1;
    }
    return 0;
}
