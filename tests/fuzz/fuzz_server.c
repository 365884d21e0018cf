/* libFuzzer target for the server's request parsing and response writing (src/server): the input
 * is a request body. Its first byte picks the route (chat completions, completions, messages,
 * count_tokens); the rest goes through the JSON reader and the route's parser against the bundled
 * model's vocabulary and chat template (no model is loaded), exactly as http.c hands it over.
 * When the parser accepts it, a made-up generation result (text cut from the input, tool calls,
 * reasoning) is written as the non-streamed answer and as every stream event, and each piece
 * must be valid JSON / SSE; when it refuses, the error must carry a 4xx/5xx status and a message
 * and its error body must be valid JSON. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz_server: %s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

/* chatfmt.c's other helpers print through the CLI; the parsers never call them */
void gm_cli_error(const char *cmd, const char *fmt, ...);
void gm_cli_error(const char *cmd, const char *fmt, ...) { (void)cmd, (void)fmt; }
char *gm_cli_read_text(const char *cmd, const char *path, size_t *len);
char *gm_cli_read_text(const char *cmd, const char *path, size_t *len) { return (void)cmd, (void)path, (void)len, NULL; }

static srv_pool g_pool;
static srv_model g_model;
static gm_srv_model_cfg g_cfg;
static gm_srv_opts g_opts;

static void setup(void)
{
    if (g_pool.n)
        return;
    const char *path = getenv("GMLX_FUZZ_MODEL");
    if (!path)
        path = GMLX_FUZZ_MODEL_DEFAULT;
    gm_err err = {0};
    if (gm_vocab_open(&g_model.vocab, path, &err) != 0) {
        fprintf(stderr, "fuzz_server: %s\n", err.msg);
        abort();
    }
    const char *src = gm_vocab_get_info(g_model.vocab)->chat_template;
    CHECK(src != NULL);
    g_model.tmpl_src = strdup(src);
    CHECK(gm_template_parse(&g_model.tmpl, src, strlen(src), &err) == 0);
    g_model.style = gm_vocab_think_style(g_model.vocab);
    g_model.tc = gm_tc_detect(src, gm_vocab_get_info(g_model.vocab)->arch);
    g_cfg.id = "fuzz-model";
    g_cfg.path = path;
    gm_sampling_default(&g_cfg.sampling);
    g_cfg.thinking = -1;
    g_model.cfg = &g_cfg;
    g_model.id = "fuzz-model";
    gm_srv_opts_default(&g_opts);
    g_pool.opts = &g_opts;
    g_pool.models = &g_model;
    g_pool.n = 1;
}

static void check_json(const char *s)
{
    CHECK(s != NULL);
    json_error_t je;
    json_t *v = json_loads(s, JSON_ALLOW_NUL, &je); /* "\u0000" is valid JSON: a token may decode to NUL */
    CHECK(v != NULL);
    json_decref(v);
}

/* Every "data: " line of an SSE buffer is JSON or [DONE]. */
static void check_sse(const sbuf *b)
{
    if (!b->len)
        return;
    CHECK(!b->oom);
    const char *p = b->p;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > 6 && strncmp(p, "data: ", 6) == 0 && strncmp(p + 6, "[DONE]", 6) != 0) {
            char *line = strndup(p + 6, n - 6);
            check_json(line);
            free(line);
        }
        p += n + (nl != NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1)
        return 0;
    const int r = data[0] % 4;
    json_t *body = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    srv_job *j = srv_job_new();
    CHECK(j != NULL);
    bool ok = r == 0 ? srv_openai_parse_chat(&g_pool, body, j)
              : r == 1 ? srv_openai_parse_completion(&g_pool, body, j)
                       : srv_anthropic_parse(&g_pool, body, j, r == 3);
    json_decref(body);
    if (!ok || j->status) {
        CHECK(j->status >= 400 && j->status < 600 && j->err_msg[0]);
        char *e = srv_error_json(j->api, j->status, j->err_type, j->err_msg, NULL);
        check_json(e);
        free(e);
        srv_job_unref(j);
        return 0;
    }
    CHECK(j->n_tokens > 0 && j->tokens && j->model == &g_model);
    /* a made-up result: the input's bytes as text (cut to valid UTF-8 by the JSON writer's
     * refusal: only what json_stringn takes), a reasoning span, a tool call */
    j->n_prompt = (uint32_t)j->n_tokens;
    j->res.n_generated = (uint32_t)(size % 50);
    j->res.stop = (gm_stop_reason)(size % 8);
    j->res.stop_string = j->n_stop ? 0 : -1;
    const char *text = (const char *)data + 1;
    size_t tl = (size - 1) / 2;
    sbuf_add(&j->content, text, tl);
    sbuf_add(&j->reasoning, text + tl, (size - 1) - tl);
    if (size % 3 == 0) {
        j->calls = calloc(1, sizeof *j->calls);
        j->calls[0].id = strdup("call_1");
        j->calls[0].name = strndup(text, tl > 16 ? 16 : tl);
        j->calls[0].arguments = strdup("{\"a\":1}");
        j->n_calls = 1;
    }
    char *ans = srv_answer_json(j);
    if (ans) /* NULL only where the made-up text is not UTF-8 and a string was refused */
        check_json(ans);
    free(ans);
    j->stream = true;
    srv_stream_begin(j);
    srv_stream_delta(j, true, text + tl, (size - 1) - tl);
    srv_stream_delta(j, false, text, tl);
    srv_stream_end(j);
    check_sse(&j->out);
    srv_job_fail(j, 500, "server_error", "made up");
    srv_stream_error(j);
    check_sse(&j->out);
    srv_job_unref(j);
    return 0;
}
