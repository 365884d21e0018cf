/* template/tests: Jinja2 3.1's tests ("x is defined", "x is divisibleby 3", ...).
 *
 * They classify values as Python's isinstance checks do: a bool is a number but not an
 * integer, a dict is a sequence and iterable, an undefined value is iterable, a sequence and
 * callable, a generator is iterable but not a sequence. Tests without a parameter refuse an
 * argument ("x is string if y" passes "if" as one, and Python raises). */
#include <string.h>

#include "template/filters_int.h"

typedef int (*test_fn)(gm_tctx *c, gm_tv v, const gm_targs *a, bool *out);

static int one_arg(gm_tctx *c, const gm_targs *a, const char *name, gm_tv *arg)
{
    static const char *const names[] = {"other"};
    gm_tv slot[1] = {gm_tv_undef(NULL)};
    bool set[1];
    int rc = gm_targs_bind(c, a, name, 1, names, slot, set);
    if (rc)
        return rc;
    if (!set[0])
        return gm_tfail(c, GM_ETEMPLATE, "test '%s' takes one argument", name);
    *arg = slot[0];
    return 0;
}

static int t_defined(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k != TV_UNDEF; return 0; }
static int t_undefined(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k == TV_UNDEF; return 0; }
static int t_none(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k == TV_NONE; return 0; }
static int t_boolean(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k == TV_BOOL; return 0; }
static int t_true(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k == TV_BOOL && v.u.b; return 0; }
static int t_false(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k == TV_BOOL && !v.u.b; return 0; }
static int t_integer(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k == TV_INT; return 0; }
static int t_float(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k == TV_FLOAT; return 0; }
static int t_number(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    (void)c; (void)a;
    *o = v.k == TV_INT || v.k == TV_FLOAT || v.k == TV_BOOL;
    return 0;
}
static int t_string(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k == TV_STR; return 0; }
static int t_mapping(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)c; (void)a; *o = v.k == TV_DICT; return 0; }
static int t_escaped(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    (void)c; (void)a;
    *o = v.k == TV_STR && (v.f & TVF_MARKUP);
    return 0;
}
static int t_iterable(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    (void)c; (void)a;
    *o = v.k == TV_STR || v.k == TV_LIST || v.k == TV_DICT || v.k == TV_UNDEF || v.k == TV_LOOP;
    return 0;
}
static int t_sequence(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    (void)c; (void)a;
    *o = v.k == TV_STR || v.k == TV_DICT || v.k == TV_UNDEF ||
         (v.k == TV_LIST && (v.u.l->lk == LK_LIST || v.u.l->lk == LK_TUPLE || v.u.l->lk == LK_RANGE));
    return 0;
}
static int t_callable(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    (void)c; (void)a;
    *o = v.k == TV_MACRO || v.k == TV_FUNC || v.k == TV_BOUND || v.k == TV_LOOP || v.k == TV_JOINER ||
         v.k == TV_UNDEF;
    return 0;
}
static int t_sameas(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    gm_tv x = {.k = TV_NONE};
    int rc = one_arg(c, a, "sameas", &x);
    if (rc)
        return rc;
    if (v.k != x.k)
        *o = false;
    else if (v.k == TV_NONE)
        *o = true;
    else if (v.k == TV_BOOL)
        *o = v.u.b == x.u.b;
    else if (v.k == TV_INT) /* CPython shares the small ints */
        *o = v.u.i == x.u.i && v.u.i >= -5 && v.u.i <= 256;
    else if (gm_tv_heap(v))
        *o = v.u.o == x.u.o;
    else
        *o = false;
    return 0;
}

