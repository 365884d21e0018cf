/* Binding the GGUF tensors to the forward pass's per-layer weights, with shape checks: the
 * binders a family's recipe composes (infer/recipe.h), and the check that every tensor of the
 * file was bound by one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer/recipe.h"
#include "infer/rope.h"
#include "kernels/dequant.h"

/* The tensor's bytes: the pinned copy when the every-token weights are pinned, else the file
 * mapping (page cache). Expert stacks always come from the mapping; the arena overrides them
 * per call. */
static const void *data_of(const gm_engine *e, const gm_gguf_tensor *t)
{
    const void *pinned = e->pin ? gm_pin_data(e->pin, (uint64_t)(t - gm_gguf_tensor_at(e->g, 0))) : NULL;
    return pinned ? pinned : gm_gguf_tensor_data(e->g, t);
}

const void *gm_engine_tensor_data(const gm_engine *e, const gm_gguf_tensor *t) { return data_of(e, t); }

static const gm_gguf_tensor *find(const gm_engine *e, int layer, const char *suffix)
{
    char name[160];
    if (layer >= 0)
        snprintf(name, sizeof name, "blk.%d.%s", layer, suffix);
    else
        snprintf(name, sizeof name, "%s", suffix);
    return gm_gguf_find_tensor(e->g, name);
}

/* Records that a binder took t (see leftover()). */
static void take(gm_engine *e, const gm_gguf_tensor *t)
{
    if (e->bound)
        e->bound[t - gm_gguf_tensor_at(e->g, 0)] = 1;
}

static int missing(const gm_engine *e, int layer, const char *suffix, gm_err *err)
{
    if (layer >= 0)
        return gm_err_set(err, GM_EFORMAT, "%s: tensor 'blk.%d.%s' is missing", gm_gguf_path(e->g),
                          layer, suffix);
    return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' is missing", gm_gguf_path(e->g), suffix);
}

/* Gives buf (malloc'd) to the engine, which frees it with the others (freed now on failure). */
static int keep_copy(gm_engine *e, float *buf, gm_err *err)
{
    if (e->n_f32_copies == e->cap_f32_copies) {
        uint32_t cap = e->cap_f32_copies ? e->cap_f32_copies * 2 : 64;
        float **nc = realloc(e->f32_copies, cap * sizeof *nc);
        if (!nc) {
            free(buf);
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        }
        e->f32_copies = nc;
        e->cap_f32_copies = cap;
    }
    e->f32_copies[e->n_f32_copies++] = buf;
    return 0;
}

/* A float32 copy of a 1-D tensor of n elements (norm weights, biases). */
static int vec(gm_engine *e, int layer, const char *suffix, uint64_t n, bool required,
               const float **out, gm_err *err)
{
    *out = NULL;
    const gm_gguf_tensor *t = find(e, layer, suffix);
    if (!t)
        return required ? missing(e, layer, suffix, err) : 0;
    if (t->n_elems != n)
        return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' has %llu elements, expected %llu",
                          gm_gguf_path(e->g), t->name, (unsigned long long)t->n_elems,
                          (unsigned long long)n);
    take(e, t);
    float *buf = malloc(n * sizeof *buf);
    if (!buf)
        return gm_err_set(err, GM_ENOMEM, "out of memory for '%s'", t->name);
    int rc = keep_copy(e, buf, err);
    if (rc)
        return rc;
    if (gm_dequant_row(t->type, data_of(e, t), buf, n) != 0)
        return gm_err_set(err, GM_EUNSUPPORTED, "%s: tensor '%s' has type %s, which gmlx cannot read",
                          gm_gguf_path(e->g), t->name, gm_type_name(t->type));
    *out = buf;
    return 0;
}

/* A matrix of n_rows rows of n_cols (ggml dims [n_cols, n_rows]). */
static int mat(gm_engine *e, int layer, const char *suffix, uint64_t n_cols, uint64_t n_rows,
               bool required, gm_mat *out, bool *present, gm_err *err)
{
    memset(out, 0, sizeof *out);
    if (present)
        *present = false;
    const gm_gguf_tensor *t = find(e, layer, suffix);
    if (!t)
        return required ? missing(e, layer, suffix, err) : 0;
    if (t->ne[0] != n_cols || t->n_elems / t->ne[0] != n_rows)
        return gm_err_set(err, GM_EFORMAT,
                          "%s: tensor '%s' has shape [%llu, %llu], expected [%llu, %llu]",
                          gm_gguf_path(e->g), t->name, (unsigned long long)t->ne[0],
                          (unsigned long long)(t->n_elems / t->ne[0]), (unsigned long long)n_cols,
                          (unsigned long long)n_rows);
    take(e, t);
    gm_err sub = {0};
    if (gm_mat_init(out, t->type, data_of(e, t), n_cols, n_rows, &sub) != 0)
        return gm_err_set(err, sub.code, "%s: tensor '%s' (%s): %s", gm_gguf_path(e->g), t->name,
                          gm_type_name(t->type), sub.msg);
    if (present)
        *present = true;
    return 0;
}

