/* remote/hub: a ref resolved into the parts of a file set (the hub's listing for hub refs), and
 * the set's header read by range requests. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "remote/internal.h"

#define LIST_LIMIT_BYTES (64u << 20)
#define LIST_MAX_PAGES 200

void gm_hub_list_free(gm_hub_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].path);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static const char *endpoint_of(const gm_remote_opts *o)
{
    return o->endpoint && *o->endpoint ? o->endpoint : GM_REMOTE_DEFAULT_ENDPOINT;
}

int gm_hub_parse_listing(const char *url, const char *text, size_t len, gm_hub_list *l, gm_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root || !json_is_array(root)) {
        json_decref(root);
        return gm_err_set(err, GM_EFORMAT, "%s: the hub's file listing is not a JSON array", url);
    }
    size_t i;
    json_t *e;
    json_array_foreach(root, i, e)
    {
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *path = json_string_value(json_object_get(e, "path"));
        if (!type || !path || strcmp(type, "file") != 0)
            continue;
        if (l->n == l->cap) {
            size_t cap = l->cap ? l->cap * 2 : 64;
            gm_hub_file *nv = realloc(l->v, cap * sizeof *nv);
            if (!nv) {
                json_decref(root);
                return gm_err_set(err, GM_ENOMEM, "out of memory");
            }
            l->v = nv;
            l->cap = cap;
        }
        gm_hub_file *f = &l->v[l->n];
        memset(f, 0, sizeof *f);
        if (!(f->path = strdup(path))) {
            json_decref(root);
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        }
        json_t *sz = json_object_get(e, "size");
        json_t *lfs = json_object_get(e, "lfs");
        if (json_is_object(lfs)) {
            json_t *ls = json_object_get(lfs, "size");
            const char *oid = json_string_value(json_object_get(lfs, "oid"));
            if (json_is_integer(ls))
                sz = ls;
            if (oid && strlen(oid) == 64 && strspn(oid, "0123456789abcdef") == 64)
                memcpy(f->sha256, oid, 65);
        }
        if (json_is_integer(sz) && json_integer_value(sz) >= 0)
            f->size = (uint64_t)json_integer_value(sz);
        l->n++;
    }
    json_decref(root);
    return 0;
}

/* Every file of repo@rev, following the listing's pages. */
static int hub_list_files(const gm_remote_opts *o, const char *repo, const char *rev, gm_hub_list *l, gm_err *err)
{
    char url[4096], next[2048];
    snprintf(url, sizeof url, "%s/api/models/%s/tree/%s?recursive=true", endpoint_of(o), repo, rev);
    for (int page = 0; page < LIST_MAX_PAGES; page++) {
        char *text = NULL;
        size_t len = 0;
        int rc = gm_http_get_text(o, url, LIST_LIMIT_BYTES, &text, &len, next, sizeof next, err);
        if (rc == 0)
            rc = gm_hub_parse_listing(url, text, len, l, err);
        free(text);
        if (rc)
            return rc;
        if (!next[0])
            return 0;
        snprintf(url, sizeof url, "%s", next);
    }
    return gm_err_set(err, GM_ERANGE, "%s: the hub's listing of %s goes on past %d pages", endpoint_of(o), repo,
                      LIST_MAX_PAGES);
}

static const gm_hub_file *list_find(const gm_hub_list *l, const char *path)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].path, path) == 0)
            return &l->v[i];
    return NULL;
}

static bool is_gguf(const char *p)
{
    size_t n = strlen(p);
    return n > 5 && strcasecmp(p + n - 5, ".gguf") == 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return false;
}

void gm_remote_set_free(gm_remote_set *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->n_parts; i++) {
        free(s->parts[i].url);
        free(s->parts[i].name);
    }
    free(s->parts);
    free(s->name);
    free(s->repo);
    memset(s, 0, sizeof *s);
}

/* The name of part i (1-based) of the set whose first part's name is first. */
static char *part_name(const char *first, size_t prefix_len, unsigned i, unsigned count, const char *tail)
{
    size_t len = strlen(first) + strlen(tail) + 32;
    char *s = malloc(len);
    if (s)
        snprintf(s, len, "%.*s-%05u-of-%05u.gguf%s", (int)prefix_len, first, i, count, tail);
    return s;
}

/* Fills out's parts from a first-part address: a split name gives every part's. tail: what
 * follows the file name in a URL (a query), kept on each. */
