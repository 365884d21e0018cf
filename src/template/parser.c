/* template/parser: tokens -> syntax tree, with Jinja2's grammar and precedence, then the checks
 * Jinja makes when it compiles a template.
 *
 * Precedence, loosest first (as Jinja's parser has it): "x if c else y"; or; and; not;
 * comparisons (chained, in, not in); + -; ~; * / // %; **; unary - +; then a primary with its
 * postfix (.attr, [index], (call)) and, bound tighter than any binary operator, filters
 * (|f), tests (is t) and calls after them. So "not x is defined" is "not (x is defined)" and
 * "'a' + s | trim" is "'a' + (s | trim)".
 *
 * Nesting is bounded (max_depth of the defaults) so hostile input cannot exhaust the stack; a
 * chain of one binary operator ("a + b + c ...") is a single node, so it does not nest. The
 * checks Jinja makes at compile time are in check.c (an unknown filter name is an error there,
 * except inside an {% if %}: DeepSeek's templates use "from_json" on a branch that only runs
 * for string arguments). */
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

#define PARSE_MAX_DEPTH 200

typedef struct parser {
    gm_tmpl *t;
    const gm_ttoks *tk;
    size_t i;
    gm_err *err;
    int depth;
} parser;

static const gm_ttok *cur(const parser *p) { return &p->tk->t[p->i]; }
static const gm_ttok *look(const parser *p) { return &p->tk->t[p->i + (p->i + 1 < p->tk->n)]; }
static void next(parser *p)
{
    if (p->i + 1 < p->tk->n)
        p->i++;
}

static bool tok_name(const gm_ttok *t, const char *s)
{
    return t->type == TK_NAME && t->n == strlen(s) && memcmp(t->p, s, t->n) == 0;
}
static bool tok_op(const gm_ttok *t, uint8_t op) { return t->type == TK_OP && t->op == op; }

static const char *describe(const gm_ttok *t, char *buf, size_t cap)
{
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "begin of print statement";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_BEGIN: return "begin of statement block";
    case TK_BLOCK_END: return "end of statement block";
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    default: break;
    }
    size_t n = t->n < cap - 1 ? t->n : cap - 1;
    memcpy(buf, t->p, n);
    buf[n] = 0;
    return buf;
}

static int pfail(parser *p, int line, const char *fmt, const char *arg)
{
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    return gm_err_set(p->err, GM_EFORMAT, "line %d: %s", line, msg);
}

static int unexpected(parser *p)
{
    char b[64];
    return pfail(p, cur(p)->line, "unexpected '%s'", describe(cur(p), b, sizeof b));
}

static int expect_op(parser *p, uint8_t op, const char *what)
{
    if (!tok_op(cur(p), op)) {
        char b[64], msg[200];
        snprintf(msg, sizeof msg, "expected '%s', got '%s'", what, describe(cur(p), b, sizeof b));
        return pfail(p, cur(p)->line, "%s", msg);
    }
    next(p);
    return 0;
}

static int expect_type(parser *p, uint8_t type, const char *what)
{
    if (cur(p)->type != type) {
        char b[64], msg[200];
        snprintf(msg, sizeof msg, "expected %s, got '%s'", what, describe(cur(p), b, sizeof b));
        return pfail(p, cur(p)->line, "%s", msg);
    }
    next(p);
    return 0;
}

static int enter(parser *p)
{
    if (++p->depth > PARSE_MAX_DEPTH)
        return gm_err_set(p->err, GM_ERANGE, "line %d: the template nests deeper than %d",
                          cur(p)->line, PARSE_MAX_DEPTH);
    return 0;
}

static gm_tnode *node(parser *p, uint8_t kind, int line)
{
    gm_tnode *n = gm_tarena_alloc(p->t, sizeof *n);
    if (!n) {
        gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
        return NULL;
    }
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->line = line;
    n->id = -1;
    return n;
}

/* A growable array of nodes, copied into the arena when done. */
typedef struct nvec {
    gm_tnode **a;
    uint32_t n, cap;
} nvec;

static int nvec_push(parser *p, nvec *v, gm_tnode *x)
{
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 8;
        gm_tnode **a = realloc(v->a, cap * sizeof *a);
        if (!a)
            return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
        v->a = a;
        v->cap = cap;
    }
    v->a[v->n++] = x;
    return 0;
}

static int nvec_done(parser *p, nvec *v, gm_tnode ***out, uint32_t *n)
{
    *n = v->n;
    *out = NULL;
    if (v->n) {
        *out = gm_tarena_alloc(p->t, v->n * sizeof **out);
        if (!*out) {
            free(v->a);
            return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
        }
        memcpy(*out, v->a, v->n * sizeof **out);
    }
    free(v->a);
    v->a = NULL;
    return 0;
}

static int mkstr(parser *p, const char *s, size_t n, gm_tv *out)
{
    gm_tstr *str = gm_tarena_str(p->t, s, n);
    if (!str)
        return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
    *out = (gm_tv){.k = TV_STR};
    out->u.s = str;
    return 0;
}

static int parse_expr(parser *p, bool with_cond, gm_tnode **out);
static int parse_tuple(parser *p, int mode, const char *extra_end, bool explicit_parens, gm_tnode **out);
static int parse_unary(parser *p, bool with_filter, gm_tnode **out);
static int parse_primary(parser *p, gm_tnode **out);
static int parse_postfix(parser *p, gm_tnode *n, gm_tnode **out);
static int parse_filter(parser *p, gm_tnode *n, bool start_inline, gm_tnode **out);
static int subparse(parser *p, const char *const *end, gm_tnode **body);

