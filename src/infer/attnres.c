/* Cross-layer residual attention (Kimi-K3's attn_res): a block's input is a softmax-weighted mix
 * of the residual stream and the layer inputs banked so far (llama.cpp's src/models/kimi-k3.cpp,
 * res_mix and res_push):
 *   score_c = sum_d rms_norm(src_c)_d w_d      for every banked row c and the stream itself
 *   p       = softmax(scores)
 *   input   = sum_c p_c src_c + p_stream stream
 * Every attn_res.block_size-th layer banks its raw input before its attention, and the residual
 * stream then restarts from that attention's output (the recipe's part). A chunk's tokens each
 * have their own bank, s->res_stack, of at most e->res_max rows, emptied at layer 0. */
#include <math.h>
#include <string.h>

#include "infer/recipe.h"

/* sum_d rms_norm(x)_d w_d, in double as llama.cpp's row sums. */
static double score(const float *x, const float *w, uint32_t E, float eps)
{
    double ss = 0;
    for (uint32_t d = 0; d < E; d++)
        ss += (double)(x[d] * x[d]);
    const float sc = 1.0f / sqrtf((float)(ss / (double)E) + eps);
    double acc = 0;
    for (uint32_t d = 0; d < E; d++)
        acc += (double)(x[d] * sc * w[d]);
    return acc;
}

void gm_res_mix(gm_fwd *s, const float *w, uint32_t t0, uint32_t m, float *out)
{
    const gm_engine *e = s->e;
    const uint32_t E = e->n_embd, C = s->res_n;
    for (uint32_t t = t0; t < t0 + m; t++) {
        const float *cur = s->x + (uint64_t)t * E;
        float *o = out + (uint64_t)(t - t0) * E;
        if (C == 0) { /* nothing banked yet: the stream itself */
            memcpy(o, cur, E * sizeof(float));
            continue;
        }
        const float *stack = s->res_stack + (uint64_t)t * e->res_max * E;
        float p[GM_MAX_RES + 1];
        float mx = -INFINITY;
        for (uint32_t c = 0; c <= C; c++) {
            p[c] = (float)score(c < C ? stack + (uint64_t)c * E : cur, w, E, e->rms_eps);
            mx = p[c] > mx ? p[c] : mx;
        }
        double sum = 0;
        for (uint32_t c = 0; c <= C; c++) {
            p[c] = expf(p[c] - mx);
            sum += p[c];
        }
        const float inv = (float)(1.0 / sum);
        for (uint32_t c = 0; c <= C; c++)
            p[c] *= inv;
        for (uint32_t d = 0; d < E; d++)
            o[d] = stack[d] * p[0];
        for (uint32_t c = 1; c < C; c++)
            for (uint32_t d = 0; d < E; d++)
                o[d] += stack[(uint64_t)c * E + d] * p[c];
        for (uint32_t d = 0; d < E; d++)
            o[d] += cur[d] * p[C];
    }
}

void gm_res_push(gm_fwd *s, uint32_t n)
{
    const gm_engine *e = s->e;
    const uint32_t E = e->n_embd;
    for (uint32_t t = 0; t < n; t++)
        memcpy(s->res_stack + ((uint64_t)t * e->res_max + s->res_n) * E, s->x + (uint64_t)t * E,
               E * sizeof(float));
    s->res_n++;
}
