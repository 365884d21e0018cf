/* The streaming plan on real model shapes. Each shape is written as a sparse GGUF (header only;
 * the tensor data is a hole) and planned on what-if machines of 24, 64 and 128 GiB. Every
 * expected number is worked out by hand in the comments from the shapes and the formulas of
 * docs/streaming.md:
 *   floor = 1 GiB + RAM/50 (at most 8 GiB), overhead = 512 MiB + RAM/100,
 *   ceiling = RAM - floor - overhead,
 *   KV room = KV cache (2-byte elements at 32768 tokens) + 8192-token chunk x 5/4 x 4 bytes x
 *             activation elements per token + 512 MiB pool,
 *   arena = ceiling - every-token - KV room (capped at experts, at half when the experts fit).
 * Row bytes: Q8_0 = n/32 x 34, Q4_K = n/256 x 144, MXFP4 = n/32 x 17, F16 = 2n, F32 = 4n.
 * RAM constants: 24 GiB: floor 1073741824 + 515396075 = 1589137899, overhead 536870912 +
 * 257698037 = 794568949, ceiling 25769803776 - 2383706848 = 23386096928.
 * 64 GiB: floor 2448131358, overhead 1224065679, ceiling 65047279699.
 * 128 GiB: floor 3822520893, overhead 1911260446, ceiling 131705172133.
 * 121 GiB: floor 3672197038, overhead 1836098519, ceiling 124414465147. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ggufw.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "plan/plan.h"
#include "testutil.h"

#define GIB (1ull << 30)

static gm_ggufw *W;
static gm_err E;

static void add(const char *name, uint32_t type, uint32_t nd, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t ne[3] = {a, b, c};
    if (gm_ggufw_add_tensor(W, name, type, nd, ne, &E) != 0)
        fail_msg("add_tensor %s: %s", name, E.msg);
}

static void addl(int l, const char *suffix, uint32_t type, uint32_t nd, uint64_t a, uint64_t b,
                 uint64_t c)
{
    char name[128];
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
    add(name, type, nd, a, b, c);
}

static void key_u32(const char *arch, const char *k, uint32_t v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    assert_int_equal(gm_ggufw_set_u32(W, key, v, &E), 0);
}

static void begin(const char *path, const char *arch)
{
    memset(&E, 0, sizeof E);
    assert_int_equal(gm_ggufw_create(&W, path, 0, &E), 0);
    assert_int_equal(gm_ggufw_set_str(W, "general.architecture", arch, &E), 0);
}

static void finish(void)
{
    if (gm_ggufw_begin_data(W, true, &E) != 0 || gm_ggufw_finish(W, &E) != 0)
        fail_msg("write: %s", E.msg);
    gm_ggufw_destroy(W);
    W = NULL;
}

/* Qwen3-235B-A22B (qwen3moe): 94 layers, hidden 4096, 64 q / 4 kv heads of 128, 128 experts,
 * top-8, expert FFN 1536; experts Q4_K, other matrices `dense`, norms and routers F32. */
static void write_qwen3_235b(const char *path, uint32_t dense)
{
    begin(path, "qwen3moe");
    const char *a = "qwen3moe";
    key_u32(a, "block_count", 94);
    key_u32(a, "embedding_length", 4096);
    key_u32(a, "feed_forward_length", 12288);
    key_u32(a, "attention.head_count", 64);
    key_u32(a, "attention.head_count_kv", 4);
    key_u32(a, "attention.key_length", 128);
    key_u32(a, "attention.value_length", 128);
    key_u32(a, "expert_count", 128);
    key_u32(a, "expert_used_count", 8);
    key_u32(a, "expert_feed_forward_length", 1536);
    add("token_embd.weight", dense, 2, 4096, 151936, 1);
    add("output_norm.weight", GM_TYPE_F32, 1, 4096, 1, 1);
    add("output.weight", dense, 2, 4096, 151936, 1);
    for (int l = 0; l < 94; l++) {
        addl(l, "attn_norm.weight", GM_TYPE_F32, 1, 4096, 1, 1);
        addl(l, "attn_q.weight", dense, 2, 4096, 8192, 1);
        addl(l, "attn_k.weight", dense, 2, 4096, 512, 1);
        addl(l, "attn_v.weight", dense, 2, 4096, 512, 1);
        addl(l, "attn_output.weight", dense, 2, 8192, 4096, 1);
        addl(l, "attn_q_norm.weight", GM_TYPE_F32, 1, 128, 1, 1);
        addl(l, "attn_k_norm.weight", GM_TYPE_F32, 1, 128, 1, 1);
        addl(l, "ffn_norm.weight", GM_TYPE_F32, 1, 4096, 1, 1);
        addl(l, "ffn_gate_inp.weight", GM_TYPE_F32, 2, 4096, 128, 1);
        addl(l, "ffn_gate_exps.weight", GM_TYPE_Q4_K, 3, 4096, 1536, 128);
        addl(l, "ffn_up_exps.weight", GM_TYPE_Q4_K, 3, 4096, 1536, 128);
        addl(l, "ffn_down_exps.weight", GM_TYPE_Q4_K, 3, 1536, 4096, 128);
    }
    finish();
}

