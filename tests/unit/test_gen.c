/* tests/unit/test_gen: the model-file generator (tools/gen): the GGUF writer, the tensor tables
 * and metadata of each architecture against the converter's output (tests/fixtures dumps,
 * tables below), sparse files, the tokenizer copy, determinism and argument errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen.h"
#include "ggufw.h"
#include "gguf/gguf.h"
#include "gguf/types.h"
#include "testutil.h"

/* Runs the generator with space-separated arguments, then the option opt with the value val
 * as one argument each (a path may hold spaces; opt NULL: none), writing path. Returns its
 * code. */
static int gen_opt(const char *path, const char *args, const char *opt, const char *val,
                   gm_gen_result *res, gm_err *err)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", args);
    char *argv[64];
    int argc = 0;
    for (char *t = strtok(buf, " "); t && argc < 58; t = strtok(NULL, " "))
        argv[argc++] = t;
    if (opt) {
        argv[argc++] = (char *)opt;
        argv[argc++] = (char *)val;
    }
    argv[argc++] = "-o";
    argv[argc++] = (char *)path;
    gm_gen_opts o;
    gm_gen_opts_init(&o);
    int rc = gm_gen_parse_args(&o, argc, argv, err);
    if (rc != GM_GEN_ARGS_RUN)
        return rc;
    return gm_gen_run(&o, res, err);
}

static int gen(const char *path, const char *args, gm_gen_result *res, gm_err *err)
{
    return gen_opt(path, args, NULL, NULL, res, err);
}

static char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", gm_test_tmpdir(), name);
    return p;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Metadata keys (after "<arch>.") and tensor dims (blocks 0 and 1, global tensors) of the
 * converter's files in tests/fixtures/<arch>/gguf-dump.txt; the tiny presets have the same
 * shapes, except that tiny-deepseek2 has qk_nope 128 (the fixture's 256 equals its kv_lora_rank,
 * which would hide a transposed attn_k_b): attn_k_b and attn_q_b are adjusted. */
static const char *const k_qwen3moe_keys[] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "rope.freq_base",
    "attention.layer_norm_rms_epsilon", "expert_count", "expert_used_count",
    "attention.key_length", "attention.value_length", "expert_feed_forward_length", NULL};
static const char *const k_qwen3moe_tensors[] = {
    "output.weight 256,2000", "token_embd.weight 256,2000", "blk.0.attn_norm.weight 256",
    "blk.0.ffn_down_exps.weight 256,256,8", "blk.0.ffn_gate_exps.weight 256,256,8",
    "blk.0.ffn_up_exps.weight 256,256,8", "blk.0.ffn_gate_inp.weight 256,8",
    "blk.0.ffn_norm.weight 256", "blk.0.attn_k_norm.weight 64", "blk.0.attn_k.weight 256,128",
    "blk.0.attn_output.weight 256,256", "blk.0.attn_q_norm.weight 64",
    "blk.0.attn_q.weight 256,256", "blk.0.attn_v.weight 256,128", "blk.1.attn_norm.weight 256",
    "blk.1.ffn_down_exps.weight 256,256,8", "blk.1.ffn_gate_exps.weight 256,256,8",
    "blk.1.ffn_up_exps.weight 256,256,8", "blk.1.ffn_gate_inp.weight 256,8",
    "blk.1.ffn_norm.weight 256", "blk.1.attn_k_norm.weight 64", "blk.1.attn_k.weight 256,128",
    "blk.1.attn_output.weight 256,256", "blk.1.attn_q_norm.weight 64",
    "blk.1.attn_q.weight 256,256", "blk.1.attn_v.weight 256,128", "output_norm.weight 256", NULL};
static const char *const k_deepseek2_keys[] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "rope.freq_base",
    "attention.layer_norm_rms_epsilon", "expert_count", "expert_used_count", "expert_group_count",
    "expert_group_used_count", "expert_gating_func", "attention.key_length",
    "attention.value_length", "leading_dense_block_count", "vocab_size", "attention.q_lora_rank",
    "attention.kv_lora_rank", "attention.key_length_mla", "attention.value_length_mla",
    "expert_feed_forward_length", "expert_shared_count", "expert_weights_scale",
    "expert_weights_norm", "rope.dimension_count", NULL};
static const char *const k_deepseek2_tensors[] = {
    "output.weight 256,2000", "token_embd.weight 256,2000", "blk.0.attn_norm.weight 256",
    "blk.0.ffn_down.weight 512,256", "blk.0.ffn_gate.weight 256,512",
    "blk.0.ffn_up.weight 256,512", "blk.0.ffn_norm.weight 256", "blk.0.attn_kv_a_norm.weight 256",
    "blk.0.attn_kv_a_mqa.weight 256,320", "blk.0.attn_k_b.weight 128,256,4",
    "blk.0.attn_v_b.weight 256,64,4", "blk.0.attn_output.weight 256,256",
    "blk.0.attn_q_a_norm.weight 256", "blk.0.attn_q_a.weight 256,256",
    "blk.0.attn_q_b.weight 256,768", "blk.1.attn_norm.weight 256",
    "blk.1.ffn_down_exps.weight 256,256,8", "blk.1.ffn_gate_exps.weight 256,256,8",
    "blk.1.ffn_up_exps.weight 256,256,8", "blk.1.exp_probs_b.bias 8",
    "blk.1.ffn_gate_inp.weight 256,8", "blk.1.ffn_down_shexp.weight 256,256",
    "blk.1.ffn_gate_shexp.weight 256,256", "blk.1.ffn_up_shexp.weight 256,256",
    "blk.1.ffn_norm.weight 256", "blk.1.attn_kv_a_norm.weight 256",
    "blk.1.attn_kv_a_mqa.weight 256,320", "blk.1.attn_k_b.weight 128,256,4",
    "blk.1.attn_v_b.weight 256,64,4", "blk.1.attn_output.weight 256,256",
    "blk.1.attn_q_a_norm.weight 256", "blk.1.attn_q_a.weight 256,256",
    "blk.1.attn_q_b.weight 256,768", "output_norm.weight 256", NULL};
static const char *const k_gpt_oss_keys[] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "rope.scaling.type", "rope.scaling.factor",
    "rope.scaling.original_context_length", "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow", "rope.freq_base", "attention.layer_norm_rms_epsilon",
    "expert_count", "expert_used_count", "attention.key_length", "attention.value_length",
    "attention.sliding_window", "expert_feed_forward_length", NULL};
static const char *const k_gpt_oss_tensors[] = {
    "output.weight 256,2000", "token_embd.weight 256,2000", "blk.0.attn_norm.weight 256",
    "blk.0.ffn_down_exps.weight 256,256,8", "blk.0.ffn_down_exps.bias 256,8",
    "blk.0.ffn_gate_exps.weight 256,256,8", "blk.0.ffn_up_exps.weight 256,256,8",
    "blk.0.ffn_gate_exps.bias 256,8", "blk.0.ffn_up_exps.bias 256,8", "blk.0.ffn_gate_inp.bias 8",
    "blk.0.ffn_gate_inp.weight 256,8", "blk.0.post_attention_norm.weight 256",
    "blk.0.attn_k.bias 128", "blk.0.attn_k.weight 256,128", "blk.0.attn_output.bias 256",
    "blk.0.attn_output.weight 256,256", "blk.0.attn_q.bias 256", "blk.0.attn_q.weight 256,256",
    "blk.0.attn_sinks.weight 4", "blk.0.attn_v.bias 128", "blk.0.attn_v.weight 256,128",
    "blk.1.attn_norm.weight 256", "blk.1.ffn_down_exps.weight 256,256,8",
    "blk.1.ffn_down_exps.bias 256,8", "blk.1.ffn_gate_exps.weight 256,256,8",
    "blk.1.ffn_up_exps.weight 256,256,8", "blk.1.ffn_gate_exps.bias 256,8",
    "blk.1.ffn_up_exps.bias 256,8", "blk.1.ffn_gate_inp.bias 8", "blk.1.ffn_gate_inp.weight 256,8",
    "blk.1.post_attention_norm.weight 256", "blk.1.attn_k.bias 128", "blk.1.attn_k.weight 256,128",
    "blk.1.attn_output.bias 256", "blk.1.attn_output.weight 256,256", "blk.1.attn_q.bias 256",
    "blk.1.attn_q.weight 256,256", "blk.1.attn_sinks.weight 4", "blk.1.attn_v.bias 128",
    "blk.1.attn_v.weight 256,128", "output_norm.weight 256", NULL};
