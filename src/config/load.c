/* config/load: reads a configuration file with libyaml and checks it against the key table.
 * Every error and warning names its place as FILE:LINE:COL (1-based, as editors count). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "base/err.h"
#include "config/config.h"

#define MAX_FILE_BYTES (4u << 20) /* far above any hand-written file */

/* ---- the arena every string of a gm_config lives in ---- */

struct arena_blk {
    struct arena_blk *next;
    size_t used, cap;
    max_align_t data[];
};

void *gm_cfg_alloc(gm_config *c, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    struct arena_blk *b = c->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        b = calloc(1, sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->next = c->arena;
        c->arena = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *gm_cfg_strdup(gm_config *c, const char *s, size_t n)
{
    char *p = gm_cfg_alloc(c, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* ---- the walk ---- */

typedef struct walk {
    gm_config *c;
    yaml_document_t *doc;
    const gm_config_opts *opts;
    gm_err *err;
    int rc;
} walk;

static int fail_at(walk *w, const yaml_node_t *n, const char *fmt, ...) GM_PRINTF(3, 4);
static int fail_at(walk *w, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n)
        gm_err_set(w->err, GM_EFORMAT, "%s:%zu:%zu: %s", w->c->file, n->start_mark.line + 1,
                   n->start_mark.column + 1, msg);
    else
        gm_err_set(w->err, GM_EFORMAT, "%s: %s", w->c->file, msg);
    w->rc = GM_EFORMAT;
    return GM_EFORMAT;
}

static void warn_at(walk *w, const yaml_node_t *n, const char *fmt, ...) GM_PRINTF(3, 4);
static void warn_at(walk *w, const yaml_node_t *n, const char *fmt, ...)
{
    if (!w->opts || !w->opts->warn)
        return;
    char msg[400], line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n)
        snprintf(line, sizeof line, "%s:%zu:%zu: warning: %s", w->c->file, n->start_mark.line + 1,
                 n->start_mark.column + 1, msg);
    else
        snprintf(line, sizeof line, "%s: warning: %s", w->c->file, msg);
    w->opts->warn(w->opts->warn_user, line);
}

static yaml_node_t *node(walk *w, int id) { return yaml_document_get_node(w->doc, id); }

static const char *type_name(const yaml_node_t *n)
{
    return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a scalar";
}

static bool is_scalar(const yaml_node_t *n) { return n && n->type == YAML_SCALAR_NODE; }

static bool plain(const yaml_node_t *n) { return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE; }

static const char *sval(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static bool sval_is(const yaml_node_t *n, const char *const *words)
{
    for (; *words; words++)
        if (strcmp(sval(n), *words) == 0)
            return true;
    return false;
}

/* YAML 1.1 core-schema classes of a plain scalar (a quoted scalar is always a string). */
static bool is_null(const yaml_node_t *n)
{
    static const char *const w[] = {"", "~", "null", "Null", "NULL", NULL};
    return is_scalar(n) && plain(n) && sval_is(n, w);
}

/* 1 true, 0 false, -1 not a bool */
static int as_bool(const yaml_node_t *n)
{
    static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
    static const char *const f[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
    if (!is_scalar(n) || !plain(n))
        return -1;
    return sval_is(n, t) ? 1 : sval_is(n, f) ? 0 : -1;
}

static bool as_num(const yaml_node_t *n, double *out)
{
    if (!is_scalar(n) || !plain(n) || as_bool(n) >= 0 || is_null(n))
        return false;
    const char *s = sval(n);
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(x))
        return false;
    *out = x;
    return true;
}

/* An empty section (null, [], {}) counts as absent. */
static bool empty(const yaml_node_t *n)
{
    if (is_null(n))
        return true;
    if (n->type == YAML_MAPPING_NODE)
        return n->data.mapping.pairs.top == n->data.mapping.pairs.start;
    if (n->type == YAML_SEQUENCE_NODE)
        return n->data.sequence.items.top == n->data.sequence.items.start;
    return false;
}

/* Checks a mapping's keys: scalars, no duplicates. */
static int check_mapping(walk *w, const yaml_node_t *m, const char *where)
{
    if (!m || m->type != YAML_MAPPING_NODE)
        return fail_at(w, m, "%s must be a mapping (got %s)", where, m ? type_name(m) : "nothing");
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(w, p->key);
        if (!is_scalar(k))
            return fail_at(w, k, "%s: a key must be a plain word (got %s)", where, k ? type_name(k) : "nothing");
        for (yaml_node_pair_t *q = m->data.mapping.pairs.start; q < p; q++)
            if (strcmp(sval(node(w, q->key)), sval(k)) == 0)
                return fail_at(w, k, "%s: duplicate key '%s' (first at line %zu)", where, sval(k),
                               node(w, q->key)->start_mark.line + 1);
    }
    return 0;
}

static int unknown_key(walk *w, const yaml_node_t *k, const char *where, const char *known)
{
    return fail_at(w, k, "%s: unrecognized key '%s' (known: %s)", where, sval(k), known);
}

/* The known names of a section of the table, comma separated. */
static void known_list(const char *section, const char *extra, char *out, size_t cap)
{
    size_t pos = 0;
    out[0] = '\0';
    if (extra)
        pos += (size_t)snprintf(out, cap, "%s", extra);
    for (size_t i = 0; i < gm_cfg_n_keys && pos < cap; i++)
        if (strcmp(gm_cfg_keys[i].pub.section, section) == 0)
            pos += (size_t)snprintf(out + pos, cap - pos, "%s%s", pos ? ", " : "", gm_cfg_keys[i].pub.name);
}

static char *dup_scalar(walk *w, const yaml_node_t *n)
{
    char *s = gm_cfg_strdup(w->c, sval(n), n->data.scalar.length);
    if (!s) {
        gm_err_set(w->err, GM_ENOMEM, "%s: out of memory", w->c->file);
        w->rc = GM_ENOMEM;
    }
    return s;
}

static char *expand_path(walk *w, const char *s);

static bool layer_init(walk *w, cfg_layer *l)
{
    l->v = gm_cfg_alloc(w->c, gm_cfg_n_keys * sizeof *l->v);
    if (!l->v) {
        gm_err_set(w->err, GM_ENOMEM, "%s: out of memory", w->c->file);
        w->rc = GM_ENOMEM;
    }
    return l->v != NULL;
}

/* Checks value v for row ki and stores its canonical text in layer l (null: unset). */
static int set_value(walk *w, cfg_layer *l, int ki, const yaml_node_t *k, const yaml_node_t *v,
                     const char *where)
{
    const cfg_key *key = &gm_cfg_keys[ki];
    char buf[64];
    const char *canon = NULL;
    if (is_null(v) && key->type != CT_STREAM) {
        if (!key->nullable && key->type != CT_ANY)
            return fail_at(w, v, "%s.%s: expected %s, got null", where, sval(k), key->pub.values);
        return 0;
    }
    switch (key->type) {
    case CT_BOOL: {
        int b = as_bool(v);
        if (b < 0)
            return fail_at(w, v, "%s.%s: expected true or false, got %s", where, sval(k),
                           is_scalar(v) ? sval(v) : type_name(v));
        canon = b ? "true" : "false";
        break;
    }
    case CT_INT:
    case CT_NUM: {
        double x;
        if (!as_num(v, &x))
            return fail_at(w, v, "%s.%s: expected %s, got %s", where, sval(k), key->pub.values,
                           is_scalar(v) ? (*sval(v) ? sval(v) : "an empty string") : type_name(v));
        if (key->type == CT_INT && x != floor(x))
            return fail_at(w, v, "%s.%s: expected %s, got %s", where, sval(k), key->pub.values, sval(v));
        bool lo_ok = key->lo_open ? x > key->lo : x >= key->lo;
        bool hi_ok = key->hi_open ? x < key->hi : x <= key->hi;
        if (!lo_ok || !hi_ok)
            return fail_at(w, v, "%s.%s: %s is out of range: expected %s", where, sval(k), sval(v),
                           key->pub.values);
        if (key->type == CT_INT)
            snprintf(buf, sizeof buf, "%.0f", x);
        else
            snprintf(buf, sizeof buf, "%.9g", x);
        canon = buf;
        break;
    }
    case CT_ENUM: {
        if (!is_scalar(v))
            return fail_at(w, v, "%s.%s: expected %s, got %s", where, sval(k), key->pub.values, type_name(v));
        const char *s = sval(v);
        size_t n = strlen(s);
        bool ok = false;
        for (const char *p = key->enums; *p && !ok;) {
            size_t m = strcspn(p, "|");
            ok = m == n && memcmp(p, s, n) == 0;
            p += m + (p[m] == '|');
        }
        if (!ok)
            return fail_at(w, v, "%s.%s: '%s' is not one of %s", where, sval(k), s, key->pub.values);
        canon = s;
        break;
    }
    case CT_STR:
        if (!is_scalar(v))
            return fail_at(w, v, "%s.%s: expected %s, got %s", where, sval(k), key->pub.values, type_name(v));
        canon = sval(v);
        break;
    case CT_STRS:
        if (v->type == YAML_SEQUENCE_NODE) {
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
                if (!is_scalar(node(w, *it)))
                    return fail_at(w, node(w, *it), "%s.%s: expected %s", where, sval(k), key->pub.values);
            canon = "(list)";
        } else if (is_scalar(v)) {
            canon = sval(v);
        } else {
            return fail_at(w, v, "%s.%s: expected %s, got %s", where, sval(k), key->pub.values, type_name(v));
        }
        break;
    case CT_STREAM: {
        /* the spellings of the original's table: experts/hybrid/gpu, cpu/full/all, or off */
        static const char *const ex[] = {"experts", "hybrid", "gpu", NULL};
        static const char *const cpu[] = {"cpu", "full", "all", NULL};
        static const char *const off[] = {"", "none", "off", "no", "false", NULL};
        if (!is_scalar(v))
            return fail_at(w, v, "%s.stream: expected experts, cpu or false, got %s", where, type_name(v));
        char low[32];
        size_t n = strlen(sval(v));
        if (n >= sizeof low)
            n = sizeof low - 1;
        for (size_t i = 0; i < n; i++)
            low[i] = (char)((sval(v)[i] >= 'A' && sval(v)[i] <= 'Z') ? sval(v)[i] + 32 : sval(v)[i]);
        low[n] = '\0';
        yaml_node_t lv = *v;
        lv.data.scalar.value = (yaml_char_t *)low;
        if (sval_is(&lv, ex))
            canon = "experts";
        else if (sval_is(&lv, cpu))
            canon = "cpu";
        else if (is_null(v) || sval_is(&lv, off))
            canon = "false";
        else if (strcmp(low, "true") == 0 || strcmp(low, "yes") == 0 || strcmp(low, "on") == 0)
            return fail_at(w, v, "%s.stream: `stream: %s` is ambiguous: use stream: experts (the experts "
                                 "stream from the SSD, the rest stays in memory) or stream: cpu (the whole "
                                 "model runs from the page cache)", where, sval(v));
        else
            return fail_at(w, v, "%s.stream: '%s' is not one of experts, cpu or false", where, sval(v));
        break;
    }
    case CT_THINK: {
        int b = as_bool(v);
        if (b >= 0)
            canon = b ? "on" : "off";
        else if (is_scalar(v) && (strcmp(sval(v), "adaptive") == 0 || strcmp(sval(v), "auto") == 0))
            canon = "adaptive";
        else
            return fail_at(w, v, "%s.thinking: expected on, off or adaptive, got %s", where,
                           is_scalar(v) ? sval(v) : type_name(v));
        break;
    }
    case CT_MAP:
        if (v->type != YAML_MAPPING_NODE)
            return fail_at(w, v, "%s.%s: expected a mapping, got %s", where, sval(k), type_name(v));
        if (check_mapping(w, v, sval(k)) != 0)
            return w->rc;
        canon = "(mapping)";
        break;
    case CT_ANY:
        canon = is_scalar(v) ? sval(v) : "(value)";
        break;
    }
    if (key->pub.missing)
        warn_at(w, k, "%s.%s is read but not applied: gmlx does not have %s yet", where, sval(k),
                key->pub.missing);
    if (key->type == CT_STR && key->pub.flag && strcmp(key->pub.name, "chat_template") == 0 &&
        (strstr(canon, "{%") || strstr(canon, "{{")))
        return fail_at(w, v, "%s.chat_template: give the path of a .jinja file (inline template text is "
                             "not taken)", where);
    l->v[ki] = gm_cfg_strdup(w->c, canon, strlen(canon));
    if (!l->v[ki]) {
        gm_err_set(w->err, GM_ENOMEM, "%s: out of memory", w->c->file);
        return w->rc = GM_ENOMEM;
    }
    return 0;
}

/* A pass-through group (sampling:, load:): known keys checked, unknown ones warned about. */
static int load_group(walk *w, cfg_layer *l, const char *section, const yaml_node_t *m, const char *where)
{
    char wh[160];
    snprintf(wh, sizeof wh, "%s.%s", where, section);
    if (empty(m))
        return 0;
    if (check_mapping(w, m, wh) != 0)
        return w->rc;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(w, p->key), *v = node(w, p->value);
        int ki = gm_cfg_key_find(section, sval(k));
        if (ki < 0) {
            char known[1024];
            known_list(section, NULL, known, sizeof known);
            warn_at(w, k, "%s: unrecognized key '%s' is ignored (known: %s)", wh, sval(k), known);
            continue;
        }
        if (set_value(w, l, ki, k, v, wh) != 0)
            return w->rc;
    }
    return 0;
}

/* A settings mapping: a profile (with extends), an entry's overrides or profiles.<name>. */
static int load_settings(walk *w, cfg_layer *l, const yaml_node_t *m, const char *where, const char **extends)
{
    if (empty(m))
        return 0;
    if (check_mapping(w, m, where) != 0)
        return w->rc;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(w, p->key), *v = node(w, p->value);
        const char *name = sval(k);
        if (strcmp(name, "sampling") == 0 || strcmp(name, "load") == 0) {
            if (load_group(w, l, name, v, where) != 0)
                return w->rc;
        } else if (extends && strcmp(name, "extends") == 0) {
            if (!is_scalar(v) || is_null(v))
                return fail_at(w, v, "%s.extends: expected a profile name", where);
            if (!(*extends = dup_scalar(w, v)))
                return w->rc;
        } else {
            int ki = gm_cfg_key_find("settings", name);
            if (ki < 0) {
                char known[512];
                known_list("settings", extends ? "extends, sampling, load" : "sampling, load", known, sizeof known);
                return unknown_key(w, k, where, known);
            }
            if (set_value(w, l, ki, k, v, where) != 0)
                return w->rc;
        }
    }
    return 0;
}