static int stack(gm_engine *e, int layer, const char *suffix, uint64_t n_cols, uint64_t n_rows,
                 gm_expert_stack *out, gm_err *err)
{
    memset(out, 0, sizeof *out);
    const gm_gguf_tensor *t = find(e, layer, suffix);
    if (!t)
        return missing(e, layer, suffix, err);
    if (t->n_dims != 3 || t->ne[0] != n_cols || t->ne[1] != n_rows || t->ne[2] != e->n_expert)
        return gm_err_set(err, GM_EFORMAT,
                          "%s: expert stack '%s' has shape [%llu, %llu, %llu], expected [%llu, %llu, %u]",
                          gm_gguf_path(e->g), t->name, (unsigned long long)t->ne[0],
                          (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                          (unsigned long long)n_cols, (unsigned long long)n_rows, e->n_expert);
    take(e, t);
    gm_mat probe;
    gm_err sub = {0};
    if (gm_mat_init(&probe, t->type, data_of(e, t), n_cols, n_rows, &sub) != 0)
        return gm_err_set(err, sub.code, "%s: expert stack '%s' (%s): %s", gm_gguf_path(e->g),
                          t->name, gm_type_name(t->type), sub.msg);
    out->type = t->type;
    out->n_cols = n_cols;
    out->n_rows = n_rows;
    out->row_bytes = probe.row_bytes;
    out->expert_bytes = probe.row_bytes * n_rows;
    out->data = data_of(e, t);
    out->n_expert = e->n_expert;
    return 0;
}

/* The attention weights of an MLA layer (see mla.c for their use). */
int gm_bind_mla(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const uint64_t E = e->n_embd, nh = e->n_head, lora = e->kv_lora, R = e->n_rot;
    const uint64_t qd = nh * (e->qk_nope + R);
    int rc;
    bool has_qa;
    if ((rc = mat(e, l, "attn_q_a.weight", E, e->q_lora, false, &w->wq_a, &has_qa, err)))
        return rc;
    if (has_qa != (e->q_lora > 0))
        return gm_err_set(err, GM_EFORMAT, "%s: layer %d %s attn_q_a but q_lora_rank is %u",
                          gm_gguf_path(e->g), l, has_qa ? "has" : "lacks", e->q_lora);
    if (has_qa) {
        if ((rc = vec(e, l, "attn_q_a_norm.weight", e->q_lora, true, &w->q_a_norm, err)) ||
            (rc = mat(e, l, "attn_q_b.weight", e->q_lora, qd, true, &w->wq_b, NULL, err)))
            return rc;
    } else if ((rc = mat(e, l, "attn_q.weight", E, qd, true, &w->wq, NULL, err))) {
        return rc;
    }
    if (!find(e, l, "attn_k_b.weight") && find(e, l, "attn_kv_b.weight"))
        return gm_err_set(err, GM_EUNSUPPORTED,
                          "%s: layer %d stores attn_kv_b only; gmlx reads the split attn_k_b and "
                          "attn_v_b that current GGUF converters write (convert the model again)",
                          gm_gguf_path(e->g), l);
    if ((rc = mat(e, l, "attn_kv_a_mqa.weight", E, lora + R, true, &w->wkv_a, NULL, err)) ||
        (rc = vec(e, l, "attn_kv_a_norm.weight", lora, true, &w->kv_a_norm, err)) ||
        (rc = mat(e, l, "attn_k_b.weight", e->qk_nope, lora * nh, true, &w->k_b, NULL, err)) ||
        (rc = mat(e, l, "attn_v_b.weight", lora, (uint64_t)e->v_head * nh, true, &w->v_b, NULL, err)) ||
        (rc = mat(e, l, "attn_output.weight", nh * e->v_head, E, true, &w->wo, NULL, err)))
        return rc;
    /* a file may also keep the unsplit attn_kv_b beside the attn_k_b and attn_v_b made from it */
    const gm_gguf_tensor *kv_b = find(e, l, "attn_kv_b.weight");
    if (kv_b)
        take(e, kv_b);
    return 0;
}

/* The weights of a Gated DeltaNet layer (see delta.c for their use). */
int gm_bind_delta(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    w->recurrent = true;
    w->dn_slot = e->n_bound_recurrent++;
    const uint64_t E = e->n_embd, C = gm_delta_channels(e), Z = gm_delta_values(e), K = e->dn_kconv;
    int rc;
    w->dn_fused = find(e, l, "ssm_in.weight") != NULL;
    if (w->dn_fused) {
        if ((rc = mat(e, l, "ssm_in.weight", E, C + Z, true, &w->dn_qkv, NULL, err)))
            return rc;
    } else if ((rc = mat(e, l, "attn_qkv.weight", E, C, true, &w->dn_qkv, NULL, err)) ||
               (rc = mat(e, l, "attn_gate.weight", E, Z, true, &w->dn_z, NULL, err))) {
        return rc;
    }
    const gm_gguf_tensor *conv = find(e, l, "ssm_conv1d.weight");
    if (conv && conv->ne[0] != K)
        return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' has a kernel of %llu, expected %llu",
                          gm_gguf_path(e->g), conv->name, (unsigned long long)conv->ne[0],
                          (unsigned long long)K);
    w->dn_ba_split = find(e, l, "ssm_ba.weight") == NULL;
    if (w->dn_ba_split) {
        if ((rc = mat(e, l, "ssm_beta.weight", E, e->dn_nv, true, &w->dn_ba, NULL, err)) ||
            (rc = mat(e, l, "ssm_alpha.weight", E, e->dn_nv, true, &w->dn_alpha, NULL, err)))
            return rc;
    } else if ((rc = mat(e, l, "ssm_ba.weight", E, 2ull * e->dn_nv, true, &w->dn_ba, NULL, err))) {
        return rc;
    }
    if ((rc = vec(e, l, "ssm_conv1d.weight", C * K, true, &w->dn_conv, err)) ||
        (rc = vec(e, l, "ssm_a", e->dn_nv, true, &w->dn_a, err)) ||
        (rc = vec(e, l, "ssm_dt.bias", e->dn_nv, true, &w->dn_dt, err)) ||
        (rc = vec(e, l, "ssm_norm.weight", e->dn_dv, true, &w->dn_norm, err)) ||
        (rc = mat(e, l, "ssm_out.weight", Z, E, true, &w->dn_out, NULL, err)))
        return rc;
    return 0;
}

