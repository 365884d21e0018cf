/* template/format: Python's printf-style "fmt % args", str.format with its format-spec
 * mini-language, and datetime.strftime for strftime_now.
 *
 * Integers are written from their digits here (sign, base prefix, zero padding, grouping) so
 * that "%#o" gives "0o17" as Python does, not C's "017"; floats go through the C library's
 * %e/%f/%g, which round the exact binary value the way Python does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/tmpl_int.h"

/* ------------------------------------------------------------------ printf-style % */

static int pad_out(gm_tctx *c, gm_tbuf *b, const char *p, size_t n, size_t ncp, int64_t width, bool left, char fill)
{
    int rc = 0;
    int64_t padn = width > (int64_t)ncp ? width - (int64_t)ncp : 0;
    if (padn > (int64_t)c->lim.max_output_bytes)
        return gm_tfail(c, GM_ERANGE, "text longer than %llu bytes", (unsigned long long)c->lim.max_output_bytes);
    if (!left)
        for (int64_t i = 0; !rc && i < padn; i++)
            rc = gm_tbuf_putc(c, b, fill);
    if (!rc)
        rc = gm_tbuf_put(c, b, p, n);
    if (left)
        for (int64_t i = 0; !rc && i < padn; i++)
            rc = gm_tbuf_putc(c, b, ' ');
    return rc;
}

/* An integer with sign, base prefix and zero padding, as %d/%x/%o and format() write it. */
static int fmt_int(gm_tctx *c, gm_tbuf *b, int64_t v, char conv, const char *signflag, bool alt, bool zero,
                   bool left, int64_t width, int64_t prec, char group)
{
    char digits[96];
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    switch (conv) {
    case 'x': snprintf(digits, sizeof digits, "%llx", (unsigned long long)u); break;
    case 'X': snprintf(digits, sizeof digits, "%llX", (unsigned long long)u); break;
    case 'o': snprintf(digits, sizeof digits, "%llo", (unsigned long long)u); break;
    case 'b': {
        char tmp[70];
        int n = 0;
        do {
            tmp[n++] = (char)('0' + (u & 1));
            u >>= 1;
        } while (u);
        for (int i = 0; i < n; i++)
            digits[i] = tmp[n - 1 - i];
        digits[n] = 0;
        break;
    }
    default: snprintf(digits, sizeof digits, "%llu", (unsigned long long)u); break;
    }
    if (group) {
        char g[128];
        size_t n = strlen(digits), k = 0, every = (conv == 'd' || conv == 0) ? 3 : 4;
        for (size_t i = 0; i < n; i++) {
            if (i && (n - i) % every == 0)
                g[k++] = group;
            g[k++] = digits[i];
        }
        g[k] = 0;
        memcpy(digits, g, k + 1);
    }
    char head[8] = {0};
    size_t hn = 0;
    if (v < 0)
        head[hn++] = '-';
    else if (signflag && *signflag)
        head[hn++] = *signflag;
    if (alt && (conv == 'x' || conv == 'X' || conv == 'o' || conv == 'b')) {
        head[hn++] = '0';
        head[hn++] = conv == 'X' ? 'X' : conv;
    }
    size_t dn = strlen(digits);
    int64_t zeros = 0;
    if (prec > (int64_t)dn)
        zeros = prec - (int64_t)dn;
    if (zero && !left && width > (int64_t)(hn + dn + (size_t)zeros))
        zeros = width - (int64_t)(hn + dn);
    if (zeros > (int64_t)c->lim.max_output_bytes)
        return gm_tfail(c, GM_ERANGE, "text longer than %llu bytes", (unsigned long long)c->lim.max_output_bytes);
    gm_tbuf t = {0};
    int rc = gm_tbuf_put(c, &t, head, hn);
    for (int64_t i = 0; !rc && i < zeros; i++)
        rc = gm_tbuf_putc(c, &t, '0');
    if (!rc)
        rc = gm_tbuf_put(c, &t, digits, dn);
    if (!rc)
        rc = pad_out(c, b, t.p, t.n, t.n, width, left, ' ');
    gm_tbuf_free(&t);
    return rc;
}

