/* The FFN block: a routed mixture of experts (with an optional shared expert) or a dense SwiGLU
 * FFN, whose output the family's recipe adds to the residual stream. Tokens of a chunk are
 * grouped by expert, so each routed expert's weights are read once per chunk whatever the number
 * of tokens that chose it. */
#include <math.h>
#include <string.h>

#include "infer/gpu.h"
#include "infer/recipe.h"

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* g[i] = act(g[i]) * u[i] for n values: SwiGLU, or (situ_beta) Kimi-K3's situ, or gpt-oss's clamped form
 * (min(g, 7) sigmoid(1.702 min(g, 7))) (clamp(u, -7, 7) + 1), or with limit > 0 (a routed
 * expert of Hy4) silu(min(g, limit)) clamp(u, -limit, limit). */
static void glu(const gm_engine *e, float *g, const float *u, uint64_t n, float limit)
{
    if (e->situ_beta > 0.0f) { /* Kimi-K3's situ: b tanh(g / b) sigmoid(g) * lb tanh(u / lb) */
        const float b = e->situ_beta, lb = e->situ_linear_beta, ib = 1.0f / b, ilb = lb > 0.0f ? 1.0f / lb : 0.0f;
        for (uint64_t i = 0; i < n; i++) {
            const float a = tanhf(g[i] * ib) * b * (1.0f / (1.0f + expf(-g[i])));
            g[i] = a * (lb > 0.0f ? tanhf(u[i] * ilb) * lb : u[i]);
        }
        return;
    }
    if (limit > 1e-6f) {
        for (uint64_t i = 0; i < n; i++) {
            const float a = g[i] < limit ? g[i] : limit;
            const float b = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
            g[i] = silu(a) * b;
        }
        return;
    }
    if (!e->ops.swiglu_clamped) {
        for (uint64_t i = 0; i < n; i++)
            g[i] = silu(g[i]) * u[i];
        return;
    }
    const float lim = 7.0f, alpha = 1.702f;
    for (uint64_t i = 0; i < n; i++) {
        const float a = g[i] < lim ? g[i] : lim;
        const float b = u[i] < -lim ? -lim : u[i] > lim ? lim : u[i];
        g[i] = a / (1.0f + expf(-alpha * a)) * (b + 1.0f);
    }
}

/* y[t] = W a_t for n prepared rows a (stride a_stride), into y (stride w->n_rows). */
static int mm(gm_fwd *s, const gm_mat *w, const uint8_t *a, uint64_t a_stride, uint32_t n, float *y,
              gm_err *err)
{
    gm_engine *e = s->e;
    return gm_matmul(e->k, w, 0, w->n_rows, a, a_stride, n, y, w->n_rows, e->pool, e->n_threads, err);
}

/* SwiGLU FFN over n rows of xn: out[t] = down(silu(gate x) * up x) (clamped by limit > 0, see glu). */
static int swiglu(gm_fwd *s, const gm_mat *gate, const gm_mat *up, const gm_mat *down,
                  const float *xn, uint32_t n, float limit, float *out, gm_err *err)
{
    const uint64_t E = s->e->n_embd, ff = gate->n_rows;
    int rc;
    if ((rc = gm_prepare(s, gate->type, xn, E, n, s->act, s->act_stride, err)) ||
        (rc = mm(s, gate, s->act, s->act_stride, n, s->g_out, err)))
        return rc;
    if (gm_dot_act_type(up->type) != gm_dot_act_type(gate->type) &&
        (rc = gm_prepare(s, up->type, xn, E, n, s->act, s->act_stride, err)))
        return rc;
    if ((rc = mm(s, up, s->act, s->act_stride, n, s->u_out, err)))
        return rc;
    glu(s->e, s->g_out, s->u_out, (uint64_t)n * ff, limit);
    if ((rc = gm_prepare(s, down->type, s->g_out, ff, n, s->act2, s->act2_stride, err)))
        return rc;
    return mm(s, down, s->act2, s->act2_stride, n, out, err);
}

/* ids[0..k): the k highest of score[0..n), highest first; ties go to the lower index. */
static void top_k(const float *score, uint32_t n, uint32_t k, int32_t *ids)
{
    for (uint32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (uint32_t i = 0; i < n; i++) {
            bool taken = false;
            for (uint32_t q = 0; q < j; q++)
                taken |= ids[q] == (int32_t)i;
            if (!taken && (best < 0 || score[i] > score[best]))
                best = (int32_t)i;
        }
        ids[j] = best;
    }
}

/* Group-limited routing (expert_group_count groups of consecutive experts, of which
 * expert_group_used_count are searched): a group's score is the sum of its two highest
 * selection scores (sigmoid routers: DeepSeek-V3, GLM-4.5) or its highest (softmax:
 * DeepSeek-V2), the best groups are kept (ties to the lower group) and the experts of the other
 * groups cannot be chosen (-inf, as the models' own inference code masks them; transformers
 * masks to 0, which differs only where a kept expert's score plus its bias is negative). The
 * load checks that the kept groups hold at least top-k experts. Nothing changes with one group
 * or when every group is used. */
