/* template/filters_seq: the filters over sequences and mappings: batch, slice, dictsort,
 * first, last, items, join, list, length, min, max, map, select, reject, selectattr,
 * rejectattr, reverse, sort, sum, unique.
 *
 * As in Python: map, select, reject, selectattr, rejectattr, unique and items return
 * generators (no length; cannot be printed or serialized before |list), reverse of a list an
 * iterator; attribute= looks "a.b.0" up as item[part] for each part; the ordering filters
 * compare strings case-insensitively unless case_sensitive is set, and sort stably. */
#include <stdlib.h>
#include <string.h>

#include "template/filters_int.h"

static int want_int(gm_tctx *c, gm_tv v, const char *what, int64_t *out)
{
    *out = 0; /* also on failure: callers read it only on success, the compiler cannot tell */
    if (v.k == TV_INT || v.k == TV_BOOL) {
        *out = v.k == TV_BOOL ? v.u.b : v.u.i;
        return 0;
    }
    if (v.k == TV_UNDEF)
        return gm_tundef_error(c, v);
    return gm_tfail(c, GM_ETEMPLATE, "%s must be an integer, not %s", what, gm_tv_typename(v));
}

static int make_gen(gm_tctx *c, gm_tv *out) { return gm_tv_list(c, LK_GEN, 0, out); }

/* An attribute path "a.b.0" (or an int) applied to item as Jinja's make_attrgetter does:
 * item[part] for each part (digits as ints), default for an undefined result, lower() of
 * strings when fold. */
typedef struct getter {
    gm_tv parts[16];
    size_t n;
    bool fold;
    gm_tv dflt; /* TV_NONE: none */
} getter;

static void getter_free(getter *g)
{
    for (size_t i = 0; i < g->n; i++)
        gm_tv_decref(g->parts[i]);
    g->n = 0;
}

static int getter_init(gm_tctx *c, getter *g, gm_tv attr, bool fold, gm_tv dflt)
{
    memset(g, 0, sizeof *g);
    g->fold = fold;
    g->dflt = dflt;
    if (attr.k == TV_NONE)
        return 0; /* identity */
    if (attr.k != TV_STR) {
        /* anything else is one key, looked up as it is */
        g->parts[g->n++] = gm_tv_ref(attr);
        return 0;
    }
    const char *p = attr.u.s->p, *e = p + attr.u.s->len;
    while (p <= e) {
        const char *dot = memchr(p, '.', (size_t)(e - p));
        const char *end = dot ? dot : e;
        if (g->n == 16) {
            getter_free(g);
            return gm_tfail(c, GM_EUNSUPPORTED, "attribute path longer than 16 parts");
        }
        bool digits = end > p;
        int64_t iv = 0;
        for (const char *q = p; q < end; q++) {
            if (*q < '0' || *q > '9' || iv > 100000000) {
                digits = false;
                break;
            }
            iv = iv * 10 + (*q - '0');
        }
        int rc = 0;
        if (digits)
            g->parts[g->n] = gm_tv_int(iv);
        else
            rc = gm_tv_str(c, p, (size_t)(end - p), &g->parts[g->n]);
        if (rc) {
            getter_free(g);
            return rc;
        }
        g->n++;
        if (!dot)
            break;
        p = dot + 1;
    }
    return 0;
}

static int getter_apply(gm_tctx *c, const getter *g, gm_tv item, gm_tv *out)
{
    gm_tv cur = gm_tv_ref(item);
    for (size_t i = 0; i < g->n; i++) {
        gm_tv nx;
        int rc = gm_tgetitem(c, cur, g->parts[i], &nx);
        gm_tv_decref(cur);
        if (rc)
            return rc;
        cur = nx;
        if (g->dflt.k != TV_NONE && cur.k == TV_UNDEF)
            cur = gm_tv_ref(g->dflt);
    }
    if (g->fold && cur.k == TV_STR) {
        gm_tv low;
        int rc = gm_tstr_case(c, cur, 'l', &low);
        gm_tv_decref(cur);
        if (rc)
            return rc;
        cur = low;
    }
    *out = cur;
    return 0;
}

/* Keys computed once per item, then a stable merge sort on them. */
typedef struct keyed {
    gm_tv key, item;
} keyed;