/* Kimi-K2 (deepseek2): 61 layers, layer 0 dense (FFN 18432), hidden 7168, 64 heads, MLA
 * (q_lora 1536, kv_lora 512, key 192 = 128 nope + 64 rope, value 128), 384 experts, top-8,
 * expert FFN 2048, one shared expert; experts Q4_K, other matrices `dense`. */
static void write_kimi_k2(const char *path, uint32_t dense)
{
    begin(path, "deepseek2");
    const char *a = "deepseek2";
    key_u32(a, "block_count", 61);
    key_u32(a, "embedding_length", 7168);
    key_u32(a, "feed_forward_length", 18432);
    key_u32(a, "attention.head_count", 64);
    key_u32(a, "attention.head_count_kv", 1);
    key_u32(a, "attention.key_length", 192);
    key_u32(a, "attention.value_length", 128);
    key_u32(a, "attention.q_lora_rank", 1536);
    key_u32(a, "attention.kv_lora_rank", 512);
    key_u32(a, "rope.dimension_count", 64);
    key_u32(a, "expert_count", 384);
    key_u32(a, "expert_used_count", 8);
    key_u32(a, "expert_shared_count", 1);
    key_u32(a, "expert_feed_forward_length", 2048);
    key_u32(a, "leading_dense_block_count", 1);
    add("token_embd.weight", dense, 2, 7168, 163840, 1);
    add("output_norm.weight", GM_TYPE_F32, 1, 7168, 1, 1);
    add("output.weight", dense, 2, 7168, 163840, 1);
    for (int l = 0; l < 61; l++) {
        addl(l, "attn_norm.weight", GM_TYPE_F32, 1, 7168, 1, 1);
        addl(l, "attn_q_a.weight", dense, 2, 7168, 1536, 1);
        addl(l, "attn_q_a_norm.weight", GM_TYPE_F32, 1, 1536, 1, 1);
        addl(l, "attn_q_b.weight", dense, 2, 1536, 12288, 1);
        addl(l, "attn_kv_a_mqa.weight", dense, 2, 7168, 576, 1);
        addl(l, "attn_kv_a_norm.weight", GM_TYPE_F32, 1, 512, 1, 1);
        addl(l, "attn_k_b.weight", dense, 3, 128, 512, 64);
        addl(l, "attn_v_b.weight", dense, 3, 512, 128, 64);
        addl(l, "attn_output.weight", dense, 2, 8192, 7168, 1);
        addl(l, "ffn_norm.weight", GM_TYPE_F32, 1, 7168, 1, 1);
        if (l == 0) {
            addl(l, "ffn_gate.weight", dense, 2, 7168, 18432, 1);
            addl(l, "ffn_up.weight", dense, 2, 7168, 18432, 1);
            addl(l, "ffn_down.weight", dense, 2, 18432, 7168, 1);
            continue;
        }
        addl(l, "ffn_gate_inp.weight", GM_TYPE_F32, 2, 7168, 384, 1);
        addl(l, "exp_probs_b.bias", GM_TYPE_F32, 1, 384, 1, 1);
        addl(l, "ffn_gate_exps.weight", GM_TYPE_Q4_K, 3, 7168, 2048, 384);
        addl(l, "ffn_up_exps.weight", GM_TYPE_Q4_K, 3, 7168, 2048, 384);
        addl(l, "ffn_down_exps.weight", GM_TYPE_Q4_K, 3, 2048, 7168, 384);
        addl(l, "ffn_gate_shexp.weight", dense, 2, 7168, 2048, 1);
        addl(l, "ffn_up_shexp.weight", dense, 2, 7168, 2048, 1);
        addl(l, "ffn_down_shexp.weight", dense, 2, 2048, 7168, 1);
    }
    finish();
}

/* gpt-oss-120b: 36 layers, hidden 2880, 64 q / 8 kv heads of 64, sliding window 128 on even
 * layers, 128 experts, top-4, expert FFN 2880 with biases; experts MXFP4, matrices Q8_0. */