/* The lightning indexer of a sparse-attention layer (see dsa.c). A layer that reuses an earlier
 * layer's choice gets no slot; indexer tensors a file keeps for it anyway are bound and unused,
 * as the reference leaves them. */
int gm_bind_indexer(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const bool full = il < e->desc.n_layers && e->desc.layers[il].indexer_full;
    const uint64_t E = e->n_embd, H = e->idx_heads, D = e->idx_dim;
    int rc;
    if (!e->idx_topk || e->idx_block)
        return gm_err_set(err, GM_EFORMAT, "%s: no attention.indexer.* keys for the sparse attention of %s",
                          gm_gguf_path(e->g), e->desc.arch_name);
    w->idx_slot = full ? (int32_t)e->n_idx_layers++ : -1;
    if ((rc = mat(e, l, "indexer.attn_q_b.weight", e->q_lora, H * D, full, &w->idx_q_b, NULL, err)) ||
        (rc = mat(e, l, "indexer.attn_k.weight", E, D, full, &w->idx_k, NULL, err)) ||
        (rc = mat(e, l, "indexer.proj.weight", E, H, full, &w->idx_proj, NULL, err)) ||
        (rc = vec(e, l, "indexer.k_norm.weight", D, false, &w->idx_k_norm, err)) ||
        (rc = vec(e, l, "indexer.k_norm.bias", D, false, &w->idx_k_norm_b, err)))
        return rc;
    return 0;
}

/* The block indexer of a MiniMax sparse-attention layer (see msa.c); the leading dense layers
 * have none. */
int gm_bind_block_indexer(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const bool full = il < e->desc.n_layers && e->desc.layers[il].indexer_full;
    const uint64_t E = e->n_embd, H = e->idx_heads, D = e->idx_dim;
    int rc;
    if (!e->idx_topk || !e->idx_block)
        return gm_err_set(err, GM_EFORMAT, "%s: no attention.indexer.* keys for the sparse attention of %s",
                          gm_gguf_path(e->g), e->desc.arch_name);
    w->idx_slot = full ? (int32_t)e->n_idx_layers++ : -1;
    if ((rc = mat(e, l, "indexer.q_proj.weight", E, H * D, full, &w->idx_q, NULL, err)) ||
        (rc = mat(e, l, "indexer.k_proj.weight", E, D, full, &w->idx_k, NULL, err)) ||
        (rc = vec(e, l, "indexer.q_norm.weight", D, full, &w->idx_q_norm, err)) ||
        (rc = vec(e, l, "indexer.k_norm.weight", D, full, &w->idx_k_norm, err)))
        return rc;
    return 0;
}

int gm_bind_norms(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    int rc;
    if ((rc = vec(e, l, "attn_norm.weight", e->n_embd, true, &w->attn_norm, err)) ||
        (rc = vec(e, l, "ffn_norm.weight", e->n_embd, false, &w->ffn_norm, err)))
        return rc;
    if (!w->ffn_norm)
        return vec(e, l, "post_attention_norm.weight", e->n_embd, true, &w->ffn_norm, err);
    return 0;
}

int gm_bind_attn(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const uint32_t E = e->n_embd, hd = e->head_dim;
    const uint64_t qd = (uint64_t)e->n_head * hd, kvd = (uint64_t)e->n_head_kv * hd;
    int rc;
    if ((rc = vec(e, l, "attn_q_norm.weight", e->ops.qk_norm_joint ? qd : hd, false, &w->q_norm, err)) ||
        (rc = vec(e, l, "attn_k_norm.weight", e->ops.qk_norm_joint ? kvd : hd, false, &w->k_norm, err)) ||
        (rc = vec(e, l, "attn_q.bias", qd, false, &w->bq, err)) ||
        (rc = vec(e, l, "attn_k.bias", kvd, false, &w->bk, err)) ||
        (rc = vec(e, l, "attn_v.bias", kvd, false, &w->bv, err)) ||
        (rc = vec(e, l, "attn_output.bias", E, false, &w->bo, err)) ||
        (rc = mat(e, l, "attn_q.weight", E, e->ops.attn_out_gate ? 2 * qd : qd, true, &w->wq, NULL, err)) ||
        (rc = mat(e, l, "attn_k.weight", E, kvd, true, &w->wk, NULL, err)) ||
        (rc = mat(e, l, "attn_v.weight", E, kvd, true, &w->wv, NULL, err)) ||
        (rc = mat(e, l, "attn_output.weight", qd, E, true, &w->wo, NULL, err)) ||
        (rc = vec(e, l, "attn_sinks.weight", e->n_head, false, &w->sinks, err)))
        return rc;
    if (il < e->desc.n_layers && e->desc.layers[il].is_sliding)
        w->window = e->desc.hp.sliding_window;
    return 0;
}

