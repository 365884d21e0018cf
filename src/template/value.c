/* template/value: the values a template computes with, and the Python semantics they need:
 * reference counting, strings, lists and dicts, str() and repr() as Python prints them,
 * json.dumps as transformers' tojson calls it, ==, < and truthiness, and the conversion of the
 * jansson variables of a render.
 *
 * Why by hand: output must match Python byte for byte, so floats are printed with the shortest
 * digits that read back (repr), strings are quoted as repr quotes them, and JSON numbers are
 * not left to jansson (which prints 0.1 as 0.10000000000000001). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

#define TO_FRAME TV_NKINDS /* gm_tobj.kind of a gm_tframe */

/* ------------------------------------------------------------------ context helpers */

int gm_tfail(gm_tctx *c, int code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gm_err_set(c->err, code, "line %d: %s", (int)c->line, msg);
}

int gm_tstep(gm_tctx *c, uint64_t n)
{
    c->steps += n;
    if (c->steps > c->lim.max_steps)
        return gm_tfail(c, GM_ERANGE, "the template ran more than %llu steps",
                        (unsigned long long)c->lim.max_steps);
    return 0;
}

int gm_tstep_out(gm_tctx *c, uint64_t n, gm_tv *out)
{
    int rc = gm_tstep(c, n);
    if (rc)
        gm_tv_decref(*out);
    return rc;
}

int gm_tdepth_enter(gm_tctx *c)
{
    if (c->depth >= c->lim.max_depth)
        return gm_tfail(c, GM_ERANGE, "nesting deeper than %u (recursion?)",
                        (unsigned)c->lim.max_depth);
    c->depth++;
    return 0;
}

