/* remote/http: one GET with libcurl, its body to a bounded buffer or appended to a file. */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "remote/internal.h"

static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc;
static void init_curl(void) { g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

/* The host of a URL, lowercase, without port: "" when it has none. */
static void url_host(const char *url, char *host, size_t len)
{
    host[0] = '\0';
    const char *h = strstr(url, "://");
    if (!h)
        return;
    h += 3;
    const char *at = strpbrk(h, "@/");
    if (at && *at == '@')
        h = at + 1;
    size_t n = strcspn(h, ":/?#");
    if (n >= len)
        n = len - 1;
    for (size_t i = 0; i < n; i++)
        host[i] = (char)((h[i] >= 'A' && h[i] <= 'Z') ? h[i] + 32 : h[i]);
    host[n] = '\0';
}

/* The token goes to the hub's host, and to huggingface.co's own subdomains when that is the hub. */
static bool token_for(const gm_remote_opts *o, const char *url)
{
    if (!o->token || !*o->token)
        return false;
    char uh[256], eh[256];
    url_host(url, uh, sizeof uh);
    url_host(o->endpoint ? o->endpoint : GM_REMOTE_DEFAULT_ENDPOINT, eh, sizeof eh);
    if (!uh[0])
        return false;
    if (strcmp(uh, eh) == 0)
        return true;
    size_t n = strlen(uh);
    return strcmp(eh, "huggingface.co") == 0 && n > 15 && strcmp(uh + n - 15, ".huggingface.co") == 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *user)
{
    gm_http_header_line(user, data, size * n);
    return size * n;
}

void gm_http_header_line(gm_http_req *q, const char *data, size_t len)
{
    char line[1024];
    size_t l = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, data, l);
    line[l] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) { /* a new response (after a redirect): forget the last */
        q->content_length = -1;
        q->range_start = q->range_end = q->range_total = -1;
        q->linked_etag[0] = q->next_link[0] = '\0';
        return;
    }
    char *colon = strchr(line, ':');
    if (!colon)
        return;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (strcasecmp(line, "content-length") == 0) {
        q->content_length = strtoll(v, NULL, 10);
    } else if (strcasecmp(line, "content-range") == 0) {
        long long a, b, t;
        if (sscanf(v, "bytes %lld-%lld/%lld", &a, &b, &t) == 3) {
            q->range_start = a, q->range_end = b, q->range_total = t;
        } else if (sscanf(v, "bytes */%lld", &t) == 1) {
            q->range_total = t;
        }
    } else if (strcasecmp(line, "x-linked-etag") == 0) {
        /* the hub's sha256 of an LFS file, quoted (and maybe W/-prefixed) */
        const char *s = v;
        if (strncmp(s, "W/", 2) == 0)
            s += 2;
        if (*s == '"')
            s++;
        size_t k = 0;
        while (k < 64 && ((s[k] >= '0' && s[k] <= '9') || (s[k] >= 'a' && s[k] <= 'f')))
            k++;
        if (k == 64 && (s[64] == '"' || s[64] == '\0')) {
            memcpy(q->linked_etag, s, 64);
            q->linked_etag[64] = '\0';
        }
    } else if (strcasecmp(line, "link") == 0) {
        /* <URL>; rel="next" */
        char *lt = strchr(v, '<'), *gt = lt ? strchr(lt, '>') : NULL;
        if (lt && gt && strstr(gt, "rel=\"next\"") && (size_t)(gt - lt - 1) < sizeof q->next_link) {
            memcpy(q->next_link, lt + 1, (size_t)(gt - lt - 1));
            q->next_link[gt - lt - 1] = '\0';
        }
    }
    return;
}

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    gm_http_req *q = user;
    size_t len = size * n;
    if (!q->status) {
        long code = 0;
        curl_easy_getinfo(q->curl, CURLINFO_RESPONSE_CODE, &code);
        q->status = code;
        if (q->on_status && q->on_status(q) != 0)
            return 0;
    }
    if (q->status != 200 && q->status != 206) {
        /* an error's body: the first bytes, for the message */
        size_t room = sizeof q->err_body - 1 - q->err_body_len;
        size_t k = len < room ? len : room;
        memcpy(q->err_body + q->err_body_len, data, k);
        q->err_body_len += k;
        q->err_body[q->err_body_len] = '\0';
        return len;
    }
    return q->sink(q, (const uint8_t *)data, len) == 0 ? len : 0;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    gm_http_req *q = user;
    (void)ultotal;
    (void)ulnow;
    if (q->progress && (q->status == 200 || q->status == 206))
        q->progress(q, (uint64_t)dlnow, (uint64_t)dltotal);
    return 0;
}

