/* server/openai: the OpenAI routes' requests (chat completions, completions) into jobs, their
 * answers, their server-sent events, and the request fields every API shares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"

/* ---- fields shared by the APIs ---- */

bool srv_req_number(srv_job *j, json_t *req, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < lo ||
        json_number_value(v) > hi) {
        srv_job_fail(j, 400, "invalid_request_error", "'%s' must be a number from %g to %g", key, lo, hi);
        return false;
    }
    *out = json_number_value(v);
    return true;
}

bool srv_req_uint(srv_job *j, json_t *req, const char *key, uint64_t lo, uint64_t hi, uint64_t *out, bool *set)
{
    json_t *v = json_object_get(req, key);
    if (set)
        *set = false;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)lo || (uint64_t)json_integer_value(v) > hi) {
        srv_job_fail(j, 400, "invalid_request_error", "'%s' must be a whole number from %llu to %llu", key,
                     (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    *out = (uint64_t)json_integer_value(v);
    if (set)
        *set = true;
    return true;
}

bool srv_req_bool(srv_job *j, json_t *req, const char *key, bool *out)
{
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_boolean(v)) {
        srv_job_fail(j, 400, "invalid_request_error", "'%s' must be true or false", key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

bool srv_req_stops(srv_job *j, json_t *v, const char *key)
{
    if (!v || json_is_null(v))
        return true;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
    if (n == (size_t)-1 || n > 16) {
        srv_job_fail(j, 400, "invalid_request_error", "'%s' must be a string or an array of at most 16 strings", key);
        return false;
    }
    j->stop = calloc(n ? n : 1, sizeof *j->stop);
    if (!j->stop) {
        srv_job_fail(j, 500, "server_error", "out of memory");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0 || json_string_length(s) > 1024) {
            srv_job_fail(j, 400, "invalid_request_error", "'%s' must hold non-empty strings of at most 1024 bytes",
                         key);
            return false;
        }
        if (!(j->stop[j->n_stop++] = strdup(json_string_value(s)))) {
            srv_job_fail(j, 500, "server_error", "out of memory");
            return false;
        }
    }
    return true;
}

bool srv_req_model(srv_pool *p, srv_job *j, json_t *req)
{
    json_t *mv = json_object_get(req, "model");
    const char *name = json_is_string(mv) ? json_string_value(mv) : NULL;
    if (mv && !json_is_null(mv) && !name) {
        srv_job_fail(j, 400, "invalid_request_error", "'model' must be a string");
        return false;
    }
    j->model = srv_pool_find(p, name);
    if (!j->model) {
        sbuf ids = {0};
        for (size_t i = 0; i < p->n; i++)
            sbuf_addf(&ids, "%s'%s'", i ? ", " : "", p->models[i].id);
        srv_job_fail(j, 404, "model_not_found", "unknown model id '%s'; available: [%s]", name ? name : "",
                     ids.p ? ids.p : "");
        sbuf_free(&ids);
        return false;
    }
    j->model_name = strdup(name && *name ? name : j->model->id);
    return j->model_name != NULL;
}

/* The sampling fields: the model's defaults, then the request's. */
bool srv_req_sampling(srv_job *j, json_t *req, double temp_hi)
{
    j->sampling = j->model->cfg->sampling;
    double t = j->sampling.temp, tp = j->sampling.top_p, mp = j->sampling.min_p;
    uint64_t seed = 0, tk = 0;
    bool seed_set = false, tk_set = false;
    if (!srv_req_bool(j, req, "ignore_eos", &j->ignore_eos) ||
        !srv_req_number(j, req, "temperature", 0, temp_hi, &t) || !srv_req_number(j, req, "top_p", 0, 1, &tp) ||
        !srv_req_number(j, req, "min_p", 0, 1, &mp) || !srv_req_uint(j, req, "top_k", 0, 1u << 20, &tk, &tk_set))
        return false;
    json_t *sv = json_object_get(req, "seed");
    if (sv && !json_is_null(sv)) {
        if (!json_is_integer(sv)) {
            srv_job_fail(j, 400, "invalid_request_error", "'seed' must be a whole number");
            return false;
        }
        seed = (uint64_t)json_integer_value(sv);
        seed_set = true;
    }
    j->sampling.temp = (float)t;
    j->sampling.top_p = (float)tp;
    j->sampling.min_p = (float)mp;
    if (tk_set)
        j->sampling.top_k = (int32_t)tk;
    if (seed_set)
        j->sampling.seed = seed;
    else if (!j->sampling.seed)
        j->sampling.seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)j;
    return true;
}

void srv_job_id(srv_job *j, const char *prefix)
{
    static unsigned long long counter;
    unsigned long long n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(j->id, sizeof j->id, "%s%llx%06llx", prefix, (unsigned long long)time(NULL), n);
    j->created = (int64_t)time(NULL);
}

/* ---- chat completions ---- */

/* OpenAI content (a string, null, or text parts) as one string; NULL and a 400 otherwise. */
static json_t *flat_content(srv_job *j, json_t *c, size_t idx)
{
    if (!c || json_is_null(c))
        return json_string("");
    if (json_is_string(c))
        return json_incref(c);
    if (!json_is_array(c)) {
        srv_job_fail(j, 400, "invalid_request_error", "messages[%zu].content must be a string or an array of parts",
                     idx);
        return NULL;
    }
    sbuf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part)
    {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type || strcmp(type, "text") != 0 || !json_is_string(text)) {
            sbuf_free(&b);
            srv_job_fail(j, 400, "invalid_request_error", "messages[%zu].content[%zu]: only text parts are supported%s",
                         idx, i, type && strcmp(type, "text") ? " (this server runs text models)" : "");
            return NULL;
        }
        if (i)
            sbuf_adds(&b, "\n");
        sbuf_add(&b, json_string_value(text), json_string_length(text));
    }
    json_t *s = json_stringn(b.p ? b.p : "", b.len);
    sbuf_free(&b);
    return s;
}