static int load_profiles(walk *w, const yaml_node_t *m)
{
    if (check_mapping(w, m, "profiles") != 0)
        return w->rc;
    size_t n = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    gm_config *c = w->c;
    if (!(c->profiles = gm_cfg_alloc(c, (n ? n : 1) * sizeof *c->profiles)))
        return w->rc = gm_err_set(w->err, GM_ENOMEM, "%s: out of memory", c->file);
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(w, p->key), *v = node(w, p->value);
        cfg_profile *pr = &c->profiles[c->n_profiles++];
        char where[160];
        snprintf(where, sizeof where, "profiles.%s", sval(k));
        if (strchr(sval(k), '@'))
            return fail_at(w, k, "profile name '%s' must not contain '@'", sval(k));
        if (!(pr->name = dup_scalar(w, k)) || !layer_init(w, &pr->set))
            return w->rc;
        pr->line = (uint32_t)k->start_mark.line + 1;
        pr->col = (uint32_t)k->start_mark.column + 1;
        if (load_settings(w, &pr->set, v, where, &pr->extends) != 0)
            return w->rc;
    }
    return 0;
}

static const char *const k_model_extra = "path, profile, profiles, overrides, cpu_moe";

static int load_model(walk *w, cfg_model *e, const yaml_node_t *k, const yaml_node_t *m)
{
    char where[200];
    snprintf(where, sizeof where, "models.%s", sval(k));
    if (!*sval(k))
        return fail_at(w, k, "models: an entry needs an id");
    if (strchr(sval(k), '@'))
        return fail_at(w, k, "%s: a model id must not contain '@' (it separates a profile)", where);
    if (!(e->pub.id = dup_scalar(w, k)) || !layer_init(w, &e->own) || !layer_init(w, &e->over))
        return w->rc;
    e->pub.line = (uint32_t)k->start_mark.line + 1;
    e->key_col = (uint32_t)k->start_mark.column;
    if (m->type != YAML_MAPPING_NODE)
        return fail_at(w, m, "%s must be a mapping with a path (got %s)", where, type_name(m));
    if (check_mapping(w, m, where) != 0)
        return w->rc;
    const yaml_node_t *cpu_moe = NULL;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *kk = node(w, p->key), *v = node(w, p->value);
        const char *name = sval(kk);
        if (strcmp(name, "path") == 0) {
            if (!is_scalar(v) || is_null(v) || !*sval(v))
                return fail_at(w, v, "%s.path must be a file path (got %s)", where,
                               is_scalar(v) ? "nothing" : type_name(v));
            if (!(e->pub.path = dup_scalar(w, v)) || !(e->path = expand_path(w, sval(v))))
                return w->rc;
        } else if (strcmp(name, "profile") == 0) {
            if (!is_null(v)) {
                if (!is_scalar(v))
                    return fail_at(w, v, "%s.profile: expected a profile name", where);
                if (!(e->profile = dup_scalar(w, v)))
                    return w->rc;
            }
        } else if (strcmp(name, "overrides") == 0) {
            char wh[220];
            snprintf(wh, sizeof wh, "%s.overrides", where);
            if (load_settings(w, &e->over, v, wh, NULL) != 0)
                return w->rc;
        } else if (strcmp(name, "profiles") == 0) {
            if (empty(v))
                continue;
            char wh[220];
            snprintf(wh, sizeof wh, "%s.profiles", where);
            if (check_mapping(w, v, wh) != 0)
                return w->rc;
            size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
            if (!(e->profiles = gm_cfg_alloc(w->c, n * sizeof *e->profiles)))
                return w->rc = gm_err_set(w->err, GM_ENOMEM, "out of memory");
            for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
                cfg_entry_profile *ep = &e->profiles[e->n_profiles++];
                char wp[300];
                snprintf(wp, sizeof wp, "%s.%s", wh, sval(node(w, q->key)));
                if (!(ep->name = dup_scalar(w, node(w, q->key))) || !layer_init(w, &ep->set) ||
                    load_settings(w, &ep->set, node(w, q->value), wp, NULL) != 0)
                    return w->rc ? w->rc : GM_ENOMEM;
            }
        } else if (strcmp(name, "cpu_moe") == 0) {
            cpu_moe = kk;
            (void)v;
        } else {
            int ki = gm_cfg_key_find("model", name);
            if (ki < 0) {
                char known[1024];
                known_list("model", k_model_extra, known, sizeof known);
                return unknown_key(w, kk, where, known);
            }
            if (set_value(w, &e->own, ki, kk, v, where) != 0)
                return w->rc;
        }
    }
    if (!e->pub.path)
        return fail_at(w, k, "model '%s' has no path", sval(k));
    int si = gm_cfg_key_find("model", "stream");
    const char *st = e->own.v[si];
    if (cpu_moe) {
        /* the legacy spelling: mapped as the original maps it, with a warning */
        const yaml_node_t *v = NULL;
        for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++)
            if (node(w, p->key) == cpu_moe)
                v = node(w, p->value);
        const char *mapped = NULL;
        if (is_scalar(v)) {
            static const char *const cpu[] = {"true", "full", "cpu", "all", "yes", "on", NULL};
            static const char *const ex[] = {"hybrid", "gpu-spine", "spine", NULL};
            double x;
            mapped = sval_is(v, cpu) ? "cpu" : sval_is(v, ex) || as_num(v, &x) ? "experts" : NULL;
        }
        if (!mapped)
            return fail_at(w, v ? v : cpu_moe, "%s.cpu_moe: use stream: experts or stream: cpu", where);
        if (!st) {
            warn_at(w, cpu_moe, "%s: `cpu_moe: %s` is renamed; use `stream: %s`", where, sval(v), mapped);
            e->own.v[si] = st = mapped;
        } else {
            warn_at(w, cpu_moe, "%s: cpu_moe is ignored: stream is set", where);
        }
    }
    e->pub.stream = !st                         ? GM_CONFIG_STREAM_UNSET
                    : strcmp(st, "experts") == 0 ? GM_CONFIG_STREAM_EXPERTS
                    : strcmp(st, "cpu") == 0     ? GM_CONFIG_STREAM_CPU
                                                 : GM_CONFIG_STREAM_OFF;
    if (e->pub.stream == GM_CONFIG_STREAM_OFF)
        e->own.v[si] = NULL; /* no placement asked for: the plan decides, as without the key */
    if (e->pub.stream == GM_CONFIG_STREAM_CPU) {
        static const char *const feeders[] = {"prefill_feeder", "decode_feeder"};
        for (int i = 0; i < 2; i++)
            if (e->own.v[gm_cfg_key_find("model", feeders[i])])
                warn_at(w, k, "%s.%s does not apply: the entry has stream: cpu (the whole model runs "
                              "from the page cache, without feeders)", where, feeders[i]);
    }
    const char *pre = e->own.v[gm_cfg_key_find("model", "moe_prestage")];
    if (pre && strcmp(pre, "keepers") == 0 && !e->own.v[gm_cfg_key_find("model", "moe_miss_shed")])
        return fail_at(w, k, "%s: moe_prestage: keepers needs moe_miss_shed", where);
    return 0;
}