static void limit_groups(const gm_engine *e, float *sel)
{
    const uint32_t G = e->n_group, used = e->n_group_used, N = e->n_expert;
    if (G <= 1 || used >= G)
        return;
    const uint32_t per = N / G;
    float gs[GM_MAX_GROUPS];
    for (uint32_t g = 0; g < G; g++) {
        float a = -INFINITY, b = -INFINITY; /* the two highest */
        for (uint32_t i = g * per; i < (g + 1) * per; i++) {
            if (sel[i] > a) {
                b = a;
                a = sel[i];
            } else if (sel[i] > b) {
                b = sel[i];
            }
        }
        gs[g] = per > 1 && e->ops.gating == GM_GATING_SIGMOID ? a + b : a;
    }
    int32_t keep[GM_MAX_GROUPS];
    top_k(gs, G, used, keep);
    for (uint32_t g = 0; g < G; g++) {
        bool kept = false;
        for (uint32_t j = 0; j < used; j++)
            kept |= keep[j] == (int32_t)g;
        if (!kept)
            for (uint32_t i = g * per; i < (g + 1) * per; i++)
                sel[i] = -INFINITY;
    }
}

/* One token's expert probabilities (softmax, sigmoid or sqrt-softplus of its router logits lg,
 * biases added)
 * and selection scores: the probabilities plus the selection bias exp_probs_b where the layer
 * has one (DeepSeek-V3, GLM-4.5, MiniMax, Hy3 with sigmoid gating; ERNIE 4.5 with softmax). */
static void scores(const gm_engine *e, const gm_layer_w *w, const float *lg, float *prob, float *sel)
{
    const uint32_t N = e->n_expert;
    if (e->ops.gating == GM_GATING_SOFTMAX) {
        float mx = -INFINITY;
        for (uint32_t i = 0; i < N; i++)
            mx = lg[i] > mx ? lg[i] : mx;
        double sum = 0;
        for (uint32_t i = 0; i < N; i++) {
            prob[i] = expf(lg[i] - mx);
            sum += prob[i];
        }
        for (uint32_t i = 0; i < N; i++)
            prob[i] = (float)(prob[i] / sum);
    } else if (e->ops.gating == GM_GATING_SQRT_SOFTPLUS) { /* softplus as ggml's: x past 20 */
        for (uint32_t i = 0; i < N; i++)
            prob[i] = sqrtf(lg[i] > 20.0f ? lg[i] : logf(1.0f + expf(lg[i])));
    } else {
        for (uint32_t i = 0; i < N; i++)
            prob[i] = 1.0f / (1.0f + expf(-lg[i]));
    }
    for (uint32_t i = 0; i < N; i++)
        sel[i] = prob[i] + (w->router_bias ? w->router_bias[i] : 0.0f);
}

/* One token's routing: from its router logits lg (biases added), the K experts of the highest
 * selection scores (ids) and their weights (wt); in a hash-routed layer (DeepSeek-V4) the first K
 * of those its table gives the token (K at most n_expert_used), weighted by their scores. */
static void route_token(const gm_engine *e, const gm_layer_w *w, const float *lg, int32_t token, uint32_t K,
                        int32_t *ids, float *wt)
{
    const uint32_t N = e->n_expert;
    float prob[1024];
    float sel[1024];
    scores(e, w, lg, prob, sel);
    if (w->tid2eid) {
        memcpy(ids, w->tid2eid + (uint64_t)token * e->n_expert_used, K * sizeof *ids);
    } else {
        limit_groups(e, sel);
        top_k(sel, N, K, ids); /* by selection score */
    }
    for (uint32_t j = 0; j < K; j++)
        wt[j] = prob[ids[j]];
    if (e->ops.norm_topk) {
        double sum = 0;
        for (uint32_t j = 0; j < K; j++)
            sum += wt[j];
        for (uint32_t j = 0; j < K; j++)
            wt[j] = (float)(wt[j] / sum);
    }
    for (uint32_t j = 0; j < K; j++)
        wt[j] *= e->ops.expert_scale;
}

/* Routing of n tokens: k_route experts and their weights per token (slots of stride k_route),
 * then the levers that act on every call: the probe records the weights, expert mass keeps
 * the first s->topk_n[t] slots. */
static void route(gm_fwd *s, const gm_layer_w *w, uint32_t n)
{
    const gm_engine *e = s->e;
    const uint32_t K = e->k_route;
    /* a hash-routed layer has its table's experts, no more */
    const uint32_t k = w->tid2eid && e->n_expert_used < K ? e->n_expert_used : K;
    const gm_shed_opts *lo = e->shed ? gm_shed_get_opts(e->shed) : NULL;
    for (uint32_t t = 0; t < n; t++) {
        int32_t *ids = s->topk_ids + (uint64_t)t * K;
        float *wt = s->topk_w + (uint64_t)t * K;
        const int32_t token = w->tid2eid ? s->tok_hist[s->pos + t] : 0;
        route_token(e, w, s->router_logits + (uint64_t)t * e->n_expert, token, k, ids, wt);
        s->topk_n[t] = k;
        if (lo && lo->probe)
            gm_shed_probe_add(e->shed, wt, k, n == 1);
        if (lo && lo->expert_mass > 0) {
            s->topk_n[t] = gm_shed_mass(ids, wt, k, lo->expert_mass);
            gm_shed_count_mass(e->shed, k, s->topk_n[t]);
        }
    }
}

/* One expert over c tokens of the chunk (their prepared activations are rows toks[] of
 * s->act): out[i] = down(silu(gate a) * up a), c rows of n_embd. The same arithmetic whatever
 * memory the expert's bytes live in. */
