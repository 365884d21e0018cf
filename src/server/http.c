/* server/http: the HTTP side (libmicrohttpd, a thread per connection): routes, body and header
 * limits, the API key, error bodies, non-streamed answers and server-sent event streams, the
 * request log line; and gm_srv_run, which binds the address and serves until told to stop. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api.h"

#define SSE_BLOCK 4096

typedef enum route {
    R_NONE = 0,
    R_HEALTH,
    R_MODELS,
    R_METRICS,
    R_CHAT,
    R_COMPLETIONS,
    R_MESSAGES,
    R_COUNT_TOKENS,
} route;

static const struct {
    const char *path;
    const char *method;
    route r;
} k_routes[] = {
    {"/health", "GET", R_HEALTH},
    {"/v1/health", "GET", R_HEALTH},
    {"/v1/models", "GET", R_MODELS},
    {"/models", "GET", R_MODELS},
    {"/metrics", "GET", R_METRICS},
    {"/v1/metrics", "GET", R_METRICS},
    {"/v1/chat/completions", "POST", R_CHAT},
    {"/chat/completions", "POST", R_CHAT},
    {"/v1/completions", "POST", R_COMPLETIONS},
    {"/completions", "POST", R_COMPLETIONS},
    {"/v1/messages", "POST", R_MESSAGES},
    {"/v1/messages/count_tokens", "POST", R_COUNT_TOKENS},
};

/* Deadlines on connections (a slow client's bytes keep MHD's inactivity timeout from firing):
 * a request's headers must arrive within HEADER_S of the connection's start (or of the previous
 * answer), its body within BODY_S; the watchdog shuts down a socket that misses one. */
#define HEADER_S 15.0
#define BODY_S 120.0

typedef struct conn_watch {
    struct conn_watch *next, *prev;
    int fd;
    double deadline; /* 0: none (a request being answered) */
} conn_watch;

typedef struct server {
    const gm_srv_opts *o;
    srv_pool pool;
    struct MHD_Daemon *d;
    pthread_mutex_t wmu;
    conn_watch *watch;
    pthread_t wd;
    volatile int wd_stop;
} server;

static void set_deadline(server *s, struct MHD_Connection *c, double in_s)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_watch *w = ci ? ci->socket_context : NULL;
    if (!w)
        return;
    pthread_mutex_lock(&s->wmu);
    w->deadline = in_s > 0 ? srv_now() + in_s : 0;
    pthread_mutex_unlock(&s->wmu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_watch *w = ci ? calloc(1, sizeof *w) : NULL;
        if (!w)
            return;
        w->fd = ci->connect_fd;
        w->deadline = srv_now() + HEADER_S;
        pthread_mutex_lock(&s->wmu);
        w->next = s->watch;
        if (s->watch)
            s->watch->prev = w;
        s->watch = w;
        pthread_mutex_unlock(&s->wmu);
        *socket_context = w;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        conn_watch *w = *socket_context;
        pthread_mutex_lock(&s->wmu);
        if (w->prev)
            w->prev->next = w->next;
        else
            s->watch = w->next;
        if (w->next)
            w->next->prev = w->prev;
        pthread_mutex_unlock(&s->wmu);
        free(w);
        *socket_context = NULL;
    }
}

static void *watchdog(void *arg)
{
    server *s = arg;
    while (!s->wd_stop) {
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
        const double now = srv_now();
        int slow = 0;
        pthread_mutex_lock(&s->wmu);
        for (conn_watch *w = s->watch; w; w = w->next)
            if (w->deadline && now > w->deadline) {
                shutdown(w->fd, SHUT_RDWR); /* MHD's read fails and it closes the connection */
                w->deadline = 0;
                slow++;
            }
        pthread_mutex_unlock(&s->wmu);
        if (slow)
            srv_log("[http] closed %d connection(s) that sent a request too slowly (headers in %.0f s, body in %.0f s)",
                    slow, HEADER_S, BODY_S);
    }
    return NULL;
}

/* One request's state across the handler's calls. */
typedef struct req {
    route r;
    const char *path;
    sbuf body;
    bool too_large;
    bool answered;
    bool logged;       /* its [req] line is written */
    double t0;
} req;

