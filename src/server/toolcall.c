/* Tool calls in generated text, per family (see toolcall.h). Every scan is bounded by the length
 * it is given; a block that does not parse is left where it was, so what a model writes never
 * turns into an error. */
#include "toolcall.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* The error of a call (only GM_EINVAL and GM_ENOMEM happen); the first one stays. */
static int tc_err(gm_err *err, int code, const char *msg)
{
    if (err && !err->code) {
        err->code = code;
        snprintf(err->msg, sizeof err->msg, "%s", msg);
    }
    return code;
}

#define NPOS ((size_t)-1)
#define LIT(s) (s), (sizeof(s) - 1)
#define NAME_MAX_BYTES 256

/* DeepSeek's markers (fullwidth bars and U+2581 in the token text) */
#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"

/* ---- scanning ------------------------------------------------------------------------- */

/* First lit in s[from..n), or NPOS. */
static size_t find(const char *s, size_t n, size_t from, const char *lit, size_t ln)
{
    if (ln == 0 || from > n || n - from < ln)
        return NPOS;
    for (size_t i = from; i + ln <= n; i++) {
        const char *p = memchr(s + i, lit[0], n - ln + 1 - i);
        if (!p)
            return NPOS;
        i = (size_t)(p - s);
        if (memcmp(p, lit, ln) == 0)
            return i;
    }
    return NPOS;
}

/* Last lit lying wholly in s[from..to), or NPOS. */
static size_t rfind(const char *s, size_t from, size_t to, const char *lit, size_t ln)
{
    if (ln == 0 || from > to || to - from < ln)
        return NPOS;
    for (size_t i = to - ln + 1; i-- > from;)
        if (memcmp(s + i, lit, ln) == 0)
            return i;
    return NPOS;
}

/* The earliest of the NUL-terminated marks in s[from..n) (*ml its length), or NPOS. */
static size_t find_any(const char *s, size_t n, size_t from, const char *const *marks, size_t nm, size_t *ml)
{
    size_t best = NPOS;
    for (size_t k = 0; k < nm; k++) {
        size_t q = find(s, n, from, marks[k], strlen(marks[k]));
        if (q < best) {
            best = q;
            *ml = strlen(marks[k]);
        }
    }
    return best;
}

static bool at(const char *s, size_t n, size_t i, const char *lit, size_t ln)
{
    return i <= n && n - i >= ln && memcmp(s + i, lit, ln) == 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

static void trim(const char *s, size_t *b, size_t *e)
{
    while (*b < *e && is_ws(s[*b]))
        (*b)++;
    while (*e > *b && is_ws(s[*e - 1]))
        (*e)--;
}

static char *dupn(const char *s, size_t n)
{
    char *d = n < SIZE_MAX ? malloc(n + 1) : NULL;
    if (d) {
        if (n)
            memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* ---- growing buffer ------------------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t n, cap; /* bytes used (a NUL follows them), bytes allocated */
} buf;

static int buf_add(buf *b, const char *s, size_t n)
{
    if (n > SIZE_MAX - 1 - b->n)
        return GM_ENOMEM;
    size_t need = b->n + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return GM_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

/* s as a quoted JSON string; bytes from 0x80 up pass through (the final check rejects bad UTF-8). */
static int buf_add_jstr(buf *b, const char *s, size_t n)
{
    int rc = buf_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        char esc[8];
        if (c == '"' || c == '\\' || c == '\n')
            snprintf(esc, sizeof esc, "\\%c", c == '\n' ? 'n' : c);
        else
            snprintf(esc, sizeof esc, "\\u%04x", c);
        if ((rc = buf_add(b, s + run, i - run)) == 0)
            rc = buf_add(b, esc, strlen(esc));
        run = i + 1;
    }
    if (rc == 0)
        rc = buf_add(b, s + run, n - run);
    return rc == 0 ? buf_add(b, "\"", 1) : rc;
}

/* ---- the calls found ------------------------------------------------------------------ */

typedef struct ctx {
    const char *text;
    size_t len;
    json_t *tools;   /* the request's tools array, or NULL */
    uint64_t seed;   /* hash of the text, for the ids */
    gm_tool_call *calls;
    size_t n, cap;
} ctx;

static bool valid_name(const char *s, size_t n)
{
    if (n == 0 || n > NAME_MAX_BYTES)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f || c == '<' || c == '>' || c == '"' || c == '\\')
            return false;
    }
    return true;
}

