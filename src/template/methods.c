/* template/methods: the methods templates call on values (str, list, dict, cycler) and Jinja's
 * globals (range, namespace, dict, cycler, joiner) plus transformers' raise_exception and
 * strftime_now (formatting itself is in format.c).
 *
 * The immutable sandbox: list.append/extend/insert/remove/reverse/sort and
 * dict.pop/popitem/setdefault/update/clear exist but are refused (SecurityError in Python);
 * list.pop and list.clear are not on Jinja's list of mutating methods, so they work;
 * gm_tmethod_has reports them as such so that a lookup yields an "unsafe" undefined whose call
 * fails. Indices taken and returned by str methods count code points, as Python's do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

enum {
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_STARTSWITH, M_ENDSWITH, M_UPPER, M_LOWER,
    M_TITLE, M_CAPITALIZE, M_SWAPCASE, M_CASEFOLD, M_REPLACE, M_FIND, M_RFIND, M_INDEX, M_RINDEX,
    M_COUNT, M_JOIN, M_FORMAT, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISUPPER, M_ISLOWER,
    M_ISNUMERIC, M_ISDECIMAL, M_ISTITLE, M_ZFILL, M_CENTER, M_LJUST, M_RJUST, M_SPLITLINES,
    M_PARTITION, M_RPARTITION, M_REMOVEPREFIX, M_REMOVESUFFIX, M_ITEMS, M_KEYS, M_VALUES, M_GET,
    M_COPY, M_POP, M_POPITEM, M_SETDEFAULT, M_UPDATE, M_CLEAR, M_APPEND, M_EXTEND, M_INSERT,
    M_REMOVE, M_REVERSE, M_SORT, M_NEXT, M_RESET, M_ENCODE, M_EXPANDTABS, M_FORMAT_MAP,
    M_ISIDENTIFIER, M_NMETHODS
};

#define TS 1u  /* str */
#define TL 2u  /* list */
#define TT 4u  /* tuple, range */
#define TD 8u  /* dict */
#define TC 16u /* cycler */

static const struct {
    const char *name;
    uint8_t types, unsafe;
} methods[M_NMETHODS] = {
    [M_STRIP] = {"strip", TS, 0}, [M_LSTRIP] = {"lstrip", TS, 0}, [M_RSTRIP] = {"rstrip", TS, 0},
    [M_SPLIT] = {"split", TS, 0}, [M_RSPLIT] = {"rsplit", TS, 0},
    [M_STARTSWITH] = {"startswith", TS, 0}, [M_ENDSWITH] = {"endswith", TS, 0},
    [M_UPPER] = {"upper", TS, 0}, [M_LOWER] = {"lower", TS, 0}, [M_TITLE] = {"title", TS, 0},
    [M_CAPITALIZE] = {"capitalize", TS, 0}, [M_SWAPCASE] = {"swapcase", TS, 0},
    [M_CASEFOLD] = {"casefold", TS, 0}, [M_REPLACE] = {"replace", TS, 0},
    [M_FIND] = {"find", TS, 0}, [M_RFIND] = {"rfind", TS, 0}, [M_INDEX] = {"index", TS | TL | TT, 0},
    [M_RINDEX] = {"rindex", TS, 0}, [M_COUNT] = {"count", TS | TL | TT, 0}, [M_JOIN] = {"join", TS, 0},
    [M_FORMAT] = {"format", TS, 0}, [M_ISDIGIT] = {"isdigit", TS, 0}, [M_ISALPHA] = {"isalpha", TS, 0},
    [M_ISALNUM] = {"isalnum", TS, 0}, [M_ISSPACE] = {"isspace", TS, 0}, [M_ISUPPER] = {"isupper", TS, 0},
    [M_ISLOWER] = {"islower", TS, 0}, [M_ISNUMERIC] = {"isnumeric", TS, 0},
    [M_ISDECIMAL] = {"isdecimal", TS, 0}, [M_ISTITLE] = {"istitle", TS, 0}, [M_ZFILL] = {"zfill", TS, 0},
    [M_CENTER] = {"center", TS, 0}, [M_LJUST] = {"ljust", TS, 0}, [M_RJUST] = {"rjust", TS, 0},
    [M_SPLITLINES] = {"splitlines", TS, 0}, [M_PARTITION] = {"partition", TS, 0},
    [M_RPARTITION] = {"rpartition", TS, 0}, [M_REMOVEPREFIX] = {"removeprefix", TS, 0},
    [M_REMOVESUFFIX] = {"removesuffix", TS, 0}, [M_ITEMS] = {"items", TD, 0},
    [M_KEYS] = {"keys", TD, 0}, [M_VALUES] = {"values", TD, 0}, [M_GET] = {"get", TD, 0},
    [M_COPY] = {"copy", TL | TD, 0}, [M_POP] = {"pop", TL | TD, TD},
    [M_POPITEM] = {"popitem", TD, TD}, [M_SETDEFAULT] = {"setdefault", TD, TD},
    [M_UPDATE] = {"update", TD, TD}, [M_CLEAR] = {"clear", TL | TD, TD},
    [M_APPEND] = {"append", TL, TL}, [M_EXTEND] = {"extend", TL, TL}, [M_INSERT] = {"insert", TL, TL},
    [M_REMOVE] = {"remove", TL, TL}, [M_REVERSE] = {"reverse", TL, TL}, [M_SORT] = {"sort", TL, TL},
    [M_NEXT] = {"next", TC, 0}, [M_RESET] = {"reset", TC, 0}, [M_ENCODE] = {"encode", TS, 0},
    [M_EXPANDTABS] = {"expandtabs", TS, 0}, [M_FORMAT_MAP] = {"format_map", TS, 0},
    [M_ISIDENTIFIER] = {"isidentifier", TS, 0},
};

int gm_tmethod_id(const char *name, size_t n)
{
    for (int i = 0; i < M_NMETHODS; i++)
        if (strlen(methods[i].name) == n && memcmp(methods[i].name, name, n) == 0)
            return i;
    return -1;
}

const char *gm_tmethod_name(int mid)
{
    return mid >= 0 && mid < M_NMETHODS ? methods[mid].name : "?";
}

static uint8_t type_bit(gm_tv v)
{
    switch (v.k) {
    case TV_STR: return TS;
    case TV_DICT: return TD;
    case TV_CYCLER: return TC;
    case TV_LIST:
        if (v.u.l->lk == LK_LIST)
            return TL;
        if (v.u.l->lk == LK_TUPLE || v.u.l->lk == LK_RANGE)
            return TT;
        return 0;
    default: return 0;
    }
}

