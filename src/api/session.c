/* The public session API: a forward state with its token history, rewinding (in place, or from
 * a snapshot of the rings and recurrent states), prompt reuse and chunked evaluation (gmlx.h
 * "sessions"). */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/err.h"

#define DEFAULT_SNAPSHOTS 4u

void gm_session_opts_default(gm_session_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kv_type = -1;
}

int gm_session_create(gm_session **out, gm_model *m, const gm_session_opts *opts, gm_err *err)
{
    *out = NULL;
    gm_session_opts def;
    if (!opts) {
        gm_session_opts_default(&def);
        opts = &def;
    }
    if (opts->kv_type < -1 || opts->kv_type > GM_KV_Q8_0)
        return gm_err_set(err, GM_EINVAL, "KV cache type %d is not one of f32, f16, q8_0", opts->kv_type);
    gm_session *s = calloc(1, sizeof *s);
    if (!s)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    s->m = m;
    s->n_ctx = opts->n_ctx ? opts->n_ctx : m->info.n_ctx;
    const gm_kv_type kv = opts->kv_type < 0 ? m->info.kv_type : (gm_kv_type)opts->kv_type;
    atomic_init(&s->cancel, 0);
    gm_model_lock(m);
    int rc = gm_fwd_create(&s->f, m->e, s->n_ctx, kv, err);
    gm_model_unlock(m);
    if (rc) {
        free(s);
        return rc;
    }
    gm_fwd_set_cancel(s->f, &s->cancel);
    s->n_logits = gm_engine_n_vocab(m->e);
    s->state_bytes = gm_fwd_state_bytes(s->f);
    s->n_snaps = opts->n_snapshots ? opts->n_snapshots : DEFAULT_SNAPSHOTS;
    s->toks = malloc((uint64_t)s->n_ctx * sizeof *s->toks);
    s->snaps = calloc(s->n_snaps, sizeof *s->snaps);
    if (!s->toks || !s->snaps) {
        gm_session_free(s);
        return gm_err_set(err, GM_ENOMEM, "out of memory for a session of %u tokens", s->n_ctx);
    }
    *out = s;
    return 0;
}

void gm_session_free(gm_session *s)
{
    if (!s)
        return;
    if (s->f) {
        gm_model_lock(s->m);
        gm_fwd_free(s->f);
        gm_model_unlock(s->m);
    }
    for (uint32_t i = 0; s->snaps && i < s->n_snaps; i++)
        free(s->snaps[i].buf);
    free(s->snaps);
    free(s->toks);
    free(s);
}

static void drop_snapshots_after(gm_session *s, uint32_t pos)
{
    for (uint32_t i = 0; i < s->n_snaps; i++)
        if (s->snaps[i].used && s->snaps[i].pos > pos)
            s->snaps[i].used = false;
}

void gm_session_reset(gm_session *s)
{
    gm_fwd_reset(s->f);
    drop_snapshots_after(s, 0);
    for (uint32_t i = 0; i < s->n_snaps; i++)
        s->snaps[i].used = false;
}

uint32_t gm_session_pos(const gm_session *s) { return gm_fwd_pos(s->f); }
uint32_t gm_session_n_ctx(const gm_session *s) { return s->n_ctx; }
uint32_t gm_session_n_logits(const gm_session *s) { return s->n_logits; }

const int32_t *gm_session_tokens(const gm_session *s, uint32_t *n)
{
    *n = gm_fwd_pos(s->f);
    return s->toks;
}

void gm_session_cancel(gm_session *s) { atomic_store(&s->cancel, 1); }

/* A cancel seen: consumed, so that it stops one call. */
static bool take_cancel(gm_session *s) { return atomic_exchange(&s->cancel, 0) != 0; }

/* One chunk, the lock held. */
static int eval_one(gm_session *s, const int32_t *tokens, uint32_t n, float *logits, bool all, gm_err *err)
{
    const uint32_t pos = gm_fwd_pos(s->f);
    int rc = gm_fwd_eval(s->f, tokens, n, logits, all, err);
    if (rc == GM_ECANCELED)
        take_cancel(s);
    if (rc == 0)
        memcpy(s->toks + pos, tokens, (uint64_t)n * sizeof *tokens);
    return rc;
}