static void write_gpt_oss_120b(const char *path)
{
    begin(path, "gpt-oss");
    const char *a = "gpt-oss";
    key_u32(a, "block_count", 36);
    key_u32(a, "embedding_length", 2880);
    key_u32(a, "feed_forward_length", 2880);
    key_u32(a, "attention.head_count", 64);
    key_u32(a, "attention.head_count_kv", 8);
    key_u32(a, "attention.key_length", 64);
    key_u32(a, "attention.value_length", 64);
    key_u32(a, "attention.sliding_window", 128);
    key_u32(a, "expert_count", 128);
    key_u32(a, "expert_used_count", 4);
    key_u32(a, "expert_feed_forward_length", 2880);
    const uint32_t q8 = GM_TYPE_Q8_0, f32 = GM_TYPE_F32, fp4 = GM_TYPE_MXFP4;
    add("token_embd.weight", q8, 2, 2880, 201088, 1);
    add("output_norm.weight", f32, 1, 2880, 1, 1);
    add("output.weight", q8, 2, 2880, 201088, 1);
    for (int l = 0; l < 36; l++) {
        addl(l, "attn_norm.weight", f32, 1, 2880, 1, 1);
        addl(l, "attn_q.weight", q8, 2, 2880, 4096, 1);
        addl(l, "attn_q.bias", f32, 1, 4096, 1, 1);
        addl(l, "attn_k.weight", q8, 2, 2880, 512, 1);
        addl(l, "attn_k.bias", f32, 1, 512, 1, 1);
        addl(l, "attn_v.weight", q8, 2, 2880, 512, 1);
        addl(l, "attn_v.bias", f32, 1, 512, 1, 1);
        addl(l, "attn_output.weight", q8, 2, 4096, 2880, 1);
        addl(l, "attn_output.bias", f32, 1, 2880, 1, 1);
        addl(l, "attn_sinks.weight", f32, 1, 64, 1, 1);
        addl(l, "post_attention_norm.weight", f32, 1, 2880, 1, 1);
        addl(l, "ffn_gate_inp.weight", f32, 2, 2880, 128, 1);
        addl(l, "ffn_gate_inp.bias", f32, 1, 128, 1, 1);
        addl(l, "ffn_gate_exps.weight", fp4, 3, 2880, 2880, 128);
        addl(l, "ffn_gate_exps.bias", f32, 2, 2880, 128, 1);
        addl(l, "ffn_up_exps.weight", fp4, 3, 2880, 2880, 128);
        addl(l, "ffn_up_exps.bias", f32, 2, 2880, 128, 1);
        addl(l, "ffn_down_exps.weight", fp4, 3, 2880, 2880, 128);
        addl(l, "ffn_down_exps.bias", f32, 2, 2880, 128, 1);
    }
    finish();
}

/* GLM-4.5-Air (glm4moe): 46 layers + 1 MTP layer (block_count 47, nextn_predict_layers 1),
 * hidden 4096, 96 q / 8 kv heads of 128, layer 0 dense (FFN 10944), 128 experts, top-8, expert
 * FFN 1408 (not a multiple of 256, so the experts are Q8_0), one shared expert. */
static void write_glm_air(const char *path)
{
    begin(path, "glm4moe");
    const char *a = "glm4moe";
    key_u32(a, "block_count", 47);
    key_u32(a, "nextn_predict_layers", 1);
    key_u32(a, "embedding_length", 4096);
    key_u32(a, "feed_forward_length", 10944);
    key_u32(a, "attention.head_count", 96);
    key_u32(a, "attention.head_count_kv", 8);
    key_u32(a, "attention.key_length", 128);
    key_u32(a, "attention.value_length", 128);
    key_u32(a, "expert_count", 128);
    key_u32(a, "expert_used_count", 8);
    key_u32(a, "expert_shared_count", 1);
    key_u32(a, "expert_feed_forward_length", 1408);
    key_u32(a, "leading_dense_block_count", 1);
    const uint32_t q8 = GM_TYPE_Q8_0, f32 = GM_TYPE_F32;
    add("token_embd.weight", q8, 2, 4096, 151552, 1);
    add("output_norm.weight", f32, 1, 4096, 1, 1);
    add("output.weight", q8, 2, 4096, 151552, 1);
    for (int l = 0; l < 47; l++) {
        addl(l, "attn_norm.weight", f32, 1, 4096, 1, 1);
        addl(l, "attn_q.weight", q8, 2, 4096, 12288, 1);
        addl(l, "attn_q.bias", f32, 1, 12288, 1, 1);
        addl(l, "attn_k.weight", q8, 2, 4096, 1024, 1);
        addl(l, "attn_k.bias", f32, 1, 1024, 1, 1);
        addl(l, "attn_v.weight", q8, 2, 4096, 1024, 1);
        addl(l, "attn_v.bias", f32, 1, 1024, 1, 1);
        addl(l, "attn_output.weight", q8, 2, 12288, 4096, 1);
        addl(l, "post_attention_norm.weight", f32, 1, 4096, 1, 1);
        if (l == 0) {
            addl(l, "ffn_gate.weight", q8, 2, 4096, 10944, 1);
            addl(l, "ffn_up.weight", q8, 2, 4096, 10944, 1);
            addl(l, "ffn_down.weight", q8, 2, 10944, 4096, 1);
            continue;
        }
        addl(l, "ffn_gate_inp.weight", f32, 2, 4096, 128, 1);
        addl(l, "exp_probs_b.bias", f32, 1, 128, 1, 1);
        addl(l, "ffn_gate_exps.weight", q8, 3, 4096, 1408, 128);
        addl(l, "ffn_up_exps.weight", q8, 3, 4096, 1408, 128);
        addl(l, "ffn_down_exps.weight", q8, 3, 1408, 4096, 128);
        addl(l, "ffn_gate_shexp.weight", q8, 2, 4096, 1408, 1);
        addl(l, "ffn_up_shexp.weight", q8, 2, 4096, 1408, 1);
        addl(l, "ffn_down_shexp.weight", q8, 2, 1408, 4096, 1);
        if (l == 46) {
            addl(l, "nextn.eh_proj.weight", q8, 2, 8192, 4096, 1);
            addl(l, "nextn.enorm.weight", f32, 1, 4096, 1, 1);
            addl(l, "nextn.hnorm.weight", f32, 1, 4096, 1, 1);
            addl(l, "nextn.shared_head_norm.weight", f32, 1, 4096, 1, 1);
        }
    }
    finish();
}

