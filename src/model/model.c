/* Model description: hyper-parameters and tensor classification (see model.h). */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/log.h"

const char *gm_tensor_group_name(gm_tensor_group g)
{
    static const char *names[GM_TG_COUNT] = {
        "attention",     "shared experts", "dense ffn and routers", "embeddings",  "output head",
        "other",         "routed experts", "lookup tables",         "mtp drafter",
    };
    return g < GM_TG_COUNT ? names[g] : "?";
}

const char *gm_tensor_class_name(gm_tensor_class c)
{
    switch (c) {
    case GM_TC_EVERY_TOKEN: return "every-token";
    case GM_TC_EXPERT: return "expert";
    case GM_TC_LOOKUP: return "lookup";
    case GM_TC_MTP: return "mtp";
    }
    return "?";
}

/* Reads "<arch>.<suffix>" as an unsigned integer; missing or mistyped keys leave *out as is.
 * A per-layer array (e.g. head_count_kv of hybrid models) yields its largest element. */
static void hp_u32(const gm_gguf *g, const char *arch, const char *suffix, uint32_t *out)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint64_t v;
    if (gm_gguf_get_u64(g, key, &v, NULL) == 0) {
        if (v <= UINT32_MAX)
            *out = (uint32_t)v;
        return;
    }
    gm_gguf_arr a;
    if (gm_gguf_get_arr(g, key, &a, NULL) == 0) {
        uint64_t best = 0;
        for (uint64_t i = 0; i < a.n; i++)
            if (gm_gguf_arr_u64(&a, i, &v) == 0 && v > best && v <= UINT32_MAX)
                best = v;
        if (a.n > 0)
            *out = (uint32_t)best;
    }
}

/* Per-layer value of an array-or-scalar key (head_count_kv may be an array). */
static uint32_t hp_layer_u32(const gm_gguf *g, const char *arch, const char *suffix, uint32_t layer,
                             uint32_t dflt)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    gm_gguf_arr a;
    uint64_t v;
    if (gm_gguf_get_arr(g, key, &a, NULL) == 0) {
        if (layer < a.n && gm_gguf_arr_u64(&a, layer, &v) == 0 && v <= UINT32_MAX)
            return (uint32_t)v;
        return dflt;
    }
    return dflt;
}

/* "<arch>.<suffix>": element `layer` of an array, the value of a number, else dflt. */
static float hp_layer_f32(const gm_gguf *g, const char *arch, const char *suffix, uint32_t layer, float dflt)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    gm_gguf_arr a;
    double v;
    if (gm_gguf_get_arr(g, key, &a, NULL) == 0)
        return layer < a.n && gm_gguf_arr_f64(&a, layer, &v) == 0 ? (float)v : dflt;
    return gm_gguf_get_f64(g, key, &v, NULL) == 0 ? (float)v : dflt;
}

/* Element i of an array of flags: bools or bytes, else integers; false when unreadable. */
static bool arr_flag(const gm_gguf_arr *a, uint64_t i)
{
    uint64_t v = 0;
    if (i >= a->n)
        return false;
    if (a->elem_type == GM_GGUF_BOOL || a->elem_type == GM_GGUF_U8 || a->elem_type == GM_GGUF_I8)
        return a->data[i] != 0;
    return gm_gguf_arr_u64(a, i, &v) == 0 && v != 0;
}

/* Parses "blk.N." and returns N, or -1. *rest points after the dot. */
static int32_t block_index(const char *name, const char **rest)
{
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    const char *p = name + 4;
    long n = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 7) {
        n = n * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (digits == 0 || *p != '.')
        return -1;
    *rest = p + 1;
    return (int32_t)n;
}

static bool starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Expert stack kind from the name after "blk.N.", or -1. Only the .weight tensors are stacks;
 * expert biases are small and read by every token. */
static int expert_kind(const char *rest)
{
    if (strcmp(rest, "ffn_gate_exps.weight") == 0) return GM_EXP_GATE;
    if (strcmp(rest, "ffn_up_exps.weight") == 0) return GM_EXP_UP;
    if (strcmp(rest, "ffn_down_exps.weight") == 0) return GM_EXP_DOWN;
    if (strcmp(rest, "ffn_gate_up_exps.weight") == 0) return GM_EXP_GATE_UP;
    return -1;
}