static int fmt_float(gm_tctx *c, gm_tbuf *b, double d, char conv, const char *signflag, bool alt, bool zero,
                     bool left, int64_t width, int64_t prec)
{
    if (prec < 0)
        prec = 6;
    /* width and precision are at most 10^6 (parse_spec and gm_tpercent check) */
    if ((uint64_t)prec + (uint64_t)(width > 0 ? width : 0) > c->lim.max_output_bytes)
        return gm_tfail(c, GM_ERANGE, "text longer than %llu bytes", (unsigned long long)c->lim.max_output_bytes);
    char fmt[32];
    /* "%[+ ][#][0]*.*c"; the width only matters for zero padding, pad_out does the rest */
    snprintf(fmt, sizeof fmt, "%%%s%s%s*.*%c", signflag && *signflag ? signflag : "", alt ? "#" : "",
             zero && !left && isfinite(d) ? "0" : "", conv);
    int w = zero && !left && isfinite(d) ? (int)width : 0;
    size_t cap = (size_t)prec + (size_t)(w > 0 ? w : 0) + 400; /* 309 integer digits at most */
    char *out = malloc(cap);
    if (!out)
        return gm_tfail(c, GM_ENOMEM, "out of memory");
    int n = snprintf(out, cap, fmt, w, (int)prec, d);
    int rc = (n < 0 || (size_t)n >= cap) ? gm_tfail(c, GM_EUNSUPPORTED, "number too wide to format")
                                         : pad_out(c, b, out, (size_t)n, (size_t)n, width, left, ' ');
    free(out);
    return rc;
}