typedef struct planned {
    gm_gguf *g;
    gm_model_desc m;
    gm_plan p;
} planned;

static const char *tmp_path(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", gm_test_tmpdir(), name);
    return buf;
}

/* Plans path on a what-if machine of ram_gib (idle: all of it free) with default options. */
static void plan_file(planned *out, const char *path, double ram_gib, const gm_plan_opts *opts)
{
    gm_err err = {0};
    assert_int_equal(gm_gguf_open(&out->g, path, &err), 0);
    assert_int_equal(gm_model_describe(out->g, &out->m, &err), 0);
    gm_sysinfo sys;
    char ram[32];
    snprintf(ram, sizeof ram, "%g", ram_gib);
    assert_int_equal(gm_sysinfo_probe_at(&sys, "/nonexistent", ram, NULL, &err), 0);
    gm_plan_opts o;
    if (opts) {
        o = *opts;
    } else {
        memset(&o, 0, sizeof o);
        o.kv_ctx = 32768;
        o.kv_bits = 16;
        o.prefill_step = 8192;
    }
    gm_plan_compute(&out->m, &sys, &o, &out->p);
}

static void unplan(planned *x)
{
    gm_model_desc_free(&x->m);
    gm_gguf_close(x->g);
}

/* Qwen3-235B, Q4_K experts, Q8_0 matrices.
 * One expert: gate 1536 rows x 4096/256x144 = 1536 x 2304 = 3538944, up the same, down 4096 rows
 * x 1536/256x144 = 4096 x 864 = 3538944: 10616832 bytes. Experts: 94 x 128 x 10616832 =
 * 127741722624. Every-token: embeddings 151936 x 4096/32x34 = 151936 x 4352 = 661225472; output
 * the same + norm 16384 = 661241856; per layer attention: q 8192 x 4352 = 35651584, k and v 512 x
 * 4352 = 2228224 each, o 4096 x 8192/32x34 = 4096 x 8704 = 35651584, norms 16384 + 512 + 512 =
 * 17408: in all 35651584 + 2 x 2228224 + 35651584 + 17408 = 75777024, x 94 =
 * 7123040256; ffn norm 16384 + router 4096 x 128 x 4 = 2097152: 2113536 x 94 = 198672384.
 * Every-token total 661225472 + 661241856 + 7123040256 + 198672384 = 8644179968.
 * KV room: cache 94 x 4 x (128+128) x 2 bytes x 32768 = 6308233216; activations per token:
 * 2x4096 + 64x128 + 4x256 + 64x128 + 128 + max(8x3x1536, 3x12288) = 62592 elements ->
 * 62592 x 4 x 5/4 = 312960 bytes x 8192 = 2563768320; pool 536870912: 9408872448.
 * Cold token 94 x 8 x 10616832 = 7983857664. Ring 2 x (3 x 452984832) = 2717908992.
 * 24 GiB: arena 23386096928 - 8644179968 - 9408872448 = 5333044512; per layer 5333044512/94 =
 * 56734516 -> 5 slots of 10616832 < 8 a token uses: streams, but no decode arena.
 * 64 GiB: arena 65047279699 - 18053052416 = 46994227283 (36.8% of the experts); per layer
 * 499938587 -> 47 slots: streams.
 * 128 GiB: arena 131705172133 - 18053052416 = 113652119717 (89%): 113 slots: streams. */