static void free_call(gm_tool_call *t)
{
    free(t->id);
    free(t->name);
    free(t->arguments);
}

static void drop_calls(ctx *c, size_t keep)
{
    while (c->n > keep)
        free_call(&c->calls[--c->n]);
}

/* Takes args. 1 added, 0 the name (or id) is not one, GM_ENOMEM. id NULL: derived. */
static int add_call(ctx *c, const char *name, size_t nl, char *args, const char *id, size_t idl)
{
    if (!valid_name(name, nl) || (id && !valid_name(id, idl))) {
        free(args);
        return 0;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        gm_tool_call *p = cap > SIZE_MAX / sizeof *p ? NULL : realloc(c->calls, cap * sizeof *p);
        if (!p) {
            free(args);
            return GM_ENOMEM;
        }
        c->calls = p;
        c->cap = cap;
    }
    char idbuf[32];
    if (!id) {
        uint64_t h = (c->seed ^ (c->n + 1) * 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
        snprintf(idbuf, sizeof idbuf, "call_%016" PRIx64, h ^ (h >> 31));
        id = idbuf;
        idl = strlen(idbuf);
    }
    gm_tool_call *t = &c->calls[c->n];
    t->id = dupn(id, idl);
    t->name = dupn(name, nl);
    t->arguments = args;
    if (!t->id || !t->name) {
        free_call(t);
        return GM_ENOMEM;
    }
    c->n++;
    return 1;
}

/* ---- arguments written as JSON -------------------------------------------------------- */

/* s[0..n) as arguments: a JSON object (its bytes kept), or a JSON string holding one (a
 * template's tojson of string arguments). 1 (*out malloc'd), 0 neither, GM_ENOMEM. */
static int args_json(const char *s, size_t n, char **out)
{
    size_t b = 0, e = n;
    trim(s, &b, &e);
    json_t *v = b < e ? json_loadb(s + b, e - b, JSON_DECODE_ANY, NULL) : NULL;
    const char *src = s + b;
    size_t sl = e - b;
    bool ok = json_is_object(v);
    if (json_is_string(v)) {
        src = json_string_value(v);
        sl = json_string_length(v);
        json_t *inner = json_loadb(src, sl, 0, NULL);
        ok = json_is_object(inner);
        json_decref(inner);
        size_t ib = 0, ie = sl;
        trim(src, &ib, &ie);
        src += ib;
        sl = ie - ib;
    }
    int rc = 0;
    if (ok)
        rc = (*out = dupn(src, sl)) ? 1 : GM_ENOMEM;
    json_decref(v);
    return rc;
}

/* Past the JSON string at s[i] (a '"'), or NPOS. */
static size_t skip_jstring(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return NPOS;
}

/* Past the JSON value at s[i] (already checked by jansson), or NPOS. */
static size_t skip_jvalue(const char *s, size_t n, size_t i)
{
    if (i < n && s[i] == '"')
        return skip_jstring(s, n, i);
    if (i < n && (s[i] == '{' || s[i] == '[')) {
        for (size_t depth = 0; i < n;) {
            if (s[i] == '"') {
                if ((i = skip_jstring(s, n, i)) == NPOS)
                    return NPOS;
                continue;
            }
            if (s[i] == '{' || s[i] == '[')
                depth++;
            else if ((s[i] == '}' || s[i] == ']') && --depth == 0)
                return i + 1;
            i++;
        }
        return NPOS;
    }
    while (i < n && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']')
        i++;
    return i;
}

/* The bytes of the value of the last top-level member key (spelled without escapes) of the
 * valid JSON object s[0..n). */
static bool jmember(const char *s, size_t n, const char *key, size_t *vb, size_t *ve)
{
    size_t kl = strlen(key), i = skip_ws(s, n, 0);
    bool found = false;
    if (i >= n || s[i] != '{')
        return false;
    for (i++;; i++) {
        i = skip_ws(s, n, i);
        size_t ke = i < n && s[i] == '"' ? skip_jstring(s, n, i) : NPOS;
        if (ke == NPOS)
            return found;
        bool match = ke - i - 2 == kl && memcmp(s + i + 1, key, kl) == 0;
        i = skip_ws(s, n, ke);
        if (i >= n || s[i] != ':')
            return false;
        i = skip_ws(s, n, i + 1);
        size_t e = skip_jvalue(s, n, i);
        if (e == NPOS)
            return false;
        if (match) {
            *vb = i;
            *ve = e;
            found = true;
        }
        i = skip_ws(s, n, e);
        if (i >= n || s[i] != ',')
            return found;
    }
}

/* ---- arguments written as parameters -------------------------------------------------- */

typedef struct argsb {
    buf b;                /* "{" then "KEY": VALUE pairs */
    const json_t *props;  /* the tool's declared properties, or NULL */
    size_t count;
} argsb;

/* The properties the request declares for tool name (OpenAI or Anthropic shape), or NULL. */
static const json_t *tool_props(const json_t *tools, const char *name, size_t nl)
{
    size_t i;
    const json_t *tool;
    json_array_foreach(tools, i, tool) {
        const json_t *fn = json_is_object(json_object_get(tool, "function")) ? json_object_get(tool, "function") : tool;
        const json_t *nm = json_object_get(fn, "name");
        if (!json_is_string(nm) || json_string_length(nm) != nl || memcmp(json_string_value(nm), name, nl) != 0)
            continue;
        const json_t *schema = json_object_get(fn, "parameters");
        const json_t *props = json_object_get(schema ? schema : json_object_get(fn, "input_schema"), "properties");
        return json_is_object(props) ? props : NULL;
    }
    return NULL;
}

static bool type_has(const json_t *type, const char *what)
{
    if (json_is_string(type))
        return strcmp(json_string_value(type), what) == 0;
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t) {
        if (json_is_string(t) && strcmp(json_string_value(t), what) == 0)
            return true;
    }
    return false;
}

