/* template/lexer: template source -> tokens, as Jinja2's lexer splits it with trim_blocks and
 * lstrip_blocks on.
 *
 * What Jinja does and this copies: newlines are normalized to "\n" and one trailing newline
 * is dropped before anything else; "{%-"/"-%}" strip all white space (Unicode white space, as
 * Python's \s and str.rstrip see it) up to the neighbouring text; "{%+"/"+%}" turn lstrip and
 * trim off for that side; lstrip_blocks removes the white space between the start of a line and
 * a block or comment tag (not a {{ }}) when nothing else is on that line before it; trim_blocks
 * removes the one newline right after a block or comment tag; inside a tag, closing delimiters
 * are ignored while brackets are open ("{{ {'a': {'b': 1}} }}"). */
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

typedef struct lexer {
    gm_ttoks *out;
    const char *s;
    size_t n, pos;
    int line;
    bool line_starting;
    gm_err *err;
} lexer;

static int lfail(lexer *L, int line, const char *msg, const char *arg)
{
    if (arg)
        return gm_err_set(L->err, GM_EFORMAT, "line %d: %s '%s'", line, msg, arg);
    return gm_err_set(L->err, GM_EFORMAT, "line %d: %s", line, msg);
}

static int emit(lexer *L, uint8_t type, uint8_t op, const char *p, size_t n, int line, gm_ttok **tok)
{
    gm_ttoks *o = L->out;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        gm_ttok *t = realloc(o->t, cap * sizeof *t);
        if (!t)
            return gm_err_set(L->err, GM_ENOMEM, "template: out of memory");
        o->t = t;
        o->cap = cap;
    }
    gm_ttok *t = &o->t[o->n++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->op = op;
    t->p = p;
    t->n = n;
    t->line = line;
    if (tok)
        *tok = t;
    return 0;
}

static void advance(lexer *L, size_t to)
{
    for (size_t i = L->pos; i < to; i++)
        if (L->s[i] == '\n')
            L->line++;
    L->pos = to;
}

/* Length of the Unicode white space run at p (Python's \s). */
static size_t ws_run(const char *s, size_t n, size_t i)
{
    size_t j = i;
    while (j < n) {
        uint32_t cp;
        size_t k = gm_u8_dec(s + j, n - j, &cp);
        if (!gm_u_isspace(cp))
            break;
        j += k;
    }
    return j - i;
}

/* Length of text[0..n) after str.rstrip(). */
static size_t rstrip_len(const char *s, size_t n)
{
    while (n > 0) {
        size_t st = n - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80)
            st--;
        uint32_t cp;
        gm_u8_dec(s + st, n - st, &cp);
        if (!gm_u_isspace(cp))
            break;
        n = st;
    }
    return n;
}

/* Emits the text before a tag, stripped as the tag's sign and lstrip_blocks say. */
static int emit_text(lexer *L, size_t from, size_t to, char sign, bool lstrip_ok)
{
    size_t n = to - from;
    const char *t = L->s + from;
    if (sign == '-') {
        n = rstrip_len(t, n);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = 0;
        for (size_t i = n; i > 0; i--)
            if (t[i - 1] == '\n') {
                l_pos = i;
                break;
            }
        if ((l_pos > 0 || L->line_starting) && l_pos + ws_run(t, n, l_pos) == n)
            n = l_pos;
    }
    int line = L->line;
    advance(L, to);
    return n ? emit(L, TK_DATA, 0, t, n, line, NULL) : 0;
}

static bool at(const lexer *L, size_t i, const char *lit)
{
    size_t k = strlen(lit);
    return i + k <= L->n && memcmp(L->s + i, lit, k) == 0;
}

/* "{%" [-+]? \s* "raw" \s* ("-%}" \s* | "%}") at i: its length, or 0. */
static size_t raw_begin(const lexer *L, size_t i, char *sign)
{
    size_t j = i + 2;
    *sign = 0;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
        *sign = L->s[j++];
    j += ws_run(L->s, L->n, j);
    if (!at(L, j, "raw"))
        return 0;
    j += 3;
    j += ws_run(L->s, L->n, j);
    if (at(L, j, "-%}")) {
        j += 3;
        j += ws_run(L->s, L->n, j);
        return j - i;
    }
    if (at(L, j, "%}"))
        return j + 2 - i;
    return 0;
}