int gm_tmethod_has(gm_tv v, int mid)
{
    if (mid < 0 || mid >= M_NMETHODS)
        return 0;
    uint8_t t = type_bit(v);
    if (!(methods[mid].types & t))
        return 0;
    return (methods[mid].unsafe & t) ? 2 : 1;
}

/* ------------------------------------------------------------------ helpers */

static int want_str(gm_tctx *c, gm_tv v, const char *what)
{
    if (v.k == TV_STR)
        return 0;
    if (v.k == TV_UNDEF)
        return gm_tundef_error(c, v);
    return gm_tfail(c, GM_ETEMPLATE, "%s must be str, not %s", what, gm_tv_typename(v));
}

static int want_int(gm_tctx *c, gm_tv v, int64_t *out)
{
    *out = 0; /* also on failure: callers read it only on success, the compiler cannot tell */
    if (v.k == TV_INT || v.k == TV_BOOL) {
        *out = v.k == TV_BOOL ? v.u.b : v.u.i;
        return 0;
    }
    if (v.k == TV_UNDEF)
        return gm_tundef_error(c, v);
    return gm_tfail(c, GM_ETEMPLATE, "'%s' object cannot be interpreted as an integer", gm_tv_typename(v));
}

static int strv(gm_tctx *c, const char *p, size_t n, uint8_t flags, gm_tv *out)
{
    int rc = gm_tv_str(c, p, n, out);
    if (!rc)
        out->f = flags;
    return rc;
}

/* Code point index of byte offset off. */
static size_t cp_index(const gm_tstr *s, size_t off)
{
    return s->ncp == s->len ? off : gm_u8_count(s->p, off);
}

static size_t byte_off(const gm_tstr *s, size_t idx)
{
    return s->ncp == s->len ? idx : gm_u8_offset(s->p, s->len, idx);
}

/* Python's start/end arguments of find/count/startswith: clamp to [0, ncp] as code points. */
static int range_args(gm_tctx *c, const gm_tstr *s, const gm_tv *st, const gm_tv *en, size_t *b0, size_t *b1)
{
    int64_t n = (int64_t)s->ncp, a = 0, b = n;
    if (st && st->k != TV_NONE) {
        int rc = want_int(c, *st, &a);
        if (rc)
            return rc;
        if (a < 0)
            a = a + n < 0 ? 0 : a + n;
    }
    if (en && en->k != TV_NONE) {
        int rc = want_int(c, *en, &b);
        if (rc)
            return rc;
        if (b < 0)
            b = b + n < 0 ? 0 : b + n;
    }
    if (a > n)
        a = n + 1; /* start past the end: nothing matches, not even "" */
    if (b > n)
        b = n;
    if (a > n) {
        *b0 = s->len + 1;
        *b1 = s->len;
        return 0;
    }
    *b0 = byte_off(s, (size_t)a);
    *b1 = b < a ? *b0 : byte_off(s, (size_t)b);
    return 0;
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0)
        return h;
    return memmem(h, hn, nd, nn);
}

static const char *rfind_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn > hn)
        return NULL;
    for (size_t i = hn - nn + 1; i > 0; i--)
        if (memcmp(h + i - 1, nd, nn) == 0)
            return h + i - 1;
    return NULL;
}

/* ------------------------------------------------------------------ strip, case, pad */

static bool in_chars(uint32_t cp, const gm_tstr *chars)
{
    if (!chars)
        return gm_u_isspace(cp);
    for (size_t i = 0; i < chars->len;) {
        uint32_t x;
        i += gm_u8_dec(chars->p + i, chars->len - i, &x);
        if (x == cp)
            return true;
    }
    return false;
}

int gm_tstr_strip(gm_tctx *c, gm_tv s, gm_tv chars, int which, gm_tv *out)
{
    const gm_tstr *cs = NULL;
    if (chars.k == TV_STR)
        cs = chars.u.s;
    else if (chars.k != TV_NONE && chars.k != TV_UNDEF)
        return gm_tfail(c, GM_ETEMPLATE, "strip arg must be None or str");
    const gm_tstr *str = s.u.s;
    size_t a = 0, b = str->len;
    if (which & 1)
        while (a < b) {
            uint32_t cp;
            size_t k = gm_u8_dec(str->p + a, b - a, &cp);
            if (!in_chars(cp, cs))
                break;
            a += k;
        }
    if (which & 2)
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)str->p[st] & 0xC0) == 0x80)
                st--;
            uint32_t cp;
            gm_u8_dec(str->p + st, b - st, &cp);
            if (!in_chars(cp, cs))
                break;
            b = st;
        }
    if (a == 0 && b == str->len) {
        *out = gm_tv_ref(s);
        return 0;
    }
    return strv(c, str->p + a, b - a, s.f & TVF_MARKUP, out);
}

static int put_cps(gm_tctx *c, gm_tbuf *b, const uint32_t *cps, size_t n)
{
    char tmp[12];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += gm_u8_enc(cps[i], tmp + k);
    return gm_tbuf_put(c, b, tmp, k);
}

static bool is_cased(uint32_t cp) { return gm_u_isupper(cp) || gm_u_islower(cp) || gm_u_istitle_char(cp); }

/* Python's final-sigma rule: a capital sigma lower-cases to "ς" after a cased letter when no
 * cased letter follows. p/n: the whole string, i: the sigma's offset, k: its length. */
bool gm_tfinal_sigma(const char *p, size_t n, size_t i, size_t k)
{
    bool before = false, after = false;
    for (size_t j = i; j > 0;) {
        size_t st = j - 1;
        while (st > 0 && ((unsigned char)p[st] & 0xC0) == 0x80)
            st--;
        uint32_t cp;
        gm_u8_dec(p + st, j - st, &cp);
        if (cp != '\'' && cp != '.' && cp != 0xAD) { /* case-ignorable marks are skipped */
            before = is_cased(cp);
            break;
        }
        j = st;
    }
    for (size_t j = i + k; j < n;) {
        uint32_t cp;
        size_t l = gm_u8_dec(p + j, n - j, &cp);
        if (cp != '\'' && cp != '.' && cp != 0xAD) {
            after = is_cased(cp);
            break;
        }
        j += l;
    }
    return before && !after;
}

