/* The VRAM tier's engine side (infer/gpu.c and its calls in moe.c), the device attention's
 * (infer/gpu_attn.c and its calls in attn.c) and the device decode's (infer/gpu_decode.c) run
 * against a host stand-in for the device (host_cuda.c), on the trained Qwen3-MoE model (Q4_K
 * experts): where there is no GPU (CI), this checks where --gpu sends each expert and where its
 * rows land.
 *  - Every expert in the tier, the attention on the CPU (GMLX_GPU_ATTN=0): decode's logits are
 *    the CPU's within the bound test_engine sets for quantized files against llama.cpp (5% of the
 *    largest logit; the stand-in multiplies float activations where the CPU quantizes them to 8
 *    bits), top-1 agrees; one prefill chunk gives decode's logits bit for bit (each (expert,
 *    token) pair computed alone, added in the same order); with the experts
 *    streamed through the arena, decoded or in chunks, the logits equal the in-memory run's bit
 *    for bit.
 *  - A tier of 78 of the 96 experts: decode mixes the device's experts and the CPU's, promotes
 *    the used ones (uploads counted at exit), and stays within the same tolerance.
 *  - The decode's attention and output head on the device too (infer/gpu_attn.c): within the
 *    same bound, streamed == in-memory bit for bit; a prompt computed on the CPU whose rows are
 *    copied into the device's cache, then decoded on the device, is as close to the all-device
 *    run (a cache left without the prompt's rows is off by 19).
 *  - The whole decode token on the device (GMLX_GPU_DECODE): the same bound against the CPU and
 *    the layer-by-layer device run, streamed == in-memory, a prompt's rows copied up before it,
 *    its own rows in the host's cache for a chunk on the CPU after it; without room for its
 *    weights the load goes on layer by layer.
 * The stand-in's own arithmetic (a double-precision product of the decoded rows) is checked here
 * only through those logits; the device kernels' is test_cuda_emu's and test_cuda's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "genmodel.h"
#include "infer/engine.h"
#include "testutil.h"

#define MODEL "trained-qwen3moe/model-q4_k_m.gguf"
#define IDS "trained-qwen3moe/ref1.prompt.ids"

/* What of a decode token runs on the device besides its experts: nothing, its attention and output
 * head layer by layer, or the whole token (infer/gpu_decode.c). */
enum { EXPERTS = 0, ATTN = 1, WHOLE = 2 };

/* Whether a prompt's chunk may run whole on the device (GMLX_GPU_PROMPT): PROMPT_HOST not (the
 * chunks run layer by layer, through the host); PROMPT_LAST and PROMPT_ALL yes, the first eval
 * asking for its last position's logits only (the first eval's other rows are 0), as a prompt
 * does, or for every position's. */
enum { PROMPT_HOST, PROMPT_LAST, PROMPT_ALL };
static int prompt_mode = PROMPT_HOST;
/* The staging slots asked for (GMLX_GPU_STAGE; -1: the default). */
static int stage_slots = -1;
/* Whether a decode token may split with the CPU (GMLX_GPU_SPLIT; -1: the default, on). */
static int split_mode = -1;
/* The promotions a decode token may make (GMLX_GPU_UPLOADS; -1: the default). */
static int uploads_max = -1;
/* Whether the host's experts are page-locked (GMLX_GPU_PIN_HOST; -1: where staging slots are
 * asked for, so that the pin's span arithmetic runs; the stand-in's pin is a no-op) and whether
 * a staged pass's copies go through page-locked buffers (GMLX_GPU_BOUNCE; -1: the default). */
static int pin_host = -1, bounce_mode = -1;

/* The logits of every position (a first eval of `first` tokens, 0: none, then chunks of `chunk`),
 * the decode's attention on the device as level says, and the engine's [gpu] exit lines. */