static int lex_raw(lexer *L, size_t after_begin)
{
    int line0 = L->line;
    L->line_starting = L->s[after_begin - 1] == '\n';
    advance(L, after_begin);
    if (L->pos == L->n)
        return 0; /* "{% raw %}" at the very end: Jinja's lexer just stops */
    for (size_t i = L->pos; i + 1 < L->n; i++) {
        if (L->s[i] != '{' || L->s[i + 1] != '%')
            continue;
        size_t j = i + 2;
        char sign = 0;
        if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
            sign = L->s[j++];
        j += ws_run(L->s, L->n, j);
        if (!at(L, j, "endraw"))
            continue;
        j += 6;
        j += ws_run(L->s, L->n, j);
        size_t end;
        if (at(L, j, "+%}")) {
            end = j + 3;
        } else if (at(L, j, "-%}")) {
            end = j + 3;
            end += ws_run(L->s, L->n, end);
        } else if (at(L, j, "%}")) {
            end = j + 2;
            if (end < L->n && L->s[end] == '\n')
                end++;
        } else {
            continue;
        }
        int rc = emit_text(L, L->pos, i, sign, true);
        if (rc)
            return rc;
        L->line_starting = L->s[end - 1] == '\n';
        advance(L, end);
        return 0;
    }
    return lfail(L, line0, "missing end of raw directive", NULL);
}

static int lex_comment(lexer *L)
{
    int line0 = L->line;
    if (L->pos == L->n)
        return 0; /* "{#" as the very last thing: Jinja's lexer just stops */
    for (size_t i = L->pos; i + 1 < L->n; i++) {
        if (L->s[i] != '#' || L->s[i + 1] != '}')
            continue;
        size_t end = i + 2;
        if (i > L->pos && L->s[i - 1] == '-') {
            end += ws_run(L->s, L->n, end);
        } else if (i > L->pos && L->s[i - 1] == '+') {
            /* no trim */
        } else if (end < L->n && L->s[end] == '\n') {
            end++;
        }
        L->line_starting = L->s[end - 1] == '\n';
        advance(L, end);
        return 0;
    }
    return lfail(L, line0, "missing end of comment tag", NULL);
}

static bool isdig(char ch) { return ch >= '0' && ch <= '9'; }