static int load_models(walk *w, const yaml_node_t *m)
{
    gm_config *c = w->c;
    if (check_mapping(w, m, "models") != 0)
        return w->rc;
    c->span_models.flow = m->data.mapping.style == YAML_FLOW_MAPPING_STYLE;
    size_t n = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    if (!(c->models = gm_cfg_alloc(c, (n ? n : 1) * sizeof *c->models)))
        return w->rc = gm_err_set(w->err, GM_ENOMEM, "%s: out of memory", c->file);
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        if (load_model(w, &c->models[c->n_models], node(w, p->key), node(w, p->value)) != 0)
            return w->rc;
        c->n_models++;
    }
    return 0;
}

static int load_aliases(walk *w, const yaml_node_t *m)
{
    gm_config *c = w->c;
    if (check_mapping(w, m, "aliases") != 0)
        return w->rc;
    size_t n = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    if (!(c->aliases = gm_cfg_alloc(c, (n ? n : 1) * sizeof *c->aliases)))
        return w->rc = gm_err_set(w->err, GM_ENOMEM, "out of memory");
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(w, p->key), *v = node(w, p->value);
        if (strchr(sval(k), '@'))
            return fail_at(w, k, "aliases: alias '%s' must not contain '@'", sval(k));
        if (!is_scalar(v) || is_null(v))
            return fail_at(w, v, "aliases.%s: expected ID or ID@PROFILE", sval(k));
        cfg_alias *a = &c->aliases[c->n_aliases++];
        char *t = dup_scalar(w, v);
        if (!(a->name = dup_scalar(w, k)) || !t)
            return w->rc;
        char *at = strrchr(t, '@');
        if (at) {
            *at = '\0';
            a->profile = at + 1;
        }
        a->id = t;
    }
    return 0;
}