static int run_expert(gm_fwd *s, const gm_layer_w *w, int32_t x, const gm_stream_expert *src,
                      const int32_t *toks, uint32_t c, float *out, gm_err *err)
{
    const uint64_t D = s->e->moe_dim, ff = w->gate.n_rows;
    int rc;
    uint64_t row = 0; /* the prepared row's bytes: the stride is sized for the widest type */
    if ((rc = gm_act_row_bytes(w->gate.type, D, &row, err)))
        return rc;
    for (uint32_t i = 0; i < c; i++)
        memcpy(s->act_gather + (uint64_t)i * s->act_stride, s->act + (uint64_t)toks[i] * s->act_stride,
               row);
    gm_mat g = {w->gate.type, w->gate.n_cols, w->gate.n_rows, w->gate.row_bytes, src->data[GM_EXP_GATE]};
    gm_mat u = {w->up.type, w->up.n_cols, w->up.n_rows, w->up.row_bytes, src->data[GM_EXP_UP]};
    gm_mat d = {w->down.type, w->down.n_cols, w->down.n_rows, w->down.row_bytes, src->data[GM_EXP_DOWN]};
    if ((rc = mm(s, &g, s->act_gather, s->act_stride, c, s->g_out, err)))
        return rc;
    if (gm_dot_act_type(w->up.type) != gm_dot_act_type(w->gate.type)) {
        for (uint32_t i = 0; i < c; i++)
            if ((rc = gm_prepare(s, w->up.type, s->moe_in + (uint64_t)toks[i] * D, D, 1,
                                 s->act_gather + (uint64_t)i * s->act_stride, s->act_stride, err)))
                return rc;
    }
    if ((rc = mm(s, &u, s->act_gather, s->act_stride, c, s->u_out, err)))
        return rc;
    gm_add_bias(s->g_out, w->gate_b ? w->gate_b + (uint64_t)x * ff : NULL, c, ff);
    gm_add_bias(s->u_out, w->up_b ? w->up_b + (uint64_t)x * ff : NULL, c, ff);
    glu(s->e, s->g_out, s->u_out, (uint64_t)c * ff, w->exp_limit);
    if ((rc = gm_prepare(s, w->down.type, s->g_out, ff, c, s->act2, s->act2_stride, err)) ||
        (rc = mm(s, &d, s->act2, s->act2_stride, c, out, err)))
        return rc;
    gm_add_bias(out, w->down_b ? w->down_b + (uint64_t)x * D : NULL, c, D);
    return 0;
}

/* Experts xs[0..n) of a decode token (the chunk's token 0, its activations prepared in s->act)
 * from srcs into outs[i] (n_embd floats each): what run_expert computes for each, bit for bit,
 * with every expert's gate and up in one run of the pool and every down in another, so that the
 * threads meet twice a layer instead of three times an expert. Falls back to run_expert one by
 * one where the batch does not fit the chunk's buffers or gate and up take other activations. */
static int run_experts_token(gm_fwd *s, const gm_layer_w *w, const int32_t *xs, const gm_stream_expert *srcs,
                             uint32_t n, float *const *outs, gm_err *err)
{
    gm_engine *e = s->e;
    const uint64_t D = e->moe_dim, ff = w->gate.n_rows;
    const int32_t tok0 = 0;
    int rc;
    if (n < 2 || n > s->max_chunk || 2 * n > GM_MATMUL_MULTI_MAX ||
        gm_dot_act_type(w->up.type) != gm_dot_act_type(w->gate.type)) {
        for (uint32_t i = 0; i < n; i++)
            if ((rc = run_expert(s, w, xs[i], &srcs[i], &tok0, 1, outs[i], err)))
                return rc;
        return 0;
    }
    gm_mat m[3 * GM_MATMUL_MULTI_MAX / 2];
    gm_mm_op ops[GM_MATMUL_MULTI_MAX];
    for (uint32_t i = 0; i < n; i++) {
        m[2 * i] = (gm_mat){w->gate.type, w->gate.n_cols, w->gate.n_rows, w->gate.row_bytes,
                            srcs[i].data[GM_EXP_GATE]};
        m[2 * i + 1] = (gm_mat){w->up.type, w->up.n_cols, w->up.n_rows, w->up.row_bytes, srcs[i].data[GM_EXP_UP]};
        ops[2 * i] = (gm_mm_op){&m[2 * i], s->act, s->act_stride, 1, s->g_out + (uint64_t)i * ff, ff};
        ops[2 * i + 1] = (gm_mm_op){&m[2 * i + 1], s->act, s->act_stride, 1, s->u_out + (uint64_t)i * ff, ff};
    }
    if ((rc = gm_matmul_multi(e->k, ops, 2 * n, e->pool, e->n_threads, err)))
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        float *g = s->g_out + (uint64_t)i * ff, *u = s->u_out + (uint64_t)i * ff;
        gm_add_bias(g, w->gate_b ? w->gate_b + (uint64_t)xs[i] * ff : NULL, 1, ff);
        gm_add_bias(u, w->up_b ? w->up_b + (uint64_t)xs[i] * ff : NULL, 1, ff);
        glu(e, g, u, ff, w->exp_limit);
    }
    if ((rc = gm_prepare(s, w->down.type, s->g_out, ff, n, s->act2, s->act2_stride, err)))
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        m[2 * n + i] = (gm_mat){w->down.type, w->down.n_cols, w->down.n_rows, w->down.row_bytes,
                                srcs[i].data[GM_EXP_DOWN]};
        ops[i] = (gm_mm_op){&m[2 * n + i], s->act2 + (uint64_t)i * s->act2_stride, s->act2_stride, 1, outs[i], D};
    }
    if ((rc = gm_matmul_multi(e->k, ops, n, e->pool, e->n_threads, err)))
        return rc;
    for (uint32_t i = 0; i < n; i++)
        gm_add_bias(outs[i], w->down_b ? w->down_b + (uint64_t)xs[i] * D : NULL, 1, D);
    return 0;
}

/* lat_out[toks[i]] += wts[i] * rows[i] (lat_out is moe_out unless the MoE is latent): experts
 * are always added in ascending id order, so a streamed decode (which computes resident experts
 * first) sums exactly as the in-memory path. */