int gm_tbuf_put(gm_tctx *c, gm_tbuf *b, const char *p, size_t n)
{
    if (n == 0)
        return 0;
    if (b->n + n > c->lim.max_output_bytes || b->n + n < b->n)
        return gm_tfail(c, GM_ERANGE, "text longer than %llu bytes",
                        (unsigned long long)c->lim.max_output_bytes);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int gm_tbuf_putc(gm_tctx *c, gm_tbuf *b, char ch)
{
    return gm_tbuf_put(c, b, &ch, 1);
}

int gm_tbuf_putf(gm_tctx *c, gm_tbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return gm_tfail(c, GM_ETEMPLATE, "formatting failed");
    if ((size_t)n < sizeof tmp)
        return gm_tbuf_put(c, b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return gm_tfail(c, GM_ENOMEM, "out of memory");
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = gm_tbuf_put(c, b, big, (size_t)n);
    free(big);
    return rc;
}

void gm_tbuf_free(gm_tbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ------------------------------------------------------------------ objects */

static void unlink_tracked(gm_tlink *l)
{
    if (l->next && l->next != l) {
        l->prev->next = l->next;
        l->next->prev = l->prev;
    }
    l->prev = l->next = l;
}

void gm_track(gm_tctx *c, gm_tlink *l)
{
    l->next = c->tracked.next;
    l->prev = &c->tracked;
    c->tracked.next->prev = l;
    c->tracked.next = l;
}

static void frame_decref(gm_tframe *f)
{
    if (f && f->h.rc >= 0 && --f->h.rc == 0)
        gm_tobj_free(&f->h);
}

static void obj_decref(gm_tobj *o)
{
    if (o && o->rc >= 0 && --o->rc == 0)
        gm_tobj_free(o);
}

static void dict_clear(gm_tdict *d)
{
    for (size_t i = 0; i < d->n; i++) {
        gm_tv_decref(d->k[i]);
        gm_tv_decref(d->v[i]);
    }
    d->n = 0;
}

void gm_tobj_free(gm_tobj *o)
{
    switch (o->kind) {
    case TV_LIST: {
        gm_tlist *l = (gm_tlist *)o;
        for (size_t i = 0; i < l->n; i++)
            gm_tv_decref(l->a[i]);
        free(l->a);
        break;
    }
    case TV_DICT: {
        gm_tdict *d = (gm_tdict *)o;
        dict_clear(d);
        free(d->k);
        free(d->v);
        break;
    }
    case TV_NS: {
        gm_tns *ns = (gm_tns *)o;
        unlink_tracked(&ns->link);
        obj_decref(&ns->d->h);
        break;
    }
    case TO_FRAME: {
        gm_tframe *f = (gm_tframe *)o;
        unlink_tracked(&f->link);
        for (uint32_t i = 0; i < f->n; i++)
            gm_tv_decref(f->e[i].v);
        free(f->e);
        frame_decref(f->parent);
        break;
    }
    case TV_MACRO:
        frame_decref(((gm_tmacro *)o)->closure);
        break;
    case TV_BOUND:
        gm_tv_decref(((gm_tbound *)o)->self);
        break;
    case TV_LOOP: {
        gm_tloop *lp = (gm_tloop *)o;
        obj_decref(&lp->items->h);
        frame_decref(lp->outer);
        gm_tv_decref(lp->changed_last);
        break;
    }
    case TV_CYCLER:
        obj_decref(&((gm_tcycler *)o)->items->h);
        break;
    case TV_JOINER:
        gm_tv_decref(((gm_tjoiner *)o)->sep);
        break;
    default:
        break;
    }
    free(o);
}

/* At the end of a render: whatever is still on the tracked list is kept alive only by reference
 * cycles (a namespace holding itself, a scope holding a macro that holds the scope). Pin them
 * all, empty them (which releases everything they point to), then let them go. */
void gm_track_sweep(gm_tctx *c)
{
    gm_tlink *head = &c->tracked;
    for (gm_tlink *l = head->next; l != head; l = l->next) {
        gm_tobj *o = (gm_tobj *)((char *)l - offsetof(gm_tns, link));
        /* gm_tns and gm_tframe both place link right after the header */
        o->rc++;
    }
    for (gm_tlink *l = head->next; l != head; l = l->next) {
        gm_tobj *o = (gm_tobj *)((char *)l - offsetof(gm_tns, link));
        if (o->kind == TV_NS) {
            dict_clear(((gm_tns *)o)->d);
        } else {
            gm_tframe *f = (gm_tframe *)o;
            for (uint32_t i = 0; i < f->n; i++)
                gm_tv_decref(f->e[i].v);
            f->n = 0;
            gm_tframe *p = f->parent;
            f->parent = NULL;
            frame_decref(p);
        }
    }
    while (head->next != head) {
        gm_tlink *l = head->next;
        unlink_tracked(l);
        gm_tobj *o = (gm_tobj *)((char *)l - offsetof(gm_tns, link));
        obj_decref(o);
    }
}

_Static_assert(offsetof(gm_tns, link) == offsetof(gm_tframe, link), "tracked objects share the link offset");

static void *obj_new(gm_tctx *c, size_t size, uint8_t kind)
{
    gm_tobj *o = calloc(1, size);
    if (!o) {
        gm_tfail(c, GM_ENOMEM, "out of memory");
        return NULL;
    }
    o->rc = 1;
    o->kind = kind;
    return o;
}

/* ------------------------------------------------------------------ strings */

gm_tstr *gm_tstr_new(size_t n)
{
    if (n > SIZE_MAX - sizeof(gm_tstr) - 1)
        return NULL;
    gm_tstr *s = malloc(sizeof(gm_tstr) + n + 1);
    if (!s)
        return NULL;
    s->h.rc = 1;
    s->h.kind = TV_STR;
    s->len = n;
    s->ncp = 0;
    s->p[n] = 0;
    return s;
}

int gm_tv_str(gm_tctx *c, const char *p, size_t n, gm_tv *out)
{
    if (n > c->lim.max_output_bytes)
        return gm_tfail(c, GM_ERANGE, "text longer than %llu bytes",
                        (unsigned long long)c->lim.max_output_bytes);
    /* allocation volume counts as work, which bounds the memory a render can go through */
    if (n >= 64) {
        int rc = gm_tstep(c, n / 16);
        if (rc)
            return rc;
    }
    gm_tstr *s = gm_tstr_new(n);
    if (!s)
        return gm_tfail(c, GM_ENOMEM, "out of memory");
    if (n)
        memcpy(s->p, p, n);
    s->ncp = gm_u8_count(p, n);
    *out = (gm_tv){.k = TV_STR};
    out->u.s = s;
    return 0;
}

int gm_tv_strz(gm_tctx *c, const char *s, gm_tv *out)
{
    return gm_tv_str(c, s, strlen(s), out);
}

int gm_tv_str_buf(gm_tctx *c, gm_tbuf *b, gm_tv *out)
{
    int rc = gm_tv_str(c, b->p ? b->p : "", b->n, out);
    gm_tbuf_free(b);
    return rc;
}

bool gm_tstr_eq(const gm_tstr *s, const char *p, size_t n)
{
    return s->len == n && memcmp(s->p, p, n) == 0;
}

int gm_tv_substr(gm_tctx *c, const gm_tstr *s, size_t i, size_t j, gm_tv *out)
{
    if (j < i)
        j = i;
    size_t a, b;
    if (s->ncp == s->len) {
        a = i, b = j;
    } else {
        a = gm_u8_offset(s->p, s->len, i);
        b = a + gm_u8_offset(s->p + a, s->len - a, j - i);
    }
    return gm_tv_str(c, s->p + a, b - a, out);
}

/* ------------------------------------------------------------------ lists, dicts */

int gm_tv_list(gm_tctx *c, uint8_t lk, size_t cap, gm_tv *out)
{
    if (cap > ((size_t)1 << 28))
        return gm_tfail(c, GM_ERANGE, "a list of more than 2^28 items");
    int rc = gm_tstep(c, cap);
    if (rc)
        return rc;
    gm_tlist *l = obj_new(c, sizeof *l, TV_LIST);
    if (!l)
        return GM_ENOMEM;
    l->lk = lk;
    if (cap) {
        l->a = malloc(cap * sizeof *l->a);
        if (!l->a) {
            free(l);
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        }
        l->cap = cap;
    }
    *out = (gm_tv){.k = TV_LIST};
    out->u.l = l;
    return 0;
}

int gm_tlist_push(gm_tctx *c, gm_tlist *l, gm_tv v)
{
    if (l->n == l->cap) {
        int rc = gm_tstep(c, l->cap ? l->cap : 4);
        if (rc) {
            gm_tv_decref(v);
            return rc;
        }
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(gm_tv)) {
            gm_tv_decref(v);
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        }
        gm_tv *a = realloc(l->a, cap * sizeof *a);
        if (!a) {
            gm_tv_decref(v);
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        }
        l->a = a;
        l->cap = cap;
    }
    l->a[l->n++] = v;
    return 0;
}

int gm_tv_dict(gm_tctx *c, gm_tv *out)
{
    gm_tdict *d = obj_new(c, sizeof *d, TV_DICT);
    if (!d)
        return GM_ENOMEM;
    *out = (gm_tv){.k = TV_DICT};
    out->u.m = d;
    return 0;
}

/* Key equality as Python's dict sees it (1 == 1.0 == True); keys are hashable, so no error. */
static bool key_eq(gm_tv a, gm_tv b)
{
    if (a.k == TV_STR && b.k == TV_STR)
        return a.u.s == b.u.s || (a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0);
    bool eq = false;
    gm_tctx dummy = {0};
    gm_err e = {0};
    dummy.err = &e;
    dummy.lim.max_depth = 1000;
    dummy.lim.max_steps = UINT64_MAX;
    if (gm_tv_eq(&dummy, a, b, &eq))
        return false;
    return eq;
}

gm_tv *gm_tdict_get(const gm_tdict *d, gm_tv k)
{
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], k))
            return &d->v[i];
    return NULL;
}