static const char *const k_glm4moe_keys[] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "rope.freq_base",
    "attention.layer_norm_rms_epsilon", "expert_count", "expert_used_count", "expert_group_count",
    "expert_group_used_count", "attention.key_length", "attention.value_length",
    "rope.dimension_count", "expert_feed_forward_length", "expert_shared_count",
    "leading_dense_block_count", "expert_gating_func", "expert_weights_scale",
    "expert_weights_norm", "nextn_predict_layers", NULL};
static const char *const k_glm4moe_tensors[] = {
    "output.weight 256,2000", "token_embd.weight 256,2000", "blk.0.attn_norm.weight 256",
    "blk.0.ffn_down.weight 512,256", "blk.0.ffn_gate.weight 256,512",
    "blk.0.ffn_up.weight 256,512", "blk.0.post_attention_norm.weight 256",
    "blk.0.attn_k_norm.weight 64", "blk.0.attn_k.bias 128", "blk.0.attn_k.weight 256,128",
    "blk.0.attn_output.weight 256,256", "blk.0.attn_q_norm.weight 64", "blk.0.attn_q.bias 256",
    "blk.0.attn_q.weight 256,256", "blk.0.attn_v.bias 128", "blk.0.attn_v.weight 256,128",
    "blk.1.attn_norm.weight 256", "blk.1.ffn_down_exps.weight 256,256,8",
    "blk.1.ffn_gate_exps.weight 256,256,8", "blk.1.ffn_up_exps.weight 256,256,8",
    "blk.1.exp_probs_b.bias 8", "blk.1.ffn_gate_inp.weight 256,8",
    "blk.1.ffn_down_shexp.weight 256,256", "blk.1.ffn_gate_shexp.weight 256,256",
    "blk.1.ffn_up_shexp.weight 256,256", "blk.1.post_attention_norm.weight 256",
    "blk.1.attn_k_norm.weight 64", "blk.1.attn_k.bias 128", "blk.1.attn_k.weight 256,128",
    "blk.1.attn_output.weight 256,256", "blk.1.attn_q_norm.weight 64", "blk.1.attn_q.bias 256",
    "blk.1.attn_q.weight 256,256", "blk.1.attn_v.bias 128", "blk.1.attn_v.weight 256,128",
    "output_norm.weight 256", NULL};
static const char *const k_llama_keys[] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "rope.freq_base",
    "attention.layer_norm_rms_epsilon", "expert_count", "expert_used_count",
    "attention.key_length", "attention.value_length", "vocab_size", "rope.dimension_count", NULL};
static const char *const k_llama_tensors[] = {
    "output.weight 256,2000", "token_embd.weight 256,2000", "blk.0.ffn_gate_exps.weight 256,256,8",
    "blk.0.ffn_down_exps.weight 256,256,8", "blk.0.ffn_up_exps.weight 256,256,8",
    "blk.0.ffn_gate_inp.weight 256,8", "blk.0.attn_norm.weight 256", "blk.0.ffn_norm.weight 256",
    "blk.0.attn_k.weight 256,128", "blk.0.attn_output.weight 256,256",
    "blk.0.attn_q.weight 256,256", "blk.0.attn_v.weight 256,128",
    "blk.1.ffn_gate_exps.weight 256,256,8", "blk.1.ffn_down_exps.weight 256,256,8",
    "blk.1.ffn_up_exps.weight 256,256,8", "blk.1.ffn_gate_inp.weight 256,8",
    "blk.1.attn_norm.weight 256", "blk.1.ffn_norm.weight 256", "blk.1.attn_k.weight 256,128",
    "blk.1.attn_output.weight 256,256", "blk.1.attn_q.weight 256,256",
    "blk.1.attn_v.weight 256,128", "output_norm.weight 256", NULL};
static const char *const k_minimax_m2_keys[] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "rope.freq_base",
    "attention.layer_norm_rms_epsilon", "expert_count", "expert_used_count", "expert_gating_func",
    "attention.key_length", "attention.value_length", "expert_feed_forward_length",
    "rope.dimension_count", NULL};
static const char *const k_minimax_m2_tensors[] = {
    "output.weight 256,2000", "token_embd.weight 256,2000", "blk.0.exp_probs_b.bias 8",
    "blk.0.ffn_gate_exps.weight 256,256,8", "blk.0.ffn_down_exps.weight 256,256,8",
    "blk.0.ffn_up_exps.weight 256,256,8", "blk.0.ffn_gate_inp.weight 256,8",
    "blk.0.attn_norm.weight 256", "blk.0.ffn_norm.weight 256", "blk.0.attn_k_norm.weight 128",
    "blk.0.attn_k.weight 256,128", "blk.0.attn_output.weight 256,256",
    "blk.0.attn_q_norm.weight 256", "blk.0.attn_q.weight 256,256", "blk.0.attn_v.weight 256,128",
    "blk.1.exp_probs_b.bias 8", "blk.1.ffn_gate_exps.weight 256,256,8",
    "blk.1.ffn_down_exps.weight 256,256,8", "blk.1.ffn_up_exps.weight 256,256,8",
    "blk.1.ffn_gate_inp.weight 256,8", "blk.1.attn_norm.weight 256", "blk.1.ffn_norm.weight 256",
    "blk.1.attn_k_norm.weight 128", "blk.1.attn_k.weight 256,128",
    "blk.1.attn_output.weight 256,256", "blk.1.attn_q_norm.weight 256",
    "blk.1.attn_q.weight 256,256", "blk.1.attn_v.weight 256,128", "output_norm.weight 256", NULL};

typedef struct arch_case {
    const char *arch;
    const char *const *keys;
    const char *const *tensors;
    uint64_t n_tensors;
} arch_case;

static const arch_case k_cases[] = {
    {"qwen3moe", k_qwen3moe_keys, k_qwen3moe_tensors, 39},
    {"deepseek2", k_deepseek2_keys, k_deepseek2_tensors, 52},
    {"gpt-oss", k_gpt_oss_keys, k_gpt_oss_tensors, 60},
    {"glm4moe", k_glm4moe_keys, k_glm4moe_tensors, 55},
    {"llama", k_llama_keys, k_llama_tensors, 33},
    {"minimax-m2", k_minimax_m2_keys, k_minimax_m2_tensors, 42},
};

static uint64_t get_u64(const gm_gguf *g, const char *key)
{
    uint64_t v = 0;
    gm_err err = {0};
    int rc = gm_gguf_get_u64(g, key, &v, &err);
    if (rc)
        fail_msg("%s: %s", key, err.msg);
    return v;
}

static const gm_gguf_tensor *tensor(const gm_gguf *g, const char *name)
{
    const gm_gguf_tensor *t = gm_gguf_find_tensor(g, name);
    if (!t)
        fail_msg("tensor %s is missing", name);
    return t;
}