int gm_tpercent(gm_tctx *c, gm_tv fmtv, gm_tv args, gm_tv *out)
{
    const gm_tstr *fmt = fmtv.u.s;
    /* Markup % args escapes what %s and %r insert and refuses %c/%x/%o (markupsafe wraps each
     * argument in a helper that only converts to str, int and float) */
    bool markup = fmtv.f & TVF_MARKUP;
    const gm_tv *av;
    size_t na, ai = 0;
    bool is_tuple = args.k == TV_LIST && args.u.l->lk == LK_TUPLE;
    bool mapping = args.k == TV_DICT;
    /* an argument with __getitem__ (list, Undefined) that is not a tuple is used whole, and
     * not converting it is no error */
    bool itemish = (args.k == TV_LIST && !is_tuple) || args.k == TV_UNDEF;
    if (is_tuple) {
        av = args.u.l->a;
        na = args.u.l->n;
    } else {
        av = &args;
        na = 1;
    }
    gm_tbuf b = {0};
    int rc = 0;
    const char *p = fmt->p, *e = fmt->p + fmt->len;
    bool used_key = false;
    while (!rc && p < e) {
        const char *pc = memchr(p, '%', (size_t)(e - p));
        if (!pc) {
            rc = gm_tbuf_put(c, &b, p, (size_t)(e - p));
            break;
        }
        if ((rc = gm_tbuf_put(c, &b, p, (size_t)(pc - p))))
            break;
        p = pc + 1;
        if (p >= e) {
            rc = gm_tfail(c, GM_ETEMPLATE, "incomplete format");
            break;
        }
        gm_tv arg = gm_tv_none();
        bool have_arg = false;
        if (*p == '(') {
            const char *q = p + 1;
            int depth = 1;
            while (q < e && depth) {
                if (*q == '(')
                    depth++;
                else if (*q == ')')
                    depth--;
                q++;
            }
            if (depth) {
                rc = gm_tfail(c, GM_ETEMPLATE, "incomplete format key");
                break;
            }
            if (args.k == TV_UNDEF) {
                rc = gm_tundef_error(c, args);
                break;
            }
            if (!mapping) {
                rc = gm_tfail(c, GM_ETEMPLATE, "format requires a mapping");
                break;
            }
            gm_tv *v = gm_tdict_gets(args.u.m, p + 1, (size_t)(q - 1 - (p + 1)));
            if (!v) {
                rc = gm_tfail(c, GM_ETEMPLATE, "KeyError: '%.*s'", (int)(q - 1 - (p + 1)), p + 1);
                break;
            }
            arg = *v;
            have_arg = true;
            used_key = true;
            p = q;
        }
        bool left = false, zero = false, alt = false;
        char signflag[2] = {0, 0};
        while (p < e && strchr("-+ #0", *p) && *p) {
            switch (*p) {
            case '-': left = true; break;
            case '0': zero = true; break;
            case '#': alt = true; break;
            case '+': signflag[0] = '+'; break;
            default: if (!signflag[0]) signflag[0] = ' '; break;
            }
            p++;
        }
        int64_t width = 0, prec = -1;
        if (p < e && *p == '*') {
            if (ai >= na || (av[ai].k != TV_INT && av[ai].k != TV_BOOL)) {
                rc = gm_tfail(c, GM_ETEMPLATE, "* wants int");
                break;
            }
            width = av[ai].k == TV_BOOL ? av[ai].u.b : av[ai].u.i;
            ai++;
            if (width < 0) {
                left = true;
                width = -width;
            }
            p++;
        } else {
            while (p < e && *p >= '0' && *p <= '9') {
                width = width * 10 + (*p++ - '0');
                if (width > 1000000) {
                    rc = gm_tfail(c, GM_ERANGE, "format width too large");
                    break;
                }
            }
        }
        if (rc)
            break;
        if (p < e && *p == '.') {
            p++;
            prec = 0;
            if (p < e && *p == '*') {
                if (ai >= na || (av[ai].k != TV_INT && av[ai].k != TV_BOOL)) {
                    rc = gm_tfail(c, GM_ETEMPLATE, "* wants int");
                    break;
                }
                prec = av[ai].k == TV_BOOL ? av[ai].u.b : av[ai].u.i;
                ai++;
                p++;
            } else {
                while (p < e && *p >= '0' && *p <= '9') {
                    prec = prec * 10 + (*p++ - '0');
                    if (prec > 1000000) {
                        rc = gm_tfail(c, GM_ERANGE, "format precision too large");
                        break;
                    }
                }
            }
        }
        if (rc)
            break;
        while (p < e && (*p == 'h' || *p == 'l' || *p == 'L'))
            p++;
        if (p >= e) {
            rc = gm_tfail(c, GM_ETEMPLATE, "incomplete format");
            break;
        }
        char conv = *p++;
        if (conv == '%') {
            if (p - 2 != pc) { /* "%-%", "%5%", "%(a)%": Python refuses them */
                rc = gm_tfail(c, GM_ETEMPLATE, "unsupported format character '%%' (0x25)");
                break;
            }
            rc = gm_tbuf_putc(c, &b, '%');
            continue;
        }
        if (!have_arg) {
            if (ai >= na) {
                rc = gm_tfail(c, GM_ETEMPLATE, "not enough arguments for format string");
                break;
            }
            arg = av[ai++];
        }
        if (markup && strchr("cxXo", conv)) {
            rc = gm_tfail(c, GM_ETEMPLATE, "%%%c format: an integer is required, not _MarkupEscapeHelper", conv);
            break;
        }
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            gm_tbuf t = {0};
            if (!(rc = gm_tv_write(c, &t, arg, conv != 's')) && markup && !(arg.k == TV_STR && (arg.f & TVF_MARKUP))) {
                gm_tv raw, esc;
                if (!(rc = gm_tv_str_buf(c, &t, &raw))) {
                    if (!(rc = gm_tv_escape(c, raw, &esc))) {
                        rc = gm_tbuf_put(c, &t, esc.u.s->p, esc.u.s->len);
                        gm_tv_decref(esc);
                    }
                    gm_tv_decref(raw);
                }
            }
            if (!rc) {
                size_t n = t.n, ncp = gm_u8_count(t.p ? t.p : "", t.n);
                if (prec >= 0 && (size_t)prec < ncp) {
                    n = gm_u8_offset(t.p, t.n, (size_t)prec);
                    ncp = (size_t)prec;
                }
                rc = pad_out(c, &b, t.p ? t.p : "", n, ncp, width, left, ' ');
            }
            gm_tbuf_free(&t);
            break;
        }
        case 'c': {
            char ch[4];
            size_t cn;
            if (arg.k == TV_INT && arg.u.i >= 0 && arg.u.i <= 0x10FFFF && !(arg.u.i >= 0xD800 && arg.u.i <= 0xDFFF)) {
                cn = gm_u8_enc((uint32_t)arg.u.i, ch);
            } else if (arg.k == TV_STR && arg.u.s->ncp == 1) {
                cn = arg.u.s->len;
                memcpy(ch, arg.u.s->p, cn);
            } else {
                rc = gm_tfail(c, GM_ETEMPLATE, "%%c requires int or char");
                break;
            }
            rc = pad_out(c, &b, ch, cn, 1, width, left, ' ');
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o': {
            int64_t iv;
            if (arg.k == TV_INT || arg.k == TV_BOOL) {
                iv = arg.k == TV_BOOL ? arg.u.b : arg.u.i;
            } else if (arg.k == TV_FLOAT && (conv == 'd' || conv == 'i' || conv == 'u')) {
                if (!isfinite(arg.u.d) || fabs(arg.u.d) >= 9.2e18) {
                    rc = gm_tfail(c, GM_EUNSUPPORTED, "%%d of a float outside 64 bits");
                    break;
                }
                iv = (int64_t)arg.u.d;
            } else {
                rc = gm_tfail(c, GM_ETEMPLATE, "%%%c format: %s is required, not %s", conv,
                              conv == 'x' || conv == 'X' || conv == 'o' ? "an integer" : "a real number",
                              gm_tv_typename(arg));
                break;
            }
            char cv = conv == 'i' || conv == 'u' ? 'd' : conv;
            rc = fmt_int(c, &b, iv, cv, signflag, alt, zero, left, width, prec, 0);
            break;
        }
        case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
            double d;
            if (arg.k == TV_FLOAT)
                d = arg.u.d;
            else if (arg.k == TV_INT || arg.k == TV_BOOL)
                d = (double)(arg.k == TV_BOOL ? arg.u.b : arg.u.i);
            else {
                rc = gm_tfail(c, GM_ETEMPLATE, "must be real number, not %s", gm_tv_typename(arg));
                break;
            }
            rc = fmt_float(c, &b, d, conv, signflag, alt, zero, left, width, prec);
            break;
        }
        default:
            rc = gm_tfail(c, GM_ETEMPLATE, "unsupported format character '%c'", conv);
        }
    }
    if (!rc && !used_key && !mapping && ai < na && !itemish)
        rc = gm_tfail(c, GM_ETEMPLATE, "not all arguments converted during string formatting");
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out);
}

