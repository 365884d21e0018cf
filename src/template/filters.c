/* template/filters: Jinja2 3.1's built-in filters: the table of all of them, and those on text
 * and numbers (filters_seq.c has those on sequences), with transformers' tojson
 * (json.dumps(ensure_ascii=False, indent, separators, sort_keys)).
 *
 * Each filter follows its Python definition, including the quirks templates can see: filters
 * that take text turn other values into str() first (none|upper is "NONE"), int and float of an
 * undefined value raise, a filter without parameters refuses arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/filters_int.h"


/* ------------------------------------------------------------------ helpers */


/* soft_str: a string stays as it is (Markup included), anything else becomes str(value). */
static int soft_str(gm_tctx *c, gm_tv v, gm_tv *out)
{
    if (v.k == TV_STR) {
        *out = gm_tv_ref(v);
        return 0;
    }
    return gm_tv_tostr(c, v, out);
}

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


/* ------------------------------------------------------------------ filters */

static int f_abs(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    if (v.k == TV_INT || v.k == TV_BOOL) {
        int64_t i = v.k == TV_BOOL ? v.u.b : v.u.i;
        if (i == INT64_MIN)
            return gm_tfail(c, GM_EUNSUPPORTED, "integer overflow in abs()");
        *out = gm_tv_int(i < 0 ? -i : i);
        return 0;
    }
    if (v.k == TV_FLOAT) {
        *out = gm_tv_float(fabs(v.u.d));
        return 0;
    }
    if (v.k == TV_UNDEF)
        return gm_tundef_error(c, v);
    return gm_tfail(c, GM_ETEMPLATE, "bad operand type for abs(): '%s'", gm_tv_typename(v));
}

static int f_attr(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"name"};
    gm_tv slot[1] = {gm_tv_none()};
    bool set[1];
    BIND("attr", names, slot, set);
    if (slot[0].k != TV_STR)
        return gm_tfail(c, GM_ETEMPLATE, "attribute name must be a string");
    if (v.k == TV_DICT) {
        /* attribute only: a key is not an attribute */
        int mid = gm_tmethod_id(slot[0].u.s->p, slot[0].u.s->len);
        if (gm_tmethod_has(v, mid) == 0) {
            *out = gm_tv_undef(NULL);
            return 0;
        }
    }
    return gm_tgetattr(c, v, slot[0], gm_tmethod_id(slot[0].u.s->p, slot[0].u.s->len), out);
}

static int f_capitalize(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    gm_tv s;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    rc = gm_tstr_case(c, s, 'c', out);
    gm_tv_decref(s);
    return rc;
}

static int f_upper(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    gm_tv s;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    rc = gm_tstr_case(c, s, 'u', out);
    gm_tv_decref(s);
    return rc;
}

static int f_lower(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    gm_tv s;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    rc = gm_tstr_case(c, s, 'l', out);
    gm_tv_decref(s);
    return rc;
}

static bool title_sep(uint32_t cp)
{
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || gm_u_isspace(cp);
}

/* Jinja's title: the first character of each run after "-", white space, "(", "{", "[" or
 * "<" upper-cased, the rest of the run lower-cased (not str.title). */