static void accumulate(gm_fwd *s, const int32_t *toks, const float *wts, uint32_t c, const float *rows)
{
    const uint64_t D = s->e->moe_dim;
    for (uint32_t i = 0; i < c; i++) {
        float *o = s->lat_out + (uint64_t)toks[i] * D;
        const float *dv = rows + (uint64_t)i * D;
        for (uint64_t j = 0; j < D; j++)
            o[j] += wts[i] * dv[j];
    }
}

/* Expert x of layer l needs no read: in the arena, on its way there, or in the VRAM tier. */
static bool present(const gm_engine *e, uint32_t l, int32_t x)
{
    return (e->gpu && gm_gpu_has(e->gpu, l, x)) || gm_stream_present(e->stream, l, x);
}

/* Lookahead: the next streamed MoE layer's router applied to this layer's normed input, scaled
 * by the ratio of the two layers' norm gains; its ranked experts go to the feeder. Uses its own
 * buffers, so the chunk's prepared activations stay intact. A layer routed by the token's id
 * (DeepSeek-V4's first layers) is not guessed: its table gives the experts it will take. */
static int predict_next(gm_fwd *s, gm_err *err)
{
    gm_engine *e = s->e;
    int32_t m = gm_stream_next_layer(e->stream, s->layer);
    if (m < 0)
        return 0;
    double t0 = gm_stream_now_s();
    const gm_layer_w *w = &e->layers[m];
    if (w->tid2eid) {
        int32_t hids[GM_STREAM_PREDICT_MAX];
        uint32_t k = e->n_expert_used < GM_STREAM_PREDICT_MAX ? e->n_expert_used : GM_STREAM_PREDICT_MAX, kept = 0;
        const int32_t *row = w->tid2eid + (uint64_t)s->tok_hist[s->pos] * e->n_expert_used;
        for (uint32_t i = 0; i < k; i++)
            if (!(e->gpu && gm_gpu_has(e->gpu, (uint32_t)m, row[i])))
                hids[kept++] = row[i];
        int rc = gm_stream_predict(e->stream, (uint32_t)m, hids, kept, err);
        gm_stream_phase_add(e->stream, GM_PHASE_PREDICT, gm_stream_now_s() - t0);
        return rc;
    }
    const uint32_t N = e->n_expert, E = e->n_embd;
    const float *ratio = e->la_ratio ? e->la_ratio[s->layer] : NULL;
    for (uint32_t i = 0; i < E; i++)
        s->la_x[i] = s->xn[i] * (ratio ? ratio[i] : 1.0f);
    int rc;
    if ((rc = gm_prepare(s, w->router.type, s->la_x, E, 1, s->la_act, s->act_stride, err)) ||
        (rc = gm_matmul(e->k, &w->router, 0, N, s->la_act, s->act_stride, 1, s->la_logits, N, e->pool,
                        e->n_threads, err)))
        return rc;
    /* ranked by the selection score, ties to the lower id, as routing ranks */
    int32_t ids[GM_STREAM_PREDICT_MAX];
    uint32_t W = N < GM_STREAM_PREDICT_MAX ? N : GM_STREAM_PREDICT_MAX;
    for (uint32_t i = 0; i < N; i++)
        s->la_logits[i] += w->router_b ? w->router_b[i] : 0.0f;
    /* keeper prestage: the prediction routed as if now, then miss-shed on it; the misses it
     * keeps are what is read ahead */
    const gm_shed_opts *lo = e->shed ? gm_shed_get_opts(e->shed) : NULL;
    const bool keepers = lo && lo->keepers && lo->miss_shed > 0;
    int32_t kid[GM_MAX_EXPERTS_USED], keep[GM_MAX_EXPERTS_USED];
    float kw[GM_MAX_EXPERTS_USED];
    bool miss[GM_MAX_EXPERTS_USED];
    uint32_t n_keep = 0;
    if (keepers) {
        const uint32_t K = w->tid2eid && e->n_expert_used < e->k_route ? e->n_expert_used : e->k_route;
        route_token(e, w, s->la_logits, w->tid2eid ? s->tok_hist[s->pos] : 0, K, kid, kw);
        const uint32_t k = lo->expert_mass > 0 ? gm_shed_mass(kid, kw, K, lo->expert_mass) : K;
        uint32_t n_miss = 0;
        for (uint32_t j = 0; j < k; j++)
            n_miss += miss[j] = !present(e, (uint32_t)m, kid[j]);
        n_keep = gm_shed_keepers(kid, kw, miss, k, lo->miss_shed, keep);
        gm_shed_count_keepers(e->shed, n_miss, n_keep);
    }
    float prob[1024], sel[1024];
    scores(e, w, s->la_logits, prob, sel);
    limit_groups(e, sel);
    top_k(sel, N, W, ids);
    if (e->gpu) { /* what the VRAM tier holds needs no read ahead */
        uint32_t kept = 0;
        for (uint32_t i = 0; i < W; i++)
            if (!gm_gpu_has(e->gpu, (uint32_t)m, ids[i]))
                ids[kept++] = ids[i];
        W = kept;
    }
    rc = keepers ? gm_stream_predict_keepers(e->stream, (uint32_t)m, ids, W, keep, n_keep, err)
                 : gm_stream_predict(e->stream, (uint32_t)m, ids, W, err);
    gm_stream_phase_add(e->stream, GM_PHASE_PREDICT, gm_stream_now_s() - t0);
    return rc;
}