/* ------------------------------------------------------------------ str.format */

typedef struct fspec {
    uint32_t fill;
    char align, sign, type, group;
    bool alt, zero;
    int64_t width, prec;
} fspec;

static int parse_spec(gm_tctx *c, const char *p, size_t n, fspec *s)
{
    memset(s, 0, sizeof *s);
    s->fill = ' ';
    s->prec = -1;
    size_t i = 0;
    if (n >= 1) {
        uint32_t cp;
        size_t k = gm_u8_dec(p, n, &cp);
        if (k < n && strchr("<>=^", p[k]) && p[k]) {
            s->fill = cp;
            s->align = p[k];
            i = k + 1;
        } else if (strchr("<>=^", p[0]) && p[0]) {
            s->align = p[0];
            i = 1;
        }
    }
    if (i < n && (p[i] == '+' || p[i] == '-' || p[i] == ' '))
        s->sign = p[i++];
    if (i < n && p[i] == '#') {
        s->alt = true;
        i++;
    }
    if (i < n && p[i] == '0') {
        s->zero = true;
        i++;
    }
    while (i < n && p[i] >= '0' && p[i] <= '9') {
        s->width = s->width * 10 + (p[i++] - '0');
        if (s->width > 1000000)
            return gm_tfail(c, GM_ERANGE, "format width too large");
    }
    if (i < n && (p[i] == ',' || p[i] == '_'))
        s->group = p[i++];
    if (i < n && p[i] == '.') {
        i++;
        s->prec = 0;
        if (i >= n || p[i] < '0' || p[i] > '9')
            return gm_tfail(c, GM_ETEMPLATE, "Format specifier missing precision");
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            s->prec = s->prec * 10 + (p[i++] - '0');
            if (s->prec > 1000000)
                return gm_tfail(c, GM_ERANGE, "format precision too large");
        }
    }
    if (i < n)
        s->type = p[i++];
    if (i < n)
        return gm_tfail(c, GM_ETEMPLATE, "Invalid format specifier");
    return 0;
}

static int aligned(gm_tctx *c, gm_tbuf *b, const char *p, size_t n, const fspec *s, char dflt)
{
    size_t ncp = gm_u8_count(p, n);
    int64_t padn = s->width > (int64_t)ncp ? s->width - (int64_t)ncp : 0;
    char align = s->align ? s->align : dflt;
    int64_t left = (align == '>' || align == '=') ? padn : align == '^' ? padn / 2 : 0, right = padn - left;
    char f[4];
    size_t fn = gm_u8_enc(s->fill, f);
    int rc = 0;
    if (align == '=' && n && (p[0] == '-' || p[0] == '+' || p[0] == ' ')) {
        rc = gm_tbuf_put(c, b, p, 1);
        p++, n--;
    }
    for (int64_t i = 0; !rc && i < left; i++)
        rc = gm_tbuf_put(c, b, f, fn);
    if (!rc)
        rc = gm_tbuf_put(c, b, p, n);
    for (int64_t i = 0; !rc && i < right; i++)
        rc = gm_tbuf_put(c, b, f, fn);
    return rc;
}