static void check_dims(const gm_gguf_tensor *t, uint64_t a, uint64_t b, uint64_t c)
{
    if (t->ne[0] != a || t->ne[1] != b || t->ne[2] != c)
        fail_msg("%s: ne [%llu,%llu,%llu], expected [%llu,%llu,%llu]", t->name,
                 (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                 (unsigned long long)t->ne[2], (unsigned long long)a, (unsigned long long)b,
                 (unsigned long long)c);
}

/* A tiny file of each architecture has exactly the converter's tensors, dims and keys. */
static void test_arch_tables(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof k_cases / sizeof k_cases[0]; c++) {
        const arch_case *ac = &k_cases[c];
        char args[128];
        snprintf(args, sizeof args, "--arch %s --seed 7", ac->arch);
        const char *path = tmp_path("arch.gguf");
        gm_err err = {0};
        gm_gen_result res;
        int rc = gen(path, args, &res, &err);
        if (rc)
            fail_msg("%s: %s", ac->arch, err.msg);
        gm_gguf *g = NULL;
        rc = gm_gguf_open(&g, path, &err);
        if (rc)
            fail_msg("%s: %s", ac->arch, err.msg);
        assert_int_equal(gm_gguf_version(g), 3);

        gm_gguf_str s;
        assert_int_equal(gm_gguf_get_str(g, "general.architecture", &s, NULL), 0);
        assert_true(gm_gguf_str_eq(s, ac->arch));

        /* Keys: every expected "<arch>.*" key is there, and no other. */
        size_t alen = strlen(ac->arch), n_expected = 0;
        for (const char *const *k = ac->keys; *k; k++) {
            char key[128];
            snprintf(key, sizeof key, "%s.%s", ac->arch, *k);
            if (gm_gguf_find_kv(g, key) < 0)
                fail_msg("%s: key %s is missing", ac->arch, key);
            n_expected++;
        }
        size_t n_arch_keys = 0;
        for (uint64_t i = 0; i < gm_gguf_n_kv(g); i++) {
            gm_gguf_str k = gm_gguf_kv_key(g, i);
            if (k.len > alen && memcmp(k.ptr, ac->arch, alen) == 0 && k.ptr[alen] == '.')
                n_arch_keys++;
        }
        if (n_arch_keys != n_expected)
            fail_msg("%s: %zu arch keys, the converter writes %zu", ac->arch, n_arch_keys,
                     n_expected);
        char key[128];
        snprintf(key, sizeof key, "%s.block_count", ac->arch);
        assert_int_equal(get_u64(g, key), 3);
        snprintf(key, sizeof key, "%s.expert_count", ac->arch);
        assert_int_equal(get_u64(g, key), 8);
        assert_int_equal(get_u64(g, "general.quantization_version"), 2);

        /* Tensors: the same count, and the converter's dims for blocks 0, 1 and the globals. */
        assert_int_equal(gm_gguf_n_tensors(g), ac->n_tensors);
        assert_int_equal(res.n_tensors, ac->n_tensors);
        for (const char *const *t = ac->tensors; *t; t++) {
            char name[96];
            uint64_t ne[4] = {1, 1, 1, 1};
            int nd = 0;
            const char *sp = strchr(*t, ' ');
            memcpy(name, *t, (size_t)(sp - *t));
            name[sp - *t] = '\0';
            for (const char *p = sp + 1; *p && nd < 4; nd++) {
                ne[nd] = strtoull(p, (char **)&p, 10);
                if (*p == ',')
                    p++;
            }
            const gm_gguf_tensor *gt = tensor(g, name);
            assert_int_equal(gt->n_dims, nd);
            check_dims(gt, ne[0], ne[1], ne[2]);
            /* Types: norms, routers, biases and sinks F32; experts the expert type; the rest
             * the dense type. */
            uint32_t want;
            if (nd == 1 || strstr(name, "ffn_gate_inp") || strstr(name, ".bias"))
                want = GM_TYPE_F32;
            else if (strstr(name, "_exps.weight"))
                want = strcmp(ac->arch, "gpt-oss") == 0 ? GM_TYPE_MXFP4 : GM_TYPE_Q4_K;
            else
                want = GM_TYPE_Q8_0;
            if (gt->type != want)
                fail_msg("%s %s: type %s, expected %s", ac->arch, name, gm_type_name(gt->type),
                         gm_type_name(want));
        }
        /* Offsets are aligned and the data ends the file. */
        const gm_gguf_tensor *last = gm_gguf_tensor_at(g, gm_gguf_n_tensors(g) - 1);
        assert_true(last->file_offset + last->n_bytes <= gm_gguf_total_size(g));
        assert_true(gm_gguf_total_size(g) - (last->file_offset + last->n_bytes) < 32);
        for (uint64_t i = 0; i < gm_gguf_n_tensors(g); i++)
            assert_int_equal(gm_gguf_tensor_at(g, i)->offset % 32, 0);
        if (strcmp(ac->arch, "deepseek2") == 0) {
            assert_int_equal(get_u64(g, "deepseek2.attention.head_count_kv"), 1);
            assert_int_equal(get_u64(g, "deepseek2.attention.key_length"), 256 + 64);
            assert_int_equal(get_u64(g, "deepseek2.attention.value_length"), 256);
            assert_int_equal(get_u64(g, "deepseek2.attention.key_length_mla"), 128 + 64);
            assert_int_equal(get_u64(g, "deepseek2.attention.value_length_mla"), 64);
            assert_int_equal(get_u64(g, "deepseek2.leading_dense_block_count"), 1);
            assert_int_equal(get_u64(g, "deepseek2.vocab_size"), 2000);
        }
        gm_gguf_arr toks;
        assert_int_equal(gm_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, NULL), 0);
        assert_int_equal(toks.n, 2000);
        gm_gguf_close(g);
        unlink(path);
    }
}

typedef struct preset_case {
    const char *preset;
    const char *arch;
    uint32_t layers, hidden, experts, used, ff_exp, vocab;
    const char *exp_tensor;   /* a routed expert tensor of the last block */
    uint32_t exp_type;
} preset_case;

static const preset_case k_presets_expected[] = {
    {"qwen3-235b-a22b", "qwen3moe", 94, 4096, 128, 8, 1536, 151936,
     "blk.93.ffn_gate_exps.weight", GM_TYPE_Q4_K},
    {"qwen3-30b-a3b", "qwen3moe", 48, 2048, 128, 8, 768, 151936, "blk.47.ffn_up_exps.weight",
     GM_TYPE_Q4_K},
    {"kimi-k2", "deepseek2", 61, 7168, 384, 8, 2048, 163840, "blk.60.ffn_gate_exps.weight",
     GM_TYPE_Q4_K},
    {"deepseek-v3", "deepseek2", 61, 7168, 256, 8, 2048, 129280, "blk.60.ffn_up_exps.weight",
     GM_TYPE_Q4_K},
    {"gpt-oss-120b", "gpt-oss", 36, 2880, 128, 4, 2880, 201088, "blk.35.ffn_gate_exps.weight",
     GM_TYPE_MXFP4},
    {"gpt-oss-20b", "gpt-oss", 24, 2880, 32, 4, 2880, 201088, "blk.23.ffn_up_exps.weight",
     GM_TYPE_MXFP4},
    {"glm-4.5-air", "glm4moe", 46, 4096, 128, 8, 1408, 151552, "blk.45.ffn_gate_exps.weight",
     GM_TYPE_Q4_K},
    {"qwen4exp", "qwen4exp", 48, 2560, 512, 10, 640, 248320, "blk.47.ffn_gate_exps.weight",
     GM_TYPE_Q4_K},
    {"deepseek4", "deepseek4", 43, 4096, 256, 6, 2048, 129280, "blk.42.ffn_up_exps.weight", GM_TYPE_Q4_K},
};