/* ( args ) into n->v (positional), n->w/names (keywords), n->c (*x), n->d (**x). */
static int parse_call_args(parser *p, gm_tnode *n)
{
    int line = cur(p)->line;
    int rc = expect_op(p, TO_LPAREN, "(");
    if (rc)
        return rc;
    nvec args = {0}, kwv = {0};
    gm_tv names[64];
    uint32_t nnames = 0;
    bool need_comma = false;
    while (!rc && !tok_op(cur(p), TO_RPAREN)) {
        if (need_comma) {
            if ((rc = expect_op(p, TO_COMMA, ",")))
                break;
            if (tok_op(cur(p), TO_RPAREN))
                break;
        }
        gm_tnode *e = NULL;
        if (tok_op(cur(p), TO_MUL)) {
            if (n->c || n->d) {
                rc = pfail(p, line, "invalid syntax for function call expression", NULL);
                break;
            }
            next(p);
            rc = parse_expr(p, true, &e);
            n->c = e;
        } else if (tok_op(cur(p), TO_POW)) {
            if (n->d) {
                rc = pfail(p, line, "invalid syntax for function call expression", NULL);
                break;
            }
            next(p);
            rc = parse_expr(p, true, &e);
            n->d = e;
        } else if (cur(p)->type == TK_NAME && tok_op(look(p), TO_ASSIGN)) {
            if (n->d) {
                rc = pfail(p, line, "invalid syntax for function call expression", NULL);
                break;
            }
            if (nnames == 64) {
                rc = gm_err_set(p->err, GM_EUNSUPPORTED, "line %d: more than 64 keyword arguments", line);
                break;
            }
            const gm_ttok *k = cur(p);
            if ((rc = mkstr(p, k->p, k->n, &names[nnames])))
                break;
            next(p);
            next(p);
            if (!(rc = parse_expr(p, true, &e))) {
                nnames++;
                rc = nvec_push(p, &kwv, e);
            }
        } else {
            if (n->c || n->d || kwv.n) {
                rc = pfail(p, line, "invalid syntax for function call expression", NULL);
                break;
            }
            if (!(rc = parse_expr(p, true, &e)))
                rc = nvec_push(p, &args, e);
        }
        need_comma = true;
    }
    if (!rc)
        rc = expect_op(p, TO_RPAREN, ")");
    if (!rc && nnames) {
        n->names = gm_tarena_alloc(p->t, nnames * sizeof *n->names);
        if (!n->names)
            rc = gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
        else
            memcpy(n->names, names, nnames * sizeof *names);
    }
    int rc2 = nvec_done(p, &args, &n->v, &n->nv);
    int rc3 = nvec_done(p, &kwv, &n->w, &n->nw);
    return rc ? rc : rc2 ? rc2 : rc3;
}

static int parse_subscribed(parser *p, gm_tnode **out)
{
    int line = cur(p)->line;
    gm_tnode *parts[3] = {NULL, NULL, NULL};
    int rc;
    if (tok_op(cur(p), TO_COLON)) {
        next(p);
    } else {
        if ((rc = parse_expr(p, true, &parts[0])))
            return rc;
        if (!tok_op(cur(p), TO_COLON)) {
            *out = parts[0];
            return 0;
        }
        next(p);
    }
    if (!tok_op(cur(p), TO_COLON) && !tok_op(cur(p), TO_RBRACKET) && !tok_op(cur(p), TO_COMMA))
        if ((rc = parse_expr(p, true, &parts[1])))
            return rc;
    if (tok_op(cur(p), TO_COLON)) {
        next(p);
        if (!tok_op(cur(p), TO_RBRACKET) && !tok_op(cur(p), TO_COMMA))
            if ((rc = parse_expr(p, true, &parts[2])))
                return rc;
    }
    gm_tnode *s = node(p, N_SLICE, line);
    if (!s)
        return GM_ENOMEM;
    s->a = parts[0], s->b = parts[1], s->c = parts[2];
    *out = s;
    return 0;
}

static int parse_subscript(parser *p, gm_tnode *obj, gm_tnode **out)
{
    const gm_ttok *t = cur(p);
    int line = t->line, rc;
    next(p);
    if (t->type == TK_OP && t->op == TO_DOT) {
        const gm_ttok *a = cur(p);
        next(p);
        if (a->type == TK_NAME) {
            gm_tnode *n = node(p, N_GETATTR, line);
            if (!n)
                return GM_ENOMEM;
            n->a = obj;
            if ((rc = mkstr(p, a->p, a->n, &n->cval)))
                return rc;
            n->id = gm_tmethod_id(a->p, a->n);
            *out = n;
            return 0;
        }
        if (a->type != TK_INT)
            return pfail(p, a->line, "expected name or number", NULL);
        gm_tnode *n = node(p, N_GETITEM, line), *k = node(p, N_CONST, a->line);
        if (!n || !k)
            return GM_ENOMEM;
        k->cval = gm_tv_int(a->i);
        n->a = obj, n->b = k;
        *out = n;
        return 0;
    }
    /* [ ... ] */
    nvec args = {0};
    rc = 0;
    while (!rc && !tok_op(cur(p), TO_RBRACKET)) {
        if (args.n && (rc = expect_op(p, TO_COMMA, ",")))
            break;
        gm_tnode *e;
        if (!(rc = parse_subscribed(p, &e)))
            rc = nvec_push(p, &args, e);
    }
    if (!rc)
        rc = expect_op(p, TO_RBRACKET, "]");
    if (rc) {
        free(args.a);
        return rc;
    }
    gm_tnode *n = node(p, N_GETITEM, line);
    if (!n) {
        free(args.a);
        return GM_ENOMEM;
    }
    n->a = obj;
    if (args.n == 1) {
        n->b = args.a[0];
        free(args.a);
    } else {
        gm_tnode *tup = node(p, N_TUPLE, line);
        if (!tup) {
            free(args.a);
            return GM_ENOMEM;
        }
        if ((rc = nvec_done(p, &args, &tup->v, &tup->nv)))
            return rc;
        n->b = tup;
    }
    *out = n;
    return 0;
}

static int parse_call(parser *p, gm_tnode *fn, gm_tnode **out)
{
    gm_tnode *n = node(p, N_CALL, cur(p)->line);
    if (!n)
        return GM_ENOMEM;
    n->a = fn;
    int rc = parse_call_args(p, n);
    if (rc)
        return rc;
    *out = n;
    return 0;
}