static int keyed_cmp(gm_tctx *c, const keyed *x, const keyed *y, bool reverse, int *r)
{
    /* Jinja's sort keys are lists: equal items are never ordered with < (so two undefined keys
     * do not raise) */
    bool eq;
    int rc = gm_tv_eq(c, x->key, y->key, &eq);
    if (rc || eq) {
        *r = 0;
        return rc;
    }
    return reverse ? gm_tv_cmp(c, y->key, x->key, r) : gm_tv_cmp(c, x->key, y->key, r);
}

static int merge_sort(gm_tctx *c, keyed *a, keyed *tmp, size_t n, bool reverse)
{
    if (n < 2)
        return 0;
    size_t h = n / 2;
    int rc = merge_sort(c, a, tmp, h, reverse);
    if (!rc)
        rc = merge_sort(c, a + h, tmp, n - h, reverse);
    if (rc)
        return rc;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r;
        if ((rc = keyed_cmp(c, &a[j], &a[i], reverse, &r)))
            return rc;
        if (r < 0)
            tmp[k++] = a[j++];
        else
            tmp[k++] = a[i++];
    }
    while (i < h)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
    return gm_tstep(c, n / 16);
}

/* sorted(reverse=x) takes an integer (a bool is one) */
static int sort_reverse(gm_tctx *c, gm_tv v, bool *rev)
{
    if (v.k == TV_BOOL || v.k == TV_INT) {
        *rev = v.k == TV_BOOL ? v.u.b : v.u.i != 0;
        return 0;
    }
    return gm_tfail(c, GM_ETEMPLATE, "'%s' object cannot be interpreted as an integer", gm_tv_typename(v));
}

static void keyed_free(keyed *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        gm_tv_decref(k[i].key);
        gm_tv_decref(k[i].item);
    }
    free(k);
}

int gm_tf_batch(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"linecount", "fill_with"};
    gm_tv slot[2] = {gm_tv_none(), gm_tv_none()};
    bool set[2];
    BIND("batch", names, slot, set);
    int64_t n;
    int rc = want_int(c, slot[0], "linecount", &n);
    if (rc)
        return rc;
    if (n <= 0)
        return gm_tfail(c, GM_ETEMPLATE, "batch size must be positive");
    gm_tv items;
    if ((rc = gm_tv_iter(c, v, &items)))
        return rc;
    if ((rc = make_gen(c, out))) {
        gm_tv_decref(items);
        return rc;
    }
    gm_tv tmp = {.k = TV_NONE};
    for (size_t i = 0; !rc && i < items.u.l->n; i++) {
        if (tmp.k == TV_NONE && (rc = gm_tv_list(c, LK_LIST, 0, &tmp)))
            break;
        if ((rc = gm_tlist_push(c, tmp.u.l, gm_tv_ref(items.u.l->a[i]))))
            break;
        if ((int64_t)tmp.u.l->n == n) {
            rc = gm_tlist_push(c, out->u.l, tmp);
            tmp = gm_tv_none();
        }
    }
    if (!rc && tmp.k == TV_LIST) {
        while (!rc && slot[1].k != TV_NONE && (int64_t)tmp.u.l->n < n)
            rc = gm_tlist_push(c, tmp.u.l, gm_tv_ref(slot[1]));
        if (!rc)
            rc = gm_tlist_push(c, out->u.l, tmp);
        else
            gm_tv_decref(tmp);
    } else if (tmp.k == TV_LIST) {
        gm_tv_decref(tmp);
    }
    gm_tv_decref(items);
    if (rc)
        gm_tv_decref(*out);
    return rc;
}

