/* Sessions and the architecture-agnostic layer loop: scratch and caches sized once, state saved
 * and restored for rewinds, embedding, RoPE tables and the evaluation of a chunk (see engine.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sysinfo.h"
#include "infer/gpu_attn.h"
#include "infer/gpu_decode.h"
#include "plan/plan.h"
#include "infer/recipe.h"
#include "kernels/dequant.h"
#include "kernels/quant.h"

/* ---- sessions ---- */

void gm_fwd_free(gm_fwd *s)
{
    if (!s)
        return;
    void *bufs[] = {s->kv_cap, s->kv_off, s->k_cache, s->v_cache, s->x, s->xn, s->q, s->kk, s->vv, s->att, s->tmp,
                    s->hc_mix, s->hc_gate, s->lat_in, s->lat_buf, s->kda_g, s->res_stack, s->rope_cos, s->rope_sin, s->act,
                    s->act2, s->attn_scratch, s->attn_split, s->router_logits,
                    s->topk_ids, s->topk_w, s->topk_n, s->exp_count, s->pred_count, s->exp_start, s->exp_tok, s->exp_wt,
                    s->act_gather, s->g_out, s->u_out, s->d_out, s->moe_out, s->exp_rows, s->gpu_rows, s->logits_last,
                    s->la_x, s->la_logits, s->la_act, s->mla_q, s->mla_kv, s->mla_in, s->mla_v,
                    s->q_gate, s->dn_conv_state, s->dn_state, s->dn_in, s->dn_mixed, s->dn_o, s->dn_row,
                    s->idx_keys, s->idx_q, s->idx_w, s->idx_knew, s->idx_score, s->idx_sel, s->idx_pos,
                    s->idx_nsel, s->idx_rows, s->tok_hist, s->ple_conv_rows, s->ple_buf, s->ple_raw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    gm_gpu_tok_free(s->gtok);
    gm_gpu_kv_free(s->gkv);
    gm_csa_free(s->csa);
    free(s);
}

/* The largest prepared-activation row over every matrix input width of the model. */
static uint64_t max_act_row(const gm_engine *e, uint64_t n_cols)
{
    static const uint32_t types[] = {GM_TYPE_F32, GM_TYPE_Q8_0, GM_TYPE_Q4_K};
    uint64_t best = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        uint64_t b = 0;
        gm_err ignore = {0};
        if (gm_act_row_bytes(types[i], n_cols, &b, &ignore) == 0 && b > best)
            best = b;
    }
    (void)e;
    return best ? best : n_cols * 4;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Maps the pages of [p, p + bytes) in now (MADV_POPULATE_WRITE, one call into the kernel instead
 * of a page fault per page on first use; on a kernel without it, nothing happens). */
static void populate_write(void *p, uint64_t bytes)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) / page * page;
    const uintptr_t hi = ((uintptr_t)p + bytes) / page * page;
    if (p && hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

/* malloc, its pages mapped in now: a session's scratch is reused by every chunk, so its page
 * faults are better taken at once here than one by one in the first prefill (the KV cache,
 * reached as the context grows, is left to fault in as it is used). */
static void *touched_alloc(uint64_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    populate_write(p, bytes);
    return p;
}

/* The widths of a session's per-token scratch (gm_fwd_create allocates each buffer for
 * max_chunk tokens of these). */
/* A token's hyper-connection mixing weights: pre and post per stream, and with Sinkhorn mixing
 * (DeepSeek-V4) the streams' combination matrix. */
static uint64_t hc_mix_floats(const gm_engine *e)
{
    const uint64_t H = e->n_hc;
    return e->hc_sinkhorn ? (2 + H) * H : 2 * H;
}

typedef struct scratch_dims {
    uint64_t qd, att, rows, kvd, ff, wide, mla_qd, mla_in, mla_vd, dn_c, dn_z, dn_in, k, nexp;
    uint64_t act_stride, act2_stride; /* bytes of a prepared activation row */
} scratch_dims;

static void scratch_dims_of(const gm_engine *e, scratch_dims *d)
{
    const uint64_t E = e->n_embd, hd = e->head_dim;
    d->qd = (uint64_t)e->n_head * hd;
    d->kvd = (uint64_t)e->n_head_kv * hd;
    uint64_t ff = e->n_ff_exp;
    if (e->n_ff > ff)
        ff = e->n_ff;
    if (e->n_ff_shexp > ff)
        ff = e->n_ff_shexp;
    d->ff = ff;
    uint64_t wide = d->qd > E ? d->qd : E;
    /* MLA's other widths: the full queries, the latent row, the inputs of its per-head
     * products, the heads' values */
    d->mla_qd = (uint64_t)e->n_head * (e->qk_nope + e->n_rot);
    uint64_t mla_in = e->qk_nope > e->kv_lora ? e->qk_nope : e->kv_lora;
    d->mla_in = e->q_lora > mla_in ? e->q_lora : mla_in;
    d->mla_vd = (uint64_t)e->n_head * e->v_head;
    if (e->o_groups) { /* DeepSeek-V4's grouped output: a group's heads in, its low-rank rows out */
        const uint64_t group_in = (uint64_t)e->n_head / e->o_groups * e->head_dim;
        const uint64_t lora_out = (uint64_t)e->o_groups * e->o_lora;
        d->mla_in = group_in > d->mla_in ? group_in : d->mla_in;
        d->mla_vd = lora_out > d->mla_vd ? lora_out : d->mla_vd;
    }
    /* the attention's result; MLA's gated values (Hy4) are computed into it as well */
    d->att = e->mla && d->mla_vd > d->qd ? d->mla_vd : d->qd;
    if (e->mla) {
        wide = d->mla_qd > wide ? d->mla_qd : wide;
        wide = d->mla_in > wide ? d->mla_in : wide;
        wide = d->mla_vd > wide ? d->mla_vd : wide;
    }
    /* Gated DeltaNet: its convolved channels and values are inputs of products too */
    d->dn_c = e->n_recurrent ? gm_delta_channels(e) : 0;
    d->dn_z = e->n_recurrent ? gm_delta_values(e) : 0;
    d->dn_in = d->dn_c + d->dn_z + 2ull * e->dn_nv;
    wide = d->dn_z > wide ? d->dn_z : wide;
    /* hyper-connections: the streams of a token, normalised, are the input of their mixing */
    const uint64_t hc = (uint64_t)e->n_hc * E;
    wide = e->n_hc > 1 && hc > wide ? hc : wide;
    /* a latent MoE's routed rows (Kimi-K3) */
    d->wide = e->moe_dim > wide ? e->moe_dim : wide;
    d->rows = e->moe_dim > E ? e->moe_dim : E;
    d->k = e->k_max ? e->k_max : 1;
    d->nexp = e->n_expert ? e->n_expert : 1;
    d->act_stride = max_act_row(e, d->wide);
    d->act2_stride = max_act_row(e, ff);
    if (d->act_stride < d->act2_stride)
        d->act_stride = d->act2_stride;
}

/* Bytes of a session's scratch per token of its chunk: the buffers gm_fwd_create sizes by
 * max_chunk. */
uint64_t gm_fwd_scratch_token_bytes(const gm_engine *e)
{
    scratch_dims d;
    scratch_dims_of(e, &d);
    const uint64_t hc_mix = e->n_hc > 1 ? hc_mix_floats(e) + (e->hc_lr ? (uint64_t)e->n_hc * e->n_embd + e->hc_lr : 0) : 0;
    const uint64_t latent = e->desc.hp.n_expert_latent ? 2ull * e->moe_dim : 0;
    const uint64_t kda = e->ops.kda ? gm_delta_values(e) : 0, res = (uint64_t)e->res_max * e->n_embd;
    uint64_t floats = e->n_embd * (1ull + e->n_hc) + d.rows + hc_mix + latent + kda + res + d.wide * 2 + d.qd +
                      d.att + d.kvd * 2 + 2ull * (e->n_rot / 2 + 1) + d.nexp + 2 * d.ff + 2 * d.k;
    if (e->mla)
        floats += d.mla_qd + e->kv_lora + e->n_rot + d.mla_in + d.mla_vd;
    if (e->ops.attn_out_gate)
        floats += 3 * d.qd;
    if (e->n_comp) /* DeepSeek-V4's compressors, its indexer's queries and weights, the rotation */
        floats += 4ull * e->head_dim + 4ull * e->idx_dim + (uint64_t)e->idx_heads * (e->idx_dim + 1) + e->n_rot + 2;
    if (e->ple_layer >= 0) /* the n-gram embedding's rows, values, keys and convolution inputs */
        floats += 2ull * e->n_embd + 2ull * e->n_hc * e->n_embd;
    if (e->n_recurrent)
        floats += d.dn_in + d.dn_c + d.dn_z;
    if (e->idx_topk) /* the indexer's queries, weights, keys; the choice and its size */
        floats += (uint64_t)e->idx_heads * e->idx_dim + e->idx_heads + e->idx_dim + 1 +
                  (uint64_t)e->idx_topk * (e->idx_block ? e->idx_heads : 1);
    return floats * sizeof(float) + 2 * d.act_stride + d.act2_stride + 2 * d.k * sizeof(int32_t);
}

int gm_fwd_create(gm_fwd **out, gm_engine *e, uint32_t n_ctx, gm_kv_type kv_type, gm_err *err)
{
    *out = NULL;
    if (n_ctx == 0 || n_ctx > (1u << 24))
        return gm_err_set(err, GM_EINVAL, "context of %u tokens is not valid", n_ctx);
    gm_fwd *s = calloc(1, sizeof *s);
    if (!s)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    s->e = e;
    s->n_ctx = n_ctx;
    s->kv_type = kv_type;
    s->max_chunk = e->max_chunk < n_ctx ? e->max_chunk : n_ctx;
    const uint64_t T = s->max_chunk, E = e->n_embd, hd = e->head_dim;
    if (kv_type == GM_KV_Q8_0 && hd % GM_QK8_0 != 0) {
        free(s);
        return gm_err_set(err, GM_EINVAL, "an 8-bit KV cache needs head dims that are multiples of "
                          "%d (this model's are %llu)", GM_QK8_0, (unsigned long long)hd);
    }
    s->kv_row_bytes = kv_type == GM_KV_Q8_0 ? hd / GM_QK8_0 * sizeof(gm_block_q8_0)
                      : kv_type == GM_KV_F16 ? hd * 2 : hd * 4;
    scratch_dims d;
    scratch_dims_of(e, &d);
    const uint64_t qd = d.qd, kvd = d.kvd, ff = d.ff, wide = d.wide, mla_qd = d.mla_qd, mla_in = d.mla_in;
    const uint64_t mla_vd = d.mla_vd, dn_c = d.dn_c, dn_z = d.dn_z, dn_in = d.dn_in, k = d.k, nexp = d.nexp;
    s->act_stride = d.act_stride;
    s->act2_stride = d.act2_stride;
    /* bytes of each cache: a row per (layer, position, kv head) */
    /* bytes of each cache: a row per (layer, kv head, kept position); a sliding-window layer
     * keeps a ring of window - 1 + GM_WINDOW_STEP positions, a multiple of 16 (so a block of
     * 16 aligned positions never wraps) */
    s->kv_cap = malloc(e->n_layer * sizeof *s->kv_cap);
    s->kv_off = malloc(e->n_layer * sizeof *s->kv_off);
    uint64_t cache = 0;
    for (uint32_t l = 0; s->kv_cap && s->kv_off && l < e->n_layer; l++) {
        const uint64_t win = e->layers[l].window;
        const uint64_t ring = (win - 1 + GM_WINDOW_STEP + 15) / 16 * 16;
        s->kv_cap[l] = win && ring < n_ctx ? (uint32_t)ring : n_ctx;
        if (e->layers[l].recurrent)
            s->kv_cap[l] = 0; /* a fixed-size state instead (dn_state) */
        s->kv_off[l] = cache;
        cache += (uint64_t)e->n_head_kv * s->kv_cap[l] * s->kv_row_bytes;
    }
    s->k_cache = calloc(cache ? cache : 1, 1);
    s->v_cache = calloc(cache && !e->mla ? cache : 1, 1); /* MLA: the K rows serve as values */
    s->mla_q = touched_alloc(e->mla ? T * mla_qd * sizeof(float) : 1);
    s->mla_kv = touched_alloc(e->mla ? T * (e->kv_lora + e->n_rot) * sizeof(float) : 1);
    s->mla_in = touched_alloc(e->mla ? T * mla_in * sizeof(float) : 1);
    s->mla_v = touched_alloc(e->mla ? T * mla_vd * sizeof(float) : 1);
    s->x = touched_alloc(T * e->n_hc * E * sizeof(float));
    s->hc_mix = touched_alloc(e->n_hc > 1 ? T * hc_mix_floats(e) * sizeof(float) : 1);
    s->hc_gate = touched_alloc(e->hc_lr ? T * ((uint64_t)e->n_hc * E + e->hc_lr) * sizeof(float) : 1);
    s->xn = touched_alloc(T * wide * sizeof(float));
    s->q = touched_alloc(T * qd * sizeof(float));
    s->kk = touched_alloc(T * kvd * sizeof(float));
    s->vv = touched_alloc(T * kvd * sizeof(float));
    s->att = touched_alloc(T * d.att * sizeof(float));
    s->tmp = touched_alloc(T * wide * sizeof(float));
    s->rope_cos = touched_alloc(T * (e->n_rot / 2 + 1) * sizeof(float));
    s->rope_sin = touched_alloc(T * (e->n_rot / 2 + 1) * sizeof(float));
    s->act = touched_alloc(T * s->act_stride);
    s->act2 = touched_alloc(T * s->act2_stride);
    /* attention: items of attn_tb tokens x the group's query heads, about 64 queries */
    const uint32_t group = e->n_head / e->n_head_kv;
    s->attn_tb = group >= 64 ? 1 : 64 / group;
    const uint64_t nq = (uint64_t)s->attn_tb * group;
    /* kernel scratch; queries; two states (o, m, l); the causal ends */
    s->attn_part_floats = (GM_ATTN_SCRATCH_FLOATS(hd, nq) + 3 * nq * hd + 5 * nq + 15) / 16 * 16;
    s->attn_scratch = aligned_alloc(64, (uint64_t)e->n_threads * s->attn_part_floats * sizeof(float));
    /* parts of 256 positions, longer past 64 Ki of context so there are at most 256 */
    s->attn_part_pos = 256u * ((n_ctx + 256u * 256u - 1) / (256u * 256u));
    const uint64_t max_parts = (n_ctx + s->attn_part_pos - 1) / s->attn_part_pos;
    populate_write(s->attn_scratch, (uint64_t)e->n_threads * s->attn_part_floats * sizeof(float));
    /* only a decode with fewer kv heads than threads writes it: left to fault in */
    s->attn_split = malloc(max_parts * e->n_head * (hd + 2) * sizeof(float));
    s->router_logits = touched_alloc(T * nexp * sizeof(float));
    s->topk_ids = touched_alloc(T * k * sizeof(int32_t));
    s->topk_w = touched_alloc(T * k * sizeof(float));
    s->topk_n = touched_alloc(T * sizeof(uint32_t));
    s->exp_count = touched_alloc(nexp * sizeof(int32_t));
    s->pred_count = touched_alloc(nexp * sizeof(int32_t));
    s->exp_start = touched_alloc(nexp * sizeof(int32_t));
    s->exp_tok = touched_alloc(T * k * sizeof(int32_t));
    s->exp_wt = touched_alloc(T * k * sizeof(float));
    s->act_gather = touched_alloc(T * s->act_stride);
    s->g_out = touched_alloc(T * ff * sizeof(float));
    s->u_out = touched_alloc(T * ff * sizeof(float));
    s->d_out = touched_alloc(T * d.rows * sizeof(float));
    s->moe_out = touched_alloc(T * E * sizeof(float));
    s->exp_rows = touched_alloc(k * d.rows * sizeof(float));
    s->gpu_rows = touched_alloc(k * d.rows * sizeof(float));
    /* a latent MoE's routed input and sum; else the routed experts read xn and add to moe_out */
    const bool latent = e->desc.hp.n_expert_latent > 0;
    s->lat_in = touched_alloc(latent ? T * e->moe_dim * sizeof(float) : 1);
    s->lat_buf = touched_alloc(latent ? T * e->moe_dim * sizeof(float) : 1);
    s->moe_in = latent ? s->lat_in : s->xn;
    s->lat_out = latent ? s->lat_buf : s->moe_out;
    s->kda_g = touched_alloc(e->ops.kda ? T * gm_delta_values(e) * sizeof(float) : 1);
    s->res_stack = touched_alloc(e->res_max ? T * e->res_max * E * sizeof(float) : 1);
    s->logits_last = touched_alloc((uint64_t)e->n_vocab * sizeof(float));
    s->la_x = touched_alloc(E * sizeof(float));
    s->la_logits = touched_alloc(nexp * sizeof(float));
    s->la_act = touched_alloc(s->act_stride);
    s->q_gate = touched_alloc(e->ops.attn_out_gate ? T * 3 * qd * sizeof(float) : 1);
    const uint64_t nrec = e->n_recurrent, dn_part = 2ull * e->dn_dk + e->dn_dv;
    uint64_t dn_row = (uint64_t)e->n_threads * dn_part;
    dn_row = dn_c + dn_z > dn_row ? dn_c + dn_z : dn_row;
    s->dn_conv_state = calloc(nrec ? nrec * (e->dn_kconv - 1) * dn_c + 1 : 1, sizeof(float));
    s->dn_state = calloc(nrec ? nrec * e->dn_nv * (uint64_t)e->dn_dk * e->dn_dv : 1, sizeof(float));
    s->dn_in = touched_alloc(nrec ? T * dn_in * sizeof(float) : 1);
    s->dn_mixed = touched_alloc(nrec ? T * dn_c * sizeof(float) : 1);
    s->dn_o = touched_alloc(nrec ? T * dn_z * sizeof(float) : 1);
    s->dn_row = touched_alloc(nrec ? dn_row * sizeof(float) : 1);
    /* qwen4exp's n-gram embedding (ple.c) */
    const bool ple = e->ple_layer >= 0;
    const uint64_t hcw = (uint64_t)e->n_hc * E;
    s->tok_hist = calloc(ple || e->desc.hp.n_hash_layers ? n_ctx : 1, sizeof(int32_t));
    s->ple_conv_rows = calloc(ple ? (e->ple_hist + T) * hcw : 1, sizeof(float));
    s->ple_buf = touched_alloc(ple ? T * (2 * E + hcw) * sizeof(float) : 1);
    s->ple_raw = malloc(ple ? GM_PLE_GATHER * e->ple_row_bytes : 1);
    if (!s->tok_hist || !s->ple_conv_rows || !s->ple_buf || !s->ple_raw) {
        gm_fwd_free(s);
        return gm_err_set(err, GM_ENOMEM, "out of memory for the n-gram embedding of a session of %u tokens", n_ctx);
    }
    /* DeepSeek sparse attention (dsa.c) */
    const uint64_t ih = e->idx_heads, id = e->idx_dim, ik = e->idx_topk, nt = (uint64_t)e->n_threads;
    const bool dsa = ik > 0;
    /* QSA keeps a layer's raw keys and its blocks' keys (qsa.c) */
    s->idx_keys = calloc(dsa ? (uint64_t)e->n_idx_layers * n_ctx * id * (e->ops.qsa ? 2 : 1) : 1, sizeof(float));
    s->idx_q = touched_alloc(dsa ? T * ih * id * sizeof(float) : 1);
    s->idx_w = touched_alloc(dsa ? T * ih * sizeof(float) : 1);
    s->idx_knew = touched_alloc(dsa ? T * id * sizeof(float) : 1);
    /* MiniMax's: a choice of blocks per (token, kv head), the rows of its blocks, K and V */
    const uint64_t per_tok = e->idx_block ? ih : 1;
    const uint64_t rows = e->idx_block ? 2ull * ik * e->idx_block : e->ops.qsa ? 2ull * ik : ik;
    s->idx_sel = touched_alloc(dsa ? T * per_tok * ik * sizeof(int32_t) : 1);
    s->idx_nsel = touched_alloc(dsa ? T * sizeof(uint32_t) : 1);
    s->idx_score = malloc(dsa ? nt * n_ctx * sizeof(float) : 1);
    s->idx_pos = malloc(dsa ? nt * n_ctx * sizeof(int32_t) : 1);
    s->idx_rows = malloc(dsa ? nt * rows * s->kv_row_bytes : 1);
    if (!s->idx_keys || !s->idx_q || !s->idx_w || !s->idx_knew || !s->idx_sel || !s->idx_nsel ||
        !s->idx_score || !s->idx_pos || !s->idx_rows) {
        gm_fwd_free(s);
        return gm_err_set(err, GM_ENOMEM, "out of memory for the sparse attention of a session of %u tokens",
                          n_ctx);
    }
    if (!s->kv_cap || !s->kv_off || !s->k_cache || !s->v_cache || !s->x || !s->hc_mix || !s->hc_gate || !s->lat_in ||
        !s->lat_buf || !s->kda_g || !s->res_stack || !s->xn || !s->q || !s->kk || !s->vv || !s->att ||
        !s->tmp || !s->rope_cos || !s->rope_sin || !s->act || !s->act2 || !s->attn_scratch || !s->attn_split ||
        !s->router_logits || !s->topk_ids || !s->topk_w || !s->topk_n || !s->exp_count || !s->pred_count || !s->exp_start ||
        !s->exp_tok || !s->exp_wt || !s->act_gather || !s->g_out || !s->u_out || !s->d_out ||
        !s->moe_out || !s->exp_rows || !s->gpu_rows || !s->logits_last || !s->la_x || !s->la_logits || !s->la_act ||
        !s->mla_q || !s->mla_kv || !s->mla_in || !s->mla_v || !s->q_gate || !s->dn_conv_state ||
        !s->dn_state || !s->dn_in || !s->dn_mixed || !s->dn_o || !s->dn_row) {
        gm_fwd_free(s);
        return gm_err_set(err, GM_ENOMEM, "out of memory for a session of %u tokens (KV cache %.1f MB)",
                          n_ctx, (e->mla ? 1.0 : 2.0) * (double)cache / 1e6);
    }
    int crc = gm_csa_create(s, err); /* DeepSeek-V4's compressed rows (csa.c) */
    if (crc) {
        gm_fwd_free(s);
        return crc;
    }
    if (e->gpu_attn) {
        gm_err sub = {0};
        if (gm_gpu_kv_create(&s->gkv, e->gpu_attn, s, &sub))
            gm_log(GM_LOG_NOTE, "[gpu] this session's attention runs on the CPU: %s", sub.msg);
        else if (e->gpu_dec && gm_gpu_tok_create(&s->gtok, e->gpu_dec, s, &sub))
            gm_log(GM_LOG_NOTE, "[gpu] this session decodes layer by layer: %s", sub.msg);
    }
    *out = s;
    return 0;
}

/* qwen4exp's n-gram embedding: its convolution's history, a recurrent state (0 without one). */
static uint64_t ple_state_bytes(const gm_fwd *s)
{
    const gm_engine *e = s->e;
    return e->ple_layer >= 0 ? (uint64_t)e->ple_hist * e->n_hc * e->n_embd * sizeof(float) : 0;
}

void gm_fwd_reset(gm_fwd *s)
{
    const gm_engine *e = s->e;
    s->pos = 0;
    s->hw = 0;
    s->broken = false;
    s->decoded = false;
    if (e->n_recurrent) {
        const uint64_t nrec = e->n_recurrent;
        memset(s->dn_conv_state, 0, nrec * (e->dn_kconv - 1) * gm_delta_channels(e) * sizeof(float));
        memset(s->dn_state, 0, nrec * e->dn_nv * (uint64_t)e->dn_dk * e->dn_dv * sizeof(float));
    }
    if (e->ple_layer >= 0)
        memset(s->ple_conv_rows, 0, ple_state_bytes(s));
}
uint32_t gm_fwd_pos(const gm_fwd *s) { return s->pos; }
uint32_t gm_fwd_n_ctx(const gm_fwd *s) { return s->n_ctx; }
void gm_fwd_set_cancel(gm_fwd *s, const atomic_int *flag) { s->cancel = flag; }
bool gm_fwd_whole(const gm_fwd *s) { return gm_fwd_can_rewind(s, s->pos); }

/* A layer whose cache is a ring shorter than the context (a sliding window). */
static bool ringed(const gm_fwd *s, uint32_t l)
{
    return s->e->layers[l].window && !s->e->layers[l].recurrent && s->kv_cap[l] < s->n_ctx;
}

bool gm_fwd_can_rewind(const gm_fwd *s, uint32_t pos)
{
    if (pos > s->pos || !gm_csa_can_rewind(s, pos))
        return false;
    if (s->e->n_recurrent)
        return pos == s->pos && !s->broken;
    /* the next token at pos attends pos - window + 1 .. pos; each ring keeps the kv_cap positions
     * before the highest one written */
    for (uint32_t l = 0; l < s->e->n_layer; l++)
        if (ringed(s, l) && (uint64_t)s->hw - pos + s->e->layers[l].window > (uint64_t)s->kv_cap[l] + 1)
            return false;
    return true;
}

void gm_fwd_rewind(gm_fwd *s, uint32_t pos)
{
    if (pos < s->pos)
        s->pos = pos;
}

uint64_t gm_fwd_state_bytes(const gm_fwd *s)
{
    const gm_engine *e = s->e;
    uint64_t b = 0;
    for (uint32_t l = 0; l < e->n_layer; l++)
        if (ringed(s, l)) /* K and V rings; MLA's one */
            b += (e->mla ? 1ull : 2ull) * e->n_head_kv * s->kv_cap[l] * s->kv_row_bytes;
    if (e->n_recurrent)
        b += ((uint64_t)e->n_recurrent * (e->dn_kconv - 1) * gm_delta_channels(e) +
              (uint64_t)e->n_recurrent * e->dn_nv * e->dn_dk * e->dn_dv) * sizeof(float);
    return b + ple_state_bytes(s) + gm_csa_state_bytes(s);
}

/* Copies the rings and the recurrent states to or from buf (gm_fwd_state_bytes of them). */
static void state_copy(gm_fwd *s, uint8_t *buf, bool save)
{
    const gm_engine *e = s->e;
    uint64_t at = 0;
    for (uint32_t l = 0; l < e->n_layer; l++) {
        if (!ringed(s, l))
            continue;
        const uint64_t b = (uint64_t)e->n_head_kv * s->kv_cap[l] * s->kv_row_bytes;
        uint8_t *k = (uint8_t *)s->k_cache + s->kv_off[l], *v = (uint8_t *)s->v_cache + s->kv_off[l];
        if (save)
            memcpy(buf + at, k, b);
        else
            memcpy(k, buf + at, b);
        at += b;
        if (e->mla) /* the K rows serve as values */
            continue;
        if (save)
            memcpy(buf + at, v, b);
        else
            memcpy(v, buf + at, b);
        at += b;
    }
    if (e->n_recurrent) {
        const uint64_t c = (uint64_t)e->n_recurrent * (e->dn_kconv - 1) * gm_delta_channels(e) * sizeof(float);
        const uint64_t r = (uint64_t)e->n_recurrent * e->dn_nv * e->dn_dk * e->dn_dv * sizeof(float);
        if (save) {
            memcpy(buf + at, s->dn_conv_state, c);
            memcpy(buf + at + c, s->dn_state, r);
        } else {
            memcpy(s->dn_conv_state, buf + at, c);
            memcpy(s->dn_state, buf + at + c, r);
        }
        at += c + r;
    }
    if (save)
        memcpy(buf + at, s->ple_conv_rows, ple_state_bytes(s));
    else
        memcpy(s->ple_conv_rows, buf + at, ple_state_bytes(s));
    gm_csa_state_copy(s, buf + at + ple_state_bytes(s), save);
}

void gm_fwd_state_save(const gm_fwd *s, void *buf) { state_copy((gm_fwd *)s, buf, true); }

void gm_fwd_state_load(gm_fwd *s, const void *buf, uint32_t pos)
{
    state_copy(s, (uint8_t *)buf, false);
    s->pos = pos;
    s->hw = pos;
    s->broken = false;
}

/* The scale is rounded exactly as ggml's rms_norm rounds it: float squares summed in double,
 * the mean rounded to float, eps added in float, then sqrtf and a float reciprocal. A scale one
 * ulp away (as the all-double 1/sqrt(ss/d + eps) gives on some rows) moves normalized values
 * across the .5 rounding boundary of the next int8 activation quantization: on the iq4_xs
 * qwen3moe fixture one attn_v input of token 0 became 10 instead of llama.cpp's 11 and moved
 * position 0's logits by 0.22. */
void gm_add_bias(float *y, const float *b, uint32_t n, uint64_t d)
{
    if (!b)
        return;
    for (uint32_t t = 0; t < n; t++)
        for (uint64_t i = 0; i < d; i++)
            y[t * d + i] += b[i];
}

void gm_rms_norm(const float *x, const float *w, float *y, uint32_t n, uint32_t d, float eps)
{
    for (uint32_t t = 0; t < n; t++) {
        const float *xr = x + (uint64_t)t * d;
        float *yr = y + (uint64_t)t * d;
        double ss = 0;
        for (uint32_t i = 0; i < d; i++) {
            const float sq = xr[i] * xr[i];
            ss += (double)sq;
        }
        const float mean = (float)(ss / (double)d);
        const float scale = 1.0f / sqrtf(mean + eps);
        for (uint32_t i = 0; i < d; i++)
            yr[i] = xr[i] * scale * (w ? w[i] : 1.0f);
    }
}

int gm_prepare(gm_fwd *s, uint32_t wtype, const float *x, uint64_t d, uint32_t n, uint8_t *dst,
               uint64_t dst_stride, gm_err *err)
{
    return gm_act_quantize(wtype, x, d, d, n, dst, dst_stride, s->e->pool, s->e->n_threads, err);
}

static int embed(gm_fwd *s, const int32_t *tokens, uint32_t n, gm_err *err)
{
    const gm_engine *e = s->e;
    const gm_gguf_tensor *t = e->tok_embd;
    uint64_t row_bytes;
    gm_err sub = {0};
    if (gm_type_row_bytes(t->type, e->n_embd, &row_bytes, &sub) != 0)
        return gm_err_set(err, GM_EFORMAT, "token_embd.weight: %s", sub.msg);
    const uint8_t *base = gm_engine_tensor_data(e, t);
    for (uint32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= e->n_vocab)
            return gm_err_set(err, GM_EINVAL, "token id %d is outside the vocabulary (%u tokens)",
                              tokens[i], e->n_vocab);
        float *x = s->x + (uint64_t)i * e->n_hc * e->n_embd;
        if (gm_dequant_row(t->type, base + (uint64_t)tokens[i] * row_bytes, x, e->n_embd) != 0)
            return gm_err_set(err, GM_EUNSUPPORTED, "token_embd.weight: type %s cannot be read",
                              gm_type_name(t->type));
        if (e->ple_layer >= 0 || e->desc.hp.n_hash_layers) /* the n-gram embedding hashes the tokens
                                                             * before a position; hash routing reads them */
            s->tok_hist[s->pos + i] = tokens[i];
        for (uint32_t j = 1; j < e->n_hc; j++) /* hyper-connections: every stream starts from it */
            memcpy(x + (uint64_t)j * e->n_embd, x, e->n_embd * sizeof(float));
    }
    return 0;
}