static int load_rules(walk *w, const yaml_node_t *m)
{
    gm_config *c = w->c;
    if (m->type != YAML_SEQUENCE_NODE)
        return fail_at(w, m, "rules must be a list of {match, profile} (got %s)", type_name(m));
    size_t n = (size_t)(m->data.sequence.items.top - m->data.sequence.items.start);
    if (!(c->rules = gm_cfg_alloc(c, (n ? n : 1) * sizeof *c->rules)))
        return w->rc = gm_err_set(w->err, GM_ENOMEM, "out of memory");
    for (yaml_node_item_t *it = m->data.sequence.items.start; it < m->data.sequence.items.top; it++) {
        yaml_node_t *r = node(w, *it);
        if (check_mapping(w, r, "rules[]") != 0)
            return w->rc;
        cfg_rule *ru = &c->rules[c->n_rules];
        for (yaml_node_pair_t *p = r->data.mapping.pairs.start; p < r->data.mapping.pairs.top; p++) {
            yaml_node_t *k = node(w, p->key), *v = node(w, p->value);
            const char **dst = strcmp(sval(k), "match") == 0     ? &ru->match
                               : strcmp(sval(k), "profile") == 0 ? &ru->profile
                                                                 : NULL;
            if (!dst)
                return unknown_key(w, k, "rules[]", "match, profile");
            if (!is_scalar(v) || is_null(v))
                return fail_at(w, v, "rules[].%s: expected a string", sval(k));
            if (!(*dst = dup_scalar(w, v)))
                return w->rc;
        }
        if (!ru->match || !ru->profile)
            return fail_at(w, r, "rules[]: a rule needs match and profile");
        c->n_rules++;
    }
    return 0;
}

