/* The public generation API: sampling settings, the generate loop (prompt, then one token at a
 * time), stop tokens and stop strings (text held back while it may be the start of one), the
 * per-token callback and the result (gmlx.h "generation"). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/internal.h"
#include "base/err.h"

void gm_sampling_default(gm_sampling *s)
{
    gm_sample_opts o;
    gm_sample_opts_default(&o);
    s->temp = o.temp;
    s->top_k = o.top_k;
    s->top_p = o.top_p;
    s->min_p = o.min_p;
    s->repeat_penalty = o.repeat_penalty;
    s->penalty_last_n = o.penalty_last_n;
    s->seed = o.seed;
}

void gm_generate_opts_default(gm_generate_opts *o)
{
    memset(o, 0, sizeof *o);
    gm_sampling_default(&o->sampling);
}

const char *gm_stop_reason_name(gm_stop_reason r)
{
    switch (r) {
    case GM_STOP_EOG: return "eog";
    case GM_STOP_TOKEN: return "stop token";
    case GM_STOP_STRING: return "stop string";
    case GM_STOP_LENGTH: return "length";
    case GM_STOP_CONTEXT: return "context full";
    case GM_STOP_CANCEL: return "canceled";
    case GM_STOP_CALLBACK: return "callback";
    default: return "none";
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Text generated but not yet handed out, because its end may begin a stop string. */
typedef struct pending {
    char *buf;
    size_t len, cap;
} pending;

static int pending_add(pending *p, const char *text, size_t n, gm_err *err)
{
    if (p->len + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->len + n + 1)
            cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b)
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, text, n);
    p->len += n;
    return 0;
}

/* The first stop string in the pending text: its index, and its offset in *at; -1 when none. */
static int find_stop(const pending *p, const gm_generate_opts *o, size_t *at)
{
    int best = -1;
    size_t best_at = 0;
    for (size_t i = 0; i < o->n_stop; i++) {
        const size_t sl = strlen(o->stop[i]);
        if (!sl || sl > p->len)
            continue;
        for (size_t k = 0; k + sl <= p->len && (best < 0 || k < best_at); k++)
            if (memcmp(p->buf + k, o->stop[i], sl) == 0) {
                best = (int)i;
                best_at = k;
                break;
            }
    }
    *at = best_at;
    return best;
}

/* Bytes of the pending text that can go out: all but its longest tail that is the start of a
 * stop string. */
static size_t safe_len(const pending *p, const gm_generate_opts *o)
{
    size_t hold = 0;
    for (size_t i = 0; i < o->n_stop; i++) {
        const size_t sl = strlen(o->stop[i]);
        for (size_t t = sl > 1 ? sl - 1 : 0; t > hold; t--)
            if (t <= p->len && memcmp(p->buf + p->len - t, o->stop[i], t) == 0) {
                hold = t;
                break;
            }
    }
    return p->len - hold;
}

static bool emit(const gm_generate_opts *o, int32_t token, pending *p, size_t n)
{
    bool go = o->on_token ? o->on_token(o->user, token, p->buf, n) : true;
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
    return go;
}