int gm_tf_slice(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"slices", "fill_with"};
    gm_tv slot[2] = {gm_tv_none(), gm_tv_none()};
    bool set[2];
    BIND("slice", names, slot, set);
    int64_t slices;
    int rc = want_int(c, slot[0], "slices", &slices);
    if (rc)
        return rc;
    if (slices <= 0)
        return gm_tfail(c, GM_ETEMPLATE, "integer division or modulo by zero");
    if (slices > 100000)
        return gm_tfail(c, GM_ERANGE, "too many slices");
    gm_tv items;
    if ((rc = gm_tv_iter(c, v, &items)))
        return rc;
    if ((rc = make_gen(c, out))) {
        gm_tv_decref(items);
        return rc;
    }
    int64_t len = (int64_t)items.u.l->n, per = len / slices, extra = len % slices, offset = 0;
    for (int64_t s = 0; !rc && s < slices; s++) {
        int64_t start = offset + s * per;
        if (s < extra)
            offset++;
        int64_t end = offset + (s + 1) * per;
        gm_tv tmp;
        if ((rc = gm_tv_list(c, LK_LIST, 0, &tmp)))
            break;
        for (int64_t i = start; !rc && i < end; i++)
            rc = gm_tlist_push(c, tmp.u.l, gm_tv_ref(items.u.l->a[i]));
        if (!rc && slot[1].k != TV_NONE && s >= extra)
            rc = gm_tlist_push(c, tmp.u.l, gm_tv_ref(slot[1]));
        if (rc)
            gm_tv_decref(tmp);
        else
            rc = gm_tlist_push(c, out->u.l, tmp);
    }
    gm_tv_decref(items);
    if (rc)
        gm_tv_decref(*out);
    return rc;
}

/* dictsort(value, case_sensitive=False, by='key', reverse=False) */
int gm_tf_dictsort(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"case_sensitive", "by", "reverse"};
    gm_tv slot[3] = {gm_tv_bool(false), gm_tv_none(), gm_tv_bool(false)};
    bool set[3];
    BIND("dictsort", names, slot, set);
    if (v.k != TV_DICT) {
        if (v.k == TV_UNDEF)
            return gm_tundef_error(c, v);
        return gm_tfail(c, GM_ETEMPLATE, "'%s' object has no attribute 'items'", gm_tv_typename(v));
    }
    int pos = 0;
    if (set[1]) {
        if (slot[1].k == TV_STR && gm_tstr_eq(slot[1].u.s, "value", 5))
            pos = 1;
        else if (!(slot[1].k == TV_STR && gm_tstr_eq(slot[1].u.s, "key", 3)))
            return gm_tfail(c, GM_ETEMPLATE, "You can only sort by either \"key\" or \"value\"");
    }
    const gm_tdict *d = v.u.m;
    bool fold = !gm_tv_truthy(slot[0]);
    keyed *k = calloc(d->n ? d->n : 1, sizeof *k), *tmp = calloc(d->n ? d->n : 1, sizeof *tmp);
    int rc = 0;
    if (!k || !tmp) {
        free(k);
        free(tmp);
        return gm_tfail(c, GM_ENOMEM, "out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; !rc && i < d->n; i++) {
        gm_tv pair;
        if ((rc = gm_tv_list(c, LK_TUPLE, 2, &pair)))
            break;
        pair.u.l->a[0] = gm_tv_ref(d->k[i]);
        pair.u.l->a[1] = gm_tv_ref(d->v[i]);
        pair.u.l->n = 2;
        gm_tv key = pos ? d->v[i] : d->k[i];
        k[n].item = pair;
        if (fold && key.k == TV_STR)
            rc = gm_tstr_case(c, key, 'l', &k[n].key);
        else
            k[n].key = gm_tv_ref(key);
        if (rc)
            k[n].key = gm_tv_none();
        n++;
    }
    bool rev = false;
    if (!rc)
        rc = sort_reverse(c, slot[2], &rev);
    if (!rc)
        rc = merge_sort(c, k, tmp, n, rev);
    free(tmp);
    if (!rc && !(rc = gm_tv_list(c, LK_LIST, n, out)))
        for (size_t i = 0; i < n; i++)
            out->u.l->a[out->u.l->n++] = gm_tv_ref(k[i].item);
    keyed_free(k, n);
    return rc;
}

int gm_tf_first(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    gm_tv l;
    int rc = gm_tv_iter(c, v, &l);
    if (rc)
        return rc;
    *out = l.u.l->n ? gm_tv_ref(l.u.l->a[0]) : gm_tv_undef("No first item, sequence was empty.");
    gm_tv_decref(l);
    return 0;
}

