/* The public remote API (gmlx.h "remote model files"): refs, a remote model resolved to its
 * parts, its header by range reads (a gm_file), and the download of a part. The remote module
 * does the HTTP; this file keeps the public handle's copies of what it was given. */
#include <stdlib.h>
#include <string.h>

#include "api/file.h"
#include "base/err.h"
#include "remote/remote.h"

struct gm_remote_model {
    gm_remote_opts opts;         /* endpoint and token point at the copies below */
    char *endpoint, *token;
    gm_remote_set set;
    char resolved_to[2048];
    gm_remote_model_info info;   /* points into set and resolved_to */
};

void gm_fetch_opts_default(gm_fetch_opts *o) { memset(o, 0, sizeof *o); }

int gm_ref_is_remote(const char *s, gm_err *err)
{
    if (!s)
        return gm_err_set(err, GM_EINVAL, "no model ref given");
    gm_ref ref;
    int rc = gm_ref_parse(s, &ref, err);
    if (rc)
        return rc;
    return ref.kind != GM_REF_LOCAL;
}

void gm_remote_model_free(gm_remote_model *r)
{
    if (!r)
        return;
    gm_remote_set_free(&r->set);
    free(r->endpoint);
    free(r->token);
    free(r);
}

static int dup_opt(const char *s, char **out)
{
    *out = NULL;
    if (!s)
        return 0;
    *out = strdup(s);
    return *out ? 0 : -1;
}

int gm_remote_model_resolve(gm_remote_model **out, const char *ref, const gm_fetch_opts *opts, gm_err *err)
{
    *out = NULL;
    if (!ref)
        return gm_err_set(err, GM_EINVAL, "no model ref given");
    gm_fetch_opts def;
    if (!opts) {
        gm_fetch_opts_default(&def);
        opts = &def;
    }
    gm_ref r;
    int rc = gm_ref_parse(ref, &r, err);
    if (rc)
        return rc;
    if (r.kind == GM_REF_LOCAL)
        return gm_err_set(err, GM_EINVAL, "'%s' is not a remote model ref", ref);
    gm_remote_model *m = calloc(1, sizeof *m);
    if (!m || dup_opt(opts->endpoint, &m->endpoint) || dup_opt(opts->token, &m->token)) {
        gm_remote_model_free(m);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    m->opts.endpoint = m->endpoint;
    m->opts.token = m->token;
    m->opts.stall_s = opts->stall_s;
    if ((rc = gm_remote_resolve(&m->opts, &r, &m->set, m->resolved_to, sizeof m->resolved_to, err))) {
        free(m->endpoint);
        free(m->token);
        free(m); /* a failed resolve leaves no set to free */
        return rc;
    }
    m->info.name = m->set.name;
    m->info.repo = m->set.repo;
    m->info.resolved_to = m->resolved_to;
    m->info.n_parts = m->set.n_parts;
    *out = m;
    return 0;
}

const gm_remote_model_info *gm_remote_model_get_info(const gm_remote_model *r) { return &r->info; }

int gm_remote_model_part(const gm_remote_model *r, uint32_t i, gm_remote_part_info *out, gm_err *err)
{
    memset(out, 0, sizeof *out);
    if (i >= r->set.n_parts)
        return gm_err_set(err, GM_ERANGE, "%s: part %u of %u", r->set.name, i, r->set.n_parts);
    const gm_remote_part *p = &r->set.parts[i];
    out->name = p->name;
    out->url = p->url;
    out->size = p->size;
    out->sha256 = p->sha256;
    return 0;
}

int gm_file_open_remote(gm_file **out, gm_remote_model *r, uint64_t max_header_bytes, gm_err *err)
{
    *out = NULL;
    gm_gguf *g = NULL;
    int rc = gm_remote_open_header(&r->opts, &r->set, max_header_bytes, &g, NULL, err);
    if (rc)
        return rc;
    return gm_file_wrap(out, g, err);
}

int gm_remote_model_download(const gm_remote_model *r, uint32_t i, const char *part_path, gm_download_fn fn,
                             void *user, gm_download_result *res, gm_err *err)
{
    gm_download_result ignore;
    if (!res)
        res = &ignore;
    memset(res, 0, sizeof *res);
    if (i >= r->set.n_parts)
        return gm_err_set(err, GM_ERANGE, "%s: part %u of %u", r->set.name, i, r->set.n_parts);
    if (!part_path)
        return gm_err_set(err, GM_EINVAL, "no .part path given");
    const gm_remote_part *p = &r->set.parts[i];
    gm_download_info info = {0};
    int rc = gm_remote_download(&r->opts, p->url, part_path, p->size, p->sha256, fn, user, &info, err);
    res->resumed_from = info.resumed_from;
    res->total = info.total;
    res->restarted = info.restarted;
    res->hash_checked = info.hash_checked;
    return rc;
}
