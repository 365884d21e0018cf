/* server/anthropic: the Anthropic Messages route: requests (system, content blocks, tool_use
 * and tool_result, thinking) converted into the OpenAI-shaped messages the templates take, the
 * answer's content blocks, and the named stream events; plus the dispatch of the worker's calls
 * to the job's API and the error bodies of both APIs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* Text of a string or of an array of text blocks; NULL and a 400 otherwise. */
static bool block_text(srv_job *j, json_t *c, sbuf *out, const char *where)
{
    if (json_is_string(c)) {
        sbuf_add(out, json_string_value(c), json_string_length(c));
        return true;
    }
    if (!json_is_array(c)) {
        srv_job_fail(j, 400, "invalid_request_error", "%s must be a string or an array of text blocks", where);
        return false;
    }
    size_t i;
    json_t *b;
    json_array_foreach(c, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        json_t *t = json_object_get(b, "text");
        if (!type || strcmp(type, "text") != 0 || !json_is_string(t)) {
            srv_job_fail(j, 400, "invalid_request_error", "%s[%zu]: only text blocks are supported here", where, i);
            return false;
        }
        if (out->len)
            sbuf_adds(out, "\n");
        sbuf_add(out, json_string_value(t), json_string_length(t));
    }
    return true;
}

static json_t *msg(const char *role, const sbuf *text)
{
    json_t *o = json_object();
    json_object_set_new(o, "role", json_string(role));
    json_object_set_new(o, "content", json_stringn(text->p ? text->p : "", text->len));
    return o;
}

/* One Anthropic message into one or more OpenAI-shaped ones appended to out. */
static bool convert(srv_job *j, json_t *m, size_t idx, json_t *out)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)) {
        srv_job_fail(j, 400, "invalid_request_error", "messages.%zu.role must be \"user\" or \"assistant\"", idx);
        return false;
    }
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) {
        json_array_append_new(out, msg(role, &(sbuf){(char *)json_string_value(c), json_string_length(c), 0, 0}));
        return true;
    }
    if (!json_is_array(c)) {
        srv_job_fail(j, 400, "invalid_request_error", "messages.%zu.content must be a string or an array of blocks", idx);
        return false;
    }
    sbuf text = {0}, thinking = {0};
    json_t *calls = json_array();
    size_t i;
    json_t *b;
    bool ok = true;
    json_array_foreach(c, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type) {
            srv_job_fail(j, 400, "invalid_request_error", "messages.%zu.content.%zu has no type", idx, i);
            ok = false;
            break;
        }
        if (strcmp(type, "text") == 0 && json_is_string(json_object_get(b, "text"))) {
            json_t *t = json_object_get(b, "text");
            sbuf_add(&text, json_string_value(t), json_string_length(t));
        } else if (strcmp(type, "thinking") == 0 && json_is_string(json_object_get(b, "thinking"))) {
            json_t *t = json_object_get(b, "thinking");
            sbuf_add(&thinking, json_string_value(t), json_string_length(t));
        } else if (strcmp(type, "redacted_thinking") == 0) {
            /* nothing a template can show */
        } else if (strcmp(type, "tool_use") == 0 && strcmp(role, "assistant") == 0 &&
                   json_is_string(json_object_get(b, "name"))) {
            json_t *call = json_object(), *fn = json_object();
            json_t *input = json_object_get(b, "input");
            json_t *id = json_object_get(b, "id");
            json_object_set_new(call, "id", json_is_string(id) ? json_incref(id) : json_string("call"));
            json_object_set_new(call, "type", json_string("function"));
            json_object_set(fn, "name", json_object_get(b, "name"));
            json_object_set_new(fn, "arguments", json_is_object(input) ? json_incref(input) : json_object());
            json_object_set_new(call, "function", fn);
            json_array_append_new(calls, call);
        } else if (strcmp(type, "tool_result") == 0 && strcmp(role, "user") == 0) {
            /* a tool's answer: a message of role tool before the user's own text */
            sbuf r = {0};
            json_t *rc = json_object_get(b, "content");
            if (rc && !json_is_null(rc) && !block_text(j, rc, &r, "tool_result.content")) {
                sbuf_free(&r);
                ok = false;
                break;
            }
            json_t *tm = msg("tool", &r);
            sbuf_free(&r);
            if (json_is_string(json_object_get(b, "tool_use_id")))
                json_object_set(tm, "tool_call_id", json_object_get(b, "tool_use_id"));
            json_array_append_new(out, tm);
        } else {
            srv_job_fail(j, 400, "invalid_request_error", "messages.%zu.content.%zu: blocks of type '%s' are not "
                         "supported%s", idx, i, type, strcmp(type, "image") == 0 || strcmp(type, "document") == 0
                                                      ? " (this server runs text models)" : " in this role");
            ok = false;
            break;
        }
    }
    if (ok && (text.len || json_array_size(calls) || thinking.len || strcmp(role, "assistant") == 0)) {
        json_t *o = msg(role, &text);
        if (thinking.len)
            json_object_set_new(o, "reasoning_content", json_stringn(thinking.p, thinking.len));
        if (json_array_size(calls))
            json_object_set(o, "tool_calls", calls);
        json_array_append_new(out, o);
    }
    json_decref(calls);
    sbuf_free(&text);
    sbuf_free(&thinking);
    return ok;
}