int gm_tf_last(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    if (v.k == TV_LIST && (v.u.l->lk == LK_GEN || v.u.l->lk == LK_REVITER))
        return gm_tfail(c, GM_ETEMPLATE, "'%s' object is not reversible", gm_tv_typename(v));
    gm_tv l;
    int rc = gm_tv_iter(c, v, &l);
    if (rc)
        return rc;
    *out = l.u.l->n ? gm_tv_ref(l.u.l->a[l.u.l->n - 1]) : gm_tv_undef("No last item, sequence was empty.");
    gm_tv_decref(l);
    return 0;
}

int gm_tf_items(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    if (v.k == TV_UNDEF)
        return make_gen(c, out);
    if (v.k != TV_DICT)
        return gm_tfail(c, GM_ETEMPLATE, "Can only get item pairs from a mapping.");
    const gm_tdict *d = v.u.m;
    int rc = gm_tv_list(c, LK_GEN, d->n, out);
    if (rc)
        return rc;
    for (size_t i = 0; i < d->n; i++) {
        gm_tv e;
        if ((rc = gm_tv_list(c, LK_TUPLE, 2, &e))) {
            gm_tv_decref(*out);
            return rc;
        }
        e.u.l->a[0] = gm_tv_ref(d->k[i]);
        e.u.l->a[1] = gm_tv_ref(d->v[i]);
        e.u.l->n = 2;
        out->u.l->a[out->u.l->n++] = e;
    }
    return gm_tstep_out(c, d->n / 16, out);
}

/* Items of an iterable mapped through attribute= (borrowed list + owned mapped values). */
static int mapped(gm_tctx *c, gm_tv v, gm_tv attr, bool fold, gm_tv *out)
{
    gm_tv l;
    int rc = gm_tv_iter(c, v, &l);
    if (rc)
        return rc;
    if ((attr.k == TV_NONE || attr.k == TV_UNDEF) && !fold) {
        *out = l;
        return 0;
    }
    getter g;
    if ((rc = getter_init(c, &g, attr, fold, gm_tv_none()))) {
        gm_tv_decref(l);
        return rc;
    }
    if ((rc = gm_tv_list(c, LK_LIST, l.u.l->n, out))) {
        getter_free(&g);
        gm_tv_decref(l);
        return rc;
    }
    for (size_t i = 0; !rc && i < l.u.l->n; i++) {
        gm_tv x;
        if (!(rc = getter_apply(c, &g, l.u.l->a[i], &x)))
            out->u.l->a[out->u.l->n++] = x;
    }
    getter_free(&g);
    gm_tv_decref(l);
    if (rc)
        gm_tv_decref(*out);
    return rc;
}

int gm_tf_join(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"d", "attribute"};
    gm_tv slot[2] = {gm_tv_none(), gm_tv_none()};
    bool set[2];
    BIND("join", names, slot, set);
    gm_tv items, sep;
    int rc = mapped(c, v, slot[1], false, &items);
    if (rc)
        return rc;
    if (set[0])
        rc = gm_tv_tostr(c, slot[0], &sep);
    else
        rc = gm_tv_str(c, "", 0, &sep);
    if (rc) {
        gm_tv_decref(items);
        return rc;
    }
    gm_tbuf b = {0};
    for (size_t i = 0; !rc && i < items.u.l->n; i++) {
        if (i)
            rc = gm_tbuf_put(c, &b, sep.u.s->p, sep.u.s->len);
        if (!rc)
            rc = gm_tv_write(c, &b, items.u.l->a[i], false);
    }
    gm_tv_decref(items);
    gm_tv_decref(sep);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out);
}

int gm_tf_list(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    gm_tv l;
    int rc = gm_tv_iter(c, v, &l);
    if (rc)
        return rc;
    if (l.u.l != v.u.l || v.k != TV_LIST || v.u.l->lk == LK_LIST) {
        if (l.u.l->lk == LK_LIST && l.u.l != (v.k == TV_LIST ? v.u.l : NULL)) {
            *out = l;
            return 0;
        }
    }
    rc = gm_tv_list(c, LK_LIST, l.u.l->n, out);
    if (!rc)
        for (size_t i = 0; i < l.u.l->n; i++)
            out->u.l->a[out->u.l->n++] = gm_tv_ref(l.u.l->a[i]);
    gm_tv_decref(l);
    return rc;
}

