/* server/pool: the served models. Each has a worker thread that owns its gm_model and session:
 * it takes the model's queued requests one at a time, loads the model on first use (after
 * making room under the budget by unloading idle models, or waiting for one to become idle),
 * and unloads it when it has been idle for the configured time or another model needs the room. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "srv.h"

/* ---- jobs ---- */

srv_job *srv_job_new(void)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    return j;
}

void srv_job_ref(srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unref(srv_job *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left)
        return;
    free(j->model_name);
    free(j->tokens);
    for (size_t i = 0; i < j->n_stop; i++)
        free(j->stop[i]);
    free(j->stop);
    free(j->tools_json);
    sbuf_free(&j->out);
    sbuf_free(&j->content);
    sbuf_free(&j->reasoning);
    sbuf_free(&j->raw);
    sbuf_free(&j->gen);
    gm_tc_free(j->calls, j->n_calls);
    gm_think_free(j->think);
    gm_detokenizer_free(j->detok);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_fail(srv_job *j, int status, const char *type, const char *fmt, ...)
{
    if (j->status)
        return; /* the first error stays */
    j->status = status;
    snprintf(j->err_type, sizeof j->err_type, "%s", type);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err_msg, sizeof j->err_msg, fmt, ap);
    va_end(ap);
}

/* ---- loading and unloading (worker thread; pool lock NOT held unless said) ---- */