/* Adds key: value, typed as toolcall.h says. 0 or GM_ENOMEM. */
static int args_param(argsb *a, const char *key, size_t kl, const char *v, size_t vl)
{
    const json_t *type = NULL;
    if (a->props) {
        char *k = dupn(key, kl);
        if (!k)
            return GM_ENOMEM;
        type = json_object_get(json_object_get(a->props, k), "type");
        free(k);
    }
    size_t tb = 0, te = vl;
    trim(v, &tb, &te);
    const char *tv = v + tb;
    size_t tl = te - tb;
    int rc = a->count++ ? buf_add(&a->b, ", ", 2) : 0;
    if (rc == 0)
        rc = buf_add_jstr(&a->b, key, kl);
    if (rc == 0)
        rc = buf_add(&a->b, ": ", 2);
    if (rc < 0)
        return rc;
    if (type_has(type, "null") && tl == 4 && (memcmp(tv, "null", 4) == 0 || memcmp(tv, "None", 4) == 0))
        return buf_add(&a->b, "null", 4);
    if (type_has(type, "string"))
        return buf_add_jstr(&a->b, v, vl);
    json_t *j = tl ? json_loadb(tv, tl, JSON_DECODE_ANY, NULL) : NULL;
    if (j) {
        json_decref(j);
        return buf_add(&a->b, tv, tl);
    }
    if (type_has(type, "boolean") && tl == 4 && memcmp(tv, "True", 4) == 0)
        return buf_add(&a->b, "true", 4);
    if (type_has(type, "boolean") && tl == 5 && memcmp(tv, "False", 5) == 0)
        return buf_add(&a->b, "false", 5);
    return buf_add_jstr(&a->b, v, vl);
}