static void test_qwen3_235b(void **state)
{
    (void)state;
    const char *path = tmp_path("qwen3-235b.gguf");
    write_qwen3_235b(path, GM_TYPE_Q8_0);
    planned x;
    plan_file(&x, path, 24, NULL);
    const gm_plan *p = &x.p;
    assert_int_equal(p->expert_bytes, 127741722624ull);
    assert_int_equal(p->every_token_bytes, 8644179968ull);
    assert_int_equal(p->group_bytes[GM_TG_ATTENTION], 7123040256ull);
    assert_int_equal(p->group_bytes[GM_TG_DENSE_FFN_ROUTERS], 198672384ull);
    assert_int_equal(p->group_bytes[GM_TG_EMBEDDINGS], 661225472ull);
    assert_int_equal(p->group_bytes[GM_TG_OUTPUT], 661241856ull);
    assert_int_equal(p->n_moe_layers, 94);
    assert_int_equal(p->n_experts, 128);
    assert_int_equal(p->n_experts_used, 8);
    assert_int_equal(p->host_floor_bytes, 1589137899ull);
    assert_int_equal(p->host_overhead_bytes, 794568949ull);
    assert_int_equal(p->ceiling_bytes, 23386096928ull);
    assert_int_equal(p->kv_cache_bytes, 6308233216ull);
    assert_int_equal(p->prefill_chunk_bytes, 2563768320ull);
    assert_int_equal(p->kv_room_bytes, 9408872448ull);
    assert_int_equal(p->cold_token_bytes, 7983857664ull);
    assert_int_equal(p->prefill_ring_bytes, 2717908992ull);
    assert_int_equal(p->arena_bytes, 5333044512ull);
    assert_int_equal(p->arena_min_slots, 5);
    assert_int_equal(p->verdict, GM_VERDICT_NO_ARENA);
    assert_int_equal(p->now, GM_NOW_NONE);
    assert_false(p->experts_in_memory_now);
    char line[512];
    gm_plan_verdict_line(p, line, sizeof line);
    assert_non_null(strstr(line, "=> streams, but no decode arena ("));
    assert_non_null(strstr(line, "); expect slow decode"));
    unplan(&x);

    plan_file(&x, path, 64, NULL);
    assert_int_equal(x.p.arena_bytes, 46994227283ull);
    assert_int_equal(x.p.arena_min_slots, 47);
    assert_int_equal(x.p.verdict, GM_VERDICT_STREAMS);
    assert_false(x.p.ring_fits_arena == false);
    unplan(&x);

    plan_file(&x, path, 128, NULL);
    assert_int_equal(x.p.arena_bytes, 113652119717ull);
    assert_int_equal(x.p.arena_min_slots, 113);
    assert_int_equal(x.p.verdict, GM_VERDICT_STREAMS);
    unplan(&x);

    /* GMLX_STREAM_KV_CTX=16384 halves the cache (3154116608) and --kv-bits 8 stores 34 bytes per
     * 32 elements: 94 x 1024 x 16384 elements / 32 x 34 = 1675624448. */
    gm_plan_opts o = {.kv_ctx = 16384, .kv_bits = 16, .prefill_step = 8192};
    plan_file(&x, path, 24, &o);
    assert_int_equal(x.p.kv_cache_bytes, 3154116608ull);
    unplan(&x);
    o.kv_bits = 8;
    plan_file(&x, path, 24, &o);
    assert_int_equal(x.p.kv_cache_bytes, 1675624448ull);
    unplan(&x);
    /* an arena override replaces the computed size */
    gm_plan_opts ov = {.kv_ctx = 32768, .kv_bits = 16, .prefill_step = 8192, .arena_override = true,
                       .arena_override_bytes = 10 * GIB};
    plan_file(&x, path, 24, &ov);
    assert_int_equal(x.p.arena_bytes, 10 * GIB);
    assert_true(x.p.arena_overridden);
    assert_int_equal(x.p.verdict, GM_VERDICT_STREAMS); /* 10 GiB / 94 = 114 MB: 10 slots */
    unplan(&x);
    /* An override past the experts' size is cut to what holds every expert: a slot holds each
     * stack's slice (3538944 bytes, 864 x 4096) in its length plus one 4096-byte unit for an
     * O_DIRECT read that starts mid-block: 3 x 3543040 = 10629120, x 128 x 94 = 127889571840
     * (more than the 127741722624 expert bytes, which held only 127 slots per layer). */
    ov.arena_override_bytes = 1000 * GIB;
    plan_file(&x, path, 24, &ov);
    assert_int_equal(x.p.arena_bytes, 127889571840ull);
    assert_int_equal(x.p.arena_min_slots, 128);
    unplan(&x);
    unlink(path);
}

