/* template/eval: rendering a parsed template: statements, expressions, scopes, loops, macros,
 * attribute and item lookup as Jinja2's sandbox does them, and Python's operators.
 *
 * Scopes follow what Jinja's compiled code does: the top level, each macro call, each for-loop
 * iteration, and the bodies of set blocks, filter blocks, with and {% generation %} get a scope
 * of their own. A name is looked up from the innermost scope outwards (a macro's outer scope is
 * where it was defined, read at call time); {% set %} writes to the innermost scope, so a set
 * inside a loop is gone at the next iteration and never leaks out (hence namespace()).
 *
 * Limits: every loop iteration, call and output write is a step; nested evaluation (expressions,
 * statements, macro calls) is bounded by max_depth so that recursion in a template ends in
 * GM_ERANGE rather than a stack overflow. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

enum { SIG_BREAK = 1, SIG_CONTINUE = 2 };

/* gm_tbound.mid of the loop object's methods (M_* ids are >= 0) */
enum { LOOP_CYCLE = -10, LOOP_CHANGED = -11 };

static int exec_body(gm_tctx *c, gm_tnode *const *v, uint32_t nv);

/* ------------------------------------------------------------------ scopes */

static gm_tv *lookup(gm_tctx *c, uint32_t sym)
{
    for (gm_tframe *f = c->frame; f; f = f->parent)
        for (uint32_t i = f->n; i > 0; i--)
            if (f->e[i - 1].sym == sym)
                return &f->e[i - 1].v;
    return NULL;
}

/* Sets sym in frame f; takes v's reference. */
static int frame_set(gm_tctx *c, gm_tframe *f, uint32_t sym, gm_tv v)
{
    for (uint32_t i = 0; i < f->n; i++)
        if (f->e[i].sym == sym) {
            gm_tv old = f->e[i].v;
            f->e[i].v = v;
            gm_tv_decref(old);
            return 0;
        }
    if (f->n == f->cap) {
        uint32_t cap = f->cap ? f->cap * 2 : 8;
        struct gm_tvar *e = realloc(f->e, cap * sizeof *e);
        if (!e) {
            gm_tv_decref(v);
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        }
        f->e = e;
        f->cap = cap;
    }
    f->e[f->n].sym = sym;
    f->e[f->n].v = v;
    f->n++;
    return 0;
}

static void frame_release(gm_tframe *f)
{
    gm_tv v = {.k = TV_NS};
    v.u.o = &f->h; /* any heap kind: decref only looks at the header */
    gm_tv_decref(v);
}

static int push_frame(gm_tctx *c, gm_tframe *parent)
{
    gm_tframe *f = gm_tframe_new(c, parent);
    if (!f)
        return GM_ENOMEM;
    c->frame = f;
    return 0;
}

static void pop_frame(gm_tctx *c, gm_tframe *saved)
{
    gm_tframe *f = c->frame;
    c->frame = saved;
    frame_release(f);
}

/* ------------------------------------------------------------------ errors */

int gm_tundef_error(gm_tctx *c, gm_tv u)
{
    static const char *const tnames[TV_NKINDS] = {
        [TV_NONE] = "NoneType", [TV_BOOL] = "bool", [TV_INT] = "int", [TV_FLOAT] = "float",
        [TV_STR] = "str", [TV_LIST] = "list", [TV_DICT] = "dict", [TV_NS] = "Namespace",
        [TV_LOOP] = "LoopContext",
    };
    const char *tn = u.x >= 1 && u.x - 1 < TV_NKINDS && tnames[u.x - 1] ? tnames[u.x - 1] : "object";
    if (u.f & TVF_UNSAFE)
        return gm_tfail(c, GM_ETEMPLATE, "access to attribute '%s' of '%s' object is unsafe (the sandbox refuses it)",
                        u.u.name ? u.u.name : "?", tn);
    if (!u.u.name)
        return gm_tfail(c, GM_ETEMPLATE, "an undefined value was used");
    if (u.x == 0)
        return gm_tfail(c, GM_ETEMPLATE, "'%s' is undefined", u.u.name);
    if (u.x == TV_NONE + 1)
        return gm_tfail(c, GM_ETEMPLATE, "'None' has no attribute '%s'", u.u.name);
    return gm_tfail(c, GM_ETEMPLATE, "'%s object' has no attribute '%s'", tn, u.u.name);
}

/* An undefined value remembers what was missing for its message, by pointer: only names that
 * belong to the parsed template (immortal) live long enough; others are not named. */
static const char *stable_name(const gm_tstr *s)
{
    return s->h.rc < 0 ? s->p : NULL;
}

static gm_tv undef_of(gm_tv obj, const char *name)
{
    gm_tv u = gm_tv_undef(name);
    u.x = (uint16_t)(obj.k + 1);
    return u;
}

/* ------------------------------------------------------------------ arguments */

int gm_targs_bind(gm_tctx *c, const gm_targs *a, const char *fname, size_t n,
                  const char *const *names, gm_tv *slot, bool *set)
{
    for (size_t i = 0; i < n; i++)
        set[i] = false;
    if (a->npos > n)
        return gm_tfail(c, GM_ETEMPLATE, "%s() takes at most %zu argument(s) (%zu given)", fname, n, a->npos);
    for (size_t i = 0; i < a->npos; i++) {
        slot[i] = a->pos[i];
        set[i] = true;
    }
    for (size_t k = 0; k < a->nkw; k++) {
        const gm_tstr *kn = a->kwn[k].u.s;
        size_t i;
        for (i = 0; i < n; i++)
            if (gm_tstr_eq(kn, names[i], strlen(names[i])))
                break;
        if (i == n)
            return gm_tfail(c, GM_ETEMPLATE, "%s() got an unexpected keyword argument '%s'", fname, kn->p);
        if (set[i])
            return gm_tfail(c, GM_ETEMPLATE, "%s() got multiple values for argument '%s'", fname, kn->p);
        slot[i] = a->kwv[k];
        set[i] = true;
    }
    return 0;
}

static void args_free(gm_targs *a)
{
    for (size_t i = 0; i < a->npos; i++)
        gm_tv_decref(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) {
        gm_tv_decref(a->kwv[i]);
        gm_tv_decref(a->kwn[i]);
    }
    free(a->pos);
    free(a->kwv);
    free(a->kwn);
    memset(a, 0, sizeof *a);
}

static int args_grow(gm_tctx *c, gm_tv **arr, size_t n)
{
    gm_tv *p = realloc(*arr, (n + 1) * sizeof *p);
    if (!p)
        return gm_tfail(c, GM_ENOMEM, "out of memory");
    *arr = p;
    return 0;
}

