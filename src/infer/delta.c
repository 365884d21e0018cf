/* The Gated DeltaNet block of Qwen3-Next's recurrent layers: norm, the input projections, a
 * causal depthwise convolution (kernel kconv) over the q/k/v channels followed by SiLU, the gated
 * delta rule per value head, a gated RMSNorm and the output projection, added to the residual.
 *
 * Per value head h (key head h / (n_v / n_k), as the reference repeats each key head for its
 * group of value heads), per token in order, with q and k L2-normalised and q scaled by
 * 1/sqrt(d_k):
 *   decay = exp(-exp(A_log[h]) * softplus(alpha + dt_bias[h])),  beta = sigmoid(b)
 *   S = decay S;  delta = beta (v - S^T k);  S += k delta^T;  o = S^T q
 *   out = rms_norm(o) * norm_weight * silu(z)       (sigmoid(z): qwen4exp)
 * S is the head's d_k x d_v state, kept in the session between calls like a KV cache but of a
 * fixed size; the convolution keeps the layer's last kconv - 1 inputs. The reference's chunked
 * form of the rule computes the same function; this one takes the tokens one by one, which for
 * a prefill costs about 4 d_k d_v multiply-adds per head and token, small beside the projections.
 * Heads run in parallel on the pool; a head's tokens run in order, so the result depends
 * neither on the thread count nor on how the tokens are chunked. */
#include <math.h>
#include <string.h>

#include "infer/recipe.h"

uint64_t gm_delta_channels(const gm_engine *e)
{
    return 2ull * e->dn_nk * e->dn_dk + (uint64_t)e->dn_nv * e->dn_dv;
}

uint64_t gm_delta_values(const gm_engine *e) { return (uint64_t)e->dn_nv * e->dn_dv; }

/* Floats of a session's dn_in row: channels, gates, then beta/alpha. */
static uint64_t in_row(const gm_engine *e)
{
    return gm_delta_channels(e) + gm_delta_values(e) + 2ull * e->dn_nv;
}

static float silu(float x) { return x / (1.0f + expf(-x)); }
static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* as torch's softplus: x itself past 20 */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ssm_in's rows are grouped per key head as [q | k | v of its value heads | z of them]: each
 * token's row is put in the order of the split layout, [q of all | k of all | v of all | z]. */
static void ungroup(gm_fwd *s, uint32_t n)
{
    const gm_engine *e = s->e;
    const uint64_t ld = in_row(e), dk = e->dn_dk, nk = e->dn_nk;
    const uint64_t rv = (uint64_t)(e->dn_nv / e->dn_nk) * e->dn_dv; /* a group's v (and z) */
    const uint64_t C = gm_delta_channels(e), width = C + gm_delta_values(e);
    for (uint32_t t = 0; t < n; t++) {
        float *row = s->dn_in + t * ld;
        memcpy(s->dn_row, row, width * sizeof(float));
        for (uint64_t g = 0; g < nk; g++) {
            const float *src = s->dn_row + g * (2 * dk + 2 * rv);
            memcpy(row + g * dk, src, dk * sizeof(float));
            memcpy(row + nk * dk + g * dk, src + dk, dk * sizeof(float));
            memcpy(row + 2 * nk * dk + g * rv, src + 2 * dk, rv * sizeof(float));
            memcpy(row + C + g * rv, src + 2 * dk + rv, rv * sizeof(float));
        }
    }
}

/* The causal convolution of the chunk's channels with the layer's last kconv - 1 inputs before
 * them, then SiLU, into dn_mixed; the state keeps the last kconv - 1 inputs. */
static void convolve(gm_fwd *s, const gm_layer_w *w, uint32_t n)
{
    const gm_engine *e = s->e;
    const uint64_t C = gm_delta_channels(e), ld = in_row(e);
    const int64_t K = e->dn_kconv;
    float *state = s->dn_conv_state + (uint64_t)w->dn_slot * (uint64_t)(K - 1) * C;
    for (uint32_t t = 0; t < n; t++) {
        float *y = s->dn_mixed + t * C;
        memset(y, 0, C * sizeof(float));
        for (int64_t j = 0; j < K; j++) {
            const int64_t u = (int64_t)t - (K - 1) + j; /* the input's token, < 0 in the state */
            const float *x = u >= 0 ? s->dn_in + (uint64_t)u * ld : state + (uint64_t)(K - 1 + u) * C;
            for (uint64_t c = 0; c < C; c++)
                y[c] += w->dn_conv[c * (uint64_t)K + (uint64_t)j] * x[c];
        }
        for (uint64_t c = 0; c < C; c++)
            y[c] = silu(y[c]);
    }
    /* state row j takes the input of token n - (K - 1) + j; a row still in the state is read
     * from a later row, not yet overwritten */
    for (int64_t j = 0; j < K - 1; j++) {
        const int64_t u = (int64_t)n - (K - 1) + j;
        const float *x = u >= 0 ? s->dn_in + (uint64_t)u * ld : state + (uint64_t)(K - 1 + u) * C;
        memmove(state + (uint64_t)j * C, x, C * sizeof(float));
    }
}