/* Group of an every-token tensor inside a block, from its name after "blk.N.". */
static gm_tensor_group block_group(const char *rest)
{
    if (strstr(rest, "shexp") || strstr(rest, "_shared"))
        return GM_TG_SHARED_EXPERTS;
    if (starts(rest, "attn") || starts(rest, "ssm") || strstr(rest, "attention") || starts(rest, "indexer") ||
        starts(rest, "time_mix") || starts(rest, "wkv"))
        return GM_TG_ATTENTION;
    if (starts(rest, "ffn") || starts(rest, "exp_probs") || starts(rest, "post_ffw") ||
        starts(rest, "post_attention_norm"))
        return GM_TG_DENSE_FFN_ROUTERS;
    return GM_TG_OTHER;
}

/* Lookup tables: per-layer token embedding tables, read one row per token. */
static bool is_lookup_name(const char *name)
{
    return strstr(name, "per_layer_token_embd") != NULL || strstr(name, "engram") != NULL;
}

/* Reads "<arch>.<suffix>" as a number; a missing or mistyped key leaves *out as is. */
static void hp_f32(const gm_gguf *g, const char *arch, const char *suffix, float *out)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    double v;
    if (gm_gguf_get_f64(g, key, &v, NULL) == 0)
        *out = (float)v;
}

/* qwen4exp's ple.* keys (see gm_hparams), checked as llama.cpp's loader checks them; what is
 * wrong goes to hp->ple_bad. */
static void describe_ple(const gm_gguf *g, const char *a, gm_hparams *hp)
{
    char key[160];
    gm_gguf_arr layers, mult, off, voc;
    hp->ple_layer = -1;
    snprintf(key, sizeof key, "%s.ple.layers", a);
    if (gm_gguf_get_arr(g, key, &layers, NULL) != 0 || layers.n == 0)
        return;
    uint64_t v = 0;
    if (layers.n != 1 || gm_gguf_arr_u64(&layers, 0, &v) != 0 || v > INT32_MAX) {
        snprintf(hp->ple_bad, sizeof hp->ple_bad, "ple.layers lists %llu layers (one is supported)",
                 (unsigned long long)layers.n);
        return;
    }
    hp->ple_layer = (int32_t)v;
    hp_u32(g, a, "ple.ngram_size", &hp->ple_ngram);
    hp_u32(g, a, "ple.heads_per_ngram", &hp->ple_per_ngram);
    hp_u32(g, a, "ple.conv_kernel", &hp->ple_conv);
    hp->ple_eos = UINT32_MAX;
    hp_u32(g, a, "ple.eos_token_id", &hp->ple_eos);
    hp_u32(g, a, "embedding_length_per_layer_input", &hp->ple_head_dim);
    if (hp->ple_ngram < 2 || hp->ple_ngram > GM_MAX_PLE_NGRAM || !hp->ple_per_ngram ||
        (uint64_t)(hp->ple_ngram - 1) * hp->ple_per_ngram > GM_MAX_PLE_HEADS || !hp->ple_conv || hp->ple_conv > 64 ||
        !hp->ple_head_dim) {
        snprintf(hp->ple_bad, sizeof hp->ple_bad, "n-grams of %u, %u heads each, a kernel of %u, rows of %u",
                 hp->ple_ngram, hp->ple_per_ngram, hp->ple_conv, hp->ple_head_dim);
        return;
    }
    if (hp->ple_eos == UINT32_MAX) {
        snprintf(hp->ple_bad, sizeof hp->ple_bad, "no ple.eos_token_id");
        return;
    }
    hp->ple_n_heads = (hp->ple_ngram - 1) * hp->ple_per_ngram;
    const char *names[3] = {"ple.layer_multipliers", "ple.head_offsets", "ple.head_vocab_sizes"};
    gm_gguf_arr *arrs[3] = {&mult, &off, &voc};
    const uint64_t need[3] = {hp->ple_ngram, hp->ple_n_heads, hp->ple_n_heads};
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%s.%s", a, names[i]);
        if (gm_gguf_get_arr(g, key, arrs[i], NULL) != 0 || arrs[i]->n < need[i]) {
            snprintf(hp->ple_bad, sizeof hp->ple_bad, "%s has fewer than %llu entries", names[i],
                     (unsigned long long)need[i]);
            return;
        }
    }
    for (uint32_t j = 0; j < hp->ple_ngram; j++)
        if (gm_gguf_arr_u64(&mult, j, &hp->ple_mult[j]) != 0) {
            snprintf(hp->ple_bad, sizeof hp->ple_bad, "ple.layer_multipliers is not an array of integers");
            return;
        }
    for (uint32_t h = 0; h < hp->ple_n_heads; h++) {
        uint64_t o = 0, n = 0;
        if (gm_gguf_arr_u64(&off, h, &o) != 0 || gm_gguf_arr_u64(&voc, h, &n) != 0 || n == 0 || o > INT32_MAX ||
            n > INT32_MAX || o + n > INT32_MAX) {
            snprintf(hp->ple_bad, sizeof hp->ple_bad, "the row range of n-gram head %u does not fit", h);
            return;
        }
        hp->ple_offset[h] = (uint32_t)o;
        hp->ple_vocab[h] = (uint32_t)n;
    }
}