static int parse_postfix(parser *p, gm_tnode *n, gm_tnode **out)
{
    int rc;
    for (;;) {
        const gm_ttok *t = cur(p);
        if (tok_op(t, TO_DOT) || tok_op(t, TO_LBRACKET))
            rc = parse_subscript(p, n, &n);
        else if (tok_op(t, TO_LPAREN))
            rc = parse_call(p, n, &n);
        else
            break;
        if (rc)
            return rc;
    }
    *out = n;
    return 0;
}

/* |name[.name][(args)] ... ; n may be NULL (filter blocks, set blocks). */
static int parse_filter(parser *p, gm_tnode *n, bool start_inline, gm_tnode **out)
{
    int rc;
    while (tok_op(cur(p), TO_PIPE) || start_inline) {
        if (!start_inline)
            next(p);
        start_inline = false;
        const gm_ttok *nt = cur(p);
        if ((rc = expect_type(p, TK_NAME, "a filter name")))
            return rc;
        const char *name = nt->p;
        size_t nlen = nt->n;
        bool dotted = false;
        while (tok_op(cur(p), TO_DOT)) {
            next(p);
            if ((rc = expect_type(p, TK_NAME, "a name")))
                return rc;
            dotted = true;
        }
        if (dotted)
            nlen = (size_t)(p->tk->t[p->i - 1].p + p->tk->t[p->i - 1].n - name);
        gm_tnode *f = node(p, N_FILTER, nt->line);
        if (!f)
            return GM_ENOMEM;
        f->a = n;
        if ((rc = mkstr(p, name, nlen, &f->cval)))
            return rc;
        f->id = dotted ? -1 : gm_tfilter_id(name, nlen);
        if (tok_op(cur(p), TO_LPAREN) && (rc = parse_call_args(p, f)))
            return rc;
        n = f;
    }
    *out = n;
    return 0;
}

static int parse_test(parser *p, gm_tnode *n, gm_tnode **out)
{
    int line = cur(p)->line, rc;
    next(p); /* is */
    bool negated = false;
    if (tok_name(cur(p), "not")) {
        next(p);
        negated = true;
    }
    const gm_ttok *nt = cur(p);
    if ((rc = expect_type(p, TK_NAME, "a test name")))
        return rc;
    const char *name = nt->p;
    size_t nlen = nt->n;
    bool dotted = false;
    while (tok_op(cur(p), TO_DOT)) {
        next(p);
        if ((rc = expect_type(p, TK_NAME, "a name")))
            return rc;
        dotted = true;
    }
    if (dotted)
        nlen = (size_t)(p->tk->t[p->i - 1].p + p->tk->t[p->i - 1].n - name);
    gm_tnode *t = node(p, N_TEST, line);
    if (!t)
        return GM_ENOMEM;
    t->a = n;
    if ((rc = mkstr(p, name, nlen, &t->cval)))
        return rc;
    t->id = dotted ? -1 : gm_ttest_id(name, nlen);
    const gm_ttok *c = cur(p);
    if (tok_op(c, TO_LPAREN)) {
        if ((rc = parse_call_args(p, t)))
            return rc;
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT || c->type == TK_FLOAT ||
                tok_op(c, TO_LPAREN) || tok_op(c, TO_LBRACKET) || tok_op(c, TO_LBRACE)) &&
               !tok_name(c, "else") && !tok_name(c, "or") && !tok_name(c, "and")) {
        /* one argument without parentheses: "x is divisibleby 3", "x is sameas none" */
        if (tok_name(c, "is"))
            return pfail(p, c->line, "You cannot chain multiple tests with is", NULL);
        gm_tnode *arg;
        if ((rc = parse_primary(p, &arg)) || (rc = parse_postfix(p, arg, &arg)))
            return rc;
        t->v = gm_tarena_alloc(p->t, sizeof *t->v);
        if (!t->v)
            return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
        t->v[0] = arg;
        t->nv = 1;
    }
    if (negated) {
        gm_tnode *nn = node(p, N_NOT, line);
        if (!nn)
            return GM_ENOMEM;
        nn->a = t;
        t = nn;
    }
    *out = t;
    return 0;
}

static int parse_filter_expr(parser *p, gm_tnode *n, gm_tnode **out)
{
    int rc;
    for (;;) {
        const gm_ttok *t = cur(p);
        if (tok_op(t, TO_PIPE))
            rc = parse_filter(p, n, false, &n);
        else if (tok_name(t, "is"))
            rc = parse_test(p, n, &n);
        else if (tok_op(t, TO_LPAREN))
            rc = parse_call(p, n, &n);
        else
            break;
        if (rc)
            return rc;
    }
    *out = n;
    return 0;
}

static int parse_list_lit(parser *p, gm_tnode **out)
{
    gm_tnode *n = node(p, N_LIST, cur(p)->line);
    if (!n)
        return GM_ENOMEM;
    next(p);
    nvec items = {0};
    int rc = 0;
    while (!tok_op(cur(p), TO_RBRACKET)) {
        if (items.n && (rc = expect_op(p, TO_COMMA, ",")))
            break;
        if (tok_op(cur(p), TO_RBRACKET))
            break;
        gm_tnode *e;
        if ((rc = parse_expr(p, true, &e)) || (rc = nvec_push(p, &items, e)))
            break;
    }
    if (!rc)
        rc = expect_op(p, TO_RBRACKET, "]");
    int rc2 = nvec_done(p, &items, &n->v, &n->nv);
    *out = n;
    return rc ? rc : rc2;
}

static int parse_dict_lit(parser *p, gm_tnode **out)
{
    gm_tnode *n = node(p, N_DICT, cur(p)->line);
    if (!n)
        return GM_ENOMEM;
    next(p);
    nvec keys = {0}, vals = {0};
    int rc = 0;
    while (!tok_op(cur(p), TO_RBRACE)) {
        if (keys.n && (rc = expect_op(p, TO_COMMA, ",")))
            break;
        if (tok_op(cur(p), TO_RBRACE))
            break;
        gm_tnode *k, *v;
        if ((rc = parse_expr(p, true, &k)) || (rc = expect_op(p, TO_COLON, ":")) ||
            (rc = parse_expr(p, true, &v)) || (rc = nvec_push(p, &keys, k)) ||
            (rc = nvec_push(p, &vals, v)))
            break;
    }
    if (!rc)
        rc = expect_op(p, TO_RBRACE, "}");
    int rc2 = nvec_done(p, &keys, &n->v, &n->nv);
    int rc3 = nvec_done(p, &vals, &n->w, &n->nw);
    *out = n;
    return rc ? rc : rc2 ? rc2 : rc3;
}

