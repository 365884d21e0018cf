/* template/tmpl_int.h: what the files of the template module share (private to src/template).
 *
 * Owns: the value type (gm_tv) and its heap objects, the syntax tree (gm_tnode), the token
 * array, the render context (gm_tctx), and the prototypes each file exports to the others:
 *   unicode.c  UTF-8 and the few Unicode properties Python's str methods need
 *   value.c    values: reference counting, strings, lists, dicts, Python str()/repr(), json.dumps,
 *              equality and ordering as Python defines them, conversion from jansson
 *   lexer.c    source -> tokens (whitespace control, trim_blocks, lstrip_blocks, raw)
 *   parser.c   tokens -> tree
 *   check.c    the checks Jinja makes when it compiles
 *   eval.c     rendering: statements, expressions, scopes, loops, macros, attribute lookup
 *   ops.c      Python's binary operators and "in"
 *   filters.c  the text filters, the filter table; filters_seq.c the filters on sequences
 *   tests.c    the tests (is defined, is string, ...)
 *   methods.c  methods of str, list and dict, and the globals
 *   format.c   printf-style %, str.format, strftime
 *   template.c the public API of template.h
 *
 * Invariants: every string is valid UTF-8 with a known byte length and code point count. A
 * heap object with rc < 0 is immortal: it belongs to a parsed template (constants), which
 * several threads may render at once, so its count is never touched. Everything else belongs to
 * one render and one thread.
 *
 * Known differences from Python Jinja2 (each fails cleanly or is cosmetic; none is silent on the
 * 70 model templates of tests/fixtures/templates):
 *   - integers are int64: a result Python would make a big integer is GM_EUNSUPPORTED;
 *   - values Python prints with an address (functions, generators, bound methods) cannot be
 *     printed or turned into text: GM_EUNSUPPORTED;
 *   - generators (map, select, ...) are built eagerly and can be iterated twice, so an error in
 *     an item no consumer reaches still fails, and a spent generator is not empty;
 *   - Jinja folds constant expressions when it compiles, which turns a few errors on literals
 *     into undefined ("'abc'[::'x']") or into NameError (a float literal that overflows): here
 *     they stay errors, or give inf;
 *   - repr() escapes controls, formats, separators and private-use characters like Python but
 *     leaves unassigned code points as they are; the Unicode case tables cover the Latin,
 *     Greek, Cyrillic, Armenian, Georgian and full-width blocks;
 *   - the filters filesizeformat, groupby, pprint, random, urlencode, urlize, wordwrap and
 *     xmlattr and the global lipsum are GM_EUNSUPPORTED when used.
 *
 * Ownership convention: a function that produces a gm_tv into *out hands over one reference;
 * gm_tv arguments are borrowed. Functions returning int give 0 or a negative GM_E* code (with
 * the error recorded); on failure *out holds nothing to release.
 */
#ifndef GM_TEMPLATE_TMPL_INT_H
#define GM_TEMPLATE_TMPL_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "template/template.h"

/* ------------------------------------------------------------------ values */

enum {
    TV_UNDEF, /* jinja2.Undefined; u.name: what was missing (may be NULL), x: TV kind of the
                 object it was looked up on + 1 (0: a plain name) */
    TV_NONE,
    TV_BOOL,
    TV_INT,   /* int64; Python has bignums, so overflow is a render error */
    TV_FLOAT,
    TV_STR,
    TV_LIST,  /* list, tuple and the iterables Python filters return (gm_tlist.lk) */
    TV_DICT,
    TV_NS,    /* jinja2 namespace() */
    TV_MACRO,
    TV_FUNC,  /* a global function; x: its id (G_*) */
    TV_BOUND, /* a method bound to a value */
    TV_LOOP,  /* the loop variable of a for */
    TV_CYCLER,
    TV_JOINER,
    TV_NKINDS
};

#define TVF_MARKUP 1u /* TV_STR: a markupsafe.Markup (|safe, |escape): + escapes the other side */
#define TVF_UNSAFE 2u /* TV_UNDEF: an attribute the sandbox refuses; calling it is an error */

typedef struct gm_tobj {
    int32_t rc; /* < 0: immortal */
    uint8_t kind;
} gm_tobj;

struct gm_tstr;
struct gm_tlist;
struct gm_tdict;