/* how: 'u' upper, 'l' lower, 'f' casefold, 'c' capitalize, 's' swapcase, 't' str.title */
int gm_tstr_case(gm_tctx *c, gm_tv s, int how, gm_tv *out)
{
    const gm_tstr *str = s.u.s;
    gm_tbuf b = {0};
    int rc = 0;
    bool prev_cased = false, first = true;
    for (size_t i = 0; !rc && i < str->len;) {
        uint32_t cp, m[3];
        size_t k = gm_u8_dec(str->p + i, str->len - i, &cp), nm;
        bool lowering;
        switch (how) {
        case 'u': nm = gm_u_upper(cp, m); lowering = false; break;
        case 'l': case 'f': nm = gm_u_lower(cp, m); lowering = true; break;
        case 'c':
            lowering = !first;
            nm = first ? gm_u_title(cp, m) : gm_u_lower(cp, m);
            break;
        case 's':
            lowering = gm_u_isupper(cp);
            nm = gm_u_isupper(cp) ? gm_u_lower(cp, m) : gm_u_islower(cp) ? gm_u_upper(cp, m) : (m[0] = cp, 1);
            break;
        default: /* title */
            lowering = prev_cased;
            nm = prev_cased ? gm_u_lower(cp, m) : is_cased(cp) ? gm_u_title(cp, m) : (m[0] = cp, 1);
            prev_cased = is_cased(cp);
            break;
        }
        if (lowering && cp == 0x03A3 && how != 'f' && gm_tfinal_sigma(str->p, str->len, i, k))
            m[0] = 0x03C2;
        if (how == 'f') {
            /* casefold: lower, then the full foldings templates may meet */
            if (cp == 0x00DF || cp == 0x1E9E) {
                m[0] = 's', m[1] = 's';
                nm = 2;
            } else if (cp >= 0xFB00 && cp <= 0xFB06) {
                nm = gm_u_upper(cp, m);
                for (size_t j = 0; j < nm; j++)
                    m[j] += 32;
            } else if (m[0] == 0x03C2) {
                m[0] = 0x03C3;
            } else if (cp == 0x00B5) {
                m[0] = 0x03BC;
            }
        }
        rc = put_cps(c, &b, m, nm);
        first = false;
        i += k;
    }
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    if ((rc = gm_tv_str_buf(c, &b, out)))
        return rc;
    out->f = s.f & TVF_MARKUP;
    return 0;
}

/* how: 'c' center, 'l' ljust, 'r' rjust */
int gm_tstr_pad(gm_tctx *c, const gm_tstr *s, int64_t width, uint32_t fill, int how, gm_tv *out)
{
    if (width <= (int64_t)s->ncp)
        return gm_tv_str(c, s->p, s->len, out);
    if ((uint64_t)width > c->lim.max_output_bytes)
        return gm_tfail(c, GM_ERANGE, "text longer than %llu bytes", (unsigned long long)c->lim.max_output_bytes);
    int64_t marg = width - (int64_t)s->ncp, left;
    if (how == 'l')
        left = 0;
    else if (how == 'r')
        left = marg;
    else
        left = marg / 2 + (marg & width & 1);
    char f[4];
    size_t fn = gm_u8_enc(fill, f);
    gm_tbuf b = {0};
    int rc = 0;
    for (int64_t i = 0; !rc && i < left; i++)
        rc = gm_tbuf_put(c, &b, f, fn);
    if (!rc)
        rc = gm_tbuf_put(c, &b, s->p, s->len);
    for (int64_t i = left; !rc && i < marg; i++)
        rc = gm_tbuf_put(c, &b, f, fn);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out);
}

int gm_tstr_replace(gm_tctx *c, gm_tv s, gm_tv old, gm_tv nw, int64_t count, gm_tv *out)
{
    const gm_tstr *str = s.u.s, *o = old.u.s, *w = nw.u.s;
    gm_tbuf b = {0};
    int rc = 0;
    int64_t done = 0;
    if (o->len == 0) {
        /* "" matches before every character and at the end */
        size_t i = 0;
        for (;;) {
            if (count < 0 || done < count) {
                if ((rc = gm_tbuf_put(c, &b, w->p, w->len)))
                    break;
                done++;
            }
            if (i >= str->len)
                break;
            uint32_t cp;
            size_t k = gm_u8_dec(str->p + i, str->len - i, &cp);
            if ((rc = gm_tbuf_put(c, &b, str->p + i, k)))
                break;
            i += k;
        }
    } else {
        size_t i = 0;
        while (!rc) {
            const char *hit = (count < 0 || done < count) ? find_bytes(str->p + i, str->len - i, o->p, o->len) : NULL;
            if (!hit) {
                rc = gm_tbuf_put(c, &b, str->p + i, str->len - i);
                break;
            }
            size_t at = (size_t)(hit - str->p);
            if ((rc = gm_tbuf_put(c, &b, str->p + i, at - i)) || (rc = gm_tbuf_put(c, &b, w->p, w->len)))
                break;
            i = at + o->len;
            done++;
        }
    }
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    return gm_tv_str_buf(c, &b, out);
}