static int minmax(gm_tctx *c, gm_tv v, const gm_targs *a, bool want_max, gm_tv *out)
{
    static const char *const names[] = {"case_sensitive", "attribute"};
    gm_tv slot[2] = {gm_tv_bool(false), gm_tv_none()};
    bool set[2];
    BIND(want_max ? "max" : "min", names, slot, set);
    gm_tv items, keys;
    int rc = gm_tv_iter(c, v, &items);
    if (rc)
        return rc;
    if (items.u.l->n == 0) {
        gm_tv_decref(items);
        *out = gm_tv_undef("No aggregated item, sequence was empty.");
        return 0;
    }
    if ((rc = mapped(c, items, slot[1], !gm_tv_truthy(slot[0]), &keys))) {
        gm_tv_decref(items);
        return rc;
    }
    size_t best = 0;
    for (size_t i = 1; !rc && i < items.u.l->n; i++) {
        int cmp;
        if ((rc = gm_tv_cmp(c, keys.u.l->a[i], keys.u.l->a[best], &cmp)))
            break;
        if (want_max ? cmp > 0 : cmp < 0)
            best = i;
    }
    if (!rc)
        *out = gm_tv_ref(items.u.l->a[best]);
    gm_tv_decref(keys);
    gm_tv_decref(items);
    return rc;
}

int gm_tf_max(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out) { return minmax(c, v, a, true, out); }

int gm_tf_min(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out) { return minmax(c, v, a, false, out); }

/* map('filter', args...) or map(attribute='x', default=...) */
int gm_tf_map(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    int rc = make_gen(c, out);
    if (rc)
        return rc;
    if (!gm_tv_truthy(v))
        return 0;
    gm_tv items;
    if ((rc = gm_tv_iter(c, v, &items))) {
        gm_tv_decref(*out);
        return rc;
    }
    gm_tv attr = gm_tv_none(), dflt = gm_tv_none();
    bool by_attr = false;
    if (a->npos == 0) {
        for (size_t i = 0; i < a->nkw; i++) {
            if (gm_tstr_eq(a->kwn[i].u.s, "attribute", 9)) {
                attr = a->kwv[i];
                by_attr = true;
            } else if (gm_tstr_eq(a->kwn[i].u.s, "default", 7)) {
                dflt = a->kwv[i];
            } else {
                rc = gm_tfail(c, GM_ETEMPLATE, "Unexpected keyword argument '%s'", a->kwn[i].u.s->p);
            }
        }
        if (!rc && !by_attr)
            rc = gm_tfail(c, GM_ETEMPLATE, "map requires a filter argument");
    }
    if (!rc && by_attr) {
        getter g;
        if (!(rc = getter_init(c, &g, attr, false, dflt))) {
            for (size_t i = 0; !rc && i < items.u.l->n; i++) {
                gm_tv x;
                if (!(rc = getter_apply(c, &g, items.u.l->a[i], &x)))
                    rc = gm_tlist_push(c, out->u.l, x);
            }
            getter_free(&g);
        }
    } else if (!rc) {
        gm_targs rest = *a;
        rest.pos = a->pos + 1;
        rest.npos = a->npos - 1;
        for (size_t i = 0; !rc && i < items.u.l->n; i++) {
            gm_tv x;
            if (!(rc = gm_tfilter_byname(c, a->pos[0], items.u.l->a[i], &rest, &x)))
                rc = gm_tlist_push(c, out->u.l, x);
        }
    }
    gm_tv_decref(items);
    if (rc)
        gm_tv_decref(*out);
    return rc;
}