static int load_discover(walk *w, const yaml_node_t *m)
{
    if (m->type != YAML_SEQUENCE_NODE)
        return fail_at(w, m, "discover must be a list of {dir, recursive, pair_mmproj, speculative}");
    for (yaml_node_item_t *it = m->data.sequence.items.start; it < m->data.sequence.items.top; it++) {
        yaml_node_t *r = node(w, *it);
        if (check_mapping(w, r, "discover[]") != 0)
            return w->rc;
        for (yaml_node_pair_t *p = r->data.mapping.pairs.start; p < r->data.mapping.pairs.top; p++) {
            yaml_node_t *k = node(w, p->key);
            static const char *const known[] = {"dir", "recursive", "pair_mmproj", "speculative", NULL};
            if (!sval_is(k, known))
                return unknown_key(w, k, "discover[]", "dir, recursive, pair_mmproj, speculative");
        }
    }
    warn_at(w, m, "discover is read but not applied: gmlx does not have scans at serve time yet (gmlx "
                  "sync-models adds the files of server.model_dirs to models:)");
    return 0;
}

/* s with a leading ~ and $VAR / ${VAR} expanded through the front end's lookup (arena copy). */
static char *expand_path(walk *w, const char *s)
{
    char out[4096];
    size_t o = 0;
    const char *(*env)(const char *) = w->opts ? w->opts->lookup_env : NULL;
    if (env && s[0] == '~' && (s[1] == '/' || !s[1])) {
        const char *h = env("HOME");
        o = (size_t)snprintf(out, sizeof out, "%s", h ? h : "~");
        if (o >= sizeof out)
            o = sizeof out - 1;
        s++;
    }
    while (*s && o + 1 < sizeof out) {
        bool name_start = s[1] == '_' || (s[1] >= 'A' && s[1] <= 'Z') || (s[1] >= 'a' && s[1] <= 'z') || s[1] == '{';
        if (env && s[0] == '$' && name_start) {
            bool brace = s[1] == '{';
            const char *b = s + 1 + brace, *e = b;
            while (*e == '_' || (*e >= 'A' && *e <= 'Z') || (*e >= 'a' && *e <= 'z') || (*e >= '0' && *e <= '9'))
                e++;
            if (e > b && (!brace || *e == '}')) {
                char name[128];
                size_t n = (size_t)(e - b) < sizeof name - 1 ? (size_t)(e - b) : sizeof name - 1;
                memcpy(name, b, n);
                name[n] = '\0';
                const char *val = env(name);
                o += (size_t)snprintf(out + o, sizeof out - o, "%s", val ? val : "");
                if (o >= sizeof out)
                    o = sizeof out - 1;
                s = e + brace;
                continue;
            }
        }
        out[o++] = *s++;
    }
    out[o] = '\0';
    char *r = gm_cfg_strdup(w->c, out, o);
    if (!r) {
        gm_err_set(w->err, GM_ENOMEM, "out of memory");
        w->rc = GM_ENOMEM;
    }
    return r;
}