int gm_http_run(const gm_remote_opts *o, gm_http_req *q, gm_err *err)
{
    pthread_once(&g_init_once, init_curl);
    if (g_init_rc != CURLE_OK)
        return gm_err_set(err, GM_EIO, "cannot start libcurl: %s", curl_easy_strerror(g_init_rc));
    CURL *c = curl_easy_init();
    if (!c)
        return gm_err_set(err, GM_ENOMEM, "cannot start libcurl: out of memory");
    q->curl = c;
    q->status = 0;
    q->err_body_len = 0;
    q->err_body[0] = '\0';
    q->content_length = -1;
    q->range_start = q->range_end = q->range_total = -1;
    q->linked_etag[0] = q->next_link[0] = '\0';
    q->curl_error[0] = '\0';
    uint32_t stall = o->stall_s ? o->stall_s : GM_REMOTE_DEFAULT_STALL_S;
    char range[64];
    curl_easy_setopt(c, CURLOPT_URL, q->url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_USERAGENT, "gmlx/0.1");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)stall);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)stall);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, q->curl_error);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, q);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, q);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, q);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    if (q->range_from > 0 || q->range_to > 0) {
        if (q->range_to > 0)
            snprintf(range, sizeof range, "%" PRIu64 "-%" PRIu64, q->range_from, q->range_to - 1);
        else
            snprintf(range, sizeof range, "%" PRIu64 "-", q->range_from);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    if (token_for(o, q->url)) {
        /* bearer auth is sent to this host only; a redirect elsewhere goes without it */
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, o->token);
    }
    CURLcode rc = curl_easy_perform(c);
    if (!q->status) {
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        q->status = code;
    }
    q->curl = NULL;
    curl_easy_cleanup(c);
    q->result = (int)rc;
    if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && q->stopped_early))
        return 0;
    if (q->status >= 400 || q->sink_failed)
        return 0; /* the caller reads the status or its own sink's error */
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return gm_err_set(err, GM_EIO, "no data for %u s from %s (the server stalled)", stall, q->url);
    if (rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING)
        return 0; /* a short body: the caller compares what it got with the size */
    return gm_err_set(err, GM_EIO, "network error fetching %s: %s", q->url,
                      q->curl_error[0] ? q->curl_error : curl_easy_strerror(rc));
}

int gm_http_status_error(const gm_http_req *q, gm_err *err)
{
    char body[160] = "";
    if (q->err_body_len) {
        size_t k = 0;
        for (size_t i = 0; i < q->err_body_len && k < sizeof body - 1; i++) {
            unsigned char ch = (unsigned char)q->err_body[i];
            body[k++] = ch >= 0x20 && ch < 0x7f ? (char)ch : ' ';
        }
        body[k] = '\0';
    }
    const char *hint = q->status == 401   ? " (set HF_TOKEN to a token that may read this repo)"
                       : q->status == 403 ? " (the token may not read this repo, or its terms are not accepted)"
                       : q->status == 404 ? " (no such file; ORG/REPO:QUANT lists a repo's models)"
                                          : "";
    return gm_err_set(err, q->status == 404 ? GM_ENOTFOUND : GM_EIO, "HTTP %ld fetching %s%s%s%s", q->status,
                      q->url, hint, body[0] ? ": " : "", body);
}

/* ---- a bounded buffer ---- */