typedef struct dn_job {
    gm_fwd *s;
    const gm_layer_w *w;
    uint32_t n;
} dn_job;

/* Sum of squares of n floats. */
static float sumsq(const float *x, uint64_t n)
{
    float ss = 0.0f;
    for (uint64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    return ss;
}

/* One token of the delta rule on a head's d_k x d_v state S: q and k L2-normalised (q also scaled
 * by 1/sqrt(d_k)) into scratch [k | q | kv], S's row i decayed by exp(log_decay[per_key ? i : 0]),
 * delta = beta (v - S^T k), S += k delta^T, o = S^T q; then o = rms_norm(o) * norm (the caller
 * applies its gate). */
static void rule_step(const gm_engine *e, float *S, const float *q, const float *k, const float *v,
                      const float *log_decay, bool per_key, float beta, float l2_eps, const float *norm,
                      float *scratch, float *o)
{
    const uint64_t dk = e->dn_dk, dv = e->dn_dv;
    float *kn = scratch, *qn = scratch + dk, *kv = scratch + 2 * dk;
    const float qs = 1.0f / sqrtf(sumsq(q, dk) + l2_eps) / sqrtf((float)dk);
    const float ks = 1.0f / sqrtf(sumsq(k, dk) + l2_eps);
    for (uint64_t i = 0; i < dk; i++) {
        qn[i] = q[i] * qs;
        kn[i] = k[i] * ks;
    }
    /* S = decay S and kv = S^T k in one pass */
    const float head_decay = per_key ? 0.0f : expf(log_decay[0]);
    memset(kv, 0, dv * sizeof(float));
    for (uint64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv;
        const float decay = per_key ? expf(log_decay[i]) : head_decay;
        for (uint64_t c = 0; c < dv; c++) {
            Si[c] *= decay;
            kv[c] += Si[c] * kn[i];
        }
    }
    for (uint64_t c = 0; c < dv; c++)
        kv[c] = (v[c] - kv[c]) * beta; /* delta */
    /* S += k delta^T and o = S^T q in one pass */
    memset(o, 0, dv * sizeof(float));
    for (uint64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv;
        for (uint64_t c = 0; c < dv; c++) {
            Si[c] += kn[i] * kv[c];
            o[c] += Si[c] * qn[i];
        }
    }
    const float os = 1.0f / sqrtf(sumsq(o, dv) / (float)dv + e->rms_eps);
    for (uint64_t c = 0; c < dv; c++)
        o[c] = o[c] * os * norm[c];
}

/* Value heads part, part + n_parts, ... over the chunk's tokens. */
static void dn_part(void *ctx, int part, int n_parts)
{
    const dn_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const gm_layer_w *w = j->w;
    const uint64_t dk = e->dn_dk, dv = e->dn_dv, nk = e->dn_nk, nv = e->dn_nv, r = nv / nk;
    const uint64_t C = gm_delta_channels(e), Z = gm_delta_values(e), ld = in_row(e);
    float *kq = s->dn_row + (uint64_t)part * (2 * dk + dv); /* this part's k, q and kv */
    for (uint64_t h = (uint64_t)part; h < nv; h += (uint64_t)n_parts) {
        const uint64_t kh = e->ops.dn_tiled ? h % nk : h / r;
        /* beta and alpha of value head h in dn_in's last 2 nv floats */
        const uint64_t ib = w->dn_ba_split ? h : h / r * 2 * r + h % r, ia = w->dn_ba_split ? nv + h : ib + r;
        float *S = s->dn_state + ((uint64_t)w->dn_slot * nv + h) * dk * dv;
        for (uint32_t t = 0; t < j->n; t++) {
            const float *mix = s->dn_mixed + t * C;
            const float *in = s->dn_in + t * ld;
            const float *q = mix + kh * dk, *k = mix + nk * dk + kh * dk, *v = mix + 2 * nk * dk + h * dv;
            const float *z = in + C + h * dv, *ba = in + C + Z;
            const float log_decay = w->dn_a[h] * softplus(ba[ia] + w->dn_dt[h]);
            float *o = s->dn_o + t * Z + h * dv;
            rule_step(e, S, q, k, v, &log_decay, false, sigmoid(ba[ib]), e->rms_eps, w->dn_norm, kq, o);
            if (e->ops.dn_sigmoid_gate) /* qwen4exp */
                for (uint64_t c = 0; c < dv; c++)
                    o[c] *= sigmoid(z[c]);
            else
                for (uint64_t c = 0; c < dv; c++)
                    o[c] *= silu(z[c]);
        }
    }
}

/* KDA (Kimi Delta Attention, Kimi-K3's recurrent layers): the delta rule of dn_part with a decay
 * per key channel instead of per head, as many key as value heads (n_head of head_dim), and the
 * output gate a sigmoid (llama.cpp's src/models/kimi-k3.cpp and ggml's gated_delta_net):
 *   g_i  = lb sigmoid(exp(A_log[h]) (f_b f_a x + dt_bias)_i)     (kda.gate_lower_bound lb), or
 *          -exp(A_log[h]) softplus((f_b f_a x + dt_bias)_i)        without the key
 *   S_i = exp(g_i) S_i (row i of the d_k x d_v state);  delta = beta (v - S^T k);
 *   S += k delta^T;  o = S^T q;  out = rms_norm(o) * norm_weight * sigmoid(g_proj x)
 * with q and k L2-normalised (the model's epsilon) and q scaled by 1/sqrt(d_k). */
static void kda_part(void *ctx, int part, int n_parts)
{
    const dn_job *j = ctx;
    gm_fwd *s = j->s;
    const gm_engine *e = s->e;
    const gm_layer_w *w = j->w;
    const uint64_t dk = e->dn_dk, dv = e->dn_dv, nh = e->dn_nv;
    const uint64_t C = gm_delta_channels(e), Z = gm_delta_values(e), ld = in_row(e);
    float *kq = s->dn_row + (uint64_t)part * (2 * dk + dv);
    for (uint64_t h = (uint64_t)part; h < nh; h += (uint64_t)n_parts) {
        float *S = s->dn_state + ((uint64_t)w->dn_slot * nh + h) * dk * dv;
        for (uint32_t t = 0; t < j->n; t++) {
            const float *mix = s->dn_mixed + t * C;
            const float *in = s->dn_in + t * ld;
            const float *q = mix + h * dk, *k = mix + nh * dk + h * dk, *v = mix + 2 * nh * dk + h * dv;
            const float *gate = in + C + h * dv, *g = s->kda_g + t * Z + h * dk;
            float *o = s->dn_o + t * Z + h * dv;
            rule_step(e, S, q, k, v, g, true, sigmoid(in[C + Z + h]), e->rms_eps, w->dn_norm, kq, o);
            for (uint64_t c = 0; c < dv; c++)
                o[c] *= sigmoid(gate[c]);
        }
    }
}

int gm_kda_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const uint32_t E = e->n_embd;
    const uint64_t C = gm_delta_channels(e), Z = gm_delta_values(e), ld = in_row(e), dk = e->dn_dk;
    int rc;
    /* dn_in: [q | k | v] (the convolution's channels), the output gate, beta per head */
    if ((rc = gm_project(s, &w->kda_q, s->xn, E, n, s->dn_in, ld, err)) ||
        (rc = gm_project(s, &w->kda_k, s->xn, E, n, s->dn_in + Z, ld, err)) ||
        (rc = gm_project(s, &w->kda_v, s->xn, E, n, s->dn_in + 2 * Z, ld, err)) ||
        (rc = gm_project(s, &w->dn_z, s->xn, E, n, s->dn_in + C, ld, err)) ||
        (rc = gm_project(s, &w->dn_ba, s->xn, E, n, s->dn_in + C + Z, ld, err)) ||
        (rc = gm_project(s, &w->kda_fa, s->xn, E, n, s->tmp, dk, err)) ||
        (rc = gm_project(s, &w->kda_fb, s->tmp, dk, n, s->kda_g, Z, err)))
        return rc;
    for (uint32_t t = 0; t < n; t++)
        for (uint64_t c = 0; c < Z; c++) {
            float *g = s->kda_g + t * Z + c;
            const float a = w->dn_a[c / dk]; /* -exp(A_log) of the channel's head */
            const float x = *g + w->dn_dt[c];
            *g = e->kda_lb ? e->kda_lower_bound * sigmoid(-(x * a)) : softplus(x) * a;
        }
    convolve(s, w, n);
    dn_job job = {s, w, n};
    int parts = e->n_threads < (int)e->dn_nv ? e->n_threads : (int)e->dn_nv;
    gm_pool_run(e->pool, kda_part, &job, parts);
    return gm_project(s, &w->dn_out, s->dn_o, Z, n, out, E, err);
}

