/* Conversations through a chat template (see chatfmt.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatfmt.h"
#include "cli.h"

int gm_cli_tmpl_load(const char *cmd, const gm_vocab *v, const char *path, gm_cli_tmpl *out)
{
    memset(out, 0, sizeof *out);
    size_t len = 0;
    if (path) {
        if (!(out->src = gm_cli_read_text(cmd, path, &len)))
            return -1;
        out->origin = path;
    } else {
        const char *t = v ? gm_vocab_get_info(v)->chat_template : NULL;
        if (!t)
            return 0;
        if (!(out->src = strdup(t))) {
            gm_cli_error(cmd, "out of memory");
            return -1;
        }
        len = strlen(t);
        out->origin = "the model's chat template";
    }
    gm_err err = {0};
    if (gm_template_parse(&out->t, out->src, len, &err) != 0) {
        gm_cli_error(cmd, "%s: %s", out->origin, err.msg);
        gm_cli_tmpl_free(out);
        return -1;
    }
    return 1;
}

void gm_cli_tmpl_free(gm_cli_tmpl *t)
{
    gm_template_free(t->t);
    free(t->src);
    memset(t, 0, sizeof *t);
}

json_t *gm_cli_vars(const gm_vocab *v, json_t *messages, bool add_generation_prompt, const json_t *extra)
{
    json_t *vars = json_object();
    if (!vars)
        return NULL;
    json_object_set(vars, "messages", messages);
    json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt));
    if (v) {
        const gm_vocab_info *in = gm_vocab_get_info(v);
        json_object_set_new(vars, "bos_token", json_string(in->bos_text));
        json_object_set_new(vars, "eos_token", json_string(in->eos_text));
    }
    if (extra)
        json_object_update(vars, (json_t *)extra);
    return vars;
}

bool gm_cli_thinking_var(const char *src, bool on, json_t *vars)
{
    if (strstr(src, "thinking_mode")) {
        json_object_set_new(vars, "thinking_mode", json_string(on ? "enabled" : "disabled"));
        return true;
    }
    if (strstr(src, "enable_thinking")) {
        json_object_set_new(vars, "enable_thinking", json_boolean(on));
        return true;
    }
    if (strstr(src, "no_think") && strstr(src, "reasoning_effort")) {
        json_object_set_new(vars, "reasoning_effort", json_string(on ? "high" : "no_think"));
        return true;
    }
    if (strstr(src, "thinking")) { /* Kimi-K3, DeepSeek-V3.1: a bool named thinking */
        json_object_set_new(vars, "thinking", json_boolean(on));
        return true;
    }
    return false;
}

char *gm_cli_render(const char *cmd, const gm_cli_tmpl *t, json_t *vars, size_t *len)
{
    char *js = json_dumps(vars, JSON_COMPACT);
    if (!js) {
        gm_cli_error(cmd, "out of memory");
        return NULL;
    }
    gm_err err = {0};
    char *out = NULL;
    int rc = gm_template_render(t->t, js, strlen(js), NULL, &out, len, &err);
    free(js);
    if (rc != 0) {
        gm_cli_error(cmd, "%s: %s", t->origin, err.msg);
        return NULL;
    }
    return out;
}

json_t *gm_cli_message(const char *role, const char *text, size_t len)
{
    json_t *c = json_stringn(text, len), *m = c ? json_object() : NULL;
    if (!m) {
        json_decref(c);
        return NULL;
    }
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", c);
    return m;
}

json_t *gm_cli_messages(const char *system, const char *user, size_t user_len)
{
    json_t *all = json_array(), *s = system ? gm_cli_message("system", system, strlen(system)) : NULL;
    json_t *u = gm_cli_message("user", user, user_len);
    if (!all || !u || (system && !s)) {
        json_decref(all);
        json_decref(s);
        json_decref(u);
        return NULL;
    }
    if (s)
        json_array_append_new(all, s);
    json_array_append_new(all, u);
    return all;
}