static float *logits_of(const char *model, const int32_t *ids, uint32_t n, uint32_t first, uint32_t chunk, int gpu,
                        int level, double vram_gb, gm_placement placement, uint32_t *V, char *gpu_line,
                        size_t line_len)
{
    gm_tuning tune = *gm_test_tuning();
    tune.gpu_attn = level >= ATTN;
    tune.gpu_decode = level >= WHOLE;
    tune.gpu_prompt = prompt_mode != PROMPT_HOST;
    tune.gpu_stage = stage_slots;
    tune.gpu_split = split_mode;
    tune.gpu_uploads = uploads_max;
    tune.gpu_pin_host = pin_host < 0 ? stage_slots > 0 : pin_host;
    tune.gpu_bounce = bounce_mode;
    gm_engine_opts o = {.tuning = &tune, .n_threads = 2, .max_chunk = first > chunk ? first : chunk,
                        .placement = placement, .gpu = gpu, .vram_gb = vram_gb};
    gm_engine *e = NULL;
    gm_fwd *s = NULL;
    gm_err err = {0};
    if (gm_engine_load(&e, model, &o, &err) != 0 || gm_fwd_create(&s, e, n + 8, GM_KV_F32, &err) != 0)
        fail_msg("load %s: %s", model, err.msg);
    *V = gm_engine_n_vocab(e);
    float *out = malloc((size_t)n * *V * sizeof *out);
    assert_non_null(out);
    for (uint32_t at = 0; at < n;) {
        const uint32_t step = at == 0 && first ? first : chunk, m = n - at < step ? n - at : step;
        const bool last_only = prompt_mode == PROMPT_LAST && at == 0 && first;
        if (last_only)
            memset(out, 0, (size_t)(m - 1) * *V * sizeof *out);
        if (gm_fwd_eval(s, ids + at, m, out + (size_t)(last_only ? m - 1 : at) * *V, !last_only, &err) != 0)
            fail_msg("eval: %s", err.msg);
        at += m;
    }
    if (gpu_line) {
        gm_strbuf b = GM_STRBUF_INIT;
        gm_engine_print_gpu(e, &b);
        snprintf(gpu_line, line_len, "%s", b.data ? b.data : "");
        gm_strbuf_free(&b);
    }
    gm_fwd_free(s);
    gm_engine_free(e);
    return out;
}

/* The largest |a - b| and |b| over n rows of V; the positions whose top-1 agree among those where
 * b's best two logits differ by more than twice that position's largest difference (*decisive). */
static double compare(const float *a, const float *b, uint32_t n, uint32_t V, double *max_b, uint32_t *decisive,
                      uint32_t *agree)
{
    double worst = 0;
    *max_b = 0;
    *decisive = *agree = 0;
    for (uint32_t t = 0; t < n; t++) {
        const float *ra = a + (size_t)t * V, *rb = b + (size_t)t * V;
        double d = 0;
        uint32_t ia = 0, ib = 0, ib2 = 1;
        for (uint32_t i = 0; i < V; i++) {
            d = fabs((double)ra[i] - rb[i]) > d ? fabs((double)ra[i] - rb[i]) : d;
            *max_b = fabs(rb[i]) > *max_b ? fabs(rb[i]) : *max_b;
            ia = ra[i] > ra[ia] ? i : ia;
            if (i && rb[i] > rb[ib]) {
                ib2 = ib;
                ib = i;
            } else if (i != ib && rb[i] > rb[ib2]) {
                ib2 = i;
            }
        }
        worst = d > worst ? d : worst;
        if (rb[ib] - rb[ib2] > 2 * d) {
            (*decisive)++;
            *agree += ia == ib;
        }
    }
    return worst;
}

static uint64_t field(const char *line, const char *after)
{
    const char *p = strstr(line, after);
    return p ? strtoull(p + strlen(after), NULL, 10) : 0;
}

static void check_close(const char *what, const float *got, const float *cpu, uint32_t n, uint32_t V)
{
    double max_ref;
    uint32_t decisive, agree;
    const double worst = compare(got, cpu, n, V, &max_ref, &decisive, &agree);
    print_message("%s vs the CPU: max|dlogit| %.3e (logits up to %.1f), top-1 %u/%u decisive\n", what, worst, max_ref,
                  agree, decisive);
    assert_true(worst <= 5e-2 * max_ref); /* as for quantized files against llama.cpp (test_engine) */
    assert_true(decisive * 4 >= n * 3); /* most positions are decisive: the check has teeth */
    assert_int_equal(agree, decisive);
}

/* The model's path into model, and the prompt's ids (*n of them). */
static int32_t *fixture(char *model, size_t len, uint32_t *n)
{
    const char *p = gm_fixture(MODEL);
    assert_non_null(p);
    snprintf(model, len, "%s", p);
    assert_non_null(p = gm_fixture(IDS));
    int32_t *ids = gm_read_ids(p, n);
    assert_non_null(ids);
    return ids;
}