/* A decode token's experts. Those in the VRAM tier (--gpu) start on the device first; the others
 * compute on the CPU meanwhile: from stacks (in memory) when it is not NULL, else through the
 * arena, resident ones while the others load (and, with lookahead, while the next layer's
 * predicted experts are read ahead). The device's outputs are collected, the CPU's experts
 * offered to the VRAM tier, and all are added in ascending id order. */
static int moe_decode(gm_fwd *s, const gm_layer_w *w, const gm_stream_expert *stacks, gm_err *err)
{
    gm_engine *e = s->e;
    const uint64_t D = e->moe_dim;
    int32_t *ids = s->topk_ids;
    const int32_t tok0 = 0;
    double t_exp = 0, t0;
    /* miss-shed: experts neither resident nor on their way, lowest weight first, within 1 - P
     * of the token's weight; the dropped ones are never staged (no read, no popularity) */
    const gm_shed_opts *lo = e->shed ? gm_shed_get_opts(e->shed) : NULL;
    if (!stacks && lo && lo->miss_shed > 0) {
        bool miss[GM_MAX_EXPERTS_USED];
        float frac;
        /* the lookahead is scored against what the router chose, not what survives the shed */
        gm_stream_note_routing(e->stream, s->layer, ids, s->topk_n[0]);
        for (uint32_t j = 0; j < s->topk_n[0]; j++)
            miss[j] = !present(e, s->layer, ids[j]);
        const uint32_t kept = gm_shed_miss(ids, s->topk_w, miss, s->topk_n[0], lo->miss_shed, &frac);
        gm_shed_count_miss(e->shed, s->topk_n[0] - kept, frac);
        s->topk_n[0] = kept;
    }
    const uint32_t K = s->topk_n[0];
    /* the split: on the device (jd) and on the CPU (jc), as slots j of the token's routing */
    uint32_t jd[GM_MAX_EXPERTS_USED], jc[GM_MAX_EXPERTS_USED], nd = 0, nc = 0;
    int32_t dev_ids[GM_MAX_EXPERTS_USED], cpu_ids[GM_MAX_EXPERTS_USED];
    const bool gpu = e->gpu && gm_gpu_layer(e->gpu, s->layer);
    for (uint32_t j = 0; j < K; j++) {
        if (gpu)
            gm_gpu_note(e->gpu, s->layer, ids[j]);
        if (gpu && gm_gpu_has(e->gpu, s->layer, ids[j])) {
            jd[nd] = j;
            dev_ids[nd++] = ids[j];
        } else {
            jc[nc] = j;
            cpu_ids[nc++] = ids[j];
        }
    }
    int rc;
    if (nd && (rc = gm_gpu_start(e->gpu, s->layer, dev_ids, nd, s->moe_in, err)))
        return rc;
    bool nd_pending = nd > 0;
    if (!stacks && (rc = gm_stream_begin(e->stream, s->layer, cpu_ids, nc, err))) {
        if (nd)
            gm_gpu_finish(e->gpu, s->gpu_rows, err); /* nothing left queued on the device */
        return rc;
    }
    if (!stacks && gm_stream_wants_prediction(e->stream) && (rc = predict_next(s, err)))
        goto out;
    gm_stream_expert src[GM_MAX_EXPERTS_USED];
    uint8_t done[GM_MAX_EXPERTS_USED] = {0};
    /* what is at hand (in memory, or the arena's residents) together, then the reads in order */
    {
        int32_t hx[GM_MAX_EXPERTS_USED];
        gm_stream_expert hs[GM_MAX_EXPERTS_USED];
        float *ho[GM_MAX_EXPERTS_USED];
        uint32_t nh = 0;
        for (uint32_t c = 0; c < nc; c++) {
            const int32_t x = cpu_ids[c];
            if (stacks)
                src[c] = (gm_stream_expert){{stacks->data[GM_EXP_GATE] + (uint64_t)x * w->gate.expert_bytes,
                                             stacks->data[GM_EXP_UP] + (uint64_t)x * w->up.expert_bytes,
                                             stacks->data[GM_EXP_DOWN] + (uint64_t)x * w->down.expert_bytes, NULL}};
            else if (!gm_stream_get(e->stream, c, &src[c]))
                continue;
            hx[nh] = x;
            hs[nh] = src[c];
            ho[nh++] = s->exp_rows + (uint64_t)jc[c] * D;
            done[c] = 1;
        }
        t0 = gm_stream_now_s();
        rc = nh ? run_experts_token(s, w, hx, hs, nh, ho, err) : 0;
        t_exp += gm_stream_now_s() - t0;
        if (rc)
            goto out;
    }
    for (uint32_t c = 0; c < nc; c++) {
        if (done[c])
            continue;
        if ((rc = gm_stream_wait(e->stream, c, &src[c], err)))
            goto out;
        t0 = gm_stream_now_s();
        rc = run_expert(s, w, cpu_ids[c], &src[c], &tok0, 1, s->exp_rows + (uint64_t)jc[c] * D, err);
        t_exp += gm_stream_now_s() - t0;
        if (rc)
            goto out;
        done[c] = 1;
    }
    if (nd) {
        rc = gm_gpu_finish(e->gpu, s->gpu_rows, err);
        nd_pending = false;
        if (rc)
            goto out;
        for (uint32_t i = 0; i < nd; i++)
            memcpy(s->exp_rows + (uint64_t)jd[i] * D, s->gpu_rows + (uint64_t)i * D, D * sizeof(float));
    }
    /* the CPU's experts may move into the VRAM tier (their bytes are valid until the arena's call ends) */
    for (uint32_t c = 0; gpu && c < nc; c++)
        if ((rc = gm_gpu_offer(e->gpu, s->layer, cpu_ids[c], &src[c], err)))
            goto out;
    /* ascending expert id, as the in-memory path adds them */
    for (uint32_t x = 0; x < e->n_expert; x++)
        for (uint32_t j = 0; j < K; j++)
            if (ids[j] == (int32_t)x)
                accumulate(s, &tok0, &s->topk_w[j], 1, s->exp_rows + (uint64_t)j * D);
out:
    if (nd_pending)
        gm_gpu_finish(e->gpu, s->gpu_rows, err); /* after a failure: nothing left queued on the device */
    if (!stacks) {
        gm_stream_phase_add(e->stream, GM_PHASE_EXPERTS, t_exp);
        gm_stream_end(e->stream);
    }
    return rc;
}