static int f_title(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    gm_tv s;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    gm_tbuf b = {0};
    bool start = true, in_sep = false;
    const gm_tstr *str = s.u.s;
    size_t rest = 0, rest_end = 0; /* item[1:] of the current run, which is lower()ed alone */
    for (size_t i = 0; !rc && i < str->len;) {
        uint32_t cp, m[3];
        size_t k = gm_u8_dec(str->p + i, str->len - i, &cp), nm;
        bool sep = title_sep(cp);
        if (sep != in_sep)
            start = true;
        in_sep = sep;
        if (start) {
            nm = gm_u_upper(cp, m);
            rest = rest_end = i + k;
            while (rest_end < str->len) {
                uint32_t x;
                size_t xl = gm_u8_dec(str->p + rest_end, str->len - rest_end, &x);
                if (title_sep(x) != sep)
                    break;
                rest_end += xl;
            }
        } else {
            nm = gm_u_lower(cp, m);
            if (cp == 0x03A3 && gm_tfinal_sigma(str->p + rest, rest_end - rest, i - rest, k))
                m[0] = 0x03C2;
        }
        start = false;
        char tmp[12];
        size_t tn = 0;
        for (size_t j = 0; j < nm; j++)
            tn += gm_u8_enc(m[j], tmp + tn);
        rc = gm_tbuf_put(c, &b, tmp, tn);
        i += k;
    }
    uint8_t f = s.f & TVF_MARKUP;
    gm_tv_decref(s);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    if ((rc = gm_tv_str_buf(c, &b, out)))
        return rc;
    out->f = f;
    return 0;
}

static int f_center(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"width"};
    gm_tv slot[1] = {gm_tv_int(80)};
    bool set[1];
    BIND("center", names, slot, set);
    int64_t w;
    int rc = want_int(c, slot[0], "width", &w);
    if (rc)
        return rc;
    gm_tv s;
    if ((rc = soft_str(c, v, &s)))
        return rc;
    rc = gm_tstr_pad(c, s.u.s, w, ' ', 'c', out);
    gm_tv_decref(s);
    return rc;
}

static int f_default(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"default_value", "boolean"};
    gm_tv slot[2] = {gm_tv_none(), gm_tv_bool(false)};
    bool set[2];
    BIND("default", names, slot, set);
    bool use = v.k == TV_UNDEF || (gm_tv_truthy(slot[1]) && !gm_tv_truthy(v));
    if (!use) {
        *out = gm_tv_ref(v);
        return 0;
    }
    if (!set[0])
        return gm_tv_str(c, "", 0, out);
    *out = gm_tv_ref(slot[0]);
    return 0;
}

static int f_escape(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    return gm_tv_escape(c, v, out);
}

static int f_forceescape(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    gm_tv s;
    int rc = gm_tv_tostr(c, v, &s);
    if (rc)
        return rc;
    rc = gm_tv_escape(c, s, out);
    gm_tv_decref(s);
    return rc;
}

/* Python's float(str): optional white space, sign, digits with underscores, inf, nan. */
static bool parse_float(const gm_tstr *s, double *out)
{
    const char *p = s->p, *e = s->p + s->len;
    while (p < e && (*p == ' ' || (*p >= '\t' && *p <= '\r')))
        p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= '\t' && e[-1] <= '\r')))
        e--;
    if (p == e || e - p > 300)
        return false;
    char buf[320];
    size_t n = 0;
    for (const char *q = p; q < e; q++) {
        if (*q == '_') {
            if (q == p || q + 1 == e || !(q[-1] >= '0' && q[-1] <= '9') || !(q[1] >= '0' && q[1] <= '9'))
                return false;
            continue;
        }
        buf[n++] = *q;
    }
    buf[n] = 0;
    const char *b = buf[0] == '+' || buf[0] == '-' ? buf + 1 : buf;
    if (!strcasecmp(b, "inf") || !strcasecmp(b, "infinity") || !strcasecmp(b, "nan")) {
        double x = (b[0] == 'n' || b[0] == 'N') ? NAN : INFINITY;
        *out = buf[0] == '-' ? -x : x;
        return true;
    }
    for (const char *q = b; *q; q++)
        if (!strchr("0123456789.eE+-", *q))
            return false;
    char *end;
    *out = strtod(buf, &end);
    return *end == 0 && end != buf;
}