/* How a format writes one parameter: KO key KC [whitespace VO] value VC. */
typedef struct xml_syntax {
    const char *ko, *kc, *vo, *vc;
    bool strip_nl; /* the value sits on lines of its own: one newline at each end is markup */
} xml_syntax;

static const xml_syntax k_coder = {"<parameter=", ">", "", "</parameter>", true};
static const xml_syntax k_glm = {"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", false};
static const xml_syntax k_minimax = {"<parameter name=\"", "\">", "", "</parameter>", false};

/* The call name whose parameters are all of s[0..n). 1, 0 (malformed) or GM_ENOMEM. */
static int xml_call(ctx *c, const xml_syntax *x, const char *name, size_t nl, const char *s, size_t n)
{
    argsb a = {.props = tool_props(c->tools, name, nl)};
    int rc = buf_add(&a.b, "{", 1);
    size_t kol = strlen(x->ko), kcl = strlen(x->kc), vol = strlen(x->vo), vcl = strlen(x->vc);
    for (size_t i = 0; rc == 0;) {
        if ((i = skip_ws(s, n, i)) == n) {
            json_t *j = (rc = buf_add(&a.b, "}", 1)) == 0 ? json_loadb(a.b.p, a.b.n, 0, NULL) : NULL;
            bool ok = json_is_object(j);
            json_decref(j);
            if (ok)
                return add_call(c, name, nl, a.b.p, NULL, 0);
            break; /* not valid JSON (bad UTF-8): malformed */
        }
        size_t kb = i + kol, ke = find(s, n, kb, x->kc, kcl), vb = ke + kcl;
        if (!at(s, n, i, x->ko, kol) || ke == NPOS)
            break;
        if (vol) {
            vb = skip_ws(s, n, vb);
            if (!at(s, n, vb, x->vo, vol))
                break;
            vb += vol;
        }
        size_t ve = find(s, n, vb, x->vc, vcl);
        if (ve == NPOS)
            break;
        i = ve + vcl;
        if (x->strip_nl && vb < ve && s[vb] == '\n')
            vb++;
        if (x->strip_nl && ve > vb && s[ve - 1] == '\n')
            ve--;
        trim(s, &kb, &ke);
        rc = args_param(&a, s + kb, ke - kb, s + vb, ve - vb);
    }
    free(a.b.p);
    return rc;
}

/* ---- the bodies of each format -------------------------------------------------------- */

/* Each takes the bytes between a block's open and close markers and returns 1 (calls added),
 * 0 (malformed: the caller drops what it added) or GM_ENOMEM. */
typedef int (*body_fn)(ctx *c, const char *s, size_t n);

/* {"name": N, "arguments": {...}} ("parameters" also; none: {}) */
static int body_hermes(ctx *c, const char *s, size_t n)
{
    size_t b = 0, e = n, vb, ve;
    trim(s, &b, &e);
    json_t *o = json_loadb(s + b, e - b, 0, NULL);
    const json_t *name = json_object_get(o, "name");
    const char *key = json_object_get(o, "arguments") ? "arguments"
                      : json_object_get(o, "parameters") ? "parameters" : NULL;
    char *args = NULL;
    int rc = 0;
    if (!json_is_object(o) || !json_is_string(name))
        rc = 0;
    else if (!key)
        rc = (args = dupn("{}", 2)) ? 1 : GM_ENOMEM;
    else if (jmember(s + b, e - b, key, &vb, &ve))
        rc = args_json(s + b + vb, ve - vb, &args);
    else { /* the key was written with escapes: take jansson's rendering of the value */
        char *d = json_dumps(json_object_get(o, key), JSON_ENCODE_ANY);
        rc = d ? args_json(d, strlen(d), &args) : GM_ENOMEM;
        free(d);
    }
    if (rc == 1)
        rc = add_call(c, json_string_value(name), json_string_length(name), args, NULL, 0);
    json_decref(o);
    return rc;
}

