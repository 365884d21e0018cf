/* infer/sample: choosing the next token from logits.
 *
 * Owns: gm_sampler, its settings, its random state and its candidate buffers (sized once for
 * the vocabulary, so sampling allocates nothing per token). The chain, in order: repetition
 * penalty over the last penalty_last_n tokens, top-k, top-p (nucleus), min-p, temperature,
 * then a draw. temp <= 0 is greedy (argmax, ties to the lowest id). A seed makes draws
 * reproducible.
 * Threads: one owner thread per sampler.
 */
#ifndef GM_INFER_SAMPLE_H
#define GM_INFER_SAMPLE_H

#include <stdint.h>

#include "base/err.h"

typedef struct gm_sample_opts {
    float temp;             /* 0 = greedy */
    int32_t top_k;          /* 0 = off */
    float top_p;            /* 1 = off */
    float min_p;            /* 0 = off */
    float repeat_penalty;   /* 1 = off */
    int32_t penalty_last_n; /* tokens the penalty looks back over */
    uint64_t seed;
} gm_sample_opts;

typedef struct gm_sampler gm_sampler;

/* Defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1, last_n 64, seed 0. */
void gm_sample_opts_default(gm_sample_opts *o);

/* GM_EINVAL for out-of-range settings (negative temp or top_k, top_p/min_p outside [0, 1],
 * penalty <= 0). */
int gm_sampler_create(gm_sampler **out, uint32_t n_vocab, const gm_sample_opts *o, gm_err *err);
void gm_sampler_free(gm_sampler *s);

/* Records a token of the context (prompt or generated) for the repetition penalty. */
void gm_sampler_accept(gm_sampler *s, int32_t token);

/* Picks a token from n_vocab logits (the logits are not modified). */
int32_t gm_sampler_sample(gm_sampler *s, const float *logits);

#endif