/* Python's int(str, base) for base 10 (and 2..36, 0 with a prefix). */
static int parse_int(const gm_tstr *s, int64_t base, int64_t *out)
{
    const char *p = s->p, *e = s->p + s->len;
    while (p < e && (*p == ' ' || (*p >= '\t' && *p <= '\r')))
        p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= '\t' && e[-1] <= '\r')))
        e--;
    bool neg = false;
    if (p < e && (*p == '+' || *p == '-'))
        neg = *p++ == '-';
    if (e - p >= 2 && p[0] == '0' && (base == 0 || base == 16 || base == 8 || base == 2)) {
        char x = (char)(p[1] | 0x20);
        if ((x == 'x' && (base == 0 || base == 16)) || (x == 'o' && (base == 0 || base == 8)) ||
            (x == 'b' && (base == 0 || base == 2))) {
            base = x == 'x' ? 16 : x == 'o' ? 8 : 2;
            p += 2;
            if (p < e && *p == '_')
                p++;
        }
    }
    if (base == 0)
        base = 10;
    if (base < 2 || base > 36 || p == e)
        return -1;
    uint64_t v = 0;
    bool prev_digit = false;
    for (; p < e; p++) {
        if (*p == '_') {
            if (!prev_digit || p + 1 == e)
                return -1;
            prev_digit = false;
            continue;
        }
        int d;
        char ch = *p;
        if (ch >= '0' && ch <= '9')
            d = ch - '0';
        else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')
            d = (ch | 0x20) - 'a' + 10;
        else
            return -1;
        if (d >= base)
            return -1;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return -2;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_digit = true;
    }
    if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
        return -2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int f_int(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"default", "base"};
    gm_tv slot[2] = {gm_tv_int(0), gm_tv_int(10)};
    bool set[2];
    BIND("int", names, slot, set);
    int64_t base = -1; /* -1: int(value, base) raises TypeError, so only float() is tried */
    if (slot[1].k == TV_INT || slot[1].k == TV_BOOL)
        base = slot[1].k == TV_BOOL ? slot[1].u.b : slot[1].u.i;
    switch (v.k) {
    case TV_UNDEF: return gm_tundef_error(c, v); /* int(Undefined) raises */
    case TV_INT: *out = v; return 0;
    case TV_BOOL: *out = gm_tv_int(v.u.b); return 0;
    case TV_FLOAT:
        if (isnan(v.u.d))
            break;
        if (isinf(v.u.d))
            return gm_tfail(c, GM_ETEMPLATE, "cannot convert float infinity to integer");
        if (fabs(v.u.d) >= 9.2e18)
            return gm_tfail(c, GM_EUNSUPPORTED, "integer overflow: %g needs more than 64 bits", v.u.d);
        *out = gm_tv_int((int64_t)v.u.d);
        return 0;
    case TV_STR: {
        int64_t iv;
        int pr = base >= 0 ? parse_int(v.u.s, base, &iv) : -1;
        if (pr == -2)
            return gm_tfail(c, GM_EUNSUPPORTED, "integer overflow: the number needs more than 64 bits");
        if (pr == 0) {
            *out = gm_tv_int(iv);
            return 0;
        }
        double d; /* "42.23"|int is 42: Jinja retries through float() */
        if (parse_float(v.u.s, &d) && !isnan(d)) {
            if (isinf(d))
                return gm_tfail(c, GM_ETEMPLATE, "cannot convert float infinity to integer");
            if (fabs(d) >= 9.2e18)
                return gm_tfail(c, GM_EUNSUPPORTED, "integer overflow: %g needs more than 64 bits", d);
            *out = gm_tv_int((int64_t)d);
            return 0;
        }
        break;
    }
    default: break;
    }
    *out = gm_tv_ref(slot[0]);
    return 0;
}

static int f_float(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"default"};
    gm_tv slot[1] = {gm_tv_float(0.0)};
    bool set[1];
    BIND("float", names, slot, set);
    double d;
    switch (v.k) {
    case TV_UNDEF: return gm_tundef_error(c, v); /* float(Undefined) raises */
    case TV_FLOAT: *out = v; return 0;
    case TV_INT: *out = gm_tv_float((double)v.u.i); return 0;
    case TV_BOOL: *out = gm_tv_float(v.u.b); return 0;
    case TV_STR:
        if (parse_float(v.u.s, &d)) {
            *out = gm_tv_float(d);
            return 0;
        }
        break;
    default: break;
    }
    *out = gm_tv_ref(slot[0]);
    return 0;
}