static int set_parts(gm_remote_set *out, const char *addr, const char *tail, gm_err *err)
{
    size_t prefix_len = 0;
    unsigned no = 1, count = 1;
    char *clean = strdup(addr);
    if (!clean)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    bool split = gm_gguf_split_name(clean, &prefix_len, &no, &count);
    if (split && (count < 1 || count > GM_GGUF_MAX_PARTS || no < 1 || no > count)) {
        free(clean);
        return gm_err_set(err, GM_EINVAL, "%s: part %u of %u is not a valid split name", addr, no, count);
    }
    out->n_parts = split ? count : 1;
    out->parts = calloc(out->n_parts, sizeof *out->parts);
    if (!out->parts) {
        free(clean);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    for (unsigned i = 0; i < out->n_parts; i++) {
        gm_remote_part *p = &out->parts[i];
        if (split) {
            p->url = part_name(clean, prefix_len, i + 1, count, tail);
        } else {
            size_t len = strlen(clean) + strlen(tail) + 1;
            if ((p->url = malloc(len)))
                snprintf(p->url, len, "%s%s", clean, tail);
        }
        const char *b = p->url ? base_name(p->url) : NULL;
        if (!p->url || !(p->name = strndup(b, strcspn(b, "?#")))) {
            free(clean);
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        }
    }
    free(clean);
    return 0;
}

/* The hub's download address of a repo file. */
static char *resolve_url(const gm_remote_opts *o, const char *repo, const char *rev, const char *path)
{
    size_t len = strlen(endpoint_of(o)) + strlen(repo) + strlen(rev) + strlen(path) + 32;
    char *u = malloc(len);
    if (u)
        snprintf(u, len, "%s/%s/resolve/%s/%s", endpoint_of(o), repo, rev, path);
    return u;
}

int gm_remote_resolve(const gm_remote_opts *o, const gm_ref *r, gm_remote_set *out, char *resolved_to,
                      size_t resolved_len, gm_err *err)
{
    memset(out, 0, sizeof *out);
    if (resolved_to && resolved_len)
        resolved_to[0] = '\0';
    if (r->kind == GM_REF_URL) {
        size_t at = strcspn(r->url, "?#");
        char *addr = strndup(r->url, at);
        if (!addr || !(out->name = strdup(r->url)))
            return free(addr), gm_err_set(err, GM_ENOMEM, "out of memory");
        int rc = set_parts(out, addr, r->url + at, err);
        free(addr);
        if (rc)
            gm_remote_set_free(out);
        return rc;
    }
    if (r->kind != GM_REF_HUB_FILE && r->kind != GM_REF_HUB_QUANT)
        return gm_err_set(err, GM_EINVAL, "not a remote model name");
    gm_hub_list l = {0};
    gm_err lerr = {0};
    int lrc = hub_list_files(o, r->repo, r->rev, &l, &lerr);
    char path[1024];
    if (r->kind == GM_REF_HUB_QUANT) {
        if (lrc) {
            gm_hub_list_free(&l);
            return gm_err_set(err, lrc, "%s:%s: cannot list the repo's files: %s", r->repo, r->quant, lerr.msg);
        }
        /* the models (single files and first parts) whose name has the quant in it */
        char found[8][256];
        size_t n_found = 0, n_models = 0;
        for (size_t i = 0; i < l.n; i++) {
            const char *p = l.v[i].path;
            size_t pl;
            unsigned no, count;
            if (!is_gguf(p) || (gm_gguf_split_name(p, &pl, &no, &count) && no != 1))
                continue;
            n_models++;
            if (!contains_ci(base_name(p), r->quant) || contains_ci(base_name(p), "mmproj"))
                continue;
            if (n_found < 8)
                snprintf(found[n_found], sizeof found[0], "%s", p);
            n_found++;
        }
        if (n_found == 0) {
            gm_hub_list_free(&l);
            return gm_err_set(err, GM_ENOTFOUND, "%s:%s: none of the repo's %zu GGUF model(s) has '%s' in its name",
                              r->repo, r->quant, n_models, r->quant);
        }
        if (n_found > 1) {
            char names[1024] = "";
            size_t pos = 0;
            for (size_t i = 0; i < n_found && i < 8 && pos < sizeof names; i++)
                pos += (size_t)snprintf(names + pos, sizeof names - pos, "\n  hf://%s/%s", r->repo, found[i]);
            gm_hub_list_free(&l);
            return gm_err_set(err, GM_EINVAL, "%s:%s: %zu models match; name one:%s%s", r->repo, r->quant, n_found,
                              names, n_found > 8 ? "\n  ..." : "");
        }
        snprintf(path, sizeof path, "%s", found[0]);
    } else {
        snprintf(path, sizeof path, "%s", r->path);
        if (lrc == 0 && !list_find(&l, path)) {
            char names[1024] = "";
            size_t pos = 0, shown = 0;
            for (size_t i = 0; i < l.n && pos < sizeof names; i++) {
                size_t pl;
                unsigned no, count;
                if (!is_gguf(l.v[i].path) || (gm_gguf_split_name(l.v[i].path, &pl, &no, &count) && no != 1))
                    continue;
                if (shown++ < 8)
                    pos += (size_t)snprintf(names + pos, sizeof names - pos, "\n  hf://%s/%s", r->repo, l.v[i].path);
            }
            gm_hub_list_free(&l);
            return gm_err_set(err, GM_ENOTFOUND, "hf://%s/%s: no such file in %s@%s%s%s", r->repo, r->path, r->repo,
                              r->rev, shown ? "; its GGUF models:" : " (it has no GGUF model)", names);
        }
        /* no listing (a mirror without the API): the file is fetched as named, unverified */
    }
    char name[1400];
    gm_ref_hub_name(r->repo, r->rev, path, name, sizeof name);
    if (r->kind == GM_REF_HUB_QUANT && resolved_to)
        snprintf(resolved_to, resolved_len, "%s", name);
    char *first = resolve_url(o, r->repo, r->rev, path);
    int rc = 0;
    if (!first || !(out->name = strdup(name)) || !(out->repo = strdup(r->repo)))
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
    if (!rc)
        rc = set_parts(out, first, "", err);
    free(first);
    /* sizes and hashes from the listing; a part missing from it is an error now, not a 404 later */
    size_t pl = 0;
    unsigned no = 1, count = 1;
    bool split = gm_gguf_split_name(path, &pl, &no, &count);
    for (uint32_t i = 0; !rc && lrc == 0 && i < out->n_parts; i++) {
        char *pp = split ? part_name(path, pl, i + 1, count, "") : strdup(path);
        const gm_hub_file *f = pp ? list_find(&l, pp) : NULL;
        if (!pp)
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        else if (!f)
            rc = gm_err_set(err, GM_ENOTFOUND, "hf://%s/%s: part %u of %u is not in the repo", r->repo, pp, i + 1,
                            out->n_parts);
        else {
            out->parts[i].size = f->size;
            memcpy(out->parts[i].sha256, f->sha256, sizeof f->sha256);
        }
        free(pp);
    }
    gm_hub_list_free(&l);
    if (rc)
        gm_remote_set_free(out);
    return rc;
}

int gm_remote_open_header(const gm_remote_opts *o, gm_remote_set *s, uint64_t max_bytes, gm_gguf **out,
                          uint64_t *bytes_read, gm_err *err)
{
    *out = NULL;
    if (bytes_read)
        *bytes_read = 0;
    if (!max_bytes)
        max_bytes = GM_REMOTE_DEFAULT_MAX_BYTES;
    uint64_t first = GM_REMOTE_FIRST_READ_BYTES < max_bytes ? GM_REMOTE_FIRST_READ_BYTES : max_bytes;
    gm_gguf_prefix *pre = calloc(s->n_parts, sizeof *pre);
    uint8_t **bufs = calloc(s->n_parts, sizeof *bufs);
    int rc = 0;
    if (!pre || !bufs)
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
    for (uint32_t i = 0; !rc && i < s->n_parts; i++) {
        uint64_t got = 0, total = 0;
        if (!(bufs[i] = malloc((size_t)first))) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
            break;
        }
        rc = gm_http_get_range(o, s->parts[i].url, 0, first, bufs[i], &got, &total, err);
        if (rc)
            break;
        if (!total)
            total = got < first ? got : 0;
        if (!total) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: the server does not say the file's size", s->parts[i].url);
            break;
        }
        if (s->parts[i].size && s->parts[i].size != total) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: the server says %llu bytes, the listing %llu", s->parts[i].url,
                            (unsigned long long)total, (unsigned long long)s->parts[i].size);
            break;
        }
        s->parts[i].size = total;
        pre[i] = (gm_gguf_prefix){s->parts[i].url, bufs[i], got, total};
        if (bytes_read)
            *bytes_read += got;
    }
    while (!rc) {
        uint32_t short_part = 0;
        gm_err oerr = {0};
        rc = gm_gguf_open_prefixes(out, s->name, pre, s->n_parts, &short_part, &oerr);
        if (rc != GM_GGUF_NEED_MORE) {
            if (rc)
                gm_err_set(err, rc, "%s", oerr.msg);
            break;
        }
        gm_gguf_prefix *p = &pre[short_part];
        if (p->len >= max_bytes) {
            rc = gm_err_set(err, GM_ERANGE, "%s: the GGUF header is larger than the %llu MB range-read cap; pass a "
                            "larger --max-mb", s->parts[short_part].url, (unsigned long long)(max_bytes >> 20));
            break;
        }
        uint64_t want = p->len * 4 < max_bytes ? p->len * 4 : max_bytes;
        if (want > p->size)
            want = p->size;
        uint8_t *nb = realloc(bufs[short_part], (size_t)want);
        if (!nb) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
            break;
        }
        bufs[short_part] = nb;
        uint64_t got = 0, total = 0;
        rc = gm_http_get_range(o, s->parts[short_part].url, p->len, want, nb + p->len, &got, &total, err);
        if (rc)
            break;
        if (got == 0) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: reached the end of the file before the GGUF header was complete",
                            s->parts[short_part].url);
            break;
        }
        p->bytes = nb;
        p->len += got;
        if (bytes_read)
            *bytes_read += got;
    }
    for (uint32_t i = 0; bufs && i < s->n_parts; i++)
        free(bufs[i]);
    free(bufs);
    free(pre);
    return rc;
}