int gm_tstr_splitlines(gm_tctx *c, const gm_tstr *s, bool keepends, gm_tv *out)
{
    int rc = gm_tv_list(c, LK_LIST, 0, out);
    if (rc)
        return rc;
    size_t start = 0, i = 0;
    while (i < s->len) {
        uint32_t cp;
        size_t k = gm_u8_dec(s->p + i, s->len - i, &cp);
        if (!gm_u_islinebreak(cp)) {
            i += k;
            continue;
        }
        size_t eol = i + k;
        if (cp == '\r' && eol < s->len && s->p[eol] == '\n')
            eol++;
        gm_tv line;
        if ((rc = gm_tv_str(c, s->p + start, (keepends ? eol : i) - start, &line)) ||
            (rc = gm_tlist_push(c, out->u.l, line))) {
            gm_tv_decref(*out);
            return rc;
        }
        start = i = eol;
    }
    if (start < s->len) {
        gm_tv line;
        if ((rc = gm_tv_str(c, s->p + start, s->len - start, &line)) || (rc = gm_tlist_push(c, out->u.l, line))) {
            gm_tv_decref(*out);
            return rc;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ split */

static int push_piece(gm_tctx *c, gm_tlist *l, const char *p, size_t n, uint8_t f)
{
    gm_tv v;
    int rc = strv(c, p, n, f, &v);
    return rc ? rc : gm_tlist_push(c, l, v);
}

static int str_split(gm_tctx *c, gm_tv self, gm_tv sepv, int64_t maxsplit, bool right, gm_tv *out)
{
    const gm_tstr *s = self.u.s;
    uint8_t f = self.f & TVF_MARKUP;
    int rc = gm_tv_list(c, LK_LIST, 0, out);
    if (rc)
        return rc;
    gm_tlist *l = out->u.l;
    if (sepv.k == TV_NONE || sepv.k == TV_UNDEF) {
        /* runs of white space; no empty strings */
        if (!right) {
            size_t i = 0;
            int64_t splits = 0;
            while (!rc) {
                while (i < s->len) {
                    uint32_t cp;
                    size_t k = gm_u8_dec(s->p + i, s->len - i, &cp);
                    if (!gm_u_isspace(cp))
                        break;
                    i += k;
                }
                if (i >= s->len)
                    break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    rc = push_piece(c, l, s->p + i, s->len - i, f);
                    break;
                }
                size_t j = i;
                while (j < s->len) {
                    uint32_t cp;
                    size_t k = gm_u8_dec(s->p + j, s->len - j, &cp);
                    if (gm_u_isspace(cp))
                        break;
                    j += k;
                }
                rc = push_piece(c, l, s->p + i, j - i, f);
                splits++;
                i = j;
            }
        } else {
            size_t e = s->len;
            int64_t splits = 0;
            gm_tv tmp;
            if ((rc = gm_tv_list(c, LK_LIST, 0, &tmp))) {
                gm_tv_decref(*out);
                return rc;
            }
            while (!rc) {
                while (e > 0) {
                    size_t st = e - 1;
                    while (st > 0 && ((unsigned char)s->p[st] & 0xC0) == 0x80)
                        st--;
                    uint32_t cp;
                    gm_u8_dec(s->p + st, e - st, &cp);
                    if (!gm_u_isspace(cp))
                        break;
                    e = st;
                }
                if (e == 0)
                    break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    rc = push_piece(c, tmp.u.l, s->p, e, f);
                    break;
                }
                size_t b = e;
                while (b > 0) {
                    size_t st = b - 1;
                    while (st > 0 && ((unsigned char)s->p[st] & 0xC0) == 0x80)
                        st--;
                    uint32_t cp;
                    gm_u8_dec(s->p + st, b - st, &cp);
                    if (gm_u_isspace(cp))
                        break;
                    b = st;
                }
                rc = push_piece(c, tmp.u.l, s->p + b, e - b, f);
                splits++;
                e = b;
            }
            for (size_t i = tmp.u.l->n; !rc && i > 0; i--)
                rc = gm_tlist_push(c, l, gm_tv_ref(tmp.u.l->a[i - 1]));
            gm_tv_decref(tmp);
        }
        if (rc)
            gm_tv_decref(*out);
        return rc;
    }
    if ((rc = want_str(c, sepv, "separator"))) {
        gm_tv_decref(*out);
        return rc;
    }
    const gm_tstr *sep = sepv.u.s;
    if (sep->len == 0) {
        gm_tv_decref(*out);
        return gm_tfail(c, GM_ETEMPLATE, "empty separator");
    }
    if (!right) {
        size_t i = 0;
        int64_t splits = 0;
        while (!rc) {
            const char *hit = (maxsplit < 0 || splits < maxsplit) ? find_bytes(s->p + i, s->len - i, sep->p, sep->len) : NULL;
            if (!hit) {
                rc = push_piece(c, l, s->p + i, s->len - i, f);
                break;
            }
            rc = push_piece(c, l, s->p + i, (size_t)(hit - s->p) - i, f);
            i = (size_t)(hit - s->p) + sep->len;
            splits++;
        }
    } else {
        gm_tv tmp;
        if ((rc = gm_tv_list(c, LK_LIST, 0, &tmp))) {
            gm_tv_decref(*out);
            return rc;
        }
        size_t e = s->len;
        int64_t splits = 0;
        while (!rc) {
            const char *hit = (maxsplit < 0 || splits < maxsplit) ? rfind_bytes(s->p, e, sep->p, sep->len) : NULL;
            if (!hit) {
                rc = push_piece(c, tmp.u.l, s->p, e, f);
                break;
            }
            size_t at = (size_t)(hit - s->p);
            rc = push_piece(c, tmp.u.l, s->p + at + sep->len, e - at - sep->len, f);
            e = at;
            splits++;
        }
        for (size_t i = tmp.u.l->n; !rc && i > 0; i--)
            rc = gm_tlist_push(c, l, gm_tv_ref(tmp.u.l->a[i - 1]));
        gm_tv_decref(tmp);
    }
    if (rc)
        gm_tv_decref(*out);
    return rc;
}

/* ------------------------------------------------------------------ method calls */

static int bind(gm_tctx *c, const gm_targs *a, int mid, size_t n, const char *const *names, gm_tv *slot, bool *set)
{
    return gm_targs_bind(c, a, gm_tmethod_name(mid), n, names, slot, set);
}

static int str_pred(const gm_tstr *s, int mid, gm_tv *out)
{
    bool all = s->len > 0, any_cased = false, prev_cased = false, title_ok = true;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp;
        i += gm_u8_dec(s->p + i, s->len - i, &cp);
        switch (mid) {
        case M_ISDIGIT:
        case M_ISNUMERIC:
        case M_ISDECIMAL: all = all && gm_u_isdigit(cp); break;
        case M_ISALPHA: all = all && gm_u_isalpha(cp); break;
        case M_ISALNUM: all = all && (gm_u_isalpha(cp) || gm_u_isdigit(cp)); break;
        case M_ISSPACE: all = all && gm_u_isspace(cp); break;
        case M_ISIDENTIFIER:
            all = all && (cp == '_' || gm_u_isalpha(cp) || (i > 1 && gm_u_isdigit(cp)));
            break;
        case M_ISUPPER:
            if (gm_u_islower(cp) || gm_u_istitle_char(cp))
                all = false;
            any_cased |= gm_u_isupper(cp);
            break;
        case M_ISLOWER:
            if (gm_u_isupper(cp) || gm_u_istitle_char(cp))
                all = false;
            any_cased |= gm_u_islower(cp);
            break;
        case M_ISTITLE:
            if (gm_u_isupper(cp) || gm_u_istitle_char(cp)) {
                if (prev_cased)
                    title_ok = false;
                any_cased = true;
                prev_cased = true;
            } else if (gm_u_islower(cp)) {
                if (!prev_cased)
                    title_ok = false;
                prev_cased = true;
            } else {
                prev_cased = false;
            }
            break;
        default: break;
        }
    }
    if (mid == M_ISUPPER || mid == M_ISLOWER)
        all = all && any_cased;
    if (mid == M_ISTITLE)
        all = title_ok && any_cased;
    *out = gm_tv_bool(all);
    return 0;
}