/* <function=NAME> parameters </function> */
static int body_coder(ctx *c, const char *s, size_t n)
{
    size_t f = skip_ws(s, n, 0), i = f + sizeof "<function=" - 1;
    size_t ne = find(s, n, i, LIT(">")), fe = find(s, n, i, LIT("</function>"));
    if (!at(s, n, f, LIT("<function=")) || ne == NPOS || fe == NPOS || ne > fe ||
        skip_ws(s, n, fe + sizeof "</function>" - 1) != n)
        return 0;
    return xml_call(c, &k_coder, s + i, ne - i, s + ne + 1, fe - ne - 1);
}

/* NAME parameters */
static int body_glm(ctx *c, const char *s, size_t n)
{
    size_t nb = 0, pb = find(s, n, 0, LIT("<arg_key>"));
    size_t ne = pb = pb == NPOS ? n : pb;
    trim(s, &nb, &ne);
    return xml_call(c, &k_glm, s + nb, ne - nb, s + pb, n - pb);
}

/* (<invoke name="NAME"> parameters </invoke>)+ */
static int body_minimax(ctx *c, const char *s, size_t n)
{
    size_t i = 0;
    int rc = 0;
    while ((i = skip_ws(s, n, i)) < n) {
        size_t nb = i + sizeof "<invoke name=\"" - 1;
        size_t ne = find(s, n, nb, LIT("\">")), ie = find(s, n, nb, LIT("</invoke>"));
        if (!at(s, n, i, LIT("<invoke name=\"")) || ne == NPOS || ie == NPOS || ne > ie)
            return 0;
        if ((rc = xml_call(c, &k_minimax, s + nb, ne - nb, s + ne + 2, ie - ne - 2)) <= 0)
            return rc;
        i = ie + sizeof "</invoke>" - 1;
    }
    return rc;
}

/* One call of a sequence: its head s[hb..he) and body s[bb..be). */
typedef int (*seq_fn)(ctx *c, const char *s, size_t hb, size_t he, size_t bb, size_t be);

/* (BEGIN head MID body END)+, whitespace between: DeepSeek's and Kimi's sections */
static int seq_calls(ctx *c, const char *s, size_t n, const char *const mk[3], seq_fn fn)
{
    size_t i = 0, l0 = strlen(mk[0]), l1 = strlen(mk[1]), l2 = strlen(mk[2]);
    int rc = 0;
    while ((i = skip_ws(s, n, i)) < n) {
        size_t mid = find(s, n, i + l0, mk[1], l1), end = find(s, n, i + l0, mk[2], l2);
        if (!at(s, n, i, mk[0], l0) || mid == NPOS || end == NPOS || mid > end)
            return 0;
        if ((rc = fn(c, s, i + l0, mid, mid + l1, end)) <= 0)
            return rc;
        i = end + l2;
    }
    return rc;
}

/* NAME<｜tool▁sep｜>ARGS (V3.1), or function<｜tool▁sep｜>NAME\n```json\nARGS\n``` (V3, R1) */
static int call_deepseek(ctx *c, const char *s, size_t nb, size_t ne, size_t jb, size_t je)
{
    size_t fb = skip_ws(s, je, jb), fence = find(s, je, jb, LIT("```json"));
    if (fence != NPOS && fb < je && s[fb] != '{' && s[fb] != '"') { /* not JSON that holds a fence */
        nb = jb;
        ne = fence;
        jb = fence + sizeof "```json" - 1;
        if ((je = rfind(s, jb, je, LIT("```"))) == NPOS)
            return 0;
    }
    trim(s, &nb, &ne);
    char *args = NULL;
    int rc = args_json(s + jb, je - jb, &args);
    return rc == 1 ? add_call(c, s + nb, ne - nb, args, NULL, 0) : rc;
}