typedef struct gm_tv {
    uint8_t k;
    uint8_t f;
    uint16_t x;
    union {
        int b;
        int64_t i;
        double d;
        gm_tobj *o;
        struct gm_tstr *s;
        struct gm_tlist *l;
        struct gm_tdict *m;
        const char *name;
    } u;
} gm_tv;

typedef struct gm_tstr {
    gm_tobj h;
    size_t len; /* bytes */
    size_t ncp; /* code points */
    char p[];   /* len bytes + NUL */
} gm_tstr;

enum {
    LK_LIST,
    LK_TUPLE,
    LK_GEN,     /* a generator (map, select, items, unique...): no len, no index, always true */
    LK_REVITER, /* reversed(list) */
    LK_RANGE,
    LK_KEYS,    /* dict.keys() / values() / items() views */
    LK_VALUES,
    LK_ITEMS,
};

typedef struct gm_tlist {
    gm_tobj h;
    uint8_t lk;
    size_t n, cap;
    gm_tv *a;
    int64_t r0, r1, rs; /* LK_RANGE: start, stop, step (for repr) */
} gm_tlist;

typedef struct gm_tdict {
    gm_tobj h;
    size_t n, cap;
    gm_tv *k, *v; /* insertion order, as Python 3.7+ keeps it */
} gm_tdict;

/* Objects that can take part in a reference cycle (namespaces and scopes are mutable; a macro
 * holds its scope): each render keeps them on a list and clears what is left at its end. */
typedef struct gm_tlink {
    struct gm_tlink *prev, *next;
} gm_tlink;

typedef struct gm_tns {
    gm_tobj h;
    gm_tlink link;
    gm_tdict *d;
} gm_tns;

typedef struct gm_tframe {
    gm_tobj h;
    gm_tlink link;
    struct gm_tframe *parent;
    uint32_t n, cap;
    struct gm_tvar {
        uint32_t sym;
        gm_tv v;
    } *e;
} gm_tframe;

struct gm_tnode;

typedef struct gm_tmacro {
    gm_tobj h;
    const struct gm_tnode *def; /* N_MACRO, or N_CALLBLOCK for caller() */
    gm_tframe *closure;
} gm_tmacro;

typedef struct gm_tbound {
    gm_tobj h;
    gm_tv self;
    int mid; /* M_* */
} gm_tbound;

typedef struct gm_tloop {
    gm_tobj h;
    gm_tlist *items;
    size_t i;
    uint32_t depth; /* 1 for the outermost level of a recursive loop */
    const struct gm_tnode *forn;
    gm_tframe *outer; /* where a recursive loop(...) call renders */
    gm_tv changed_last;
    bool changed_set;
} gm_tloop;

typedef struct gm_tcycler {
    gm_tobj h;
    gm_tlist *items;
    size_t pos;
} gm_tcycler;

typedef struct gm_tjoiner {
    gm_tobj h;
    gm_tv sep;
    bool used;
} gm_tjoiner;

/* ------------------------------------------------------------------ tree */

enum {
    /* expressions */
    N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_NOT, N_NEG, N_POS, N_BINOP, N_CONCAT, N_COMPARE, N_AND, N_OR, N_COND,
    N_LIST, N_TUPLE, N_DICT, N_NSREF,
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK,
    N_FILTERBLOCK, N_WITH, N_BREAK, N_CONTINUE, N_SCOPE,
};

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW };
enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

#define NF_RECURSIVE 1u /* N_FOR */
#define NF_VARARGS 2u   /* N_MACRO: the body reads varargs */
#define NF_KWARGS 4u    /* N_MACRO: the body reads kwargs */
#define NF_CALLER 8u    /* N_MACRO: the body reads caller */
#define NF_SOFT 16u     /* N_FILTER/N_TEST of an unknown name inside an if: fails when run */