static int str_join(gm_tctx *c, gm_tv self, gm_tv items, gm_tv *out)
{
    gm_tv l;
    int rc = gm_tv_iter(c, items, &l);
    if (rc)
        return rc;
    bool markup = self.f & TVF_MARKUP;
    gm_tbuf b = {0};
    for (size_t i = 0; !rc && i < l.u.l->n; i++) {
        gm_tv e = l.u.l->a[i];
        if (e.k != TV_STR) {
            rc = gm_tfail(c, GM_ETEMPLATE, "sequence item %zu: expected str instance, %s found", i, gm_tv_typename(e));
            break;
        }
        if (i)
            rc = gm_tbuf_put(c, &b, self.u.s->p, self.u.s->len);
        if (!rc && markup && !(e.f & TVF_MARKUP)) {
            gm_tv esc;
            if (!(rc = gm_tv_escape(c, e, &esc))) {
                rc = gm_tbuf_put(c, &b, esc.u.s->p, esc.u.s->len);
                gm_tv_decref(esc);
            }
        } else if (!rc) {
            rc = gm_tbuf_put(c, &b, e.u.s->p, e.u.s->len);
        }
    }
    gm_tv_decref(l);
    if (rc) {
        gm_tbuf_free(&b);
        return rc;
    }
    if ((rc = gm_tv_str_buf(c, &b, out)))
        return rc;
    out->f = markup ? TVF_MARKUP : 0;
    return 0;
}

static int affix(gm_tctx *c, const gm_tstr *s, gm_tv pre, size_t b0, size_t b1, bool end, bool *hit)
{
    *hit = false;
    if (b0 > b1)
        return 0;
    if (pre.k == TV_LIST && pre.u.l->lk == LK_TUPLE) {
        for (size_t i = 0; i < pre.u.l->n; i++) {
            int rc = affix(c, s, pre.u.l->a[i], b0, b1, end, hit);
            if (rc || *hit)
                return rc;
        }
        return 0;
    }
    if (pre.k != TV_STR)
        return gm_tfail(c, GM_ETEMPLATE, "%s first arg must be str or a tuple of str, not %s",
                        end ? "endswith" : "startswith", gm_tv_typename(pre));
    size_t n = pre.u.s->len;
    if (n > b1 - b0)
        return 0;
    *hit = memcmp(s->p + (end ? b1 - n : b0), pre.u.s->p, n) == 0;
    return 0;
}