/* format(v, spec) for the kinds templates use. */
static int format_value(gm_tctx *c, gm_tbuf *b, gm_tv v, const char *sp, size_t sn)
{
    fspec s;
    int rc = parse_spec(c, sp, sn, &s);
    if (rc)
        return rc;
    if (s.zero && !s.align) {
        s.fill = '0';
        s.align = '=';
    }
    char sg[2] = {s.sign == '-' ? 0 : s.sign, 0};
    gm_tbuf t = {0};
    if (v.k == TV_STR) {
        if (s.type && s.type != 's')
            return gm_tfail(c, GM_ETEMPLATE, "Unknown format code '%c' for object of type 'str'", s.type);
        if (s.sign)
            return gm_tfail(c, GM_ETEMPLATE, "Sign not allowed in string format specifier");
        if (s.alt)
            return gm_tfail(c, GM_ETEMPLATE, "Alternate form (#) not allowed in string format specifier");
        if (s.align == '=')
            return gm_tfail(c, GM_ETEMPLATE, "'=' alignment not allowed in string format specifier");
        size_t n = v.u.s->len;
        if (s.prec >= 0 && (size_t)s.prec < v.u.s->ncp)
            n = gm_u8_offset(v.u.s->p, v.u.s->len, (size_t)s.prec);
        return aligned(c, b, v.u.s->p, n, &s, '<');
    }
    bool intlike = v.k == TV_INT || (v.k == TV_BOOL && sn > 0);
    if (intlike && s.type && !strchr("bcdoxXneEfFgG%", s.type))
        return gm_tfail(c, GM_ETEMPLATE, "Unknown format code '%c' for object of type 'int'", s.type);
    if (v.k == TV_FLOAT && s.type && !strchr("eEfFgGn%", s.type))
        return gm_tfail(c, GM_ETEMPLATE, "Unknown format code '%c' for object of type 'float'", s.type);
    if (intlike && (!s.type || strchr("bcdoxXn", s.type)) && s.prec >= 0)
        return gm_tfail(c, GM_ETEMPLATE, "Precision not allowed in integer format specifier");
    if (intlike && (!s.type || strchr("bcdoxXn", s.type))) {
        int64_t iv = v.k == TV_BOOL ? v.u.b : v.u.i;
        if (s.type == 'c') {
            char ch[4];
            size_t cn = gm_u8_enc((uint32_t)iv, ch);
            return aligned(c, b, ch, cn, &s, '>');
        }
        rc = fmt_int(c, &t, iv, s.type == 'n' || !s.type ? 'd' : s.type, sg, s.alt, false, false, 0, -1, s.group);
        if (!rc)
            rc = aligned(c, b, t.p ? t.p : "", t.n, &s, '>');
        gm_tbuf_free(&t);
        return rc;
    }
    if (v.k == TV_FLOAT || intlike) {
        double d = v.k == TV_FLOAT ? v.u.d : (double)(v.k == TV_BOOL ? v.u.b : v.u.i);
        char type = s.type;
        if (type == '%') {
            d *= 100;
            type = 'f';
        }
        if (!type && s.prec < 0) {
            char num[40];
            gm_float_repr(d, num);
            if (s.sign == '+' && d >= 0)
                rc = gm_tbuf_putc(c, &t, '+');
            else if (s.sign == ' ' && d >= 0)
                rc = gm_tbuf_putc(c, &t, ' ');
            if (!rc)
                rc = gm_tbuf_put(c, &t, num, strlen(num));
        } else if (!type && isfinite(d)) {
            /* no type, a precision: like 'g', but exponent notation from exp >= p - 1 on and
             * at least one digit after the point */
            int64_t p = s.prec ? s.prec : 1;
            if (p > 200)
                p = 200;
            char tmp[400];
            snprintf(tmp, sizeof tmp, "%.*e", (int)(p - 1), d);
            int x = atoi(strchr(tmp, 'e') + 1);
            if (x < -4 || x >= p - 1) {
                char *e = strchr(tmp, 'e'), *q = e;
                while (q > tmp && q[-1] == '0')
                    q--;
                if (q > tmp && q[-1] == '.')
                    q--;
                memmove(q, e, strlen(e) + 1);
            } else {
                snprintf(tmp, sizeof tmp, "%.*f", (int)(p - 1 - x), d);
                if (strchr(tmp, '.')) {
                    size_t n = strlen(tmp);
                    while (n > 0 && tmp[n - 1] == '0')
                        n--;
                    if (tmp[n - 1] == '.')
                        n++; /* keep one zero */
                    tmp[n] = 0;
                } else {
                    strcat(tmp, ".0");
                }
            }
            if (s.sign == '+' && !signbit(d))
                rc = gm_tbuf_putc(c, &t, '+');
            else if (s.sign == ' ' && !signbit(d))
                rc = gm_tbuf_putc(c, &t, ' ');
            if (!rc)
                rc = gm_tbuf_put(c, &t, tmp, strlen(tmp));
        } else {
            if (!type || type == 'n')
                type = 'g';
            rc = fmt_float(c, &t, d, type, sg, s.alt, false, false, 0, s.prec < 0 ? 6 : s.prec);
        }
        if (!rc && s.group && t.p) {
            /* thousands separators in the integer digits */
            size_t st = (t.p[0] == '-' || t.p[0] == '+' || t.p[0] == ' ') ? 1 : 0, en = st;
            while (en < t.n && t.p[en] >= '0' && t.p[en] <= '9')
                en++;
            gm_tbuf g = {0};
            rc = gm_tbuf_put(c, &g, t.p, st);
            for (size_t k = st; !rc && k < en; k++) {
                if (k > st && (en - k) % 3 == 0)
                    rc = gm_tbuf_putc(c, &g, s.group);
                if (!rc)
                    rc = gm_tbuf_putc(c, &g, t.p[k]);
            }
            if (!rc)
                rc = gm_tbuf_put(c, &g, t.p + en, t.n - en);
            gm_tbuf_free(&t);
            t = g;
        }
        if (!rc && s.type == '%')
            rc = gm_tbuf_putc(c, &t, '%');
        if (!rc)
            rc = aligned(c, b, t.p ? t.p : "", t.n, &s, '>');
        gm_tbuf_free(&t);
        return rc;
    }
    if (sn != 0)
        return gm_tfail(c, GM_ETEMPLATE, "unsupported format string passed to %s.__format__", gm_tv_typename(v));
    return gm_tv_write(c, b, v, false);
}