/* One node; the meaning of the fields depends on kind:
 *   N_CONST      cval
 *   N_NAME       sym, cval (the name)
 *   N_GETATTR    a.<cval>; id: the method id of the name (-1: none)
 *   N_GETITEM    a[b] (b may be an N_SLICE: a:b:c, each may be NULL)
 *   N_CALL       a(v..., names=w..., *c, **d)
 *   N_FILTER     a|<cval>(v..., names=w..., *c, **d); id: filter id (a NULL in filter blocks)
 *   N_TEST       a is <cval>(args as for N_FILTER); id: test id
 *   N_NOT/NEG/POS a
 *   N_BINOP      a ops[0] v[0] ops[1] v[1] ... (one precedence level, folded from the left)
 *   N_CONCAT     v[0] ~ v[1] ~ ...
 *   N_COMPARE    a ops[0] v[0] ops[1] v[1] ...
 *   N_AND/N_OR   a and/or v[0] and/or v[1] ...
 *   N_COND       b if a else c (c may be NULL)
 *   N_LIST/TUPLE v
 *   N_DICT       v (keys), w (values)
 *   N_NSREF      sym.<cval> (a set target)
 *   N_BODY       v (statements)
 *   N_TEXT       cval
 *   N_OUTPUT     a
 *   N_IF         if a: v else: w
 *   N_FOR        for a in b [if c]: v else: w
 *   N_SET        a = b
 *   N_SETBLOCK   a = body v, passed through the filter chain c (its innermost a is NULL)
 *   N_MACRO      sym = macro(params names, defaults w (NULL: none)) v
 *   N_CALLBLOCK  a (a call), caller(params names, defaults w) body v
 *   N_FILTERBLOCK body v through the filter chain c
 *   N_WITH       targets names[i]=w[i] evaluated outside, body v
 *   N_SCOPE      body v in its own scope ({% generation %})
 */
typedef struct gm_tnode {
    uint8_t kind, op;
    uint16_t flags;
    int32_t id;
    uint32_t sym;
    int32_t line;
    uint32_t nv, nw;
    struct gm_tnode *a, *b, *c, *d;
    struct gm_tnode **v, **w;
    gm_tv cval;
    gm_tv *names;  /* keyword names (nw), macro parameter names (nv of params) */
    uint32_t *psyms; /* N_MACRO/N_CALLBLOCK/N_WITH: symbols of the names */
    uint32_t nparams;
    uint8_t *ops;  /* N_COMPARE */
} gm_tnode;

/* ------------------------------------------------------------------ template */

typedef struct gm_tarena_chunk {
    struct gm_tarena_chunk *next;
    size_t used, cap;
    max_align_t data[];
} gm_tarena_chunk;

enum { SYM_LOOP, SYM_CALLER, SYM_VARARGS, SYM_KWARGS, SYM_NFIXED };

struct gm_tmpl {
    gm_tarena_chunk *arena;
    gm_tnode *root;
    uint32_t nsyms, capsyms;
    gm_tstr **syms;     /* interned names (immortal) */
    int16_t *sym_global; /* G_* id of each name, or -1 */
};

void *gm_tarena_alloc(gm_tmpl *t, size_t n);
void gm_tarena_free(gm_tmpl *t);
gm_tstr *gm_tarena_str(gm_tmpl *t, const char *p, size_t n); /* immortal string */
int gm_tmpl_intern(gm_tmpl *t, const char *p, size_t n, uint32_t *sym);

/* ------------------------------------------------------------------ tokens */

enum {
    TK_EOF, TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP,
};
/* operator codes of TK_OP (tok.op) */
enum {
    TO_ADD, TO_SUB, TO_DIV, TO_FLOORDIV, TO_MUL, TO_POW, TO_MOD, TO_TILDE, TO_LBRACKET,
    TO_RBRACKET, TO_LPAREN, TO_RPAREN, TO_LBRACE, TO_RBRACE, TO_EQ, TO_NE, TO_GT, TO_GE,
    TO_LT, TO_LE, TO_ASSIGN, TO_DOT, TO_COLON, TO_PIPE, TO_COMMA, TO_SEMICOLON,
};

typedef struct gm_ttok {
    uint8_t type, op;
    int32_t line;
    const char *p; /* TK_DATA, TK_NAME: into the normalized source; TK_STRING: decoded */
    size_t n;
    int64_t i;
    double d;
} gm_ttok;

typedef struct gm_ttoks {
    gm_ttok *t;
    size_t n, cap;
    char *src; /* the normalized source (owned) */
    char **strs; /* decoded string literals (owned) */
    size_t nstrs, capstrs;
} gm_ttoks;

int gm_tlex(gm_ttoks *out, const char *src, size_t len, gm_err *err);
void gm_ttoks_free(gm_ttoks *t);
int gm_tparse(gm_tmpl *t, const gm_ttoks *toks, gm_err *err);
/* check.c: Jinja's compile-time checks over the tree (see there). */
int gm_tcheck(const gm_tmpl *t, gm_tnode *root, int max_depth, gm_err *err);

/* ------------------------------------------------------------------ render context */