int gm_bind_ffn(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const uint32_t E = e->n_embd;
    int rc;
    w->is_moe = find(e, l, "ffn_gate_exps.weight") != NULL;
    if (!w->is_moe) {
        if ((rc = mat(e, l, "ffn_gate.weight", E, e->n_ff, true, &w->ffn_gate, NULL, err)) ||
            (rc = mat(e, l, "ffn_up.weight", E, e->n_ff, true, &w->ffn_up, NULL, err)) ||
            (rc = mat(e, l, "ffn_down.weight", e->n_ff, E, true, &w->ffn_down, NULL, err)))
            return rc;
        return 0;
    }
    if ((rc = mat(e, l, "ffn_gate_inp.weight", E, e->n_expert, true, &w->router, NULL, err)) ||
        (rc = vec(e, l, "exp_probs_b.bias", e->n_expert, false, &w->router_bias, err)) ||
        (!w->router_bias && /* Hy3's converter names it without the suffix */
         (rc = vec(e, l, "exp_probs_b", e->n_expert, false, &w->router_bias, err))) ||
        (rc = vec(e, l, "ffn_gate_inp.bias", e->n_expert, false, &w->router_b, err)) ||
        (rc = vec(e, l, "ffn_gate_exps.bias", (uint64_t)e->n_ff_exp * e->n_expert, false, &w->gate_b, err)) ||
        (rc = vec(e, l, "ffn_up_exps.bias", (uint64_t)e->n_ff_exp * e->n_expert, false, &w->up_b, err)) ||
        (rc = vec(e, l, "ffn_down_exps.bias", (uint64_t)e->moe_dim * e->n_expert, false, &w->down_b, err)) ||
        (rc = stack(e, l, "ffn_gate_exps.weight", e->moe_dim, e->n_ff_exp, &w->gate, err)) ||
        (rc = stack(e, l, "ffn_up_exps.weight", e->moe_dim, e->n_ff_exp, &w->up, err)) ||
        (rc = stack(e, l, "ffn_down_exps.weight", e->n_ff_exp, e->moe_dim, &w->down, err)))
        return rc;
    const gm_gguf_tensor *sg = find(e, l, "ffn_gate_shexp.weight");
    if (!sg)
        return 0;
    uint64_t ff = sg->n_elems / E;
    if (e->n_ff_shexp == 0 && ff <= UINT32_MAX)
        e->n_ff_shexp = (uint32_t)ff;
    /* the session's scratch is sized for n_ff_shexp: every layer must agree */
    if (ff != e->n_ff_shexp)
        return gm_err_set(err, GM_EFORMAT, "%s: shared expert of layer %d is %llu wide, the model's is %u",
                          gm_gguf_path(e->g), l, (unsigned long long)ff, e->n_ff_shexp);
    w->has_shexp = true;
    if ((rc = mat(e, l, "ffn_gate_shexp.weight", E, ff, true, &w->sh_gate, NULL, err)) ||
        (rc = mat(e, l, "ffn_up_shexp.weight", E, ff, true, &w->sh_up, NULL, err)) ||
        (rc = mat(e, l, "ffn_down_shexp.weight", ff, E, true, &w->sh_down, NULL, err)) ||
        (rc = mat(e, l, "ffn_gate_inp_shexp.weight", E, 1, false, &w->sh_gate_inp, &w->has_sh_gate_inp, err)))
        return rc;
    return 0;
}

/* Hyper-connection mixing: fn [2 n_hc rows of n_hc n_embd] (one row a stream for the head),
 * base, scale. */
static int hc_mixing(gm_engine *e, int l, const char *what, uint64_t n_out, uint64_t n_scale, gm_mat *fn,
                     const float **base, const float **scale, gm_err *err)
{
    char fn_name[48], base_name[48], scale_name[48];
    snprintf(fn_name, sizeof fn_name, "%s_fn.weight", what);
    snprintf(base_name, sizeof base_name, "%s_base.weight", what);
    snprintf(scale_name, sizeof scale_name, "%s_scale.weight", what);
    int rc;
    if ((rc = mat(e, l, fn_name, (uint64_t)e->n_hc * e->n_embd, n_out, true, fn, NULL, err)) ||
        (rc = vec(e, l, base_name, n_out, true, base, err)) || (rc = vec(e, l, scale_name, n_scale, true, scale, err)))
        return rc;
    return 0;
}

int gm_bind_hc(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const uint64_t H = e->n_hc;
    int rc;
    if (H < 2)
        return gm_err_set(err, GM_EFORMAT, "%s: no hyper_connection.count for the hyper-connections of %s",
                          gm_gguf_path(e->g), e->desc.arch_name);
    if ((rc = hc_mixing(e, l, "hc_attn", 2 * H, 2, &w->hc_attn_fn, &w->hc_attn_base, &w->hc_attn_scale, err)) ||
        (rc = hc_mixing(e, l, "hc_ffn", 2 * H, 2, &w->hc_ffn_fn, &w->hc_ffn_base, &w->hc_ffn_scale, err)))
        return rc;
    return 0;
}

/* Low-rank hyper-connection mixing (qwen4exp): <what>_norm [n_hc rows of n_embd], _down, _up,
 * and (inject not NULL) _inject. */