static void describe_hparams(const gm_gguf *g, gm_model_desc *m)
{
    const char *a = m->arch_name;
    gm_hparams *hp = &m->hp;
    hp_u32(g, a, "block_count", &hp->n_layer);
    hp_u32(g, a, "embedding_length", &hp->n_embd);
    hp_u32(g, a, "attention.head_count", &hp->n_head);
    hp->n_head_kv = hp->n_head;
    hp_u32(g, a, "attention.head_count_kv", &hp->n_head_kv);
    if (hp->n_head)
        hp->head_dim_k = hp->head_dim_v = hp->n_embd / hp->n_head;
    hp_u32(g, a, "attention.key_length", &hp->head_dim_k);
    hp_u32(g, a, "attention.value_length", &hp->head_dim_v);
    /* MLA files of the current converter store the latent widths in key_length/value_length and
     * the per-head query/value widths in key_length_mla/value_length_mla. */
    if (m->arch && m->arch->mla) {
        hp_u32(g, a, "attention.key_length_mla", &hp->head_dim_k);
        hp_u32(g, a, "attention.value_length_mla", &hp->head_dim_v);
    }
    hp_u32(g, a, "context_length", &hp->n_ctx_train);
    hp->rope_ctx_orig = hp->n_ctx_train;
    hp_u32(g, a, "rope.scaling.original_context_length", &hp->rope_ctx_orig);
    hp->rms_eps = 1e-6f;
    hp->rope_base = 10000.0f;
    hp_f32(g, a, "attention.layer_norm_rms_epsilon", &hp->rms_eps);
    hp_f32(g, a, "rope.freq_base", &hp->rope_base);
    snprintf(hp->rope_scaling, sizeof hp->rope_scaling, "none");
    hp->rope_scale_factor = 1.0f;
    hp_f32(g, a, "rope.scale_linear", &hp->rope_scale_factor);
    if (hp->rope_scale_factor != 1.0f)
        snprintf(hp->rope_scaling, sizeof hp->rope_scaling, "linear");
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    gm_gguf_str st;
    if (gm_gguf_get_str(g, key, &st, NULL) == 0)
        snprintf(hp->rope_scaling, sizeof hp->rope_scaling, "%.*s", (int)(st.len < 15 ? st.len : 15), st.ptr);
    hp_f32(g, a, "rope.scaling.factor", &hp->rope_scale_factor);
    hp->yarn_attn_factor = 1.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    hp->yarn_ext_factor = 1.0f;
    hp_f32(g, a, "rope.scaling.attn_factor", &hp->yarn_attn_factor);
    hp_f32(g, a, "rope.scaling.yarn_attn_factor", &hp->yarn_attn_factor);
    hp_f32(g, a, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast);
    hp_f32(g, a, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow);
    hp_f32(g, a, "rope.scaling.yarn_ext_factor", &hp->yarn_ext_factor);
    hp_f32(g, a, "rope.scaling.yarn_log_multiplier", &hp->yarn_log_mul);
    hp_u32(g, a, "expert_count", &hp->n_expert);
    hp_u32(g, a, "expert_used_count", &hp->n_expert_used);
    hp_u32(g, a, "expert_shared_count", &hp->n_expert_shared);
    hp_u32(g, a, "feed_forward_length", &hp->n_ff);
    hp_u32(g, a, "expert_feed_forward_length", &hp->n_ff_exp);
    hp_u32(g, a, "expert_shared_feed_forward_length", &hp->n_ff_shexp);
    hp_u32(g, a, "leading_dense_block_count", &hp->n_leading_dense);
    hp_u32(g, a, "nextn_predict_layers", &hp->n_nextn);
    hp_u32(g, a, "attention.sliding_window", &hp->sliding_window);
    hp_u32(g, a, "attention.kv_lora_rank", &hp->kv_lora_rank);
    hp_u32(g, a, "attention.q_lora_rank", &hp->q_lora_rank);
    hp_u32(g, a, "rope.dimension_count", &hp->n_rot);
    snprintf(key, sizeof key, "%s.full_attention_interval", a);
    if (strcmp(a, "qwen4exp") == 0 && gm_gguf_find_kv(g, key) < 0)
        hp->full_attn_interval = 4; /* llama.cpp's qwen4exp when the file does not say */
    hp_u32(g, a, "full_attention_interval", &hp->full_attn_interval);
    hp_u32(g, a, "ssm.conv_kernel", &hp->ssm_conv_kernel);
    hp_u32(g, a, "ssm.state_size", &hp->ssm_state_size);
    hp_u32(g, a, "ssm.group_count", &hp->ssm_group_count);
    hp_u32(g, a, "ssm.time_step_rank", &hp->ssm_time_step_rank);
    hp_u32(g, a, "ssm.inner_size", &hp->ssm_inner_size);
    hp_u32(g, a, "expert_gating_func", &hp->expert_gating_func);
    hp_u32(g, a, "expert_group_count", &hp->expert_group_count);
    hp_u32(g, a, "expert_group_used_count", &hp->expert_group_used_count);
    hp->expert_weights_scale = 1.0f;
    hp_f32(g, a, "expert_weights_scale", &hp->expert_weights_scale);
    snprintf(key, sizeof key, "%s.expert_weights_norm", a);
    hp->has_expert_weights_norm = gm_gguf_get_bool(g, key, &hp->expert_weights_norm, NULL) == 0;
    hp_u32(g, a, "attention.indexer.head_count", &hp->idx_heads);
    hp_u32(g, a, "attention.indexer.key_length", &hp->idx_dim);
    hp_u32(g, a, "attention.indexer.top_k", &hp->idx_topk);
    hp_u32(g, a, "attention.indexer.block_size", &hp->idx_block);
    hp_u32(g, a, "attention.indexer.local_blocks", &hp->idx_local);
    hp_u32(g, a, "hyper_connection.count", &hp->hc_count);
    hp_f32(g, a, "hyper_connection.epsilon", &hp->hc_eps);
    hp->hc_magnitude = 1.0f;
    hp_f32(g, a, "hyper_connection.magnitude", &hp->hc_magnitude);
    hp_u32(g, a, "hyper_connection.low_rank", &hp->hc_low_rank);
    describe_ple(g, a, hp);
    hp_u32(g, a, "kda.head_dim", &hp->kda_head_dim);
    snprintf(key, sizeof key, "%s.kda.gate_lower_bound", a);
    double lb;
    if (gm_gguf_get_f64(g, key, &lb, NULL) == 0) {
        hp->kda_lower_bound = (float)lb;
        hp->has_kda_lower_bound = true;
    }
    hp_u32(g, a, "expert_latent_length", &hp->n_expert_latent);
    hp_u32(g, a, "attn_res.block_size", &hp->attn_res_block);
    hp_f32(g, a, "activation.situ_beta", &hp->situ_beta);
    hp_f32(g, a, "activation.situ_linear_beta", &hp->situ_linear_beta);
    hp_u32(g, a, "hyper_connection.sinkhorn_iterations", &hp->hc_sinkhorn_iters);
    hp_u32(g, a, "hash_layer_count", &hp->n_hash_layers);
    hp_u32(g, a, "attention.output_group_count", &hp->attn_out_groups);
    hp_u32(g, a, "attention.output_lora_rank", &hp->attn_out_lora);
    hp_f32(g, a, "attention.compress_rope_freq_base", &hp->compress_rope_base);
    if (strcmp(a, "deepseek4") == 0 && !hp->kv_lora_rank && hp->head_dim_k > hp->n_rot) {
        /* one cached row a position, [head_dim_k - n_rot | rotated n_rot], both key and value of
         * every head: the latent cache of MLA with the whole head as the latent (infer/csa.c) */
        hp->kv_lora_rank = hp->head_dim_k - hp->n_rot;
    }
    /* KDA (Kimi Delta Attention) keeps a Gated DeltaNet's state with as many key as value heads,
     * each of kda.head_dim: its sizes in the ssm.* terms the plan and the engine read */
    if (hp->kda_head_dim && !hp->ssm_state_size) {
        hp->ssm_group_count = hp->ssm_time_step_rank = hp->n_head;
        hp->ssm_state_size = hp->kda_head_dim;
        hp->ssm_inner_size = hp->n_head * hp->kda_head_dim;
    }
    hp_u32(g, a, "vocab_size", &hp->n_vocab);
    if (!hp->n_vocab) {
        gm_gguf_arr toks;
        if (gm_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, NULL) == 0 && toks.n <= UINT32_MAX)
            hp->n_vocab = (uint32_t)toks.n;
    }
}