static void test_tier(void **state)
{
    (void)state;
    char model[4096];
    uint32_t n, V;
    int32_t *ids = fixture(model, sizeof model, &n);
    char line[2048];
    float *cpu = logits_of(model, ids, n, 0, 1, false, EXPERTS, 0, GM_PLACE_CPU, &V, NULL, 0);
    /* every expert in the tier, the attention on the CPU */
    float *dec = logits_of(model, ids, n, 0, 1, true, EXPERTS, 0, GM_PLACE_CPU, &V, line, sizeof line);
    print_message("%s", line);
    assert_int_equal(field(line, "decode lookups "), (uint64_t)(n - 1) * 6 * 4 + 6 * 4);
    assert_int_equal(field(line, "computed on the device "), field(line, "decode lookups "));
    assert_null(strstr(line, "attention on the device"));
    check_close("decode, every expert on the device", dec, cpu, n, V);
    float *pre = logits_of(model, ids, n, 0, 64, true, EXPERTS, 0, GM_PLACE_CPU, &V, line, sizeof line);
    assert_int_equal(field(line, "prefill (expert, token) pairs on the device "), (uint64_t)n * 6 * 4);
    assert_memory_equal(pre, dec, (size_t)n * V * sizeof *pre);
    gm_test_arena("0.004");
    float *str = logits_of(model, ids, n, 0, 1, true, EXPERTS, 0, GM_PLACE_EXPERTS, &V, NULL, 0);
    assert_memory_equal(str, dec, (size_t)n * V * sizeof *str);
    /* chunks of 8 through the arena (or the ring): the device's pairs, the same logits */
    float *sch = logits_of(model, ids, n, 0, 8, true, EXPERTS, 0, GM_PLACE_EXPERTS, &V, line, sizeof line);
    gm_test_arena(NULL);
    assert_int_equal(field(line, "prefill (expert, token) pairs on the device "), (uint64_t)n * 6 * 4);
    assert_memory_equal(sch, dec, (size_t)n * V * sizeof *sch);
    free(sch);
    /* the decode's attention on the device too: each token's layers there, streamed == in memory */
    float *att = logits_of(model, ids, n, 0, 1, true, ATTN, 0, GM_PLACE_CPU, &V, line, sizeof line);
    print_message("%s", line);
    assert_int_equal(field(line, "attention on the device: 6 layers, "), (uint64_t)n * 6);
    assert_int_equal(field(line, "output head on the device: "), n);
    check_close("decode, experts, attention and output head on the device", att, cpu, n, V);
    gm_test_arena("0.004");
    float *ast = logits_of(model, ids, n, 0, 1, true, ATTN, 0, GM_PLACE_EXPERTS, &V, NULL, 0);
    gm_test_arena(NULL);
    assert_memory_equal(ast, att, (size_t)n * V * sizeof *ast);
    free(ast);
    /* a prompt of half the tokens on the CPU, its rows copied up, then decode on the device: its
     * tokens attend the CPU's rows as closely as the all-device run's */
    const uint32_t half = n / 2;
    float *mix = logits_of(model, ids, n, half, 1, true, ATTN, 0, GM_PLACE_CPU, &V, line, sizeof line);
    print_message("%s", line);
    assert_int_equal(field(line, "prompt rows copied up "), half);
    assert_int_equal(field(line, "attention on the device: 6 layers, "), (uint64_t)(n - half) * 6);
    double max_ref;
    uint32_t decisive, agree;
    const double worst = compare(mix + (size_t)half * V, att + (size_t)half * V, n - half, V, &max_ref, &decisive,
                                 &agree);
    print_message("a prompt on the CPU, then decode on the device vs all on the device: max|dlogit| %.3e (logits up "
                  "to %.1f), top-1 %u/%u decisive\n", worst, max_ref, agree, decisive);
    assert_true(worst <= 5e-2 * max_ref); /* rows not copied up: differences of 19 */
    assert_true(decisive > 0);
    assert_int_equal(agree, decisive);
    assert_memory_equal(mix, pre, (size_t)half * V * sizeof *mix);
    /* the whole decode token on the device (infer/gpu_decode.c): no layer's attention through the
     * host, every expert's use counted, within the bound of the CPU and of the layer-by-layer
     * device run, streamed == in memory bit for bit */
    float *whole = logits_of(model, ids, n, 0, 1, true, WHOLE, 0, GM_PLACE_CPU, &V, line, sizeof line);
    print_message("%s", line);
    assert_int_equal(field(line, "decode whole on the device: "), n);
    assert_null(strstr(line, "attention on the device:"));
    assert_int_equal(field(line, "decode lookups "), (uint64_t)n * 6 * 4);
    assert_int_equal(field(line, "computed on the device "), (uint64_t)n * 6 * 4);
    check_close("decode whole on the device", whole, cpu, n, V);
    check_close("decode whole on the device, against layer by layer there", whole, att, n, V);
    gm_test_arena("0.004");
    float *wst = logits_of(model, ids, n, 0, 1, true, WHOLE, 0, GM_PLACE_EXPERTS, &V, line, sizeof line);
    gm_test_arena(NULL);
    assert_int_equal(field(line, "decode whole on the device: "), n);
    assert_memory_equal(wst, whole, (size_t)n * V * sizeof *wst);
    free(wst);
    /* a prompt on the CPU, its rows copied up, then whole tokens on the device: as close to the
     * all-device run as the layer-by-layer one */
    float *wmix = logits_of(model, ids, n, half, 1, true, WHOLE, 0, GM_PLACE_CPU, &V, line, sizeof line);
    assert_int_equal(field(line, "prompt rows copied up "), half);
    assert_int_equal(field(line, "decode whole on the device: "), n - half);
    assert_memory_equal(wmix, pre, (size_t)half * V * sizeof *wmix);
    check_close("a prompt on the CPU, then whole tokens on the device", wmix + (size_t)half * V,
                whole + (size_t)half * V, n - half, V);
    free(wmix);
    /* a prompt's chunk whole on the device too (gm_gpu_chunk_run; the stand-in's scratch of 7
     * tokens splits it): its K and V rows in both caches, its pairs counted, the last residual row
     * and the logits right, so that the decode tokens after it stay as close to the CPU */
    prompt_mode = PROMPT_LAST;
    float *wpf = logits_of(model, ids, n, half, 1, true, WHOLE, 0, GM_PLACE_CPU, &V, line, sizeof line);
    print_message("%s", line);
    assert_int_equal(field(line, "prompt whole on the device: "), half);
    assert_int_equal(field(line, "decode whole on the device: "), n - half);
    assert_int_equal(field(line, "prefill (expert, token) pairs on the device "), (uint64_t)half * 6 * 4);
    assert_null(strstr(line, "prompt rows copied up"));
    check_close("a prompt's chunk whole on the device, then whole tokens", wpf + (size_t)(half - 1) * V,
                cpu + (size_t)(half - 1) * V, n - half + 1, V);
    check_close("a prompt's chunk whole on the device, against whole tokens", wpf + (size_t)(half - 1) * V,
                whole + (size_t)(half - 1) * V, n - half + 1, V);
    free(wpf);
    /* every position's logits from chunks of 9 on the device (each split 7 + 2) */
    prompt_mode = PROMPT_ALL;
    float *wall = logits_of(model, ids, n, 0, 9, true, WHOLE, 0, GM_PLACE_CPU, &V, line, sizeof line);
    prompt_mode = PROMPT_HOST;
    assert_int_equal(field(line, "prompt whole on the device: "), n - n % 9 + (n % 9 > 1 ? n % 9 : 0));
    check_close("chunks of 9 whole on the device, every position's logits", wall, cpu, n, V);
    free(wall);
    /* the other way: a first token decoded on the device, then the rest in one chunk on the CPU,
     * which attends the K and V rows the device decode wrote into the host's cache */
    float *wback = logits_of(model, ids, n, 1, 64, true, WHOLE, 0, GM_PLACE_CPU, &V, line, sizeof line);
    assert_int_equal(field(line, "decode whole on the device: "), 1);
    check_close("a token on the device, then a chunk on the CPU", wback, cpu, n, V);
    free(wback);
    free(whole);
    free(mix);
    free(att);
    /* a tier of 78 of the 96 experts: the device's and the CPU's mixed, promotions; the attention
     * and its cache would take more than half of the 10 MB, so the attention stays on the CPU */
    float *part = logits_of(model, ids, n, 0, 1, true, ATTN, 0.01, GM_PLACE_CPU, &V, line, sizeof line);
    print_message("%s", line);
    assert_non_null(strstr(line, "78 of 78 slots"));
    assert_null(strstr(line, "attention on the device"));
    const uint64_t lookups = field(line, "decode lookups "), on_dev = field(line, "computed on the device ");
    assert_true(on_dev > 0 && on_dev < lookups);
    assert_true(field(line, "uploads ") > 0);
    check_close("decode, 78 of 96 experts on the device", part, cpu, n, V);
    free(part);
    /* the same with every device path asked for: no chunk can run on the device (the attention
     * stays on the CPU), so the staging slots the load kept go back to the tier */
    prompt_mode = PROMPT_LAST;
    float *pw = logits_of(model, ids, n, 0, 1, true, WHOLE, 0.01, GM_PLACE_CPU, &V, line, sizeof line);
    prompt_mode = PROMPT_HOST;
    assert_non_null(strstr(line, "78 of 78 slots"));
    check_close("decode, 78 of 96 experts on the device, the staging slots given back", pw, cpu, n, V);
    free(pw);
    free(str);
    free(pre);
    free(dec);
    free(cpu);
    free(ids);
}

