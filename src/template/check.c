/* template/check: the checks Jinja makes when it compiles a template, run over the parsed tree.
 *
 * An unknown filter or test name fails the parse, except inside an {% if %} (condition or
 * branches) or an inline "x if c else y", where Jinja defers the error to when the code runs;
 * the bodies of for loops, macros, call/filter/set blocks and with open a fresh scope in which
 * the error is immediate again. break/continue outside a loop body fails. Macros learn here
 * whether their body reads varargs, kwargs or caller. The walk is bounded by the nesting limit. */
#include "template/tmpl_int.h"

typedef struct checker {
    const gm_tmpl *t;
    gm_err *err;
    int max_depth;
    gm_tnode *macro; /* innermost macro (varargs / kwargs / caller use) */
} checker;

static int check(checker *k, gm_tnode *n, bool soft, bool in_loop, int depth);

static int check_all(checker *k, gm_tnode **v, uint32_t nv, bool soft, bool in_loop, int depth)
{
    for (uint32_t i = 0; i < nv; i++) {
        int rc = check(k, v[i], soft, in_loop, depth);
        if (rc)
            return rc;
    }
    return 0;
}

static int check(checker *k, gm_tnode *n, bool soft, bool in_loop, int depth)
{
    if (!n)
        return 0;
    if (depth > k->max_depth)
        return gm_err_set(k->err, GM_ERANGE, "line %d: the template nests deeper than %d",
                          n->line, k->max_depth);
    int rc = 0;
    depth++;
    switch (n->kind) {
    case N_NAME:
        if (k->macro) {
            if (n->sym == SYM_VARARGS)
                k->macro->flags |= NF_VARARGS;
            else if (n->sym == SYM_KWARGS)
                k->macro->flags |= NF_KWARGS;
            else if (n->sym == SYM_CALLER)
                k->macro->flags |= NF_CALLER;
        }
        return 0;
    case N_FILTER:
    case N_TEST:
        if (n->id == -1) {
            if (!soft)
                return gm_err_set(k->err, GM_EFORMAT, "line %d: no %s named '%s'", n->line,
                                  n->kind == N_FILTER ? "filter" : "test", n->cval.u.s->p);
            n->flags |= NF_SOFT;
        }
        break;
    case N_IF:
        if ((rc = check(k, n->a, true, in_loop, depth)) || (rc = check_all(k, n->v, n->nv, true, in_loop, depth)))
            return rc;
        return check_all(k, n->w, n->nw, true, in_loop, depth);
    case N_COND:
        if ((rc = check(k, n->a, true, in_loop, depth)) || (rc = check(k, n->b, true, in_loop, depth)))
            return rc;
        return check(k, n->c, true, in_loop, depth);
    case N_FOR:
        if ((rc = check(k, n->b, soft, in_loop, depth)) || (rc = check(k, n->c, false, false, depth)) ||
            (rc = check_all(k, n->v, n->nv, false, true, depth)))
            return rc;
        return check_all(k, n->w, n->nw, false, false, depth);
    case N_MACRO:
    case N_CALLBLOCK: {
        if (n->kind == N_CALLBLOCK && (rc = check(k, n->a, soft, in_loop, depth)))
            return rc;
        gm_tnode *outer = k->macro;
        k->macro = n;
        for (uint32_t i = 0; !rc && i < n->nw; i++)
            rc = check(k, n->w[i], false, false, depth);
        if (!rc)
            rc = check_all(k, n->v, n->nv, false, false, depth);
        k->macro = outer;
        return rc;
    }
    case N_SETBLOCK:
    case N_FILTERBLOCK:
        if ((rc = check(k, n->a, soft, in_loop, depth)) || (rc = check(k, n->c, soft, in_loop, depth)))
            return rc;
        return check_all(k, n->v, n->nv, false, in_loop, depth);
    case N_WITH:
        if ((rc = check_all(k, n->w, n->nw, soft, in_loop, depth)))
            return rc;
        return check_all(k, n->v, n->nv, false, in_loop, depth);
    case N_SCOPE:
        return check_all(k, n->v, n->nv, false, false, depth);
    case N_BREAK:
    case N_CONTINUE:
        if (!in_loop)
            return gm_err_set(k->err, GM_EFORMAT, "line %d: '%s' outside loop", n->line,
                              n->kind == N_BREAK ? "break" : "continue");
        return 0;
    default:
        break;
    }
    if ((rc = check(k, n->a, soft, in_loop, depth)) || (rc = check(k, n->b, soft, in_loop, depth)) ||
        (rc = check(k, n->c, soft, in_loop, depth)) || (rc = check(k, n->d, soft, in_loop, depth)))
        return rc;
    if ((rc = check_all(k, n->v, n->nv, soft, in_loop, depth)))
        return rc;
    return check_all(k, n->w, n->nw, soft, in_loop, depth);
}

int gm_tcheck(const gm_tmpl *t, gm_tnode *root, int max_depth, gm_err *err)
{
    checker k = {.t = t, .err = err, .max_depth = max_depth};
    return check(&k, root, false, false, 0);
}