gm_tv *gm_tdict_gets(const gm_tdict *d, const char *p, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].k == TV_STR && gm_tstr_eq(d->k[i].u.s, p, n))
            return &d->v[i];
    return NULL;
}

int gm_tdict_set(gm_tctx *c, gm_tdict *d, gm_tv k, gm_tv v)
{
    gm_tv *slot = gm_tdict_get(d, k);
    if (slot) {
        /* Python keeps the first key object and replaces the value */
        gm_tv_decref(k);
        gm_tv_decref(*slot);
        *slot = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        gm_tv *nk = realloc(d->k, cap * sizeof *nk);
        if (nk)
            d->k = nk;
        gm_tv *nv = nk ? realloc(d->v, cap * sizeof *nv) : NULL;
        if (nv)
            d->v = nv;
        if (!nk || !nv) {
            gm_tv_decref(k);
            gm_tv_decref(v);
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        }
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}

int gm_tv_ns(gm_tctx *c, gm_tv *out)
{
    gm_tns *ns = obj_new(c, sizeof *ns, TV_NS);
    if (!ns)
        return GM_ENOMEM;
    ns->d = obj_new(c, sizeof *ns->d, TV_DICT);
    if (!ns->d) {
        free(ns);
        return GM_ENOMEM;
    }
    gm_track(c, &ns->link);
    *out = (gm_tv){.k = TV_NS};
    out->u.o = &ns->h;
    return 0;
}

gm_tframe *gm_tframe_new(gm_tctx *c, gm_tframe *parent)
{
    gm_tframe *f = obj_new(c, sizeof *f, TO_FRAME);
    if (!f)
        return NULL;
    f->parent = parent;
    if (parent && parent->h.rc >= 0)
        parent->h.rc++;
    gm_track(c, &f->link);
    return f;
}

/* ------------------------------------------------------------------ JSON input */

int gm_tv_from_json(gm_tctx *c, const json_t *j, gm_tv *out, int depth)
{
    if (depth > 4096)
        return gm_tfail(c, GM_ERANGE, "variables nested more than 4096 deep");
    switch (json_typeof(j)) {
    case JSON_NULL: *out = gm_tv_none(); return 0;
    case JSON_TRUE: *out = gm_tv_bool(true); return 0;
    case JSON_FALSE: *out = gm_tv_bool(false); return 0;
    case JSON_INTEGER: *out = gm_tv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = gm_tv_float(json_real_value(j)); return 0;
    case JSON_STRING: {
        const char *p = json_string_value(j);
        size_t n = json_string_length(j);
        if (!gm_u8_valid(p, n))
            return gm_tfail(c, GM_ETEMPLATE, "a variable holds text that is not UTF-8");
        return gm_tv_str(c, p, n, out);
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        int rc = gm_tv_list(c, LK_LIST, n, out);
        if (rc)
            return rc;
        for (size_t i = 0; i < n; i++) {
            gm_tv e;
            if ((rc = gm_tv_from_json(c, json_array_get(j, i), &e, depth + 1)) ||
                (rc = gm_tlist_push(c, out->u.l, e))) {
                gm_tv_decref(*out);
                return rc;
            }
        }
        return 0;
    }
    case JSON_OBJECT: {
        int rc = gm_tv_dict(c, out);
        if (rc)
            return rc;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            gm_tv k, v;
            if ((rc = gm_tv_strz(c, key, &k)))
                break;
            if ((rc = gm_tv_from_json(c, val, &v, depth + 1))) {
                gm_tv_decref(k);
                break;
            }
            if ((rc = gm_tdict_set(c, out->u.m, k, v)))
                break;
        }
        if (rc)
            gm_tv_decref(*out);
        return rc;
    }
    }
    return gm_tfail(c, GM_ETEMPLATE, "unknown JSON value");
}

/* ------------------------------------------------------------------ Python semantics */

bool gm_tv_truthy(gm_tv v)
{
    switch (v.k) {
    case TV_UNDEF:
    case TV_NONE: return false;
    case TV_BOOL: return v.u.b;
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.d != 0.0;
    case TV_STR: return v.u.s->len != 0;
    case TV_LIST: return v.u.l->lk == LK_GEN || v.u.l->lk == LK_REVITER || v.u.l->n != 0;
    case TV_DICT: return v.u.m->n != 0;
    default: return true;
    }
}

const char *gm_tv_typename(gm_tv v)
{
    switch (v.k) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return (v.f & TVF_MARKUP) ? "Markup" : "str";
    case TV_LIST:
        switch (v.u.l->lk) {
        case LK_TUPLE: return "tuple";
        case LK_GEN: return "generator";
        case LK_REVITER: return "list_reverseiterator";
        case LK_RANGE: return "range";
        case LK_KEYS: return "dict_keys";
        case LK_VALUES: return "dict_values";
        case LK_ITEMS: return "dict_items";
        default: return "list";
        }
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_MACRO: return "Macro";
    case TV_FUNC: return "function";
    case TV_BOUND: return "builtin_function_or_method";
    case TV_LOOP: return "LoopContext";
    case TV_CYCLER: return "Cycler";
    case TV_JOINER: return "Joiner";
    default: return "object";
    }
}

