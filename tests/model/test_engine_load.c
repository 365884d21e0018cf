/* The engine's load checks on files built field by field (tests/unit/gguf_builder): a small
 * qwen2moe model (a shared expert beside the routed ones) that loads and evaluates, and the same
 * model with one inconsistency the loader must refuse with a message instead of running past
 * its buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcntl.h>

#include "genmodel.h"
#include "gguf_builder.h"
#include "gguf/gguf.h"
#include "infer/engine.h"
#include "infer/recipe.h"
#include "model/model.h"
#include "testutil.h"

enum { E = 32, HEADS = 2, HD = 16, V = 16, N_EXP = 2, FF_EXP = 16, F32 = 0 };

typedef struct tiny_opts {
    uint32_t n_layer;
    uint32_t shexp_meta;       /* expert_shared_feed_forward_length (0: key absent) */
    uint32_t shexp_rows[2];    /* rows of each layer's shared expert */
    const char *rope_scaling;  /* rope.scaling.type with factor 4 (NULL: absent) */
    uint32_t nextn;            /* nextn_predict_layers: blocks counted but not written */
    const char *arch;          /* general.architecture (NULL: qwen2moe) */
    const char *extra;         /* a tensor of n_embd floats no qwen2moe binder takes (NULL: none) */
} tiny_opts;

/* The metadata key "<arch>.<suffix>" (a static buffer: use it before the next call). */
static const char *key(const tiny_opts *o, const char *suffix)
{
    static char buf[128];
    snprintf(buf, sizeof buf, "%s.%s", o->arch ? o->arch : "qwen2moe", suffix);
    return buf;
}

typedef struct tspec {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[3];
} tspec;

static uint32_t add(tspec *t, uint32_t n, const char *name, uint32_t n_dims, uint64_t a, uint64_t b,
                    uint64_t c)
{
    snprintf(t[n].name, sizeof t[n].name, "%s", name);
    t[n].n_dims = n_dims;
    t[n].ne[0] = a;
    t[n].ne[1] = b;
    t[n].ne[2] = c;
    return n + 1;
}

/* A qwen2moe file (or the same tensors under another architecture's name) of F32 zeros (the loader's checks do not look at values; evaluation gives
 * finite logits). */
