/* Model description of every reference fixture: architecture, hyper-parameters and the class
 * of every tensor. Expected values come from the fixtures' README (layers, experts, top-k,
 * dense layers, shared experts) and from their gguf-dump.txt, which gguf-py wrote: the byte
 * sums of each class are recomputed here from that dump, not from our reader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "testutil.h"

typedef struct fixture {
    const char *dir;          /* fixture folder */
    const char *model;        /* model file in it */
    int committed;            /* under tests/fixtures (else the fetched cache) */
    const char *arch;
    uint32_t n_layer, n_expert, n_used, n_moe_layers, n_expert_tensors;
    int has_shared;           /* a shared expert (ffn_*_shexp) */
    uint32_t n_recurrent;     /* linear-attention layers */
    uint64_t kv_bytes_per_token_f16; /* at a short context, worked out in the comment */
} fixture;

/* KV bytes per token (f16 elements, 2 bytes):
 *  qwen3moe: 3 layers x 2 kv heads x (64 + 64) x 2 = 1536
 *  trained : 6 layers x 2 x (64 + 64) x 2 = 3072
 *  deepseek-v3 (MLA): 3 layers x (kv_lora 256 + rope 64) x 2 = 1920
 *  gpt-oss: 3 layers x 2 x (64 + 64) x 2 = 1536 (window 16 > the 8 tokens used below)
 *  glm4moe, mixtral, minimax-m2: 3 x 2 x 128 x 2 = 1536
 *  qwen3next: only layer 2 attends: 1 x 2 x 128 x 2 = 512 (plus a fixed recurrent state) */
static const fixture k_fixtures[] = {
    {"trained-qwen3moe", "model-q4_k_m.gguf", 1, "qwen3moe", 6, 16, 4, 6, 18, 0, 0, 3072},
    {"qwen3moe", "model-bf16.gguf", 0, "qwen3moe", 3, 8, 2, 3, 9, 0, 0, 1536},
    {"qwen3moe", "model-q4_k_m.gguf", 0, "qwen3moe", 3, 8, 2, 3, 9, 0, 0, 1536},
    {"deepseek-v3", "model-bf16.gguf", 0, "deepseek2", 3, 8, 4, 2, 6, 1, 0, 1920},
    {"gpt-oss", "model-bf16.gguf", 0, "gpt-oss", 3, 8, 2, 3, 9, 0, 0, 1536},
    {"glm4moe", "model-bf16.gguf", 0, "glm4moe", 3, 8, 2, 2, 6, 1, 0, 1536},
    {"mixtral", "model-bf16.gguf", 0, "llama", 3, 8, 2, 3, 9, 0, 0, 1536},
    {"qwen3next", "model-bf16.gguf", 0, "qwen3next", 3, 8, 2, 3, 9, 1, 2, 512},
    {"minimax-m2", "model-bf16.gguf", 0, "minimax-m2", 3, 8, 2, 3, 9, 0, 0, 1536},
};

static const char *fixture_path(const fixture *f, const char *file)
{
    static char rel[512];
    snprintf(rel, sizeof rel, "%s/%s", f->dir, file);
    if (f->committed)
        return gm_fixture(rel);
    return gm_fixture_cached(rel);
}

/* Byte sums by class from gguf-dump.txt ("name<TAB>type<TAB>ne=[...]<TAB>bytes"). */
typedef struct dump_sums {
    uint64_t expert, shared, total;
    uint32_t n_tensors, n_expert_tensors;
} dump_sums;

static int read_dump(const char *path, dump_sums *s)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int in_tensors = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "## tensors", 10) == 0) {
            in_tensors = 1;
            continue;
        }
        if (!in_tensors || line[0] == '\n' || line[0] == '#')
            continue;
        char *tab1 = strchr(line, '\t');
        char *tab_last = strrchr(line, '\t');
        if (!tab1 || !tab_last || tab1 == tab_last)
            continue;
        *tab1 = '\0';
        uint64_t bytes = strtoull(tab_last + 1, NULL, 10);
        s->n_tensors++;
        s->total += bytes;
        if (strstr(line, "_exps.weight")) {
            s->expert += bytes;
            s->n_expert_tensors++;
        } else if (strstr(line, "shexp")) {
            s->shared += bytes;
        }
    }
    fclose(f);
    return 0;
}