static int str_method(gm_tctx *c, gm_tv self, int mid, const gm_targs *a, gm_tv *out)
{
    const gm_tstr *s = self.u.s;
    gm_tv slot[3] = {gm_tv_none(), gm_tv_none(), gm_tv_none()};
    bool set[3];
    int rc;
    static const char *const n_chars[] = {"chars"};
    static const char *const n_split[] = {"sep", "maxsplit"};
    static const char *const n_affix[] = {"prefix", "start", "end"};
    static const char *const n_find[] = {"sub", "start", "end"};
    static const char *const n_repl[] = {"old", "new", "count"};
    static const char *const n_pad[] = {"width", "fillchar"};
    static const char *const n_one[] = {"x"};
    static const char *const n_keep[] = {"keepends"};
    switch (mid) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        if ((rc = bind(c, a, mid, 1, n_chars, slot, set)))
            return rc;
        return gm_tstr_strip(c, self, slot[0], mid == M_STRIP ? 3 : mid == M_LSTRIP ? 1 : 2, out);
    case M_SPLIT:
    case M_RSPLIT: {
        slot[1] = gm_tv_int(-1);
        if ((rc = bind(c, a, mid, 2, n_split, slot, set)))
            return rc;
        int64_t maxsplit;
        if ((rc = want_int(c, slot[1], &maxsplit)))
            return rc;
        return str_split(c, self, slot[0], maxsplit, mid == M_RSPLIT, out);
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        if ((rc = bind(c, a, mid, 3, n_affix, slot, set)))
            return rc;
        if (!set[0])
            return gm_tfail(c, GM_ETEMPLATE, "%s() takes at least 1 argument (0 given)", gm_tmethod_name(mid));
        size_t b0, b1;
        bool hit;
        if ((rc = range_args(c, s, &slot[1], &slot[2], &b0, &b1)) ||
            (rc = affix(c, s, slot[0], b0, b1, mid == M_ENDSWITH, &hit)))
            return rc;
        *out = gm_tv_bool(hit);
        return 0;
    }
    case M_UPPER: return gm_tstr_case(c, self, 'u', out);
    case M_LOWER: return gm_tstr_case(c, self, 'l', out);
    case M_CASEFOLD: return gm_tstr_case(c, self, 'f', out);
    case M_TITLE: return gm_tstr_case(c, self, 't', out);
    case M_CAPITALIZE: return gm_tstr_case(c, self, 'c', out);
    case M_SWAPCASE: return gm_tstr_case(c, self, 's', out);
    case M_REPLACE: {
        slot[2] = gm_tv_int(-1);
        if ((rc = bind(c, a, mid, 3, n_repl, slot, set)))
            return rc;
        int64_t count;
        if (!set[0] || !set[1])
            return gm_tfail(c, GM_ETEMPLATE, "replace expected at least 2 arguments");
        if ((rc = want_str(c, slot[0], "replace() argument 1")) || (rc = want_str(c, slot[1], "replace() argument 2")) ||
            (rc = want_int(c, slot[2], &count)))
            return rc;
        if ((rc = gm_tstr_replace(c, self, slot[0], slot[1], count, out)))
            return rc;
        out->f = self.f & TVF_MARKUP;
        return 0;
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX:
    case M_COUNT: {
        if ((rc = bind(c, a, mid, 3, n_find, slot, set)))
            return rc;
        if (!set[0])
            return gm_tfail(c, GM_ETEMPLATE, "%s() takes at least 1 argument (0 given)", gm_tmethod_name(mid));
        if ((rc = want_str(c, slot[0], "substring")))
            return rc;
        size_t b0, b1;
        if ((rc = range_args(c, s, &slot[1], &slot[2], &b0, &b1)))
            return rc;
        const gm_tstr *sub = slot[0].u.s;
        if (mid == M_COUNT) {
            int64_t n = 0;
            if (b0 <= b1) {
                if (sub->len == 0) {
                    n = (int64_t)(cp_index(s, b1) - cp_index(s, b0)) + 1;
                } else {
                    for (size_t i = b0; i + sub->len <= b1;) {
                        const char *hit = find_bytes(s->p + i, b1 - i, sub->p, sub->len);
                        if (!hit)
                            break;
                        n++;
                        i = (size_t)(hit - s->p) + sub->len;
                    }
                }
            }
            *out = gm_tv_int(n);
            return 0;
        }
        const char *hit = NULL;
        if (b0 <= b1)
            hit = (mid == M_FIND || mid == M_INDEX) ? find_bytes(s->p + b0, b1 - b0, sub->p, sub->len)
                                                    : rfind_bytes(s->p + b0, b1 - b0, sub->p, sub->len);
        if (!hit) {
            if (mid == M_INDEX || mid == M_RINDEX)
                return gm_tfail(c, GM_ETEMPLATE, "substring not found");
            *out = gm_tv_int(-1);
            return 0;
        }
        *out = gm_tv_int((int64_t)cp_index(s, (size_t)(hit - s->p)));
        return 0;
    }
    case M_JOIN:
        if ((rc = bind(c, a, mid, 1, n_one, slot, set)))
            return rc;
        if (!set[0])
            return gm_tfail(c, GM_ETEMPLATE, "join() takes exactly one argument (0 given)");
        return str_join(c, self, slot[0], out);
    case M_FORMAT: return gm_tformat(c, s, a, out);
    case M_FORMAT_MAP: {
        if (a->npos != 1 || a->nkw || a->pos[0].k != TV_DICT)
            return gm_tfail(c, GM_ETEMPLATE, "format_map() takes exactly one mapping");
        gm_targs fa = {0};
        fa.nkw = a->pos[0].u.m->n;
        fa.kwn = a->pos[0].u.m->k;
        fa.kwv = a->pos[0].u.m->v;
        for (size_t i = 0; i < fa.nkw; i++)
            if (fa.kwn[i].k != TV_STR)
                return gm_tfail(c, GM_ETEMPLATE, "format_map() keys must be strings");
        return gm_tformat(c, s, &fa, out);
    }
    case M_ISDIGIT: case M_ISALPHA: case M_ISALNUM: case M_ISSPACE: case M_ISUPPER:
    case M_ISLOWER: case M_ISNUMERIC: case M_ISDECIMAL: case M_ISTITLE: case M_ISIDENTIFIER:
        if (a->npos || a->nkw)
            return gm_tfail(c, GM_ETEMPLATE, "%s() takes no arguments", gm_tmethod_name(mid));
        return str_pred(s, mid, out);
    case M_ZFILL: {
        if ((rc = bind(c, a, mid, 1, n_pad, slot, set)))
            return rc;
        int64_t w;
        if ((rc = want_int(c, slot[0], &w)))
            return rc;
        if (w <= (int64_t)s->ncp) {
            *out = gm_tv_ref(self);
            return 0;
        }
        gm_tv padded;
        bool sign = s->len && (s->p[0] == '-' || s->p[0] == '+');
        if ((rc = gm_tstr_pad(c, s, w, '0', 'r', &padded)))
            return rc;
        if (sign) {
            /* the sign goes first: "-42".zfill(5) == "-0042" */
            char *p = padded.u.s->p;
            size_t zeros = (size_t)(w - (int64_t)s->ncp);
            p[0] = s->p[0];
            p[zeros] = '0';
        }
        *out = padded;
        return 0;
    }
    case M_CENTER:
    case M_LJUST:
    case M_RJUST: {
        if ((rc = bind(c, a, mid, 2, n_pad, slot, set)))
            return rc;
        int64_t w;
        uint32_t fill = ' ';
        if ((rc = want_int(c, slot[0], &w)))
            return rc;
        if (set[1]) {
            if (slot[1].k != TV_STR || slot[1].u.s->ncp != 1)
                return gm_tfail(c, GM_ETEMPLATE, "The fill character must be exactly one character long");
            gm_u8_dec(slot[1].u.s->p, slot[1].u.s->len, &fill);
        }
        return gm_tstr_pad(c, s, w, fill, mid == M_CENTER ? 'c' : mid == M_LJUST ? 'l' : 'r', out);
    }
    case M_SPLITLINES:
        slot[0] = gm_tv_bool(false);
        if ((rc = bind(c, a, mid, 1, n_keep, slot, set)))
            return rc;
        return gm_tstr_splitlines(c, s, gm_tv_truthy(slot[0]), out);
    case M_PARTITION:
    case M_RPARTITION: {
        if ((rc = bind(c, a, mid, 1, n_one, slot, set)))
            return rc;
        if ((rc = want_str(c, slot[0], "separator")))
            return rc;
        const gm_tstr *sep = slot[0].u.s;
        if (sep->len == 0)
            return gm_tfail(c, GM_ETEMPLATE, "empty separator");
        const char *hit = mid == M_PARTITION ? find_bytes(s->p, s->len, sep->p, sep->len)
                                             : rfind_bytes(s->p, s->len, sep->p, sep->len);
        if ((rc = gm_tv_list(c, LK_TUPLE, 3, out)))
            return rc;
        gm_tlist *l = out->u.l;
        uint8_t f = self.f & TVF_MARKUP;
        if (!hit) {
            if (mid == M_PARTITION)
                rc = push_piece(c, l, s->p, s->len, f);
            if (!rc)
                rc = push_piece(c, l, "", 0, f);
            if (!rc)
                rc = push_piece(c, l, "", 0, f);
            if (!rc && mid == M_RPARTITION)
                rc = push_piece(c, l, s->p, s->len, f);
        } else {
            size_t at = (size_t)(hit - s->p);
            if (!(rc = push_piece(c, l, s->p, at, f)) && !(rc = push_piece(c, l, sep->p, sep->len, f)))
                rc = push_piece(c, l, s->p + at + sep->len, s->len - at - sep->len, f);
        }
        if (rc)
            gm_tv_decref(*out);
        return rc;
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        if ((rc = bind(c, a, mid, 1, n_one, slot, set)))
            return rc;
        if ((rc = want_str(c, slot[0], "argument")))
            return rc;
        const gm_tstr *x = slot[0].u.s;
        if (x->len <= s->len && x->len &&
            memcmp(mid == M_REMOVEPREFIX ? s->p : s->p + s->len - x->len, x->p, x->len) == 0)
            return strv(c, mid == M_REMOVEPREFIX ? s->p + x->len : s->p, s->len - x->len, self.f & TVF_MARKUP, out);
        *out = gm_tv_ref(self);
        return 0;
    }
    default:
        return gm_tfail(c, GM_EUNSUPPORTED, "str.%s() is not supported", gm_tmethod_name(mid));
    }
}