static int f_format(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    if (a->npos && a->nkw)
        return gm_tfail(c, GM_ETEMPLATE, "can't handle positional and keyword arguments at the same time");
    gm_tv s, args;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    if (a->nkw) {
        if ((rc = gm_tv_dict(c, &args)))
            goto done;
        for (size_t i = 0; !rc && i < a->nkw; i++)
            rc = gm_tdict_set(c, args.u.m, gm_tv_ref(a->kwn[i]), gm_tv_ref(a->kwv[i]));
    } else {
        if ((rc = gm_tv_list(c, LK_TUPLE, a->npos, &args)))
            goto done;
        for (size_t i = 0; i < a->npos; i++)
            args.u.l->a[args.u.l->n++] = gm_tv_ref(a->pos[i]);
    }
    if (!rc)
        rc = gm_tpercent(c, s, args, out);
    gm_tv_decref(args);
done:
    gm_tv_decref(s);
    return rc;
}

static int f_indent(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"width", "first", "blank"};
    gm_tv slot[3] = {gm_tv_int(4), gm_tv_bool(false), gm_tv_bool(false)};
    bool set[3];
    BIND("indent", names, slot, set);
    if (v.k != TV_STR) {
        if (v.k == TV_UNDEF)
            return gm_tundef_error(c, v);
        return gm_tfail(c, GM_ETEMPLATE, "unsupported operand type(s) for +=: '%s' and 'str'", gm_tv_typename(v));
    }
    gm_tbuf ind = {0}, b = {0};
    int rc = 0;
    if (slot[0].k == TV_STR) {
        rc = gm_tbuf_put(c, &ind, slot[0].u.s->p, slot[0].u.s->len);
    } else {
        int64_t w;
        if ((rc = want_int(c, slot[0], "width", &w)))
            return rc;
        if (w > (int64_t)c->lim.max_output_bytes)
            return gm_tfail(c, GM_ERANGE, "indent too wide");
        for (int64_t i = 0; !rc && i < w; i++)
            rc = gm_tbuf_putc(c, &ind, ' ');
    }
    /* s += "\n"; then lines = s.splitlines() */
    gm_tv s2, lines;
    gm_tbuf tmp = {0};
    if (!rc)
        rc = gm_tbuf_put(c, &tmp, v.u.s->p, v.u.s->len);
    if (!rc)
        rc = gm_tbuf_putc(c, &tmp, '\n');
    if (rc) {
        gm_tbuf_free(&ind);
        gm_tbuf_free(&tmp);
        return rc;
    }
    if ((rc = gm_tv_str_buf(c, &tmp, &s2))) {
        gm_tbuf_free(&ind);
        return rc;
    }
    rc = gm_tstr_splitlines(c, s2.u.s, false, &lines);
    gm_tv_decref(s2);
    if (rc) {
        gm_tbuf_free(&ind);
        return rc;
    }
    const char *ip = ind.p ? ind.p : "";
    size_t in = ind.n;
    bool blank = gm_tv_truthy(slot[2]);
    if (gm_tv_truthy(slot[1]))
        rc = gm_tbuf_put(c, &b, ip, in);
    const gm_tlist *l = lines.u.l;
    for (size_t i = 0; !rc && i < l->n; i++) {
        const gm_tstr *line = l->a[i].u.s;
        if (i) {
            rc = gm_tbuf_putc(c, &b, '\n');
            if (!rc && (blank || line->len))
                rc = gm_tbuf_put(c, &b, ip, in);
        }
        if (!rc)
            rc = gm_tbuf_put(c, &b, line->p, line->len);
    }
    gm_tv_decref(lines);
    gm_tbuf_free(&ind);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    if ((rc = gm_tv_str_buf(c, &b, out)))
        return rc;
    out->f = v.f & TVF_MARKUP;
    return 0;
}