typedef struct buf_sink {
    gm_http_req req;
    uint8_t *buf;
    uint64_t skip;   /* bytes to drop first (a server that ignored the range) */
    uint64_t want;   /* stop after this many */
    uint64_t got;
} buf_sink;

static int buf_put(gm_http_req *q, const uint8_t *data, size_t len)
{
    buf_sink *b = (buf_sink *)q;
    if (b->skip) {
        size_t k = len < b->skip ? len : (size_t)b->skip;
        b->skip -= k;
        data += k;
        len -= k;
    }
    size_t room = (size_t)(b->want - b->got);
    size_t k = len < room ? len : room;
    memcpy(b->buf + b->got, data, k);
    b->got += k;
    if (b->got == b->want) {
        q->stopped_early = true;
        return -1; /* enough: stop the transfer */
    }
    return 0;
}

/* A 200 to a request for a later range: the body starts at byte 0, so drop the front. */
static int buf_status(gm_http_req *q)
{
    buf_sink *b = (buf_sink *)q;
    if (q->status == 200)
        b->skip = q->range_from;
    return 0;
}

int gm_http_get_range(const gm_remote_opts *o, const char *url, uint64_t from, uint64_t to, uint8_t *buf,
                      uint64_t *got, uint64_t *total, gm_err *err)
{
    buf_sink b = {.buf = buf, .want = to - from};
    b.req.url = url;
    b.req.range_from = from;
    b.req.range_to = to;
    b.req.sink = buf_put;
    b.req.on_status = buf_status;
    *got = 0;
    int rc = gm_http_run(o, &b.req, err);
    if (rc)
        return rc;
    if (b.req.status == 416)
        return gm_err_set(err, GM_EFORMAT, "%s: the file ends before byte %" PRIu64, url, from);
    if (b.req.status != 200 && b.req.status != 206)
        return gm_http_status_error(&b.req, err);
    *got = b.got;
    if (b.req.range_total >= 0)
        *total = (uint64_t)b.req.range_total;
    else if (b.req.status == 200 && b.req.content_length >= 0)
        *total = (uint64_t)b.req.content_length;
    else
        *total = 0;
    return 0;
}

/* ---- a whole small body (JSON) ---- */

typedef struct grow_sink {
    gm_http_req req;
    char *buf;
    size_t len, cap, limit;
} grow_sink;

static int grow_put(gm_http_req *q, const uint8_t *data, size_t len)
{
    grow_sink *g = (grow_sink *)q;
    if (g->len + len > g->limit) {
        q->sink_failed = true;
        return -1;
    }
    if (g->len + len + 1 > g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 65536;
        while (cap < g->len + len + 1)
            cap *= 2;
        char *nb = realloc(g->buf, cap);
        if (!nb) {
            q->sink_failed = true;
            return -1;
        }
        g->buf = nb;
        g->cap = cap;
    }
    memcpy(g->buf + g->len, data, len);
    g->len += len;
    g->buf[g->len] = '\0';
    return 0;
}

int gm_http_get_text(const gm_remote_opts *o, const char *url, size_t limit, char **text, size_t *len,
                     char *next, size_t next_len, gm_err *err)
{
    grow_sink g = {.limit = limit};
    g.req.url = url;
    g.req.sink = grow_put;
    *text = NULL;
    int rc = gm_http_run(o, &g.req, err);
    if (rc == 0 && g.req.sink_failed)
        rc = gm_err_set(err, g.buf || g.len + 1 > limit ? GM_ERANGE : GM_ENOMEM,
                        "%s: the answer is larger than %zu bytes (or out of memory)", url, limit);
    if (rc == 0 && g.req.status != 200)
        rc = gm_http_status_error(&g.req, err);
    if (rc) {
        free(g.buf);
        return rc;
    }
    if (!g.buf && !(g.buf = calloc(1, 1)))
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    *text = g.buf;
    *len = g.len;
    if (next && next_len)
        snprintf(next, next_len, "%s", g.req.next_link);
    return 0;
}