typedef struct gm_tbuf {
    char *p;
    size_t n, cap;
} gm_tbuf;

typedef struct gm_tctx {
    const gm_tmpl *t;
    gm_err *err;
    gm_tmpl_limits lim;
    uint64_t steps;
    uint32_t depth;    /* nesting of evaluation (expressions, calls, data being printed) */
    int32_t line;      /* template line being rendered, for messages */
    gm_tbuf *out;      /* where output goes (a capture while a macro or a set block runs) */
    gm_tframe *frame;  /* innermost scope */
    gm_tlink tracked;  /* namespaces and frames alive in this render */
    bool now_set;
    int64_t now_unix_s;
} gm_tctx;

/* Records "line N: ..." with the current line. Returns code. */
int gm_tfail(gm_tctx *c, int code, const char *fmt, ...) GM_PRINTF(3, 4);
/* Counts n steps of work; GM_ERANGE past the limit. */
int gm_tstep(gm_tctx *c, uint64_t n);
int gm_tdepth_enter(gm_tctx *c);
/* gm_tstep for work that already produced *out: releases *out when the limit is hit. */
int gm_tstep_out(gm_tctx *c, uint64_t n, gm_tv *out);
static inline void gm_tdepth_leave(gm_tctx *c) { c->depth--; }

/* A growable byte buffer bounded by max_output_bytes. */
int gm_tbuf_put(gm_tctx *c, gm_tbuf *b, const char *p, size_t n);
int gm_tbuf_putc(gm_tctx *c, gm_tbuf *b, char ch);
int gm_tbuf_putf(gm_tctx *c, gm_tbuf *b, const char *fmt, ...) GM_PRINTF(3, 4);
void gm_tbuf_free(gm_tbuf *b);

/* ------------------------------------------------------------------ unicode.c */

/* Decodes one code point at p (valid UTF-8, n > 0 bytes left); returns its byte length. */
size_t gm_u8_dec(const char *p, size_t n, uint32_t *cp);
/* Encodes cp into out (4 bytes room); returns the byte length. */
size_t gm_u8_enc(uint32_t cp, char *out);
bool gm_u8_valid(const char *p, size_t n);
size_t gm_u8_count(const char *p, size_t n);
/* Byte offset of code point index i (0 <= i <= ncp). */
size_t gm_u8_offset(const char *p, size_t n, size_t i);
bool gm_u_isspace(uint32_t cp);     /* str.isspace / str.split() */
bool gm_u_isprintable(uint32_t cp); /* repr() leaves it as is */
bool gm_u_isalpha(uint32_t cp);
bool gm_u_isdigit(uint32_t cp);
bool gm_u_isupper(uint32_t cp);
bool gm_u_islower(uint32_t cp);
bool gm_u_istitle_char(uint32_t cp); /* a titlecase letter (Lt): ǅ */
bool gm_u_isword(uint32_t cp); /* regex \w */
bool gm_u_islinebreak(uint32_t cp); /* str.splitlines */
/* Case mappings; a few code points map to two ('ß'.upper() == 'SS'): out gets up to 3. */
size_t gm_u_upper(uint32_t cp, uint32_t out[3]);
size_t gm_u_lower(uint32_t cp, uint32_t out[3]);
size_t gm_u_title(uint32_t cp, uint32_t out[3]);

/* ------------------------------------------------------------------ value.c */

static inline gm_tv gm_tv_undef(const char *name) { gm_tv v = {.k = TV_UNDEF}; v.u.name = name; return v; }
static inline gm_tv gm_tv_none(void) { gm_tv v = {.k = TV_NONE}; return v; }
static inline gm_tv gm_tv_bool(bool b) { gm_tv v = {.k = TV_BOOL}; v.u.b = b; return v; }
static inline gm_tv gm_tv_int(int64_t i) { gm_tv v = {.k = TV_INT}; v.u.i = i; return v; }
static inline gm_tv gm_tv_float(double d) { gm_tv v = {.k = TV_FLOAT}; v.u.d = d; return v; }
static inline bool gm_tv_heap(gm_tv v) { return v.k >= TV_STR && v.k != TV_FUNC; }

void gm_tobj_free(gm_tobj *o);
static inline void gm_tv_incref(gm_tv v)
{
    if (gm_tv_heap(v) && v.u.o->rc >= 0)
        v.u.o->rc++;
}
static inline void gm_tv_decref(gm_tv v)
{
    if (gm_tv_heap(v) && v.u.o->rc >= 0 && --v.u.o->rc == 0)
        gm_tobj_free(v.u.o);
}
static inline gm_tv gm_tv_ref(gm_tv v) { gm_tv_incref(v); return v; }