/* A chunk with a VRAM tier: the pairs of its experts there (in ascending id, while they fit)
 * start on the device; on_dev[x] says which experts went. False when none did (or on an error,
 * *rc set). */
static bool dev_chunk_start(gm_fwd *s, uint32_t n, uint8_t *on_dev, int *rc, gm_err *err)
{
    gm_engine *e = s->e;
    bool dev = false;
    *rc = 0;
    if (n < 2 || !e->gpu || !gm_gpu_layer(e->gpu, s->layer))
        return false;
    gm_gpu_pairs_reset(e->gpu);
    for (uint32_t x = 0; x < e->n_expert; x++) {
        on_dev[x] = s->exp_count[x] > 0 &&
                    gm_gpu_pairs_add(e->gpu, s->layer, (int32_t)x, s->exp_tok + s->exp_start[x], (uint32_t)s->exp_count[x]);
        dev |= on_dev[x];
    }
    if (dev && (*rc = gm_gpu_pairs_start(e->gpu, s->layer, s->moe_in, n, err)))
        return false;
    return dev;
}

/* Collects what dev_chunk_start started and adds it, after the CPU's experts, in ascending id
 * (the rows are the pairs in that order). On a failure before (rc), only waits. */
static int dev_chunk_finish(gm_fwd *s, const uint8_t *on_dev, int rc, gm_err *err)
{
    gm_engine *e = s->e;
    const int rc2 = gm_gpu_finish(e->gpu, NULL, err);
    if (rc || rc2)
        return rc ? rc : rc2;
    const float *rows = gm_gpu_rows(e->gpu);
    for (uint32_t x = 0; x < e->n_expert; x++)
        if (on_dev[x]) {
            const uint32_t c = (uint32_t)s->exp_count[x];
            accumulate(s, s->exp_tok + s->exp_start[x], s->exp_wt + s->exp_start[x], c, rows);
            rows += (uint64_t)c * e->moe_dim;
        }
    return 0;
}

/* A prefill chunk's experts through the arena: each expert the chunk uses is read once and
 * computed for all its tokens. Experts are staged in groups as large as the layer's slots, so a
 * group's reads are in flight together; they are computed in ascending id order, the order the
 * in-memory path adds them in. */
static int moe_streamed_chunk(gm_fwd *s, const gm_layer_w *w, uint32_t n, gm_err *err)
{
    gm_engine *e = s->e;
    const uint32_t N = e->n_expert;
    uint32_t G = gm_stream_layer_slots(e->stream, s->layer);
    if (G == 0)
        return gm_err_set(err, GM_EINVAL, "layer %u streams its experts but has no arena slot", s->layer);
    if (G > GM_MAX_EXPERTS_USED)
        G = GM_MAX_EXPERTS_USED;
    int32_t group[GM_MAX_EXPERTS_USED];
    uint32_t x = 0;
    int rc = 0;
    uint8_t on_dev[1024];
    const bool dev = dev_chunk_start(s, n, on_dev, &rc, err);
    if (rc)
        return rc;
    while (x < N) {
        uint32_t g = 0;
        for (; x < N && g < G; x++)
            if (s->exp_count[x] > 0 && !(dev && on_dev[x]))
                group[g++] = (int32_t)x;
        if (g == 0)
            break;
        if ((rc = gm_stream_begin(e->stream, s->layer, group, g, err)))
            break;
        for (uint32_t j = 0; j < g && rc == 0; j++) {
            gm_stream_expert src;
            int32_t id = group[j];
            const int32_t *toks = s->exp_tok + s->exp_start[id];
            const float *wts = s->exp_wt + s->exp_start[id];
            uint32_t c = (uint32_t)s->exp_count[id];
            if (!gm_stream_get(e->stream, j, &src) && (rc = gm_stream_wait(e->stream, j, &src, err)))
                break;
            if ((rc = run_expert(s, w, id, &src, toks, c, s->d_out, err)))
                break;
            accumulate(s, toks, wts, c, s->d_out);
        }
        gm_stream_end(e->stream);
        if (rc)
            break;
    }
    return dev ? dev_chunk_finish(s, on_dev, rc, err) : rc;
}

static int shared_expert(gm_fwd *s, const gm_layer_w *w, uint32_t n, gm_err *err);

/* A chunk whose layer reads only its routed experts through the prefill ring: the next streamed
 * layer's routing of its n tokens predicted as decode's lookahead predicts a token's (that
 * layer's router on this layer's normalised input, scaled by the ratio of the two layers' norm
 * gains), tokens per expert into s->pred_count, so that the ring reads those experts while this
 * layer computes. NULL (nothing to predict: no next layer, a layer routed by a table) or the
 * counts. Uses s->d_out, s->act_gather and s->router_logits, free between the routing and the
 * experts (s->act keeps the chunk's prepared activations). */