/* check_close for a generated model, whose random router leaves near ties: at such a position
 * the device may choose another expert than the CPU (the router's sums run in another order) and
 * that position's logits move by up to a quarter of the largest; so at 9 positions in 10 the
 * bound of check_close, and the same top-1 at 9 decisive positions in 10 (half the positions at
 * least being decisive: this model's logits are small). */
static void check_most(const char *what, const float *got, const float *ref, uint32_t n, uint32_t V)
{
    uint32_t within = 0, decisive = 0, agree = 0;
    double max_ref = 0, worst = 0;
    for (uint32_t t = 0; t < n; t++) {
        double m, d;
        uint32_t dec, ag;
        d = compare(got + (size_t)t * V, ref + (size_t)t * V, 1, V, &m, &dec, &ag);
        max_ref = m > max_ref ? m : max_ref;
        worst = d > worst ? d : worst;
        within += d <= 5e-2 * m;
        decisive += dec;
        agree += ag;
    }
    print_message("%s: %u of %u positions within 5%% (worst %.3e, logits up to %.1f), top-1 %u/%u decisive\n", what,
                  within, n, worst, max_ref, agree, decisive);
    assert_true(within * 10 >= n * 9);
    assert_true(decisive * 2 >= n); /* the top-1 check has teeth */
    assert_true(agree * 10 >= decisive * 9);
}