/* Kimi-K2, Q4_K experts. One expert: gate and up 2048 rows x 7168/256x144 = 2048 x 4032 =
 * 8257536 each, down 7168 rows x 2048/256x144 = 7168 x 1152 = 8257536: 24772608. Experts: 60 MoE
 * layers x 384 x 24772608 = 570760888320. Cold token 60 x 8 x 24772608 = 11890851840.
 * With Q8_0 matrices, every-token = 12943001600 (embeddings 163840 x 7616 = 1247805440, output
 * 1247805440 + 28672, attention 61 x 107479040 = 6556221440, dense ffn and routers 1083578368,
 * shared experts 60 x 46792704 = 2807562240).
 * KV room: MLA cache 61 x (512 + 64) x 2 x 32768 = 2302672896; activations 2x7168 + 64x192 +
 * (512+64+1536) + 64x128 + 384 + max(8x3x2048, 3x18432) = 92608 elements -> 463040 bytes x
 * 8192 = 3793223680; + pool: 6632767488.
 * 24 GiB: arena 23386096928 - 12943001600 - 6632767488 = 3810327840 -> 60 layers x 2 slots:
 * no decode arena. 64 GiB: 65047279699 - 19575769088 = 45471510611 (8% of the experts), 30
 * slots per layer: streams. Ring 2 x 3 x 3170893824 = 19025362944 fits in that arena.
 * With F16 matrices every-token is 23776778240, and 23776778240 + 6632767488 = 30409545728
 * exceeds the 24 GiB ceiling by 7023448800: cannot stream. */
static void test_kimi_k2(void **state)
{
    (void)state;
    const char *path = tmp_path("kimi-k2.gguf");
    write_kimi_k2(path, GM_TYPE_Q8_0);
    planned x;
    plan_file(&x, path, 24, NULL);
    const gm_plan *p = &x.p;
    assert_string_equal(x.m.arch_name, "deepseek2");
    assert_int_equal(p->n_moe_layers, 60);
    assert_int_equal(p->n_experts, 384);
    assert_int_equal(p->expert_bytes, 570760888320ull);
    assert_int_equal(p->every_token_bytes, 12943001600ull);
    assert_int_equal(p->group_bytes[GM_TG_SHARED_EXPERTS], 2807562240ull);
    assert_int_equal(p->group_bytes[GM_TG_ATTENTION], 6556221440ull);
    assert_int_equal(p->kv_cache_bytes, 2302672896ull);
    assert_int_equal(p->kv_room_bytes, 6632767488ull);
    assert_int_equal(p->cold_token_bytes, 11890851840ull);
    assert_int_equal(p->arena_bytes, 3810327840ull);
    assert_int_equal(p->arena_min_slots, 2);
    assert_int_equal(p->verdict, GM_VERDICT_NO_ARENA);
    unplan(&x);

    plan_file(&x, path, 64, NULL);
    assert_int_equal(x.p.arena_bytes, 45471510611ull);
    assert_int_equal(x.p.arena_min_slots, 30);
    assert_int_equal(x.p.prefill_ring_bytes, 19025362944ull);
    assert_true(x.p.ring_fits_arena);
    assert_int_equal(x.p.verdict, GM_VERDICT_STREAMS);
    char line[512];
    gm_plan_verdict_line(&x.p, line, sizeof line);
    assert_string_equal(line, "=> streams with --stream-experts (server: stream: experts)");
    unplan(&x);
    unlink(path);

    write_kimi_k2(path, GM_TYPE_F16);
    plan_file(&x, path, 24, NULL);
    assert_int_equal(x.p.every_token_bytes, 23776778240ull);
    assert_int_equal(x.p.arena_bytes, 0);
    assert_int_equal(x.p.verdict, GM_VERDICT_CANNOT_STREAM);
    gm_plan_verdict_line(&x.p, line, sizeof line);
    assert_string_equal(line, "=> cannot stream: every-token weights 23.8 GB + KV room 6.6 GB "
                              "exceed the 23.4 GB ceiling by 7.0 GB");
    unplan(&x);
    unlink(path);
}

/* gpt-oss-120b. One expert: 3 x 2880 rows x 2880/32x17 = 3 x 2880 x 1530 = 13219200; experts 36
 * x 128 x 13219200 = 60914073600; every-token 2460250368. KV: 18 full layers x 8 x 128 x 2 x
 * 32768 + 18 sliding layers x 128 tokens x 2048 = 1207959552 + 4718592 = 1212678144;
 * activations 2x2880 + 64x64 + 8x128 + 64x64 + 128 + max(4x3x2880, 3x2880) = 49664 -> 248320 x
 * 8192 = 2034237440; KV room 3783786496. Tensors 63374323968 bytes (+ the header).
 * 64 GiB: file + KV room > 65047279699, so it does not fit; arena = 65047279699 - 2460250368 -
 * 3783786496 = 58803242835 (97% of the experts): streams.
 * 128 GiB: 63374323968 + header + 3783786496 <= 131705172133: the whole file fits; arena at most
 * half the experts 30457036800; the memory free now (all of it) holds everything. */