static int select_reject(gm_tctx *c, gm_tv v, const gm_targs *a, bool reject, bool by_attr, gm_tv *out)
{
    int rc = make_gen(c, out);
    if (rc)
        return rc;
    if (!gm_tv_truthy(v))
        return 0;
    size_t off = 0;
    getter g;
    memset(&g, 0, sizeof g);
    if (by_attr) {
        if (a->npos < 1) {
            gm_tv_decref(*out);
            return gm_tfail(c, GM_ETEMPLATE, "Missing parameter for attribute name");
        }
        if ((rc = getter_init(c, &g, a->pos[0], false, gm_tv_none()))) {
            gm_tv_decref(*out);
            return rc;
        }
        off = 1;
    }
    gm_tv items;
    if ((rc = gm_tv_iter(c, v, &items))) {
        getter_free(&g);
        gm_tv_decref(*out);
        return rc;
    }
    gm_targs rest = *a;
    rest.pos = a->npos > off ? a->pos + off + 1 : NULL;
    rest.npos = a->npos > off ? a->npos - off - 1 : 0;
    for (size_t i = 0; !rc && i < items.u.l->n; i++) {
        gm_tv x;
        if ((rc = getter_apply(c, &g, items.u.l->a[i], &x)))
            break;
        bool ok;
        if (a->npos > off)
            rc = gm_ttest_byname(c, a->pos[off], x, &rest, &ok);
        else
            ok = gm_tv_truthy(x);
        gm_tv_decref(x);
        if (!rc && ok != reject)
            rc = gm_tlist_push(c, out->u.l, gm_tv_ref(items.u.l->a[i]));
    }
    getter_free(&g);
    gm_tv_decref(items);
    if (rc)
        gm_tv_decref(*out);
    return rc;
}

int gm_tf_select(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out) { return select_reject(c, v, a, false, false, out); }

int gm_tf_reject(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out) { return select_reject(c, v, a, true, false, out); }

int gm_tf_selectattr(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out) { return select_reject(c, v, a, false, true, out); }

int gm_tf_rejectattr(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out) { return select_reject(c, v, a, true, true, out); }

int gm_tf_reverse(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    int rc;
    if (v.k == TV_STR) {
        const gm_tstr *s = v.u.s;
        gm_tstr *r = gm_tstr_new(s->len);
        if (!r)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        size_t o = s->len;
        for (size_t i = 0; i < s->len;) {
            uint32_t cp;
            size_t k = gm_u8_dec(s->p + i, s->len - i, &cp);
            o -= k;
            memcpy(r->p + o, s->p + i, k);
            i += k;
        }
        r->ncp = s->ncp;
        *out = (gm_tv){.k = TV_STR, .f = v.f & TVF_MARKUP};
        out->u.s = r;
        return 0;
    }
    bool gen = v.k == TV_LIST && v.u.l->lk == LK_GEN;
    gm_tv l;
    if ((rc = gm_tv_iter(c, v, &l)))
        return rc;
    /* reversed() of a sequence is an iterator; of a generator, Jinja falls back to a list */
    if ((rc = gm_tv_list(c, gen ? LK_LIST : LK_REVITER, l.u.l->n, out))) {
        gm_tv_decref(l);
        return rc;
    }
    for (size_t i = l.u.l->n; i > 0; i--)
        out->u.l->a[out->u.l->n++] = gm_tv_ref(l.u.l->a[i - 1]);
    gm_tv_decref(l);
    return 0;
}

/* sort(value, reverse=False, case_sensitive=False, attribute=None) */
int gm_tf_sort(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"reverse", "case_sensitive", "attribute"};
    gm_tv slot[3] = {gm_tv_bool(false), gm_tv_bool(false), gm_tv_none()};
    bool set[3];
    BIND("sort", names, slot, set);
    gm_tv items;
    int rc = gm_tv_iter(c, v, &items);
    if (rc)
        return rc;
    bool fold = !gm_tv_truthy(slot[1]);
    size_t n = items.u.l->n;
    /* attribute="a,b": a tuple key of several attributes */
    getter gs[8];
    size_t ng = 0;
    if (slot[2].k == TV_STR && memchr(slot[2].u.s->p, ',', slot[2].u.s->len)) {
        const char *p = slot[2].u.s->p, *e = p + slot[2].u.s->len;
        while (!rc && p <= e && ng < 8) {
            const char *comma = memchr(p, ',', (size_t)(e - p));
            const char *end = comma ? comma : e;
            gm_tv part;
            if (!(rc = gm_tv_str(c, p, (size_t)(end - p), &part))) {
                rc = getter_init(c, &gs[ng], part, fold, gm_tv_none());
                gm_tv_decref(part);
                if (!rc)
                    ng++;
            }
            if (!comma)
                break;
            p = comma + 1;
        }
    } else {
        rc = getter_init(c, &gs[0], slot[2], fold, gm_tv_none());
        if (!rc)
            ng = 1;
    }
    keyed *k = calloc(n ? n : 1, sizeof *k), *tmp = calloc(n ? n : 1, sizeof *tmp);
    if (!k || !tmp) {
        free(k);
        free(tmp);
        for (size_t i = 0; i < ng; i++)
            getter_free(&gs[i]);
        gm_tv_decref(items);
        return gm_tfail(c, GM_ENOMEM, "out of memory");
    }
    size_t done = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        k[i].item = gm_tv_ref(items.u.l->a[i]);
        k[i].key = gm_tv_none();
        done = i + 1;
        if (ng == 1) {
            rc = getter_apply(c, &gs[0], items.u.l->a[i], &k[i].key);
        } else if (!(rc = gm_tv_list(c, LK_TUPLE, ng, &k[i].key))) {
            for (size_t j = 0; !rc && j < ng; j++) {
                gm_tv x;
                if (!(rc = getter_apply(c, &gs[j], items.u.l->a[i], &x)))
                    k[i].key.u.l->a[k[i].key.u.l->n++] = x;
            }
        }
    }
    for (size_t i = 0; i < ng; i++)
        getter_free(&gs[i]);
    gm_tv_decref(items);
    bool rev = false;
    if (!rc)
        rc = sort_reverse(c, slot[0], &rev);
    if (!rc)
        rc = merge_sort(c, k, tmp, n, rev);
    free(tmp);
    if (!rc && !(rc = gm_tv_list(c, LK_LIST, n, out)))
        for (size_t i = 0; i < n; i++)
            out->u.l->a[out->u.l->n++] = gm_tv_ref(k[i].item);
    keyed_free(k, done);
    return rc;
}