/* A GLM-4.5-shaped model (sigmoid routing with a selection bias, a shared expert, a leading dense
 * layer; generated): the whole decode token on the device takes the shared expert and the dense
 * FFN too, as close to the CPU as the layer-by-layer device run. */
static void test_shared_dense(void **state)
{
    (void)state;
    char model[4096];
    const char *const shape[] = {"--shared-experts", "1", "--dense-layers", "1", "--head-dim", "128", "--layers", "3",
                                 NULL};
    gm_test_gen_arch(model, sizeof model, "gpu-glm", "glm4moe", "11", shape);
    int32_t ids[24];
    const uint32_t n = 24;
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (int32_t)(7 + 11 * i) % 300;
    uint32_t V;
    char line[2048];
    float *cpu = logits_of(model, ids, n, 0, 1, false, EXPERTS, 0, GM_PLACE_CPU, &V, NULL, 0);
    float *att = logits_of(model, ids, n, 0, 1, true, ATTN, 0, GM_PLACE_CPU, &V, line, sizeof line);
    assert_int_equal(field(line, "attention on the device: "), 3); /* the layers, then their tokens */
    const uint64_t lookups = field(line, "decode lookups ");
    assert_true(lookups > 0);
    float *whole = logits_of(model, ids, n, 0, 1, true, WHOLE, 0, GM_PLACE_CPU, &V, line, sizeof line);
    print_message("%s", line);
    assert_int_equal(field(line, "decode whole on the device: "), n);
    assert_int_equal(field(line, "decode lookups "), lookups); /* the MoE layers' experts, not the dense one */
    check_most("shared expert and dense layer, layer by layer on the device", att, cpu, n, V);
    check_most("shared expert and dense layer, whole on the device", whole, cpu, n, V);
    check_most("shared expert and dense layer, whole against layer by layer", whole, att, n, V);
    free(whole);
    free(att);
    free(cpu);
}

/* Not every expert in VRAM (a GLM-4.5-shaped model of 64 experts a layer, generated; 51 of its 128
 * routed experts in the tier), the attention there: a prompt's chunks still run whole on the
 * device, the experts the tier lacks copied in through 3 staging slots (several passes a layer;
 * the last pass's move into the tier where the prompt used them more than a resident), bit for
 * bit the chunks of the run that holds every expert (the same arithmetic, other memory).
 * The decode tokens after them run on the device, the experts the tier lacks computed on the CPU
 * (split): as close to the CPU and to the all-VRAM run as the device's decode is. Without the
 * split (GMLX_GPU_SPLIT=0) they run layer by layer, as close. No staging slots: the chunks run
 * layer by layer. */