json_t *srv_openai_messages(srv_job *j, json_t *msgs)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        srv_job_fail(j, 400, "invalid_request_error", "'messages' must be a non-empty array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role || !*role) {
            srv_job_fail(j, 400, "invalid_request_error", "messages[%zu] must be an object with a string 'role'", i);
            json_decref(out);
            return NULL;
        }
        json_t *c = flat_content(j, json_object_get(m, "content"), i);
        if (!c) {
            json_decref(out);
            return NULL;
        }
        json_t *o = json_object();
        json_object_set_new(o, "role", json_string(role));
        json_object_set_new(o, "content", c);
        /* the fields templates read besides role and content */
        static const char *const keep[] = {"name", "tool_call_id", "reasoning_content"};
        for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
            json_t *v = json_object_get(m, keep[k]);
            if (json_is_string(v))
                json_object_set(o, keep[k], v);
        }
        json_t *tcs = json_object_get(m, "tool_calls");
        if (json_is_array(tcs) && json_array_size(tcs)) {
            json_t *calls = json_deep_copy(tcs);
            size_t k;
            json_t *tc;
            json_array_foreach(calls, k, tc)
            {
                /* arguments as an object, as most templates iterate over them */
                json_t *fn = json_object_get(tc, "function");
                json_t *args = json_object_get(fn, "arguments");
                if (json_is_string(args)) {
                    json_t *parsed = json_loads(json_string_value(args), 0, NULL);
                    if (json_is_object(parsed))
                        json_object_set_new(fn, "arguments", parsed);
                    else
                        json_decref(parsed);
                }
            }
            json_object_set_new(o, "tool_calls", calls);
        }
        json_array_append_new(out, o);
    }
    return out;
}

/* tools: an array of {type: function, function: {name, ...}} */
bool srv_check_tools(srv_job *j, json_t *tools)
{
    if (!tools || json_is_null(tools))
        return true;
    if (!json_is_array(tools)) {
        srv_job_fail(j, 400, "invalid_request_error", "'tools' must be an array");
        return false;
    }
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
            srv_job_fail(j, 400, "invalid_request_error", "tools[%zu] must be {\"type\": \"function\", \"function\": "
                         "{\"name\": ...}}", i);
            return false;
        }
    }
    return true;
}