static void write_tiny_qwen2moe(const char *path, const tiny_opts *o)
{
    tspec t[64];
    uint32_t n = 0;
    char nm[64];
    n = add(t, n, "token_embd.weight", 2, E, V, 1);
    n = add(t, n, "output_norm.weight", 1, E, 1, 1);
    n = add(t, n, "output.weight", 2, E, V, 1);
    if (o->extra)
        n = add(t, n, o->extra, 1, E, 1, 1);
    for (uint32_t l = 0; l < o->n_layer; l++) {
        const uint64_t ff = o->shexp_rows[l];
#define T(suffix, nd, a, b, c)                                                                     \
    (snprintf(nm, sizeof nm, "blk.%u.%s", l, suffix), n = add(t, n, nm, nd, a, b, c))
        T("attn_norm.weight", 1, E, 1, 1);
        T("attn_q.weight", 2, E, HEADS * HD, 1);
        T("attn_k.weight", 2, E, HD, 1);
        T("attn_v.weight", 2, E, HD, 1);
        T("attn_output.weight", 2, HEADS * HD, E, 1);
        T("ffn_norm.weight", 1, E, 1, 1);
        T("ffn_gate_inp.weight", 2, E, N_EXP, 1);
        T("ffn_gate_exps.weight", 3, E, FF_EXP, N_EXP);
        T("ffn_up_exps.weight", 3, E, FF_EXP, N_EXP);
        T("ffn_down_exps.weight", 3, FF_EXP, E, N_EXP);
        T("ffn_gate_shexp.weight", 2, E, ff, 1);
        T("ffn_up_shexp.weight", 2, E, ff, 1);
        T("ffn_down_shexp.weight", 2, ff, E, 1);
#undef T
    }
    gm_gb b;
    gm_gb_init(&b);
    const uint32_t n_kv = 11 + (o->shexp_meta ? 1 : 0) + (o->rope_scaling ? 2 : 0) + (o->nextn ? 1 : 0);
    gm_gb_header(&b, 3, n, n_kv);
    gm_gb_kv_str(&b, "general.architecture", o->arch ? o->arch : "qwen2moe");
    gm_gb_kv_u32(&b, key(o, "block_count"), o->n_layer + o->nextn);
    if (o->nextn)
        gm_gb_kv_u32(&b, key(o, "nextn_predict_layers"), o->nextn);
    gm_gb_kv_u32(&b, key(o, "context_length"), 64);
    gm_gb_kv_u32(&b, key(o, "embedding_length"), E);
    gm_gb_kv_u32(&b, key(o, "feed_forward_length"), FF_EXP);
    gm_gb_kv_u32(&b, key(o, "attention.head_count"), HEADS);
    gm_gb_kv_u32(&b, key(o, "attention.head_count_kv"), 1);
    gm_gb_kv_u32(&b, key(o, "expert_count"), N_EXP);
    gm_gb_kv_u32(&b, key(o, "expert_used_count"), 1);
    gm_gb_kv_u32(&b, key(o, "expert_feed_forward_length"), FF_EXP);
    gm_gb_key(&b, key(o, "attention.layer_norm_rms_epsilon"), GM_GB_F32);
    gm_gb_f32(&b, 1e-6f);
    if (o->shexp_meta)
        gm_gb_kv_u32(&b, key(o, "expert_shared_feed_forward_length"), o->shexp_meta);
    if (o->rope_scaling) {
        gm_gb_kv_str(&b, key(o, "rope.scaling.type"), o->rope_scaling);
        gm_gb_key(&b, key(o, "rope.scaling.factor"), GM_GB_F32);
        gm_gb_f32(&b, 4.0f);
    }
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        gm_gb_tensor(&b, t[i].name, t[i].n_dims, t[i].ne, F32, off);
        off += (t[i].ne[0] * t[i].ne[1] * t[i].ne[2] * 4 + 31) / 32 * 32;
    }
    gm_gb_align(&b, 32);
    gm_gb_zeros(&b, off);
    assert_int_equal(gm_gb_write(&b, path), 0);
    gm_gb_free(&b);
}

#define TMP_TEMPLATE "/tmp/gmlx-test-engine-load-XXXXXX"