extern uint64_t gm_host_cuda_bounce_bytes, gm_host_cuda_bounces;
extern int gm_host_cuda_bounce_refuse;

/* The staged chunks of test_staged with the experts not page-locked: their copies through the
 * page-locked buffers (small ones, so that a pass's copies split across them; ones narrower than
 * a matrix, which then goes straight from the pages), with the buffers refused, and with
 * GMLX_GPU_BOUNCE=0: the logits every time those of every expert in VRAM (all), bit for bit. */
static void staged_bounce(const char *model, const int32_t *ids, uint32_t n, double budget, const float *all)
{
    const struct {
        uint64_t bytes;
        int refuse, mode;
        bool through;
    } arm[] = {{200000, 0, -1, true}, {0, 0, -1, true}, {1000, 0, -1, false}, {0, 1, -1, false}, {0, 0, 0, false}};
    pin_host = 0;
    for (size_t i = 0; i < sizeof arm / sizeof arm[0]; i++) {
        gm_host_cuda_bounce_bytes = arm[i].bytes;
        gm_host_cuda_bounce_refuse = arm[i].refuse;
        bounce_mode = arm[i].mode;
        const uint64_t sent0 = gm_host_cuda_bounces;
        uint32_t V;
        char line[2048];
        float *st = logits_of(model, ids, n, 0, 9, true, WHOLE, budget, GM_PLACE_CPU, &V, line, sizeof line);
        print_message("buffers of %llu bytes%s%s: %s", (unsigned long long)arm[i].bytes,
                      arm[i].refuse ? ", refused" : "", arm[i].mode == 0 ? ", GMLX_GPU_BOUNCE=0" : "", line);
        const char *at = strstr(line, "queueing the copies; ");
        assert_non_null(at);
        const uint64_t sent = gm_host_cuda_bounces - sent0;
        if (arm[i].through) {
            assert_null(strstr(at, "; 0.00 GB through"));
            assert_true(sent > (arm[i].bytes ? 3u : 0u)); /* small buffers: more than one pass's worth */
        } else {
            assert_non_null(strstr(at, "; 0.00 GB through"));
            assert_int_equal(sent, 0);
        }
        assert_memory_equal(st, all, (size_t)n * V * sizeof *st);
        free(st);
    }
    gm_host_cuda_bounce_bytes = 0;
    gm_host_cuda_bounce_refuse = 0;
    bounce_mode = pin_host = -1;
}