/* Anthropic tools ({name, description, input_schema}) as OpenAI's. */
static json_t *tools_openai(srv_job *j, json_t *tools)
{
    if (!tools || json_is_null(tools))
        return NULL;
    if (!json_is_array(tools)) {
        srv_job_fail(j, 400, "invalid_request_error", "tools must be an array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        if (!json_is_string(json_object_get(t, "name"))) {
            srv_job_fail(j, 400, "invalid_request_error", "tools.%zu.name must be a string", i);
            json_decref(out);
            return NULL;
        }
        if (json_is_string(json_object_get(t, "type")) && json_object_get(t, "input_schema") == NULL)
            continue; /* a server tool (web search, ...): nothing a local model can call */
        json_t *fn = json_object();
        json_object_set(fn, "name", json_object_get(t, "name"));
        if (json_is_string(json_object_get(t, "description")))
            json_object_set(fn, "description", json_object_get(t, "description"));
        json_t *schema = json_object_get(t, "input_schema");
        json_object_set_new(fn, "parameters", json_is_object(schema) ? json_incref(schema) : json_object());
        json_t *o = json_object();
        json_object_set_new(o, "type", json_string("function"));
        json_object_set_new(o, "function", fn);
        json_array_append_new(out, o);
    }
    return out;
}

bool srv_anthropic_parse(srv_pool *p, json_t *req, srv_job *j, bool count_only)
{
    j->api = API_MESSAGES;
    j->route = count_only ? "/v1/messages/count_tokens" : "/v1/messages";
    srv_job_id(j, "msg_");
    if (!srv_req_model(p, j, req))
        return false;
    if (!count_only) {
        uint64_t max = 0;
        bool set = false;
        if (!srv_req_bool(j, req, "stream", &j->stream) || !srv_req_uint(j, req, "max_tokens", 1, 1u << 30, &max, &set))
            return false;
        if (!set) {
            srv_job_fail(j, 400, "invalid_request_error", "max_tokens: Field required");
            return false;
        }
        j->max_tokens = (uint32_t)max;
        if (!srv_req_sampling(j, req, 1) || !srv_req_stops(j, json_object_get(req, "stop_sequences"), "stop_sequences"))
            return false;
    }
    json_t *msgs = json_object_get(req, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        srv_job_fail(j, 400, "invalid_request_error", "messages: a non-empty array is required");
        return false;
    }
    json_t *conv = json_array();
    json_t *sys = json_object_get(req, "system");
    if (sys && !json_is_null(sys)) {
        sbuf s = {0};
        if (!block_text(j, sys, &s, "system")) {
            sbuf_free(&s);
            json_decref(conv);
            return false;
        }
        json_array_append_new(conv, msg("system", &s));
        sbuf_free(&s);
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if (!json_is_object(m) || !convert(j, m, i, conv)) {
            if (!j->status)
                srv_job_fail(j, 400, "invalid_request_error", "messages.%zu must be an object", i);
            json_decref(conv);
            return false;
        }
    }
    json_t *tools = tools_openai(j, json_object_get(req, "tools"));
    if (j->status) {
        json_decref(conv);
        return false;
    }
    json_t *choice = json_object_get(req, "tool_choice");
    const char *ct = json_string_value(json_object_get(choice, "type"));
    if (ct && strcmp(ct, "none") == 0) {
        json_decref(tools);
        tools = NULL;
    }
    if (tools && json_array_size(tools) && !count_only)
        j->tools_json = json_dumps(tools, JSON_COMPACT);
    int thinking = -1;
    json_t *th = json_object_get(req, "thinking");
    const char *tt = json_string_value(json_object_get(th, "type"));
    if (tt)
        thinking = strcmp(tt, "disabled") != 0;
    bool ok = srv_prompt_chat(j, conv, tools, NULL, thinking);
    json_decref(tools);
    json_decref(conv);
    return ok;
}