static int add_model_dir(walk *w, const yaml_node_t *v)
{
    gm_config *c = w->c;
    if (!is_scalar(v) || is_null(v) || !*sval(v))
        return fail_at(w, v, "server.model_dirs: expected a folder path (or a list of them)");
    const char **nd = gm_cfg_alloc(c, (c->n_model_dirs + 1) * sizeof *nd);
    if (!nd)
        return w->rc = gm_err_set(w->err, GM_ENOMEM, "out of memory");
    if (c->n_model_dirs)
        memcpy(nd, c->model_dirs, c->n_model_dirs * sizeof *nd);
    if (!(nd[c->n_model_dirs] = expand_path(w, sval(v))))
        return w->rc;
    c->model_dirs = nd;
    c->n_model_dirs++;
    return 0;
}

static int load_server(walk *w, const yaml_node_t *m, const yaml_node_t *key)
{
    gm_config *c = w->c;
    if (check_mapping(w, m, "server") != 0)
        return w->rc;
    c->span_server.present = true;
    c->span_server.flow = m->data.mapping.style == YAML_FLOW_MAPPING_STYLE;
    c->span_server.key_line = (uint32_t)key->start_mark.line + 1;
    c->span_server.key_col = (uint32_t)key->start_mark.column;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(w, p->key), *v = node(w, p->value);
        const char *name = sval(k);
        if (strcmp(name, "model_dirs") == 0) {
            c->span_model_dirs.present = true;
            c->span_model_dirs.key_line = (uint32_t)k->start_mark.line + 1;
            c->span_model_dirs.key_col = (uint32_t)k->start_mark.column;
            c->span_model_dirs.flow = v->type == YAML_SEQUENCE_NODE &&
                                      v->data.sequence.style == YAML_FLOW_SEQUENCE_STYLE;
            c->model_dirs_is_scalar = v->type == YAML_SCALAR_NODE;
            if (empty(v))
                continue;
            if (v->type == YAML_SEQUENCE_NODE) {
                for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
                    if (add_model_dir(w, node(w, *it)) != 0)
                        return w->rc;
            } else if (add_model_dir(w, v) != 0) {
                return w->rc;
            }
        } else if (strcmp(name, "defaults") == 0) {
            if (empty(v))
                continue;
            if (check_mapping(w, v, "server.defaults") != 0)
                return w->rc;
            for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
                yaml_node_t *dk = node(w, q->key), *dv = node(w, q->value);
                static const char *const known[] = {"profile", "ttl_s", "model", "preload", NULL};
                if (!sval_is(dk, known))
                    return unknown_key(w, dk, "server.defaults", "profile, ttl_s, model, preload");
                if (strcmp(sval(dk), "profile") == 0 && !is_null(dv)) {
                    if (!is_scalar(dv))
                        return fail_at(w, dv, "server.defaults.profile: expected a profile name");
                    if (!(c->default_profile = dup_scalar(w, dv)))
                        return w->rc;
                } else if (!is_null(dv)) {
                    warn_at(w, dk, "server.defaults.%s is read but not applied: gmlx does not have %s yet",
                            sval(dk), "gmlx serve (not in this build yet)");
                }
            }
        } else if (strcmp(name, "cache") == 0) {
            if (!empty(v) && as_bool(v) < 0 && v->type != YAML_MAPPING_NODE)
                return fail_at(w, v, "server.cache: expected a mapping");
            if (!empty(v))
                warn_at(w, k, "server.cache is read but not applied: gmlx does not have the prompt cache yet");
        } else {
            int ki = gm_cfg_key_find("server", name);
            if (ki < 0) {
                char known[1024];
                known_list("server", "model_dirs, defaults, cache", known, sizeof known);
                return unknown_key(w, k, "server", known);
            }
            if (strcmp(name, "port") == 0 && as_bool(v) >= 0)
                return fail_at(w, v, "server.port: expected a port number, got %s", sval(v));
            if (set_value(w, &c->server, ki, k, v, "server") != 0)
                return w->rc;
        }
    }
    return 0;
}

/* ---- cross references ---- */

static const cfg_profile *find_profile(const gm_config *c, const char *name)
{
    for (size_t i = 0; i < c->n_profiles; i++)
        if (strcmp(c->profiles[i].name, name) == 0)
            return &c->profiles[i];
    return NULL;
}

static const char *const k_intents[] = {"coding", "instruct", "creative", "reasoning-low", "reasoning-medium",
                                        "reasoning-high", "reasoning-max", "reasoning-xhigh", NULL};

static bool is_intent(const char *name)
{
    for (const char *const *p = k_intents; *p; p++)
        if (strcmp(*p, name) == 0)
            return true;
    return false;
}