/* Strings. */
int gm_tv_str(gm_tctx *c, const char *p, size_t n, gm_tv *out);
int gm_tv_strz(gm_tctx *c, const char *s, gm_tv *out);
int gm_tv_str_buf(gm_tctx *c, gm_tbuf *b, gm_tv *out); /* takes b's bytes; b is emptied */
gm_tstr *gm_tstr_new(size_t n); /* uninitialised contents, ncp to be set by the caller */
bool gm_tstr_eq(const gm_tstr *s, const char *p, size_t n);

/* Lists and dicts (empty, mutable while being built). */
int gm_tv_list(gm_tctx *c, uint8_t lk, size_t cap, gm_tv *out);
int gm_tlist_push(gm_tctx *c, gm_tlist *l, gm_tv v); /* takes v's reference, even on failure */
int gm_tv_dict(gm_tctx *c, gm_tv *out);
/* Sets k = v (keys compared as Python compares them); takes both references. */
int gm_tdict_set(gm_tctx *c, gm_tdict *d, gm_tv k, gm_tv v);
/* Borrowed value of key k, or NULL. */
gm_tv *gm_tdict_get(const gm_tdict *d, gm_tv k);
gm_tv *gm_tdict_gets(const gm_tdict *d, const char *p, size_t n);

/* Tracked objects (namespaces, frames). */
int gm_tv_ns(gm_tctx *c, gm_tv *out);
gm_tframe *gm_tframe_new(gm_tctx *c, gm_tframe *parent);
void gm_track(gm_tctx *c, gm_tlink *l);
void gm_track_sweep(gm_tctx *c);

/* JSON input -> values (deep copy). */
int gm_tv_from_json(gm_tctx *c, const json_t *j, gm_tv *out, int depth);

/* Python semantics. */
bool gm_tv_truthy(gm_tv v);
int gm_tv_eq(gm_tctx *c, gm_tv a, gm_tv b, bool *eq);
/* Python's a < b (-1/0/1 via *cmp); TypeError for unorderable kinds. */
int gm_tv_cmp(gm_tctx *c, gm_tv a, gm_tv b, int *cmp);
bool gm_tv_hashable(gm_tv v);
const char *gm_tv_typename(gm_tv v); /* Python's type(v).__name__ */
/* Appends str(v) (repr == false) or repr(v). */
int gm_tv_write(gm_tctx *c, gm_tbuf *b, gm_tv v, bool repr);
/* str(v) as a string value (a string itself is returned with a new reference). */
int gm_tv_tostr(gm_tctx *c, gm_tv v, gm_tv *out);
/* Python repr of a float into out (32 bytes). */
void gm_float_repr(double d, char out[32]);
/* Python repr of a string. */
int gm_str_repr(gm_tctx *c, gm_tbuf *b, const char *p, size_t n);

typedef struct gm_tjson_opts {
    bool ensure_ascii;
    bool sort_keys;
    bool indent_set;
    const char *indent; /* indent unit */
    size_t indent_n;
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
} gm_tjson_opts;
/* json.dumps(v, ...) */
int gm_tv_json(gm_tctx *c, gm_tbuf *b, gm_tv v, const gm_tjson_opts *o, int level);

/* Iteration: the items a for loop, list() or a filter sees: a list value (new reference).
 * Strings give their characters, dicts their keys, undefined nothing. */
int gm_tv_iter(gm_tctx *c, gm_tv v, gm_tv *out_list);
/* len(v); TypeError for what has none. */
int gm_tv_len(gm_tctx *c, gm_tv v, int64_t *n);
/* A substring by code point range [i, j). */
int gm_tv_substr(gm_tctx *c, const gm_tstr *s, size_t i, size_t j, gm_tv *out);
/* markupsafe.escape(str(v)) */
int gm_tv_escape(gm_tctx *c, gm_tv v, gm_tv *out);

/* ------------------------------------------------------------------ eval.c */

typedef struct gm_targs {
    gm_tv *pos;
    size_t npos;
    gm_tv *kwv;
    gm_tv *kwn; /* names (strings) */
    size_t nkw;
} gm_targs;