static int f_replace(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"old", "new", "count"};
    gm_tv slot[3] = {gm_tv_none(), gm_tv_none(), gm_tv_none()};
    bool set[3];
    BIND("replace", names, slot, set);
    if (!set[0] || !set[1])
        return gm_tfail(c, GM_ETEMPLATE, "replace() missing required arguments");
    int64_t count = -1;
    int rc = 0;
    if (slot[2].k != TV_NONE && (rc = want_int(c, slot[2], "count", &count)))
        return rc;
    gm_tv s, o, n;
    if ((rc = gm_tv_tostr(c, v, &s)))
        return rc;
    if ((rc = gm_tv_tostr(c, slot[0], &o))) {
        gm_tv_decref(s);
        return rc;
    }
    if (!(rc = gm_tv_tostr(c, slot[1], &n))) {
        rc = gm_tstr_replace(c, s, o, n, count, out);
        gm_tv_decref(n);
    }
    gm_tv_decref(o);
    gm_tv_decref(s);
    return rc;
}

/* Python's round(x, n): to nearest, ties to even, on the exact binary value (glibc's printf
 * rounds exactly that way, so the digits come from it). */
static double py_round(double x, int64_t nd)
{
    if (!isfinite(x) || x == 0 || nd > 330)
        return x;
    char buf[400];
    if (nd >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    if (nd < -330)
        return copysign(0.0, x);
    snprintf(buf, sizeof buf, "%.17e", x);
    int e10 = atoi(strchr(buf, 'e') + 1);
    int64_t keep = e10 + 1 + nd; /* significant digits left of 10^-nd */
    if (keep > 0) {
        snprintf(buf, sizeof buf, "%.*e", (int)(keep - 1), x);
        return strtod(buf, NULL);
    }
    /* |x| < 10^-nd: 0, or 10^-nd when x is nearer to it (ties go to the even 0) */
    double unit = pow(10.0, (double)-nd);
    return fabs(x) > unit / 2 ? copysign(unit, x) : copysign(0.0, x);
}

static int f_round(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"precision", "method"};
    gm_tv slot[2] = {gm_tv_int(0), gm_tv_none()};
    bool set[2];
    BIND("round", names, slot, set);
    int64_t prec;
    int rc = want_int(c, slot[0], "precision", &prec);
    if (rc)
        return rc;
    int method = 'c';
    if (set[1]) {
        if (slot[1].k == TV_STR && gm_tstr_eq(slot[1].u.s, "ceil", 4))
            method = 'C';
        else if (slot[1].k == TV_STR && gm_tstr_eq(slot[1].u.s, "floor", 5))
            method = 'F';
        else if (!(slot[1].k == TV_STR && gm_tstr_eq(slot[1].u.s, "common", 6)))
            return gm_tfail(c, GM_ETEMPLATE, "method must be common, ceil or floor");
    }
    if (v.k != TV_INT && v.k != TV_BOOL && v.k != TV_FLOAT) {
        if (v.k == TV_UNDEF)
            return gm_tundef_error(c, v);
        return gm_tfail(c, GM_ETEMPLATE, "type %s doesn't define __round__ method", gm_tv_typename(v));
    }
    if (method == 'c') {
        if (v.k != TV_FLOAT) {
            /* round(int, n) stays an int */
            int64_t i = v.k == TV_BOOL ? v.u.b : v.u.i;
            if (prec < -18) {
                *out = gm_tv_int(0); /* |i| < 10^19 rounds to 0 */
            } else if (prec < 0) {
                /* exactly, to the nearest multiple of 10^-prec, ties to even */
                int64_t p = 1;
                for (int64_t k = 0; k < -prec; k++)
                    p *= 10;
                int64_t q = i / p, r = i % p;
                if (r < 0) {
                    q -= 1;
                    r += p;
                }
                if (r > p - r || (r == p - r && (q & 1)))
                    q += 1;
                int64_t res;
                if (__builtin_mul_overflow(q, p, &res))
                    return gm_toverflow(c);
                *out = gm_tv_int(res);
            } else {
                *out = gm_tv_int(i);
            }
            return 0;
        }
        *out = gm_tv_float(py_round(v.u.d, prec));
        return 0;
    }
    double x = v.k == TV_FLOAT ? v.u.d : (double)(v.k == TV_BOOL ? v.u.b : v.u.i);
    double p = pow(10.0, (double)prec);
    if (!isfinite(x * p))
        return gm_tfail(c, GM_ETEMPLATE, "cannot convert float infinity to integer");
    /* math.ceil/floor return ints, so -0.0 becomes 0 before the division */
    *out = gm_tv_float((method == 'C' ? ceil(x * p) : floor(x * p)) / p + 0.0);
    return 0;
}