static uint64_t arr_u64(const gm_gguf *g, const char *key, uint64_t i)
{
    gm_gguf_arr a;
    assert_int_equal(gm_gguf_get_arr(g, key, &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_U64);
    assert_true(i < a.n);
    uint64_t v;
    memcpy(&v, a.data + 8 * i, 8);
    return v;
}

static int32_t arr_i32(const gm_gguf *g, const char *key, uint64_t i, uint64_t n)
{
    gm_gguf_arr a;
    assert_int_equal(gm_gguf_get_arr(g, key, &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_I32);
    assert_int_equal(a.n, n);
    int32_t v;
    memcpy(&v, a.data + 4 * i, 4);
    return v;
}

static int n_notes;
static void count_notes(void *ctx, const gm_gen_event *ev)
{
    (void)ctx;
    if (ev->kind == GM_GEN_EV_NOTE)
        n_notes++;
}

/* The real presets as sparse files: the shapes and keys of the published models, an apparent
 * size that matches the tensor table, and almost no allocated blocks. */
static void test_real_presets_sparse(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof k_presets_expected / sizeof k_presets_expected[0]; c++) {
        const preset_case *pc = &k_presets_expected[c];
        const char *path = tmp_path("sparse.gguf");
        char *argv[] = {"--preset", (char *)pc->preset, "--sparse", "-o", (char *)path};
        gm_gen_opts o;
        gm_gen_opts_init(&o);
        gm_err err = {0};
        assert_int_equal(gm_gen_parse_args(&o, 5, argv, &err), GM_GEN_ARGS_RUN);
        n_notes = 0;
        o.on_event = count_notes;
        gm_gen_result res;
        int rc = gm_gen_run(&o, &res, &err);
        if (rc)
            fail_msg("%s: %s", pc->preset, err.msg);
        assert_false(file_exists(tmp_path("sparse.gguf.tmp")));

        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        gm_gguf *g = NULL;
        rc = gm_gguf_open(&g, path, &err);
        if (rc)
            fail_msg("%s: %s", pc->preset, err.msg);
        /* Apparent size: header + every tensor, padded to 32. */
        const gm_gguf_tensor *last = gm_gguf_tensor_at(g, gm_gguf_n_tensors(g) - 1);
        uint64_t end = last->file_offset + last->n_bytes;
        end = (end + 31) / 32 * 32;
        assert_int_equal((uint64_t)st.st_size, end);
        assert_int_equal((uint64_t)st.st_size, res.file_bytes);
        uint64_t sum = 0;
        for (uint64_t i = 0; i < gm_gguf_n_tensors(g); i++)
            sum += (gm_gguf_tensor_at(g, i)->n_bytes + 31) / 32 * 32;
        assert_int_equal(sum, res.data_bytes);
        assert_int_equal(gm_gguf_part_data_offset(g, 0) + sum, (uint64_t)st.st_size);
        /* Allocated: the header (metadata and synthetic vocabulary) only. */
        if ((uint64_t)st.st_blocks * 512 > (32u << 20))
            fail_msg("%s: %llu bytes allocated", pc->preset,
                     (unsigned long long)st.st_blocks * 512);
        assert_true((uint64_t)st.st_size > 10000000000ull);

        char key[128];
        snprintf(key, sizeof key, "%s.block_count", pc->arch);
        assert_int_equal(get_u64(g, key), pc->layers);
        snprintf(key, sizeof key, "%s.embedding_length", pc->arch);
        assert_int_equal(get_u64(g, key), pc->hidden);
        snprintf(key, sizeof key, "%s.expert_count", pc->arch);
        assert_int_equal(get_u64(g, key), pc->experts);
        snprintf(key, sizeof key, "%s.expert_used_count", pc->arch);
        assert_int_equal(get_u64(g, key), pc->used);
        snprintf(key, sizeof key, "%s.expert_feed_forward_length", pc->arch);
        assert_int_equal(get_u64(g, key), pc->ff_exp);
        gm_gguf_arr toks;
        assert_int_equal(gm_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, NULL), 0);
        assert_int_equal(toks.n, pc->vocab);
        const gm_gguf_tensor *t = tensor(g, pc->exp_tensor);
        check_dims(t, pc->hidden, pc->ff_exp, pc->experts);
        assert_int_equal(t->type, pc->exp_type);
        check_dims(tensor(g, "token_embd.weight"), pc->hidden, pc->vocab, 1);

        if (strcmp(pc->preset, "kimi-k2") == 0) {
            assert_int_equal(get_u64(g, "deepseek2.leading_dense_block_count"), 1);
            assert_int_equal(get_u64(g, "deepseek2.attention.head_count"), 64);
            assert_int_equal(get_u64(g, "deepseek2.attention.q_lora_rank"), 1536);
            assert_int_equal(get_u64(g, "deepseek2.attention.kv_lora_rank"), 512);
            assert_int_equal(get_u64(g, "deepseek2.attention.key_length_mla"), 192);
            assert_int_equal(get_u64(g, "deepseek2.attention.value_length_mla"), 128);
            assert_int_equal(get_u64(g, "deepseek2.attention.key_length"), 576);
            assert_int_equal(get_u64(g, "deepseek2.attention.value_length"), 512);
            assert_int_equal(get_u64(g, "deepseek2.expert_shared_count"), 1);
            assert_int_equal(get_u64(g, "deepseek2.rope.dimension_count"), 64);
            check_dims(tensor(g, "blk.0.ffn_gate.weight"), 7168, 18432, 1);
            assert_null(gm_gguf_find_tensor(g, "blk.0.ffn_gate_exps.weight"));
            check_dims(tensor(g, "blk.1.ffn_down_exps.weight"), 2048, 7168, 384);
            check_dims(tensor(g, "blk.1.ffn_gate_shexp.weight"), 7168, 2048, 1);
            check_dims(tensor(g, "blk.1.attn_q_b.weight"), 1536, 64 * 192, 1);
            check_dims(tensor(g, "blk.1.attn_kv_a_mqa.weight"), 7168, 576, 1);
            check_dims(tensor(g, "blk.1.attn_k_b.weight"), 128, 512, 64);
            check_dims(tensor(g, "blk.1.attn_v_b.weight"), 512, 128, 64);
            check_dims(tensor(g, "blk.1.attn_output.weight"), 64 * 128, 7168, 1);
            check_dims(tensor(g, "blk.1.exp_probs_b.bias"), 384, 1, 1);
            assert_true(st.st_size > 500000000000ll); /* about 580 GB at Q4_K */
        }
        if (strcmp(pc->preset, "deepseek-v3") == 0) {
            assert_int_equal(get_u64(g, "deepseek2.leading_dense_block_count"), 3);
            assert_int_equal(get_u64(g, "deepseek2.expert_group_count"), 8);
            assert_int_equal(get_u64(g, "deepseek2.expert_group_used_count"), 4);
            assert_non_null(gm_gguf_find_tensor(g, "blk.2.ffn_up.weight"));
            assert_non_null(gm_gguf_find_tensor(g, "blk.3.ffn_up_exps.weight"));
        }
        if (strcmp(pc->preset, "gpt-oss-120b") == 0) {
            assert_int_equal(get_u64(g, "gpt-oss.attention.sliding_window"), 128);
            assert_int_equal(get_u64(g, "gpt-oss.attention.head_count_kv"), 8);
            assert_int_equal(get_u64(g, "gpt-oss.attention.key_length"), 64);
            check_dims(tensor(g, "blk.0.ffn_down_exps.bias"), 2880, 128, 1);
            check_dims(tensor(g, "blk.0.attn_sinks.weight"), 64, 1, 1);
            check_dims(tensor(g, "blk.0.attn_q.weight"), 2880, 4096, 1);
        }
        if (strcmp(pc->preset, "glm-4.5-air") == 0) {
            /* Rows of 1408 and 10944 are not whole 256-blocks: Q4_0 and Q8_0 stand in. */
            assert_int_equal(tensor(g, "blk.1.ffn_down_exps.weight")->type, GM_TYPE_Q4_0);
            assert_int_equal(tensor(g, "blk.0.ffn_down.weight")->type, GM_TYPE_Q8_0);
            assert_true(n_notes >= 1);
            assert_int_equal(get_u64(g, "glm4moe.leading_dense_block_count"), 1);
            assert_int_equal(get_u64(g, "glm4moe.rope.dimension_count"), 64);
            assert_null(gm_gguf_find_tensor(g, "blk.1.attn_q_norm.weight"));
            check_dims(tensor(g, "blk.1.attn_q.bias"), 96 * 128, 1, 1);
        }
        if (strcmp(pc->preset, "qwen4exp") == 0) {
            /* Qwen3.8-Flash-Next: four streams whose mixers carry every norm, QSA in every 4th
             * block, the n-gram table (Q4_0: rows of 160 are not whole Q4_K blocks) read by
             * block 1 with the hash constants of the model's reference */
            assert_int_equal(get_u64(g, "qwen4exp.hyper_connection.count"), 4);
            assert_int_equal(get_u64(g, "qwen4exp.hyper_connection.low_rank"), 320);
            assert_int_equal(get_u64(g, "qwen4exp.attention.indexer.top_k"), 2048);
            assert_int_equal(arr_i32(g, "qwen4exp.attention.compress_ratios", 3, 48), 4);
            assert_int_equal(arr_i32(g, "qwen4exp.attention.compress_ratios", 2, 48), 0);
            assert_int_equal(arr_i32(g, "qwen4exp.ple.layers", 0, 1), 1);
            assert_int_equal(get_u64(g, "qwen4exp.embedding_length_per_layer_input"), 160);
            assert_int_equal(arr_u64(g, "qwen4exp.ple.layer_multipliers", 0), 23703573157769ull);
            assert_int_equal(arr_u64(g, "qwen4exp.ple.layer_multipliers", 2), 8052911324071ull);
            assert_int_equal(arr_u64(g, "qwen4exp.ple.head_vocab_sizes", 0), 20000003);
            assert_int_equal(arr_u64(g, "qwen4exp.ple.head_vocab_sizes", 15), 20000171);
            assert_int_equal(arr_u64(g, "qwen4exp.ple.head_offsets", 1), 20000003);
            const gm_gguf_tensor *ple = tensor(g, "per_layer_token_embd.weight");
            check_dims(ple, 160, 320001536, 1);
            assert_int_equal(ple->type, GM_TYPE_Q4_0);
            check_dims(tensor(g, "blk.1.ple_key.weight"), 2560, 4 * 2560, 1);
            check_dims(tensor(g, "blk.1.ple_conv1d.weight"), 4, 4 * 2560, 1);
            check_dims(tensor(g, "blk.0.hc_attn_norm.weight"), 4 * 2560, 1, 1);
            check_dims(tensor(g, "blk.0.hc_ffn_up.weight"), 320, 4 * 2560, 1);
            check_dims(tensor(g, "output_hc_down.weight"), 4 * 2560, 320, 1);
            check_dims(tensor(g, "blk.0.ssm_alpha.weight"), 2560, 48, 1);
            check_dims(tensor(g, "blk.3.attn_q.weight"), 2560, 2 * 24 * 256, 1);
            check_dims(tensor(g, "blk.3.indexer.q_proj.weight"), 2560, 4 * 128, 1);
            assert_null(gm_gguf_find_tensor(g, "blk.0.ple_key.weight"));
            assert_null(gm_gguf_find_tensor(g, "blk.0.attn_norm.weight"));
            assert_null(gm_gguf_find_tensor(g, "output_norm.weight"));
        }
        if (strcmp(pc->preset, "deepseek4") == 0) {
            /* the names and shapes llama.cpp's deepseek4 loader asks for: the query latent, one
             * key/value row, the grouped output; the streams' Sinkhorn mixing; hash routing in the
             * first 3 blocks (int32 ids, no selection bias); the compressors of CSA (4, with its
             * indexer) and HCA (128) blocks */
            assert_int_equal(get_u64(g, "deepseek4.attention.head_count_kv"), 1);
            assert_int_equal(get_u64(g, "deepseek4.attention.key_length"), 512);
            assert_int_equal(get_u64(g, "deepseek4.expert_gating_func"), 4);
            assert_int_equal(get_u64(g, "deepseek4.hyper_connection.sinkhorn_iterations"), 20);
            assert_int_equal(get_u64(g, "deepseek4.hash_layer_count"), 3);
            assert_int_equal(get_u64(g, "deepseek4.embedding_length_out"), 4 * 4096);
            assert_int_equal(arr_i32(g, "deepseek4.attention.compress_ratios", 1, 43), 0);
            assert_int_equal(arr_i32(g, "deepseek4.attention.compress_ratios", 2, 43), 4);
            assert_int_equal(arr_i32(g, "deepseek4.attention.compress_ratios", 3, 43), 128);
            check_dims(tensor(g, "blk.0.attn_q_b.weight"), 1024, 64 * 512, 1);
            check_dims(tensor(g, "blk.0.attn_kv.weight"), 4096, 512, 1);
            check_dims(tensor(g, "blk.0.attn_output_a.weight"), 64 * 512 / 8, 8 * 1024, 1);
            check_dims(tensor(g, "blk.0.attn_output_b.weight"), 8 * 1024, 4096, 1);
            check_dims(tensor(g, "blk.0.hc_attn_fn.weight"), 4 * 4096, 6 * 4, 1);
            check_dims(tensor(g, "blk.0.hc_ffn_scale.weight"), 3, 1, 1);
            check_dims(tensor(g, "output_hc_fn.weight"), 4 * 4096, 4, 1);
            const gm_gguf_tensor *hash = tensor(g, "blk.2.ffn_gate_tid2eid.weight");
            check_dims(hash, 6, 129280, 1);
            assert_int_equal(hash->type, GM_TYPE_I32);
            assert_null(gm_gguf_find_tensor(g, "blk.2.exp_probs_b.bias"));
            assert_non_null(gm_gguf_find_tensor(g, "blk.3.exp_probs_b.bias"));
            check_dims(tensor(g, "blk.2.attn_compressor_kv.weight"), 4096, 2 * 512, 1);
            check_dims(tensor(g, "blk.2.attn_compressor_ape.weight"), 2 * 512, 4, 1);
            check_dims(tensor(g, "blk.2.indexer_compressor_kv.weight"), 4096, 2 * 128, 1);
            check_dims(tensor(g, "blk.2.indexer.attn_q_b.weight"), 1024, 64 * 128, 1);
            check_dims(tensor(g, "blk.3.attn_compressor_ape.weight"), 512, 128, 1);
            assert_null(gm_gguf_find_tensor(g, "blk.3.indexer.proj.weight"));
            assert_null(gm_gguf_find_tensor(g, "blk.1.attn_compressor_kv.weight"));
            assert_int_equal(n_notes, 0);
        }
        if (strcmp(pc->preset, "qwen3-235b-a22b") == 0) {
            assert_int_equal(get_u64(g, "qwen3moe.attention.head_count"), 64);
            assert_int_equal(get_u64(g, "qwen3moe.attention.head_count_kv"), 4);
            assert_int_equal(get_u64(g, "qwen3moe.attention.key_length"), 128);
            check_dims(tensor(g, "blk.0.attn_k.weight"), 4096, 512, 1);
        }
        gm_gguf_close(g);
        unlink(path);
    }
}