static int hc_low_rank(gm_engine *e, int l, const char *what, const float **norm, gm_mat *down, gm_mat *up,
                       gm_mat *inject, gm_err *err)
{
    const uint64_t W = (uint64_t)e->n_hc * e->n_embd;
    char n1[64], n2[64], n3[64], n4[64];
    snprintf(n1, sizeof n1, "%s_norm.weight", what);
    snprintf(n2, sizeof n2, "%s_down.weight", what);
    snprintf(n3, sizeof n3, "%s_up.weight", what);
    snprintf(n4, sizeof n4, "%s_inject.weight", what);
    int rc;
    if ((rc = vec(e, l, n1, W, true, norm, err)) || (rc = mat(e, l, n2, W, e->hc_lr, true, down, NULL, err)) ||
        (rc = mat(e, l, n3, e->hc_lr, W, true, up, NULL, err)) ||
        (inject && (rc = mat(e, l, n4, W, e->n_hc, true, inject, NULL, err))))
        return rc;
    return 0;
}

int gm_bind_hc_low_rank(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    int rc;
    if ((rc = hc_low_rank(e, l, "hc_attn", &w->hc_attn_norm, &w->hc_attn_down, &w->hc_attn_up, &w->hc_attn_inject,
                          err)) ||
        (rc = hc_low_rank(e, l, "hc_ffn", &w->hc_ffn_norm, &w->hc_ffn_down, &w->hc_ffn_up, &w->hc_ffn_inject, err)))
        return rc;
    return 0;
}

int gm_bind_hc_low_rank_head(gm_engine *e, gm_err *err)
{
    return hc_low_rank(e, -1, "output_hc", &e->hc_head_norm, &e->hc_head_down, &e->hc_head_up, NULL, err);
}

/* qwen4exp's n-gram embedding (ple.c) on its layer; nothing on the others. */
int gm_bind_ple(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    if ((int32_t)il != e->ple_layer)
        return 0;
    const int l = (int)il;
    const uint64_t E = e->n_embd, W = (uint64_t)e->n_hc * E;
    int rc;
    const gm_gguf_tensor *k = find(e, l, "ple_conv1d.weight");
    if (k && (k->n_dims != 2 || k->ne[0] != e->desc.hp.ple_conv))
        return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' is not [%u, %llu]", gm_gguf_path(e->g), k->name,
                          e->desc.hp.ple_conv, (unsigned long long)W);
    if ((rc = mat(e, l, "ple_key.weight", E, W, true, &w->ple_key, NULL, err)) ||
        (rc = mat(e, l, "ple_value.weight", E, E, true, &w->ple_value, NULL, err)) ||
        (rc = vec(e, l, "ple_norm_key.weight", W, true, &w->ple_norm_key, err)) ||
        (rc = vec(e, l, "ple_norm_query.weight", W, true, &w->ple_norm_query, err)) ||
        (rc = vec(e, l, "ple_norm_conv.weight", W, true, &w->ple_norm_conv, err)) ||
        (rc = vec(e, l, "ple_conv1d.weight", W * e->desc.hp.ple_conv, true, &w->ple_kernel, err)))
        return rc;
    return 0;
}

/* The n-gram embedding's table: rows of ple_head_dim, enough for every head's range. */
int gm_bind_ple_table(gm_engine *e, gm_err *err)
{
    if (e->ple_layer < 0)
        return 0;
    const gm_hparams *hp = &e->desc.hp;
    const gm_gguf_tensor *t = find(e, -1, "per_layer_token_embd.weight");
    if (!t)
        return missing(e, -1, "per_layer_token_embd.weight", err);
    uint64_t need = 0;
    for (uint32_t h = 0; h < hp->ple_n_heads; h++)
        if ((uint64_t)hp->ple_offset[h] + hp->ple_vocab[h] > need)
            need = (uint64_t)hp->ple_offset[h] + hp->ple_vocab[h];
    gm_err sub = {0};
    if (t->n_dims != 2 || t->ne[0] != hp->ple_head_dim || t->ne[1] < need ||
        gm_type_row_bytes(t->type, hp->ple_head_dim, &e->ple_row_bytes, &sub) != 0)
        return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' is not %u rows of %u (the n-gram heads' ranges)",
                          gm_gguf_path(e->g), t->name, (unsigned)need, hp->ple_head_dim);
    take(e, t);
    e->ple_table = t;
    return 0;
}

/* QSA's indexer (qwen4exp's full-attention layers; see the recipe): bound on every one, used
 * where the layer has a compress ratio. */
int gm_bind_qsa_indexer(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const uint64_t E = e->n_embd, H = e->idx_heads, D = e->idx_dim;
    int rc;
    if (!H || !D)
        return gm_err_set(err, GM_EFORMAT, "%s: no attention.indexer.* keys for the indexer of %s",
                          gm_gguf_path(e->g), e->desc.arch_name);
    w->idx_slot = il < e->desc.n_layers && e->desc.layers[il].indexer_full ? (int32_t)e->n_idx_layers++ : -1;
    if ((rc = mat(e, l, "indexer.q_proj.weight", E, H * D, true, &w->idx_q, NULL, err)) ||
        (rc = mat(e, l, "indexer.k_proj.weight", E, D, true, &w->idx_k, NULL, err)) ||
        (rc = vec(e, l, "indexer.q_norm.weight", D, true, &w->idx_q_norm, err)) ||
        (rc = vec(e, l, "indexer.k_norm.weight", D, true, &w->idx_k_norm, err)))
        return rc;
    return 0;
}

/* Sinkhorn mixing (DeepSeek-V4): fn [(2 + n_hc) n_hc rows of n_hc n_embd], base, scales (pre,
 * post, comb). */