static bool is_num(gm_tv v) { return v.k == TV_BOOL || v.k == TV_INT || v.k == TV_FLOAT; }

/* Exact comparison of an int64 and a double, as Python compares int and float. */
static int cmp_int_float(int64_t i, double d)
{
    if (isnan(d))
        return 2; /* unordered */
    if (d >= 9223372036854775808.0)
        return -1;
    if (d < -9223372036854775808.0)
        return 1;
    double fl = floor(d);
    int64_t di = (int64_t)fl;
    if (i < di)
        return -1;
    if (i > di)
        return 1;
    return fl < d ? -1 : 0;
}

/* -1/0/1, or 2 when unordered (NaN). */
static int num_cmp(gm_tv a, gm_tv b)
{
    if (a.k != TV_FLOAT && b.k != TV_FLOAT) {
        int64_t x = a.k == TV_BOOL ? a.u.b : a.u.i, y = b.k == TV_BOOL ? b.u.b : b.u.i;
        return x < y ? -1 : x > y;
    }
    if (a.k == TV_FLOAT && b.k == TV_FLOAT) {
        if (isnan(a.u.d) || isnan(b.u.d))
            return 2;
        return a.u.d < b.u.d ? -1 : a.u.d > b.u.d;
    }
    if (a.k == TV_FLOAT) {
        int r = cmp_int_float(b.k == TV_BOOL ? b.u.b : b.u.i, a.u.d);
        return r == 2 ? 2 : -r;
    }
    return cmp_int_float(a.k == TV_BOOL ? a.u.b : a.u.i, b.u.d);
}

static bool seq_kind(gm_tv v, uint8_t *lk)
{
    if (v.k != TV_LIST)
        return false;
    *lk = v.u.l->lk;
    return *lk == LK_LIST || *lk == LK_TUPLE || *lk == LK_RANGE;
}

int gm_tv_eq(gm_tctx *c, gm_tv a, gm_tv b, bool *eq)
{
    *eq = false;
    if (is_num(a) && is_num(b)) {
        *eq = num_cmp(a, b) == 0;
        return 0;
    }
    if (a.k != b.k)
        return 0;
    switch (a.k) {
    case TV_UNDEF:
    case TV_NONE: *eq = true; return 0;
    case TV_STR:
        *eq = a.u.s == b.u.s || (a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0);
        return 0;
    case TV_FUNC: *eq = a.x == b.x; return 0;
    case TV_LIST: {
        uint8_t ka, kb;
        if (a.u.l == b.u.l) {
            *eq = true;
            return 0;
        }
        if (!seq_kind(a, &ka) || !seq_kind(b, &kb) || ka != kb)
            return 0;
        if (a.u.l->n != b.u.l->n)
            return 0;
        int rc = gm_tdepth_enter(c);
        if (rc)
            return rc;
        bool all = true;
        for (size_t i = 0; i < a.u.l->n && all; i++) {
            gm_tv x = a.u.l->a[i], y = b.u.l->a[i];
            if (gm_tv_heap(x) && gm_tv_heap(y) && x.u.o == y.u.o)
                continue; /* Python compares identical elements as equal without asking */
            if ((rc = gm_tv_eq(c, x, y, &all)))
                break;
        }
        gm_tdepth_leave(c);
        *eq = all;
        return rc;
    }
    case TV_DICT: {
        if (a.u.m == b.u.m) {
            *eq = true;
            return 0;
        }
        if (a.u.m->n != b.u.m->n)
            return 0;
        int rc = gm_tdepth_enter(c);
        if (rc)
            return rc;
        bool all = true;
        for (size_t i = 0; i < a.u.m->n && all; i++) {
            gm_tv *o = gm_tdict_get(b.u.m, a.u.m->k[i]);
            if (!o) {
                all = false;
                break;
            }
            if (gm_tv_heap(*o) && gm_tv_heap(a.u.m->v[i]) && o->u.o == a.u.m->v[i].u.o)
                continue;
            if ((rc = gm_tv_eq(c, a.u.m->v[i], *o, &all)))
                break;
        }
        gm_tdepth_leave(c);
        *eq = all;
        return rc;
    }
    default:
        *eq = a.u.o == b.u.o;
        return 0;
    }
}

int gm_tv_cmp(gm_tctx *c, gm_tv a, gm_tv b, int *cmp)
{
    if (a.k == TV_UNDEF)
        return gm_tundef_error(c, a);
    if (b.k == TV_UNDEF)
        return gm_tundef_error(c, b);
    if (is_num(a) && is_num(b)) {
        int r = num_cmp(a, b);
        *cmp = r == 2 ? 0 : r; /* NaN: neither < nor > */
        return 0;
    }
    if (a.k == TV_STR && b.k == TV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->p, b.u.s->p, n);
        *cmp = r < 0 ? -1 : r > 0 ? 1 : a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
        return 0;
    }
    uint8_t ka, kb;
    if (seq_kind(a, &ka) && seq_kind(b, &kb) && ka == kb && ka != LK_RANGE) {
        int rc = gm_tdepth_enter(c);
        if (rc)
            return rc;
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            bool eq;
            if ((rc = gm_tv_eq(c, a.u.l->a[i], b.u.l->a[i], &eq)))
                break;
            if (!eq) {
                rc = gm_tv_cmp(c, a.u.l->a[i], b.u.l->a[i], cmp);
                gm_tdepth_leave(c);
                return rc;
            }
        }
        gm_tdepth_leave(c);
        if (rc)
            return rc;
        *cmp = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    return gm_tfail(c, GM_ETEMPLATE, "'<' not supported between instances of '%s' and '%s'",
                    gm_tv_typename(a), gm_tv_typename(b));
}

