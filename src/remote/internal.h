/* remote/internal: what the module's files share - one HTTP GET (http.c). */
#ifndef GM_REMOTE_INTERNAL_H
#define GM_REMOTE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remote/remote.h"

typedef struct gm_http_req gm_http_req;
struct gm_http_req {
    /* in */
    const char *url;
    uint64_t range_from, range_to;  /* Range: from-(to-1), or from- when to is 0; none when both 0 */
    int (*sink)(gm_http_req *q, const uint8_t *data, size_t len); /* body of a 200/206; non-zero stops */
    int (*on_status)(gm_http_req *q);  /* once the final status is known (may be NULL) */
    void (*progress)(gm_http_req *q, uint64_t now_bytes, uint64_t total_bytes); /* may be NULL */
    /* out */
    void *curl;
    long status;                    /* the final response's status, 0 when none came */
    int result;                     /* the CURLcode */
    bool stopped_early;             /* the sink had all it wanted */
    bool sink_failed;               /* the sink refused (its own error) */
    long long content_length, range_start, range_end, range_total; /* -1: not sent */
    char linked_etag[65];           /* X-Linked-Etag when it is a sha256 */
    char next_link[2048];           /* Link: <...>; rel="next" */
    char err_body[512];
    size_t err_body_len;
    char curl_error[256];
};

/* Runs q. Fails only on a transport error (no connection, a stall); an HTTP error status, a
 * short body and a sink's refusal return 0 with q's fields telling what happened. */
int gm_http_run(const gm_remote_opts *o, gm_http_req *q, gm_err *err);
/* The error for q's HTTP status: "HTTP 404 fetching URL (hint): body". */
int gm_http_status_error(const gm_http_req *q, gm_err *err);
/* Bytes [from, to) of url into buf (room for to - from); *got may be less at the file's end;
 * *total: the file's size when the server said it, else 0. */
int gm_http_get_range(const gm_remote_opts *o, const char *url, uint64_t from, uint64_t to, uint8_t *buf,
                      uint64_t *got, uint64_t *total, gm_err *err);
/* A whole body of at most limit bytes, NUL-terminated (malloc'd); next: a Link rel="next". */
int gm_http_get_text(const gm_remote_opts *o, const char *url, size_t limit, char **text, size_t *len,
                     char *next, size_t next_len, gm_err *err);

/* The hub's file listing (GET /api/models/REPO/tree/REV?recursive=true), hub.c. */
typedef struct gm_hub_file {
    char *path;
    uint64_t size;
    char sha256[65];   /* the LFS oid, "" when none */
} gm_hub_file;
typedef struct gm_hub_list {
    gm_hub_file *v;
    size_t n, cap;
} gm_hub_list;
/* Appends the files of one page of a listing (a JSON array; folders and malformed entries are
 * skipped). GM_EFORMAT when text is not a JSON array. */
int gm_hub_parse_listing(const char *url, const char *text, size_t len, gm_hub_list *l, gm_err *err);
void gm_hub_list_free(gm_hub_list *l);

/* Takes one response header line (with or without its CRLF) into q's fields (http.c's header
 * callback). */
void gm_http_header_line(gm_http_req *q, const char *data, size_t len);

#endif