static void check_fixture(const fixture *fx)
{
    const char *path = fixture_path(fx, fx->model);
    if (!path) {
        if (gm_test_in_ci())
            fail_msg("fixture %s/%s missing: run scripts/fetch-fixtures.sh", fx->dir, fx->model);
        char rel[512];
        snprintf(rel, sizeof rel, "%s/%s", fx->dir, fx->model);
        gm_test_skipped(rel);
        return;
    }
    char model_path[4096];
    snprintf(model_path, sizeof model_path, "%s", path);
    gm_gguf *g = NULL;
    gm_err err = {0};
    assert_int_equal(gm_gguf_open(&g, model_path, &err), 0);
    gm_model_desc m;
    assert_int_equal(gm_model_describe(g, &m, &err), 0);
    assert_string_equal(m.arch_name, fx->arch);
    assert_non_null(m.arch);
    /* runnable exactly when the engine runs the family (test_engine checks the engine's side) */
    assert_int_equal(m.runnable, m.arch->runnable);
    if (!m.runnable)
        assert_non_null(strstr(m.not_runnable, "cannot run yet (gmlx runs "));
    assert_int_equal(m.hp.n_layer, fx->n_layer);
    assert_int_equal(m.hp.n_expert, fx->n_expert);
    assert_int_equal(m.hp.n_expert_used, fx->n_used);
    assert_int_equal(m.n_moe_layers, fx->n_moe_layers);
    assert_int_equal(m.max_expert_count, fx->n_expert);

    /* Every tensor is classified; counts and byte sums agree with the independent dump. */
    const char *dump = fixture_path(fx, "gguf-dump.txt");
    assert_non_null(dump);
    dump_sums ds;
    assert_int_equal(read_dump(dump, &ds), 0);
    assert_int_equal(ds.n_tensors, m.n_tensors);
    assert_int_equal(ds.n_expert_tensors, fx->n_expert_tensors);
    if (strcmp(fx->model, "model-bf16.gguf") == 0) { /* the dumps are of the BF16 files */
        assert_int_equal(ds.total, m.tensor_bytes);
        assert_int_equal(ds.expert, m.expert_bytes);
        assert_int_equal(ds.shared, m.group_bytes[GM_TG_SHARED_EXPERTS]);
        assert_int_equal(ds.total - ds.expert, m.every_token_bytes);
    }
    assert_int_equal(m.lookup_bytes, 0);
    assert_int_equal(m.mtp_bytes, 0);
    assert_true((m.group_bytes[GM_TG_SHARED_EXPERTS] > 0) == (fx->has_shared != 0));
    uint32_t n_exp = 0;
    for (uint64_t i = 0; i < m.n_tensors; i++) {
        const gm_gguf_tensor *t = gm_gguf_tensor_at(g, i);
        const gm_tensor_desc *d = &m.tensors[i];
        int is_stack = strstr(t->name, "_exps.weight") != NULL;
        assert_int_equal(d->cls == GM_TC_EXPERT, is_stack);
        if (is_stack) {
            n_exp++;
            assert_int_equal(t->n_dims, 3);
            assert_int_equal(t->ne[2], fx->n_expert);
        }
        if (strncmp(t->name, "token_embd", 10) == 0)
            assert_int_equal(d->group, GM_TG_EMBEDDINGS);
        if (strcmp(t->name, "output.weight") == 0 || strcmp(t->name, "output_norm.weight") == 0)
            assert_int_equal(d->group, GM_TG_OUTPUT);
        if (strstr(t->name, ".attn_q.weight") || strstr(t->name, ".attn_output.weight"))
            assert_int_equal(d->group, GM_TG_ATTENTION);
        if (strstr(t->name, ".ffn_gate_inp.weight"))
            assert_int_equal(d->group, GM_TG_DENSE_FFN_ROUTERS);
        /* expert biases (gpt-oss) are read by every token */
        if (strstr(t->name, "_exps.bias"))
            assert_int_equal(d->cls, GM_TC_EVERY_TOKEN);
    }
    assert_int_equal(n_exp, fx->n_expert_tensors);

    /* Per-layer expert geometry: one expert is a slice of each of its layer's stacks. */
    uint64_t cold = 0;
    uint32_t n_recurrent = 0;
    for (uint32_t l = 0; l < m.n_layers; l++) {
        const gm_layer_desc *L = &m.layers[l];
        n_recurrent += L->is_recurrent;
        if (!L->is_moe)
            continue;
        assert_int_equal(L->per_expert_bytes * L->n_expert, L->expert_bytes);
        cold += (uint64_t)fx->n_used * L->per_expert_bytes;
    }
    assert_int_equal(cold, m.cold_token_bytes);
    assert_int_equal(n_recurrent, fx->n_recurrent);

    /* KV: 8 tokens minus the 0-token baseline (the recurrent state) is 8 x bytes per token. */
    uint64_t kv8 = gm_model_kv_bytes(&m, 8, 16) - gm_model_kv_bytes(&m, 0, 16);
    assert_int_equal(kv8, 8 * fx->kv_bytes_per_token_f16);
    gm_model_desc_free(&m);
    gm_gguf_close(g);
}