bool gm_tv_hashable(gm_tv v)
{
    if (v.k == TV_DICT)
        return false;
    if (v.k == TV_LIST) {
        if (v.u.l->lk != LK_TUPLE)
            return v.u.l->lk == LK_GEN || v.u.l->lk == LK_REVITER || v.u.l->lk == LK_RANGE;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!gm_tv_hashable(v.u.l->a[i]))
                return false;
    }
    return true;
}

/* ------------------------------------------------------------------ printing */

/* Python's float repr: the shortest decimal that reads back as the same double; exponent
 * notation below 1e-4 and from 1e16 on. */
void gm_float_repr(double d, char out[32])
{
    if (isnan(d)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(d)) {
        strcpy(out, d < 0 ? "-inf" : "inf");
        return;
    }
    if (d == 0) {
        strcpy(out, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char buf[40], digits[24];
    int ndig = 0, exp10 = 0;
    for (int prec = 0; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec, d);
        bool ok = strtod(buf, NULL) == d;
        if (!ok && prec > 0) {
            /* The nearest prec-digit decimal may miss while a neighbour of it reads back (the
             * rounding interval is lopsided next to a power of two): try both neighbours. */
            char *e = strchr(buf, 'e');
            for (int dir = -1; dir <= 1 && !ok; dir += 2) {
                char alt[40];
                memcpy(alt, buf, sizeof alt);
                char *q = alt + (e - buf) - 1;
                int carry = dir;
                while (carry && q >= alt) {
                    if (*q == '.' ) {
                        q--;
                        continue;
                    }
                    if (*q < '0' || *q > '9')
                        break;
                    int dg = *q - '0' + carry;
                    carry = 0;
                    if (dg > 9) {
                        dg = 0;
                        carry = 1;
                    } else if (dg < 0) {
                        dg = 9;
                        carry = -1;
                    }
                    *q-- = (char)('0' + dg);
                }
                if (carry || alt[d < 0 ? 1 : 0] == '0')
                    continue; /* the digits would change length: not a neighbour of this width */
                if (strtod(alt, NULL) == d) {
                    memcpy(buf, alt, sizeof buf);
                    ok = true;
                }
            }
        }
        if (ok)
            break;
    }
    /* buf: [-]D[.DDD]e[+-]XX */
    const char *p = buf;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    while (*p && *p != 'e') {
        if (*p != '.')
            digits[ndig++] = *p;
        p++;
    }
    if (*p == 'e')
        exp10 = atoi(p + 1);
    while (ndig > 1 && digits[ndig - 1] == '0')
        ndig--;
    digits[ndig] = 0;
    int decpt = exp10 + 1; /* value = 0.DIGITS * 10^decpt */
    char *o = out;
    if (neg)
        *o++ = '-';
    if (decpt > 16 || decpt < -3) {
        *o++ = digits[0];
        if (ndig > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)ndig - 1);
            o += ndig - 1;
        }
        snprintf(o, (size_t)(out + 32 - o), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        return;
    }
    if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++)
            *o++ = '0';
        memcpy(o, digits, (size_t)ndig);
        o += ndig;
    } else if (decpt >= ndig) {
        memcpy(o, digits, (size_t)ndig);
        o += ndig;
        for (int i = ndig; i < decpt; i++)
            *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    } else {
        memcpy(o, digits, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, digits + decpt, (size_t)(ndig - decpt));
        o += ndig - decpt;
    }
    *o = 0;
}

int gm_str_repr(gm_tctx *c, gm_tbuf *b, const char *p, size_t n)
{
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char quote = (sq && !dq) ? '"' : '\'';
    int rc = gm_tbuf_putc(c, b, quote);
    size_t i = 0, run = 0;
    while (!rc && i < n) {
        uint32_t cp;
        size_t k = gm_u8_dec(p + i, n - i, &cp);
        const char *esc = NULL;
        char tmp[16];
        if (cp == (uint32_t)quote || cp == '\\') {
            tmp[0] = '\\', tmp[1] = (char)cp, tmp[2] = 0;
            esc = tmp;
        } else if (cp == '\n') {
            esc = "\\n";
        } else if (cp == '\r') {
            esc = "\\r";
        } else if (cp == '\t') {
            esc = "\\t";
        } else if (!gm_u_isprintable(cp)) {
            if (cp < 0x100)
                snprintf(tmp, sizeof tmp, "\\x%02x", (unsigned)cp);
            else if (cp < 0x10000)
                snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
            else
                snprintf(tmp, sizeof tmp, "\\U%08x", (unsigned)cp);
            esc = tmp;
        }
        if (esc) {
            if (run)
                rc = gm_tbuf_put(c, b, p + i - run, run);
            run = 0;
            if (!rc)
                rc = gm_tbuf_put(c, b, esc, strlen(esc));
        } else {
            run += k;
        }
        i += k;
    }
    if (!rc && run)
        rc = gm_tbuf_put(c, b, p + i - run, run);
    return rc ? rc : gm_tbuf_putc(c, b, quote);
}