static const int32_t *predict_chunk(gm_fwd *s, uint32_t n, gm_err *err, int *rc)
{
    gm_engine *e = s->e;
    const int32_t m = gm_stream_next_layer(e->stream, s->layer);
    *rc = 0;
    if (m < 0 || e->layers[m].tid2eid || !e->layers[m].is_moe || e->layers[m].routed_down.data)
        return NULL;
    const gm_layer_w *w = &e->layers[m];
    const uint32_t N = e->n_expert, E = e->n_embd, K = e->k_route < GM_MAX_EXPERTS_USED ? e->k_route
                                                                                       : GM_MAX_EXPERTS_USED;
    const float *ratio = e->la_ratio ? e->la_ratio[s->layer] : NULL;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t i = 0; i < E; i++)
            s->d_out[(uint64_t)t * E + i] = s->xn[(uint64_t)t * E + i] * (ratio ? ratio[i] : 1.0f);
    if ((*rc = gm_prepare(s, w->router.type, s->d_out, E, n, s->act_gather, s->act_stride, err)) ||
        (*rc = mm(s, &w->router, s->act_gather, s->act_stride, n, s->router_logits, err)))
        return NULL;
    gm_add_bias(s->router_logits, w->router_b, n, N);
    memset(s->pred_count, 0, N * sizeof *s->pred_count);
    for (uint32_t t = 0; t < n; t++) {
        float prob[1024], sel[1024];
        int32_t ids[GM_MAX_EXPERTS_USED];
        scores(e, w, s->router_logits + (uint64_t)t * N, prob, sel);
        limit_groups(e, sel);
        top_k(sel, N, K, ids);
        for (uint32_t j = 0; j < K; j++)
            s->pred_count[ids[j]]++;
    }
    return s->pred_count;
}

static int moe(gm_fwd *s, const gm_layer_w *w, uint32_t n, gm_err *err)
{
    gm_engine *e = s->e;
    const uint32_t N = e->n_expert, K = e->k_route;
    const uint64_t E = e->n_embd;
    int rc;
    if (N > 1024)
        return gm_err_set(err, GM_EUNSUPPORTED, "%u experts per layer (at most 1024)", N);
    memset(s->moe_out, 0, (uint64_t)n * E * sizeof(float));
    /* a latent MoE (Kimi-K3): the routed experts run on routed_down x, their sum in lat_out */
    if (w->routed_down.data) {
        memset(s->lat_out, 0, (uint64_t)n * e->moe_dim * sizeof(float));
        if ((rc = gm_project(s, &w->routed_down, s->xn, E, n, s->lat_in, e->moe_dim, err)))
            return rc;
    }
    /* layer-shed: a decode token skips the routed experts (router, reads and lookahead
     * included) of a layer whose shared expert then runs alone */
    if (n == 1 && e->shed && w->has_shexp && gm_shed_layer_draw(e->shed, s->layer)) {
        if (e->stream && gm_stream_covers(e->stream, s->layer))
            gm_stream_skip(e->stream, s->layer); /* its read-ahead goes, unscored */
        return shared_expert(s, w, n, err);
    }
    /* router logits: f32/f16/bf16 routers multiply unrounded activations */
    if ((rc = gm_prepare(s, w->router.type, s->xn, E, n, s->act, s->act_stride, err)) ||
        (rc = mm(s, &w->router, s->act, s->act_stride, n, s->router_logits, err)))
        return rc;
    gm_add_bias(s->router_logits, w->router_b, n, N);
    route(s, w, n);

    /* group the (token, slot) pairs by expert */
    memset(s->exp_count, 0, N * sizeof(int32_t));
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < s->topk_n[t]; j++)
            s->exp_count[s->topk_ids[(uint64_t)t * K + j]]++;
    int32_t acc = 0;
    for (uint32_t x = 0; x < N; x++) {
        s->exp_start[x] = acc;
        acc += s->exp_count[x];
    }
    memset(s->exp_count, 0, N * sizeof(int32_t));
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < s->topk_n[t]; j++) {
            int32_t x = s->topk_ids[(uint64_t)t * K + j];
            int32_t at = s->exp_start[x] + s->exp_count[x]++;
            s->exp_tok[at] = (int32_t)t;
            s->exp_wt[at] = s->topk_w[(uint64_t)t * K + j];
        }

    /* the chunk's activations, prepared once for the gate/up type */
    if ((rc = gm_prepare(s, w->gate.type, s->moe_in, e->moe_dim, n, s->act, s->act_stride, err)))
        return rc;
    uint32_t N_loop = N;
    /* the expert stacks the loop below reads: the file mapping, or a prefill ring slot */
    gm_stream_expert stacks = {{w->gate.data, w->up.data, w->down.data, NULL}};
    bool ring = false;
    if (e->stream && gm_stream_covers(e->stream, s->layer)) {
        uint32_t n_used = 0;
        for (uint32_t x = 0; x < N; x++)
            n_used += s->exp_count[x] > 0;
        if (!s->split && gm_stream_ring_wanted(e->stream, s->layer, n, n_used)) {
            /* the next layer's experts are read ahead on a prediction when this one is read sparse */
            const int32_t *next = NULL;
            if (!w->routed_down.data && gm_stream_ring_sparse(e->stream, s->layer, n_used)) {
                next = predict_chunk(s, n, err, &rc);
                if (rc)
                    return rc;
            }
            rc = gm_stream_ring_layer(e->stream, s->layer, s->exp_count, next, &stacks, err);
            if (rc && rc != GM_ENOMEM)
                return rc;
            ring = rc == 0 && stacks.data[GM_EXP_GATE] && stacks.data[GM_EXP_UP] && stacks.data[GM_EXP_DOWN];
            if (!ring) {
                gm_err_clear(err);
                stacks = (gm_stream_expert){{w->gate.data, w->up.data, w->down.data, NULL}};
            }
        }
        if (!ring) {
            if ((rc = n == 1 ? moe_decode(s, w, NULL, err) : moe_streamed_chunk(s, w, n, err)))
                return rc;
            N_loop = 0; /* the experts were computed from the arena */
        }
    }
    if (N_loop && n == 1 && e->gpu && gm_gpu_layer(e->gpu, s->layer)) {
        if ((rc = moe_decode(s, w, &stacks, err)))
            return rc;
        N_loop = 0; /* the experts were computed on the device and from the stacks */
    }
    /* a chunk with a VRAM tier: its experts there (while their pairs fit) start on the device */
    uint8_t on_dev[1024];
    rc = 0;
    const bool dev = N_loop && dev_chunk_start(s, n, on_dev, &rc, err);
    if (rc)
        return rc;
    for (uint32_t x = 0; x < N_loop; x++) {
        int32_t c = s->exp_count[x];
        if (c == 0 || (dev && on_dev[x]))
            continue;
        const int32_t *toks = s->exp_tok + s->exp_start[x];
        const float *wts = s->exp_wt + s->exp_start[x];
        gm_stream_expert src = {{stacks.data[GM_EXP_GATE] + (uint64_t)x * w->gate.expert_bytes,
                                 stacks.data[GM_EXP_UP] + (uint64_t)x * w->up.expert_bytes,
                                 stacks.data[GM_EXP_DOWN] + (uint64_t)x * w->down.expert_bytes, NULL}};
        if ((rc = run_expert(s, w, (int32_t)x, &src, toks, (uint32_t)c, s->d_out, err)))
            break;
        accumulate(s, toks, wts, (uint32_t)c, s->d_out);
    }
    if (dev && (rc = dev_chunk_finish(s, on_dev, rc, err)))
        return rc;
    if (rc)
        return rc;
    /* the ring slot still holds this layer: decode may find the chunk's experts in the arena */
    if (ring)
        gm_stream_ring_seed(e->stream, s->layer, s->exp_count, N);
    if (w->routed_down.data) { /* back from the latent width */
        if (w->routed_norm)
            gm_rms_norm(s->lat_out, w->routed_norm, s->lat_out, n, e->moe_dim, e->rms_eps);
        if ((rc = gm_project(s, &w->routed_up, s->lat_out, e->moe_dim, n, s->moe_out, E, err)))
            return rc;
    }
    return shared_expert(s, w, n, err);
}