/* get_field of the sandbox's string.Formatter: the first part indexes args when it is all
 * digits, else names a keyword ("" too: "{[0]}" and "{.a}" are KeyError ''); then .attr and
 * [key] through the sandbox's getattr and getitem. */
static int get_field(gm_tctx *c, const char *f, size_t n, const gm_targs *a, gm_tv *out)
{
    size_t i = 0;
    while (i < n && f[i] != '.' && f[i] != '[')
        i++;
    bool digits = i > 0;
    size_t idx = 0;
    for (size_t k = 0; k < i; k++) {
        if (f[k] < '0' || f[k] > '9' || idx > 100000000)
            digits = false;
        else
            idx = idx * 10 + (size_t)(f[k] - '0');
    }
    gm_tv cur;
    if (digits) {
        if (idx >= a->npos)
            return gm_tfail(c, GM_ETEMPLATE, "Replacement index %zu out of range for positional args tuple", idx);
        cur = gm_tv_ref(a->pos[idx]);
    } else {
        size_t k;
        for (k = 0; k < a->nkw; k++)
            if (gm_tstr_eq(a->kwn[k].u.s, f, i))
                break;
        if (k == a->nkw)
            return gm_tfail(c, GM_ETEMPLATE, "KeyError: '%.*s'", (int)i, f);
        cur = gm_tv_ref(a->kwv[k]);
    }
    int rc = 0;
    while (i < n) {
        gm_tv key, nx;
        if (f[i] == '.') {
            size_t j = ++i;
            while (i < n && f[i] != '.' && f[i] != '[')
                i++;
            if (i == j) {
                rc = gm_tfail(c, GM_ETEMPLATE, "Empty attribute in format string");
                break;
            }
            if ((rc = gm_tv_str(c, f + j, i - j, &key)))
                break;
            rc = gm_tgetattr(c, cur, key, gm_tmethod_id(f + j, i - j), &nx);
        } else if (f[i] == '[') {
            size_t j = ++i;
            while (i < n && f[i] != ']')
                i++;
            if (i >= n || i == j) {
                rc = gm_tfail(c, GM_ETEMPLATE, i >= n ? "Missing ']' in format string" : "Empty attribute in format string");
                break;
            }
            bool dg = true;
            int64_t iv = 0;
            for (size_t k = j; k < i; k++) {
                if (f[k] < '0' || f[k] > '9' || iv > 1000000000) {
                    dg = false;
                    break;
                }
                iv = iv * 10 + (f[k] - '0');
            }
            if (dg)
                key = gm_tv_int(iv);
            else if ((rc = gm_tv_str(c, f + j, i - j, &key)))
                break;
            i++;
            if (i < n && f[i] != '.' && f[i] != '[') {
                gm_tv_decref(key);
                rc = gm_tfail(c, GM_ETEMPLATE, "Only '.' or '[' may follow ']' in format field specifier");
                break;
            }
            rc = gm_tgetitem(c, cur, key, &nx);
        } else {
            rc = gm_tfail(c, GM_ETEMPLATE, "bad format field");
            break;
        }
        gm_tv_decref(key);
        if (rc)
            break;
        gm_tv_decref(cur);
        cur = nx;
    }
    if (rc) {
        gm_tv_decref(cur);
        return rc;
    }
    *out = cur;
    return 0;
}