bool srv_openai_parse_chat(srv_pool *p, json_t *req, srv_job *j)
{
    j->api = API_CHAT;
    j->route = "/v1/chat/completions";
    srv_job_id(j, "chatcmpl-");
    uint64_t n = 1, max = 0;
    bool set = false;
    if (!srv_req_model(p, j, req) || !srv_req_bool(j, req, "stream", &j->stream) ||
        !srv_req_uint(j, req, "n", 1, 1 << 20, &n, NULL))
        return false;
    if (n != 1) {
        srv_job_fail(j, 400, "invalid_request_error", "'n' greater than 1 is not supported; send parallel requests "
                     "instead");
        return false;
    }
    if (!srv_req_uint(j, req, "max_completion_tokens", 1, 1u << 30, &max, &set))
        return false;
    if (!set && !srv_req_uint(j, req, "max_tokens", 1, 1u << 30, &max, &set))
        return false;
    j->max_tokens = (uint32_t)max;
    if (!srv_req_sampling(j, req, 2) || !srv_req_stops(j, json_object_get(req, "stop"), "stop"))
        return false;
    json_t *so = json_object_get(req, "stream_options");
    if (json_is_object(so) && !srv_req_bool(j, so, "include_usage", &j->include_usage))
        return false;
    json_t *rf = json_object_get(req, "response_format");
    if (rf && !json_is_null(rf)) {
        const char *type = json_string_value(json_object_get(rf, "type"));
        if (!type || (strcmp(type, "text") != 0 && strcmp(type, "json_object") != 0)) {
            srv_job_fail(j, 400, "invalid_request_error", "Unsupported response_format type: only text and "
                         "json_object are accepted (json_object asks the model for JSON in the prompt's own words)");
            return false;
        }
    }
    json_t *tools = json_object_get(req, "tools");
    if (!srv_check_tools(j, tools))
        return false;
    json_t *choice = json_object_get(req, "tool_choice");
    if (json_is_string(choice) && strcmp(json_string_value(choice), "none") == 0)
        tools = NULL;
    if (tools && json_array_size(tools))
        j->tools_json = json_dumps(tools, JSON_COMPACT);
    json_t *msgs = srv_openai_messages(j, json_object_get(req, "messages"));
    if (!msgs)
        return false;
    int thinking = -1;
    bool et = false;
    json_t *etv = json_object_get(req, "enable_thinking");
    if (etv && srv_req_bool(j, req, "enable_thinking", &et))
        thinking = et;
    json_t *kw = json_object_get(req, "chat_template_kwargs");
    if (kw && !json_is_object(kw) && !json_is_null(kw)) {
        json_decref(msgs);
        srv_job_fail(j, 400, "invalid_request_error", "'chat_template_kwargs' must be an object");
        return false;
    }
    bool ok = !j->status && srv_prompt_chat(j, msgs, tools, kw, thinking);
    json_decref(msgs);
    return ok;
}

bool srv_openai_parse_completion(srv_pool *p, json_t *req, srv_job *j)
{
    j->api = API_COMPLETION;
    j->route = "/v1/completions";
    srv_job_id(j, "cmpl-");
    uint64_t n = 1, max = 0, best = 1;
    bool echo = false;
    if (!srv_req_model(p, j, req) || !srv_req_bool(j, req, "stream", &j->stream) ||
        !srv_req_uint(j, req, "n", 1, 1 << 20, &n, NULL) || !srv_req_uint(j, req, "best_of", 1, 1 << 20, &best, NULL) ||
        !srv_req_bool(j, req, "echo", &echo))
        return false;
    if (n != 1 || best != 1 || echo || json_object_get(req, "suffix")) {
        srv_job_fail(j, 400, "invalid_request_error", "%s", n != 1 ? "'n' greater than 1 is not supported; send parallel requests instead"
                     : best != 1 ? "'best_of' greater than 1 is not supported"
                     : echo      ? "'echo' is not supported; prepend the prompt client-side"
                                 : "'suffix' (fill-in-the-middle) is not supported on this server");
        return false;
    }
    if (!srv_req_uint(j, req, "max_tokens", 1, 1u << 30, &max, NULL))
        return false;
    j->max_tokens = max ? (uint32_t)max : 16; /* the API's default */
    if (!srv_req_sampling(j, req, 2) || !srv_req_stops(j, json_object_get(req, "stop"), "stop"))
        return false;
    json_t *so = json_object_get(req, "stream_options");
    if (json_is_object(so) && !srv_req_bool(j, so, "include_usage", &j->include_usage))
        return false;
    json_t *pr = json_object_get(req, "prompt");
    if (!json_is_string(pr) || json_string_length(pr) == 0) {
        srv_job_fail(j, 400, "invalid_request_error", "'prompt' must be a single non-empty string; lists and token "
                     "arrays are not supported (send one request per prompt)");
        return false;
    }
    return srv_prompt_raw(j, json_string_value(pr), json_string_length(pr));
}

const char *srv_finish_reason(const srv_job *j)
{
    if (j->n_calls)
        return "tool_calls";
    if (j->res.stop == GM_STOP_LENGTH || j->res.stop == GM_STOP_CONTEXT)
        return "length";
    return "stop";
}

static json_t *usage_json(const srv_job *j)
{
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(j->n_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(j->res.n_generated));
    json_object_set_new(u, "total_tokens", json_integer((json_int_t)j->n_prompt + j->res.n_generated));
    return u;
}