/* The layers of a sparse-attention model that run their own indexer: attention.indexer.types (one
 * bool or integer per layer before the MTP ones), else every layer, except for glm-dsa with a
 * context of 1 Mi tokens or more (GLM-5.2), whose layers 0-2 and every 4th from layer 2 run
 * theirs (the rule of llama.cpp's glm-dsa for files without the key), and for block-sparse
 * attention (MiniMax-M3), whose layers past the leading dense ones do, and for qwen4exp, whose
 * full-attention layers with a compress ratio do. */
static void indexer_layers(const gm_gguf *g, gm_model_desc *m, uint32_t first_mtp)
{
    const gm_hparams *hp = &m->hp;
    if (!hp->idx_topk)
        return;
    const uint32_t n = first_mtp < m->n_layers ? first_mtp : m->n_layers;
    char key[160];
    snprintf(key, sizeof key, "%s.attention.indexer.types", m->arch_name);
    gm_gguf_arr a;
    const bool listed = gm_gguf_get_arr(g, key, &a, NULL) == 0 && a.n == n &&
                        (a.elem_type == GM_GGUF_BOOL || a.elem_type == GM_GGUF_U8 ||
                         a.elem_type == GM_GGUF_I32 || a.elem_type == GM_GGUF_U32);
    const bool glm52 = strcmp(m->arch_name, "glm-dsa") == 0 && hp->n_ctx_train >= 1048576;
    const bool qwen4exp = strcmp(m->arch_name, "qwen4exp") == 0;
    for (uint32_t l = 0; l < n; l++) {
        bool full = true;
        if (strcmp(m->arch_name, "deepseek4") == 0) {
            full = m->layers[l].compress_ratio == 4; /* CSA's indexer over its compressed keys */
        } else if (qwen4exp) {
            /* its full-attention layers with a block size (attention.compress_ratios), whatever
             * else the file says */
            full = m->layers[l].compress_ratio > 0 && !m->layers[l].is_recurrent;
        } else if (listed) {
            const uint64_t w = a.elem_type == GM_GGUF_BOOL || a.elem_type == GM_GGUF_U8 ? 1 : 4;
            uint32_t v = 0;
            memcpy(&v, a.data + l * w, w); /* little-endian: the low byte first */
            full = v != 0;
        } else if (glm52) {
            full = l < 3 || (l - 2) % 4 == 0;
        } else if (hp->idx_block) {
            full = l >= hp->n_leading_dense; /* MiniMax-M3: its leading dense blocks attend densely */
        }
        m->layers[l].indexer_full = full;
    }
}