static int write_seq(gm_tctx *c, gm_tbuf *b, const gm_tlist *l, const char *open, const char *close)
{
    int rc = gm_tbuf_put(c, b, open, strlen(open));
    for (size_t i = 0; !rc && i < l->n; i++) {
        if (i)
            rc = gm_tbuf_put(c, b, ", ", 2);
        if (!rc)
            rc = gm_tv_write(c, b, l->a[i], true);
    }
    if (!rc && l->lk == LK_TUPLE && l->n == 1)
        rc = gm_tbuf_putc(c, b, ',');
    return rc ? rc : gm_tbuf_put(c, b, close, strlen(close));
}

static int write_dict(gm_tctx *c, gm_tbuf *b, const gm_tdict *d)
{
    int rc = gm_tbuf_putc(c, b, '{');
    for (size_t i = 0; !rc && i < d->n; i++) {
        if (i)
            rc = gm_tbuf_put(c, b, ", ", 2);
        if (!rc)
            rc = gm_tv_write(c, b, d->k[i], true);
        if (!rc)
            rc = gm_tbuf_put(c, b, ": ", 2);
        if (!rc)
            rc = gm_tv_write(c, b, d->v[i], true);
    }
    return rc ? rc : gm_tbuf_putc(c, b, '}');
}

int gm_tv_write(gm_tctx *c, gm_tbuf *b, gm_tv v, bool repr)
{
    char num[32];
    switch (v.k) {
    case TV_UNDEF: return repr ? gm_tbuf_put(c, b, "Undefined", 9) : 0;
    case TV_NONE: return gm_tbuf_put(c, b, "None", 4);
    case TV_BOOL: return v.u.b ? gm_tbuf_put(c, b, "True", 4) : gm_tbuf_put(c, b, "False", 5);
    case TV_INT: return gm_tbuf_putf(c, b, "%lld", (long long)v.u.i);
    case TV_FLOAT: gm_float_repr(v.u.d, num); return gm_tbuf_put(c, b, num, strlen(num));
    case TV_STR:
        if (!repr)
            return gm_tbuf_put(c, b, v.u.s->p, v.u.s->len);
        if (v.f & TVF_MARKUP) {
            int rc = gm_tbuf_put(c, b, "Markup(", 7);
            if (!rc)
                rc = gm_str_repr(c, b, v.u.s->p, v.u.s->len);
            return rc ? rc : gm_tbuf_putc(c, b, ')');
        }
        return gm_str_repr(c, b, v.u.s->p, v.u.s->len);
    default: break;
    }
    int rc = gm_tdepth_enter(c);
    if (rc)
        return rc;
    if ((rc = gm_tstep(c, 1))) {
        gm_tdepth_leave(c);
        return rc;
    }
    switch (v.k) {
    case TV_LIST: {
        const gm_tlist *l = v.u.l;
        switch (l->lk) {
        case LK_LIST: rc = write_seq(c, b, l, "[", "]"); break;
        case LK_TUPLE: rc = write_seq(c, b, l, "(", ")"); break;
        case LK_KEYS: rc = write_seq(c, b, l, "dict_keys([", "])"); break;
        case LK_VALUES: rc = write_seq(c, b, l, "dict_values([", "])"); break;
        case LK_ITEMS: rc = write_seq(c, b, l, "dict_items([", "])"); break;
        case LK_RANGE:
            if (l->rs == 1)
                rc = gm_tbuf_putf(c, b, "range(%lld, %lld)", (long long)l->r0, (long long)l->r1);
            else
                rc = gm_tbuf_putf(c, b, "range(%lld, %lld, %lld)", (long long)l->r0,
                                    (long long)l->r1, (long long)l->rs);
            break;
        default:
            /* Python prints "<generator object ... at 0x7f...>": an address cannot match */
            rc = gm_tfail(c, GM_EUNSUPPORTED, "cannot print a %s (apply |list first)", gm_tv_typename(v));
        }
        break;
    }
    case TV_DICT: rc = write_dict(c, b, v.u.m); break;
    case TV_NS:
        rc = gm_tbuf_put(c, b, "<Namespace ", 11);
        if (!rc)
            rc = write_dict(c, b, ((gm_tns *)v.u.o)->d);
        if (!rc)
            rc = gm_tbuf_putc(c, b, '>');
        break;
    case TV_MACRO: {
        const gm_tmacro *m = (const gm_tmacro *)v.u.o;
        if (m->def->kind == N_MACRO) {
            const gm_tstr *nm = c->t->syms[m->def->sym];
            rc = gm_tbuf_put(c, b, "<Macro ", 7);
            if (!rc)
                rc = gm_str_repr(c, b, nm->p, nm->len);
            if (!rc)
                rc = gm_tbuf_putc(c, b, '>');
        } else {
            rc = gm_tbuf_put(c, b, "<Macro 'caller'>", 16);
        }
        break;
    }
    case TV_LOOP: {
        const gm_tloop *lp = (const gm_tloop *)v.u.o;
        rc = gm_tbuf_putf(c, b, "<LoopContext %zu/%zu>", lp->i + 1, lp->items->n);
        break;
    }
    case TV_FUNC: {
        /* the globals that are classes print as such; the functions print an address */
        static const char *const cls[G_NGLOBALS] = {
            [G_DICT] = "<class 'dict'>", [G_NAMESPACE] = "<class 'jinja2.utils.Namespace'>",
            [G_CYCLER] = "<class 'jinja2.utils.Cycler'>", [G_JOINER] = "<class 'jinja2.utils.Joiner'>"};
        if (v.x < G_NGLOBALS && cls[v.x]) {
            rc = gm_tbuf_put(c, b, cls[v.x], strlen(cls[v.x]));
            break;
        }
    }
    /* fall through */
    default:
        rc = gm_tfail(c, GM_EUNSUPPORTED, "cannot print a %s (Python prints its address)", gm_tv_typename(v));
    }
    gm_tdepth_leave(c);
    return rc;
}