static json_t *calls_json(const srv_job *j, bool with_index)
{
    json_t *a = json_array();
    for (size_t i = 0; i < j->n_calls; i++) {
        json_t *c = json_object();
        if (with_index)
            json_object_set_new(c, "index", json_integer((json_int_t)i));
        json_object_set_new(c, "id", json_string(j->calls[i].id));
        json_object_set_new(c, "type", json_string("function"));
        json_t *fn = json_object();
        json_object_set_new(fn, "name", json_string(j->calls[i].name));
        json_object_set_new(fn, "arguments", json_string(j->calls[i].arguments));
        json_object_set_new(c, "function", fn);
        json_array_append_new(a, c);
    }
    return a;
}

static json_t *text_or_empty(const sbuf *b)
{
    json_t *s = json_stringn(b->p ? b->p : "", b->len);
    return s ? s : json_string(""); /* invalid UTF-8 cannot come from the detokenizer; be safe */
}

char *srv_openai_answer(srv_job *j)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "object", json_string(j->api == API_CHAT ? "chat.completion" : "text_completion"));
    json_object_set_new(o, "created", json_integer(j->created));
    json_object_set_new(o, "model", json_string(j->model_name));
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    if (j->api == API_CHAT) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", j->n_calls && !j->content.len ? json_null() : text_or_empty(&j->content));
        if (j->reasoning.len)
            json_object_set_new(msg, "reasoning_content", text_or_empty(&j->reasoning));
        if (j->n_calls)
            json_object_set_new(msg, "tool_calls", calls_json(j, false));
        json_object_set_new(ch, "message", msg);
    } else {
        json_object_set_new(ch, "text", text_or_empty(&j->content));
        json_object_set_new(ch, "logprobs", json_null());
    }
    json_object_set_new(ch, "finish_reason", json_string(srv_finish_reason(j)));
    json_t *choices = json_array();
    json_array_append_new(choices, ch);
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(j));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* One SSE data event of a chunk with choices [choice] (or [] when choice is NULL). */
static void chunk(srv_job *j, json_t *choice, json_t *usage)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "object", json_string(j->api == API_CHAT ? "chat.completion.chunk" : "text_completion"));
    json_object_set_new(o, "created", json_integer(j->created));
    json_object_set_new(o, "model", json_string(j->model_name));
    json_t *choices = json_array();
    if (choice)
        json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    if (usage)
        json_object_set_new(o, "usage", usage);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s) {
        sbuf_adds(&j->out, "data: ");
        sbuf_adds(&j->out, s);
        sbuf_adds(&j->out, "\n\n");
        free(s);
    }
}

static json_t *choice_delta(json_t *delta, const char *finish)
{
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(0));
    json_object_set_new(c, "delta", delta);
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    return c;
}

void srv_openai_stream_begin(srv_job *j)
{
    if (j->api != API_CHAT)
        return;
    json_t *d = json_object();
    json_object_set_new(d, "role", json_string("assistant"));
    json_object_set_new(d, "content", json_string(""));
    chunk(j, choice_delta(d, NULL), NULL);
}

void srv_openai_stream_delta(srv_job *j, bool reasoning, const char *text, size_t len)
{
    json_t *s = json_stringn(text, len);
    if (!s)
        return;
    if (j->api == API_COMPLETION) {
        json_t *c = json_object();
        json_object_set_new(c, "index", json_integer(0));
        json_object_set_new(c, "text", s);
        json_object_set_new(c, "logprobs", json_null());
        json_object_set_new(c, "finish_reason", json_null());
        chunk(j, c, NULL);
        return;
    }
    json_t *d = json_object();
    json_object_set_new(d, reasoning ? "reasoning_content" : "content", s);
    chunk(j, choice_delta(d, NULL), NULL);
}

void srv_openai_stream_end(srv_job *j)
{
    if (j->api == API_CHAT && j->n_calls) {
        json_t *d = json_object();
        json_object_set_new(d, "tool_calls", calls_json(j, true));
        chunk(j, choice_delta(d, NULL), NULL);
    }
    if (j->api == API_COMPLETION) {
        json_t *c = json_object();
        json_object_set_new(c, "index", json_integer(0));
        json_object_set_new(c, "text", json_string(""));
        json_object_set_new(c, "logprobs", json_null());
        json_object_set_new(c, "finish_reason", json_string(srv_finish_reason(j)));
        chunk(j, c, NULL);
    } else {
        chunk(j, choice_delta(json_object(), srv_finish_reason(j)), NULL);
    }
    if (j->include_usage)
        chunk(j, NULL, usage_json(j));
    sbuf_adds(&j->out, "data: [DONE]\n\n");
}

void srv_openai_stream_error(srv_job *j)
{
    char *e = srv_error_json(j->api, j->status, j->err_type, j->err_msg, NULL);
    if (e) {
        sbuf_adds(&j->out, "data: ");
        sbuf_adds(&j->out, e);
        sbuf_adds(&j->out, "\n\ndata: [DONE]\n\n");
        free(e);
    }
}