static void rope_tables(gm_fwd *s, uint32_t n)
{
    const gm_engine *e = s->e;
    const uint32_t half = e->n_rot / 2;
    for (uint32_t t = 0; t < n; t++)
        gm_rope_angles(e, s->pos + t, s->rope_cos + (uint64_t)t * half, s->rope_sin + (uint64_t)t * half);
}

void gm_rope_angles_of(const double *inv, float mscale, uint32_t n_rot, uint64_t pos, float *c, float *sn)
{
    const double p = (double)pos;
    for (uint32_t i = 0; i < n_rot / 2; i++) {
        const double a = p * inv[i];
        c[i] = (float)(cos(a) * mscale);
        sn[i] = (float)(sin(a) * mscale);
    }
}

void gm_rope_angles(const gm_engine *e, uint32_t pos, float *c, float *sn)
{
    gm_rope_angles_of(e->rope_inv, e->rope_mscale, e->n_rot, pos, c, sn);
}

int gm_fwd_eval(gm_fwd *s, const int32_t *tokens, uint32_t n, float *logits, bool all_logits,
                    gm_err *err)
{
    gm_engine *e = s->e;
    if (n == 0)
        return 0;
    if (n > s->max_chunk)
        return gm_err_set(err, GM_EINVAL, "%u tokens in one call; the session takes at most %u", n,
                          s->max_chunk);
    if ((uint64_t)s->pos + n > s->n_ctx)
        return gm_err_set(err, GM_ERANGE, "the context is full (%u of %u tokens)", s->pos, s->n_ctx);
    if (s->broken)
        return gm_err_set(err, GM_EINVAL, "an earlier call failed part way through the model's "
                          "recurrent layers; reset the session before using it again");
    const uint64_t t_start = e->profile && n == 1 ? gm_now_ns() : 0;
    int rc = embed(s, tokens, n, err);
    if (rc)
        return rc;
    /* arena token split: a short prefill after decode goes through the decode arena (its
     * experts looked up and kept as decode's), not the ring, which would take the arena's memory */
    s->split = n > 1 && s->decoded && e->split_max && n <= e->split_max;
    if (e->stream) {
        if (n == 1)
            gm_stream_token(e->stream);
        else
            gm_stream_prefill(e->stream, s->split ? n : 0);
    }
    if (n == 1)
        s->decoded = true;
    if (s->pos + n > s->hw)
        s->hw = s->pos + n;
    rope_tables(s, n);
    if (n == 1 && gm_gpu_tok_on(s)) { /* every layer and the head on the device */
        if ((rc = gm_gpu_tok_run(s, logits, err)))
            return rc;
        goto done;
    }
    if (gm_gpu_chunk_on(s, n)) { /* a prompt's chunk, the same */
        if ((rc = gm_gpu_chunk_run(s, n, logits, all_logits, err)))
            return rc;
        goto done;
    }
    if (e->ple_layer >= 0 && (rc = gm_ple_start(s, n, err))) /* the n-gram table's rows, read meanwhile */
        return rc;
    for (uint32_t l = 0; l < e->n_layer; l++) {
        if (s->cancel && atomic_load_explicit(s->cancel, memory_order_relaxed)) {
            s->broken = e->n_recurrent > 0 && l > 0;
            return gm_err_set(err, GM_ECANCELED, "canceled");
        }
        if ((rc = e->recipe->layer(s, l, n, err))) {
            /* the KV rows written are past pos and harmless; a recurrent state is not */
            s->broken = e->n_recurrent > 0;
            return rc;
        }
    }
    if (logits) {
        uint32_t first = all_logits ? 0 : n - 1;
        uint32_t m = n - first;
        const float *xr = s->x + (uint64_t)first * e->n_embd;
        if (e->recipe->head) {
            if ((rc = e->recipe->head(s, first, m, s->moe_out, err))) {
                s->broken = e->n_recurrent > 0;
                return rc;
            }
            xr = s->moe_out;
        }
        if (e->out_norm)
            gm_rms_norm(xr, e->out_norm, s->xn, m, e->n_embd, e->rms_eps);
        else /* the recipe's head normalised the rows (qwen4exp's output mixing) */
            memcpy(s->xn, xr, (uint64_t)m * e->n_embd * sizeof(float));
        uint64_t stride;
        if (m == 1 && gm_gpu_head_on(e->gpu_attn)) { /* a decode token's logits on the device */
            if ((rc = gm_gpu_head(e->gpu_attn, s->xn, logits, err))) {
                s->broken = e->n_recurrent > 0;
                return rc;
            }
        } else if ((rc = gm_act_row_bytes(e->output.type, e->n_embd, &stride, err)) ||
            (rc = gm_prepare(s, e->output.type, s->xn, e->n_embd, m, s->act, s->act_stride, err)) ||
            (rc = gm_matmul(e->k, &e->output, 0, e->n_vocab, s->act, s->act_stride, m, logits,
                            e->n_vocab, e->pool, e->n_threads, err))) {
            s->broken = e->n_recurrent > 0;
            return rc;
        }
    }
done:
    s->pos += n;
    if (t_start) {
        e->prof_total_ns += gm_now_ns() - t_start;
        e->prof_tokens++;
    }
    return 0;
}