static const char *stop_reason(const srv_job *j)
{
    if (j->n_calls)
        return "tool_use";
    if (j->res.stop == GM_STOP_LENGTH || j->res.stop == GM_STOP_CONTEXT)
        return "max_tokens";
    if (j->res.stop == GM_STOP_STRING)
        return "stop_sequence";
    return "end_turn";
}

static json_t *stop_sequence(const srv_job *j)
{
    if (j->res.stop == GM_STOP_STRING && j->res.stop_string >= 0 && (size_t)j->res.stop_string < j->n_stop)
        return json_string(j->stop[j->res.stop_string]);
    return json_null();
}

static json_t *tool_use_block(const gm_tool_call *c, bool empty_input)
{
    json_t *b = json_object();
    json_object_set_new(b, "type", json_string("tool_use"));
    json_object_set_new(b, "id", json_string(c->id));
    json_object_set_new(b, "name", json_string(c->name));
    json_t *input = empty_input ? NULL : json_loads(c->arguments, 0, NULL);
    json_object_set_new(b, "input", json_is_object(input) ? input : (json_decref(input), json_object()));
    return b;
}

char *srv_anthropic_answer(srv_job *j)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "type", json_string("message"));
    json_object_set_new(o, "role", json_string("assistant"));
    json_object_set_new(o, "model", json_string(j->model_name));
    json_t *content = json_array();
    if (j->reasoning.len) {
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("thinking"));
        json_object_set_new(b, "thinking", json_stringn(j->reasoning.p, j->reasoning.len));
        json_object_set_new(b, "signature", json_string(""));
        json_array_append_new(content, b);
    }
    if (j->content.len || !j->n_calls) {
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("text"));
        json_object_set_new(b, "text", json_stringn(j->content.p ? j->content.p : "", j->content.len));
        json_array_append_new(content, b);
    }
    for (size_t i = 0; i < j->n_calls; i++)
        json_array_append_new(content, tool_use_block(&j->calls[i], false));
    json_object_set_new(o, "content", content);
    json_object_set_new(o, "stop_reason", json_string(stop_reason(j)));
    json_object_set_new(o, "stop_sequence", stop_sequence(j));
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(j->n_prompt));
    json_object_set_new(u, "output_tokens", json_integer(j->res.n_generated));
    json_object_set_new(o, "usage", u);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static void event(srv_job *j, const char *name, json_t *data)
{
    json_t *o = json_object(); /* "type" first, as the API writes it */
    json_object_set_new(o, "type", json_string(name));
    json_object_update(o, data);
    json_decref(data);
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (s) {
        sbuf_addf(&j->out, "event: %s\ndata: ", name);
        sbuf_adds(&j->out, s);
        sbuf_adds(&j->out, "\n\n");
        free(s);
    }
}

void srv_anthropic_stream_begin(srv_job *j)
{
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(j->id));
    json_object_set_new(m, "type", json_string("message"));
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "model", json_string(j->model_name));
    json_object_set_new(m, "content", json_array());
    json_object_set_new(m, "stop_reason", json_null());
    json_object_set_new(m, "stop_sequence", json_null());
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(j->n_prompt));
    json_object_set_new(u, "output_tokens", json_integer(0));
    json_object_set_new(m, "usage", u);
    json_t *d = json_object();
    json_object_set_new(d, "message", m);
    event(j, "message_start", d);
}

static void block_stop(srv_job *j)
{
    if (!j->block)
        return;
    json_t *d = json_object();
    json_object_set_new(d, "index", json_integer(j->n_blocks - 1));
    event(j, "content_block_stop", d);
    j->block = 0;
}

static void block_start(srv_job *j, json_t *block, int kind)
{
    block_stop(j);
    json_t *d = json_object();
    json_object_set_new(d, "index", json_integer(j->n_blocks++));
    json_object_set_new(d, "content_block", block);
    event(j, "content_block_start", d);
    j->block = kind;
}