static void profile_names(const gm_config *c, char *out, size_t cap)
{
    size_t pos = 0;
    out[0] = '\0';
    for (size_t i = 0; i < c->n_profiles && pos < cap; i++)
        pos += (size_t)snprintf(out + pos, cap - pos, "%s%s", i ? ", " : "", c->profiles[i].name);
    if (!c->n_profiles)
        snprintf(out, cap, "none defined");
}

/* A profile name in use must exist; a built-in intent name warns (gmlx has no per-family
 * intents yet) and applies nothing. */
static int check_profile_ref(walk *w, const char *name, const char *where, uint32_t line)
{
    if (find_profile(w->c, name))
        return 0;
    if (is_intent(name)) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s: '%s' is a built-in intent, and gmlx does not have per-family "
                                  "sampling defaults yet: it applies nothing", where, name);
        if (w->opts && w->opts->warn) {
            char line_s[600];
            snprintf(line_s, sizeof line_s, "%s:%u: warning: %s", w->c->file, line, msg);
            w->opts->warn(w->opts->warn_user, line_s);
        }
        return 0;
    }
    char names[512];
    profile_names(w->c, names, sizeof names);
    gm_err_set(w->err, GM_EFORMAT, "%s:%u: %s: unknown profile '%s' (profiles: %s)", w->c->file, line, where,
               name, names);
    return w->rc = GM_EFORMAT;
}

static int check_refs(walk *w)
{
    gm_config *c = w->c;
    for (size_t i = 0; i < c->n_profiles; i++) {
        const cfg_profile *p = &c->profiles[i];
        size_t steps = 0;
        for (const cfg_profile *q = p; q->extends; steps++) {
            const cfg_profile *parent = find_profile(c, q->extends);
            if (!parent) {
                if (is_intent(q->extends))
                    break;
                char names[512];
                profile_names(c, names, sizeof names);
                gm_err_set(w->err, GM_EFORMAT, "%s:%u:%u: profile '%s' extends unknown profile '%s' (profiles: %s)",
                           c->file, q->line, q->col, q->name, q->extends, names);
                return w->rc = GM_EFORMAT;
            }
            if (parent == p || steps > c->n_profiles) {
                gm_err_set(w->err, GM_EFORMAT, "%s:%u:%u: profile extends cycle through '%s'", c->file, p->line,
                           p->col, p->name);
                return w->rc = GM_EFORMAT;
            }
            q = parent;
        }
    }
    for (size_t i = 0; i < c->n_models; i++) {
        const cfg_model *m = &c->models[i];
        char where[200];
        snprintf(where, sizeof where, "models.%s.profile", m->pub.id);
        if (m->profile && check_profile_ref(w, m->profile, where, m->pub.line) != 0)
            return w->rc;
        for (size_t j = 0; j < m->n_profiles; j++) {
            snprintf(where, sizeof where, "models.%s.profiles", m->pub.id);
            if (check_profile_ref(w, m->profiles[j].name, where, m->pub.line) != 0)
                return w->rc;
        }
    }
    for (size_t i = 0; i < c->n_aliases; i++) {
        const cfg_alias *a = &c->aliases[i];
        if (gm_config_find_model(c, a->name)) {
            gm_err_set(w->err, GM_EFORMAT, "%s: aliases.%s: the alias has the name of a model id", c->file, a->name);
            return w->rc = GM_EFORMAT;
        }
        if (!gm_config_find_model(c, a->id)) {
            gm_err_set(w->err, GM_EFORMAT, "%s: aliases.%s: '%s' is not a model id of models:", c->file, a->name,
                       a->id);
            return w->rc = GM_EFORMAT;
        }
        if (a->profile && check_profile_ref(w, a->profile, "aliases", 0) != 0)
            return w->rc;
    }
    for (size_t i = 0; i < c->n_rules; i++)
        if (check_profile_ref(w, c->rules[i].profile, "rules[].profile", 0) != 0)
            return w->rc;
    if (c->default_profile && check_profile_ref(w, c->default_profile, "server.defaults.profile", 0) != 0)
        return w->rc;
    return 0;
}

static int load_root(walk *w)
{
    gm_config *c = w->c;
    yaml_node_t *root = yaml_document_get_root_node(w->doc);
    if (!root || is_null(root))
        return 0; /* an empty file: no settings */
    if (root->type != YAML_MAPPING_NODE)
        return fail_at(w, root, "the file must be a mapping of sections (models:, server:, ...), got %s",
                       type_name(root));
    if (check_mapping(w, root, "the file") != 0)
        return w->rc;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(w, p->key), *v = node(w, p->value);
        const char *name = sval(k);
        if (strcmp(name, "models") == 0) {
            c->span_models.present = true;
            c->span_models.key_line = (uint32_t)k->start_mark.line + 1;
            c->span_models.key_col = (uint32_t)k->start_mark.column;
            if (!empty(v) && load_models(w, v) != 0)
                return w->rc;
            if (v->type == YAML_MAPPING_NODE && v->data.mapping.style == YAML_FLOW_MAPPING_STYLE)
                c->span_models.flow = true;
        } else if (strcmp(name, "server") == 0) {
            if (!empty(v) && load_server(w, v, k) != 0)
                return w->rc;
            if (empty(v)) {
                c->span_server.present = true;
                c->span_server.key_line = (uint32_t)k->start_mark.line + 1;
                c->span_server.flow = !is_null(v);
            }
        } else if (strcmp(name, "profiles") == 0) {
            if (!empty(v) && load_profiles(w, v) != 0)
                return w->rc;
        } else if (strcmp(name, "aliases") == 0) {
            if (!empty(v) && load_aliases(w, v) != 0)
                return w->rc;
        } else if (strcmp(name, "rules") == 0) {
            if (!empty(v) && load_rules(w, v) != 0)
                return w->rc;
        } else if (strcmp(name, "discover") == 0) {
            if (!empty(v) && load_discover(w, v) != 0)
                return w->rc;
        } else if (strcmp(name, "talk") == 0 || strcmp(name, "assistant") == 0 || strcmp(name, "theme") == 0 ||
                   strcmp(name, "themes") == 0) {
            const char *feature = name[0] == 't' && name[1] == 'a' ? "voice chat"
                                  : name[0] == 'a'                  ? "the tool-loop assistant"
                                                                    : "chat colour themes";
            if (!empty(v))
                warn_at(w, k, "%s is read but not applied: gmlx does not have %s yet", name, feature);
        } else {
            return unknown_key(w, k, "the file",
                               "server, profiles, rules, models, aliases, discover, talk, assistant, theme, themes");
        }
    }
    return check_refs(w);
}