int gm_delta_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    const uint32_t E = e->n_embd;
    const uint64_t C = gm_delta_channels(e), Z = gm_delta_values(e), ld = in_row(e);
    int rc;
    if (w->dn_fused) {
        if ((rc = gm_project(s, &w->dn_qkv, s->xn, E, n, s->dn_in, ld, err)))
            return rc;
        ungroup(s, n);
    } else if ((rc = gm_project(s, &w->dn_qkv, s->xn, E, n, s->dn_in, ld, err)) ||
               (rc = gm_project(s, &w->dn_z, s->xn, E, n, s->dn_in + C, ld, err))) {
        return rc;
    }
    if ((rc = gm_project(s, &w->dn_ba, s->xn, E, n, s->dn_in + C + Z, ld, err)) ||
        (w->dn_ba_split &&
         (rc = gm_project(s, &w->dn_alpha, s->xn, E, n, s->dn_in + C + Z + e->dn_nv, ld, err))))
        return rc;
    convolve(s, w, n);
    dn_job job = {s, w, n};
    int parts = e->n_threads < (int)e->dn_nv ? e->n_threads : (int)e->dn_nv;
    gm_pool_run(e->pool, dn_part, &job, parts);
    return gm_project(s, &w->dn_out, s->dn_o, Z, n, out, E, err);
}