int gm_tf_sum(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"attribute", "start"};
    gm_tv slot[2] = {gm_tv_none(), gm_tv_int(0)};
    bool set[2];
    BIND("sum", names, slot, set);
    if (slot[1].k == TV_STR)
        return gm_tfail(c, GM_ETEMPLATE, "sum() can't sum strings [use ''.join(seq) instead]");
    gm_tv items;
    int rc = mapped(c, v, slot[0], false, &items);
    if (rc)
        return rc;
    gm_tv acc = gm_tv_ref(slot[1]);
    for (size_t i = 0; !rc && i < items.u.l->n; i++) {
        gm_tv nx;
        if ((rc = gm_tbinop(c, OP_ADD, acc, items.u.l->a[i], &nx)))
            break;
        gm_tv_decref(acc);
        acc = nx;
    }
    gm_tv_decref(items);
    if (rc) {
        gm_tv_decref(acc);
        return rc;
    }
    *out = acc;
    return 0;
}

int gm_tf_unique(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"case_sensitive", "attribute"};
    gm_tv slot[2] = {gm_tv_bool(false), gm_tv_none()};
    bool set[2];
    BIND("unique", names, slot, set);
    gm_tv items, keys, seen;
    int rc = gm_tv_iter(c, v, &items);
    if (rc)
        return rc;
    if ((rc = mapped(c, items, slot[1], !gm_tv_truthy(slot[0]), &keys))) {
        gm_tv_decref(items);
        return rc;
    }
    if ((rc = gm_tv_dict(c, &seen)) || (rc = make_gen(c, out))) {
        if (seen.k == TV_DICT && rc)
            gm_tv_decref(seen);
        gm_tv_decref(keys);
        gm_tv_decref(items);
        return rc;
    }
    for (size_t i = 0; !rc && i < items.u.l->n; i++) {
        gm_tv k = keys.u.l->a[i];
        if (!gm_tv_hashable(k)) {
            rc = gm_tfail(c, GM_ETEMPLATE, "unhashable type: '%s'", gm_tv_typename(k));
            break;
        }
        if (gm_tdict_get(seen.u.m, k))
            continue;
        if (!(rc = gm_tdict_set(c, seen.u.m, gm_tv_ref(k), gm_tv_none())))
            rc = gm_tlist_push(c, out->u.l, gm_tv_ref(items.u.l->a[i]));
    }
    gm_tv_decref(seen);
    gm_tv_decref(keys);
    gm_tv_decref(items);
    if (rc)
        gm_tv_decref(*out);
    return rc;
}

int gm_tf_length(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    int64_t n;
    int rc = gm_tv_len(c, v, &n);
    if (!rc)
        *out = gm_tv_int(n);
    return rc;
}