static void test_staged(void **state)
{
    (void)state;
    char model[4096];
    const char *const shape[] = {"--shared-experts", "1", "--dense-layers", "1", "--head-dim", "128", "--layers", "3",
                                 "--experts", "64", "--expert-ffn", "1024", NULL};
    gm_test_gen_arch(model, sizeof model, "gpu-staged", "glm4moe", "12", shape);
    int32_t ids[24];
    const uint32_t n = 24, half = n / 2;
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (int32_t)(5 + 13 * i) % 300;
    uint32_t V;
    char line[2048];
    const double budget = 0.038;
    /* chunks of 9 (each split 7 + 2 by the stand-in), every position's logits */
    prompt_mode = PROMPT_ALL;
    float *all = logits_of(model, ids, n, 0, 9, true, WHOLE, 0, GM_PLACE_CPU, &V, line, sizeof line);
    assert_int_equal(field(line, "prompt whole on the device: "), n);
    assert_null(strstr(line, "experts copied in"));
    stage_slots = 3;
    float *st = logits_of(model, ids, n, 0, 9, true, WHOLE, budget, GM_PLACE_CPU, &V, line, sizeof line);
    print_message("%s", line);
    assert_non_null(strstr(line, "51 of 51 slots"));
    assert_int_equal(field(line, "prompt whole on the device: "), n);
    assert_true(field(line, "experts copied in for the prompt: ") > 3);
    /* the later chunks compute the staged experts that moved into the tier from their new slots */
    assert_true(field(line, "moved in from a prompt's staging ") > 0);
    assert_memory_equal(st, all, (size_t)n * V * sizeof *st);
    assert_non_null(strstr(line, "; 0.00 GB through page-locked buffers")); /* pinned: straight from the pages */
    free(st);
    staged_bounce(model, ids, n, budget, all);
    free(all);
    /* half the tokens as a prompt, then decode */
    prompt_mode = PROMPT_LAST;
    float *cpu = logits_of(model, ids, n, half, 1, false, EXPERTS, 0, GM_PLACE_CPU, &V, NULL, 0);
    float *ref = logits_of(model, ids, n, half, 1, true, WHOLE, 0, GM_PLACE_CPU, &V, NULL, 0);
    uploads_max = 8; /* promotions asked for (a split decode makes none by default) */
    float *mix = logits_of(model, ids, n, half, 1, true, WHOLE, budget, GM_PLACE_CPU, &V, line, sizeof line);
    uploads_max = -1;
    print_message("%s", line);
    assert_int_equal(field(line, "prompt whole on the device: "), half);
    assert_null(strstr(line, "decode whole on the device"));
    assert_int_equal(field(line, "the experts VRAM lacks on the CPU: "), n - half);
    const char *host = strstr(line, "experts VRAM lacks on the CPU: ");
    assert_non_null(host);
    assert_true(field(host, " s (") > 0);
    assert_int_equal(field(line, "attention on the device: 3 layers, "), 0);
    assert_true(field(line, "uploads ") > 0); /* the CPU's experts are promoted after a split token */
    assert_memory_equal(mix + (size_t)(half - 1) * V, ref + (size_t)(half - 1) * V, V * sizeof *mix);
    check_most("a staged prompt, then decode split with the CPU", mix + (size_t)(half - 1) * V,
               cpu + (size_t)(half - 1) * V, n - half + 1, V);
    check_most("decode split with the CPU against every expert in VRAM", mix + (size_t)(half - 1) * V,
               ref + (size_t)(half - 1) * V, n - half + 1, V);
    split_mode = 0;
    float *lbl = logits_of(model, ids, n, half, 1, true, WHOLE, budget, GM_PLACE_CPU, &V, line, sizeof line);
    split_mode = -1;
    print_message("%s", line);
    assert_null(strstr(line, "VRAM lacks on the CPU"));
    assert_int_equal(field(line, "attention on the device: 3 layers, "), (uint64_t)(n - half) * 3);
    assert_memory_equal(lbl + (size_t)(half - 1) * V, ref + (size_t)(half - 1) * V, V * sizeof *lbl);
    check_most("a staged prompt, then decode layer by layer", lbl + (size_t)(half - 1) * V,
               cpu + (size_t)(half - 1) * V, n - half + 1, V);
    free(lbl);
    free(mix);
    stage_slots = 0;
    float *none = logits_of(model, ids, n, half, 1, true, WHOLE, budget, GM_PLACE_CPU, &V, line, sizeof line);
    assert_null(strstr(line, "prompt whole on the device"));
    assert_int_equal(field(line, "prompt rows copied up "), half);
    assert_int_equal(field(line, "the experts VRAM lacks on the CPU: "), n - half);
    assert_non_null(strstr(line, "uploads 0 (")); /* the split decode's default: no promotions */
    double max_ref;
    uint32_t decisive, agree;
    const double worst = compare(none + (size_t)(half - 1) * V, cpu + (size_t)(half - 1) * V, 1, V, &max_ref,
                                 &decisive, &agree);
    print_message("no staging: the prompt's logits layer by layer vs the CPU's: max|dlogit| %.3e (up to %.1f)\n", worst,
                  max_ref);
    assert_true(worst <= 5e-2 * max_ref);
    free(none);
    free(ref);
    free(cpu);
    stage_slots = -1;
    prompt_mode = PROMPT_HOST;
}

extern int gm_host_cuda_fail_allocs, gm_host_cuda_skip_allocs;

/* A device without room for the attention's weights (the load's first allocation) or for a
 * session's cache (its third, after the tier's): the load and the session go on with the
 * attention on the CPU, and the logits stay within the bound. */