/* functions.NAME:IDX<|tool_call_argument_begin|>ARGS; the id is Kimi's own functions.NAME:IDX */
static int call_kimi(ctx *c, const char *s, size_t ib, size_t ie, size_t jb, size_t je)
{
    trim(s, &ib, &ie);
    size_t nb = at(s, ie, ib, LIT("functions.")) ? ib + sizeof "functions." - 1 : ib, ne = ie;
    size_t colon = rfind(s, nb, ie, LIT(":")), d = colon == NPOS ? ie : colon + 1;
    while (d < ie && s[d] >= '0' && s[d] <= '9')
        d++;
    if (colon != NPOS && colon + 1 < ie && d == ie)
        ne = colon;
    char *args = NULL;
    int rc = args_json(s + jb, je - jb, &args);
    return rc == 1 ? add_call(c, s + nb, ne - nb, args, s + ib, ie - ib) : rc;
}

static const char *const k_ds_call[3] = {DS_CALL_BEGIN, DS_SEP, DS_CALL_END};
static const char *const k_kimi_call[3] = {"<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"};

static int body_deepseek(ctx *c, const char *s, size_t n) { return seq_calls(c, s, n, k_ds_call, call_deepseek); }
static int body_kimi(ctx *c, const char *s, size_t n) { return seq_calls(c, s, n, k_kimi_call, call_kimi); }

/* The block markers of each format but harmony (which has no closing marker of its own). */
static const struct block {
    const char *open, *close;
    body_fn fn;
} k_blocks[] = {
    [GM_TC_HERMES] = {"<tool_call>", "</tool_call>", body_hermes},
    [GM_TC_QWEN3_CODER] = {"<tool_call>", "</tool_call>", body_coder},
    [GM_TC_DEEPSEEK] = {DS_CALLS_BEGIN, DS_CALLS_END, body_deepseek},
    [GM_TC_GLM] = {"<tool_call>", "</tool_call>", body_glm},
    [GM_TC_KIMI] = {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", body_kimi},
    [GM_TC_MINIMAX] = {"<minimax:tool_call>", "</minimax:tool_call>", body_minimax},
};

static const struct block *block_of(gm_tc_format f)
{
    return (unsigned)f < sizeof k_blocks / sizeof *k_blocks && k_blocks[f].open ? &k_blocks[f] : NULL;
}

/* Moves every block whose body parses from the text into calls, the rest into content. An
 * unterminated block ends the scan (the rest is content). */
static int scan_blocks(ctx *c, buf *content, const struct block *bk)
{
    const char *t = c->text;
    size_t n = c->len, pos = 0, last = 0, ol = strlen(bk->open), cl = strlen(bk->close);
    for (;;) {
        size_t s = find(t, n, pos, bk->open, ol);
        size_t e = s == NPOS ? NPOS : find(t, n, s + ol, bk->close, cl);
        if (e == NPOS)
            break;
        size_t keep = c->n;
        int rc = bk->fn(c, t + s + ol, e - s - ol);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            drop_calls(c, keep);
            pos = s + 1;
            continue;
        }
        if ((rc = buf_add(content, t + last, s - last)) < 0)
            return rc;
        last = pos = e + cl;
    }
    return buf_add(content, t + last, n - last);
}

/* ---- harmony -------------------------------------------------------------------------- */

static const char *const k_hhead[] = {"<|start|>", "<|channel|>", "to=functions."};
static const char *const k_hterm[] = {"<|end|>", "<|call|>", "<|return|>"};

/* Message by message: a header (from <|start|>, <|channel|> or a bare to=functions.) up to
 * <|message|> that names to=functions.NAME is a call, its JSON up to <|call|> or the end of the
 * text (the <|call|> stop token may have been cut off); other messages are skipped to their
 * terminator, so a recipient written in a message's text is no call. */