static int seq_method(gm_tctx *c, gm_tv self, int mid, const gm_targs *a, gm_tv *out)
{
    gm_tlist *l = self.u.l;
    int rc;
    if (mid == M_POP || mid == M_CLEAR) {
        if (a->nkw || a->npos > (mid == M_POP ? 1u : 0u))
            return gm_tfail(c, GM_ETEMPLATE, "%s() takes at most %d argument(s)", gm_tmethod_name(mid), mid == M_POP);
        if (mid == M_CLEAR) {
            size_t n = l->n;
            l->n = 0;
            for (size_t i = 0; i < n; i++)
                gm_tv_decref(l->a[i]);
            *out = gm_tv_none();
            return 0;
        }
        int64_t i = -1;
        if (a->npos && (rc = want_int(c, a->pos[0], &i)))
            return rc;
        if (l->n == 0)
            return gm_tfail(c, GM_ETEMPLATE, "pop from empty list");
        if (i < 0)
            i += (int64_t)l->n;
        if (i < 0 || i >= (int64_t)l->n)
            return gm_tfail(c, GM_ETEMPLATE, "pop index out of range");
        *out = l->a[i];
        memmove(l->a + i, l->a + i + 1, (l->n - (size_t)i - 1) * sizeof *l->a);
        l->n--;
        return 0;
    }
    if (mid == M_COPY) {
        if ((rc = gm_tv_list(c, LK_LIST, l->n, out)))
            return rc;
        for (size_t i = 0; i < l->n; i++)
            out->u.l->a[out->u.l->n++] = gm_tv_ref(l->a[i]);
        return 0;
    }
    if (a->npos < 1 || a->nkw)
        return gm_tfail(c, GM_ETEMPLATE, "%s() takes at least 1 argument", gm_tmethod_name(mid));
    int64_t n = 0, start = 0, stop = (int64_t)l->n;
    if (mid == M_INDEX) {
        if (a->npos > 1 && (rc = want_int(c, a->pos[1], &start)))
            return rc;
        if (a->npos > 2 && (rc = want_int(c, a->pos[2], &stop)))
            return rc;
        if (start < 0)
            start = start + (int64_t)l->n < 0 ? 0 : start + (int64_t)l->n;
        if (stop < 0)
            stop = stop + (int64_t)l->n < 0 ? 0 : stop + (int64_t)l->n;
        if (stop > (int64_t)l->n)
            stop = (int64_t)l->n;
    }
    for (int64_t i = start; i < stop; i++) {
        bool eq;
        if ((rc = gm_tv_eq(c, l->a[i], a->pos[0], &eq)))
            return rc;
        if (eq && mid == M_INDEX) {
            *out = gm_tv_int(i);
            return 0;
        }
        n += eq;
    }
    if (mid == M_INDEX)
        return gm_tfail(c, GM_ETEMPLATE, "value is not in list");
    *out = gm_tv_int(n);
    return 0;
}

static int dict_view(gm_tctx *c, const gm_tdict *d, uint8_t lk, gm_tv *out)
{
    int rc = gm_tv_list(c, lk, d->n, out);
    if (rc)
        return rc;
    for (size_t i = 0; i < d->n; i++) {
        gm_tv e;
        if (lk == LK_ITEMS) {
            if ((rc = gm_tv_list(c, LK_TUPLE, 2, &e))) {
                gm_tv_decref(*out);
                return rc;
            }
            e.u.l->a[0] = gm_tv_ref(d->k[i]);
            e.u.l->a[1] = gm_tv_ref(d->v[i]);
            e.u.l->n = 2;
        } else {
            e = gm_tv_ref(lk == LK_KEYS ? d->k[i] : d->v[i]);
        }
        out->u.l->a[out->u.l->n++] = e;
    }
    return gm_tstep_out(c, d->n / 16, out);
}

static int dict_method(gm_tctx *c, gm_tv self, int mid, const gm_targs *a, gm_tv *out)
{
    const gm_tdict *d = self.u.m;
    switch (mid) {
    case M_ITEMS: return dict_view(c, d, LK_ITEMS, out);
    case M_KEYS: return dict_view(c, d, LK_KEYS, out);
    case M_VALUES: return dict_view(c, d, LK_VALUES, out);
    case M_GET: {
        if (a->npos < 1 || a->npos > 2 || a->nkw)
            return gm_tfail(c, GM_ETEMPLATE, "get expected 1 or 2 arguments");
        if (!gm_tv_hashable(a->pos[0]))
            return gm_tfail(c, GM_ETEMPLATE, "unhashable type: '%s'", gm_tv_typename(a->pos[0]));
        gm_tv *v = gm_tdict_get(d, a->pos[0]);
        *out = v ? gm_tv_ref(*v) : a->npos > 1 ? gm_tv_ref(a->pos[1]) : gm_tv_none();
        return 0;
    }
    case M_COPY: {
        int rc = gm_tv_dict(c, out);
        for (size_t i = 0; !rc && i < d->n; i++)
            rc = gm_tdict_set(c, out->u.m, gm_tv_ref(d->k[i]), gm_tv_ref(d->v[i]));
        if (rc)
            gm_tv_decref(*out);
        return rc;
    }
    default:
        return gm_tfail(c, GM_EUNSUPPORTED, "dict.%s() is not supported", gm_tmethod_name(mid));
    }
}

int gm_tmethod_call(gm_tctx *c, gm_tv self, int mid, const gm_targs *a, gm_tv *out)
{
    int has = gm_tmethod_has(self, mid);
    if (has == 2)
        return gm_tfail(c, GM_ETEMPLATE, "access to attribute '%s' of '%s' object is unsafe (the sandbox refuses it)",
                        gm_tmethod_name(mid), gm_tv_typename(self));
    if (has == 0)
        return gm_tfail(c, GM_ETEMPLATE, "'%s' object has no attribute '%s'", gm_tv_typename(self), gm_tmethod_name(mid));
    switch (self.k) {
    case TV_STR: return str_method(c, self, mid, a, out);
    case TV_LIST: return seq_method(c, self, mid, a, out);
    case TV_DICT: return dict_method(c, self, mid, a, out);
    case TV_CYCLER: {
        gm_tcycler *cy = (gm_tcycler *)self.u.o;
        if (mid == M_RESET) {
            cy->pos = 0;
            *out = gm_tv_none();
            return 0;
        }
        *out = gm_tv_ref(cy->items->a[cy->pos]);
        cy->pos = (cy->pos + 1) % cy->items->n;
        return 0;
    }
    default: return gm_tfail(c, GM_ETEMPLATE, "no such method");
    }
}

/* ------------------------------------------------------------------ globals */

static const char *const global_names[G_NGLOBALS] = {
    [G_RANGE] = "range", [G_NAMESPACE] = "namespace", [G_DICT] = "dict",
    [G_RAISE] = "raise_exception", [G_STRFTIME] = "strftime_now", [G_CYCLER] = "cycler",
    [G_JOINER] = "joiner", [G_LIPSUM] = "lipsum",
};

int gm_tglobal_id(const char *name, size_t n)
{
    for (int i = 0; i < G_NGLOBALS; i++)
        if (strlen(global_names[i]) == n && memcmp(global_names[i], name, n) == 0)
            return i;
    return -1;
}

#define MAX_RANGE 100000 /* jinja2.sandbox.MAX_RANGE */

