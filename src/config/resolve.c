/* config/resolve: where the file is looked for, where an entry's file is, and a name resolved
 * through the layers into the flags run and chat parse. */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "config/config.h"

size_t gm_config_search_paths(const char *home, const char *xdg_config_home, char *out[3])
{
    size_t n = 0;
    char buf[4096];
    out[n++] = strdup("gmlx.yaml");
    if (xdg_config_home && xdg_config_home[0] == '/')
        snprintf(buf, sizeof buf, "%s/gmlx/gmlx.yaml", xdg_config_home);
    else if (home && *home)
        snprintf(buf, sizeof buf, "%s/.config/gmlx/gmlx.yaml", home);
    else
        buf[0] = '\0';
    if (buf[0])
        out[n++] = strdup(buf);
    if (home && *home) {
        snprintf(buf, sizeof buf, "%s/.gmlx.yaml", home);
        out[n++] = strdup(buf);
    }
    for (size_t i = 0; i < n; i++)
        if (!out[i]) { /* out of memory: report none rather than a hole */
            for (size_t j = 0; j < n; j++)
                free(out[j]);
            return 0;
        }
    return n;
}

static const cfg_model *model_of(const gm_config *c, const gm_config_model *m)
{
    for (size_t i = 0; i < c->n_models; i++)
        if (&c->models[i].pub == m)
            return &c->models[i];
    return NULL;
}

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && !S_ISDIR(st.st_mode);
}

int gm_config_model_path(const gm_config *c, const gm_config_model *pm, char **out, gm_err *err)
{
    *out = NULL;
    const cfg_model *m = model_of(c, pm);
    if (!m)
        return gm_err_set(err, GM_EINVAL, "not an entry of %s", c->file);
    const char *p = m->path;
    char buf[8192];
    /* candidates in order: absolute as is; else each model_dirs root, then the file's folder */
    size_t n_cand = p[0] == '/' ? 1 : c->n_model_dirs + 1;
    for (size_t i = 0; i < n_cand; i++) {
        if (p[0] == '/')
            snprintf(buf, sizeof buf, "%s", p);
        else
            snprintf(buf, sizeof buf, "%s/%s", i < c->n_model_dirs ? c->model_dirs[i] : c->dir, p);
        bool found = is_file(buf);
        if (found || i == 0) {
            free(*out);
            if (!(*out = strdup(buf)))
                return gm_err_set(err, GM_ENOMEM, "out of memory");
        }
        if (found)
            return 0;
    }
    if (p[0] == '/')
        return gm_err_set(err, GM_ENOTFOUND, "model '%s': %s: no such file", pm->id, p);
    char roots[1024];
    size_t pos = 0;
    roots[0] = '\0';
    for (size_t i = 0; i < c->n_model_dirs && pos < sizeof roots; i++)
        pos += (size_t)snprintf(roots + pos, sizeof roots - pos, "%s, ", c->model_dirs[i]);
    if (pos < sizeof roots)
        snprintf(roots + pos, sizeof roots - pos, "%s", c->dir);
    return gm_err_set(err, GM_ENOTFOUND,
                      "model '%s': '%s' is not under %s (server.model_dirs, then the configuration file's folder)",
                      pm->id, p, roots);
}

static const cfg_profile *find_profile(const gm_config *c, const char *name)
{
    for (size_t i = 0; name && i < c->n_profiles; i++)
        if (strcmp(c->profiles[i].name, name) == 0)
            return &c->profiles[i];
    return NULL;
}

static void apply(const char **dst, const cfg_layer *l)
{
    for (size_t k = 0; k < gm_cfg_n_keys; k++)
        if (l->v[k])
            dst[k] = l->v[k];
}

/* The profile's chain, root first (the loader refused cycles and unknown parents). */
static void apply_profile(const gm_config *c, const char **dst, const char *name, int depth)
{
    const cfg_profile *p = find_profile(c, name);
    if (!p || depth > 64)
        return; /* a built-in intent: nothing to apply (the loader warned) */
    if (p->extends)
        apply_profile(c, dst, p->extends, depth + 1);
    apply(dst, &p->set);
}

static bool push(gm_config_resolved *r, size_t *cap, const char *s, uint32_t key)
{
    if (r->n_args + 2 > *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        char **a = realloc(r->args, nc * sizeof *a);
        if (!a)
            return false;
        r->args = a;
        uint32_t *k = realloc((void *)r->arg_key, nc * sizeof *k);
        if (!k)
            return false;
        r->arg_key = k;
        *cap = nc;
    }
    if (!(r->args[r->n_args] = strdup(s)))
        return false;
    ((uint32_t *)r->arg_key)[r->n_args] = key;
    r->n_args++;
    r->args[r->n_args] = NULL;
    return true;
}