static int scan_harmony(ctx *c, buf *content)
{
    const char *t = c->text;
    size_t n = c->len, i = 0, last = 0, p, ml, te;
    while ((p = find_any(t, n, i, k_hhead, 3, &ml)) != NPOS) {
        size_t m = find(t, n, p, LIT("<|message|>"));
        if (m == NPOS)
            break;
        size_t bb = m + sizeof "<|message|>" - 1, q = find(t, m, p, LIT("to=functions."));
        if ((te = find_any(t, m, p, k_hterm, 3, &ml)) != NPOS) { /* a header cut short */
            i = te + ml;
            continue;
        }
        if (q != NPOS) {
            size_t nb = q + sizeof "to=functions." - 1, ne = nb, ce = find(t, n, bb, LIT("<|call|>"));
            while (ne < m && !is_ws(t[ne]) && t[ne] != '<')
                ne++;
            char *args = NULL;
            int rc = args_json(t + bb, (ce == NPOS ? n : ce) - bb, &args);
            if (rc == 1)
                rc = add_call(c, t + nb, ne - nb, args, NULL, 0);
            bool took = rc == 1;
            if (took)
                rc = buf_add(content, t + last, p - last);
            if (rc < 0)
                return rc;
            if (took) {
                last = i = ce == NPOS ? n : ce + sizeof "<|call|>" - 1;
                continue;
            }
        }
        if ((te = find_any(t, n, bb, k_hterm, 3, &ml)) == NPOS)
            break;
        i = te + ml;
    }
    return buf_add(content, t + last, n - last);
}

/* ---- public --------------------------------------------------------------------------- */

gm_tc_format gm_tc_detect(const char *src, const char *arch)
{
    /* most specific first; NONE for templates that render calls in a format not handled here:
     * MiniMax-M3's namespaced XML, Apriel's JSON list, and (last) any other tool_call markup */
    static const struct {
        const char *mark;
        gm_tc_format f;
    } k_marks[] = {
        {"<minimax:tool_call>", GM_TC_MINIMAX}, {"]<]minimax[>[", GM_TC_NONE},
        {"<|tool_calls_section_begin|>", GM_TC_KIMI}, {DS_CALLS_BEGIN, GM_TC_DEEPSEEK},
        {DS_CALL_BEGIN, GM_TC_DEEPSEEK}, {"<|call|>", GM_TC_HARMONY}, {"<tool_calls>[", GM_TC_NONE},
        {"<arg_key>", GM_TC_GLM}, {"<function=", GM_TC_QWEN3_CODER}, {"<tool_call>", GM_TC_HERMES},
        {"tool_call", GM_TC_NONE},
    };
    static const struct {
        const char *arch;
        gm_tc_format f;
    } k_arch[] = {
        {"gpt-oss", GM_TC_HARMONY}, {"glm4moe", GM_TC_GLM},     {"minimax-m2", GM_TC_MINIMAX},
        {"qwen2", GM_TC_HERMES},    {"qwen2moe", GM_TC_HERMES}, {"qwen3", GM_TC_HERMES},
        {"qwen3moe", GM_TC_HERMES}, {"qwen3next", GM_TC_HERMES}, {"qwen35", GM_TC_QWEN3_CODER},
        {"qwen35moe", GM_TC_QWEN3_CODER},
    };
    for (size_t i = 0; src && i < sizeof k_marks / sizeof *k_marks; i++) {
        /* Qwen3-Coder's <function= counts only inside <tool_call> (Seed-OSS, functionary differ) */
        if (strstr(src, k_marks[i].mark) && (k_marks[i].f != GM_TC_QWEN3_CODER || strstr(src, "<tool_call>")))
            return k_marks[i].f;
    }
    for (size_t i = 0; arch && i < sizeof k_arch / sizeof *k_arch; i++)
        if (strcmp(arch, k_arch[i].arch) == 0)
            return k_arch[i].f;
    return GM_TC_NONE;
}