void srv_anthropic_stream_delta(srv_job *j, bool reasoning, const char *text, size_t len)
{
    const int kind = reasoning ? 1 : 2;
    if (j->block != kind) {
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string(reasoning ? "thinking" : "text"));
        json_object_set_new(b, reasoning ? "thinking" : "text", json_string(""));
        block_start(j, b, kind);
    }
    json_t *delta = json_object();
    json_object_set_new(delta, "type", json_string(reasoning ? "thinking_delta" : "text_delta"));
    json_object_set_new(delta, reasoning ? "thinking" : "text", json_stringn(text, len));
    json_t *d = json_object();
    json_object_set_new(d, "index", json_integer(j->n_blocks - 1));
    json_object_set_new(d, "delta", delta);
    event(j, "content_block_delta", d);
}

void srv_anthropic_stream_end(srv_job *j)
{
    if (!j->n_blocks && !j->n_calls) { /* an empty answer still has its text block */
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("text"));
        json_object_set_new(b, "text", json_string(""));
        block_start(j, b, 2);
    }
    for (size_t i = 0; i < j->n_calls; i++) {
        block_start(j, tool_use_block(&j->calls[i], true), 3);
        json_t *delta = json_object();
        json_object_set_new(delta, "type", json_string("input_json_delta"));
        json_object_set_new(delta, "partial_json", json_string(j->calls[i].arguments));
        json_t *d = json_object();
        json_object_set_new(d, "index", json_integer(j->n_blocks - 1));
        json_object_set_new(d, "delta", delta);
        event(j, "content_block_delta", d);
    }
    block_stop(j);
    json_t *delta = json_object();
    json_object_set_new(delta, "stop_reason", json_string(stop_reason(j)));
    json_object_set_new(delta, "stop_sequence", stop_sequence(j));
    json_t *u = json_object();
    json_object_set_new(u, "output_tokens", json_integer(j->res.n_generated));
    json_t *d = json_object();
    json_object_set_new(d, "delta", delta);
    json_object_set_new(d, "usage", u);
    event(j, "message_delta", d);
    event(j, "message_stop", json_object());
}

void srv_anthropic_stream_error(srv_job *j)
{
    json_t *e = json_object();
    json_object_set_new(e, "type", json_string(j->status >= 500 ? "api_error" : "invalid_request_error"));
    json_object_set_new(e, "message", json_string(j->err_msg));
    json_t *d = json_object();
    json_object_set_new(d, "error", e);
    event(j, "error", d);
}

/* ---- the worker's calls, by API ---- */

void srv_stream_begin(srv_job *j)
{
    if (j->api == API_MESSAGES)
        srv_anthropic_stream_begin(j);
    else
        srv_openai_stream_begin(j);
}

void srv_stream_delta(srv_job *j, bool reasoning, const char *text, size_t len)
{
    if (j->api == API_MESSAGES)
        srv_anthropic_stream_delta(j, reasoning, text, len);
    else if (!reasoning || j->api == API_CHAT)
        srv_openai_stream_delta(j, reasoning, text, len);
}

void srv_stream_end(srv_job *j)
{
    if (j->api == API_MESSAGES)
        srv_anthropic_stream_end(j);
    else
        srv_openai_stream_end(j);
}

void srv_stream_error(srv_job *j)
{
    if (j->api == API_MESSAGES)
        srv_anthropic_stream_error(j);
    else
        srv_openai_stream_error(j);
}

char *srv_answer_json(srv_job *j)
{
    return j->api == API_MESSAGES ? srv_anthropic_answer(j) : srv_openai_answer(j);
}

static const char *anthropic_type(int status)
{
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *srv_error_json(srv_api api, int status, const char *type, const char *msg, const json_t *extra)
{
    json_t *e = json_object();
    if (api == API_MESSAGES) {
        json_object_set_new(e, "type", json_string(anthropic_type(status)));
        json_object_set_new(e, "message", json_string(msg));
    } else {
        json_object_set_new(e, "message", json_string(msg));
        json_object_set_new(e, "type", json_string(type && *type ? type : "invalid_request_error"));
        json_object_set_new(e, "param", json_null());
        json_object_set_new(e, "code", type && *type ? json_string(type) : json_null());
    }
    if (extra)
        json_object_update(e, (json_t *)extra);
    json_t *o = json_object();
    if (api == API_MESSAGES)
        json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "error", e);
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}