/* Binds args to parameters named names[0..n) (Python rules: positional first, then keywords;
 * an unknown keyword or too many positionals is a TypeError). slot[i] must hold the default;
 * set[i] tells whether the caller gave it. Bound values are borrowed from args. */
int gm_targs_bind(gm_tctx *c, const gm_targs *a, const char *fname, size_t n,
                  const char *const *names, gm_tv *slot, bool *set);

int gm_teval(gm_tctx *c, const gm_tnode *n, gm_tv *out);
/* obj.name as Jinja's sandbox does it (attribute first, then item). */
int gm_tgetattr(gm_tctx *c, gm_tv obj, gm_tv name, int mid, gm_tv *out);
/* obj[key] (item first, then attribute). */
int gm_tgetitem(gm_tctx *c, gm_tv obj, gm_tv key, gm_tv *out);
/* Calls a callable value. */
int gm_tcall(gm_tctx *c, gm_tv f, const gm_targs *a, gm_tv *out);
int gm_tundef_error(gm_tctx *c, gm_tv u);
/* Python binary operators (OP_*). */
int gm_tbinop(gm_tctx *c, int op, gm_tv a, gm_tv b, gm_tv *out);
int gm_tcontains(gm_tctx *c, gm_tv container, gm_tv item, bool *in);
/* The error for an int64 result that Python would make a big integer. */
int gm_toverflow(gm_tctx *c);
/* Renders the whole template into c->out. */
int gm_trender_root(gm_tctx *c);

/* ------------------------------------------------------------------ filters.c */

/* Filter and test ids from a name; -1: not a Jinja name; -2: a Jinja built-in this renderer
 * does not implement. */
int gm_tfilter_id(const char *name, size_t n);
int gm_ttest_id(const char *name, size_t n);
int gm_tfilter_call(gm_tctx *c, int id, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_ttest_call(gm_tctx *c, int id, gm_tv v, const gm_targs *a, bool *out);
/* Calls a filter or test by name at run time (map('upper'), select('odd')). */
int gm_tfilter_byname(gm_tctx *c, gm_tv name, gm_tv v, const gm_targs *a, gm_tv *out);
int gm_ttest_byname(gm_tctx *c, gm_tv name, gm_tv v, const gm_targs *a, bool *out);

/* ------------------------------------------------------------------ methods.c */

enum {
    G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_CYCLER, G_JOINER, G_LIPSUM,
    G_NGLOBALS
};
int gm_tglobal_id(const char *name, size_t n);
int gm_tglobal_call(gm_tctx *c, int id, const gm_targs *a, gm_tv *out);

/* Method ids (M_*) for attribute names; -1: not a method name of any type. */
int gm_tmethod_id(const char *name, size_t n);
/* Whether value v has method mid: 0 no, 1 yes, 2 yes but the immutable sandbox refuses it. */
int gm_tmethod_has(gm_tv v, int mid);
const char *gm_tmethod_name(int mid);
int gm_tmethod_call(gm_tctx *c, gm_tv self, int mid, const gm_targs *a, gm_tv *out);

/* format.c: Python's str % args. */
int gm_tpercent(gm_tctx *c, gm_tv fmt, gm_tv args, gm_tv *out);
/* str.format(*args, **kwargs) */
int gm_tformat(gm_tctx *c, const gm_tstr *fmt, const gm_targs *a, gm_tv *out);
/* datetime.strftime of the render's time (now_unix_s in UTC when now_set, else local time). */
int gm_tstrftime(gm_tctx *c, const gm_tstr *fmt, gm_tv *out);
/* str methods shared with filters. */
int gm_tstr_strip(gm_tctx *c, gm_tv s, gm_tv chars, int which, gm_tv *out); /* 1 l, 2 r, 3 both */
int gm_tstr_case(gm_tctx *c, gm_tv s, int how, gm_tv *out); /* 'u','l','f','c','s','t' */
/* Whether the capital sigma at p[i..i+k) of p[0..n) lower-cases to the final form. */
bool gm_tfinal_sigma(const char *p, size_t n, size_t i, size_t k);
int gm_tstr_replace(gm_tctx *c, gm_tv s, gm_tv old, gm_tv nw, int64_t count, gm_tv *out);
int gm_tstr_splitlines(gm_tctx *c, const gm_tstr *s, bool keepends, gm_tv *out);
int gm_tstr_pad(gm_tctx *c, const gm_tstr *s, int64_t width, uint32_t fill, int how, gm_tv *out);

#endif