int gm_model_describe(const gm_gguf *g, gm_model_desc *m, gm_err *err)
{
    memset(m, 0, sizeof *m);
    m->hp.ple_layer = -1;
    gm_gguf_str s;
    if (gm_gguf_get_str(g, "general.architecture", &s, NULL) == 0)
        snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)(s.len > 63 ? 63 : s.len), s.ptr);
    gm_printable(m->arch_name);
    if (gm_gguf_get_str(g, "general.name", &s, NULL) == 0)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(s.len > 127 ? 127 : s.len), s.ptr);
    gm_printable(m->name);
    m->arch = gm_arch_find(m->arch_name);
    if (m->arch_name[0])
        describe_hparams(g, m);
    m->file_bytes = gm_gguf_total_size(g);

    /* Blocks: the larger of block_count and the highest blk.N seen. */
    m->n_tensors = gm_gguf_n_tensors(g);
    uint32_t n_blocks = m->hp.n_layer;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const char *rest;
        int32_t b = block_index(gm_gguf_tensor_at(g, i)->name, &rest);
        if (b >= 0 && (uint32_t)b + 1 > n_blocks)
            n_blocks = (uint32_t)b + 1;
    }
    if (n_blocks > 100000)
        return gm_err_set(err, GM_EFORMAT, "%s: %u blocks is not a plausible model",
                          gm_gguf_path(g), n_blocks);
    m->n_layers = n_blocks;
    m->tensors = calloc(m->n_tensors ? m->n_tensors : 1, sizeof *m->tensors);
    m->layers = calloc(n_blocks ? n_blocks : 1, sizeof *m->layers);
    if (!m->tensors || !m->layers) {
        gm_model_desc_free(m);
        return gm_err_set(err, GM_ENOMEM, "out of memory describing %s", gm_gguf_path(g));
    }
    const gm_hparams *hp = &m->hp;
    uint32_t first_mtp = hp->n_nextn && hp->n_nextn <= hp->n_layer ? hp->n_layer - hp->n_nextn : UINT32_MAX;
    /* attention.recurrent_layers (qwen4exp): which layers are linear attention, one flag each */
    char rkey[160];
    snprintf(rkey, sizeof rkey, "%s.attention.recurrent_layers", m->arch_name);
    gm_gguf_arr rl;
    const bool recurrent_listed = gm_gguf_get_arr(g, rkey, &rl, NULL) == 0;
    const bool dsv4 = strcmp(m->arch_name, "deepseek4") == 0;
    for (uint32_t l = 0; l < n_blocks; l++) {
        gm_layer_desc *L = &m->layers[l];
        for (int k = 0; k < GM_EXP_KIND_COUNT; k++)
            L->stack[k] = -1;
        L->is_mtp = l >= first_mtp;
        L->n_head_kv = hp_layer_u32(g, m->arch_name, "attention.head_count_kv", l, hp->n_head_kv);
        L->swiglu_limit = hp_layer_f32(g, m->arch_name, "swiglu_clamp_exp", l, 0.0f);
        L->swiglu_limit_shexp = hp_layer_f32(g, m->arch_name, "swiglu_clamp_shexp", l, dsv4 ? L->swiglu_limit : 0.0f);
        L->compress_ratio = hp_layer_u32(g, m->arch_name, "attention.compress_ratios", l, 0);
        if (m->arch && m->arch->hybrid_recurrent && recurrent_listed)
            L->is_recurrent = l < rl.n && arr_flag(&rl, l);
        else if (m->arch && m->arch->hybrid_recurrent && hp->full_attn_interval)
            L->is_recurrent = (l + 1) % hp->full_attn_interval != 0;
        else if (m->arch && m->arch->hybrid_recurrent)
            L->is_recurrent = L->n_head_kv == 0;
        if (m->arch && m->arch->alternate_sliding && hp->sliding_window)
            L->is_sliding = l % 2 == 0;
        if (dsv4 && hp->sliding_window) /* every layer's raw keys are a window */
            L->is_sliding = true;
    }
    indexer_layers(g, m, first_mtp);

    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const gm_gguf_tensor *t = gm_gguf_tensor_at(g, i);
        gm_tensor_desc *d = &m->tensors[i];
        const char *rest = NULL;
        d->layer = block_index(t->name, &rest);
        d->expert_kind = -1;
        m->tensor_bytes += t->n_bytes;
        if (t->type < 64)
            m->types_present |= 1ull << t->type;
        if (is_lookup_name(t->name)) {
            d->cls = GM_TC_LOOKUP;
            d->group = GM_TG_LOOKUP_TABLES;
        } else if (d->layer < 0) {
            d->cls = GM_TC_EVERY_TOKEN;
            if (starts(t->name, "token_embd") || starts(t->name, "token_types") ||
                starts(t->name, "position_embd"))
                d->group = GM_TG_EMBEDDINGS;
            else if (starts(t->name, "output"))
                d->group = GM_TG_OUTPUT;
            else
                d->group = GM_TG_OTHER;
        } else {
            gm_layer_desc *L = &m->layers[d->layer];
            int kind = expert_kind(rest);
            if (L->is_mtp) {
                d->cls = GM_TC_MTP;
                d->group = GM_TG_MTP;
            } else if (kind >= 0) {
                if (t->n_dims != 3) {
                    gm_model_desc_free(m);
                    return gm_err_set(err, GM_EFORMAT,
                                      "%s: expert stack '%s' has %u dimensions, not 3",
                                      gm_gguf_path(g), t->name, t->n_dims);
                }
                d->cls = GM_TC_EXPERT;
                d->group = GM_TG_ROUTED_EXPERTS;
            } else {
                d->cls = GM_TC_EVERY_TOKEN;
                d->group = block_group(rest);
            }
            if (kind >= 0) {
                d->expert_kind = kind;
                uint32_t ne = (uint32_t)(t->ne[2] > UINT32_MAX ? UINT32_MAX : t->ne[2]);
                if (L->n_expert && L->n_expert != ne) {
                    int rc = gm_err_set(err, GM_EFORMAT,
                                        "%s: expert stacks of layer %d disagree on the expert count "
                                        "(%u and %u)", gm_gguf_path(g), d->layer, L->n_expert, ne);
                    gm_model_desc_free(m);
                    return rc;
                }
                if (L->stack[kind] >= 0) {
                    int rc = gm_err_set(err, GM_EFORMAT, "%s: layer %d has two %s stacks",
                                        gm_gguf_path(g), d->layer, t->name);
                    gm_model_desc_free(m);
                    return rc;
                }
                L->n_expert = ne;
                L->stack[kind] = (int64_t)i;
                L->stack_bytes[kind] = t->n_bytes;
                L->expert_bytes += t->n_bytes;
                /* expert slices are contiguous: n_bytes is a whole multiple of ne[2] rows */
                L->per_expert_bytes += t->n_bytes / t->ne[2];
                L->is_moe = true;
            }
        }
        m->group_bytes[d->group] += t->n_bytes;
    }

    for (uint32_t l = 0; l < n_blocks; l++) {
        const gm_layer_desc *L = &m->layers[l];
        if (!L->is_moe || L->is_mtp)
            continue;
        m->n_moe_layers++;
        if (L->n_expert > m->max_expert_count)
            m->max_expert_count = L->n_expert;
        if (L->expert_bytes > m->max_layer_expert_bytes)
            m->max_layer_expert_bytes = L->expert_bytes;
        uint32_t k = hp->n_expert_used ? hp->n_expert_used : 1;
        if (k > L->n_expert)
            k = L->n_expert;
        m->cold_token_bytes += (uint64_t)k * L->per_expert_bytes;
    }
    for (int gi = 0; gi < GM_TG_COUNT; gi++) {
        if (gi == GM_TG_ROUTED_EXPERTS)
            m->expert_bytes = m->group_bytes[gi];
        else if (gi == GM_TG_LOOKUP_TABLES)
            m->lookup_bytes = m->group_bytes[gi];
        else if (gi == GM_TG_MTP)
            m->mtp_bytes = m->group_bytes[gi];
        else
            m->every_token_bytes += m->group_bytes[gi];
    }

    /* Runnable: a known family, and nothing the engine has no kernel for. */
    m->runnable = true;
    if (!m->arch_name[0]) {
        m->runnable = false;
        snprintf(m->not_runnable, sizeof m->not_runnable, "the file names no architecture");
    } else if (!m->arch) {
        m->runnable = false;
        char runs[320];
        gm_arch_runnable_list(runs, sizeof runs);
        snprintf(m->not_runnable, sizeof m->not_runnable,
                 "architecture '%s' is not supported (the plan comes from tensor names alone; "
                 "gmlx runs %s)", m->arch_name, runs);
    } else if (!m->arch->runnable) {
        m->runnable = false;
        char runs[320];
        gm_arch_runnable_list(runs, sizeof runs);
        snprintf(m->not_runnable, sizeof m->not_runnable,
                 "architecture '%s' cannot run yet (gmlx runs %s)", m->arch_name, runs);
    }
    if (m->runnable && m->n_tensors == 0) {
        m->runnable = false;
        snprintf(m->not_runnable, sizeof m->not_runnable,
                 "the file holds no tensors (a vocabulary-only file)");
    }
    if (m->runnable) {
        static const uint32_t no_kernel[] = {GM_TYPE_Q8_1, GM_TYPE_Q8_K, GM_TYPE_I8, GM_TYPE_I16,
                                             GM_TYPE_I64, GM_TYPE_F64};
        for (size_t i = 0; i < sizeof no_kernel / sizeof no_kernel[0]; i++) {
            if (m->types_present & (1ull << no_kernel[i])) {
                m->runnable = false;
                snprintf(m->not_runnable, sizeof m->not_runnable,
                         "tensor type %s is not supported for weights", gm_type_name(no_kernel[i]));
                break;
            }
        }
    }
    return 0;
}