static int parse_primary(parser *p, gm_tnode **out)
{
    int rc = enter(p);
    if (rc)
        return rc;
    const gm_ttok *t = cur(p);
    gm_tnode *n = NULL;
    if (t->type == TK_NAME) {
        n = node(p, N_CONST, t->line);
        if (!n)
            return GM_ENOMEM;
        if (tok_name(t, "true") || tok_name(t, "True")) {
            n->cval = gm_tv_bool(true);
        } else if (tok_name(t, "false") || tok_name(t, "False")) {
            n->cval = gm_tv_bool(false);
        } else if (tok_name(t, "none") || tok_name(t, "None")) {
            n->cval = gm_tv_none();
        } else {
            n->kind = N_NAME;
            if ((rc = gm_tmpl_intern(p->t, t->p, t->n, &n->sym)))
                return gm_err_set(p->err, rc, "template: out of memory");
            n->cval = (gm_tv){.k = TV_STR};
            n->cval.u.s = p->t->syms[n->sym];
        }
        next(p);
    } else if (t->type == TK_STRING) {
        int line = t->line;
        /* adjacent literals concatenate: "a" "b" */
        size_t total = 0, j = p->i;
        while (p->tk->t[j].type == TK_STRING)
            total += p->tk->t[j++].n;
        char *buf = malloc(total + 1);
        if (!buf)
            return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
        size_t off = 0;
        while (cur(p)->type == TK_STRING) {
            memcpy(buf + off, cur(p)->p, cur(p)->n);
            off += cur(p)->n;
            next(p);
        }
        n = node(p, N_CONST, line);
        rc = n ? mkstr(p, buf, total, &n->cval) : GM_ENOMEM;
        free(buf);
        if (rc)
            return rc;
    } else if (t->type == TK_INT || t->type == TK_FLOAT) {
        n = node(p, N_CONST, t->line);
        if (!n)
            return GM_ENOMEM;
        n->cval = t->type == TK_INT ? gm_tv_int(t->i) : gm_tv_float(t->d);
        next(p);
    } else if (tok_op(t, TO_LPAREN)) {
        next(p);
        if ((rc = parse_tuple(p, 0, NULL, true, &n)) || (rc = expect_op(p, TO_RPAREN, ")")))
            return rc;
    } else if (tok_op(t, TO_LBRACKET)) {
        if ((rc = parse_list_lit(p, &n)))
            return rc;
    } else if (tok_op(t, TO_LBRACE)) {
        if ((rc = parse_dict_lit(p, &n)))
            return rc;
    } else {
        return unexpected(p);
    }
    p->depth--;
    *out = n;
    return 0;
}

static int parse_unary(parser *p, bool with_filter, gm_tnode **out)
{
    int rc = enter(p);
    if (rc)
        return rc;
    const gm_ttok *t = cur(p);
    gm_tnode *n;
    if (tok_op(t, TO_SUB) || tok_op(t, TO_ADD)) {
        n = node(p, tok_op(t, TO_SUB) ? N_NEG : N_POS, t->line);
        if (!n)
            return GM_ENOMEM;
        next(p);
        if ((rc = parse_unary(p, false, &n->a)))
            return rc;
    } else if ((rc = parse_primary(p, &n))) {
        return rc;
    }
    if ((rc = parse_postfix(p, n, &n)))
        return rc;
    if (with_filter && (rc = parse_filter_expr(p, n, &n)))
        return rc;
    p->depth--;
    *out = n;
    return 0;
}

/* A left-associative chain "x op y op z ..." is one node (first operand in a, the others in v,
 * the operators in ops) folded from the left when rendered: a long "a + b + c + ..." then nests
 * no deeper than one operator. */
typedef struct chain {
    nvec operands;
    uint8_t *ops;
    size_t nops, cap;
} chain;

static int chain_add(parser *p, chain *ch, uint8_t op, gm_tnode *x)
{
    if (ch->nops == ch->cap) {
        size_t cap = ch->cap ? ch->cap * 2 : 8;
        uint8_t *o = realloc(ch->ops, cap);
        if (!o)
            return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
        ch->ops = o;
        ch->cap = cap;
    }
    int rc = nvec_push(p, &ch->operands, x);
    if (!rc)
        ch->ops[ch->nops++] = op;
    return rc;
}

/* Ends a chain started with first: first itself when no operator followed. */
static int chain_done(parser *p, chain *ch, uint8_t kind, int line, gm_tnode *first, int rc, gm_tnode **out)
{
    *out = first;
    if (rc || ch->nops == 0) {
        free(ch->operands.a);
        free(ch->ops);
        return rc;
    }
    gm_tnode *n = node(p, kind, line);
    if (!n) {
        free(ch->operands.a);
        free(ch->ops);
        return GM_ENOMEM;
    }
    n->a = first;
    n->ops = gm_tarena_alloc(p->t, ch->nops);
    if (!n->ops) {
        free(ch->operands.a);
        free(ch->ops);
        return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
    }
    memcpy(n->ops, ch->ops, ch->nops);
    free(ch->ops);
    rc = nvec_done(p, &ch->operands, &n->v, &n->nv);
    *out = n;
    return rc;
}

static int parse_pow(parser *p, gm_tnode **out)
{
    gm_tnode *first, *r;
    chain ch = {0};
    int line = cur(p)->line;
    int rc = parse_unary(p, true, &first);
    while (!rc && tok_op(cur(p), TO_POW)) {
        next(p);
        if (!(rc = parse_unary(p, true, &r)))
            rc = chain_add(p, &ch, OP_POW, r);
    }
    return chain_done(p, &ch, N_BINOP, line, first, rc, out);
}