/* string.Formatter._vformat: *autoi is the next automatic index, or -1 once a field was
 * numbered by hand; nested fields in a spec continue the same numbering. */
static int vformat(gm_tctx *c, gm_tbuf *b, const char *p, size_t n, const gm_targs *a, int depth, int64_t *autoi)
{
    if (depth < 0)
        return gm_tfail(c, GM_ETEMPLATE, "Max string recursion exceeded");
    int rc = 0;
    size_t i = 0;
    while (!rc && i < n) {
        char ch = p[i];
        if (ch == '}') {
            if (i + 1 < n && p[i + 1] == '}') {
                rc = gm_tbuf_putc(c, b, '}');
                i += 2;
                continue;
            }
            return gm_tfail(c, GM_ETEMPLATE, "Single '}' encountered in format string");
        }
        if (ch != '{') {
            size_t j = i;
            while (j < n && p[j] != '{' && p[j] != '}')
                j++;
            rc = gm_tbuf_put(c, b, p + i, j - i);
            i = j;
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            rc = gm_tbuf_putc(c, b, '{');
            i += 2;
            continue;
        }
        /* the field runs to the matching "}" */
        size_t j = i + 1;
        int nest = 1;
        while (j < n) {
            if (p[j] == '{')
                nest++;
            else if (p[j] == '}' && --nest == 0)
                break;
            j++;
        }
        if (j >= n)
            return gm_tfail(c, GM_ETEMPLATE, "expected '}' before end of string");
        const char *f = p + i + 1;
        size_t fn = j - i - 1, k = 0;
        i = j + 1;
        /* field_name up to "!" or ":" (brackets may hold either) */
        while (k < fn && f[k] != '!' && f[k] != ':') {
            if (f[k] == '[') {
                while (k < fn && f[k] != ']')
                    k++;
                if (k < fn)
                    k++;
                continue;
            }
            k++;
        }
        size_t name_n = k;
        char conv = 0;
        if (k < fn && f[k] == '!') {
            if (k + 1 >= fn)
                return gm_tfail(c, GM_ETEMPLATE, "end of string while looking for conversion specifier");
            conv = f[k + 1];
            k += 2;
            if (k < fn && f[k] != ':')
                return gm_tfail(c, GM_ETEMPLATE, "expected ':' after conversion specifier");
        }
        const char *spec = k < fn ? f + k + 1 : "";
        size_t spec_n = k < fn ? fn - k - 1 : 0;
        char num[24];
        const char *name = f;
        if (name_n == 0) {
            if (*autoi < 0)
                return gm_tfail(c, GM_ETEMPLATE, "cannot switch from manual field specification to automatic field numbering");
            name_n = (size_t)snprintf(num, sizeof num, "%lld", (long long)(*autoi)++);
            name = num;
        } else {
            bool digits = true;
            for (size_t q = 0; q < name_n; q++)
                digits = digits && f[q] >= '0' && f[q] <= '9';
            if (digits) {
                if (*autoi > 0)
                    return gm_tfail(c, GM_ETEMPLATE, "cannot switch from manual field specification to automatic field numbering");
                *autoi = -1;
            }
        }
        gm_tv obj;
        if ((rc = get_field(c, name, name_n, a, &obj)))
            return rc;
        if (conv == 'r' || conv == 's' || conv == 'a') {
            gm_tbuf t = {0};
            gm_tv sv;
            rc = gm_tv_write(c, &t, obj, conv != 's');
            if (!rc)
                rc = gm_tv_str_buf(c, &t, &sv);
            else
                gm_tbuf_free(&t);
            gm_tv_decref(obj);
            if (rc)
                return rc;
            obj = sv;
        } else if (conv) {
            gm_tv_decref(obj);
            return gm_tfail(c, GM_ETEMPLATE, "Unknown conversion specifier %c", conv);
        }
        gm_tbuf sb = {0};
        if ((rc = vformat(c, &sb, spec, spec_n, a, depth - 1, autoi))) {
            gm_tbuf_free(&sb);
            gm_tv_decref(obj);
            return rc;
        }
        if (obj.k == TV_UNDEF && sb.n == 0)
            rc = 0; /* format(Undefined, '') is '' */
        else
            rc = format_value(c, b, obj, sb.p ? sb.p : "", sb.n);
        gm_tbuf_free(&sb);
        gm_tv_decref(obj);
    }
    return rc;
}