/* \d+(_\d+)* at i: end, or i when none. */
static size_t digits(const lexer *L, size_t i)
{
    if (i >= L->n || !isdig(L->s[i]))
        return i;
    size_t j = i;
    for (;;) {
        while (j < L->n && isdig(L->s[j]))
            j++;
        if (j + 1 < L->n && L->s[j] == '_' && isdig(L->s[j + 1])) {
            j++;
            continue;
        }
        return j;
    }
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static int lex_number(lexer *L, size_t i, gm_ttok **tok_out)
{
    const char *s = L->s;
    size_t e1 = digits(L, i), end = 0;
    bool is_float = false;
    if (!(i > 0 && s[i - 1] == '.')) {
        /* float: D(.D)?e[+-]?D | D.D */
        size_t j = e1;
        size_t frac_end = j;
        if (j < L->n && s[j] == '.' && digits(L, j + 1) > j + 1)
            frac_end = digits(L, j + 1);
        size_t k = frac_end;
        if (k < L->n && (s[k] == 'e' || s[k] == 'E')) {
            size_t m = k + 1;
            if (m < L->n && (s[m] == '+' || s[m] == '-'))
                m++;
            size_t de = digits(L, m);
            if (de > m) {
                end = de;
                is_float = true;
            }
        }
        if (!is_float && frac_end > j) {
            end = frac_end;
            is_float = true;
        }
    }
    char buf[128];
    if (is_float) {
        size_t bn = 0;
        for (size_t k = i; k < end && bn + 1 < sizeof buf; k++)
            if (s[k] != '_')
                buf[bn++] = s[k];
        buf[bn] = 0;
        gm_ttok *t;
        int rc = emit(L, TK_FLOAT, 0, s + i, end - i, L->line, &t);
        if (rc)
            return rc;
        t->d = strtod(buf, NULL);
        *tok_out = t;
        advance(L, end);
        return 0;
    }
    /* integer: 0b / 0o / 0x with optional underscores, [1-9](_?\d)*, 0(_?0)* */
    int base = 10;
    size_t j = i;
    if (s[i] == '0' && i + 1 < L->n && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
        char b = (char)(s[i + 1] | 0x20);
        base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
        size_t k = i + 2, last = i + 2;
        for (;;) {
            size_t m = k;
            if (m < L->n && s[m] == '_')
                m++;
            int hv = m < L->n ? hexval(s[m]) : -1;
            if (hv < 0 || hv >= base)
                break;
            k = m + 1;
            last = k;
        }
        if (last == i + 2)
            base = 10; /* just "0" */
        else
            j = last;
    }
    if (base == 10) {
        if (s[i] == '0') {
            j = i + 1;
            for (;;) {
                size_t m = j;
                if (m < L->n && s[m] == '_')
                    m++;
                if (m < L->n && s[m] == '0')
                    j = m + 1;
                else
                    break;
            }
        } else {
            j = e1;
        }
    }
    uint64_t v = 0;
    size_t from = base == 10 ? i : i + 2;
    for (size_t k = from; k < j; k++) {
        if (s[k] == '_')
            continue;
        uint64_t d = (uint64_t)hexval(s[k]);
        if (v > (UINT64_MAX - d) / (uint64_t)base || v * (uint64_t)base + d > (uint64_t)INT64_MAX)
            return gm_err_set(L->err, GM_EUNSUPPORTED,
                              "line %d: integer literal beyond 64 bits", L->line);
        v = v * (uint64_t)base + d;
    }
    gm_ttok *t;
    int rc = emit(L, TK_INT, 0, s + i, j - i, L->line, &t);
    if (rc)
        return rc;
    t->i = (int64_t)v;
    *tok_out = t;
    advance(L, j);
    return 0;
}

static int push_str(lexer *L, char *p)
{
    gm_ttoks *o = L->out;
    if (o->nstrs == o->capstrs) {
        size_t cap = o->capstrs ? o->capstrs * 2 : 64;
        char **a = realloc(o->strs, cap * sizeof *a);
        if (!a) {
            free(p);
            return gm_err_set(L->err, GM_ENOMEM, "template: out of memory");
        }
        o->strs = a;
        o->capstrs = cap;
    }
    o->strs[o->nstrs++] = p;
    return 0;
}

/* A string literal: Jinja decodes it as Python's "unicode_escape" codec would (after turning
 * non-ASCII characters into \x/\u escapes, which is why a backslash before a non-ASCII
 * character keeps the escape's text). */
static int lex_string(lexer *L, size_t i)
{
    const char *s = L->s;
    char q = s[i];
    size_t j = i + 1;
    while (j < L->n && s[j] != q) {
        if (s[j] == '\\' && j + 1 < L->n)
            j++;
        j++;
    }
    if (j >= L->n) {
        char a[2] = {q, 0};
        return lfail(L, L->line, "unexpected char", a);
    }
    char *buf = malloc((j - i) * 4 + 16);
    if (!buf)
        return gm_err_set(L->err, GM_ENOMEM, "template: out of memory");
    size_t bn = 0;
    for (size_t k = i + 1; k < j;) {
        if (s[k] != '\\') {
            buf[bn++] = s[k++];
            continue;
        }
        char e = s[k + 1];
        k += 2;
        uint32_t cp = 0;
        int nhex = 0;
        switch (e) {
        case '\n': continue;
        case '\\': buf[bn++] = '\\'; continue;
        case '\'': buf[bn++] = '\''; continue;
        case '"': buf[bn++] = '"'; continue;
        case 'a': buf[bn++] = 7; continue;
        case 'b': buf[bn++] = 8; continue;
        case 'f': buf[bn++] = 12; continue;
        case 'n': buf[bn++] = '\n'; continue;
        case 'r': buf[bn++] = '\r'; continue;
        case 't': buf[bn++] = '\t'; continue;
        case 'v': buf[bn++] = 11; continue;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        case 'N':
            free(buf);
            return gm_err_set(L->err, GM_EUNSUPPORTED, "line %d: \\N{...} escapes are not supported", L->line);
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && k < j && s[k] >= '0' && s[k] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(s[k++] - '0');
                bn += gm_u8_enc(cp, buf + bn);
                continue;
            }
            if ((unsigned char)e >= 0x80) {
                /* "\é" reaches the decoder as "\\xe9": a backslash, then the escape's text */
                uint32_t ch;
                size_t cl = gm_u8_dec(s + k - 1, j - (k - 1), &ch);
                k += cl - 1;
                buf[bn++] = '\\';
                char esc[16];
                int en = ch < 0x100 ? snprintf(esc, sizeof esc, "\\x%02x", (unsigned)ch)
                       : ch < 0x10000 ? snprintf(esc, sizeof esc, "\\u%04x", (unsigned)ch)
                                      : snprintf(esc, sizeof esc, "\\U%08x", (unsigned)ch);
                /* the decoder then reads "\\" as one backslash and the rest literally */
                memcpy(buf + bn, esc + 1, (size_t)en - 1);
                bn += (size_t)en - 1;
                continue;
            }
            buf[bn++] = '\\';
            buf[bn++] = e;
            continue;
        }
        for (int d = 0; d < nhex; d++) {
            int hv = k < j ? hexval(s[k]) : -1;
            if (hv < 0) {
                free(buf);
                return lfail(L, L->line, "truncated escape in a string literal", NULL);
            }
            cp = cp * 16 + (uint32_t)hv;
            k++;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            free(buf);
            return lfail(L, L->line, "string literal escape is not a character", NULL);
        }
        bn += gm_u8_enc(cp, buf + bn);
    }
    buf[bn] = 0;
    int rc = push_str(L, buf);
    if (rc)
        return rc;
    gm_ttok *t;
    if ((rc = emit(L, TK_STRING, 0, buf, bn, L->line, &t)))
        return rc;
    advance(L, j + 1);
    return 0;
}