int gm_bind_hc_sinkhorn(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const uint64_t H = e->n_hc, M = (2 + H) * H;
    int rc;
    if (H < 2 || !e->hc_sinkhorn)
        return gm_err_set(err, GM_EFORMAT, "%s: no hyper_connection.count or sinkhorn_iterations for the "
                          "hyper-connections of %s", gm_gguf_path(e->g), e->desc.arch_name);
    if ((rc = hc_mixing(e, l, "hc_attn", M, 3, &w->hc_attn_fn, &w->hc_attn_base, &w->hc_attn_scale, err)) ||
        (rc = hc_mixing(e, l, "hc_ffn", M, 3, &w->hc_ffn_fn, &w->hc_ffn_base, &w->hc_ffn_scale, err)))
        return rc;
    return 0;
}

/* DeepSeek-V4's attention (csa.c): the query through its latent, one key/value row, sinks, the
 * grouped low-rank output; the window every layer's raw keys keep. */
int gm_bind_csa(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const uint64_t E = e->n_embd, hd = e->head_dim, qd = (uint64_t)e->n_head * hd;
    const uint64_t G = e->o_groups, lo = e->o_lora;
    int rc;
    if (!G || !lo || e->n_head % G != 0 || !e->q_lora)
        return gm_err_set(err, GM_EFORMAT, "%s: attention output of %llu groups of rank %llu, %u heads and a "
                          "query latent of %u: not DeepSeek-V4's attention", gm_gguf_path(e->g),
                          (unsigned long long)G, (unsigned long long)lo, e->n_head, e->q_lora);
    if ((rc = mat(e, l, "attn_q_a.weight", E, e->q_lora, true, &w->wq_a, NULL, err)) ||
        (rc = vec(e, l, "attn_q_a_norm.weight", e->q_lora, true, &w->q_a_norm, err)) ||
        (rc = mat(e, l, "attn_q_b.weight", e->q_lora, qd, true, &w->wq_b, NULL, err)) ||
        (rc = mat(e, l, "attn_kv.weight", E, hd, true, &w->wkv_a, NULL, err)) ||
        (rc = vec(e, l, "attn_kv_a_norm.weight", hd, true, &w->kv_a_norm, err)) ||
        (rc = mat(e, l, "attn_output_a.weight", qd / G, G * lo, true, &w->wo_a, NULL, err)) ||
        (rc = mat(e, l, "attn_output_b.weight", G * lo, E, true, &w->wo_b, NULL, err)) ||
        (rc = vec(e, l, "attn_sinks.weight", e->n_head, true, &w->sinks, err)))
        return rc;
    if (il < e->desc.n_layers && e->desc.layers[il].is_sliding)
        w->window = e->desc.hp.sliding_window;
    /* compressed keys: CSA (4) pools overlapping windows of 2 x 4 positions and has an indexer,
     * HCA (128) whole windows */
    const uint32_t ratio = il < e->desc.n_layers ? e->desc.layers[il].compress_ratio : 0;
    w->comp_ratio = ratio;
    w->comp_slot = -1;
    if (!ratio)
        return 0;
    if (ratio != 4 && ratio != 128)
        return gm_err_set(err, GM_EUNSUPPORTED, "%s: layer %u compresses its keys by %u (DeepSeek-V4's are 4 and 128)",
                          gm_gguf_path(e->g), il, ratio);
    if (!w->window)
        return gm_err_set(err, GM_EFORMAT, "%s: layer %u compresses its keys but the file has no "
                          "attention.sliding_window for its raw ones", gm_gguf_path(e->g), il);
    const uint64_t c = ratio == 4 ? 2 : 1, D = e->idx_dim, H = e->idx_heads;
    w->comp_slot = (int32_t)e->n_comp++;
    if ((rc = mat(e, l, "attn_compressor_kv.weight", E, c * hd, true, &w->comp_wkv, NULL, err)) ||
        (rc = mat(e, l, "attn_compressor_gate.weight", E, c * hd, true, &w->comp_wgate, NULL, err)) ||
        (rc = vec(e, l, "attn_compressor_ape.weight", c * hd * ratio, true, &w->comp_ape, err)) ||
        (rc = vec(e, l, "attn_compressor_norm.weight", hd, true, &w->comp_norm, err)))
        return rc;
    if (ratio == 4 &&
        ((rc = mat(e, l, "indexer.proj.weight", E, H, true, &w->idx_proj, NULL, err)) ||
         (rc = mat(e, l, "indexer.attn_q_b.weight", e->q_lora, H * D, true, &w->idx_q_b, NULL, err)) ||
         (rc = mat(e, l, "indexer_compressor_kv.weight", E, 2 * D, true, &w->idx_comp_wkv, NULL, err)) ||
         (rc = mat(e, l, "indexer_compressor_gate.weight", E, 2 * D, true, &w->idx_comp_wgate, NULL, err)) ||
         (rc = vec(e, l, "indexer_compressor_ape.weight", 2 * D * ratio, true, &w->idx_comp_ape, err)) ||
         (rc = vec(e, l, "indexer_compressor_norm.weight", D, true, &w->idx_comp_norm, err))))
        return rc;
    return 0;
}

int gm_bind_unused(gm_engine *e, uint32_t il, const char *suffix, gm_err *err)
{
    (void)err;
    const gm_gguf_tensor *t = find(e, (int)il, suffix);
    if (t)
        take(e, t);
    return 0;
}

/* A hash-routed layer's table (DeepSeek-V4's first hash_layer_count layers): ffn_gate_tid2eid,
 * int32 [n_vocab][n_expert_used], every id checked against the experts. */