static int parse_math2(parser *p, gm_tnode **out)
{
    gm_tnode *first, *r;
    chain ch = {0};
    int line = cur(p)->line;
    int rc = parse_pow(p, &first);
    for (;;) {
        if (rc)
            break;
        const gm_ttok *t = cur(p);
        uint8_t op;
        if (tok_op(t, TO_MUL))
            op = OP_MUL;
        else if (tok_op(t, TO_DIV))
            op = OP_DIV;
        else if (tok_op(t, TO_FLOORDIV))
            op = OP_FLOORDIV;
        else if (tok_op(t, TO_MOD))
            op = OP_MOD;
        else
            break;
        next(p);
        if (!(rc = parse_pow(p, &r)))
            rc = chain_add(p, &ch, op, r);
    }
    return chain_done(p, &ch, N_BINOP, line, first, rc, out);
}

static int parse_concat(parser *p, gm_tnode **out)
{
    gm_tnode *first;
    int line = cur(p)->line;
    int rc = parse_math2(p, &first);
    if (rc || !tok_op(cur(p), TO_TILDE)) {
        *out = first;
        return rc;
    }
    nvec args = {0};
    rc = nvec_push(p, &args, first);
    while (!rc && tok_op(cur(p), TO_TILDE)) {
        next(p);
        gm_tnode *e;
        if (!(rc = parse_math2(p, &e)))
            rc = nvec_push(p, &args, e);
    }
    gm_tnode *n = node(p, N_CONCAT, line);
    if (!n) {
        free(args.a);
        return GM_ENOMEM;
    }
    int rc2 = nvec_done(p, &args, &n->v, &n->nv);
    *out = n;
    return rc ? rc : rc2;
}

static int parse_math1(parser *p, gm_tnode **out)
{
    gm_tnode *first, *r;
    chain ch = {0};
    int line = cur(p)->line;
    int rc = parse_concat(p, &first);
    while (!rc && (tok_op(cur(p), TO_ADD) || tok_op(cur(p), TO_SUB))) {
        uint8_t op = tok_op(cur(p), TO_ADD) ? OP_ADD : OP_SUB;
        next(p);
        if (!(rc = parse_concat(p, &r)))
            rc = chain_add(p, &ch, op, r);
    }
    return chain_done(p, &ch, N_BINOP, line, first, rc, out);
}

static int parse_compare(parser *p, gm_tnode **out)
{
    gm_tnode *first;
    int line = cur(p)->line;
    int rc = parse_math1(p, &first);
    if (rc)
        return rc;
    nvec operands = {0};
    uint8_t ops[256];
    for (;;) {
        const gm_ttok *t = cur(p);
        int op = -1;
        if (t->type == TK_OP) {
            switch (t->op) {
            case TO_EQ: op = CMP_EQ; break;
            case TO_NE: op = CMP_NE; break;
            case TO_LT: op = CMP_LT; break;
            case TO_LE: op = CMP_LE; break;
            case TO_GT: op = CMP_GT; break;
            case TO_GE: op = CMP_GE; break;
            default: break;
            }
            if (op >= 0)
                next(p);
        } else if (tok_name(t, "in")) {
            op = CMP_IN;
            next(p);
        } else if (tok_name(t, "not") && tok_name(look(p), "in")) {
            op = CMP_NOTIN;
            next(p);
            next(p);
        }
        if (op < 0)
            break;
        if (operands.n == sizeof ops) {
            free(operands.a);
            return gm_err_set(p->err, GM_ERANGE, "line %d: too many chained comparisons", line);
        }
        gm_tnode *e;
        if ((rc = parse_math1(p, &e)) || (rc = nvec_push(p, &operands, e))) {
            free(operands.a);
            return rc;
        }
        ops[operands.n - 1] = (uint8_t)op;
    }
    if (!operands.n) {
        *out = first;
        return 0;
    }
    gm_tnode *n = node(p, N_COMPARE, line);
    if (!n) {
        free(operands.a);
        return GM_ENOMEM;
    }
    n->a = first;
    n->ops = gm_tarena_alloc(p->t, operands.n);
    if (!n->ops) {
        free(operands.a);
        return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
    }
    memcpy(n->ops, ops, operands.n);
    rc = nvec_done(p, &operands, &n->v, &n->nv);
    *out = n;
    return rc;
}

static int parse_not(parser *p, gm_tnode **out)
{
    if (tok_name(cur(p), "not")) {
        int rc = enter(p);
        if (rc)
            return rc;
        gm_tnode *n = node(p, N_NOT, cur(p)->line);
        if (!n)
            return GM_ENOMEM;
        next(p);
        if ((rc = parse_not(p, &n->a)))
            return rc;
        p->depth--;
        *out = n;
        return 0;
    }
    return parse_compare(p, out);
}

static int parse_and(parser *p, gm_tnode **out)
{
    gm_tnode *first, *r;
    chain ch = {0};
    int line = cur(p)->line;
    int rc = parse_not(p, &first);
    while (!rc && tok_name(cur(p), "and")) {
        next(p);
        if (!(rc = parse_not(p, &r)))
            rc = chain_add(p, &ch, 0, r);
    }
    return chain_done(p, &ch, N_AND, line, first, rc, out);
}

static int parse_or(parser *p, gm_tnode **out)
{
    gm_tnode *first, *r;
    chain ch = {0};
    int line = cur(p)->line;
    int rc = parse_and(p, &first);
    while (!rc && tok_name(cur(p), "or")) {
        next(p);
        if (!(rc = parse_and(p, &r)))
            rc = chain_add(p, &ch, 0, r);
    }
    return chain_done(p, &ch, N_OR, line, first, rc, out);
}

