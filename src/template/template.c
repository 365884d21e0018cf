/* template/template: the public API of template.h: parsing into a gm_tmpl (tree, interned
 * names and constants in one arena owned by it), and rendering with a fresh context per call
 * (so one parsed template serves any number of threads at once). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/tmpl_int.h"

void gm_tmpl_limits_default(gm_tmpl_limits *l)
{
    l->max_output_bytes = 16u << 20;
    l->max_steps = 10000000;
    l->max_depth = 200;
}

void gm_tmpl_render_opts_default(gm_tmpl_render_opts *o)
{
    memset(o, 0, sizeof *o);
    gm_tmpl_limits_default(&o->limits);
}

/* ------------------------------------------------------------------ arena */

void *gm_tarena_alloc(gm_tmpl *t, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    gm_tarena_chunk *ch = t->arena;
    if (!ch || ch->cap - ch->used < n) {
        size_t cap = n > 60000 ? n : 60000;
        ch = malloc(sizeof *ch + cap);
        if (!ch)
            return NULL;
        ch->next = t->arena;
        ch->used = 0;
        ch->cap = cap;
        t->arena = ch;
    }
    void *p = (char *)ch->data + ch->used;
    ch->used += n;
    return p;
}

void gm_tarena_free(gm_tmpl *t)
{
    gm_tarena_chunk *ch = t->arena;
    while (ch) {
        gm_tarena_chunk *nx = ch->next;
        free(ch);
        ch = nx;
    }
    t->arena = NULL;
}

gm_tstr *gm_tarena_str(gm_tmpl *t, const char *p, size_t n)
{
    gm_tstr *s = gm_tarena_alloc(t, sizeof *s + n + 1);
    if (!s)
        return NULL;
    s->h.rc = -1; /* immortal: shared by every render */
    s->h.kind = TV_STR;
    s->len = n;
    if (n)
        memcpy(s->p, p, n);
    s->p[n] = 0;
    s->ncp = gm_u8_count(p, n);
    return s;
}

int gm_tmpl_intern(gm_tmpl *t, const char *p, size_t n, uint32_t *sym)
{
    for (uint32_t i = 0; i < t->nsyms; i++)
        if (gm_tstr_eq(t->syms[i], p, n)) {
            *sym = i;
            return 0;
        }
    if (t->nsyms == t->capsyms) {
        uint32_t cap = t->capsyms ? t->capsyms * 2 : 64;
        gm_tstr **s = realloc(t->syms, cap * sizeof *s);
        if (!s)
            return GM_ENOMEM;
        t->syms = s;
        int16_t *g = realloc(t->sym_global, cap * sizeof *g);
        if (!g)
            return GM_ENOMEM;
        t->sym_global = g;
        t->capsyms = cap;
    }
    gm_tstr *s = gm_tarena_str(t, p, n);
    if (!s)
        return GM_ENOMEM;
    t->syms[t->nsyms] = s;
    t->sym_global[t->nsyms] = (int16_t)gm_tglobal_id(p, n);
    *sym = t->nsyms++;
    return 0;
}

/* ------------------------------------------------------------------ API */

int gm_tmpl_parse(gm_tmpl **out, const char *src, size_t len, gm_err *err)
{
    *out = NULL;
    gm_tmpl *t = calloc(1, sizeof *t);
    if (!t)
        return gm_err_set(err, GM_ENOMEM, "template: out of memory");
    static const char *const fixed[SYM_NFIXED] = {
        [SYM_LOOP] = "loop", [SYM_CALLER] = "caller", [SYM_VARARGS] = "varargs", [SYM_KWARGS] = "kwargs"};
    for (int i = 0; i < SYM_NFIXED; i++) {
        uint32_t sym;
        if (gm_tmpl_intern(t, fixed[i], strlen(fixed[i]), &sym)) {
            gm_tmpl_free(t);
            return gm_err_set(err, GM_ENOMEM, "template: out of memory");
        }
    }
    gm_ttoks toks;
    int rc = gm_tlex(&toks, src ? src : "", src ? len : 0, err);
    if (rc) {
        gm_tmpl_free(t);
        return rc;
    }
    rc = gm_tparse(t, &toks, err);
    gm_ttoks_free(&toks);
    if (rc) {
        gm_tmpl_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void gm_tmpl_free(gm_tmpl *t)
{
    if (!t)
        return;
    gm_tarena_free(t);
    free(t->syms);
    free(t->sym_global);
    free(t);
}

/* Looks a JSON key up among the names the template uses; keys it never names are skipped. */
static bool find_sym(const gm_tmpl *t, const char *k, uint32_t *sym)
{
    size_t n = strlen(k);
    for (uint32_t i = 0; i < t->nsyms; i++)
        if (gm_tstr_eq(t->syms[i], k, n)) {
            *sym = i;
            return true;
        }
    return false;
}

int gm_tmpl_render(const gm_tmpl *t, const json_t *vars, const gm_tmpl_render_opts *opts, char **out,
                   size_t *out_len, gm_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!t)
        return gm_err_set(err, GM_EINVAL, "template: no template");
    if (vars && !json_is_object(vars))
        return gm_err_set(err, GM_EINVAL, "template: the variables must be a JSON object");
    gm_tmpl_render_opts def;
    if (!opts) {
        gm_tmpl_render_opts_default(&def);
        opts = &def;
    }
    gm_tbuf buf = {0};
    gm_tctx c = {.t = t, .err = err, .lim = opts->limits, .out = &buf, .line = 1,
                 .now_set = opts->now_set, .now_unix_s = opts->now_unix_s};
    if (c.lim.max_depth == 0)
        c.lim.max_depth = 1;
    c.tracked.prev = c.tracked.next = &c.tracked;
    int rc = 0;
    gm_tframe *root = gm_tframe_new(&c, NULL);
    if (!root)
        rc = GM_ENOMEM;
    if (!rc && vars) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vars, key, val) {
            uint32_t sym;
            if (!find_sym(t, key, &sym))
                continue;
            gm_tv v;
            if ((rc = gm_tv_from_json(&c, val, &v, 0)))
                break;
            /* a later duplicate key (not possible in jansson) would shadow an earlier one */
            if (root->n == root->cap) {
                uint32_t cap = root->cap ? root->cap * 2 : 16;
                struct gm_tvar *e = realloc(root->e, cap * sizeof *e);
                if (!e) {
                    gm_tv_decref(v);
                    rc = gm_err_set(err, GM_ENOMEM, "template: out of memory");
                    break;
                }
                root->e = e;
                root->cap = cap;
            }
            root->e[root->n].sym = sym;
            root->e[root->n].v = v;
            root->n++;
        }
    }
    if (!rc) {
        c.frame = root;
        rc = gm_trender_root(&c);
        c.frame = NULL;
    }
    if (root) {
        gm_tv r = {.k = TV_NS};
        r.u.o = &root->h;
        gm_tv_decref(r);
    }
    gm_track_sweep(&c);
    if (rc) {
        gm_tbuf_free(&buf);
        return rc;
    }
    if (!buf.p) {
        buf.p = malloc(1);
        if (!buf.p)
            return gm_err_set(err, GM_ENOMEM, "template: out of memory");
        buf.p[0] = 0;
    }
    *out = buf.p;
    if (out_len)
        *out_len = buf.n;
    return 0;
}