/* A fresh empty file for a test's model: path (sizeof TMP_TEMPLATE bytes) gets its name. */
static void tmp_file(char *path)
{
    memcpy(path, TMP_TEMPLATE, sizeof TMP_TEMPLATE);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

static int load(const char *path, gm_engine **e, gm_err *err)
{
    gm_engine_opts o = {.n_threads = 1, .max_chunk = 4, .placement = GM_PLACE_CPU};
    return gm_engine_load(e, path, &o, err);
}

static void test_tiny_qwen2moe_runs(void **state)
{
    (void)state;
    char path[sizeof TMP_TEMPLATE];
    tmp_file(path);
    tiny_opts o = {.n_layer = 2, .shexp_meta = 24, .shexp_rows = {24, 24}};
    write_tiny_qwen2moe(path, &o);
    gm_engine *e = NULL;
    gm_err err = {0};
    if (load(path, &e, &err) != 0)
        fail_msg("load: %s", err.msg);
    gm_fwd *s = NULL;
    assert_int_equal(gm_fwd_create(&s, e, 8, GM_KV_F32, &err), 0);
    const int32_t toks[3] = {1, 2, 3};
    float logits[3 * V];
    assert_int_equal(gm_fwd_eval(s, toks, 3, logits, true, &err), 0);
    for (int i = 0; i < 3 * V; i++)
        assert_true(logits[i] == 0.0f); /* zero weights: zero logits */
    gm_fwd_free(s);
    gm_engine_free(e);
    unlink(path);
}

/* A shared expert wider than the model's declared width (or than the first layer's, when the
 * key is absent) would overflow the session's scratch: refused at load. */
static void test_shared_expert_width_mismatch(void **state)
{
    (void)state;
    static const tiny_opts cases[] = {
        {.n_layer = 1, .shexp_meta = 16, .shexp_rows = {64, 0}}, /* wider than declared */
        {.n_layer = 2, .shexp_meta = 0, .shexp_rows = {16, 64}},  /* layer 1 wider than layer 0 */
        {.n_layer = 2, .shexp_meta = 24, .shexp_rows = {24, 16}}, /* narrower: refused as well */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[sizeof TMP_TEMPLATE];
        tmp_file(path);
        write_tiny_qwen2moe(path, &cases[i]);
        gm_engine *e = NULL;
        gm_err err = {0};
        assert_int_equal(load(path, &e, &err), GM_EFORMAT);
        assert_null(e);
        assert_non_null(strstr(err.msg, "shared expert of layer"));
        unlink(path);
    }
}

/* RoPE scaling: linear and yarn load (their rates: tests/unit/test_rope.c); a type gmlx does not
 * apply is refused at load, never silently ignored. */
static void test_rope_scaling(void **state)
{
    (void)state;
    static const char *types[] = {"linear", "yarn", "longrope"};
    for (size_t i = 0; i < 3; i++) {
        char path[sizeof TMP_TEMPLATE];
        tmp_file(path);
        tiny_opts o = {.n_layer = 1, .shexp_meta = 16, .shexp_rows = {16, 0}, .rope_scaling = types[i]};
        write_tiny_qwen2moe(path, &o);
        gm_engine *e = NULL;
        gm_err err = {0};
        int rc = load(path, &e, &err);
        if (i < 2) {
            if (rc)
                fail_msg("%s: %s", types[i], err.msg);
            gm_engine_free(e);
        } else {
            assert_int_equal(rc, GM_EUNSUPPORTED);
            assert_null(e);
            assert_non_null(strstr(err.msg, "rope scaling 'longrope' is not supported"));
        }
        unlink(path);
    }
}

/* MTP drafter blocks (nextn_predict_layers, counted in block_count) are not part of the forward
 * pass: a file whose drafter block has none of a layer's tensors loads and runs (a forward pass
 * over it would find its tensors missing); one whose blocks are all drafters is refused. */
static void test_mtp_blocks_skipped(void **state)
{
    (void)state;
    char path[sizeof TMP_TEMPLATE];
    tmp_file(path);
    tiny_opts o = {.n_layer = 2, .shexp_meta = 16, .shexp_rows = {16, 16}, .nextn = 1};
    write_tiny_qwen2moe(path, &o);
    gm_engine *e = NULL;
    gm_err err = {0};
    if (load(path, &e, &err) != 0)
        fail_msg("load: %s", err.msg);
    gm_fwd *s = NULL;
    assert_int_equal(gm_fwd_create(&s, e, 8, GM_KV_F32, &err), 0);
    const int32_t toks[2] = {1, 2};
    float logits[2 * V];
    assert_int_equal(gm_fwd_eval(s, toks, 2, logits, true, &err), 0);
    gm_fwd_free(s);
    gm_engine_free(e);

    tiny_opts all = {.n_layer = 0, .shexp_meta = 16, .nextn = 1};
    write_tiny_qwen2moe(path, &all);
    e = NULL;
    gm_err_clear(&err);
    assert_int_not_equal(load(path, &e, &err), 0);
    assert_null(e);
    unlink(path);
}

/* A family gmlx does not run (llama.cpp's bailingmoe3, which it has no table entry for): `gmlx validate` calls it
 * not runnable and the engine refuses it at load, both with the families it does run. */
static void test_family_not_run(void **state)
{
    (void)state;
    char path[sizeof TMP_TEMPLATE];
    tmp_file(path);
    tiny_opts o = {.n_layer = 1, .shexp_meta = 16, .shexp_rows = {16, 0}, .arch = "bailingmoe3"};
    write_tiny_qwen2moe(path, &o);
    gm_gguf *g = NULL;
    gm_err err = {0};
    assert_int_equal(gm_gguf_open(&g, path, &err), 0);
    gm_model_desc m;
    assert_int_equal(gm_model_describe(g, &m, &err), 0);
    assert_false(m.runnable);
    print_message("validate: %s\n", m.not_runnable);
    assert_non_null(strstr(m.not_runnable, "gmlx runs "));
    gm_model_desc_free(&m);
    gm_gguf_close(g);
    gm_engine *e = NULL;
    assert_int_equal(load(path, &e, &err), GM_EUNSUPPORTED);
    assert_null(e);
    print_message("load: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "architecture 'bailingmoe3' cannot run yet (gmlx runs "));
    unlink(path);
}

/* A file with a tensor its family's recipe does not bind (a variant gmlx does not run: an extra
 * norm in a block, an unknown table) is refused at load, the tensor named, never run without
 * it. */
static void test_unbound_tensor_refused(void **state)
{
    (void)state;
    static const char *extras[] = {"blk.0.attn_post_norm.weight", "per_layer_token_embd.weight"};
    for (size_t i = 0; i < 2; i++) {
        char path[sizeof TMP_TEMPLATE];
        tmp_file(path);
        tiny_opts o = {.n_layer = 1, .shexp_meta = 16, .shexp_rows = {16, 0}, .extra = extras[i]};
        write_tiny_qwen2moe(path, &o);
        gm_engine *e = NULL;
        gm_err err = {0};
        assert_int_equal(load(path, &e, &err), GM_EUNSUPPORTED);
        assert_null(e);
        print_message("load: %s\n", err.msg);
        char want[128];
        snprintf(want, sizeof want, "tensor '%s' is not used by gmlx's qwen2moe model", extras[i]);
        assert_non_null(strstr(err.msg, want));
        unlink(path);
    }
}

/* A DeepSeek-V4 file whose hash-routing table names an expert the layer does not have is refused
 * at load, the tensor and the token named, never routed out of bounds. */
static void test_deepseek4_bad_hash_table(void **state)
{
    (void)state;
    static const char *const shape[] = {"--expert-type", "F32", "--dense-type", "F32", NULL};
    char model[4096];
    gm_test_gen_arch(model, sizeof model, "bad-hash-deepseek4", "deepseek4", "3", shape);
    gm_gguf *g = NULL;
    gm_err err = {0};
    assert_int_equal(gm_gguf_open(&g, model, &err), 0);
    const gm_gguf_tensor *t = gm_gguf_find_tensor(g, "blk.0.ffn_gate_tid2eid.weight");
    assert_non_null(t);
    const uint64_t at = t->file_offset + 5 * sizeof(int32_t); /* token 2's second expert (top-2) */
    gm_gguf_close(g);
    const int32_t bad = 9999;
    int fd = open(model, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, &bad, sizeof bad, (off_t)at), (ssize_t)sizeof bad);
    close(fd);
    gm_engine *e = NULL;
    assert_int_equal(load(model, &e, &err), GM_EFORMAT);
    assert_null(e);
    print_message("load: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "'blk.0.ffn_gate_tid2eid.weight' routes token 2 to expert 9999 of 8"));
    unlink(model);
}

/* The registry (model/families.h): every family the model table lists has its recipe, under its
 * own name. */
static void test_registry_recipes(void **state)
{
    (void)state;
    assert_true(gm_arch_count() >= 12);
    for (int i = 0; i < gm_arch_count(); i++) {
        const gm_arch_info *a = gm_arch_at(i);
        const gm_recipe *r = gm_recipe_find(a->name);
        if (!r)
            fail_msg("family %s has no recipe", a->name);
        assert_string_equal(r->arch, a->name);
        assert_true(a->runnable);
    }
    assert_null(gm_recipe_find("bailingmoe3"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_qwen2moe_runs),
        cmocka_unit_test(test_deepseek4_bad_hash_table),
        cmocka_unit_test(test_shared_expert_width_mismatch),
        cmocka_unit_test(test_rope_scaling),
        cmocka_unit_test(test_mtp_blocks_skipped),
        cmocka_unit_test(test_family_not_run),
        cmocka_unit_test(test_unbound_tensor_refused),
        cmocka_unit_test(test_registry_recipes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