static int parse_condexpr(parser *p, gm_tnode **out)
{
    int rc = enter(p);
    if (rc)
        return rc;
    gm_tnode *e1;
    int line = cur(p)->line;
    if ((rc = parse_or(p, &e1)))
        return rc;
    while (tok_name(cur(p), "if")) {
        next(p);
        gm_tnode *n = node(p, N_COND, line);
        if (!n)
            return GM_ENOMEM;
        n->b = e1;
        if ((rc = parse_or(p, &n->a)))
            return rc;
        if (tok_name(cur(p), "else")) {
            next(p);
            if ((rc = parse_condexpr(p, &n->c)))
                return rc;
        }
        e1 = n;
        line = cur(p)->line;
    }
    p->depth--;
    *out = e1;
    return 0;
}

static int parse_expr(parser *p, bool with_cond, gm_tnode **out)
{
    return with_cond ? parse_condexpr(p, out) : parse_or(p, out);
}

static bool tuple_end(const parser *p, const char *extra_end)
{
    const gm_ttok *t = cur(p);
    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || tok_op(t, TO_RPAREN))
        return true;
    return extra_end && tok_name(t, extra_end);
}

/* mode 0: full expressions; 1: no inline if; 2: primaries only (assignment targets) */
static int parse_tuple(parser *p, int mode, const char *extra_end, bool explicit_parens, gm_tnode **out)
{
    int line = cur(p)->line, rc = 0;
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && (rc = expect_op(p, TO_COMMA, ",")))
            break;
        if (tuple_end(p, extra_end))
            break;
        gm_tnode *e;
        if (mode == 2)
            rc = parse_primary(p, &e);
        else
            rc = parse_expr(p, mode == 0, &e);
        if (rc || (rc = nvec_push(p, &args, e)))
            break;
        if (tok_op(cur(p), TO_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (rc) {
        free(args.a);
        return rc;
    }
    if (!is_tuple) {
        if (args.n) {
            *out = args.a[0];
            free(args.a);
            return 0;
        }
        if (!explicit_parens) {
            char b[64];
            free(args.a);
            return pfail(p, cur(p)->line, "Expected an expression, got '%s'", describe(cur(p), b, sizeof b));
        }
    }
    gm_tnode *n = node(p, N_TUPLE, line);
    if (!n) {
        free(args.a);
        return GM_ENOMEM;
    }
    rc = nvec_done(p, &args, &n->v, &n->nv);
    *out = n;
    return rc;
}

static bool can_assign(const gm_tnode *n)
{
    if (n->kind == N_NAME || n->kind == N_NSREF)
        return true;
    if (n->kind != N_TUPLE)
        return false;
    for (uint32_t i = 0; i < n->nv; i++)
        if (!can_assign(n->v[i]))
            return false;
    return true;
}

static int parse_assign_target(parser *p, bool name_only, const char *extra_end, bool with_ns, gm_tnode **out)
{
    int rc;
    const gm_ttok *t = cur(p);
    gm_tnode *n;
    if (with_ns && t->type == TK_NAME && tok_op(look(p), TO_DOT)) {
        n = node(p, N_NSREF, t->line);
        if (!n)
            return GM_ENOMEM;
        if ((rc = gm_tmpl_intern(p->t, t->p, t->n, &n->sym)))
            return gm_err_set(p->err, rc, "template: out of memory");
        next(p);
        next(p);
        const gm_ttok *a = cur(p);
        if ((rc = expect_type(p, TK_NAME, "a name")))
            return rc;
        if ((rc = mkstr(p, a->p, a->n, &n->cval)))
            return rc;
    } else if (name_only) {
        if ((rc = expect_type(p, TK_NAME, "a name")))
            return rc;
        n = node(p, N_NAME, t->line);
        if (!n)
            return GM_ENOMEM;
        if ((rc = gm_tmpl_intern(p->t, t->p, t->n, &n->sym)))
            return gm_err_set(p->err, rc, "template: out of memory");
        n->cval = (gm_tv){.k = TV_STR};
        n->cval.u.s = p->t->syms[n->sym];
    } else {
        if ((rc = parse_tuple(p, 2, extra_end, false, &n)))
            return rc;
    }
    if (!can_assign(n))
        return pfail(p, n->line, "can't assign to this expression", NULL);
    *out = n;
    return 0;
}

/* parse_statements: [:] %} body up to one of end (a name); the end name is left current
 * unless drop. */
static int parse_statements(parser *p, const char *const *end, bool drop, gm_tnode **body)
{
    int rc;
    if (tok_op(cur(p), TO_COLON))
        next(p);
    if ((rc = expect_type(p, TK_BLOCK_END, "end of statement block")))
        return rc;
    if ((rc = subparse(p, end, body)))
        return rc;
    if (cur(p)->type == TK_EOF) {
        char msg[200];
        snprintf(msg, sizeof msg, "unexpected end of template: Jinja was looking for the tag '%s'", end[0]);
        return pfail(p, cur(p)->line, "%s", msg);
    }
    if (drop)
        next(p);
    return 0;
}

static int parse_signature(parser *p, gm_tnode *n)
{
    int rc = expect_op(p, TO_LPAREN, "(");
    if (rc)
        return rc;
    gm_tv names[64];
    uint32_t syms[64];
    nvec defs = {0};
    uint32_t np = 0;
    bool any_default = false;
    while (!rc && !tok_op(cur(p), TO_RPAREN)) {
        if (np && (rc = expect_op(p, TO_COMMA, ",")))
            break;
        const gm_ttok *t = cur(p);
        if ((rc = expect_type(p, TK_NAME, "a parameter name")))
            break;
        if (np == 64) {
            rc = gm_err_set(p->err, GM_EUNSUPPORTED, "line %d: more than 64 parameters", t->line);
            break;
        }
        if ((rc = gm_tmpl_intern(p->t, t->p, t->n, &syms[np]))) {
            rc = gm_err_set(p->err, rc, "template: out of memory");
            break;
        }
        names[np] = (gm_tv){.k = TV_STR};
        names[np].u.s = p->t->syms[syms[np]];
        gm_tnode *d = NULL;
        if (tok_op(cur(p), TO_ASSIGN)) {
            next(p);
            if ((rc = parse_expr(p, true, &d)))
                break;
            any_default = true;
        } else if (any_default) {
            rc = pfail(p, t->line, "non-default argument follows default argument", NULL);
            break;
        }
        if ((rc = nvec_push(p, &defs, d)))
            break;
        np++;
    }
    if (!rc)
        rc = expect_op(p, TO_RPAREN, ")");
    if (rc) {
        free(defs.a);
        return rc;
    }
    n->nparams = np;
    if (np) {
        n->names = gm_tarena_alloc(p->t, np * sizeof *n->names);
        n->psyms = gm_tarena_alloc(p->t, np * sizeof *n->psyms);
        if (!n->names || !n->psyms) {
            free(defs.a);
            return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
        }
        memcpy(n->names, names, np * sizeof *names);
        memcpy(n->psyms, syms, np * sizeof *syms);
    }
    return nvec_done(p, &defs, &n->w, &n->nw);
}

static int parse_statement(parser *p, gm_tnode **out)
{
    const gm_ttok *t = cur(p);
    int line = t->line, rc;
    if (t->type != TK_NAME)
        return pfail(p, line, "tag name expected", NULL);
    gm_tnode *n;
    if (tok_name(t, "if")) {
        static const char *const end1[] = {"elif", "else", "endif", NULL};
        static const char *const end2[] = {"endif", NULL};
        gm_tnode *top = NULL, *last = NULL;
        for (;;) {
            gm_tnode *ifn = node(p, N_IF, cur(p)->line);
            if (!ifn)
                return GM_ENOMEM;
            next(p); /* if / elif */
            if ((rc = parse_tuple(p, 1, NULL, false, &ifn->a)))
                return rc;
            gm_tnode *body;
            if ((rc = parse_statements(p, end1, false, &body)))
                return rc;
            ifn->v = body->v, ifn->nv = body->nv;
            if (last) {
                last->w = gm_tarena_alloc(p->t, sizeof *last->w);
                if (!last->w)
                    return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
                last->w[0] = ifn;
                last->nw = 1;
            } else {
                top = ifn;
            }
            last = ifn;
            if (tok_name(cur(p), "elif"))
                continue;
            if (tok_name(cur(p), "else")) {
                next(p);
                if ((rc = parse_statements(p, end2, true, &body)))
                    return rc;
                last->w = body->v, last->nw = body->nv;
            } else {
                next(p); /* endif */
            }
            break;
        }
        *out = top;
        return 0;
    }
    if (tok_name(t, "for")) {
        static const char *const end1[] = {"endfor", "else", NULL};
        static const char *const end2[] = {"endfor", NULL};
        n = node(p, N_FOR, line);
        if (!n)
            return GM_ENOMEM;
        next(p);
        if ((rc = parse_assign_target(p, false, "in", false, &n->a)))
            return rc;
        if (!tok_name(cur(p), "in"))
            return pfail(p, cur(p)->line, "expected 'in'", NULL);
        next(p);
        if ((rc = parse_tuple(p, 1, "recursive", false, &n->b)))
            return rc;
        if (tok_name(cur(p), "if")) {
            next(p);
            if ((rc = parse_expr(p, true, &n->c)))
                return rc;
        }
        if (tok_name(cur(p), "recursive")) {
            next(p);
            n->flags |= NF_RECURSIVE;
        }
        gm_tnode *body;
        if ((rc = parse_statements(p, end1, false, &body)))
            return rc;
        n->v = body->v, n->nv = body->nv;
        bool is_else = tok_name(cur(p), "else");
        next(p);
        if (is_else) {
            if ((rc = parse_statements(p, end2, true, &body)))
                return rc;
            n->w = body->v, n->nw = body->nv;
        }
        *out = n;
        return 0;
    }
    if (tok_name(t, "set")) {
        static const char *const end[] = {"endset", NULL};
        next(p);
        gm_tnode *target;
        if ((rc = parse_assign_target(p, false, NULL, true, &target)))
            return rc;
        if (tok_op(cur(p), TO_ASSIGN)) {
            next(p);
            n = node(p, N_SET, line);
            if (!n)
                return GM_ENOMEM;
            n->a = target;
            if ((rc = parse_tuple(p, 0, NULL, false, &n->b)))
                return rc;
            *out = n;
            return 0;
        }
        n = node(p, N_SETBLOCK, line);
        if (!n)
            return GM_ENOMEM;
        n->a = target;
        if ((rc = parse_filter(p, NULL, false, &n->c)))
            return rc;
        gm_tnode *body;
        if ((rc = parse_statements(p, end, true, &body)))
            return rc;
        n->v = body->v, n->nv = body->nv;
        *out = n;
        return 0;
    }
    if (tok_name(t, "macro") || tok_name(t, "call")) {
        static const char *const endm[] = {"endmacro", NULL};
        static const char *const endc[] = {"endcall", NULL};
        bool is_macro = tok_name(t, "macro");
        n = node(p, is_macro ? N_MACRO : N_CALLBLOCK, line);
        if (!n)
            return GM_ENOMEM;
        next(p);
        if (is_macro) {
            const gm_ttok *nt = cur(p);
            if ((rc = expect_type(p, TK_NAME, "a macro name")))
                return rc;
            if ((rc = gm_tmpl_intern(p->t, nt->p, nt->n, &n->sym)))
                return gm_err_set(p->err, rc, "template: out of memory");
            if ((rc = parse_signature(p, n)))
                return rc;
        } else {
            if (tok_op(cur(p), TO_LPAREN) && (rc = parse_signature(p, n)))
                return rc;
            if ((rc = parse_expr(p, true, &n->a)))
                return rc;
            if (n->a->kind != N_CALL)
                return pfail(p, line, "expected call", NULL);
        }
        gm_tnode *body;
        if ((rc = parse_statements(p, is_macro ? endm : endc, true, &body)))
            return rc;
        n->v = body->v, n->nv = body->nv;
        *out = n;
        return 0;
    }
    if (tok_name(t, "filter")) {
        static const char *const end[] = {"endfilter", NULL};
        n = node(p, N_FILTERBLOCK, line);
        if (!n)
            return GM_ENOMEM;
        next(p);
        if ((rc = parse_filter(p, NULL, true, &n->c)))
            return rc;
        gm_tnode *body;
        if ((rc = parse_statements(p, end, true, &body)))
            return rc;
        n->v = body->v, n->nv = body->nv;
        *out = n;
        return 0;
    }
    if (tok_name(t, "with")) {
        static const char *const end[] = {"endwith", NULL};
        n = node(p, N_WITH, line);
        if (!n)
            return GM_ENOMEM;
        next(p);
        gm_tv names[64];
        uint32_t syms[64], k = 0;
        nvec vals = {0};
        rc = 0;
        while (!rc && cur(p)->type != TK_BLOCK_END) {
            if (k && (rc = expect_op(p, TO_COMMA, ",")))
                break;
            const gm_ttok *nt = cur(p);
            if ((rc = expect_type(p, TK_NAME, "a name")))
                break;
            if (k == 64) {
                rc = gm_err_set(p->err, GM_EUNSUPPORTED, "line %d: more than 64 with targets", line);
                break;
            }
            if ((rc = gm_tmpl_intern(p->t, nt->p, nt->n, &syms[k]))) {
                rc = gm_err_set(p->err, rc, "template: out of memory");
                break;
            }
            names[k] = (gm_tv){.k = TV_STR};
            names[k].u.s = p->t->syms[syms[k]];
            gm_tnode *e;
            if ((rc = expect_op(p, TO_ASSIGN, "=")) || (rc = parse_expr(p, true, &e)) ||
                (rc = nvec_push(p, &vals, e)))
                break;
            k++;
        }
        if (rc) {
            free(vals.a);
            return rc;
        }
        if ((rc = nvec_done(p, &vals, &n->w, &n->nw)))
            return rc;
        n->nparams = k;
        if (k) {
            n->names = gm_tarena_alloc(p->t, k * sizeof *n->names);
            n->psyms = gm_tarena_alloc(p->t, k * sizeof *n->psyms);
            if (!n->names || !n->psyms)
                return gm_err_set(p->err, GM_ENOMEM, "template: out of memory");
            memcpy(n->names, names, k * sizeof *names);
            memcpy(n->psyms, syms, k * sizeof *syms);
        }
        gm_tnode *body;
        if ((rc = parse_statements(p, end, true, &body)))
            return rc;
        n->v = body->v, n->nv = body->nv;
        *out = n;
        return 0;
    }
    if (tok_name(t, "generation")) {
        /* transformers' AssistantTracker tag: renders its body (as a call block, so in a scope
         * of its own) */
        static const char *const end[] = {"endgeneration", NULL};
        n = node(p, N_SCOPE, line);
        if (!n)
            return GM_ENOMEM;
        next(p);
        gm_tnode *body;
        if ((rc = parse_statements(p, end, true, &body)))
            return rc;
        n->v = body->v, n->nv = body->nv;
        *out = n;
        return 0;
    }
    if (tok_name(t, "break") || tok_name(t, "continue")) {
        n = node(p, tok_name(t, "break") ? N_BREAK : N_CONTINUE, line);
        if (!n)
            return GM_ENOMEM;
        next(p);
        *out = n;
        return 0;
    }
    if (tok_name(t, "print")) {
        n = node(p, N_OUTPUT, line);
        if (!n)
            return GM_ENOMEM;
        next(p);
        if ((rc = parse_tuple(p, 0, NULL, false, &n->a)))
            return rc;
        *out = n;
        return 0;
    }
    static const char *const unsupported[] = {"extends", "include", "import", "from", "block",
                                              "autoescape", NULL};
    for (size_t k = 0; unsupported[k]; k++)
        if (tok_name(t, unsupported[k]))
            return gm_err_set(p->err, GM_EUNSUPPORTED, "line %d: {%% %s %%} is not supported",
                              line, unsupported[k]);
    char b[64];
    return pfail(p, line, "Encountered unknown tag '%s'", describe(t, b, sizeof b));
}

static int subparse(parser *p, const char *const *end, gm_tnode **body_out)
{
    int rc = enter(p);
    if (rc)
        return rc;
    gm_tnode *body = node(p, N_BODY, cur(p)->line);
    if (!body)
        return GM_ENOMEM;
    nvec stmts = {0};
    for (;;) {
        const gm_ttok *t = cur(p);
        gm_tnode *n = NULL;
        if (t->type == TK_EOF) {
            break;
        } else if (t->type == TK_DATA) {
            n = node(p, N_TEXT, t->line);
            if (!n || (rc = mkstr(p, t->p, t->n, &n->cval)))
                rc = rc ? rc : GM_ENOMEM;
            next(p);
        } else if (t->type == TK_VAR_BEGIN) {
            next(p);
            n = node(p, N_OUTPUT, t->line);
            if (!n)
                rc = GM_ENOMEM;
            else if (!(rc = parse_tuple(p, 0, NULL, false, &n->a)))
                rc = expect_type(p, TK_VAR_END, "end of print statement");
        } else if (t->type == TK_BLOCK_BEGIN) {
            next(p);
            bool is_end = false;
            for (size_t k = 0; end && end[k]; k++)
                if (tok_name(cur(p), end[k]))
                    is_end = true;
            if (is_end)
                break;
            if (!(rc = parse_statement(p, &n)))
                rc = expect_type(p, TK_BLOCK_END, "end of statement block");
        } else {
            rc = unexpected(p);
        }
        if (!rc && n)
            rc = nvec_push(p, &stmts, n);
        if (rc) {
            free(stmts.a);
            return rc;
        }
    }
    if ((rc = nvec_done(p, &stmts, &body->v, &body->nv)))
        return rc;
    p->depth--;
    *body_out = body;
    return 0;
}

int gm_tparse(gm_tmpl *t, const gm_ttoks *toks, gm_err *err)
{
    parser p = {.t = t, .tk = toks, .err = err};
    gm_tnode *root;
    int rc = subparse(&p, NULL, &root);
    if (rc)
        return rc;
    if ((rc = gm_tcheck(t, root, PARSE_MAX_DEPTH, err)))
        return rc;
    t->root = root;
    return 0;
}
