/* server/prompt: a request's conversation through the model's chat template, as gmlx run and
 * chat render it (the same variables: cli/chatfmt), and tokenized. */
#include <stdlib.h>
#include <string.h>

#include "chatfmt.h"
#include "srv.h"

static bool tokenize(srv_job *j, const char *text, size_t len, unsigned flags)
{
    gm_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    if (gm_tokenize(j->model->vocab, text, len, flags, &ids, &n, &err) != 0) {
        srv_job_fail(j, 400, "invalid_request_error", "the prompt cannot be tokenized: %s", err.msg);
        return false;
    }
    if (n == 0) {
        free(ids);
        srv_job_fail(j, 400, "invalid_request_error", "the prompt is empty");
        return false;
    }
    j->tokens = ids;
    j->n_tokens = n;
    return true;
}

bool srv_prompt_chat(srv_job *j, json_t *messages, const json_t *tools, const json_t *template_kwargs, int thinking)
{
    srv_model *m = j->model;
    if (!m->tmpl) {
        srv_job_fail(j, 400, "invalid_request_error", "model '%s' has no chat template; send a raw prompt to "
                     "/v1/completions, or start the server with a template", m->id);
        return false;
    }
    json_t *extra = json_is_object(template_kwargs) ? json_deep_copy(template_kwargs) : json_object();
    if (extra && tools && json_array_size(tools))
        json_object_set(extra, "tools", (json_t *)tools);
    json_t *vars = extra ? gm_cli_vars(m->vocab, messages, true, extra) : NULL;
    json_decref(extra);
    if (!vars) {
        srv_job_fail(j, 500, "server_error", "out of memory");
        return false;
    }
    int th = thinking >= 0 ? thinking : m->cfg->thinking;
    if (th >= 0)
        (void)gm_cli_thinking_var(m->tmpl_src, th != 0, vars);
    char *js = json_dumps(vars, JSON_COMPACT);
    json_decref(vars);
    if (!js) {
        srv_job_fail(j, 500, "server_error", "out of memory");
        return false;
    }
    gm_err err = {0};
    char *text = NULL;
    size_t len = 0;
    int rc = gm_template_render(m->tmpl, js, strlen(js), NULL, &text, &len, &err);
    free(js);
    if (rc != 0) {
        srv_job_fail(j, 400, "invalid_request_error", "the chat template refused the conversation: %s", err.msg);
        return false;
    }
    j->think_inside = gm_think_prompt_open(m->style, text, len);
    /* the template decides BOS, as transformers encodes a rendered conversation */
    bool ok = tokenize(j, text, len, GM_TOKENIZE_PARSE_SPECIAL);
    free(text);
    return ok;
}

bool srv_prompt_raw(srv_job *j, const char *text, size_t len)
{
    return tokenize(j, text, len, GM_TOKENIZE_PARSE_SPECIAL | GM_TOKENIZE_ADD_SPECIAL);
}