static const struct {
    const char *s;
    uint8_t op;
} ops[] = {
    {"//", TO_FLOORDIV}, {"**", TO_POW}, {"==", TO_EQ}, {"!=", TO_NE}, {">=", TO_GE},
    {"<=", TO_LE}, {"+", TO_ADD}, {"-", TO_SUB}, {"/", TO_DIV}, {"*", TO_MUL}, {"%", TO_MOD},
    {"~", TO_TILDE}, {"[", TO_LBRACKET}, {"]", TO_RBRACKET}, {"(", TO_LPAREN},
    {")", TO_RPAREN}, {"{", TO_LBRACE}, {"}", TO_RBRACE}, {">", TO_GT}, {"<", TO_LT},
    {"=", TO_ASSIGN}, {".", TO_DOT}, {":", TO_COLON}, {"|", TO_PIPE}, {",", TO_COMMA},
    {";", TO_SEMICOLON},
};

/* The inside of {{ }} or {% %}, up to and including its end delimiter. */
static int lex_tag(lexer *L, bool block, int open_line)
{
    char stack[256];
    size_t depth = 0;
    for (;;) {
        if (L->pos >= L->n)
            return lfail(L, open_line, block ? "unexpected end of template: a {% tag is not closed"
                                             : "unexpected end of template: a {{ tag is not closed", NULL);
        size_t i = L->pos;
        const char *s = L->s;
        if (depth == 0) {
            size_t end = 0;
            if (block) {
                if (at(L, i, "+%}")) {
                    end = i + 3;
                } else if (at(L, i, "-%}")) {
                    end = i + 3;
                    end += ws_run(s, L->n, end);
                } else if (at(L, i, "%}")) {
                    end = i + 2;
                    if (end < L->n && s[end] == '\n')
                        end++;
                }
            } else {
                if (at(L, i, "-}}")) {
                    end = i + 3;
                    end += ws_run(s, L->n, end);
                } else if (at(L, i, "}}")) {
                    end = i + 2;
                }
            }
            if (end) {
                int rc = emit(L, block ? TK_BLOCK_END : TK_VAR_END, 0, s + i, 0, L->line, NULL);
                if (rc)
                    return rc;
                L->line_starting = s[end - 1] == '\n';
                advance(L, end);
                return 0;
            }
        }
        size_t w = ws_run(s, L->n, i);
        if (w) {
            advance(L, i + w);
            continue;
        }
        char ch = s[i];
        int rc;
        if (isdig(ch)) {
            gm_ttok *t;
            if ((rc = lex_number(L, i, &t)))
                return rc;
            continue;
        }
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
            size_t j = i + 1;
            while (j < L->n && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') ||
                                isdig(s[j]) || s[j] == '_'))
                j++;
            if ((rc = emit(L, TK_NAME, 0, s + i, j - i, L->line, NULL)))
                return rc;
            advance(L, j);
            continue;
        }
        if (ch == '\'' || ch == '"') {
            if ((rc = lex_string(L, i)))
                return rc;
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof ops / sizeof ops[0]; k++)
            if (at(L, i, ops[k].s))
                break;
        if (k == sizeof ops / sizeof ops[0]) {
            char a[8] = {0};
            uint32_t cp;
            size_t cl = gm_u8_dec(s + i, L->n - i, &cp);
            memcpy(a, s + i, cl);
            return lfail(L, L->line, "unexpected char", a);
        }
        uint8_t op = ops[k].op;
        if (op == TO_LPAREN || op == TO_LBRACKET || op == TO_LBRACE) {
            if (depth == sizeof stack)
                return gm_err_set(L->err, GM_ERANGE, "line %d: brackets nested too deep", L->line);
            stack[depth++] = op == TO_LPAREN ? ')' : op == TO_LBRACKET ? ']' : '}';
        } else if (op == TO_RPAREN || op == TO_RBRACKET || op == TO_RBRACE) {
            char a[2] = {ch, 0};
            if (depth == 0)
                return lfail(L, L->line, "unexpected", a);
            if (stack[depth - 1] != ch)
                return gm_err_set(L->err, GM_EFORMAT, "line %d: unexpected '%c', expected '%c'",
                                  L->line, ch, stack[depth - 1]);
            depth--;
        }
        if ((rc = emit(L, TK_OP, op, s + i, strlen(ops[k].s), L->line, NULL)))
            return rc;
        advance(L, i + strlen(ops[k].s));
    }
}