void gm_model_desc_free(gm_model_desc *m)
{
    if (!m)
        return;
    free(m->tensors);
    free(m->layers);
    m->tensors = NULL;
    m->layers = NULL;
}

uint64_t gm_slot_region_bytes(uint64_t slice_bytes, uint64_t align_bytes)
{
    return (slice_bytes + 2 * align_bytes - 1) / align_bytes * align_bytes;
}

uint64_t gm_layer_slot_bytes(const gm_layer_desc *L, uint64_t align_bytes)
{
    uint64_t b = 0;
    for (int k = 0; L->n_expert && k < GM_EXP_KIND_COUNT; k++)
        if (L->stack[k] >= 0)
            b += gm_slot_region_bytes(L->stack_bytes[k] / L->n_expert, align_bytes);
    return b;
}

uint64_t gm_layer_vram_slot_bytes(const gm_layer_desc *L)
{
    uint64_t b = 0;
    for (int k = 0; L->n_expert && k < GM_EXP_KIND_COUNT; k++)
        if (L->stack[k] >= 0)
            b += (L->stack_bytes[k] / L->n_expert + GM_VRAM_SLOT_ALIGN - 1) / GM_VRAM_SLOT_ALIGN * GM_VRAM_SLOT_ALIGN;
    return b;
}