static int f_safe(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    int rc = soft_str(c, v, out);
    if (!rc)
        out->f |= TVF_MARKUP;
    return rc;
}

static int f_string(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    return soft_str(c, v, out);
}

static int f_striptags(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    gm_tv s;
    int rc = gm_tv_tostr(c, v, &s);
    if (rc)
        return rc;
    const char *p = s.u.s->p, *e = p + s.u.s->len;
    gm_tbuf t = {0};
    while (!rc && p < e) {
        if (*p == '<') {
            const char *close = NULL;
            if (e - p >= 4 && !memcmp(p, "<!--", 4)) {
                const char *q = memmem(p + 4, (size_t)(e - p - 4), "-->", 3);
                if (q)
                    close = q + 3;
            }
            if (!close) {
                const char *q = memchr(p + 1, '>', (size_t)(e - p - 1));
                if (q)
                    close = q + 1;
            }
            if (close) {
                p = close;
                continue;
            }
        }
        rc = gm_tbuf_putc(c, &t, *p++);
    }
    gm_tv_decref(s);
    /* " ".join(value.split()), then the common entities unescaped */
    gm_tbuf b = {0};
    const char *q = t.p ? t.p : "", *qe = q + t.n;
    bool pending = false;
    while (!rc && q < qe) {
        uint32_t cp;
        size_t k = gm_u8_dec(q, (size_t)(qe - q), &cp);
        if (gm_u_isspace(cp)) {
            pending = b.n > 0;
            q += k;
            continue;
        }
        if (pending && (rc = gm_tbuf_putc(c, &b, ' ')))
            break;
        pending = false;
        static const struct { const char *ent, *val; } ents[] = {
            {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"},
            {"&#34;", "\""}, {"&apos;", "'"}, {"&nbsp;", "\xc2\xa0"},
        };
        size_t j;
        for (j = 0; j < sizeof ents / sizeof ents[0]; j++) {
            size_t el = strlen(ents[j].ent);
            if ((size_t)(qe - q) >= el && !memcmp(q, ents[j].ent, el)) {
                rc = gm_tbuf_put(c, &b, ents[j].val, strlen(ents[j].val));
                q += el;
                break;
            }
        }
        if (j == sizeof ents / sizeof ents[0]) {
            rc = gm_tbuf_put(c, &b, q, k);
            q += k;
        }
    }
    gm_tbuf_free(&t);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out); /* Markup.striptags() returns a plain str */
}