static int mod2(gm_tctx *c, gm_tv v, int64_t *r)
{
    gm_tv two = gm_tv_int(2), m;
    int rc = gm_tbinop(c, OP_MOD, v, two, &m);
    if (rc)
        return rc;
    bool eq1;
    gm_tv one = gm_tv_int(1);
    rc = gm_tv_eq(c, m, one, &eq1);
    gm_tv_decref(m);
    *r = eq1;
    return rc;
}
static int t_odd(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    (void)a;
    int64_t r = 0;
    int rc = mod2(c, v, &r);
    *o = r == 1;
    return rc;
}
static int t_even(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    (void)a;
    gm_tv two = gm_tv_int(2), m;
    int rc = gm_tbinop(c, OP_MOD, v, two, &m);
    if (rc)
        return rc;
    bool z;
    rc = gm_tv_eq(c, m, gm_tv_int(0), &z);
    gm_tv_decref(m);
    *o = z;
    return rc;
}
static int t_divisibleby(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    gm_tv x, m;
    int rc = one_arg(c, a, "divisibleby", &x);
    if (rc || (rc = gm_tbinop(c, OP_MOD, v, x, &m)))
        return rc;
    bool z;
    rc = gm_tv_eq(c, m, gm_tv_int(0), &z);
    gm_tv_decref(m);
    *o = z;
    return rc;
}
static int case_test(gm_tctx *c, gm_tv v, bool upper, bool *o)
{
    gm_tv s;
    int rc = gm_tv_tostr(c, v, &s);
    if (rc)
        return rc;
    bool any = false, ok = true;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp;
        i += gm_u8_dec(s.u.s->p + i, s.u.s->len - i, &cp);
        if (upper ? gm_u_islower(cp) : gm_u_isupper(cp))
            ok = false;
        if (upper ? gm_u_isupper(cp) : gm_u_islower(cp))
            any = true;
    }
    gm_tv_decref(s);
    *o = ok && any;
    return 0;
}
static int t_lower(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)a; return case_test(c, v, false, o); }
static int t_upper(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { (void)a; return case_test(c, v, true, o); }

static int cmp_test(gm_tctx *c, gm_tv v, const gm_targs *a, int op, bool *o)
{
    gm_tv x = {.k = TV_NONE};
    int rc = one_arg(c, a, "comparison", &x);
    if (rc)
        return rc;
    if (op == CMP_EQ || op == CMP_NE) {
        rc = gm_tv_eq(c, v, x, o);
        if (op == CMP_NE)
            *o = !*o;
        return rc;
    }
    int r;
    if ((rc = gm_tv_cmp(c, v, x, &r)))
        return rc;
    *o = op == CMP_LT ? r < 0 : op == CMP_LE ? r <= 0 : op == CMP_GT ? r > 0 : r >= 0;
    return 0;
}
static int t_eq(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { return cmp_test(c, v, a, CMP_EQ, o); }
static int t_ne(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { return cmp_test(c, v, a, CMP_NE, o); }
static int t_lt(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { return cmp_test(c, v, a, CMP_LT, o); }
static int t_le(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { return cmp_test(c, v, a, CMP_LE, o); }
static int t_gt(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { return cmp_test(c, v, a, CMP_GT, o); }
static int t_ge(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o) { return cmp_test(c, v, a, CMP_GE, o); }
static int t_in(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    gm_tv x = {.k = TV_NONE};
    int rc = one_arg(c, a, "in", &x);
    return rc ? rc : gm_tcontains(c, x, v, o);
}
static int t_filter(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    (void)c; (void)a;
    *o = v.k == TV_STR && gm_tfilter_id(v.u.s->p, v.u.s->len) != -1;
    return 0;
}
static int t_test(gm_tctx *c, gm_tv v, const gm_targs *a, bool *o)
{
    (void)c; (void)a;
    *o = v.k == TV_STR && gm_ttest_id(v.u.s->p, v.u.s->len) != -1;
    return 0;
}

static const struct {
    const char *name;
    test_fn fn;
} tests[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},
    {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq},
    {"escaped", t_escaped}, {"even", t_even}, {"false", t_false}, {"filter", t_filter},
    {"float", t_float}, {"ge", t_ge}, {">=", t_ge}, {"gt", t_gt}, {">", t_gt},
    {"greaterthan", t_gt}, {"in", t_in}, {"integer", t_integer}, {"iterable", t_iterable},
    {"le", t_le}, {"<=", t_le}, {"lower", t_lower}, {"lt", t_lt}, {"<", t_lt},
    {"lessthan", t_lt}, {"mapping", t_mapping}, {"ne", t_ne}, {"!=", t_ne}, {"none", t_none},
    {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas}, {"sequence", t_sequence},
    {"string", t_string}, {"test", t_test}, {"true", t_true}, {"undefined", t_undefined},
    {"upper", t_upper},
};

#define NTESTS (sizeof tests / sizeof tests[0])

int gm_ttest_id(const char *name, size_t n)
{
    for (size_t i = 0; i < NTESTS; i++)
        if (strlen(tests[i].name) == n && memcmp(tests[i].name, name, n) == 0)
            return (int)i;
    return -1;
}

int gm_ttest_call(gm_tctx *c, int id, gm_tv v, const gm_targs *a, bool *out)
{
    if (id < 0 || (size_t)id >= NTESTS)
        return gm_tfail(c, GM_EUNSUPPORTED, "unsupported test");
    /* the tests without a parameter: Python raises on extra arguments ("x is string if y"
     * parses "if" as one) */
    static const test_fn one[] = {t_divisibleby, t_eq, t_ne, t_lt, t_le, t_gt, t_ge, t_in, t_sameas};
    bool takes_one = false;
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        takes_one |= tests[id].fn == one[i];
    if (!takes_one && (a->npos || a->nkw))
        return gm_tfail(c, GM_ETEMPLATE, "test '%s' takes no arguments", tests[id].name);
    return tests[id].fn(c, v, a, out);
}

int gm_ttest_byname(gm_tctx *c, gm_tv name, gm_tv v, const gm_targs *a, bool *out)
{
    if (name.k != TV_STR)
        return gm_tfail(c, GM_ETEMPLATE, "a test name must be a string");
    int id = gm_ttest_id(name.u.s->p, name.u.s->len);
    if (id < 0)
        return gm_tfail(c, GM_ETEMPLATE, "No test named '%s'.", name.u.s->p);
    return gm_ttest_call(c, id, v, a, out);
}