int gm_tv_tostr(gm_tctx *c, gm_tv v, gm_tv *out)
{
    if (v.k == TV_STR) {
        *out = gm_tv_ref(v);
        out->f &= (uint8_t)~TVF_MARKUP;
        return 0;
    }
    if (v.k == TV_UNDEF)
        return gm_tv_str(c, "", 0, out);
    gm_tbuf b = {0};
    int rc = gm_tv_write(c, &b, v, false);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out);
}

int gm_tv_escape(gm_tctx *c, gm_tv v, gm_tv *out)
{
    if (v.k == TV_STR && (v.f & TVF_MARKUP)) {
        *out = gm_tv_ref(v);
        return 0;
    }
    gm_tv s;
    int rc = gm_tv_tostr(c, v, &s);
    if (rc)
        return rc;
    gm_tbuf b = {0};
    const char *p = s.u.s->p;
    size_t n = s.u.s->len, run = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        const char *e = NULL;
        switch (p[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '\'': e = "&#39;"; break;
        case '"': e = "&#34;"; break;
        default: run++; continue;
        }
        if (run)
            rc = gm_tbuf_put(c, &b, p + i - run, run);
        run = 0;
        if (!rc)
            rc = gm_tbuf_put(c, &b, e, strlen(e));
    }
    if (!rc && run)
        rc = gm_tbuf_put(c, &b, p + n - run, run);
    gm_tv_decref(s);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    if ((rc = gm_tv_str_buf(c, &b, out)))
        return rc;
    out->f |= TVF_MARKUP;
    return 0;
}

/* ------------------------------------------------------------------ json.dumps */

static int json_str(gm_tctx *c, gm_tbuf *b, const char *p, size_t n, bool ascii)
{
    int rc = gm_tbuf_putc(c, b, '"');
    size_t i = 0, run = 0;
    while (!rc && i < n) {
        uint32_t cp;
        size_t k = gm_u8_dec(p + i, n - i, &cp);
        char tmp[16];
        const char *e = NULL;
        switch (cp) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (cp < 0x20 || (ascii && cp > 0x7E)) { /* ensure_ascii: all but space..~ */
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
                }
                e = tmp;
            }
        }
        if (e) {
            if (run)
                rc = gm_tbuf_put(c, b, p + i - run, run);
            run = 0;
            if (!rc)
                rc = gm_tbuf_put(c, b, e, strlen(e));
        } else {
            run += k;
        }
        i += k;
    }
    if (!rc && run)
        rc = gm_tbuf_put(c, b, p + i - run, run);
    return rc ? rc : gm_tbuf_putc(c, b, '"');
}

static int json_float(gm_tctx *c, gm_tbuf *b, double d)
{
    if (isnan(d))
        return gm_tbuf_put(c, b, "NaN", 3);
    if (isinf(d))
        return d < 0 ? gm_tbuf_put(c, b, "-Infinity", 9) : gm_tbuf_put(c, b, "Infinity", 8);
    char num[32];
    gm_float_repr(d, num);
    return gm_tbuf_put(c, b, num, strlen(num));
}

static int json_newline(gm_tctx *c, gm_tbuf *b, const gm_tjson_opts *o, int level)
{
    int rc = gm_tbuf_putc(c, b, '\n');
    for (int i = 0; !rc && i < level; i++)
        rc = gm_tbuf_put(c, b, o->indent, o->indent_n);
    return rc;
}

/* A dict key as json.dumps turns it into a string. */
static int json_key(gm_tctx *c, gm_tbuf *b, gm_tv k, const gm_tjson_opts *o)
{
    char num[32];
    switch (k.k) {
    case TV_STR: return json_str(c, b, k.u.s->p, k.u.s->len, o->ensure_ascii);
    case TV_INT: return gm_tbuf_putf(c, b, "\"%lld\"", (long long)k.u.i);
    case TV_BOOL: return gm_tbuf_put(c, b, k.u.b ? "\"true\"" : "\"false\"", k.u.b ? 6 : 7);
    case TV_NONE: return gm_tbuf_put(c, b, "\"null\"", 6);
    case TV_FLOAT:
        if (isnan(k.u.d))
            strcpy(num, "NaN");
        else if (isinf(k.u.d))
            strcpy(num, k.u.d < 0 ? "-Infinity" : "Infinity");
        else
            gm_float_repr(k.u.d, num);
        return gm_tbuf_putf(c, b, "\"%s\"", num);
    default:
        return gm_tfail(c, GM_ETEMPLATE, "keys must be str, int, float, bool or None, not %s",
                        gm_tv_typename(k));
    }
}