int gm_session_generate(gm_session *s, const int32_t *prompt, uint32_t n_prompt, const gm_generate_opts *opts,
                        gm_generate_result *res, gm_err *err)
{
    gm_generate_opts def;
    if (!opts) {
        gm_generate_opts_default(&def);
        opts = &def;
    }
    gm_generate_result r = {.stop = GM_STOP_NONE, .stop_token = -1, .stop_string = -1};
    const double t0 = now_s();
    const gm_vocab *v = &s->m->vocab;
    gm_sampler *smp = NULL;
    gm_detokenizer *dt = NULL;
    pending pend = {0};
    float *logits = malloc((uint64_t)s->n_logits * sizeof *logits);
    int rc = 0;
    if (!logits) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto out;
    }
    if (n_prompt == 0) {
        /* the last token in the cache gives the logits */
        const uint32_t pos = gm_session_pos(s);
        if (pos == 0) {
            rc = gm_err_set(err, GM_EINVAL, "nothing to generate from: the prompt and the session are empty");
            goto out;
        }
        const int32_t last = s->toks[pos - 1];
        if ((rc = gm_session_rewind(s, pos - 1, err)) || (rc = gm_session_eval_chunks(s, &last, 1, logits, false, err)))
            goto out;
    } else if ((rc = gm_session_eval_chunks(s, prompt, n_prompt, logits, false, err))) {
        if (rc == GM_ECANCELED) {
            gm_err_clear(err);
            rc = 0;
            r.stop = GM_STOP_CANCEL;
            r.prefill_s = now_s() - t0;
        }
        goto out;
    }
    r.n_prompt = n_prompt;
    r.prefill_s = now_s() - t0;
    if ((rc = gm_session_snapshot(s, err)))
        goto out;
    /* an output head wider than the vocabulary (padded rows) is sampled over the ids that print */
    const uint32_t V = s->n_logits < v->info.n_vocab ? s->n_logits : v->info.n_vocab;
    const gm_sampling *sp = &opts->sampling;
    gm_sample_opts so = {sp->temp, sp->top_k, sp->top_p, sp->min_p, sp->repeat_penalty, sp->penalty_last_n,
                         sp->seed};
    if ((rc = gm_sampler_create(&smp, V, &so, err)) ||
        (rc = gm_detokenizer_create(&dt, v, opts->render_special, err)))
        goto out;
    {
        const uint32_t pos = gm_session_pos(s), last_n = sp->penalty_last_n > 0 ? (uint32_t)sp->penalty_last_n : 0;
        for (uint32_t i = pos > last_n ? pos - last_n : 0; i < pos; i++)
            gm_sampler_accept(smp, s->toks[i]);
    }
    double t_first = 0;
    for (;;) {
        if (atomic_exchange(&s->cancel, 0)) {
            r.stop = GM_STOP_CANCEL;
            break;
        }
        const int32_t next = gm_sampler_sample(smp, logits);
        if (!opts->ignore_eog && gm_token_is_eog(v, next)) {
            r.stop = GM_STOP_EOG;
            r.stop_token = next;
            break;
        }
        bool is_stop = false;
        for (size_t i = 0; i < opts->n_stop_tokens; i++)
            is_stop |= opts->stop_tokens[i] == next;
        if (is_stop) {
            r.stop = GM_STOP_TOKEN;
            r.stop_token = next;
            break;
        }
        if (r.n_generated++ == 0) {
            t_first = now_s();
            r.ttft_s = t_first - t0;
        }
        gm_sampler_accept(smp, next);
        const char *text;
        size_t len;
        if ((rc = gm_detokenizer_push(dt, next, &text, &len, err)) || (rc = pending_add(&pend, text, len, err)))
            goto out;
        size_t at;
        const int hit = find_stop(&pend, opts, &at);
        if (hit >= 0) {
            emit(opts, next, &pend, at);
            pend.len = 0; /* the stop string and what follows it are left out */
            r.stop = GM_STOP_STRING;
            r.stop_string = hit;
            break;
        }
        if (!emit(opts, next, &pend, safe_len(&pend, opts))) {
            r.stop = GM_STOP_CALLBACK;
            break;
        }
        if (opts->max_tokens && r.n_generated >= opts->max_tokens) {
            r.stop = GM_STOP_LENGTH;
            break;
        }
        if (gm_session_pos(s) >= s->n_ctx) {
            r.stop = GM_STOP_CONTEXT;
            break;
        }
        rc = gm_session_eval_chunks(s, &next, 1, logits, false, err);
        if (rc == GM_ECANCELED) {
            gm_err_clear(err);
            rc = 0;
            r.stop = GM_STOP_CANCEL;
            break;
        }
        if (rc)
            goto out;
    }
    /* what is left: a held UTF-8 tail, text held for a stop string that did not come */
    if (r.stop != GM_STOP_STRING) {
        const char *text;
        size_t len;
        if ((rc = gm_detokenizer_flush(dt, &text, &len, err)) || (rc = pending_add(&pend, text, len, err)))
            goto out;
        if (pend.len)
            emit(opts, -1, &pend, pend.len);
    }
    r.decode_s = r.n_generated ? now_s() - t_first : 0;
    rc = gm_session_snapshot(s, err);
out:
    if (res)
        *res = r;
    free(pend.buf);
    free(logits);
    gm_detokenizer_free(dt);
    gm_sampler_free(smp);
    return rc;
}