/* Evaluates the history's tokens from the position to pos again, the lock held. */
static int replay(gm_session *s, uint32_t pos, gm_err *err)
{
    const uint32_t step = gm_fwd_max_chunk(s->f);
    while (gm_fwd_pos(s->f) < pos) {
        const uint32_t at = gm_fwd_pos(s->f), m = pos - at < step ? pos - at : step;
        int rc = eval_one(s, s->toks + at, m, NULL, false, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* The state at pos (<= the position), the lock held: in place when the caches allow it, else
 * from the nearest snapshot at or before pos (or from the start) and the tokens between
 * evaluated again. */
static int restore(gm_session *s, uint32_t pos, gm_err *err)
{
    drop_snapshots_after(s, pos);
    if (gm_fwd_can_rewind(s->f, pos)) {
        gm_fwd_rewind(s->f, pos);
        return 0;
    }
    const gm_snapshot *best = NULL;
    for (uint32_t i = 0; i < s->n_snaps; i++)
        if (s->snaps[i].used && s->snaps[i].pos <= pos && (!best || s->snaps[i].pos > best->pos))
            best = &s->snaps[i];
    if (best)
        gm_fwd_state_load(s->f, best->buf, best->pos);
    else
        gm_fwd_reset(s->f);
    return replay(s, pos, err);
}

int gm_session_rewind(gm_session *s, uint32_t pos, gm_err *err)
{
    if (pos > gm_fwd_pos(s->f))
        return gm_err_set(err, GM_EINVAL, "cannot rewind to position %u: the session holds %u tokens", pos,
                          gm_fwd_pos(s->f));
    gm_model_lock(s->m);
    int rc = restore(s, pos, err);
    gm_model_unlock(s->m);
    return rc;
}

int gm_session_reuse(gm_session *s, const int32_t *tokens, uint32_t n, uint32_t *n_keep, gm_err *err)
{
    *n_keep = 0;
    const uint32_t have = gm_fwd_pos(s->f);
    uint32_t k = 0;
    while (k < have && k < n && s->toks[k] == tokens[k])
        k++;
    if (n && k >= n)
        k = n - 1; /* the last prompt token is evaluated again for its logits */
    int rc = gm_session_rewind(s, k, err);
    if (rc == 0)
        *n_keep = k;
    return rc;
}

/* A snapshot of the state at the position, the lock held and the state whole. */
static int snapshot_locked(gm_session *s, gm_err *err)
{
    if (!s->state_bytes || !gm_fwd_whole(s->f))
        return 0;
    const uint32_t pos = gm_fwd_pos(s->f);
    gm_snapshot *slot = NULL, *oldest = NULL, *empty = NULL;
    for (uint32_t i = 0; i < s->n_snaps; i++) {
        gm_snapshot *c = &s->snaps[i];
        if (c->used && c->pos == pos)
            slot = c; /* refreshed */
        else if (!c->used && !empty)
            empty = c;
        else if (c->used && (!oldest || c->age < oldest->age))
            oldest = c;
    }
    slot = slot ? slot : empty ? empty : oldest;
    if (!slot->buf && !(slot->buf = malloc(s->state_bytes)))
        return gm_err_set(err, GM_ENOMEM, "out of memory for a %.1f MB session snapshot", (double)s->state_bytes / 1e6);
    gm_fwd_state_save(s->f, slot->buf);
    slot->used = true;
    slot->pos = pos;
    slot->age = ++s->age;
    return 0;
}

int gm_session_snapshot(gm_session *s, gm_err *err)
{
    gm_model_lock(s->m);
    int rc = snapshot_locked(s, err);
    gm_model_unlock(s->m);
    return rc;
}

int gm_session_eval_chunks(gm_session *s, const int32_t *tokens, uint32_t n, float *logits, bool all, gm_err *err)
{
    if ((uint64_t)gm_fwd_pos(s->f) + n > s->n_ctx)
        return gm_err_set(err, GM_ERANGE, "the context is full: %u tokens and %u more do not fit in %u",
                          gm_fwd_pos(s->f), n, s->n_ctx);
    const uint32_t step = gm_fwd_max_chunk(s->f);
    for (uint32_t at = 0; at < n;) {
        if (take_cancel(s))
            return gm_err_set(err, GM_ECANCELED, "canceled");
        const uint32_t m = n - at < step ? n - at : step;
        float *out = !logits ? NULL : all ? logits + (uint64_t)at * s->n_logits : at + m == n ? logits : NULL;
        gm_model_lock(s->m);
        int rc = 0;
        if (!gm_fwd_whole(s->f)) /* a canceled call left part of a chunk behind */
            rc = restore(s, gm_fwd_pos(s->f), err);
        if (rc == 0)
            rc = eval_one(s, tokens + at, m, out, all, err);
        gm_model_unlock(s->m);
        if (rc)
            return rc;
        at += m;
    }
    return 0;
}

int gm_session_eval(gm_session *s, const int32_t *tokens, uint32_t n, float *logits, bool all_logits, gm_err *err)
{
    return gm_session_eval_chunks(s, tokens, n, logits, all_logits, err);
}