static int cmp_idx_sort(gm_tctx *c, const gm_tdict *d, size_t *idx)
{
    /* insertion sort: dicts in templates are small, and it is stable */
    for (size_t i = 1; i < d->n; i++) {
        size_t x = idx[i], j = i;
        while (j > 0) {
            int cmp;
            int rc = gm_tv_cmp(c, d->k[idx[j - 1]], d->k[x], &cmp);
            if (rc)
                return rc;
            if (cmp <= 0)
                break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
    return 0;
}

int gm_tv_json(gm_tctx *c, gm_tbuf *b, gm_tv v, const gm_tjson_opts *o, int level)
{
    switch (v.k) {
    case TV_NONE: return gm_tbuf_put(c, b, "null", 4);
    case TV_BOOL: return v.u.b ? gm_tbuf_put(c, b, "true", 4) : gm_tbuf_put(c, b, "false", 5);
    case TV_INT: return gm_tbuf_putf(c, b, "%lld", (long long)v.u.i);
    case TV_FLOAT: return json_float(c, b, v.u.d);
    case TV_STR: return json_str(c, b, v.u.s->p, v.u.s->len, o->ensure_ascii);
    case TV_LIST:
        if (v.u.l->lk == LK_LIST || v.u.l->lk == LK_TUPLE)
            break;
        /* fall through */
    case TV_UNDEF:
    default:
        return gm_tfail(c, GM_ETEMPLATE, "Object of type %s is not JSON serializable", gm_tv_typename(v));
    case TV_DICT: break;
    }
    int rc = gm_tdepth_enter(c);
    if (rc)
        return rc;
    if ((rc = gm_tstep(c, 1)))
        goto done;
    if (v.k == TV_LIST) {
        const gm_tlist *l = v.u.l;
        if (l->n == 0) {
            rc = gm_tbuf_put(c, b, "[]", 2);
            goto done;
        }
        rc = gm_tbuf_putc(c, b, '[');
        for (size_t i = 0; !rc && i < l->n; i++) {
            if (i)
                rc = gm_tbuf_put(c, b, o->item_sep, o->item_sep_n);
            if (!rc && o->indent_set)
                rc = json_newline(c, b, o, level + 1);
            if (!rc)
                rc = gm_tv_json(c, b, l->a[i], o, level + 1);
        }
        if (!rc && o->indent_set)
            rc = json_newline(c, b, o, level);
        if (!rc)
            rc = gm_tbuf_putc(c, b, ']');
        goto done;
    }
    const gm_tdict *d = v.u.m;
    if (d->n == 0) {
        rc = gm_tbuf_put(c, b, "{}", 2);
        goto done;
    }
    size_t *idx = malloc(d->n * sizeof *idx);
    if (!idx) {
        rc = gm_tfail(c, GM_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < d->n; i++)
        idx[i] = i;
    if (o->sort_keys)
        rc = cmp_idx_sort(c, d, idx);
    if (!rc)
        rc = gm_tbuf_putc(c, b, '{');
    for (size_t i = 0; !rc && i < d->n; i++) {
        if (i)
            rc = gm_tbuf_put(c, b, o->item_sep, o->item_sep_n);
        if (!rc && o->indent_set)
            rc = json_newline(c, b, o, level + 1);
        if (!rc)
            rc = json_key(c, b, d->k[idx[i]], o);
        if (!rc)
            rc = gm_tbuf_put(c, b, o->key_sep, o->key_sep_n);
        if (!rc)
            rc = gm_tv_json(c, b, d->v[idx[i]], o, level + 1);
    }
    free(idx);
    if (!rc && o->indent_set)
        rc = json_newline(c, b, o, level);
    if (!rc)
        rc = gm_tbuf_putc(c, b, '}');
done:
    gm_tdepth_leave(c);
    return rc;
}

/* ------------------------------------------------------------------ iteration, len */

int gm_tv_iter(gm_tctx *c, gm_tv v, gm_tv *out)
{
    int rc;
    switch (v.k) {
    case TV_LIST:
        *out = gm_tv_ref(v);
        return 0;
    case TV_UNDEF:
        if (v.f & TVF_UNSAFE)
            return gm_tundef_error(c, v);
        return gm_tv_list(c, LK_LIST, 0, out);
    case TV_DICT: {
        const gm_tdict *d = v.u.m;
        if ((rc = gm_tv_list(c, LK_LIST, d->n, out)))
            return rc;
        for (size_t i = 0; i < d->n; i++)
            out->u.l->a[out->u.l->n++] = gm_tv_ref(d->k[i]);
        return gm_tstep_out(c, d->n / 16, out);
    }
    case TV_STR: {
        const gm_tstr *s = v.u.s;
        if ((rc = gm_tv_list(c, LK_LIST, s->ncp, out)))
            return rc;
        for (size_t i = 0; i < s->len;) {
            uint32_t cp;
            size_t k = gm_u8_dec(s->p + i, s->len - i, &cp);
            gm_tv ch;
            if ((rc = gm_tv_str(c, s->p + i, k, &ch))) {
                gm_tv_decref(*out);
                return rc;
            }
            ch.f = v.f & TVF_MARKUP;
            out->u.l->a[out->u.l->n++] = ch;
            i += k;
        }
        return gm_tstep_out(c, s->ncp / 16, out);
    }
    case TV_LOOP:
        *out = gm_tv_ref((gm_tv){.k = TV_LIST, .u.l = ((gm_tloop *)v.u.o)->items});
        return 0;
    default:
        return gm_tfail(c, GM_ETEMPLATE, "'%s' object is not iterable", gm_tv_typename(v));
    }
}

int gm_tv_len(gm_tctx *c, gm_tv v, int64_t *n)
{
    switch (v.k) {
    case TV_UNDEF: *n = 0; return 0;
    case TV_STR: *n = (int64_t)v.u.s->ncp; return 0;
    case TV_DICT: *n = (int64_t)v.u.m->n; return 0;
    case TV_NS: break;
    case TV_LOOP: *n = (int64_t)((gm_tloop *)v.u.o)->items->n; return 0;
    case TV_LIST:
        if (v.u.l->lk != LK_GEN && v.u.l->lk != LK_REVITER) {
            *n = (int64_t)v.u.l->n;
            return 0;
        }
        break;
    default: break;
    }
    return gm_tfail(c, GM_ETEMPLATE, "object of type '%s' has no len()", gm_tv_typename(v));
}