static int args_add_kw(gm_tctx *c, gm_targs *a, gm_tv name, gm_tv v)
{
    if (args_grow(c, &a->kwv, a->nkw) || args_grow(c, &a->kwn, a->nkw)) {
        gm_tv_decref(name);
        gm_tv_decref(v);
        return GM_ENOMEM;
    }
    a->kwn[a->nkw] = name;
    a->kwv[a->nkw] = v;
    a->nkw++;
    return 0;
}

/* Evaluates the arguments of a call, filter or test node (v, names=w, *c, **d). */
static int eval_args(gm_tctx *c, const gm_tnode *n, gm_targs *a)
{
    memset(a, 0, sizeof *a);
    int rc = 0;
    if (n->nv) {
        a->pos = malloc(n->nv * sizeof *a->pos);
        if (!a->pos)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        for (uint32_t i = 0; i < n->nv; i++) {
            if ((rc = gm_teval(c, n->v[i], &a->pos[i]))) {
                args_free(a);
                return rc;
            }
            a->npos++;
        }
    }
    for (uint32_t i = 0; i < n->nw; i++) {
        gm_tv v;
        if ((rc = gm_teval(c, n->w[i], &v)) || (rc = args_add_kw(c, a, n->names[i], v))) {
            args_free(a);
            return rc;
        }
    }
    if (n->c) {
        gm_tv v, l;
        if ((rc = gm_teval(c, n->c, &v))) {
            args_free(a);
            return rc;
        }
        rc = gm_tv_iter(c, v, &l);
        gm_tv_decref(v);
        if (rc) {
            args_free(a);
            return rc;
        }
        for (size_t i = 0; !rc && i < l.u.l->n; i++) {
            if (!(rc = args_grow(c, &a->pos, a->npos)))
                a->pos[a->npos++] = gm_tv_ref(l.u.l->a[i]);
        }
        gm_tv_decref(l);
        if (rc) {
            args_free(a);
            return rc;
        }
    }
    if (n->d) {
        gm_tv v;
        if ((rc = gm_teval(c, n->d, &v))) {
            args_free(a);
            return rc;
        }
        if (v.k != TV_DICT) {
            gm_tv_decref(v);
            args_free(a);
            return gm_tfail(c, GM_ETEMPLATE, "argument after ** must be a mapping");
        }
        for (size_t i = 0; !rc && i < v.u.m->n; i++) {
            if (v.u.m->k[i].k != TV_STR) {
                rc = gm_tfail(c, GM_ETEMPLATE, "keywords must be strings");
                break;
            }
            rc = args_add_kw(c, a, gm_tv_ref(v.u.m->k[i]), gm_tv_ref(v.u.m->v[i]));
        }
        gm_tv_decref(v);
        if (rc) {
            args_free(a);
            return rc;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ output */

static int write_value(gm_tctx *c, gm_tv v)
{
    int rc = gm_tstep(c, 1);
    if (rc)
        return rc;
    return gm_tv_write(c, c->out, v, false);
}

/* Runs body statements with output going to a fresh buffer; *out gets the text. */
static int capture(gm_tctx *c, gm_tnode *const *v, uint32_t nv, gm_tv *out)
{
    gm_tbuf buf = {0}, *saved = c->out;
    c->out = &buf;
    int rc = exec_body(c, v, nv);
    c->out = saved;
    if (rc < 0) {
        gm_tbuf_free(&buf);
        return rc;
    }
    return gm_tv_str_buf(c, &buf, out);
}

/* ------------------------------------------------------------------ macros */

static int call_macro(gm_tctx *c, gm_tmacro *m, const gm_targs *a, gm_tv *out)
{
    const gm_tnode *d = m->def;
    const char *mname = d->kind == N_MACRO ? c->t->syms[d->sym]->p : "caller";
    int rc = gm_tstep(c, 1);
    if (rc || (rc = gm_tdepth_enter(c)))
        return rc;
    gm_tframe *saved = c->frame;
    if ((rc = push_frame(c, m->closure))) {
        gm_tdepth_leave(c);
        return rc;
    }
    gm_tframe *f = c->frame;
    uint32_t np = d->nparams;
    bool given[64] = {false};
    if (a->npos > np && !(d->flags & NF_VARARGS)) {
        rc = gm_tfail(c, GM_ETEMPLATE, "macro '%s' takes not more than %u argument(s)", mname, np);
        goto done;
    }
    for (uint32_t i = 0; i < np && i < a->npos; i++) {
        if ((rc = frame_set(c, f, d->psyms[i], gm_tv_ref(a->pos[i]))))
            goto done;
        given[i] = true;
    }
    gm_tv kwargs = {.k = TV_NONE};
    if (d->flags & NF_KWARGS) {
        if ((rc = gm_tv_dict(c, &kwargs)))
            goto done;
        if ((rc = frame_set(c, f, SYM_KWARGS, kwargs)))
            goto done;
    }
    bool caller_given = false;
    for (size_t k = 0; k < a->nkw; k++) {
        const gm_tstr *kn = a->kwn[k].u.s;
        uint32_t i;
        for (i = 0; i < np; i++)
            if (gm_tstr_eq(kn, d->names[i].u.s->p, d->names[i].u.s->len))
                break;
        if (i < np) {
            if (given[i]) {
                rc = gm_tfail(c, GM_ETEMPLATE, "macro '%s' got multiple values for argument '%s'", mname, kn->p);
                goto done;
            }
            if ((rc = frame_set(c, f, d->psyms[i], gm_tv_ref(a->kwv[k]))))
                goto done;
            given[i] = true;
        } else if (gm_tstr_eq(kn, "caller", 6) && (d->flags & NF_CALLER)) {
            if ((rc = frame_set(c, f, SYM_CALLER, gm_tv_ref(a->kwv[k]))))
                goto done;
            caller_given = true;
        } else if (d->flags & NF_KWARGS) {
            if ((rc = gm_tdict_set(c, kwargs.u.m, gm_tv_ref(a->kwn[k]), gm_tv_ref(a->kwv[k]))))
                goto done;
        } else {
            rc = gm_tfail(c, GM_ETEMPLATE, "macro '%s' takes no keyword argument '%s'", mname, kn->p);
            goto done;
        }
    }
    if ((d->flags & NF_CALLER) && !caller_given &&
        (rc = frame_set(c, f, SYM_CALLER, gm_tv_undef("caller"))))
        goto done;
    if (d->flags & NF_VARARGS) {
        gm_tv va;
        size_t extra = a->npos > np ? a->npos - np : 0;
        if ((rc = gm_tv_list(c, LK_TUPLE, extra, &va)))
            goto done;
        for (size_t i = np; i < a->npos; i++)
            va.u.l->a[va.u.l->n++] = gm_tv_ref(a->pos[i]);
        if ((rc = frame_set(c, f, SYM_VARARGS, va)))
            goto done;
    }
    /* defaults are evaluated at call time, inside the macro's scope (they may name earlier
     * parameters); a parameter without one is undefined */
    for (uint32_t i = 0; i < np; i++) {
        if (given[i])
            continue;
        gm_tv v;
        if (i < d->nw && d->w[i]) {
            if ((rc = gm_teval(c, d->w[i], &v)))
                goto done;
        } else {
            v = gm_tv_undef(d->names[i].u.s->p);
        }
        if ((rc = frame_set(c, f, d->psyms[i], v)))
            goto done;
    }
    rc = capture(c, d->v, d->nv, out);
done:
    pop_frame(c, saved);
    gm_tdepth_leave(c);
    return rc;
}

/* ------------------------------------------------------------------ for loops */

static int assign(gm_tctx *c, const gm_tnode *target, gm_tv v);

static int run_loop(gm_tctx *c, const gm_tnode *n, gm_tv iterable, uint32_t depth, gm_tframe *outer);

static int call_loop(gm_tctx *c, gm_tloop *lp, const gm_targs *a, gm_tv *out)
{
    if (!(lp->forn->flags & NF_RECURSIVE))
        return gm_tfail(c, GM_ETEMPLATE, "Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.");
    if (a->npos != 1 || a->nkw)
        return gm_tfail(c, GM_ETEMPLATE, "loop() takes exactly one argument");
    int rc = gm_tdepth_enter(c);
    if (rc)
        return rc;
    gm_tbuf buf = {0}, *saved = c->out;
    c->out = &buf;
    gm_tframe *sframe = c->frame;
    rc = run_loop(c, lp->forn, a->pos[0], lp->depth + 1, lp->outer);
    c->frame = sframe;
    c->out = saved;
    gm_tdepth_leave(c);
    if (rc < 0) {
        gm_tbuf_free(&buf);
        return rc;
    }
    return gm_tv_str_buf(c, &buf, out);
}

static int loop_attr(gm_tctx *c, gm_tloop *lp, gm_tv self, const gm_tstr *name, gm_tv *out)
{
    size_t i = lp->i, n = lp->items->n;
    const char *s = name->p;
    if (!strcmp(s, "index")) *out = gm_tv_int((int64_t)i + 1);
    else if (!strcmp(s, "index0")) *out = gm_tv_int((int64_t)i);
    else if (!strcmp(s, "revindex")) *out = gm_tv_int((int64_t)(n - i));
    else if (!strcmp(s, "revindex0")) *out = gm_tv_int((int64_t)(n - i - 1));
    else if (!strcmp(s, "first")) *out = gm_tv_bool(i == 0);
    else if (!strcmp(s, "last")) *out = gm_tv_bool(i + 1 == n);
    else if (!strcmp(s, "length")) *out = gm_tv_int((int64_t)n);
    else if (!strcmp(s, "depth")) *out = gm_tv_int(lp->depth);
    else if (!strcmp(s, "depth0")) *out = gm_tv_int(lp->depth - 1);
    else if (!strcmp(s, "previtem")) *out = i > 0 ? gm_tv_ref(lp->items->a[i - 1]) : gm_tv_undef("previtem");
    else if (!strcmp(s, "nextitem")) *out = i + 1 < n ? gm_tv_ref(lp->items->a[i + 1]) : gm_tv_undef("nextitem");
    else if (!strcmp(s, "cycle") || !strcmp(s, "changed")) {
        gm_tbound *b = calloc(1, sizeof *b);
        if (!b)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        b->h.rc = 1;
        b->h.kind = TV_BOUND;
        b->self = gm_tv_ref(self);
        b->mid = s[1] == 'y' ? LOOP_CYCLE : LOOP_CHANGED;
        *out = (gm_tv){.k = TV_BOUND};
        out->u.o = &b->h;
    } else {
        *out = undef_of(self, stable_name(name));
    }
    return 0;
}

static int loop_method(gm_tctx *c, gm_tloop *lp, int which, const gm_targs *a, gm_tv *out)
{
    if (which == LOOP_CYCLE) {
        if (a->npos == 0)
            return gm_tfail(c, GM_ETEMPLATE, "no items for cycling given");
        *out = gm_tv_ref(a->pos[lp->i % a->npos]);
        return 0;
    }
    /* changed(*args): true when the arguments differ from the previous call's */
    gm_tv cur;
    int rc = gm_tv_list(c, LK_TUPLE, a->npos, &cur);
    if (rc)
        return rc;
    for (size_t i = 0; i < a->npos; i++)
        cur.u.l->a[cur.u.l->n++] = gm_tv_ref(a->pos[i]);
    bool eq = false;
    if (lp->changed_set && (rc = gm_tv_eq(c, lp->changed_last, cur, &eq))) {
        gm_tv_decref(cur);
        return rc;
    }
    gm_tv_decref(lp->changed_last);
    lp->changed_last = cur;
    bool was = lp->changed_set;
    lp->changed_set = true;
    *out = gm_tv_bool(!was || !eq);
    return 0;
}

static int run_loop(gm_tctx *c, const gm_tnode *n, gm_tv iterable, uint32_t depth, gm_tframe *outer)
{
    gm_tv items;
    int rc = gm_tv_iter(c, iterable, &items);
    if (rc)
        return rc;
    gm_tframe *saved = c->frame;
    if (n->c) {
        /* the loop filter: loop.index, length, last... count only the items it keeps */
        gm_tv kept;
        if ((rc = gm_tv_list(c, LK_LIST, 0, &kept))) {
            gm_tv_decref(items);
            return rc;
        }
        for (size_t i = 0; !rc && i < items.u.l->n; i++) {
            if ((rc = gm_tstep(c, 1)) || (rc = push_frame(c, outer)))
                break;
            gm_tv cond;
            if (!(rc = assign(c, n->a, items.u.l->a[i])) && !(rc = gm_teval(c, n->c, &cond))) {
                if (gm_tv_truthy(cond)) {
                    /* Jinja's filtered loop yields the unpacked values repacked as a tuple */
                    gm_tv keep = gm_tv_ref(items.u.l->a[i]);
                    if (n->a->kind == N_TUPLE && !(keep.k == TV_LIST && keep.u.l->lk == LK_TUPLE)) {
                        gm_tv l, tup;
                        gm_tv_decref(keep);
                        if (!(rc = gm_tv_iter(c, items.u.l->a[i], &l))) {
                            if (!(rc = gm_tv_list(c, LK_TUPLE, l.u.l->n, &tup))) {
                                for (size_t k = 0; k < l.u.l->n; k++)
                                    tup.u.l->a[tup.u.l->n++] = gm_tv_ref(l.u.l->a[k]);
                                keep = tup;
                            }
                            gm_tv_decref(l);
                        }
                    }
                    if (!rc)
                        rc = gm_tlist_push(c, kept.u.l, keep);
                }
                gm_tv_decref(cond);
            }
            pop_frame(c, saved);
        }
        gm_tv_decref(items);
        if (rc) {
            gm_tv_decref(kept);
            return rc;
        }
        items = kept;
    }
    if (items.u.l->n == 0) {
        gm_tv_decref(items);
        if (!n->nw)
            return 0;
        if ((rc = push_frame(c, outer)))
            return rc;
        rc = exec_body(c, n->w, n->nw);
        pop_frame(c, saved);
        return rc < 0 ? rc : 0;
    }
    gm_tloop *lp = calloc(1, sizeof *lp);
    if (!lp) {
        gm_tv_decref(items);
        return gm_tfail(c, GM_ENOMEM, "out of memory");
    }
    lp->h.rc = 1;
    lp->h.kind = TV_LOOP;
    lp->items = items.u.l; /* takes the reference */
    lp->depth = depth;
    lp->forn = n;
    lp->outer = outer;
    outer->h.rc++;
    gm_tv loopv = {.k = TV_LOOP};
    loopv.u.o = &lp->h;
    for (size_t i = 0; i < lp->items->n; i++) {
        lp->i = i;
        if ((rc = gm_tstep(c, 1)) || (rc = push_frame(c, outer)))
            break;
        if (!(rc = assign(c, n->a, lp->items->a[i])) &&
            !(rc = frame_set(c, c->frame, SYM_LOOP, gm_tv_ref(loopv))))
            rc = exec_body(c, n->v, n->nv);
        pop_frame(c, saved);
        if (rc == SIG_CONTINUE)
            rc = 0;
        if (rc)
            break;
    }
    gm_tv_decref(loopv);
    return rc == SIG_BREAK ? 0 : rc;
}

/* ------------------------------------------------------------------ assignment */

static int assign(gm_tctx *c, const gm_tnode *target, gm_tv v)
{
    if (target->kind == N_NAME)
        return frame_set(c, c->frame, target->sym, gm_tv_ref(v));
    if (target->kind == N_NSREF) {
        gm_tv *ns = lookup(c, target->sym);
        if (!ns || ns->k != TV_NS)
            return gm_tfail(c, GM_ETEMPLATE, "Can only set attributes on namespace objects.");
        return gm_tdict_set(c, ((gm_tns *)ns->u.o)->d, gm_tv_ref(target->cval), gm_tv_ref(v));
    }
    /* tuple unpacking */
    gm_tv l;
    int rc = gm_tv_iter(c, v, &l);
    if (rc)
        return rc;
    if (l.u.l->n != target->nv) {
        rc = l.u.l->n > target->nv
                 ? gm_tfail(c, GM_ETEMPLATE, "too many values to unpack (expected %u)", target->nv)
                 : gm_tfail(c, GM_ETEMPLATE, "not enough values to unpack (expected %u, got %zu)",
                            target->nv, l.u.l->n);
    }
    for (uint32_t i = 0; !rc && i < target->nv; i++)
        rc = assign(c, target->v[i], l.u.l->a[i]);
    gm_tv_decref(l);
    return rc;
}

/* ------------------------------------------------------------------ lookup */

int gm_tgetattr(gm_tctx *c, gm_tv obj, gm_tv name, int mid, gm_tv *out)
{
    const gm_tstr *nm = name.u.s;
    if (obj.k == TV_UNDEF)
        return gm_tundef_error(c, obj);
    if (nm->len >= 2 && nm->p[0] == '_' && nm->p[1] == '_') {
        /* Python internals: the sandbox refuses them */
        *out = undef_of(obj, stable_name(nm));
        out->f |= TVF_UNSAFE;
        return 0;
    }
    if (obj.k == TV_NS) {
        gm_tv *v = gm_tdict_gets(((gm_tns *)obj.u.o)->d, nm->p, nm->len);
        *out = v ? gm_tv_ref(*v) : undef_of(obj, stable_name(nm));
        return 0;
    }
    if (obj.k == TV_LOOP)
        return loop_attr(c, (gm_tloop *)obj.u.o, obj, nm, out);
    if (obj.k == TV_CYCLER && gm_tstr_eq(nm, "current", 7)) {
        gm_tcycler *cy = (gm_tcycler *)obj.u.o;
        *out = gm_tv_ref(cy->items->a[cy->pos]);
        return 0;
    }
    int has = mid >= 0 ? gm_tmethod_has(obj, mid) : 0;
    if (has == 2) {
        *out = undef_of(obj, stable_name(nm));
        out->f |= TVF_UNSAFE;
        return 0;
    }
    if (has == 1) {
        gm_tbound *b = calloc(1, sizeof *b);
        if (!b)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        b->h.rc = 1;
        b->h.kind = TV_BOUND;
        b->self = gm_tv_ref(obj);
        b->mid = mid;
        *out = (gm_tv){.k = TV_BOUND};
        out->u.o = &b->h;
        return 0;
    }
    if (obj.k == TV_DICT) {
        gm_tv *v = gm_tdict_get(obj.u.m, name);
        if (v) {
            *out = gm_tv_ref(*v);
            return 0;
        }
    }
    *out = undef_of(obj, stable_name(nm));
    return 0;
}

static int norm_index(gm_tv key, int64_t n, int64_t *idx)
{
    int64_t i = key.k == TV_BOOL ? key.u.b : key.u.i;
    if (i < 0)
        i += n;
    if (i < 0 || i >= n)
        return -1;
    *idx = i;
    return 0;
}

int gm_tgetitem(gm_tctx *c, gm_tv obj, gm_tv key, gm_tv *out)
{
    if (obj.k == TV_UNDEF)
        return gm_tundef_error(c, obj);
    bool intkey = key.k == TV_INT || key.k == TV_BOOL;
    switch (obj.k) {
    case TV_DICT:
        if (gm_tv_hashable(key)) {
            gm_tv *v = gm_tdict_get(obj.u.m, key);
            if (v) {
                *out = gm_tv_ref(*v);
                return 0;
            }
        }
        break;
    case TV_LIST: {
        const gm_tlist *l = obj.u.l;
        int64_t i;
        if (intkey && l->lk != LK_GEN && l->lk != LK_REVITER && l->lk != LK_KEYS &&
            l->lk != LK_VALUES && l->lk != LK_ITEMS) {
            if (norm_index(key, (int64_t)l->n, &i) == 0) {
                *out = gm_tv_ref(l->a[i]);
                return 0;
            }
            *out = gm_tv_undef(NULL);
            return 0;
        }
        break;
    }
    case TV_STR: {
        const gm_tstr *s = obj.u.s;
        int64_t i;
        if (intkey) {
            if (norm_index(key, (int64_t)s->ncp, &i) == 0) {
                int rc = gm_tv_substr(c, s, (size_t)i, (size_t)i + 1, out);
                if (!rc)
                    out->f = obj.f & TVF_MARKUP;
                return rc;
            }
            *out = gm_tv_undef(NULL);
            return 0;
        }
        break;
    }
    default:
        break;
    }
    if (key.k == TV_STR) /* obj['name'] falls back to the attribute (d['items'] is the method) */
        return gm_tgetattr(c, obj, key, gm_tmethod_id(key.u.s->p, key.u.s->len), out);
    *out = gm_tv_undef(NULL);
    return 0;
}

static int slice_index(gm_tctx *c, gm_tv v, bool *present, int64_t *out)
{
    *present = false;
    if (v.k == TV_NONE)
        return 0;
    if (v.k == TV_INT || v.k == TV_BOOL) {
        *present = true;
        *out = v.k == TV_BOOL ? v.u.b : v.u.i;
        return 0;
    }
    if (v.k == TV_UNDEF)
        return gm_tundef_error(c, v);
    return gm_tfail(c, GM_ETEMPLATE, "slice indices must be integers or None or have an __index__ method");
}

/* Python's slice.indices(): the start, step and item count of obj[a:b:s] over n items. */
static void slice_adjust(int64_t n, bool hs, int64_t s, bool he, int64_t e, int64_t step,
                         int64_t *start, int64_t *count)
{
    /* every bound is clamped into [-1, n] before any arithmetic, so nothing overflows */
    if (step == INT64_MIN)
        step = -INT64_MAX; /* the same items: at most one */
    if (step > 0) {
        s = hs ? s : 0;
        e = he ? e : n;
        if (s < 0) s = s < -n ? 0 : s + n; else if (s > n) s = n;
        if (e < 0) e = e < -n ? 0 : e + n; else if (e > n) e = n;
        *count = e > s ? (e - s - 1) / step + 1 : 0;
    } else {
        if (!hs) s = n - 1;
        else if (s < 0) s = s < -n ? -1 : s + n;
        else if (s >= n) s = n - 1;
        if (!he) e = -1;
        else if (e < 0) e = e < -n ? -1 : e + n;
        else if (e >= n) e = n - 1;
        *count = s > e ? (s - e - 1) / -step + 1 : 0;
    }
    *start = s;
}

static int eval_slice(gm_tctx *c, gm_tv obj, const gm_tnode *sl, gm_tv *out)
{
    gm_tv parts[3] = {gm_tv_none(), gm_tv_none(), gm_tv_none()};
    const gm_tnode *pn[3] = {sl->a, sl->b, sl->c};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++)
        if (pn[i])
            rc = gm_teval(c, pn[i], &parts[i]);
    bool hs = false, he = false, hst = false;
    int64_t s = 0, e = 0, st = 1;
    if (!rc && obj.k == TV_UNDEF)
        rc = gm_tundef_error(c, obj);
    if (!rc)
        rc = slice_index(c, parts[0], &hs, &s);
    if (!rc)
        rc = slice_index(c, parts[1], &he, &e);
    if (!rc)
        rc = slice_index(c, parts[2], &hst, &st);
    for (int i = 0; i < 3; i++)
        gm_tv_decref(parts[i]);
    if (rc)
        return rc;
    if (!hst)
        st = 1;
    if (st == 0)
        return gm_tfail(c, GM_ETEMPLATE, "slice step cannot be zero");
    int64_t start, count;
    if (obj.k == TV_STR) {
        const gm_tstr *str = obj.u.s;
        slice_adjust((int64_t)str->ncp, hs, s, he, e, st, &start, &count);
        if (st == 1) {
            rc = gm_tv_substr(c, str, (size_t)start, (size_t)(start + count), out);
            if (!rc)
                out->f = obj.f & TVF_MARKUP;
            return rc;
        }
        /* general step: collect code point offsets */
        size_t *off = malloc((str->ncp + 1) * sizeof *off);
        if (!off)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        size_t k = 0;
        for (size_t i = 0; i < str->len; k++) {
            off[k] = i;
            i++;
            while (i < str->len && ((unsigned char)str->p[i] & 0xC0) == 0x80)
                i++;
        }
        off[k] = str->len;
        gm_tbuf b = {0};
        for (int64_t j = 0; !rc && j < count; j++) {
            int64_t ix = start + j * st;
            rc = gm_tbuf_put(c, &b, str->p + off[ix], off[ix + 1] - off[ix]);
        }
        free(off);
        if (rc) {
            gm_tbuf_free(&b);
            return rc;
        }
        if ((rc = gm_tv_str_buf(c, &b, out)))
            return rc;
        out->f = obj.f & TVF_MARKUP;
        return 0;
    }
    if (obj.k == TV_LIST && (obj.u.l->lk == LK_LIST || obj.u.l->lk == LK_TUPLE || obj.u.l->lk == LK_RANGE)) {
        const gm_tlist *l = obj.u.l;
        slice_adjust((int64_t)l->n, hs, s, he, e, st, &start, &count);
        if ((rc = gm_tv_list(c, l->lk, (size_t)count, out)))
            return rc;
        for (int64_t j = 0; j < count; j++)
            out->u.l->a[out->u.l->n++] = gm_tv_ref(l->a[start + j * st]);
        if (l->lk == LK_RANGE) {
            /* range(a, b, s)[i:j:k] is a range again */
            out->u.l->rs = l->rs * st;
            out->u.l->r0 = l->r0 + start * l->rs;
            out->u.l->r1 = out->u.l->r0 + count * out->u.l->rs;
        }
        return gm_tstep_out(c, (uint64_t)count / 16, out);
    }
    /* slices compile to a plain Python subscript (not the sandbox's getitem): no fallback */
    if (obj.k == TV_DICT)
        return gm_tfail(c, GM_ETEMPLATE, "unhashable type: 'slice'");
    return gm_tfail(c, GM_ETEMPLATE, "'%s' object is not subscriptable", gm_tv_typename(obj));
}

/* ------------------------------------------------------------------ calls */

int gm_tcall(gm_tctx *c, gm_tv f, const gm_targs *a, gm_tv *out)
{
    int rc = gm_tstep(c, 1);
    if (rc)
        return rc;
    switch (f.k) {
    case TV_FUNC: return gm_tglobal_call(c, f.x, a, out);
    case TV_MACRO: return call_macro(c, (gm_tmacro *)f.u.o, a, out);
    case TV_LOOP: return call_loop(c, (gm_tloop *)f.u.o, a, out);
    case TV_BOUND: {
        gm_tbound *b = (gm_tbound *)f.u.o;
        if (b->self.k == TV_LOOP)
            return loop_method(c, (gm_tloop *)b->self.u.o, b->mid, a, out);
        return gm_tmethod_call(c, b->self, b->mid, a, out);
    }
    case TV_JOINER: {
        gm_tjoiner *j = (gm_tjoiner *)f.u.o;
        if (!j->used) {
            j->used = true;
            return gm_tv_str(c, "", 0, out);
        }
        *out = gm_tv_ref(j->sep);
        return 0;
    }
    case TV_UNDEF: return gm_tundef_error(c, f);
    default: return gm_tfail(c, GM_ETEMPLATE, "'%s' object is not callable", gm_tv_typename(f));
    }
}

static int eval_call(gm_tctx *c, const gm_tnode *n, gm_tv *out)
{
    gm_tv fn;
    int rc;
    const gm_tnode *callee = n->a;
    if (callee->kind == N_GETATTR && callee->id >= 0) {
        /* obj.method(...): call without materialising a bound method */
        gm_tv obj;
        if ((rc = gm_teval(c, callee->a, &obj)))
            return rc;
        int has = obj.k != TV_UNDEF && obj.k != TV_NS && obj.k != TV_LOOP ? gm_tmethod_has(obj, callee->id) : 0;
        if (has == 1) {
            gm_targs a;
            if (!(rc = eval_args(c, n, &a))) {
                c->line = n->line;
                if (!(rc = gm_tstep(c, 1)))
                    rc = gm_tmethod_call(c, obj, callee->id, &a, out);
                args_free(&a);
            }
            gm_tv_decref(obj);
            return rc;
        }
        rc = gm_tgetattr(c, obj, callee->cval, callee->id, &fn);
        gm_tv_decref(obj);
        if (rc)
            return rc;
    } else if ((rc = gm_teval(c, callee, &fn))) {
        return rc;
    }
    gm_targs a;
    if ((rc = eval_args(c, n, &a))) {
        gm_tv_decref(fn);
        return rc;
    }
    c->line = n->line;
    rc = gm_tcall(c, fn, &a, out);
    args_free(&a);
    gm_tv_decref(fn);
    return rc;
}

static int64_t as_int(gm_tv v) { return v.k == TV_BOOL ? v.u.b : v.u.i; }

/* ------------------------------------------------------------------ expressions */

static int eval_filter_node(gm_tctx *c, const gm_tnode *n, gm_tv operand, gm_tv *out);

/* A chain of filters (innermost operand NULL) applied to v (borrowed). */
static int apply_chain(gm_tctx *c, const gm_tnode *n, gm_tv v, gm_tv *out)
{
    if (!n) {
        *out = gm_tv_ref(v);
        return 0;
    }
    gm_tv in;
    int rc = apply_chain(c, n->a, v, &in);
    if (rc)
        return rc;
    rc = eval_filter_node(c, n, in, out);
    gm_tv_decref(in);
    return rc;
}

static int eval_filter_node(gm_tctx *c, const gm_tnode *n, gm_tv operand, gm_tv *out)
{
    gm_targs a;
    int rc = eval_args(c, n, &a);
    if (rc)
        return rc;
    c->line = n->line;
    if (n->id == -1)
        rc = gm_tfail(c, GM_ETEMPLATE, "No filter named '%s' found.", n->cval.u.s->p);
    else if (n->id == -2)
        rc = gm_tfail(c, GM_EUNSUPPORTED, "the filter '%s' is not supported", n->cval.u.s->p);
    else if (!(rc = gm_tstep(c, 1)))
        rc = gm_tfilter_call(c, n->id, operand, &a, out);
    args_free(&a);
    return rc;
}

static int eval_compare(gm_tctx *c, const gm_tnode *n, gm_tv *out)
{
    gm_tv left;
    int rc = gm_teval(c, n->a, &left);
    if (rc)
        return rc;
    bool result = true;
    for (uint32_t i = 0; i < n->nv && result; i++) {
        gm_tv right;
        if ((rc = gm_teval(c, n->v[i], &right)))
            break;
        c->line = n->line;
        int cmp = 0;
        switch (n->ops[i]) {
        case CMP_EQ: rc = gm_tv_eq(c, left, right, &result); break;
        case CMP_NE: rc = gm_tv_eq(c, left, right, &result); result = !result; break;
        case CMP_IN: rc = gm_tcontains(c, right, left, &result); break;
        case CMP_NOTIN: rc = gm_tcontains(c, right, left, &result); result = !result; break;
        default:
            if ((rc = gm_tv_cmp(c, left, right, &cmp)))
                break;
            switch (n->ops[i]) {
            case CMP_LT: result = cmp < 0; break;
            case CMP_LE: result = cmp <= 0; break;
            case CMP_GT: result = cmp > 0; break;
            default: result = cmp >= 0; break;
            }
            /* NaN compares false every way */
            if ((left.k == TV_FLOAT && isnan(left.u.d)) || (right.k == TV_FLOAT && isnan(right.u.d)))
                result = false;
        }
        gm_tv_decref(left);
        left = right;
        if (rc)
            break;
    }
    gm_tv_decref(left);
    if (rc)
        return rc;
    *out = gm_tv_bool(result);
    return 0;
}

static int eval_inner(gm_tctx *c, const gm_tnode *n, gm_tv *out)
{
    gm_tv a, b;
    int rc = 0;
    switch (n->kind) {
    case N_CONST:
        *out = n->cval;
        return 0;
    case N_NAME: {
        gm_tv *v = lookup(c, n->sym);
        if (v) {
            *out = gm_tv_ref(*v);
            return 0;
        }
        int g = c->t->sym_global[n->sym];
        if (g >= 0) {
            *out = (gm_tv){.k = TV_FUNC, .x = (uint16_t)g};
            return 0;
        }
        *out = gm_tv_undef(n->cval.u.s->p);
        return 0;
    }
    case N_GETATTR:
        if ((rc = gm_teval(c, n->a, &a)))
            return rc;
        c->line = n->line;
        rc = gm_tgetattr(c, a, n->cval, n->id, out);
        gm_tv_decref(a);
        return rc;
    case N_GETITEM:
        if ((rc = gm_teval(c, n->a, &a)))
            return rc;
        if (n->b->kind == N_SLICE) {
            rc = eval_slice(c, a, n->b, out);
        } else if (!(rc = gm_teval(c, n->b, &b))) {
            c->line = n->line;
            rc = gm_tgetitem(c, a, b, out);
            gm_tv_decref(b);
        }
        gm_tv_decref(a);
        return rc;
    case N_CALL:
        return eval_call(c, n, out);
    case N_FILTER:
        if (!n->a)
            return gm_tfail(c, GM_ETEMPLATE, "a filter without a value");
        if ((rc = gm_teval(c, n->a, &a)))
            return rc;
        rc = eval_filter_node(c, n, a, out);
        gm_tv_decref(a);
        return rc;
    case N_TEST: {
        if ((rc = gm_teval(c, n->a, &a)))
            return rc;
        gm_targs args;
        if ((rc = eval_args(c, n, &args))) {
            gm_tv_decref(a);
            return rc;
        }
        c->line = n->line;
        bool r = false;
        if (n->id == -1)
            rc = gm_tfail(c, GM_ETEMPLATE, "No test named '%s' found.", n->cval.u.s->p);
        else if (n->id == -2)
            rc = gm_tfail(c, GM_EUNSUPPORTED, "the test '%s' is not supported", n->cval.u.s->p);
        else
            rc = gm_ttest_call(c, n->id, a, &args, &r);
        args_free(&args);
        gm_tv_decref(a);
        if (!rc)
            *out = gm_tv_bool(r);
        return rc;
    }
    case N_NOT:
        if ((rc = gm_teval(c, n->a, &a)))
            return rc;
        *out = gm_tv_bool(!gm_tv_truthy(a));
        gm_tv_decref(a);
        return 0;
    case N_NEG:
    case N_POS:
        if ((rc = gm_teval(c, n->a, &a)))
            return rc;
        c->line = n->line;
        if (a.k == TV_UNDEF) {
            rc = gm_tundef_error(c, a);
        } else if (a.k == TV_FLOAT) {
            *out = gm_tv_float(n->kind == N_NEG ? -a.u.d : a.u.d);
        } else if (a.k == TV_INT || a.k == TV_BOOL) {
            int64_t i = as_int(a);
            if (n->kind == N_NEG && i == INT64_MIN)
                rc = gm_toverflow(c);
            else
                *out = gm_tv_int(n->kind == N_NEG ? -i : i);
        } else {
            rc = gm_tfail(c, GM_ETEMPLATE, "bad operand type for unary %c: '%s'",
                          n->kind == N_NEG ? '-' : '+', gm_tv_typename(a));
        }
        gm_tv_decref(a);
        return rc;
    case N_BINOP:
        /* a chain: folded from the left */
        if ((rc = gm_teval(c, n->a, &a)))
            return rc;
        for (uint32_t i = 0; i < n->nv; i++) {
            if ((rc = gm_teval(c, n->v[i], &b))) {
                gm_tv_decref(a);
                return rc;
            }
            c->line = n->line;
            gm_tv r;
            rc = gm_tbinop(c, n->ops[i], a, b, &r);
            gm_tv_decref(a);
            gm_tv_decref(b);
            if (rc)
                return rc;
            a = r;
        }
        *out = a;
        return 0;
    case N_CONCAT: {
        gm_tbuf buf = {0};
        for (uint32_t i = 0; i < n->nv; i++) {
            if ((rc = gm_teval(c, n->v[i], &a)))
                break;
            rc = gm_tv_write(c, &buf, a, false);
            gm_tv_decref(a);
            if (rc)
                break;
        }
        if (rc) {
            gm_tbuf_free(&buf);
            return rc;
        }
        return gm_tv_str_buf(c, &buf, out);
    }
    case N_COMPARE:
        return eval_compare(c, n, out);
    case N_AND:
    case N_OR:
        /* returns the first operand that decides, else the last */
        if ((rc = gm_teval(c, n->a, &a)))
            return rc;
        for (uint32_t i = 0; i < n->nv; i++) {
            if (gm_tv_truthy(a) == (n->kind == N_OR))
                break;
            gm_tv_decref(a);
            if ((rc = gm_teval(c, n->v[i], &a)))
                return rc;
        }
        *out = a;
        return 0;
    case N_COND:
        if ((rc = gm_teval(c, n->a, &a)))
            return rc;
        bool t = gm_tv_truthy(a);
        gm_tv_decref(a);
        if (t)
            return gm_teval(c, n->b, out);
        if (n->c)
            return gm_teval(c, n->c, out);
        *out = gm_tv_undef(NULL);
        return 0;
    case N_LIST:
    case N_TUPLE:
        if ((rc = gm_tv_list(c, n->kind == N_LIST ? LK_LIST : LK_TUPLE, n->nv, out)))
            return rc;
        for (uint32_t i = 0; i < n->nv; i++) {
            if ((rc = gm_teval(c, n->v[i], &a))) {
                gm_tv_decref(*out);
                return rc;
            }
            out->u.l->a[out->u.l->n++] = a;
        }
        return 0;
    case N_DICT:
        if ((rc = gm_tv_dict(c, out)))
            return rc;
        for (uint32_t i = 0; i < n->nv; i++) {
            if ((rc = gm_teval(c, n->v[i], &a)))
                break;
            if ((rc = gm_teval(c, n->w[i], &b))) {
                gm_tv_decref(a);
                break;
            }
            if (!gm_tv_hashable(a)) {
                c->line = n->line;
                rc = gm_tfail(c, GM_ETEMPLATE, "unhashable type: '%s'", gm_tv_typename(a));
                gm_tv_decref(a);
                gm_tv_decref(b);
                break;
            }
            if ((rc = gm_tdict_set(c, out->u.m, a, b)))
                break;
        }
        if (rc)
            gm_tv_decref(*out);
        return rc;
    case N_SLICE: {
        /* only reached inside a tuple subscript, x[1:, 2]: Python builds a slice object that no
         * sequence or mapping accepts, and the sandbox's getitem turns that into undefined */
        const gm_tnode *parts[3] = {n->a, n->b, n->c};
        for (int i = 0; i < 3; i++) {
            if (!parts[i])
                continue;
            if ((rc = gm_teval(c, parts[i], &a)))
                return rc;
            gm_tv_decref(a);
        }
        *out = gm_tv_undef(NULL);
        return 0;
    }
    default:
        return gm_tfail(c, GM_ETEMPLATE, "not an expression");
    }
}

int gm_teval(gm_tctx *c, const gm_tnode *n, gm_tv *out)
{
    int rc = gm_tdepth_enter(c);
    if (rc)
        return rc;
    c->line = n->line;
    rc = eval_inner(c, n, out);
    gm_tdepth_leave(c);
    if (rc)
        *out = gm_tv_undef(NULL); /* nothing to release, whatever a callee left there */
    return rc;
}

/* ------------------------------------------------------------------ statements */

static int exec_stmt(gm_tctx *c, const gm_tnode *n)
{
    gm_tv v, s;
    int rc;
    gm_tframe *saved = c->frame;
    c->line = n->line;
    switch (n->kind) {
    case N_TEXT:
        if ((rc = gm_tstep(c, 1)))
            return rc;
        return gm_tbuf_put(c, c->out, n->cval.u.s->p, n->cval.u.s->len);
    case N_OUTPUT:
        if ((rc = gm_teval(c, n->a, &v)))
            return rc;
        rc = write_value(c, v);
        gm_tv_decref(v);
        return rc;
    case N_IF:
        for (;;) {
            if ((rc = gm_teval(c, n->a, &v)))
                return rc;
            bool t = gm_tv_truthy(v);
            gm_tv_decref(v);
            if (t)
                return exec_body(c, n->v, n->nv);
            /* elif chains are an if alone in the else branch */
            if (n->nw == 1 && n->w[0]->kind == N_IF) {
                n = n->w[0];
                c->line = n->line;
                continue;
            }
            return exec_body(c, n->w, n->nw);
        }
    case N_FOR:
        if ((rc = gm_teval(c, n->b, &v)))
            return rc;
        rc = run_loop(c, n, v, 1, c->frame);
        gm_tv_decref(v);
        c->frame = saved;
        return rc;
    case N_SET:
        if ((rc = gm_teval(c, n->b, &v)))
            return rc;
        c->line = n->line;
        rc = assign(c, n->a, v);
        gm_tv_decref(v);
        return rc;
    case N_SETBLOCK:
    case N_FILTERBLOCK:
        if ((rc = push_frame(c, saved)))
            return rc;
        rc = capture(c, n->v, n->nv, &s);
        pop_frame(c, saved);
        if (rc)
            return rc;
        rc = apply_chain(c, n->c, s, &v);
        gm_tv_decref(s);
        if (rc)
            return rc;
        c->line = n->line;
        if (n->kind == N_SETBLOCK)
            rc = assign(c, n->a, v);
        else
            rc = write_value(c, v);
        gm_tv_decref(v);
        return rc;
    case N_MACRO: {
        gm_tmacro *m = calloc(1, sizeof *m);
        if (!m)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        m->h.rc = 1;
        m->h.kind = TV_MACRO;
        m->def = n;
        m->closure = c->frame;
        c->frame->h.rc++;
        v = (gm_tv){.k = TV_MACRO};
        v.u.o = &m->h;
        return frame_set(c, c->frame, n->sym, v);
    }
    case N_CALLBLOCK: {
        /* {% call(args) m(...) %}body{% endcall %}: m gets caller=<the body as a macro> */
        gm_tmacro *m = calloc(1, sizeof *m);
        if (!m)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        m->h.rc = 1;
        m->h.kind = TV_MACRO;
        m->def = n;
        m->closure = c->frame;
        c->frame->h.rc++;
        gm_tv caller = {.k = TV_MACRO};
        caller.u.o = &m->h;
        const gm_tnode *call = n->a;
        gm_tv fn;
        if ((rc = gm_teval(c, call->a, &fn))) {
            gm_tv_decref(caller);
            return rc;
        }
        gm_targs a;
        if ((rc = eval_args(c, call, &a))) {
            gm_tv_decref(fn);
            gm_tv_decref(caller);
            return rc;
        }
        gm_tv cname;
        if ((rc = gm_tv_strz(c, "caller", &cname)) || (rc = args_add_kw(c, &a, cname, caller))) {
            if (rc && a.nkw == 0)
                gm_tv_decref(caller);
        } else {
            c->line = n->line;
            if (!(rc = gm_tcall(c, fn, &a, &v))) {
                rc = write_value(c, v);
                gm_tv_decref(v);
            }
        }
        args_free(&a);
        gm_tv_decref(fn);
        return rc;
    }
    case N_WITH: {
        gm_tv vals[64];
        uint32_t k;
        for (k = 0; k < n->nparams; k++)
            if ((rc = gm_teval(c, n->w[k], &vals[k])))
                break;
        if (k < n->nparams) {
            while (k > 0)
                gm_tv_decref(vals[--k]);
            return rc;
        }
        if ((rc = push_frame(c, saved))) {
            for (k = 0; k < n->nparams; k++)
                gm_tv_decref(vals[k]);
            return rc;
        }
        rc = 0;
        for (k = 0; k < n->nparams; k++) {
            if (rc)
                gm_tv_decref(vals[k]);
            else
                rc = frame_set(c, c->frame, n->psyms[k], vals[k]);
        }
        if (!rc)
            rc = exec_body(c, n->v, n->nv);
        pop_frame(c, saved);
        return rc;
    }
    case N_SCOPE:
        if ((rc = push_frame(c, saved)))
            return rc;
        rc = exec_body(c, n->v, n->nv);
        pop_frame(c, saved);
        return rc;
    case N_BREAK: return SIG_BREAK;
    case N_CONTINUE: return SIG_CONTINUE;
    default: return gm_tfail(c, GM_ETEMPLATE, "not a statement");
    }
}

static int exec_body(gm_tctx *c, gm_tnode *const *v, uint32_t nv)
{
    int rc = gm_tdepth_enter(c);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < nv; i++)
        if ((rc = exec_stmt(c, v[i])))
            break;
    gm_tdepth_leave(c);
    return rc;
}

int gm_trender_root(gm_tctx *c)
{
    int rc = exec_body(c, c->t->root->v, c->t->root->nv);
    return rc > 0 ? 0 : rc;
}