static int lex_all(lexer *L)
{
    const char *s = L->s;
    while (L->pos < L->n) {
        size_t q = L->pos;
        while (q + 1 < L->n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#')))
            q++;
        if (q + 1 >= L->n) {
            int line = L->line;
            size_t from = L->pos;
            advance(L, L->n);
            return emit(L, TK_DATA, 0, s + from, L->n - from, line, NULL);
        }
        char kind = s[q + 1];
        char sign = 0;
        if (q + 2 < L->n && (s[q + 2] == '-' || s[q + 2] == '+'))
            sign = s[q + 2];
        int rc;
        if (kind == '%') {
            char rsign;
            size_t rl = raw_begin(L, q, &rsign);
            if (rl) {
                if ((rc = emit_text(L, L->pos, q, rsign, true)))
                    return rc;
                if ((rc = lex_raw(L, q + rl)))
                    return rc;
                continue;
            }
        }
        if ((rc = emit_text(L, L->pos, q, sign, kind != '{')))
            return rc;
        L->line_starting = false;
        int line = L->line;
        advance(L, q + 2 + (sign ? 1 : 0));
        if (kind == '#') {
            if ((rc = lex_comment(L)))
                return rc;
            continue;
        }
        if ((rc = emit(L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, 0, s + q, 0, line, NULL)))
            return rc;
        if ((rc = lex_tag(L, kind == '%', line)))
            return rc;
    }
    return 0;
}

int gm_tlex(gm_ttoks *out, const char *src, size_t len, gm_err *err)
{
    memset(out, 0, sizeof *out);
    if (!gm_u8_valid(src, len))
        return gm_err_set(err, GM_EFORMAT, "template: the source is not valid UTF-8");
    out->src = malloc(len + 1);
    if (!out->src)
        return gm_err_set(err, GM_ENOMEM, "template: out of memory");
    /* newlines to "\n", as Jinja's lexer does before anything else */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            out->src[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            out->src[n++] = src[i];
        }
    }
    if (n > 0 && out->src[n - 1] == '\n')
        n--; /* keep_trailing_newline=False */
    out->src[n] = 0;
    lexer L = {.out = out, .s = out->src, .n = n, .line = 1, .line_starting = true, .err = err};
    int rc = lex_all(&L);
    if (!rc)
        rc = emit(&L, TK_EOF, 0, out->src + n, 0, L.line, NULL);
    if (rc)
        gm_ttoks_free(out);
    return rc;
}

void gm_ttoks_free(gm_ttoks *t)
{
    for (size_t i = 0; i < t->nstrs; i++)
        free(t->strs[i]);
    free(t->strs);
    free(t->t);
    free(t->src);
    memset(t, 0, sizeof *t);
}