uint64_t gm_model_kv_bytes(const gm_model_desc *m, uint64_t n_ctx, uint32_t kv_bits)
{
    const gm_hparams *hp = &m->hp;
    const bool dsv4 = strcmp(m->arch_name, "deepseek4") == 0;
    uint64_t state_bytes = 0, elems = 0;
    uint32_t n_attn_layers = hp->n_layer ? hp->n_layer - (hp->n_nextn <= hp->n_layer ? hp->n_nextn : 0) : 0;
    for (uint32_t l = 0; l < n_attn_layers && l < m->n_layers; l++) {
        const gm_layer_desc *L = &m->layers[l];
        if (L->is_recurrent) {
            /* Gated DeltaNet / SSM: conv state + recurrent state, f32, whatever the context. */
            uint64_t conv_ch = (uint64_t)hp->ssm_inner_size + 2ull * hp->ssm_group_count * hp->ssm_state_size;
            uint64_t conv = (hp->ssm_conv_kernel ? hp->ssm_conv_kernel - 1 : 0) * conv_ch;
            uint64_t heads_v = hp->ssm_time_step_rank;
            uint64_t head_v_dim = heads_v ? hp->ssm_inner_size / heads_v : 0;
            uint64_t state = heads_v * hp->ssm_state_size * head_v_dim;
            state_bytes += (conv + state) * 4;
            continue;
        }
        uint64_t tokens = n_ctx;
        if (L->is_sliding && hp->sliding_window && hp->sliding_window < tokens)
            tokens = hp->sliding_window;
        uint64_t per_token_elems;
        if (m->arch && m->arch->mla && hp->kv_lora_rank)
            per_token_elems = (uint64_t)hp->kv_lora_rank + hp->n_rot; /* the shared latent */
        else
            per_token_elems = (uint64_t)L->n_head_kv * (hp->head_dim_k + hp->head_dim_v);
        elems += tokens * per_token_elems;
        if (dsv4 && L->compress_ratio) {
            /* DeepSeek-V4: a row per window of compress_ratio positions; the indexer's keys (f32)
             * of CSA's; the compressor's rows of the last windows and a step (f32) */
            const uint64_t r = L->compress_ratio, c = r == 4 ? 2 : 1, ring = 2 * r + 256;
            elems += (n_ctx / r + 1) * per_token_elems;
            state_bytes += ring * 2 * c * hp->head_dim_k * 4;
            if (L->indexer_full)
                state_bytes += (n_ctx / r + 1) * hp->idx_dim * 4 + ring * 4ull * hp->idx_dim * 4;
            continue;
        }
        /* a sparse-attention layer's indexer keys: float32, whatever the cache's type */
        if (L->indexer_full && hp->idx_topk) /* QSA's (qwen4exp) and its blocks' keys */
            state_bytes += (uint64_t)n_ctx * hp->idx_dim * 4 * (L->compress_ratio ? 2 : 1);
    }
    /* qwen4exp's n-gram embedding: its convolution's history and the tokens of the context */
    if (hp->ple_layer >= 0 && hp->ple_n_heads)
        state_bytes += (uint64_t)(hp->ple_conv - 1) * hp->ple_ngram * (hp->hc_count ? hp->hc_count : 1) * hp->n_embd * 4 +
                       n_ctx * 4;
    /* 16- or 32-bit elements, or 8-bit blocks of 32 with an f16 scale (34 bytes per 32) */
    uint64_t cache = kv_bits == 8 ? (elems + 31) / 32 * 34 : kv_bits == 32 ? elems * 4 : elems * 2;
    return cache + state_bytes;
}