static int g_range(gm_tctx *c, const gm_targs *a, gm_tv *out)
{
    if (a->nkw)
        return gm_tfail(c, GM_ETEMPLATE, "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3)
        return gm_tfail(c, GM_ETEMPLATE, "range expected at most 3 arguments, got %zu", a->npos);
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < a->npos; i++) {
        int rc = want_int(c, a->pos[i], &v[i]);
        if (rc)
            return rc;
    }
    int64_t start = 0, stop, step = 1;
    if (a->npos == 1) {
        stop = v[0];
    } else {
        start = v[0];
        stop = v[1];
        if (a->npos == 3)
            step = v[2];
    }
    if (step == 0)
        return gm_tfail(c, GM_ETEMPLATE, "range() arg 3 must not be zero");
    /* the length, in unsigned arithmetic so that no bound can overflow */
    uint64_t n = 0;
    if (step > 0 && stop > start) {
        uint64_t diff = (uint64_t)stop - (uint64_t)start;
        n = diff / (uint64_t)step + (diff % (uint64_t)step != 0);
    } else if (step < 0 && start > stop) {
        uint64_t diff = (uint64_t)start - (uint64_t)stop, st = (uint64_t)0 - (uint64_t)step;
        n = diff / st + (diff % st != 0);
    }
    if (n > MAX_RANGE)
        return gm_tfail(c, GM_ERANGE, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    int rc = gm_tv_list(c, LK_RANGE, (size_t)n, out);
    if (rc)
        return rc;
    for (uint64_t i = 0; i < n; i++) /* each value lies between start and stop */
        out->u.l->a[out->u.l->n++] = gm_tv_int((int64_t)((uint64_t)start + i * (uint64_t)step));
    out->u.l->r0 = start;
    out->u.l->r1 = stop;
    out->u.l->rs = step;
    return gm_tstep_out(c, n / 16, out);
}

/* dict(*args, **kwargs) into d: a mapping or an iterable of pairs, then the keywords. */
static int fill_dict(gm_tctx *c, gm_tdict *d, const gm_targs *a, const char *fname)
{
    int rc = 0;
    if (a->npos > 1)
        return gm_tfail(c, GM_ETEMPLATE, "%s expected at most 1 argument, got %zu", fname, a->npos);
    if (a->npos == 1) {
        gm_tv src = a->pos[0];
        if (src.k == TV_UNDEF) /* dict() asks it for .keys */
            return gm_tundef_error(c, src);
        if (src.k == TV_DICT) {
            for (size_t i = 0; !rc && i < src.u.m->n; i++)
                rc = gm_tdict_set(c, d, gm_tv_ref(src.u.m->k[i]), gm_tv_ref(src.u.m->v[i]));
        } else {
            gm_tv l;
            if ((rc = gm_tv_iter(c, src, &l)))
                return rc;
            for (size_t i = 0; !rc && i < l.u.l->n; i++) {
                gm_tv pair;
                if ((rc = gm_tv_iter(c, l.u.l->a[i], &pair)))
                    break;
                if (pair.u.l->n != 2)
                    rc = gm_tfail(c, GM_ETEMPLATE, "dictionary update sequence element #%zu has length %zu; 2 is required",
                                  i, pair.u.l->n);
                else if (!gm_tv_hashable(pair.u.l->a[0]))
                    rc = gm_tfail(c, GM_ETEMPLATE, "unhashable type: '%s'", gm_tv_typename(pair.u.l->a[0]));
                else
                    rc = gm_tdict_set(c, d, gm_tv_ref(pair.u.l->a[0]), gm_tv_ref(pair.u.l->a[1]));
                gm_tv_decref(pair);
            }
            gm_tv_decref(l);
        }
    }
    for (size_t i = 0; !rc && i < a->nkw; i++)
        rc = gm_tdict_set(c, d, gm_tv_ref(a->kwn[i]), gm_tv_ref(a->kwv[i]));
    return rc;
}

int gm_tglobal_call(gm_tctx *c, int id, const gm_targs *a, gm_tv *out)
{
    int rc;
    switch (id) {
    case G_RANGE: return g_range(c, a, out);
    case G_NAMESPACE:
        if ((rc = gm_tv_ns(c, out)))
            return rc;
        if ((rc = fill_dict(c, ((gm_tns *)out->u.o)->d, a, "namespace")))
            gm_tv_decref(*out);
        return rc;
    case G_DICT:
        if ((rc = gm_tv_dict(c, out)))
            return rc;
        if ((rc = fill_dict(c, out->u.m, a, "dict")))
            gm_tv_decref(*out);
        return rc;
    case G_RAISE: {
        gm_tv msg = a->npos ? a->pos[0] : a->nkw ? a->kwv[0] : gm_tv_none();
        gm_tv s;
        if ((rc = gm_tv_tostr(c, msg, &s)))
            return rc;
        /* the template author's message, as transformers raises it */
        rc = gm_err_set(c->err, GM_ETEMPLATE, "%s", s.u.s->p);
        gm_tv_decref(s);
        return rc;
    }
    case G_STRFTIME:
        if (a->npos != 1 || a->nkw || a->pos[0].k != TV_STR)
            return gm_tfail(c, GM_ETEMPLATE, "strftime_now() takes one format string");
        return gm_tstrftime(c, a->pos[0].u.s, out);
    case G_CYCLER: {
        if (a->npos == 0)
            return gm_tfail(c, GM_ETEMPLATE, "at least one item has to be provided");
        gm_tcycler *cy = calloc(1, sizeof *cy);
        if (!cy)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        gm_tv l;
        if ((rc = gm_tv_list(c, LK_TUPLE, a->npos, &l))) {
            free(cy);
            return rc;
        }
        for (size_t i = 0; i < a->npos; i++)
            l.u.l->a[l.u.l->n++] = gm_tv_ref(a->pos[i]);
        cy->h.rc = 1;
        cy->h.kind = TV_CYCLER;
        cy->items = l.u.l;
        *out = (gm_tv){.k = TV_CYCLER};
        out->u.o = &cy->h;
        return 0;
    }
    case G_JOINER: {
        static const char *const names[] = {"sep"};
        gm_tv slot[1] = {gm_tv_none()};
        bool set[1];
        if ((rc = gm_targs_bind(c, a, "joiner", 1, names, slot, set)))
            return rc;
        gm_tjoiner *j = calloc(1, sizeof *j);
        if (!j)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        j->h.rc = 1;
        j->h.kind = TV_JOINER;
        if (set[0]) {
            j->sep = gm_tv_ref(slot[0]);
        } else if ((rc = gm_tv_str(c, ", ", 2, &j->sep))) {
            free(j);
            return rc;
        }
        *out = (gm_tv){.k = TV_JOINER};
        out->u.o = &j->h;
        return 0;
    }
    default:
        return gm_tfail(c, GM_EUNSUPPORTED, "the global '%s' is not supported",
                        id >= 0 && id < G_NGLOBALS ? global_names[id] : "?");
    }
}