static void test_gpt_oss_120b(void **state)
{
    (void)state;
    const char *path = tmp_path("gpt-oss-120b.gguf");
    write_gpt_oss_120b(path);
    planned x;
    plan_file(&x, path, 64, NULL);
    assert_int_equal(x.p.expert_bytes, 60914073600ull);
    assert_int_equal(x.p.every_token_bytes, 2460250368ull);
    assert_int_equal(x.m.tensor_bytes, 63374323968ull);
    assert_int_equal(x.p.kv_cache_bytes, 1212678144ull);
    assert_int_equal(x.p.kv_room_bytes, 3783786496ull);
    assert_int_equal(x.p.cold_token_bytes, 36ull * 4 * 13219200);
    assert_int_equal(x.p.n_experts_used, 4);
    assert_int_equal(x.p.arena_bytes, 58803242835ull);
    assert_int_equal(x.p.verdict, GM_VERDICT_STREAMS);
    unplan(&x);

    plan_file(&x, path, 128, NULL);
    assert_int_equal(x.p.verdict, GM_VERDICT_FITS);
    assert_int_equal(x.p.arena_bytes, 30457036800ull);
    assert_int_equal(x.p.now, GM_NOW_EXPERTS_STAY);
    assert_true(x.p.experts_in_memory_now);
    assert_false(x.p.auto_mtp_off_now);
    assert_false(x.p.tables_from_file_now);
    unplan(&x);
    unlink(path);
}

/* GLM-4.5-Air with its MTP layer. Experts of layers 1-45: 45 x 128 x one expert (3 x 1408 x
 * 4352... gate/up 1408 rows x 4096/32x34 = 1408 x 4352 = 6127616, down 4096 rows x 1408/32x34 =
 * 4096 x 1496 = 6127616: 18382848) = 105885204480; the MTP layer 46 holds 2525143552; every-token
 * 7717689856. KV: 46 attention layers (the MTP layer has no cache) x 8 x 256 x 2 x 32768 =
 * 6174015488; activations 2x4096 + 96x128 + 8x256 + 96x128 + 128 + max(8x3x1408, 3x10944) =
 * 68928 -> 344640 x 8192 = 2815426560; KV room 9526312960.
 * 121 GiB (ceiling 124414465147): every-token + experts + KV room = 123129207296 fits, the file
 * (116128037888 + header) + KV room = 125654350848+ does not: loads with its experts in memory.
 * The memory free now (an idle machine: the ceiling) holds everything but the 2.5 GB MTP drafter:
 * auto MTP is off. Arena: at most half the experts, 52942602240.
 * 128 GiB: the whole file fits, but with 100 GiB free now (room = 100 GiB - overhead =
 * 105462921954 < 123129207296) the experts stream. */
static void test_glm_air_mtp(void **state)
{
    (void)state;
    const char *path = tmp_path("glm-4.5-air.gguf");
    write_glm_air(path);
    planned x;
    plan_file(&x, path, 121, NULL);
    assert_int_equal(x.m.hp.n_nextn, 1);
    assert_int_equal(x.p.n_moe_layers, 45);
    assert_int_equal(x.p.expert_bytes, 105885204480ull);
    assert_int_equal(x.p.mtp_bytes, 2525143552ull);
    assert_int_equal(x.p.every_token_bytes, 7717689856ull);
    assert_int_equal(x.p.kv_room_bytes, 9526312960ull);
    assert_int_equal(x.p.ceiling_bytes, 124414465147ull);
    assert_int_equal(x.p.verdict, GM_VERDICT_EXPERTS_IN_MEMORY);
    assert_int_equal(x.p.now, GM_NOW_AUTO_MTP_OFF);
    assert_true(x.p.auto_mtp_off_now);
    assert_true(x.p.experts_in_memory_now);
    assert_int_equal(x.p.arena_bytes, 52942602240ull);
    char line[512];
    gm_plan_now_line(&x.p, line, sizeof line);
    assert_non_null(strstr(line, "=> with the memory free now, auto MTP is off: the experts stay in "
                                 "memory, and the 2.5 GB MTP drafter does not fit beside them"));
    unplan(&x);

    gm_err err = {0};
    assert_int_equal(gm_gguf_open(&x.g, path, &err), 0);
    assert_int_equal(gm_model_describe(x.g, &x.m, &err), 0);
    gm_sysinfo sys;
    assert_int_equal(gm_sysinfo_probe_at(&sys, "/nonexistent", "128", "100", &err), 0);
    gm_plan_opts o = {.kv_ctx = 32768, .kv_bits = 16, .prefill_step = 8192};
    gm_plan_compute(&x.m, &sys, &o, &x.p);
    assert_int_equal(x.p.verdict, GM_VERDICT_FITS);
    assert_int_equal(x.p.room_now_bytes, 105462921954ull);
    assert_int_equal(x.p.now, GM_NOW_EXPERTS_STREAM);
    assert_false(x.p.experts_in_memory_now);
    unplan(&x);
    unlink(path);
}