static char *dirname_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

int gm_config_parse(gm_config **out, const char *name, const char *text, size_t len, const gm_config_opts *opts,
                    gm_err *err)
{
    *out = NULL;
    gm_config *c = calloc(1, sizeof *c);
    if (!c)
        return gm_err_set(err, GM_ENOMEM, "%s: out of memory", name);
    c->file = strdup(name);
    c->dir = dirname_of(name);
    walk w = {.c = c, .opts = opts, .err = err};
    if (!c->file || !c->dir || !layer_init(&w, &c->server)) {
        gm_config_free(c);
        return gm_err_set(err, GM_ENOMEM, "%s: out of memory", name);
    }
    if (len > MAX_FILE_BYTES) {
        gm_config_free(c);
        return gm_err_set(err, GM_EFORMAT, "%s: %zu bytes: a configuration file is at most %u bytes", name, len,
                          MAX_FILE_BYTES);
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        gm_config_free(c);
        return gm_err_set(err, GM_ENOMEM, "%s: out of memory", name);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);
    if (!yaml_parser_load(&parser, &doc)) {
        const yaml_mark_t *mk = parser.problem_mark.line || parser.problem_mark.column ? &parser.problem_mark
                                                                                        : &parser.context_mark;
        gm_err_set(err, GM_EFORMAT, "%s:%zu:%zu: malformed YAML: %s%s%s", name, mk->line + 1, mk->column + 1,
                   parser.problem ? parser.problem : "parse error", parser.context ? " " : "",
                   parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        gm_config_free(c);
        return GM_EFORMAT;
    }
    /* one document: a second one is most likely a stray '---' */
    yaml_document_t extra;
    if (yaml_document_get_root_node(&doc) && yaml_parser_load(&parser, &extra)) {
        bool more = yaml_document_get_root_node(&extra) != NULL;
        size_t line = extra.start_mark.line + 1;
        yaml_document_delete(&extra);
        if (more) {
            gm_err_set(err, GM_EFORMAT, "%s:%zu:1: a second YAML document: the file holds one", name, line);
            yaml_document_delete(&doc);
            yaml_parser_delete(&parser);
            gm_config_free(c);
            return GM_EFORMAT;
        }
    }
    yaml_parser_delete(&parser);
    w.doc = &doc;
    int rc = load_root(&w);
    yaml_document_delete(&doc);
    if (rc != 0) {
        gm_config_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int gm_config_load(gm_config **out, const char *path, const gm_config_opts *opts, gm_err *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT ? gm_err_set(err, GM_ENOTFOUND, "%s: no such file", path)
                               : gm_err_errno(err, GM_EIO, errno, "%s", path);
    if (S_ISDIR(st.st_mode))
        return gm_err_set(err, GM_EINVAL, "%s: a folder, expected a YAML file", path);
    if (st.st_size > MAX_FILE_BYTES)
        return gm_err_set(err, GM_EFORMAT, "%s: %lld bytes: a configuration file is at most %u bytes", path,
                          (long long)st.st_size, MAX_FILE_BYTES);
    FILE *f = fopen(path, "rb");
    if (!f)
        return gm_err_errno(err, GM_EIO, errno, "%s", path);
    char *text = malloc((size_t)st.st_size + 1);
    size_t n = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
    bool bad = !text || ferror(f);
    fclose(f);
    if (bad) {
        free(text);
        return text ? gm_err_set(err, GM_EIO, "%s: read failed", path) : gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    text[n] = '\0';
    int rc = gm_config_parse(out, path, text, n, opts, err);
    free(text);
    return rc;
}

void gm_config_free(gm_config *c)
{
    if (!c)
        return;
    for (struct arena_blk *b = c->arena; b;) {
        struct arena_blk *next = b->next;
        free(b);
        b = next;
    }
    free(c->file);
    free(c->dir);
    free(c);
}

const char *gm_config_file(const gm_config *c) { return c->file; }
size_t gm_config_n_models(const gm_config *c) { return c->n_models; }
const gm_config_model *gm_config_model_at(const gm_config *c, size_t i)
{
    return i < c->n_models ? &c->models[i].pub : NULL;
}
const gm_config_model *gm_config_find_model(const gm_config *c, const char *id)
{
    for (size_t i = 0; i < c->n_models; i++)
        if (strcmp(c->models[i].pub.id, id) == 0)
            return &c->models[i].pub;
    return NULL;
}
size_t gm_config_n_model_dirs(const gm_config *c) { return c->n_model_dirs; }
const char *gm_config_model_dir(const gm_config *c, size_t i) { return i < c->n_model_dirs ? c->model_dirs[i] : NULL; }