/* A dry run sizes the file exactly as the sparse file comes out. */
static void test_dry_run_sizes(void **state)
{
    (void)state;
    gm_err err = {0};
    gm_gen_result dry, sparse;
    char *argv[] = {"--preset", "qwen3-30b-a3b", "--layers", "4", "--dry-run"};
    gm_gen_opts o;
    gm_gen_opts_init(&o);
    assert_int_equal(gm_gen_parse_args(&o, 5, argv, &err), GM_GEN_ARGS_RUN);
    assert_int_equal(gm_gen_run(&o, &dry, &err), 0);
    const char *path = tmp_path("dry.gguf");
    assert_false(file_exists(path));
    assert_int_equal(gen(path, "--preset qwen3-30b-a3b --layers 4 --sparse", &sparse, &err), 0);
    assert_int_equal(dry.data_bytes, sparse.data_bytes);
    assert_int_equal(dry.n_tensors, sparse.n_tensors);
    assert_int_equal(dry.expert_bytes, sparse.expert_bytes);
    /* One expert of one block: gate + up + down of 2048 x 768 Q4_K (144 bytes per 256). */
    assert_int_equal(sparse.expert_slice_bytes, 3ull * 2048 * 768 / 256 * 144);
    unlink(path);
}

/* Writer: every value type, string arrays, nested arrays, padding, data across tensors. */
static void test_writer_roundtrip(void **state)
{
    (void)state;
    const char *path = tmp_path("w.gguf");
    gm_err err = {0};
    gm_ggufw *w = NULL;
    assert_int_equal(gm_ggufw_create(&w, path, 0, &err), 0);
    assert_int_equal(gm_ggufw_set_u8(w, "t.u8", 200, &err), 0);
    assert_int_equal(gm_ggufw_set_i8(w, "t.i8", -100, &err), 0);
    assert_int_equal(gm_ggufw_set_u16(w, "t.u16", 60000, &err), 0);
    assert_int_equal(gm_ggufw_set_i16(w, "t.i16", -30000, &err), 0);
    assert_int_equal(gm_ggufw_set_u32(w, "t.u32", 4000000000u, &err), 0);
    assert_int_equal(gm_ggufw_set_i32(w, "t.i32", -2000000000, &err), 0);
    assert_int_equal(gm_ggufw_set_u64(w, "t.u64", 1ull << 60, &err), 0);
    assert_int_equal(gm_ggufw_set_i64(w, "t.i64", -(1ll << 60), &err), 0);
    assert_int_equal(gm_ggufw_set_f32(w, "t.f32", 1.5f, &err), 0);
    assert_int_equal(gm_ggufw_set_f64(w, "t.f64", -2.25, &err), 0);
    assert_int_equal(gm_ggufw_set_bool(w, "t.bool", true, &err), 0);
    assert_int_equal(gm_ggufw_set_str(w, "t.str", "héllo", &err), 0);
    assert_int_equal(gm_ggufw_set_strn(w, "t.empty", "", 0, &err), 0);
    int32_t ints[5] = {1, -2, 3, -4, 5};
    assert_int_equal(gm_ggufw_set_arr(w, "t.arr_i32", GM_GGUF_I32, ints, 5, &err), 0);
    float fl[3] = {0.5f, -1.0f, 2.0f};
    assert_int_equal(gm_ggufw_set_arr(w, "t.arr_f32", GM_GGUF_F32, fl, 3, &err), 0);
    const char *strs[3] = {"a", "", "Ġhello world"};
    assert_int_equal(gm_ggufw_set_arr_str(w, "t.arr_str", strs, NULL, 3, &err), 0);
    /* [[7, 8], [9]] as u32 arrays, given serialised. */
    uint8_t raw[4 + 8 + (4 + 8 + 8) + (4 + 8 + 4)];
    uint8_t *p = raw;
    uint32_t u;
    uint64_t n;
    u = GM_GGUF_ARRAY; memcpy(p, &u, 4); p += 4;
    n = 2; memcpy(p, &n, 8); p += 8;
    u = GM_GGUF_U32; memcpy(p, &u, 4); p += 4;
    n = 2; memcpy(p, &n, 8); p += 8;
    u = 7; memcpy(p, &u, 4); p += 4;
    u = 8; memcpy(p, &u, 4); p += 4;
    u = GM_GGUF_U32; memcpy(p, &u, 4); p += 4;
    n = 1; memcpy(p, &n, 8); p += 8;
    u = 9; memcpy(p, &u, 4); p += 4;
    assert_int_equal(gm_ggufw_set_raw(w, "t.nested", GM_GGUF_ARRAY, raw, sizeof raw, &err), 0);
    assert_true(gm_ggufw_has_key(w, "t.nested"));
    assert_int_equal(gm_ggufw_set_u8(w, "t.u8", 1, &err), GM_EINVAL); /* duplicate */
    gm_err_clear(&err);

    uint64_t ne_a[1] = {3}, ne_b[2] = {32, 2}, ne_c[2] = {5, 3};
    assert_int_equal(gm_ggufw_add_tensor(w, "a", GM_TYPE_F32, 1, ne_a, &err), 0);
    assert_int_equal(gm_ggufw_add_tensor(w, "b", GM_TYPE_Q8_0, 2, ne_b, &err), 0);
    assert_int_equal(gm_ggufw_add_tensor(w, "c", GM_TYPE_F16, 2, ne_c, &err), 0);
    assert_int_equal(gm_ggufw_add_tensor(w, "c", GM_TYPE_F16, 2, ne_c, &err), GM_EINVAL);
    gm_err_clear(&err);
    uint64_t ne_bad[1] = {100};
    assert_int_equal(gm_ggufw_add_tensor(w, "bad", GM_TYPE_Q4_K, 1, ne_bad, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_ggufw_begin_data(w, false, &err), 0);
    assert_int_equal(gm_ggufw_set_u8(w, "late", 1, &err), GM_EINVAL);
    gm_err_clear(&err);
    /* 12 + 68 + 30 bytes in uneven calls spanning tensor ends. */
    uint8_t data[110];
    for (int i = 0; i < 110; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    assert_int_equal(gm_ggufw_write(w, data, 5, &err), 0);
    assert_int_equal(gm_ggufw_write(w, data + 5, 50, &err), 0);
    assert_int_equal(gm_ggufw_write(w, data + 55, 55, &err), 0);
    assert_int_equal(gm_ggufw_write(w, data, 1, &err), GM_EINVAL); /* past the last tensor */
    gm_err_clear(&err);
    assert_int_equal(gm_ggufw_finish(w, &err), 0);
    uint64_t fsize = gm_ggufw_file_size(w);
    gm_ggufw_destroy(w);
    assert_false(file_exists(tmp_path("w.gguf.tmp")));

    gm_gguf *g = NULL;
    if (gm_gguf_open(&g, path, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(gm_gguf_total_size(g), fsize);
    uint64_t v;
    int64_t iv;
    double d;
    bool b;
    gm_gguf_str s;
    assert_int_equal(gm_gguf_get_u64(g, "t.u8", &v, NULL), 0);
    assert_int_equal(v, 200);
    assert_int_equal(gm_gguf_get_i64(g, "t.i8", &iv, NULL), 0);
    assert_int_equal(iv, -100);
    assert_int_equal(gm_gguf_get_u64(g, "t.u16", &v, NULL), 0);
    assert_int_equal(v, 60000);
    assert_int_equal(gm_gguf_get_i64(g, "t.i16", &iv, NULL), 0);
    assert_int_equal(iv, -30000);
    assert_int_equal(gm_gguf_get_u64(g, "t.u32", &v, NULL), 0);
    assert_int_equal(v, 4000000000u);
    assert_int_equal(gm_gguf_get_i64(g, "t.i32", &iv, NULL), 0);
    assert_int_equal(iv, -2000000000);
    assert_int_equal(gm_gguf_get_u64(g, "t.u64", &v, NULL), 0);
    assert_int_equal(v, 1ull << 60);
    assert_int_equal(gm_gguf_get_i64(g, "t.i64", &iv, NULL), 0);
    assert_true(iv == -(1ll << 60));
    assert_int_equal(gm_gguf_get_f64(g, "t.f32", &d, NULL), 0);
    assert_true(d == 1.5);
    assert_int_equal(gm_gguf_get_f64(g, "t.f64", &d, NULL), 0);
    assert_true(d == -2.25);
    assert_int_equal(gm_gguf_get_bool(g, "t.bool", &b, NULL), 0);
    assert_true(b);
    assert_int_equal(gm_gguf_get_str(g, "t.str", &s, NULL), 0);
    assert_true(gm_gguf_str_eq(s, "héllo"));
    assert_int_equal(gm_gguf_get_str(g, "t.empty", &s, NULL), 0);
    assert_int_equal(s.len, 0);
    gm_gguf_arr a, sub;
    assert_int_equal(gm_gguf_get_arr(g, "t.arr_i32", &a, NULL), 0);
    assert_int_equal(a.n, 5);
    assert_int_equal(gm_gguf_arr_i64(&a, 3, &iv), 0);
    assert_int_equal(iv, -4);
    assert_int_equal(gm_gguf_get_arr(g, "t.arr_f32", &a, NULL), 0);
    assert_int_equal(gm_gguf_arr_f64(&a, 1, &d), 0);
    assert_true(d == -1.0);
    assert_int_equal(gm_gguf_get_arr(g, "t.arr_str", &a, NULL), 0);
    assert_int_equal(a.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gm_gguf_arr_str(&a, (uint64_t)i, &s), 0);
        assert_true(gm_gguf_str_eq(s, strs[i]));
    }
    assert_int_equal(gm_gguf_get_arr(g, "t.nested", &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_ARRAY);
    assert_int_equal(a.n, 2);
    assert_int_equal(gm_gguf_arr_sub(&a, 1, &sub), 0);
    assert_int_equal(sub.n, 1);
    assert_int_equal(gm_gguf_arr_u64(&sub, 0, &v), 0);
    assert_int_equal(v, 9);

    assert_int_equal(gm_gguf_n_tensors(g), 3);
    const gm_gguf_tensor *ta = tensor(g, "a"), *tb = tensor(g, "b"), *tc = tensor(g, "c");
    assert_int_equal(ta->offset, 0);
    assert_int_equal(tb->offset, 32);
    assert_int_equal(tc->offset, 128);
    assert_int_equal(gm_gguf_part_data_offset(g, 0) % 32, 0);
    assert_memory_equal(gm_gguf_tensor_data(g, ta), data, 12);
    assert_memory_equal(gm_gguf_tensor_data(g, tb), data + 12, 68);
    assert_memory_equal(gm_gguf_tensor_data(g, tc), data + 80, 30);
    assert_int_equal(fsize, gm_gguf_part_data_offset(g, 0) + 160);
    gm_gguf_close(g);
    unlink(path);

    /* Alignment 64: recorded as general.alignment, offsets follow. */
    assert_int_equal(gm_ggufw_create(&w, path, 0, &err), 0);
    assert_int_equal(gm_ggufw_set_alignment(w, 48, &err), GM_EINVAL);
    gm_err_clear(&err);
    assert_int_equal(gm_ggufw_set_alignment(w, 64, &err), 0);
    assert_int_equal(gm_ggufw_add_tensor(w, "a", GM_TYPE_F32, 1, ne_a, &err), 0);
    assert_int_equal(gm_ggufw_add_tensor(w, "b", GM_TYPE_Q8_0, 2, ne_b, &err), 0);
    assert_int_equal(gm_ggufw_begin_data(w, false, &err), 0);
    assert_int_equal(gm_ggufw_write(w, data, 80, &err), 0);
    assert_int_equal(gm_ggufw_finish(w, &err), 0);
    gm_ggufw_destroy(w);
    if (gm_gguf_open(&g, path, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(gm_gguf_alignment(g), 64);
    assert_int_equal(tensor(g, "b")->offset, 64);
    assert_int_equal(gm_gguf_part_data_offset(g, 0) % 64, 0);
    gm_gguf_close(g);
    unlink(path);

    /* An unfinished file is removed, and finish refuses missing bytes. */
    assert_int_equal(gm_ggufw_create(&w, path, 0, &err), 0);
    assert_int_equal(gm_ggufw_add_tensor(w, "b", GM_TYPE_Q8_0, 2, ne_b, &err), 0);
    assert_int_equal(gm_ggufw_begin_data(w, false, &err), 0);
    assert_int_equal(gm_ggufw_write(w, data, 10, &err), 0);
    assert_int_equal(gm_ggufw_finish(w, &err), GM_EINVAL);
    assert_non_null(strstr(err.msg, "10 of 68"));
    assert_true(file_exists(tmp_path("w.gguf.tmp")));
    gm_ggufw_destroy(w);
    assert_false(file_exists(tmp_path("w.gguf.tmp")));
    assert_false(file_exists(path));

    /* No directory: a clear error. */
    gm_err_clear(&err);
    assert_int_equal(gm_ggufw_create(&w, tmp_path("nodir/x.gguf"), 0, &err), GM_EIO);
    assert_non_null(strstr(err.msg, "cannot create"));
    assert_null(w);
}

/* A sparse file with a big data section: data reads as zeros, blocks are not allocated. */
static void test_sparse_hole(void **state)
{
    (void)state;
    const char *path = tmp_path("hole.gguf");
    gm_err err = {0};
    gm_gen_result res;
    assert_int_equal(gen(path, "--preset qwen3-30b-a3b --sparse --seed 3", &res, &err), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, res.file_bytes);
    assert_true(res.file_bytes > 15000000000ull); /* about 17 GB */
    assert_true((uint64_t)st.st_blocks * 512 < (16u << 20));
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t buf[4096];
    assert_int_equal(fseeko(f, (off_t)(res.file_bytes / 2), SEEK_SET), 0);
    assert_int_equal(fread(buf, 1, sizeof buf, f), sizeof buf);
    for (size_t i = 0; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0);
    fclose(f);
    unlink(path);
}

typedef struct bad_case {
    const char *args;
    const char *msg; /* a part of the error message */
} bad_case;

/* Bad flags and values: GM_EINVAL and a message naming the problem; no file written. */
static void test_bad_args(void **state)
{
    (void)state;
    static const bad_case cases[] = {
        {"--arch qwen3moe --frobnicate", "unknown option '--frobnicate'"},
        {"--arch qwen3moe stray", "unexpected argument 'stray'"},
        {"--arch", "--arch needs a value"},
        {"--arch qwen4", "unknown architecture 'qwen4'"},
        {"--preset gpt-5", "unknown preset 'gpt-5'"},
        {"--layers 3", "no model given"},
        {"--arch qwen3moe --layers abc", "--layers: expected a number, got 'abc'"},
        {"--arch qwen3moe --layers 0", "--layers: 0 is out of range"},
        {"--arch qwen3moe --layers -3", "--layers: expected a number"},
        {"--arch qwen3moe --experts 99999", "--experts: 99999 is out of range"},
        {"--arch qwen3moe --layers 99999999999999999999999", "expected a number"},
        {"--arch qwen3moe --expert-type Q9_Z", "unknown tensor type 'Q9_Z'"},
        {"--arch qwen3moe --expert-type Q3_K", "cannot write Q3_K"},
        {"--arch qwen3moe --dense-type IQ1_S", "cannot write IQ1_S"},
        {"--arch qwen3moe --skew -1", "--skew: expected a number"},
        {"--arch qwen3moe --skew nan", "--skew: expected a number"},
        {"--arch qwen3moe --seed 1x", "--seed: expected a number"},
        {"--arch qwen3moe --vocab 100", "--vocab: 100 is out of range"},
        {"--arch qwen3moe --hidden 8", "--hidden: 8 is out of range"},
        {"--arch qwen3moe --experts 4 --experts-used 6", "--experts-used 6 is more than the 4"},
        {"--arch qwen3moe --heads 5", "5 heads are not a multiple of 2 KV heads"},
        {"--arch qwen3moe --hidden 300", "must be multiples of 32"},
        {"--arch gpt-oss --ffn 512", "--ffn: gpt-oss has no dense FFN"},
        {"--arch qwen3moe --dense-layers 1", "--dense-layers: qwen3moe has no dense blocks"},
        {"--arch glm4moe --dense-layers 3", "leave no MoE block"},
        {"--arch deepseek2 --kv-heads 2", "do not apply to deepseek2"},
        {"--arch qwen3moe --q-lora 64", "apply to the MLA families"},
        {"--arch llama --shared-experts 1", "llama has no shared experts"},
        {"--arch qwen35moe --no-ple", "apply to qwen4exp only"},
        {"--arch qwen4exp --compress-ratio 65", "--compress-ratio: 65 is out of range"},
        {"--preset qwen4exp --layers 1", "is not a Gated DeltaNet block of 1 (use --no-ple)"},
        {"--arch qwen4exp --shared-experts 0", "qwen4exp has a shared expert"},
    };
    const char *path = tmp_path("bad.gguf");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gm_err err = {0};
        int rc = gen(path, cases[i].args, NULL, &err);
        if (rc != GM_EINVAL)
            fail_msg("'%s': code %d, expected GM_EINVAL", cases[i].args, rc);
        if (!strstr(err.msg, cases[i].msg))
            fail_msg("'%s': message '%s' lacks '%s'", cases[i].args, err.msg, cases[i].msg);
        assert_false(file_exists(path));
    }
    /* Missing -o (parse only). */
    gm_gen_opts o;
    gm_gen_opts_init(&o);
    gm_err err = {0};
    char *argv[] = {"--arch", "qwen3moe"};
    assert_int_equal(gm_gen_parse_args(&o, 2, argv, &err), GM_EINVAL);
    assert_non_null(strstr(err.msg, "no output file"));
    char *help[] = {"--arch", "qwen3moe", "--help"};
    assert_int_equal(gm_gen_parse_args(&o, 3, help, NULL), GM_GEN_ARGS_HELP);
    assert_non_null(strstr(gm_gen_usage(), "--expert-type"));

    /* Failures while writing leave nothing behind. */
    gm_err_clear(&err);
    assert_int_equal(gen(tmp_path("nodir/x.gguf"), "--arch qwen3moe", NULL, &err), GM_EIO);
    gm_err_clear(&err);
    assert_true(gen(path, "--arch qwen3moe --tokenizer-from /nonexistent.gguf", NULL, &err) < 0);
    assert_non_null(strstr(err.msg, "/nonexistent.gguf"));
    assert_false(file_exists(path));
    assert_false(file_exists(tmp_path("bad.gguf.tmp")));
}

/* --tokenizer-from copies every tokenizer.* key and sizes the vocabulary from it. */
static void test_tokenizer_from(void **state)
{
    (void)state;
    const char *src = tmp_path("tok-src.gguf"), *dst = tmp_path("tok-dst.gguf");
    gm_err err = {0};
    assert_int_equal(gen(src, "--arch qwen3moe --vocab 3000", NULL, &err), 0);
    if (gen_opt(dst, "--arch deepseek2", "--tokenizer-from", src, NULL, &err) != 0)
        fail_msg("%s", err.msg);
    gm_gguf *a = NULL, *b = NULL;
    assert_int_equal(gm_gguf_open(&a, src, &err), 0);
    assert_int_equal(gm_gguf_open(&b, dst, &err), 0);
    check_dims(tensor(b, "token_embd.weight"), 256, 3000, 1);
    check_dims(tensor(b, "output.weight"), 256, 3000, 1);
    assert_int_equal(get_u64(b, "deepseek2.vocab_size"), 3000);
    int n_tok = 0;
    for (uint64_t i = 0; i < gm_gguf_n_kv(a); i++) {
        gm_gguf_str k = gm_gguf_kv_key(a, i);
        if (k.len < 10 || memcmp(k.ptr, "tokenizer.", 10) != 0)
            continue;
        n_tok++;
        char key[256];
        memcpy(key, k.ptr, (size_t)k.len);
        key[k.len] = '\0';
        int64_t j = gm_gguf_find_kv(b, key);
        if (j < 0)
            fail_msg("%s was not copied", key);
        assert_int_equal(gm_gguf_kv_type(b, (uint64_t)j), gm_gguf_kv_type(a, i));
    }
    assert_true(n_tok >= 8);
    gm_gguf_arr ta, tb;
    assert_int_equal(gm_gguf_get_arr(a, "tokenizer.ggml.tokens", &ta, NULL), 0);
    assert_int_equal(gm_gguf_get_arr(b, "tokenizer.ggml.tokens", &tb, NULL), 0);
    assert_int_equal(ta.n, tb.n);
    for (uint64_t i = 0; i < ta.n; i += 97) {
        gm_gguf_str sa, sb;
        assert_int_equal(gm_gguf_arr_str(&ta, i, &sa), 0);
        assert_int_equal(gm_gguf_arr_str(&tb, i, &sb), 0);
        assert_int_equal(sa.len, sb.len);
        assert_memory_equal(sa.ptr, sb.ptr, sa.len);
    }
    gm_gguf_close(a);
    gm_gguf_close(b);
    unlink(dst);

    /* A real converter's tokenizer (BPE with merges) from the committed fixture. */
    const char *fx = gm_fixture("trained-qwen3moe/model-q4_k_m.gguf");
    if (gen_opt(dst, "--arch qwen3moe", "--tokenizer-from", fx, NULL, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(gm_gguf_open(&a, fx, &err), 0);
    assert_int_equal(gm_gguf_open(&b, dst, &err), 0);
    const char *keys[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                          "tokenizer.ggml.token_type"};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(gm_gguf_get_arr(a, keys[k], &ta, NULL), 0);
        assert_int_equal(gm_gguf_get_arr(b, keys[k], &tb, NULL), 0);
        assert_int_equal(ta.n, tb.n);
        assert_int_equal(ta.elem_type, tb.elem_type);
    }
    assert_int_equal(gm_gguf_get_arr(b, "tokenizer.ggml.tokens", &tb, NULL), 0);
    check_dims(tensor(b, "token_embd.weight"), 256, tb.n, 1);
    gm_gguf_str sa, sb;
    assert_int_equal(gm_gguf_get_str(a, "tokenizer.ggml.pre", &sa, NULL), 0);
    assert_int_equal(gm_gguf_get_str(b, "tokenizer.ggml.pre", &sb, NULL), 0);
    assert_int_equal(sa.len, sb.len);
    assert_memory_equal(sa.ptr, sb.ptr, sa.len);
    gm_gguf_close(a);
    gm_gguf_close(b);
    unlink(dst);
    unlink(src);
}

/* The same options give the same bytes; another seed other bytes; experts and embedding rows
 * are all distinct. */
static void test_deterministic_distinct(void **state)
{
    (void)state;
    const char *p1 = tmp_path("d1.gguf"), *p2 = tmp_path("d2.gguf"), *p3 = tmp_path("d3.gguf");
    gm_err err = {0};
    const char *args = "--arch qwen3moe --experts 16 --seed 11 --skew 0.5";
    assert_int_equal(gen(p1, args, NULL, &err), 0);
    assert_int_equal(gen(p2, args, NULL, &err), 0);
    assert_int_equal(gen(p3, "--arch qwen3moe --experts 16 --seed 12 --skew 0.5", NULL, &err), 0);
    size_t n1, n2, n3;
    uint8_t *b1 = gm_read_file(p1, &n1), *b2 = gm_read_file(p2, &n2), *b3 = gm_read_file(p3, &n3);
    assert_non_null(b1);
    assert_non_null(b2);
    assert_non_null(b3);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    assert_int_equal(n1, n3);
    assert_memory_not_equal(b1, b3, n1);

    gm_gguf *g = NULL;
    assert_int_equal(gm_gguf_open(&g, p1, &err), 0);
    const char *names[] = {"blk.0.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight",
                           "blk.2.ffn_down_exps.weight"};
    const uint8_t *first[3];
    for (int k = 0; k < 3; k++) {
        const gm_gguf_tensor *t = tensor(g, names[k]);
        const uint8_t *d = gm_gguf_tensor_data(g, t);
        uint64_t slice = t->n_bytes / t->ne[2];
        first[k] = d;
        for (uint64_t e = 0; e < t->ne[2]; e++)
            for (uint64_t f = e + 1; f < t->ne[2]; f++)
                if (memcmp(d + e * slice, d + f * slice, slice) == 0)
                    fail_msg("%s: experts %llu and %llu are identical", names[k],
                             (unsigned long long)e, (unsigned long long)f);
    }
    /* gate and up of one block (same shape, same pool) differ too */
    const gm_gguf_tensor *tu = tensor(g, "blk.0.ffn_up_exps.weight");
    assert_memory_not_equal(first[0], gm_gguf_tensor_data(g, tu), 256);
    const gm_gguf_tensor *te = tensor(g, "token_embd.weight");
    const uint8_t *d = gm_gguf_tensor_data(g, te);
    uint64_t row = te->n_bytes / te->ne[1];
    for (uint64_t i = 0; i < te->ne[1]; i++)
        for (uint64_t j = i + 1; j < te->ne[1]; j++)
            if (memcmp(d + i * row, d + j * row, row) == 0)
                fail_msg("token_embd rows %llu and %llu are identical", (unsigned long long)i,
                         (unsigned long long)j);
    gm_gguf_close(g);
    free(b1);
    free(b2);
    free(b3);
    unlink(p1);
    unlink(p2);
    unlink(p3);
}

/* Buffered and O_DIRECT writing give the same bytes, over more than the writer's ring of
 * buffers (the buffered path drops pages behind itself). */
static void test_direct_same_bytes(void **state)
{
    (void)state;
    const char *p1 = tmp_path("buffered.gguf"), *p2 = tmp_path("direct.gguf");
    gm_err err = {0};
    gm_gen_result r1, r2;
    const char *args = "--arch qwen3moe --hidden 1024 --experts 64 --seed 9";
    assert_int_equal(gen(p1, args, &r1, &err), 0);
    char buf[256];
    snprintf(buf, sizeof buf, "%s --direct", args);
    assert_int_equal(gen(p2, buf, &r2, &err), 0);
    assert_false(r1.direct_io);
    assert_true(r1.file_bytes > 64000000);
    assert_int_equal(r1.file_bytes, r2.file_bytes);
    size_t n1, n2;
    uint8_t *b1 = gm_read_file(p1, &n1), *b2 = gm_read_file(p2, &n2);
    assert_non_null(b1);
    assert_non_null(b2);
    assert_int_equal(n1, r1.file_bytes);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    free(b1);
    free(b2);
    unlink(p1);
    unlink(p2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_arch_tables),
        cmocka_unit_test(test_real_presets_sparse),
        cmocka_unit_test(test_dry_run_sizes),
        cmocka_unit_test(test_sparse_hole),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_tokenizer_from),
        cmocka_unit_test(test_deterministic_distinct),
        cmocka_unit_test(test_direct_same_bytes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(gm_test_tmpdir());
    return rc;
}