int gm_tformat(gm_tctx *c, const gm_tstr *fmt, const gm_targs *a, gm_tv *out)
{
    gm_tbuf b = {0};
    int64_t autoi = 0;
    int rc = vformat(c, &b, fmt->p, fmt->len, a, 2, &autoi);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out);
}

/* ------------------------------------------------------------------ strftime */

static const char *const wday_abbr[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const wday_full[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
static const char *const mon_abbr[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const mon_full[] = {"January", "February", "March", "April", "May", "June", "July",
                                       "August", "September", "October", "November", "December"};

/* Python's datetime.strftime on a naive datetime in the C locale: names in English, %Z and %z
 * empty, %f the (zero) microseconds; numeric fields as glibc writes them. */
int gm_tstrftime(gm_tctx *c, const gm_tstr *fmt, gm_tv *out)
{
    time_t t = c->now_set ? (time_t)c->now_unix_s : time(NULL);
    struct tm tm;
    if (c->now_set ? !gmtime_r(&t, &tm) : !localtime_r(&t, &tm))
        return gm_tfail(c, GM_ETEMPLATE, "the time cannot be represented");
    gm_tbuf b = {0};
    int rc = 0;
    for (size_t i = 0; !rc && i < fmt->len; i++) {
        char ch = fmt->p[i];
        if (ch != '%' || i + 1 >= fmt->len) {
            rc = gm_tbuf_putc(c, &b, ch);
            continue;
        }
        char d = fmt->p[++i];
        char tmp[64];
        switch (d) {
        case 'a': rc = gm_tbuf_putf(c, &b, "%s", wday_abbr[tm.tm_wday]); break;
        case 'A': rc = gm_tbuf_putf(c, &b, "%s", wday_full[tm.tm_wday]); break;
        case 'b':
        case 'h': rc = gm_tbuf_putf(c, &b, "%s", mon_abbr[tm.tm_mon]); break;
        case 'B': rc = gm_tbuf_putf(c, &b, "%s", mon_full[tm.tm_mon]); break;
        case 'p': rc = gm_tbuf_putf(c, &b, "%s", tm.tm_hour < 12 ? "AM" : "PM"); break;
        case 'c':
            rc = gm_tbuf_putf(c, &b, "%s %s %2d %02d:%02d:%02d %d", wday_abbr[tm.tm_wday], mon_abbr[tm.tm_mon],
                                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, tm.tm_year + 1900);
            break;
        case 'x':
            rc = gm_tbuf_putf(c, &b, "%02d/%02d/%02d", tm.tm_mon + 1, tm.tm_mday, tm.tm_year % 100);
            break;
        case 'X':
        case 'T': rc = gm_tbuf_putf(c, &b, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec); break;
        case 'r':
            rc = gm_tbuf_putf(c, &b, "%02d:%02d:%02d %s", (tm.tm_hour + 11) % 12 + 1, tm.tm_min, tm.tm_sec,
                                tm.tm_hour < 12 ? "AM" : "PM");
            break;
        case 'Z':
        case 'z': break;
        case 'f': rc = gm_tbuf_put(c, &b, "000000", 6); break;
        case '%': rc = gm_tbuf_putc(c, &b, '%'); break;
        case 'd': case 'e': case 'H': case 'I': case 'j': case 'm': case 'M': case 'S': case 'y':
        case 'Y': case 'C': case 'D': case 'F': case 'R': case 'u': case 'w': case 'U': case 'W':
        case 'V': case 'G': case 'g': case 'k': case 'l': case 'n': case 't': case 's': {
            char f[3] = {'%', d, 0};
            size_t k = strftime(tmp, sizeof tmp, f, &tm);
            rc = gm_tbuf_put(c, &b, tmp, k);
            break;
        }
        default:
            rc = gm_tbuf_putc(c, &b, '%');
            if (!rc)
                rc = gm_tbuf_putc(c, &b, d);
        }
    }
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out);
}
