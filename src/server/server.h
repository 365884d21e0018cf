/* server: gmlx serve - an OpenAI- and Anthropic-compatible HTTP server over the public API
 * (include/gmlx.h), with libmicrohttpd and jansson.
 *
 * Owns: the HTTP daemon (http.c: routing, limits, auth, error bodies, server-sent events), the
 * served models (pool.c: one worker thread owns each loaded model and its session; requests
 * queue per model, bounded; loads on first use, unloads when idle or when another model needs
 * the room under the memory budget), the APIs' request and response shapes (openai.c,
 * anthropic.c, prompt.c: messages through the chat template), tool calls (toolcall.c) and the
 * Prometheus metrics (metrics.c).
 * Threads: the caller's thread runs gm_srv_run until *stop is set; libmicrohttpd gives each
 * connection a thread; each served model has its worker thread.
 */
#ifndef GM_SERVER_SERVER_H
#define GM_SERVER_SERVER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gmlx.h"

typedef struct gm_srv_model_cfg {
    const char *id;             /* what requests name it by */
    const char *path;           /* the GGUF file (first part) */
    gm_model_opts mopts;        /* how it loads */
    gm_sampling sampling;       /* its default sampling (a request's fields override) */
    uint32_t max_tokens;        /* default max_tokens (0: until the context is full) */
    int thinking;               /* -1: the template's default, 0 off, 1 on */
    const char *template_file;  /* a chat template file instead of the model's (NULL: none) */
    const char *const *aliases; /* other names of it */
    size_t n_aliases;
} gm_srv_model_cfg;

typedef struct gm_srv_opts {
    const char *host;           /* 127.0.0.1 */
    uint16_t port;              /* 0: a free port (the ready line says which) */
    const char *api_key;        /* NULL: no auth */
    uint32_t queue_cap;         /* requests that may wait behind the running one, per model */
    uint64_t max_body_bytes;    /* larger bodies get 413 */
    uint64_t budget_bytes;      /* what the resident models may hold together (0: no limit) */
    double idle_unload_s;       /* unload a model idle this long (0: never) */
    double keepalive_s;         /* SSE comment while nothing else is sent (0: none) */
    double queue_timeout_s;     /* a queued request gives up after this long (503) */
    uint32_t max_connections;
    double conn_timeout_s;      /* an idle connection is closed after this long */
    const gm_srv_model_cfg *models;
    size_t n_models;
    size_t default_model;       /* index of the model a request without a known name gets when
                                   only one is served */
} gm_srv_opts;

void gm_srv_opts_default(gm_srv_opts *o);

/* Serves until *stop becomes non-zero (a signal handler sets it), then closes the connections,
 * unloads the models (printing their streaming figures) and returns 0; GM_EIO when the address
 * cannot be bound, other codes for models that cannot be opened. Log lines go to stderr. */
int gm_srv_run(const gm_srv_opts *o, volatile sig_atomic_t *stop, gm_err *err);

#endif