/* ---- responses ---- */

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type, const char *body,
                                 double retry_after_s)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    if (retry_after_s > 0) {
        char ra[32];
        snprintf(ra, sizeof ra, "%.0f", retry_after_s < 1 ? 1 : retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, char *json /* freed */)
{
    enum MHD_Result rc = send_text(c, status, "application/json", json ? json : "{}", 0);
    free(json);
    return rc;
}

static srv_api api_of(route r) { return r == R_MESSAGES || r == R_COUNT_TOKENS ? API_MESSAGES : API_CHAT; }

static void log_refusal(const req *q, int status, const char *msg)
{
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
    srv_log("[req] %s %s - failed %d %s", ts, q->path ? q->path : "-", status, msg);
}

static enum MHD_Result send_error(struct MHD_Connection *c, req *q, int status, const char *type, const char *msg,
                                  double retry_after_s)
{
    if (!q->logged) {
        log_refusal(q, status, msg);
        q->logged = true;
    }
    char *e = srv_error_json(api_of(q->r), status, type, msg, NULL);
    enum MHD_Result rc = send_text(c, status, "application/json", e ? e : "{}", retry_after_s);
    free(e);
    srv_metrics_request(q->path, status);
    q->answered = true;
    return rc;
}

/* ---- the request log line ---- */

static void log_request(const srv_job *j)
{
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
    if (j->status) {
        srv_log("[req] %s %s %s failed %d %s", ts, j->route, j->model ? j->model->id : "-", j->status, j->err_msg);
        return;
    }
    const gm_generate_result *r = &j->res;
    char pre[32] = "-", dec[32] = "-";
    if (r->prefill_s > 0 && r->n_prompt)
        snprintf(pre, sizeof pre, "%.0f", (double)r->n_prompt / r->prefill_s);
    if (r->decode_s > 0 && r->n_generated > 1)
        snprintf(dec, sizeof dec, "%.1f", (double)(r->n_generated - 1) / r->decode_s);
    const char *finish = j->canceled ? "canceled" : srv_finish_reason(j);
    srv_log("[req] %s %s %s prompt=%u gen=%u ttft=%.2fs prefill=%st/s decode=%st/s total=%.2fs%s%s", ts, j->route,
            j->model->id, j->n_prompt, r->n_generated, r->ttft_s, pre, dec, j->t_end - j->t_start,
            strcmp(finish, "stop") ? " finish=" : "", strcmp(finish, "stop") ? finish : "");
}

/* ---- waiting for a job while watching the client ---- */

/* Whether the client of c has closed its end (a read would give EOF or an error). */
static bool client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Waits on j->cv (j->mu held) for at most s seconds. */
static void wait_job(srv_job *j, double s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(s * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* ---- streams ---- */

typedef struct stream {
    server *s;
    srv_job *j;
    struct MHD_Connection *c;
    size_t sent;          /* of j->out */
    double last_write;
    bool error_sent, logged;
} stream;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream *st = cls;
    srv_job *j = st->j;
    (void)pos;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (st->sent < j->out.len) {
            size_t n = j->out.len - st->sent < max ? j->out.len - st->sent : max;
            memcpy(buf, j->out.p + st->sent, n);
            st->sent += n;
            if (st->sent == j->out.len)
                st->sent = j->out.len = 0;
            st->last_write = srv_now();
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->done) {
            if (j->status && !st->error_sent) {
                st->error_sent = true;
                srv_stream_error(j);
                continue;
            }
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        wait_job(j, 0.2);
        if (j->done || st->sent < j->out.len)
            continue;
        const double ka = st->s->o->keepalive_s;
        if (ka > 0 && srv_now() - st->last_write >= ka) {
            sbuf_adds(&j->out, ": keepalive\n\n");
            continue;
        }
        pthread_mutex_unlock(&j->mu);
        bool gone = client_gone(st->c);
        pthread_mutex_lock(&j->mu);
        if (gone) {
            pthread_mutex_unlock(&j->mu);
            srv_pool_cancel(&st->s->pool, j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls)
{
    stream *st = cls;
    srv_job *j = st->j;
    pthread_mutex_lock(&j->mu);
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    if (!done) { /* the connection closed before the end: stop the generation */
        srv_pool_cancel(&st->s->pool, j);
        pthread_mutex_lock(&j->mu);
        while (!j->done)
            wait_job(j, 0.2);
        pthread_mutex_unlock(&j->mu);
    }
    srv_metrics_request(j->route, j->status && !j->started ? j->status : 200);
    log_request(j);
    srv_job_unref(j);
    free(st);
}

/* ---- the generation routes ---- */

static enum MHD_Result generate(server *s, struct MHD_Connection *c, req *q, json_t *body)
{
    srv_job *j = srv_job_new();
    if (!j)
        return send_error(c, q, 500, "server_error", "out of memory", 0);
    j->t_start = srv_now();
    bool ok = q->r == R_CHAT          ? srv_openai_parse_chat(&s->pool, body, j)
              : q->r == R_COMPLETIONS ? srv_openai_parse_completion(&s->pool, body, j)
                                      : srv_anthropic_parse(&s->pool, body, j, q->r == R_COUNT_TOKENS);
    if (!ok || j->status) {
        enum MHD_Result rc = send_error(c, q, j->status ? j->status : 400, j->err_type, j->err_msg, 0);
        srv_job_unref(j);
        return rc;
    }
    if (q->r == R_COUNT_TOKENS) {
        char out[64];
        snprintf(out, sizeof out, "{\"input_tokens\":%zu}", j->n_tokens);
        srv_job_unref(j);
        srv_metrics_request(q->path, 200);
        q->answered = true;
        return send_text(c, 200, "application/json", out, 0);
    }
    if (!srv_pool_submit(&s->pool, j)) {
        enum MHD_Result rc = send_error(c, q, j->status, j->err_type, j->err_msg, j->retry_after_s);
        srv_log("[server] queue full: rejected a request for %s (retry after %.0f s)", j->model->id, j->retry_after_s);
        srv_job_unref(j);
        return rc;
    }
    if (j->stream) {
        stream *st = calloc(1, sizeof *st);
        struct MHD_Response *resp =
            st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, stream_read, st, stream_free) : NULL;
        if (!resp) {
            free(st);
            srv_pool_cancel(&s->pool, j);
            srv_job_unref(j);
            return send_error(c, q, 500, "server_error", "out of memory", 0);
        }
        *st = (stream){.s = s, .j = j, .c = c, .last_write = srv_now()};
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp); /* stream_free runs when the connection is done with it */
        q->answered = true;
        return rc;
    }
    /* not streamed: wait for the end, stopping the generation if the client goes away */
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        wait_job(j, 0.25);
        if (j->done)
            break;
        pthread_mutex_unlock(&j->mu);
        bool gone = client_gone(c);
        if (gone)
            srv_pool_cancel(&s->pool, j);
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    log_request(j);
    q->logged = true;
    enum MHD_Result rc;
    if (j->status) {
        rc = send_error(c, q, j->status, j->err_type, j->err_msg, j->retry_after_s);
    } else {
        rc = send_json(c, 200, srv_answer_json(j));
        srv_metrics_request(q->path, 200);
        q->answered = true;
    }
    srv_job_unref(j);
    return rc;
}

/* ---- the other routes ---- */

static enum MHD_Result models(server *s, struct MHD_Connection *c, req *q)
{
    json_t *data = json_array();
    pthread_mutex_lock(&s->pool.lock);
    for (size_t i = 0; i < s->pool.n; i++) {
        srv_model *m = &s->pool.models[i];
        json_t *o = json_object();
        json_object_set_new(o, "id", json_string(m->id));
        json_object_set_new(o, "object", json_string("model"));
        json_object_set_new(o, "created", json_integer(m->created));
        json_object_set_new(o, "owned_by", json_string("gmlx"));
        json_object_set_new(o, "resident", json_boolean(m->m != NULL));
        json_object_set_new(o, "streams", json_boolean(m->fp.streams));
        json_object_set_new(o, "family", json_string(gm_vocab_get_info(m->vocab)->arch));
        json_object_set_new(o, "default", json_boolean(s->pool.n == 1 || i == s->o->default_model));
        json_array_append_new(data, o);
        for (size_t k = 0; k < m->cfg->n_aliases; k++) {
            json_t *a = json_object();
            json_object_set_new(a, "id", json_string(m->cfg->aliases[k]));
            json_object_set_new(a, "object", json_string("model"));
            json_object_set_new(a, "created", json_integer(m->created));
            json_object_set_new(a, "owned_by", json_string("gmlx"));
            json_object_set_new(a, "alias_of", json_string(m->id));
            json_array_append_new(data, a);
        }
    }
    pthread_mutex_unlock(&s->pool.lock);
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    srv_metrics_request(q->path, 200);
    q->answered = true;
    return send_json(c, 200, txt);
}

/* ---- the handler ---- */

static bool key_ok(const char *want, const char *got)
{
    if (!got)
        return false;
    size_t a = strlen(want), b = strlen(got);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < b; i++) /* every byte of what came, whatever matches */
        diff |= (unsigned)((unsigned char)got[i] ^ (unsigned char)want[a ? i % a : 0]);
    return diff == 0;
}

static bool authorized(server *s, struct MHD_Connection *c)
{
    const char *key = s->o->api_key;
    if (!key || !*key)
        return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0 && key_ok(key, auth + 7))
        return true;
    return key_ok(key, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"));
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    server *s = cls;
    (void)version;
    req *q = *con_cls;
    if (!q) {
        if (!(q = calloc(1, sizeof *q)))
            return MHD_NO;
        *con_cls = q;
        q->t0 = srv_now();
        set_deadline(s, c, BODY_S); /* the headers are in; the body has its own time */
        bool known_path = false;
        for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++) {
            if (strcmp(url, k_routes[i].path) != 0)
                continue;
            known_path = true;
            q->path = k_routes[i].path;
            if (strcmp(method, k_routes[i].method) == 0)
                q->r = k_routes[i].r;
        }
        if (strcmp(method, "OPTIONS") == 0) {
            struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
            MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, "
                                    "anthropic-version");
            enum MHD_Result rc = MHD_queue_response(c, 204, resp);
            MHD_destroy_response(resp);
            q->answered = true;
            return rc;
        }
        if (!known_path) {
            q->path = "other";
            char msg[300];
            snprintf(msg, sizeof msg, "unknown route %.200s", url);
            return send_error(c, q, 404, "not_found", msg, 0);
        }
        if (q->r == R_NONE) {
            char msg[300];
            snprintf(msg, sizeof msg, "%.20s is not allowed on %.200s", method, url);
            return send_error(c, q, 405, "method_not_allowed", msg, 0);
        }
        if (q->r != R_HEALTH && !authorized(s, c))
            return send_error(c, q, 401, "authentication_error", "invalid or missing API key (send `Authorization: "
                              "Bearer <key>`, or `x-api-key: <key>`)", 0);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        /* a declared body over the limit is answered at once (a client that waits for
         * 100-continue, or reads while it sends, gets the 413 before sending the rest) */
        if (declared > s->o->max_body_bytes) {
            char msg[128];
            snprintf(msg, sizeof msg, "the request body is larger than the server's limit of %llu bytes",
                     (unsigned long long)s->o->max_body_bytes);
            return send_error(c, q, 413, "request_too_large", msg, 0);
        }
        return MHD_YES;
    }
    if (q->answered) { /* a body after an early answer: drop it */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (q->body.len + *upload_size > s->o->max_body_bytes)
            q->too_large = true;
        else
            sbuf_add(&q->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    /* the whole request is in: no deadline while it is answered */
    set_deadline(s, c, 0);
    if (q->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than the server's limit of %llu bytes",
                 (unsigned long long)s->o->max_body_bytes);
        return send_error(c, q, 413, "request_too_large", msg, 0);
    }
    if (q->body.oom)
        return send_error(c, q, 500, "server_error", "out of memory", 0);
    switch (q->r) {
    case R_HEALTH:
        srv_metrics_request(q->path, 200);
        q->answered = true;
        return send_text(c, 200, "application/json", "{\"status\":\"ok\"}", 0);
    case R_MODELS:
        return models(s, c, q);
    case R_METRICS: {
        char *t = srv_metrics_text(&s->pool);
        if (!t)
            return send_error(c, q, 500, "server_error", "out of memory", 0);
        srv_metrics_request(q->path, 200);
        q->answered = true;
        enum MHD_Result rc = send_text(c, 200, "text/plain; version=0.0.4", t, 0);
        free(t);
        return rc;
    }
    default:
        break;
    }
    json_error_t je;
    json_t *body = q->body.len ? json_loadb(q->body.p, q->body.len, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!json_is_object(body)) {
        char msg[400];
        if (!q->body.len)
            snprintf(msg, sizeof msg, "the request has no body; send a JSON object");
        else if (!body)
            snprintf(msg, sizeof msg, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                     je.column);
        else
            snprintf(msg, sizeof msg, "the body must be a JSON object");
        json_decref(body);
        return send_error(c, q, 400, "invalid_request_error", msg, 0);
    }
    enum MHD_Result rc = generate(s, c, q, body);
    json_decref(body);
    return rc;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    /* a kept-alive connection: the next request's headers within the idle time and their own */
    set_deadline(cls, c, 60.0 + HEADER_S);
    req *q = *con_cls;
    if (q) {
        sbuf_free(&q->body);
        free(q);
        *con_cls = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    srv_log("[http] %s", line);
}

/* A listening socket on host:port (port 0: any free one); *bound gets the port. */
static int listen_on(const char *host, uint16_t port, uint16_t *bound, gm_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int gai = getaddrinfo(host, ps, &hints, &res);
    if (gai)
        return srv_err(err, GM_EINVAL, "cannot resolve the address %s: %s", host, gai_strerror(gai)), -1;
    int fd = -1, last = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            last = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return srv_err(err, GM_EIO, "cannot listen on %s port %u: %s%s", host, port, strerror(last),
                       last == EADDRINUSE ? " (another process is listening there; pick another --port)" : ""), -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

int gm_srv_run(const gm_srv_opts *o, volatile sig_atomic_t *stop, gm_err *err)
{
    server s = {.o = o};
    pthread_mutex_init(&s.wmu, NULL);
    uint16_t port = 0;
    int fd = listen_on(o->host, o->port, &port, err);
    if (fd < 0)
        return err->code;
    int rc = srv_pool_open(&s.pool, o, err);
    if (rc) {
        close(fd);
        return rc;
    }
    s.d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0,
                           NULL, NULL, handler, &s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, &s,
                           MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
                           (unsigned)o->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->conn_timeout_s,
                           MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024), MHD_OPTION_NOTIFY_COMPLETED,
                           completed, &s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, &s, MHD_OPTION_END);
    if (!s.d) {
        close(fd);
        srv_pool_close(&s.pool);
        return srv_err(err, GM_EIO, "cannot start the HTTP server on %s port %u", o->host, port);
    }
    const bool wd = pthread_create(&s.wd, NULL, watchdog, &s) == 0;
    srv_log("[server] %zu model(s):", s.pool.n);
    for (size_t i = 0; i < s.pool.n; i++) {
        const srv_model *m = &s.pool.models[i];
        srv_log("  %-24s %s  (%s%s, %.1f GB)", m->id, m->cfg->path, m->fp.streams ? "experts stream" : "in memory",
                m->tc != GM_TC_NONE ? ", tool calls" : "", (double)m->fp.resident_bytes / 1e9);
    }
    if (o->budget_bytes)
        srv_log("[residency] weight-byte budget %.1f GB", (double)o->budget_bytes / 1e9);
    srv_log("[server] api-key auth %s", o->api_key && *o->api_key ? "on (every route except /health)" : "off");
    const bool v6 = strchr(o->host, ':') != NULL;
    srv_log("[server] listening on http://%s%s%s:%u", v6 ? "[" : "", o->host, v6 ? "]" : "", port);
    while (!*stop) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    srv_log("[server] stopping");
    /* the generations first (running ones canceled, queued ones answered), so that the streams
     * end; then the connections; then the models' memory */
    srv_pool_stop(&s.pool);
    if (wd) {
        s.wd_stop = 1;
        pthread_join(s.wd, NULL);
    }
    MHD_stop_daemon(s.d);
    srv_pool_close(&s.pool);
    close(fd);
    return 0;
}