static void test_no_room(void **state)
{
    (void)state;
    char model[4096];
    uint32_t n, V;
    int32_t *ids = fixture(model, sizeof model, &n);
    char line[2048];
    float *cpu = logits_of(model, ids, n, 0, 1, false, EXPERTS, 0, GM_PLACE_CPU, &V, NULL, 0);
    gm_host_cuda_fail_allocs = 1;
    float *a = logits_of(model, ids, n, 0, 1, true, ATTN, 0, GM_PLACE_CPU, &V, line, sizeof line);
    assert_int_equal(gm_host_cuda_fail_allocs, 0);
    assert_null(strstr(line, "attention on the device"));
    assert_null(strstr(line, "output head on the device"));
    assert_int_equal(field(line, "computed on the device "), (uint64_t)n * 6 * 4);
    check_close("no room for the attention", a, cpu, n, V);
    /* the weights' slab, the tier's, then the session's cache fails */
    gm_host_cuda_fail_allocs = 0;
    float *b = NULL;
    {
        gm_tuning tune = *gm_test_tuning();
        gm_engine_opts o = {.tuning = &tune, .n_threads = 2, .max_chunk = 1, .gpu = 1};
        gm_engine *e = NULL;
        gm_fwd *s = NULL;
        gm_err err = {0};
        assert_int_equal(gm_engine_load(&e, model, &o, &err), 0);
        gm_host_cuda_fail_allocs = 1;
        assert_int_equal(gm_fwd_create(&s, e, n + 8, GM_KV_F32, &err), 0);
        assert_int_equal(gm_host_cuda_fail_allocs, 0);
        b = malloc((size_t)n * V * sizeof *b);
        assert_non_null(b);
        for (uint32_t t = 0; t < n; t++)
            assert_int_equal(gm_fwd_eval(s, ids + t, 1, b + (size_t)t * V, true, &err), 0);
        gm_strbuf sb = GM_STRBUF_INIT;
        gm_engine_print_gpu(e, &sb);
        print_message("%s", sb.data ? sb.data : "");
        assert_null(strstr(sb.data, "attention on the device"));
        assert_int_equal(field(sb.data, "output head on the device: "), n);
        gm_strbuf_free(&sb);
        gm_fwd_free(s);
        gm_engine_free(e);
    }
    check_close("no room for a session's cache", b, cpu, n, V);
    /* no room for the device decode's norms and routers (the load's third allocation, after the
     * attention's and the tier's): the load goes on, the tokens run layer by layer */
    gm_host_cuda_skip_allocs = 2;
    gm_host_cuda_fail_allocs = 1;
    float *c = logits_of(model, ids, n, 0, 1, true, WHOLE, 0, GM_PLACE_CPU, &V, line, sizeof line);
    assert_int_equal(gm_host_cuda_fail_allocs, 0);
    assert_null(strstr(line, "decode whole on the device"));
    assert_int_equal(field(line, "attention on the device: 6 layers, "), (uint64_t)n * 6);
    check_close("no room for the device decode", c, cpu, n, V);
    free(c);
    free(b);
    free(a);
    free(cpu);
    free(ids);
}

/* Without --gpu or --no-gpu (gpu -1): the device is used when the experts stream through the
 * arena, not for a model in memory or run from the page cache (--stream-cpu), and a device that
 * cannot take the model is left unused instead of failing the load. */
static void test_default(void **state)
{
    (void)state;
    char model[4096];
    uint32_t n, V;
    int32_t *ids = fixture(model, sizeof model, &n);
    n = 4;
    char line[2048];
    gm_test_arena("0.004");
    free(logits_of(model, ids, n, 0, 1, -1, ATTN, 0, GM_PLACE_EXPERTS, &V, line, sizeof line));
    assert_int_equal(field(line, "computed on the device "), (uint64_t)n * 6 * 4);
    free(logits_of(model, ids, n, 0, 1, -1, ATTN, 0.0001, GM_PLACE_EXPERTS, &V, line, sizeof line));
    gm_test_arena(NULL);
    assert_string_equal(line, "");
    free(logits_of(model, ids, n, 0, 1, -1, ATTN, 0, GM_PLACE_CPU, &V, line, sizeof line));
    assert_string_equal(line, "");
    free(logits_of(model, ids, n, 0, 1, -1, ATTN, 0, GM_PLACE_AUTO, &V, line, sizeof line));
    assert_string_equal(line, "");
    free(ids);
}

static void test_refusals(void **state)
{
    (void)state;
    char model[4096];
    snprintf(model, sizeof model, "%s", gm_fixture(MODEL));
    gm_err err = {0};
    gm_engine *e = NULL;
    /* 0.1 MB holds no slot of 127 kB */
    gm_engine_opts o = {.tuning = gm_test_tuning(), .n_threads = 1, .max_chunk = 8, .gpu = 1, .vram_gb = 0.0001};
    const int rc = gm_engine_load(&e, model, &o, &err);
    print_message("%s\n", err.msg);
    assert_int_equal(rc, GM_ENOMEM);
    assert_null(e);
    assert_non_null(strstr(err.msg, "hold no expert"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tier),
        cmocka_unit_test(test_staged),
        cmocka_unit_test(test_no_room),
        cmocka_unit_test(test_shared_dense),
        cmocka_unit_test(test_default),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