int gm_config_resolve(const gm_config *c, const char *name, gm_config_resolved *r, gm_err *err)
{
    memset(r, 0, sizeof *r);
    char head[512];
    snprintf(head, sizeof head, "%s", name);
    const char *profile = NULL;
    /* NAME@PROFILE: the tail is a profile only when it names one (a built-in intent too) */
    char *at = strrchr(head, '@');
    if (at && !gm_config_find_model(c, head)) {
        *at = '\0';
        profile = at + 1;
    }
    const gm_config_model *pm = gm_config_find_model(c, head);
    for (size_t i = 0; !pm && i < c->n_aliases; i++)
        if (strcmp(c->aliases[i].name, head) == 0) {
            pm = gm_config_find_model(c, c->aliases[i].id);
            if (!profile)
                profile = c->aliases[i].profile;
        }
    if (!pm)
        return gm_err_set(err, GM_ENOTFOUND, "'%s' is no model id or alias of %s", head, c->file);
    if (profile && !find_profile(c, profile)) {
        static const char *const intents[] = {"coding", "instruct", "creative", "reasoning-low",
                                              "reasoning-medium", "reasoning-high", "reasoning-max",
                                              "reasoning-xhigh"};
        bool intent = false;
        for (size_t i = 0; i < sizeof intents / sizeof intents[0]; i++)
            intent |= strcmp(intents[i], profile) == 0;
        if (!intent) {
            char names[512];
            size_t pos = 0;
            names[0] = '\0';
            for (size_t i = 0; i < c->n_profiles && pos < sizeof names; i++)
                pos += (size_t)snprintf(names + pos, sizeof names - pos, "%s%s", i ? ", " : "", c->profiles[i].name);
            return gm_err_set(err, GM_EINVAL, "unknown profile '%s' (profiles: %s)", profile,
                              c->n_profiles ? names : "none defined");
        }
    }
    const cfg_model *m = model_of(c, pm);
    const char **v = calloc(gm_cfg_n_keys, sizeof *v);
    if (!v)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    const char *rule_profile = NULL;
    for (size_t i = 0; i < c->n_rules && !rule_profile; i++)
        if (fnmatch(c->rules[i].match, pm->id, 0) == 0)
            rule_profile = c->rules[i].profile;
    const char *chosen = profile ? profile : m->profile;
    apply_profile(c, v, c->default_profile, 0);
    apply_profile(c, v, rule_profile, 0);
    apply_profile(c, v, chosen, 0);
    const char *selected = chosen ? chosen : rule_profile ? rule_profile : c->default_profile;
    for (size_t i = 0; selected && i < m->n_profiles; i++)
        if (strcmp(m->profiles[i].name, selected) == 0)
            apply(v, &m->profiles[i].set);
    apply(v, &m->own);
    apply(v, &m->over);
    r->model = pm;
    r->profile = chosen ? (profile ? profile : m->profile) : NULL;
    size_t cap = 0;
    bool ok = true;
    for (size_t k = 0; k < gm_cfg_n_keys && ok; k++) {
        const cfg_key *key = &gm_cfg_keys[k];
        const char *val = v[k];
        if (!val || !key->pub.flag || key->pub.missing)
            continue;
        switch (key->type) {
        case CT_BOOL:
        case CT_STREAM:
        case CT_THINK: {
            bool on = strcmp(val, "true") == 0 || strcmp(val, "experts") == 0 || strcmp(val, "on") == 0 ||
                      strcmp(val, "adaptive") == 0;
            bool off = strcmp(val, "false") == 0 || strcmp(val, "cpu") == 0 || strcmp(val, "off") == 0;
            const char *f = on ? key->flag_on : off ? key->flag_off : NULL;
            if (f)
                ok = push(r, &cap, f, (uint32_t)k);
            break;
        }
        default:
            ok = push(r, &cap, key->pub.flag, (uint32_t)k) && push(r, &cap, val, (uint32_t)k);
            break;
        }
    }
    free(v);
    if (!ok) {
        gm_config_resolved_free(r);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    return 0;
}

void gm_config_resolved_free(gm_config_resolved *r)
{
    for (size_t i = 0; i < r->n_args; i++)
        free(r->args[i]);
    free(r->args);
    free((void *)r->arg_key);
    memset(r, 0, sizeof *r);
}