int gm_bind_hash_routing(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const char *sfx = "ffn_gate_tid2eid.weight";
    const gm_gguf_tensor *t = find(e, l, sfx);
    if (!t)
        return missing(e, l, sfx, err);
    if (t->type != GM_TYPE_I32 || t->n_dims != 2 || t->ne[0] != e->n_expert_used || t->ne[1] < e->n_vocab)
        return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' is %s [%llu, %llu], expected I32 [%u, %u]",
                          gm_gguf_path(e->g), t->name, gm_type_name(t->type), (unsigned long long)t->ne[0],
                          (unsigned long long)(t->n_dims > 1 ? t->ne[1] : 1), e->n_expert_used, e->n_vocab);
    take(e, t);
    const int32_t *ids = data_of(e, t);
    for (uint64_t i = 0; i < (uint64_t)e->n_vocab * e->n_expert_used; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= e->n_expert)
            return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' routes token %llu to expert %d of %u",
                              gm_gguf_path(e->g), t->name, (unsigned long long)(i / e->n_expert_used), ids[i],
                              e->n_expert);
    w->tid2eid = ids;
    return 0;
}

int gm_bind_hc_head(gm_engine *e, gm_err *err)
{
    return hc_mixing(e, -1, "output_hc", e->n_hc, 1, &e->hc_head_fn, &e->hc_head_base, &e->hc_head_scale, err);
}

int gm_bind_mla_gate(gm_engine *e, uint32_t il, gm_layer_w *w, bool required, gm_err *err)
{
    const uint64_t vd = (uint64_t)e->n_head * e->v_head;
    return mat(e, (int)il, "attn_gate.weight", e->n_embd, vd, required, &w->attn_gate, &w->has_attn_gate, err);
}

int gm_bind_mla_gate_sinks(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    int rc;
    if ((rc = vec(e, (int)il, "attn_sinks.weight", e->n_head, true, &w->sinks, err)) ||
        (rc = gm_bind_mla_gate(e, il, w, true, err)))
        return rc;
    return 0;
}

/* KDA's weights (see delta.c): its three causal convolutions' kernels, [d_conv] a channel, are
 * copied into one [q | k | v] array as the Gated DeltaNet's. */
int gm_bind_kda(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    w->recurrent = true;
    w->dn_slot = e->n_bound_recurrent++;
    const uint64_t E = e->n_embd, Z = gm_delta_values(e), K = e->dn_kconv, hd = e->dn_dk;
    const float *conv[3];
    static const char *const conv_name[3] = {"ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight"};
    int rc;
    for (int i = 0; i < 3; i++) {
        const gm_gguf_tensor *t = find(e, l, conv_name[i]);
        if (t && t->ne[0] != K)
            return gm_err_set(err, GM_EFORMAT, "%s: tensor '%s' has a kernel of %llu, expected %llu",
                              gm_gguf_path(e->g), t->name, (unsigned long long)t->ne[0], (unsigned long long)K);
        if ((rc = vec(e, l, conv_name[i], Z * K, true, &conv[i], err)))
            return rc;
    }
    float *all = malloc(3 * Z * K * sizeof *all);
    if (!all)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    for (int i = 0; i < 3; i++)
        memcpy(all + (uint64_t)i * Z * K, conv[i], Z * K * sizeof *all);
    if ((rc = keep_copy(e, all, err)))
        return rc;
    w->dn_conv = all;
    if ((rc = mat(e, l, "attn_q.weight", E, Z, true, &w->kda_q, NULL, err)) ||
        (rc = mat(e, l, "attn_k.weight", E, Z, true, &w->kda_k, NULL, err)) ||
        (rc = mat(e, l, "attn_v.weight", E, Z, true, &w->kda_v, NULL, err)) ||
        (rc = mat(e, l, "ssm_f_a.weight", E, hd, true, &w->kda_fa, NULL, err)) ||
        (rc = mat(e, l, "ssm_f_b.weight", hd, Z, true, &w->kda_fb, NULL, err)) ||
        (rc = mat(e, l, "ssm_beta.weight", E, e->dn_nv, true, &w->dn_ba, NULL, err)) ||
        (rc = mat(e, l, "ssm_g.weight", E, Z, true, &w->dn_z, NULL, err)) ||
        (rc = vec(e, l, "ssm_a", e->dn_nv, true, &w->dn_a, err)) ||
        (rc = vec(e, l, "ssm_dt.bias", Z, true, &w->dn_dt, err)) ||
        (rc = vec(e, l, "ssm_norm.weight", e->dn_dv, true, &w->dn_norm, err)) ||
        (rc = mat(e, l, "attn_output.weight", Z, E, true, &w->dn_out, NULL, err)))
        return rc;
    return 0;
}

/* A latent MoE's projections around its routed experts (a layer with routed experts only). */
int gm_bind_latent(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    const uint64_t E = e->n_embd, L = e->moe_dim;
    int rc;
    if (!w->is_moe || !e->desc.hp.n_expert_latent)
        return 0;
    if ((rc = mat(e, l, "ffn_routed_down.weight", E, L, true, &w->routed_down, NULL, err)) ||
        (rc = mat(e, l, "ffn_routed_up.weight", L, E, true, &w->routed_up, NULL, err)) ||
        (rc = vec(e, l, "ffn_routed_norm.weight", L, false, &w->routed_norm, err)))
        return rc;
    return 0;
}