static void test_fixtures(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_fixtures / sizeof k_fixtures[0]; i++)
        check_fixture(&k_fixtures[i]);
}

/* Qwen3-Next's recurrent layers hold a fixed state: conv (kernel-1) x (inner + 2 x groups x
 * state) plus value heads x state x head dim, in f32:
 * (3 x (256 + 2*2*64) + 4 x 64 x 64) x 4 = (1536 + 16384) x 4 = 71680 bytes per layer, 2 layers. */
static void test_recurrent_state(void **state)
{
    (void)state;
    const char *p = gm_fixture_cached("qwen3next/model-bf16.gguf");
    if (!p) {
        if (gm_test_in_ci())
            fail_msg("qwen3next fixture missing: run scripts/fetch-fixtures.sh");
        gm_test_skipped("qwen3next/model-bf16.gguf");
        skip();
    }
    gm_gguf *g = NULL;
    gm_err err = {0};
    assert_int_equal(gm_gguf_open(&g, p, &err), 0);
    gm_model_desc m;
    assert_int_equal(gm_model_describe(g, &m, &err), 0);
    assert_int_equal(gm_model_kv_bytes(&m, 0, 16), 2 * 71680);
    gm_model_desc_free(&m);
    gm_gguf_close(g);
}

/* gpt-oss layers 0 and 2 keep at most the 16-token window; layer 1 keeps everything:
 * at 1000 tokens: 2 x 16 x 512 + 1000 x 512 bytes. */
static void test_sliding_window(void **state)
{
    (void)state;
    const char *p = gm_fixture_cached("gpt-oss/model-bf16.gguf");
    if (!p) {
        if (gm_test_in_ci())
            fail_msg("gpt-oss fixture missing: run scripts/fetch-fixtures.sh");
        gm_test_skipped("gpt-oss/model-bf16.gguf");
        skip();
    }
    gm_gguf *g = NULL;
    gm_err err = {0};
    assert_int_equal(gm_gguf_open(&g, p, &err), 0);
    gm_model_desc m;
    assert_int_equal(gm_model_describe(g, &m, &err), 0);
    assert_int_equal(gm_model_kv_bytes(&m, 1000, 16), 2 * 16 * 512 + 1000 * 512);
    /* 8-bit KV: 34 bytes per block of 32 elements (an f16 scale + 32 int8):
     * (2 x 16 + 1000) x 256 elements = 264192 = 8256 blocks -> 280704 bytes */
    assert_int_equal(gm_model_kv_bytes(&m, 1000, 8), 280704);
    gm_model_desc_free(&m);
    gm_gguf_close(g);
}

/* A vocabulary-only GGUF has no weights: described, but not runnable. */
static void test_vocab_only(void **state)
{
    (void)state;
    const char *p = gm_fixture_cached("tokenizers/ggml-vocab-llama-spm.gguf");
    if (!p) {
        if (gm_test_in_ci())
            fail_msg("tokenizer fixture missing: run scripts/fetch-fixtures.sh");
        gm_test_skipped("tokenizers/ggml-vocab-llama-spm.gguf");
        skip();
    }
    gm_gguf *g = NULL;
    gm_err err = {0};
    assert_int_equal(gm_gguf_open(&g, p, &err), 0);
    gm_model_desc m;
    assert_int_equal(gm_model_describe(g, &m, &err), 0);
    assert_false(m.runnable);
    assert_non_null(strstr(m.not_runnable, "no tensors"));
    assert_int_equal(m.n_moe_layers, 0);
    gm_model_desc_free(&m);
    gm_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_recurrent_state),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_vocab_only),
    };
    return gm_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