/* A lookup table (per-layer token embeddings) lets the experts stay when the memory free now
 * holds everything but the table. The tiny model's sizes come from the plan itself; what is
 * checked is which line each amount of free memory gives. */
static void test_lookup_tables(void **state)
{
    (void)state;
    const char *path = tmp_path("lookup.gguf");
    begin(path, "qwen3moe");
    key_u32("qwen3moe", "block_count", 2);
    key_u32("qwen3moe", "embedding_length", 256);
    key_u32("qwen3moe", "attention.head_count", 4);
    key_u32("qwen3moe", "attention.head_count_kv", 2);
    key_u32("qwen3moe", "expert_count", 8);
    key_u32("qwen3moe", "expert_used_count", 2);
    key_u32("qwen3moe", "expert_feed_forward_length", 256);
    add("token_embd.weight", GM_TYPE_Q8_0, 2, 256, 1000, 1);
    add("per_layer_token_embd.weight", GM_TYPE_F16, 2, 512, 400000, 1); /* 409.6 MB */
    for (int l = 0; l < 2; l++) {
        addl(l, "attn_q.weight", GM_TYPE_Q8_0, 2, 256, 256, 1);
        addl(l, "ffn_gate_inp.weight", GM_TYPE_F32, 2, 256, 8, 1);
        addl(l, "ffn_gate_exps.weight", GM_TYPE_Q8_0, 3, 256, 256, 8);
        addl(l, "ffn_up_exps.weight", GM_TYPE_Q8_0, 3, 256, 256, 8);
        addl(l, "ffn_down_exps.weight", GM_TYPE_Q8_0, 3, 256, 256, 8);
    }
    finish();
    planned x;
    plan_file(&x, path, 8, NULL);
    assert_int_equal(x.p.lookup_bytes, 512ull * 2 * 400000);
    assert_int_equal(x.m.tensors[1].cls, GM_TC_LOOKUP);
    assert_int_equal(x.p.verdict, GM_VERDICT_FITS);
    assert_int_equal(x.p.now, GM_NOW_EXPERTS_STAY);
    uint64_t core = x.p.every_token_bytes + x.p.expert_bytes + x.p.kv_room_bytes;
    uint64_t overhead = x.p.host_overhead_bytes;
    unplan(&x);

    /* free now = overhead + core + half the table: the table goes to disk */
    gm_err err = {0};
    char avail[64];
    snprintf(avail, sizeof avail, "%.6f", (double)(overhead + core + 409600000ull / 2) / GIB);
    assert_int_equal(gm_gguf_open(&x.g, path, &err), 0);
    assert_int_equal(gm_model_describe(x.g, &x.m, &err), 0);
    gm_sysinfo sys;
    assert_int_equal(gm_sysinfo_probe_at(&sys, "/nonexistent", "8", avail, &err), 0);
    gm_plan_opts o = {.kv_ctx = 32768, .kv_bits = 16, .prefill_step = 8192};
    gm_plan_compute(&x.m, &sys, &o, &x.p);
    assert_int_equal(x.p.now, GM_NOW_TABLES_OFFLOADED);
    assert_true(x.p.tables_from_file_now);
    assert_true(x.p.experts_in_memory_now);
    char line[512];
    gm_plan_now_line(&x.p, line, sizeof line);
    assert_non_null(strstr(line, "its tables are offloaded to disk (409.6 MB of lookup tables"));
    unplan(&x);
    unlink(path);
}

/* A dense model (no expert stacks) larger than the ceiling cannot stream. */
static void test_dense_model(void **state)
{
    (void)state;
    const char *path = tmp_path("dense.gguf");
    begin(path, "llama");
    key_u32("llama", "block_count", 1);
    key_u32("llama", "embedding_length", 8192);
    key_u32("llama", "attention.head_count", 64);
    add("token_embd.weight", GM_TYPE_F16, 2, 8192, 4000000, 1); /* 65.5 GB */
    finish();
    planned x;
    plan_file(&x, path, 24, NULL);
    assert_false(x.p.is_moe);
    assert_int_equal(x.p.verdict, GM_VERDICT_CANNOT_STREAM);
    char line[512];
    gm_plan_verdict_line(&x.p, line, sizeof line);
    assert_non_null(strstr(line, "a dense model has no experts to stream"));
    /* the whole file is what does not fit: 65.5 GB + KV room against the 23.4 GB ceiling */
    assert_non_null(strstr(line, "cannot stream: the file 65.5 GB + KV room "));
    assert_non_null(strstr(line, "exceed the 23.4 GB ceiling by "));
    unplan(&x);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_235b),   cmocka_unit_test(test_kimi_k2),
        cmocka_unit_test(test_gpt_oss_120b), cmocka_unit_test(test_glm_air_mtp),
        cmocka_unit_test(test_lookup_tables), cmocka_unit_test(test_dense_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