const char *gm_tc_format_name(gm_tc_format f)
{
    static const char *const k_names[] = {"none",     "hermes", "qwen3-coder", "harmony",
                                          "deepseek", "glm",    "kimi",        "minimax"};
    return (unsigned)f < sizeof k_names / sizeof *k_names ? k_names[f] : "none";
}

void gm_tc_free(gm_tool_call *calls, size_t n)
{
    for (size_t i = 0; calls && i < n; i++)
        free_call(&calls[i]);
    free(calls);
}

int gm_tc_parse(gm_tc_format f, const char *text, size_t len, const char *tools_json, char **content,
                gm_tool_call **calls, size_t *n_calls, gm_err *err)
{
    if (!content || !calls || !n_calls)
        return tc_err(err, GM_EINVAL, "tool calls: no place for the result");
    *content = NULL;
    *calls = NULL;
    *n_calls = 0;
    if (!text)
        len = 0;
    ctx c = {.text = text ? text : "", .len = len, .seed = 0xcbf29ce484222325ull};
    for (size_t i = 0; i < len; i++)
        c.seed = (c.seed ^ (unsigned char)text[i]) * 0x100000001b3ull;
    if (tools_json && (f == GM_TC_QWEN3_CODER || f == GM_TC_GLM || f == GM_TC_MINIMAX))
        c.tools = json_loads(tools_json, 0, NULL); /* an invalid one only loses the typing */
    buf out = {0};
    const struct block *bk = block_of(f);
    int rc = bk ? scan_blocks(&c, &out, bk) : f == GM_TC_HARMONY ? scan_harmony(&c, &out) : buf_add(&out, c.text, len);
    json_decref(c.tools);
    if (rc == 0 && !out.p)
        rc = buf_add(&out, "", 0);
    if (rc < 0) {
        free(out.p);
        gm_tc_free(c.calls, c.n);
        return tc_err(err, rc, "tool calls: out of memory");
    }
    if (c.n) {
        /* whitespace only at the end: what streamed before the first call stays a prefix */
        while (out.n && is_ws(out.p[out.n - 1]))
            out.p[--out.n] = '\0';
        *calls = c.calls;
        *n_calls = c.n;
    } else {
        free(c.calls);
    }
    *content = out.p;
    return 0;
}

/* ---- streaming ------------------------------------------------------------------------ */

/* The longest tail of s[0..n) that is a proper beginning of one of the marks. */
static size_t partial_tail(const char *s, size_t n, const char *const *marks, size_t nm)
{
    size_t hold = 0;
    for (size_t m = 0; m < nm; m++) {
        size_t ml = strlen(marks[m]);
        for (size_t k = ml - 1 < n ? ml - 1 : n; k > hold; k--)
            if (memcmp(s + n - k, marks[m], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

size_t gm_tc_safe_prefix(gm_tc_format f, const char *text, size_t len)
{
    const struct block *bk = block_of(f);
    if (!text)
        return 0;
    if (bk) {
        size_t p = find(text, len, 0, bk->open, strlen(bk->open));
        return p != NPOS ? p : len - partial_tail(text, len, &bk->open, 1);
    }
    if (f != GM_TC_HARMONY)
        return len;
    /* harmony: hold a header until its <|message|> shows it is no call; skip the text after */
    size_t i = 0, p, ml, te;
    while ((p = find_any(text, len, i, k_hhead, 3, &ml)) != NPOS) {
        size_t m = find(text, len, p, LIT("<|message|>"));
        if ((te = find_any(text, m == NPOS ? len : m, p, k_hterm, 3, &ml)) != NPOS) {
            i = te + ml; /* a header cut short */
            continue;
        }
        if (m == NPOS || find(text, m, p, LIT("to=functions.")) != NPOS)
            return p;
        if ((te = find_any(text, len, m + sizeof "<|message|>" - 1, k_hterm, 3, &ml)) == NPOS)
            return len; /* the rest is a message's text */
        i = te + ml;
    }
    return len - partial_tail(text + i, len - i, k_hhead, 3);
}