static void unload(srv_pool *p, srv_model *m, const char *why)
{
    pthread_mutex_lock(&p->lock);
    gm_model *mm = m->m;
    gm_session *s = m->s;
    pthread_mutex_unlock(&p->lock);
    if (!mm)
        return;
    char *stats = gm_model_stats_text(mm, GM_STATS_STREAM | GM_STATS_LEVERS);
    if (stats && stats[0]) {
        char *save = NULL;
        for (char *line = strtok_r(stats, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            srv_log("%s", line);
    }
    free(stats);
    pthread_mutex_lock(&p->lock);
    m->m = NULL; /* no reader (metrics) takes it from here on */
    m->s = NULL;
    pthread_mutex_unlock(&p->lock);
    gm_session_free(s);
    gm_model_free(mm);
    srv_log("[server] unloaded %s (%s)", m->id, why);
    /* the room is given back once the memory is */
    pthread_mutex_lock(&p->lock);
    p->resident_bytes -= m->fp.resident_bytes;
    pthread_cond_broadcast(&p->room_cv);
    pthread_mutex_unlock(&p->lock);
}

/* Makes room for m under the budget (pool lock held): asks idle models to unload and waits
 * until the room is there, or until timeout. Returns 0, or an HTTP status with the reason. */
static int make_room(srv_pool *p, srv_model *m, srv_job *j)
{
    const gm_srv_opts *o = p->opts;
    if (!o->budget_bytes)
        return 0;
    if (m->fp.resident_bytes > o->budget_bytes) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%.1f GB", (double)m->fp.resident_bytes / 1e9);
        snprintf(b, sizeof b, "%.1f GB", (double)o->budget_bytes / 1e9);
        srv_job_fail(j, 503, "model_too_large", "model '%s' needs %s, more than the server's whole budget of %s "
                     "(server.budget_gb)", m->id, a, b);
        return 503;
    }
    const double deadline = srv_now() + (o->queue_timeout_s > 0 ? o->queue_timeout_s : 600);
    bool said = false;
    while (p->resident_bytes + m->fp.resident_bytes > o->budget_bytes) {
        /* the least recently used idle model goes */
        srv_model *victim = NULL;
        for (size_t i = 0; i < p->n; i++) {
            srv_model *x = &p->models[i];
            if (x == m || !x->m || x->running || x->queued || x->unload_req || x->loading)
                continue;
            if (!victim || x->last_used < victim->last_used)
                victim = x;
        }
        if (victim) {
            victim->unload_req = true;
            pthread_cond_signal(&victim->cv);
        } else if (!said) {
            srv_log("[residency] %s deferred: it needs %.1f GB, %.1f GB of the %.1f GB budget are held by "
                    "busy models", m->id, (double)m->fp.resident_bytes / 1e9, (double)p->resident_bytes / 1e9,
                    (double)o->budget_bytes / 1e9);
            said = true;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&p->room_cv, &p->lock, &ts);
        if (srv_now() > deadline) {
            srv_job_fail(j, 503, "server_overloaded", "model '%s' could not be loaded: the budget (%.1f GB) is held "
                         "by models that stayed busy; retry later", m->id, (double)o->budget_bytes / 1e9);
            j->retry_after_s = 30;
            return 503;
        }
        pthread_mutex_lock(&j->mu);
        bool gone = j->canceled;
        pthread_mutex_unlock(&j->mu);
        if (gone)
            return 499;
    }
    return 0;
}

/* Unloads the least recently used other loaded model, waiting while all of them are busy (up to
 * the queue timeout). False when no other model is loaded, or the wait ran out. */
static bool evict_one(srv_pool *p, srv_model *m, srv_job *j)
{
    const double deadline = srv_now() + (p->opts->queue_timeout_s > 0 ? p->opts->queue_timeout_s : 600);
    pthread_mutex_lock(&p->lock);
    bool any = false, said = false;
    for (;;) {
        srv_model *victim = NULL;
        any = false;
        for (size_t i = 0; i < p->n; i++) {
            srv_model *x = &p->models[i];
            if (x == m || !x->m)
                continue;
            any = true;
            if (x->running || x->queued || x->unload_req || x->loading)
                continue;
            if (!victim || x->last_used < victim->last_used)
                victim = x;
        }
        if (!any)
            break;
        if (victim) {
            victim->unload_req = true;
            pthread_cond_signal(&victim->cv);
            while (victim->m && srv_now() < deadline) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 1;
                pthread_cond_timedwait(&p->room_cv, &p->lock, &ts);
            }
            break;
        }
        if (!said) {
            srv_log("[residency] %s deferred: the memory free now does not hold it beside the busy models", m->id);
            said = true;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&p->room_cv, &p->lock, &ts);
        pthread_mutex_lock(&j->mu);
        bool gone = j->canceled;
        pthread_mutex_unlock(&j->mu);
        if (gone || srv_now() > deadline) {
            any = false;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return any;
}

static int load(srv_pool *p, srv_model *m, srv_job *j)
{
    pthread_mutex_lock(&p->lock);
    if (m->m) {
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    int rc = make_room(p, m, j);
    if (rc) {
        pthread_mutex_unlock(&p->lock);
        return rc;
    }
    p->resident_bytes += m->fp.resident_bytes; /* reserved while it loads */
    m->loading = true;
    pthread_mutex_unlock(&p->lock);
    srv_log("[server] loading %s (%s)", m->id, m->cfg->path);
    if (m->cfg->mopts.placement == GM_PLACE_EXPERTS)
        srv_log("[stream] %s: its experts stream as its entry asks (stream: experts); the plan for this machine "
                "says %s", m->id, m->fp.verdict);
    const double t0 = srv_now();
    gm_model *mm = NULL;
    gm_session *s = NULL;
    gm_err err = {0};
    rc = gm_model_load(&mm, m->cfg->path, &m->cfg->mopts, &err);
    for (int tries = 0; rc == GM_ENOSPACE && tries < 8 && evict_one(p, m, j); tries++) {
        /* the memory free now does not hold it beside the other loaded models: one of them
         * gives its room back (or finishes first), then the load is tried again */
        memset(&err, 0, sizeof err);
        rc = gm_model_load(&mm, m->cfg->path, &m->cfg->mopts, &err);
    }
    if (rc == 0)
        rc = gm_session_create(&s, mm, NULL, &err);
    pthread_mutex_lock(&p->lock);
    m->loading = false;
    if (rc) {
        p->resident_bytes -= m->fp.resident_bytes;
        pthread_cond_broadcast(&p->room_cv);
        pthread_mutex_unlock(&p->lock);
        gm_model_free(mm);
        srv_job_fail(j, rc == GM_ENOSPACE ? 503 : 500, rc == GM_ENOSPACE ? "server_overloaded" : "server_error",
                     "model '%s' could not be loaded: %s", m->id, err.msg);
        if (rc == GM_ENOSPACE)
            j->retry_after_s = 30;
        srv_log("[server] loading %s failed: %s", m->id, err.msg);
        return 500;
    }
    m->m = mm;
    m->s = s;
    pthread_mutex_unlock(&p->lock);
    srv_log("[server] loaded %s in %.1f s (%.1f GB resident%s)", m->id, srv_now() - t0,
            (double)m->fp.resident_bytes / 1e9, m->fp.streams ? ", experts streamed" : "");
    return 0;
}

/* ---- generating (worker thread) ---- */

static void on_span(void *user, bool reasoning, const char *text, size_t len)
{
    srv_job *j = user;
    if (!len)
        return;
    if (reasoning) {
        sbuf_add(&j->reasoning, text, len);
        if (j->stream)
            srv_stream_delta(j, true, text, len);
        return;
    }
    sbuf_add(&j->raw, text, len);
    if (!j->stream)
        return;
    /* content goes out as it comes, except what may be the start of tool-call markup */
    const gm_tc_format tc = j->model->tc;
    size_t safe = tc != GM_TC_NONE && tc != GM_TC_HARMONY && j->tools_json ? gm_tc_safe_prefix(tc, j->raw.p, j->raw.len)
                                                                           : j->raw.len;
    if (safe > j->shown) {
        srv_stream_delta(j, false, j->raw.p + j->shown, safe - j->shown);
        j->shown = safe;
    }
}

static bool on_token(void *user, int32_t token, const char *text, size_t len)
{
    srv_job *j = user;
    (void)token;
    pthread_mutex_lock(&j->mu);
    if (!j->t_first)
        j->t_first = srv_now();
    bool go = !j->canceled;
    if (go && len) {
        if (j->model->tc == GM_TC_HARMONY && j->tools_json)
            sbuf_add(&j->gen, text, len);
        gm_think_push(j->think, text, len, on_span, j);
    }
    if (go)
        pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return go;
}

static void run_job(srv_pool *p, srv_model *m, srv_job *j)
{
    gm_err err = {0};
    pthread_mutex_lock(&j->mu);
    j->started = true;
    bool gone = j->canceled;
    pthread_mutex_unlock(&j->mu);
    if (gone || load(p, m, j) != 0)
        return;
    const uint32_t n_ctx = gm_session_n_ctx(m->s);
    if (j->n_tokens >= n_ctx) {
        pthread_mutex_lock(&j->mu);
        srv_job_fail(j, 400, "context_length_exceeded", "the prompt is %zu tokens and the model's context holds %u "
                     "(start the server with a larger -c)", j->n_tokens, n_ctx);
        pthread_mutex_unlock(&j->mu);
        return;
    }
    uint32_t keep = 0;
    if (gm_session_reuse(m->s, j->tokens, (uint32_t)j->n_tokens, &keep, &err) != 0) {
        gm_session_reset(m->s);
        keep = 0;
        memset(&err, 0, sizeof err);
    }
    /* max_tokens clamped to what the context has left */
    uint32_t room = n_ctx - (uint32_t)j->n_tokens;
    uint32_t max = j->max_tokens ? j->max_tokens : m->cfg->max_tokens;
    if (!max || max > room)
        max = room;
    gm_generate_opts go;
    gm_generate_opts_default(&go);
    go.sampling = j->sampling;
    go.max_tokens = max;
    go.ignore_eog = j->ignore_eos;
    go.stop = (const char *const *)j->stop;
    go.n_stop = j->n_stop;
    go.render_special = m->style != GM_THINK_NONE || (j->tools_json && m->tc != GM_TC_NONE);
    go.on_token = on_token;
    go.user = j;
    if (gm_think_create(&j->think, j->api == API_COMPLETION ? GM_THINK_NONE : m->style, j->think_inside, &err) != 0) {
        pthread_mutex_lock(&j->mu);
        srv_job_fail(j, 500, "server_error", "%s", err.msg);
        pthread_mutex_unlock(&j->mu);
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->n_prompt = (uint32_t)j->n_tokens;
    if (j->stream)
        srv_stream_begin(j);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    int rc = gm_session_generate(m->s, j->tokens + keep, (uint32_t)(j->n_tokens - keep), &go, &j->res, &err);
    pthread_mutex_lock(&j->mu);
    j->t_end = srv_now();
    if (rc != 0) {
        srv_job_fail(j, rc == GM_ERANGE ? 400 : 500, rc == GM_ERANGE ? "context_length_exceeded" : "server_error",
                     "%s", err.msg);
        gm_session_reset(m->s); /* a failed generation leaves no half state for the next one */
    } else {
        gm_think_flush(j->think, on_span, j);
        /* tool calls from the whole answer; the content outside them */
        char *content = NULL;
        gm_err terr = {0};
        if (j->tools_json && m->tc == GM_TC_HARMONY) {
            /* the calls are in the commentary channel: parsed from the text with its markers;
             * the answer is the final channel's, as the split gave it */
            if (gm_tc_parse(m->tc, j->gen.p ? j->gen.p : "", j->gen.len, j->tools_json, &content, &j->calls,
                            &j->n_calls, &terr) != 0)
                j->n_calls = 0;
            sbuf_add(&j->content, j->raw.p ? j->raw.p : "", j->raw.len);
        } else if (j->tools_json && m->tc != GM_TC_NONE &&
                   gm_tc_parse(m->tc, j->raw.p ? j->raw.p : "", j->raw.len, j->tools_json, &content, &j->calls,
                               &j->n_calls, &terr) == 0) {
            sbuf_adds(&j->content, content);
        } else {
            sbuf_add(&j->content, j->raw.p ? j->raw.p : "", j->raw.len);
        }
        free(content);
        if (j->stream) {
            /* what was held back as possible markup and turned out to be text */
            if (j->content.len > j->shown && (j->shown == 0 || memcmp(j->content.p, j->raw.p, j->shown) == 0))
                srv_stream_delta(j, false, j->content.p + j->shown, j->content.len - j->shown);
            srv_stream_end(j);
        }
    }
    pthread_mutex_unlock(&j->mu);
}

typedef struct worker_arg {
    srv_pool *p;
    srv_model *m;
} worker_arg;

static void *worker_main(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    srv_pool *p = wa.p;
    srv_model *m = wa.m;
    const double idle = p->opts->idle_unload_s;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!m->head && !m->quit && !m->unload_req) {
            if (m->m && idle > 0) {
                double wait = m->last_used + idle - srv_now();
                if (wait <= 0) {
                    m->unload_req = true;
                    break;
                }
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += (time_t)wait + 1;
                pthread_cond_timedwait(&m->cv, &p->lock, &ts);
            } else {
                pthread_cond_wait(&m->cv, &p->lock);
            }
        }
        if (m->unload_req || (m->quit && !m->head)) {
            const bool quit = m->quit;
            const bool idle_out = !quit && idle > 0 && m->last_used + idle <= srv_now() && m->m;
            m->unload_req = false;
            pthread_mutex_unlock(&p->lock);
            unload(p, m, quit ? "the server stops" : idle_out ? "idle" : "another model needs the room");
            pthread_mutex_lock(&p->lock);
            if (quit)
                break;
            continue;
        }
        srv_job *j = m->head;
        m->head = j->next;
        if (!m->head)
            m->tail = NULL;
        m->queued--;
        m->running = j;
        pthread_mutex_unlock(&p->lock);
        run_job(p, m, j);
        gm_stats st = {0};
        if (m->m) /* this thread owns the model: no one frees it meanwhile */
            gm_model_get_stats(m->m, &st);
        if (!j->t_end)
            j->t_end = srv_now();
        srv_metrics_generation(j); /* counted before the answer goes out */
        pthread_mutex_lock(&j->mu);
        j->done = true;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        srv_job_unref(j);
        pthread_mutex_lock(&p->lock);
        m->running = NULL;
        m->stats = st;
        m->last_used = srv_now();
        pthread_cond_broadcast(&p->room_cv);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- the pool ---- */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    sbuf b = {0};
    char tmp[65536];
    size_t r;
    while ((r = fread(tmp, 1, sizeof tmp, f)) > 0)
        sbuf_add(&b, tmp, r);
    fclose(f);
    if (b.oom) {
        sbuf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.p ? b.p : calloc(1, 1);
}

int srv_pool_open(srv_pool *p, const gm_srv_opts *o, gm_err *err)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->room_cv, NULL);
    p->opts = o;
    p->models = calloc(o->n_models ? o->n_models : 1, sizeof *p->models);
    if (!p->models) {
        srv_err(err, GM_ENOMEM, "out of memory");
        return GM_ENOMEM;
    }
    p->n = o->n_models;
    for (size_t i = 0; i < p->n; i++) {
        srv_model *m = &p->models[i];
        const gm_srv_model_cfg *c = &o->models[i];
        m->cfg = c;
        m->id = strdup(c->id);
        pthread_cond_init(&m->cv, NULL);
        int rc = gm_vocab_open(&m->vocab, c->path, err);
        if (rc == 0)
            rc = gm_model_footprint_of(c->path, &c->mopts, &m->fp, err);
        if (rc) {
            srv_pool_close(p);
            return rc;
        }
        if (c->mopts.placement == GM_PLACE_EXPERTS) {
            /* the seed's stale-entry warning: stream: experts where the plan would keep them */
            gm_model_opts autop = c->mopts;
            gm_model_footprint fa;
            gm_err ferr = {0};
            autop.placement = GM_PLACE_AUTO;
            if (gm_model_footprint_of(c->path, &autop, &fa, &ferr) == 0 && !fa.streams)
                srv_log("[server] warning: %s has stream: experts, but its experts fit in memory on this machine now "
                        "(%s); gmlx sync-models drops the key", c->id, fa.verdict);
        }
        struct stat st;
        m->created = stat(c->path, &st) == 0 ? (int64_t)st.st_mtime : 0;
        size_t len = 0;
        if (c->template_file) {
            if (!(m->tmpl_src = read_file(c->template_file, &len))) {
                srv_err(err, GM_EIO, "%s: cannot read the chat template file", c->template_file);
                srv_pool_close(p);
                return GM_EIO;
            }
        } else if (gm_vocab_get_info(m->vocab)->chat_template) {
            m->tmpl_src = strdup(gm_vocab_get_info(m->vocab)->chat_template);
            len = strlen(m->tmpl_src);
        }
        if (m->tmpl_src && (rc = gm_template_parse(&m->tmpl, m->tmpl_src, len, err)) != 0) {
            srv_pool_close(p);
            return rc;
        }
        m->style = gm_vocab_think_style(m->vocab);
        m->tc = m->tmpl_src ? gm_tc_detect(m->tmpl_src, gm_vocab_get_info(m->vocab)->arch) : GM_TC_NONE;
        worker_arg *wa = malloc(sizeof *wa);
        if (wa)
            *wa = (worker_arg){p, m};
        if (!wa || pthread_create(&m->thread, NULL, worker_main, wa) != 0) {
            free(wa);
            srv_err(err, GM_ENOMEM, "cannot start a worker thread");
            srv_pool_close(p);
            return GM_ENOMEM;
        }
        m->thread_started = true;
    }
    return 0;
}

void srv_pool_stop(srv_pool *p)
{
    for (size_t i = 0; i < p->n; i++) {
        srv_model *m = &p->models[i];
        if (m->thread_started) {
            pthread_mutex_lock(&p->lock);
            m->quit = true;
            if (m->running) {
                pthread_mutex_lock(&m->running->mu);
                m->running->canceled = true;
                pthread_mutex_unlock(&m->running->mu);
                if (m->s)
                    gm_session_cancel(m->s);
            }
            /* requests still queued are answered as failed */
            srv_job *j = m->head;
            m->head = m->tail = NULL;
            m->queued = 0;
            pthread_cond_signal(&m->cv);
            pthread_mutex_unlock(&p->lock);
            while (j) {
                srv_job *next = j->next;
                pthread_mutex_lock(&j->mu);
                srv_job_fail(j, 503, "server_shutting_down", "the server is stopping");
                j->done = true;
                pthread_cond_broadcast(&j->cv);
                pthread_mutex_unlock(&j->mu);
                srv_job_unref(j);
                j = next;
            }
            pthread_join(m->thread, NULL);
            m->thread_started = false;
        }
    }
}

void srv_pool_close(srv_pool *p)
{
    srv_pool_stop(p);
    for (size_t i = 0; i < p->n; i++) {
        srv_model *m = &p->models[i];
        gm_template_free(m->tmpl);
        free(m->tmpl_src);
        gm_vocab_free(m->vocab);
        free(m->id);
        pthread_cond_destroy(&m->cv);
    }
    free(p->models);
    p->models = NULL;
    p->n = 0;
}

srv_model *srv_pool_find(srv_pool *p, const char *name)
{
    if (!p->n)
        return NULL;
    if (name && *name) {
        for (size_t i = 0; i < p->n; i++) {
            const gm_srv_model_cfg *c = p->models[i].cfg;
            if (strcmp(c->id, name) == 0)
                return &p->models[i];
            for (size_t k = 0; k < c->n_aliases; k++)
                if (strcmp(c->aliases[k], name) == 0)
                    return &p->models[i];
        }
        if (p->n > 1)
            return NULL;
    }
    /* one model served: every name reaches it (clients send their own default names) */
    return p->n == 1 ? &p->models[0] : &p->models[p->opts->default_model < p->n ? p->opts->default_model : 0];
}

bool srv_pool_submit(srv_pool *p, srv_job *j)
{
    srv_model *m = j->model;
    pthread_mutex_lock(&p->lock);
    if (m->queued >= p->opts->queue_cap && (m->running || m->queued)) {
        size_t depth = m->queued;
        pthread_mutex_unlock(&p->lock);
        srv_job_fail(j, 503, "server_overloaded", "server queue is full: %zu requests waiting for '%s', cap %u; retry "
                     "after a few seconds", depth, m->id, p->opts->queue_cap);
        j->retry_after_s = 2 + (double)depth;
        return false;
    }
    srv_job_ref(j); /* the worker's */
    j->next = NULL;
    if (m->tail)
        m->tail->next = j;
    else
        m->head = j;
    m->tail = j;
    m->queued++;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&p->lock);
    return true;
}

void srv_pool_cancel(srv_pool *p, srv_job *j)
{
    pthread_mutex_lock(&p->lock);
    pthread_mutex_lock(&j->mu);
    const bool was = j->canceled;
    j->canceled = true;
    pthread_mutex_unlock(&j->mu);
    srv_model *m = j->model;
    if (m->running == j && m->s)
        gm_session_cancel(m->s);
    /* a queued job leaves the queue at once */
    srv_job **pp = &m->head, *prev = NULL;
    while (*pp && *pp != j) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    bool dequeued = false;
    if (*pp == j) {
        *pp = j->next;
        if (m->tail == j)
            m->tail = prev;
        m->queued--;
        dequeued = true;
    }
    pthread_mutex_unlock(&p->lock);
    if (!was)
        srv_metrics_canceled();
    if (dequeued) {
        pthread_mutex_lock(&j->mu);
        j->done = true;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        srv_job_unref(j); /* the worker's reference */
    }
}