static int f_tojson(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    gm_tv slot[4] = {gm_tv_bool(false), gm_tv_none(), gm_tv_none(), gm_tv_bool(false)};
    bool set[4];
    BIND("tojson", names, slot, set);
    gm_tjson_opts o = {.ensure_ascii = gm_tv_truthy(slot[0]), .sort_keys = gm_tv_truthy(slot[3]),
                       .item_sep = ", ", .item_sep_n = 2, .key_sep = ": ", .key_sep_n = 2};
    gm_tbuf ind = {0};
    int rc = 0;
    if (slot[1].k != TV_NONE) {
        o.indent_set = true;
        o.item_sep = ",";
        o.item_sep_n = 1;
        if (slot[1].k == TV_STR) {
            o.indent = slot[1].u.s->p;
            o.indent_n = slot[1].u.s->len;
        } else {
            int64_t w;
            if ((rc = want_int(c, slot[1], "indent", &w)))
                return rc;
            if (w > 10000)
                return gm_tfail(c, GM_ERANGE, "indent too wide");
            for (int64_t i = 0; !rc && i < w; i++)
                rc = gm_tbuf_putc(c, &ind, ' ');
            o.indent = ind.p ? ind.p : "";
            o.indent_n = ind.n;
        }
    }
    if (!rc && slot[2].k != TV_NONE) {
        gm_tv sep = slot[2];
        if (sep.k != TV_LIST || sep.u.l->n != 2 || sep.u.l->a[0].k != TV_STR || sep.u.l->a[1].k != TV_STR) {
            gm_tbuf_free(&ind);
            return gm_tfail(c, GM_ETEMPLATE, "separators must be a pair of strings");
        }
        o.item_sep = sep.u.l->a[0].u.s->p;
        o.item_sep_n = sep.u.l->a[0].u.s->len;
        o.key_sep = sep.u.l->a[1].u.s->p;
        o.key_sep_n = sep.u.l->a[1].u.s->len;
    }
    gm_tbuf b = {0};
    if (!rc)
        rc = gm_tv_json(c, &b, v, &o, 0);
    gm_tbuf_free(&ind);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out);
}

static int f_trim(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"chars"};
    gm_tv slot[1] = {gm_tv_none()};
    bool set[1];
    BIND("trim", names, slot, set);
    gm_tv s;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    rc = gm_tstr_strip(c, s, slot[0], 3, out);
    gm_tv_decref(s);
    return rc;
}

static int f_truncate(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    static const char *const names[] = {"length", "killwords", "end", "leeway"};
    gm_tv slot[4] = {gm_tv_int(255), gm_tv_bool(false), gm_tv_none(), gm_tv_int(5)};
    bool set[4];
    BIND("truncate", names, slot, set);
    int64_t length, leeway;
    int rc;
    if ((rc = want_int(c, slot[0], "length", &length)) || (rc = want_int(c, slot[3], "leeway", &leeway)))
        return rc;
    const char *endp = "...";
    size_t endn = 3, endcp = 3;
    if (set[2]) {
        if (slot[2].k != TV_STR)
            return gm_tfail(c, GM_ETEMPLATE, "end must be a string");
        endp = slot[2].u.s->p;
        endn = slot[2].u.s->len;
        endcp = slot[2].u.s->ncp;
    }
    if (length < (int64_t)endcp)
        return gm_tfail(c, GM_ETEMPLATE, "expected length >= %zu, got %lld", endcp, (long long)length);
    if (leeway < 0)
        return gm_tfail(c, GM_ETEMPLATE, "expected leeway >= 0, got %lld", (long long)leeway);
    int64_t len;
    if ((rc = gm_tv_len(c, v, &len)))
        return rc;
    if (len <= length + leeway) {
        /* short enough: returned as it is, whatever it is */
        *out = gm_tv_ref(v);
        return 0;
    }
    if (v.k != TV_STR)
        return gm_tfail(c, GM_ETEMPLATE, "can only concatenate %s (not \"str\") to %s", gm_tv_typename(v),
                        gm_tv_typename(v));
    const gm_tstr *s = v.u.s;
    size_t cut = gm_u8_offset(s->p, s->len, (size_t)(length - (int64_t)endcp));
    if (!gm_tv_truthy(slot[1])) {
        /* result.rsplit(" ", 1)[0] */
        for (size_t i = cut; i > 0; i--)
            if (s->p[i - 1] == ' ') {
                cut = i - 1;
                break;
            }
    }
    gm_tbuf b = {0};
    if (!(rc = gm_tbuf_put(c, &b, s->p, cut)))
        rc = gm_tbuf_put(c, &b, endp, endn);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out);
}

