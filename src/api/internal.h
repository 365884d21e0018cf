/* api/internal: the structures behind the public handles of include/gmlx.h (not a public
 * header). The api module is the top of the library: it composes the engine (infer/), the
 * tokenizer (text/), the chat-template renderer (template/) and the plan (plan/) into what a
 * front end uses, and owns the rules the handles promise (locking, rewinding, stop strings).
 *
 * Threads: a gm_model's lock serialises every compute call on it (an eval chunk, a rewind's
 * re-evaluation); the lock's holder owns the engine (gm_engine_adopt). A gm_session belongs to
 * one thread at a time; its cancel flag is atomic.
 */
#ifndef GM_API_INTERNAL_H
#define GM_API_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "gmlx.h"
#include "infer/engine.h"
#include "infer/sample.h"
#include "text/tokenizer.h"

struct gm_vocab {
    gm_tokenizer *tok;
    gm_vocab_info info;
    char arch[64];
    char *chat_template;     /* NULL: none */
    char *bos_text, *eos_text;
};

/* Fills v from g's header (the tokenizer is a self-contained copy: g may close after). */
int gm_vocab_fill(gm_vocab *v, const gm_gguf *g, gm_err *err);
void gm_vocab_clear(gm_vocab *v);

struct gm_model {
    gm_engine *e;
    gm_vocab vocab;
    gm_model_info info;
    char *path;
    char arch[64], name[128], kernels[32];
    bool phase_stats;
    pthread_mutex_t lock;
};

/* Takes the model's lock and the engine's ownership for the calling thread. */
void gm_model_lock(gm_model *m);
void gm_model_unlock(gm_model *m);

typedef struct gm_snapshot {
    bool used;
    uint32_t pos;
    uint64_t age;            /* larger: newer */
    void *buf;               /* gm_fwd_state_bytes */
} gm_snapshot;

struct gm_session {
    gm_model *m;
    gm_fwd *f;
    uint32_t n_ctx;
    int32_t *toks;           /* [n_ctx]: the tokens in the cache, positions 0 .. pos - 1 */
    uint32_t n_logits;       /* the output head's rows */
    atomic_int cancel;
    gm_snapshot *snaps;
    uint32_t n_snaps;
    uint64_t state_bytes;    /* 0: the cache rewinds in place (plain attention) */
    uint64_t age;
};

/* Evaluates tokens in chunks under the model's lock (the session's history follows; logits of
 * the last token when logits is not NULL, or of every token when all). */
int gm_session_eval_chunks(gm_session *s, const int32_t *tokens, uint32_t n, float *logits, bool all,
                           gm_err *err);

#endif