/* The shared expert (gated where the layer has a gate for it) added to the routed sum in
 * s->moe_out. */
static int shared_expert(gm_fwd *s, const gm_layer_w *w, uint32_t n, gm_err *err)
{
    gm_engine *e = s->e;
    const uint64_t E = e->n_embd;
    int rc;
    if (w->has_shexp) {
        if ((rc = swiglu(s, &w->sh_gate, &w->sh_up, &w->sh_down, s->xn, n, w->sh_limit, s->d_out, err)))
            return rc;
        if (w->has_sh_gate_inp) {
            if ((rc = gm_prepare(s, w->sh_gate_inp.type, s->xn, E, n, s->act, s->act_stride, err)) ||
                (rc = mm(s, &w->sh_gate_inp, s->act, s->act_stride, n, s->tmp, err)))
                return rc;
        }
        for (uint32_t t = 0; t < n; t++) {
            float g = w->has_sh_gate_inp ? 1.0f / (1.0f + expf(-s->tmp[t])) : 1.0f;
            for (uint64_t j = 0; j < E; j++)
                s->moe_out[(uint64_t)t * E + j] += g * s->d_out[(uint64_t)t * E + j];
        }
    }
    return 0;
}

int gm_moe_token_experts(gm_fwd *s, uint32_t l, const float *x, const int32_t *xs, uint32_t n, float *const *outs,
                         gm_err *err)
{
    gm_engine *e = s->e;
    const gm_layer_w *w = &e->layers[l];
    if (!w->is_moe || w->routed_down.data || n > GM_MAX_EXPERTS_USED)
        return gm_err_set(err, GM_EINVAL, "layer %u: %u experts of a token the CPU does not take here", l, n);
    if (n == 0)
        return 0;
    s->layer = l;
    memcpy(s->moe_in, x, e->moe_dim * sizeof(float));
    gm_stream_expert src[GM_MAX_EXPERTS_USED];
    for (uint32_t i = 0; i < n; i++) {
        if (xs[i] < 0 || (uint32_t)xs[i] >= e->n_expert)
            return gm_err_set(err, GM_EINVAL, "layer %u: expert %d of %u", l, xs[i], e->n_expert);
        src[i] = gm_layer_expert(w, xs[i]);
    }
    int rc = gm_prepare(s, w->gate.type, s->moe_in, e->moe_dim, 1, s->act, s->act_stride, err);
    return rc ? rc : run_experts_token(s, w, xs, src, n, outs, err);
}

int gm_ffn_block(gm_fwd *s, uint32_t l, uint32_t n, float *out, gm_err *err)
{
    const gm_layer_w *w = &s->e->layers[l];
    s->layer = l;
    if (!w->is_moe)
        return swiglu(s, &w->ffn_gate, &w->ffn_up, &w->ffn_down, s->xn, n, 0.0f, out, err);
    /* the routed sum and the shared expert accumulate in s->moe_out */
    int rc = moe(s, w, n, err);
    if (rc == 0 && out != s->moe_out)
        memcpy(out, s->moe_out, (uint64_t)n * s->e->n_embd * sizeof(float));
    return rc;
}