int gm_bind_res(gm_engine *e, uint32_t il, gm_layer_w *w, gm_err *err)
{
    const int l = (int)il;
    int rc;
    if (!e->res_block)
        return 0;
    if ((rc = vec(e, l, "attn_res_score.weight", e->n_embd, true, &w->res_attn_score, err)) ||
        (rc = vec(e, l, "ffn_res_score.weight", e->n_embd, true, &w->res_ffn_score, err)))
        return rc;
    return 0;
}

int gm_bind_res_out(gm_engine *e, gm_err *err)
{
    return e->res_block ? vec(e, -1, "output_res_score.weight", e->n_embd, true, &e->res_out_score, err) : 0;
}

int gm_bind_attn_ffn(gm_engine *e, uint32_t l, gm_layer_w *w, gm_err *err)
{
    int rc;
    if ((rc = gm_bind_norms(e, l, w, err)) || (rc = gm_bind_attn(e, l, w, err)) || (rc = gm_bind_ffn(e, l, w, err)))
        return rc;
    return 0;
}

/* A tensor no binder took: the file holds a variant of the family that its recipe does not run
 * (an extra norm, bias or projection), and running it without would give wrong logits. The MTP
 * drafter's layers are left for speculative decoding. */
static int leftover(const gm_engine *e, gm_err *err)
{
    const uint64_t n = gm_gguf_n_tensors(e->g);
    for (uint64_t i = 0; i < n; i++) {
        if (e->bound[i] || (i < e->desc.n_tensors && e->desc.tensors[i].cls == GM_TC_MTP))
            continue;
        return gm_err_set(err, GM_EUNSUPPORTED,
                          "%s: tensor '%s' is not used by gmlx's %s model: this file holds a "
                          "variant of the family that gmlx does not run",
                          gm_gguf_path(e->g), gm_gguf_tensor_at(e->g, i)->name, e->desc.arch_name);
    }
    return 0;
}

int gm_engine_bind(gm_engine *e, gm_err *err)
{
    const uint32_t E = e->n_embd;
    int rc;
    e->bound = calloc(gm_gguf_n_tensors(e->g) + 1, 1);
    if (!e->bound)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    e->tok_embd = gm_gguf_find_tensor(e->g, "token_embd.weight");
    if (!e->tok_embd)
        return missing(e, -1, "token_embd.weight", err);
    take(e, e->tok_embd);
    if (e->tok_embd->ne[0] != E || e->tok_embd->n_elems / E != e->n_vocab)
        return gm_err_set(err, GM_EFORMAT, "%s: token_embd.weight does not match %u x %u",
                          gm_gguf_path(e->g), E, e->n_vocab);
    /* a recipe whose head normalises the rows itself may do without one (qwen4exp) */
    if ((rc = vec(e, -1, "output_norm.weight", E, !e->ops.head_norms, &e->out_norm, err)))
        return rc;
    bool has_out;
    if ((rc = mat(e, -1, "output.weight", E, e->n_vocab, false, &e->output, &has_out, err)))
        return rc;
    if (!has_out && (rc = mat(e, -1, "token_embd.weight", E, e->n_vocab, true, &e->output, NULL, err)))
        return rc; /* tied embeddings */

    e->layers = calloc(e->n_layer, sizeof *e->layers);
    if (!e->layers)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    for (uint32_t l = 0; l < e->n_layer; l++)
        if ((rc = e->recipe->bind_layer(e, l, &e->layers[l], err)))
            return rc;
    if (e->recipe->bind_model && (rc = e->recipe->bind_model(e, err)))
        return rc;
    /* RoPE: the per-pair rates, with the file's scaling and rope_freqs factors (Llama 3) */
    const float *freq_factors = NULL;
    if ((rc = vec(e, -1, "rope_freqs.weight", e->n_rot / 2, false, &freq_factors, err)))
        return rc;
    e->rope_inv = malloc((e->n_rot / 2 + 1) * sizeof *e->rope_inv);
    if (!e->rope_inv)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    gm_err sub = {0};
    gm_hparams rope_hp = e->desc.hp;
    if (e->ops.rope_plain) /* the family rotates by the plain base whatever the scaling says */
        snprintf(rope_hp.rope_scaling, sizeof rope_hp.rope_scaling, "none");
    if ((rc = gm_rope_freqs(&rope_hp, e->n_rot, freq_factors, e->rope_inv, &e->rope_mscale, &sub)))
        return gm_err_set(err, rc, "%s: %s", gm_gguf_path(e->g), sub.msg);
    if (e->n_comp) {
        /* DeepSeek-V4's compressed layers: their own base, the file's scaling, and a magnitude of 1
         * (the reference's attention factor 1 / (1 + 0.1 ln(1 / freq_scale)) undoes YaRN's) */
        rope_hp = e->desc.hp;
        rope_hp.rope_base = e->desc.hp.compress_rope_base;
        float mscale;
        e->comp_rope_inv = malloc((e->n_rot / 2 + 1) * sizeof *e->comp_rope_inv);
        if (!e->comp_rope_inv)
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        if (!(rope_hp.rope_base > 0.0f))
            return gm_err_set(err, GM_EFORMAT, "%s: compressed layers without attention.compress_rope_freq_base",
                              gm_gguf_path(e->g));
        if ((rc = gm_rope_freqs(&rope_hp, e->n_rot, NULL, e->comp_rope_inv, &mscale, &sub)))
            return gm_err_set(err, rc, "%s: %s", gm_gguf_path(e->g), sub.msg);
    }
    return leftover(e, err);
}
