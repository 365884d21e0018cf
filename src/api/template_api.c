/* The public chat-template API (gmlx.h "chat templates"): the renderer of template/ behind a
 * JSON-text interface, so that the public header needs no JSON library. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/internal.h"
#include "base/err.h"
#include "template/template.h"

struct gm_template {
    gm_tmpl *t;
};

int gm_template_parse(gm_template **out, const char *src, size_t len, gm_err *err)
{
    *out = NULL;
    gm_template *t = calloc(1, sizeof *t);
    if (!t)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    int rc = gm_tmpl_parse(&t->t, src, len, err);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void gm_template_free(gm_template *t)
{
    if (!t)
        return;
    gm_tmpl_free(t->t);
    free(t);
}

int gm_template_render(const gm_template *t, const char *vars_json, size_t vars_len, const gm_template_opts *opts,
                       char **out, size_t *out_len, gm_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    json_error_t je;
    json_t *vars = json_loadb(vars_json, vars_len, JSON_REJECT_DUPLICATES, &je);
    if (!vars)
        return gm_err_set(err, GM_EFORMAT, "template variables: line %d column %d: %s", je.line, je.column, je.text);
    if (!json_is_object(vars)) {
        const bool list = json_is_array(vars);
        json_decref(vars);
        return gm_err_set(err, GM_EFORMAT, "template variables: a JSON object is needed, not a %s",
                          list ? "list" : "value");
    }
    gm_tmpl_render_opts ro;
    gm_tmpl_render_opts_default(&ro);
    if (opts) {
        ro.now_set = opts->now_set;
        ro.now_unix_s = opts->now_unix_s;
        if (opts->max_output_bytes)
            ro.limits.max_output_bytes = opts->max_output_bytes;
    }
    size_t n = 0;
    int rc = gm_tmpl_render(t->t, vars, &ro, out, &n, err);
    json_decref(vars);
    if (rc == 0 && out_len)
        *out_len = n;
    return rc;
}