static int f_wordcount(gm_tctx *c, gm_tv v, const gm_targs *a, gm_tv *out)
{
    (void)a;
    gm_tv s;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    int64_t n = 0;
    bool in = false;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp;
        i += gm_u8_dec(s.u.s->p + i, s.u.s->len - i, &cp);
        bool w = gm_u_isword(cp);
        if (w && !in)
            n++;
        in = w;
    }
    gm_tv_decref(s);
    *out = gm_tv_int(n);
    return 0;
}

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", gm_tf_batch}, {"capitalize", f_capitalize},
    {"center", f_center}, {"count", gm_tf_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", gm_tf_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"filesizeformat", NULL},
    {"first", gm_tf_first}, {"float", f_float}, {"forceescape", f_forceescape}, {"format", f_format},
    {"groupby", NULL}, {"indent", f_indent}, {"int", f_int}, {"items", gm_tf_items}, {"join", gm_tf_join},
    {"last", gm_tf_last}, {"length", gm_tf_length}, {"list", gm_tf_list}, {"lower", f_lower}, {"map", gm_tf_map},
    {"max", gm_tf_max}, {"min", gm_tf_min}, {"pprint", NULL}, {"random", NULL}, {"reject", gm_tf_reject},
    {"rejectattr", gm_tf_rejectattr}, {"replace", f_replace}, {"reverse", gm_tf_reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", gm_tf_select}, {"selectattr", gm_tf_selectattr},
    {"slice", gm_tf_slice}, {"sort", gm_tf_sort}, {"string", f_string}, {"striptags", f_striptags},
    {"sum", gm_tf_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim},
    {"truncate", f_truncate}, {"unique", gm_tf_unique}, {"upper", f_upper}, {"urlencode", NULL},
    {"urlize", NULL}, {"wordcount", f_wordcount}, {"wordwrap", NULL}, {"xmlattr", NULL},
};

#define NFILTERS (sizeof filters / sizeof filters[0])

int gm_tfilter_id(const char *name, size_t n)
{
    for (size_t i = 0; i < NFILTERS; i++)
        if (strlen(filters[i].name) == n && memcmp(filters[i].name, name, n) == 0)
            return filters[i].fn ? (int)i : -2;
    return -1;
}

int gm_tfilter_call(gm_tctx *c, int id, gm_tv v, const gm_targs *a, gm_tv *out)
{
    if (id < 0 || (size_t)id >= NFILTERS || !filters[id].fn)
        return gm_tfail(c, GM_EUNSUPPORTED, "unsupported filter");
    static const filter_fn none[] = {f_abs, f_capitalize, f_escape, f_forceescape, gm_tf_first, gm_tf_last,
                                     gm_tf_length, gm_tf_list, f_lower, f_upper, gm_tf_items, gm_tf_reverse, f_safe,
                                     f_string, f_striptags, f_title, f_wordcount};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (filters[id].fn == none[i] && (a->npos || a->nkw))
            return gm_tfail(c, GM_ETEMPLATE, "filter '%s' takes no arguments", filters[id].name);
    return filters[id].fn(c, v, a, out);
}

int gm_tfilter_byname(gm_tctx *c, gm_tv name, gm_tv v, const gm_targs *a, gm_tv *out)
{
    if (name.k != TV_STR)
        return gm_tfail(c, GM_ETEMPLATE, "a filter name must be a string");
    int id = gm_tfilter_id(name.u.s->p, name.u.s->len);
    if (id == -1)
        return gm_tfail(c, GM_ETEMPLATE, "No filter named '%s'.", name.u.s->p);
    if (id == -2)
        return gm_tfail(c, GM_EUNSUPPORTED, "the filter '%s' is not supported", name.u.s->p);
    int rc = gm_tstep(c, 1);
    return rc ? rc : gm_tfilter_call(c, id, v, a, out);
}

