/* template/ops: Python's binary operators and "in" as templates meet them: int64 arithmetic
 * that fails cleanly where Python would grow a big integer, true and floor division and modulo
 * with Python's signs, str and list concatenation and repetition (bounded by the limits), and
 * markupsafe's rule that Markup + str escapes the plain side. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

static bool is_num(gm_tv v) { return v.k == TV_BOOL || v.k == TV_INT || v.k == TV_FLOAT; }
static int64_t as_int(gm_tv v) { return v.k == TV_BOOL ? v.u.b : v.u.i; }
static double as_dbl(gm_tv v) { return v.k == TV_FLOAT ? v.u.d : (double)as_int(v); }

int gm_toverflow(gm_tctx *c)
{
    return gm_tfail(c, GM_EUNSUPPORTED, "integer overflow: the result needs more than 64 bits "
                                        "(Python would use a big integer)");
}

static int op_unsupported(gm_tctx *c, const char *op, gm_tv a, gm_tv b)
{
    return gm_tfail(c, GM_ETEMPLATE, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                    gm_tv_typename(a), gm_tv_typename(b));
}

static int str_concat(gm_tctx *c, gm_tv a, gm_tv b, gm_tv *out)
{
    /* Markup + str escapes the plain side and stays Markup (markupsafe semantics) */
    gm_tv ea = gm_tv_ref(a), eb = gm_tv_ref(b);
    bool markup = (a.f | b.f) & TVF_MARKUP;
    int rc = 0;
    if (markup && !(a.f & TVF_MARKUP)) {
        gm_tv_decref(ea);
        rc = gm_tv_escape(c, a, &ea);
    }
    if (!rc && markup && !(b.f & TVF_MARKUP)) {
        gm_tv_decref(eb);
        rc = gm_tv_escape(c, b, &eb);
    }
    if (rc) {
        gm_tv_decref(ea);
        gm_tv_decref(eb);
        return rc;
    }
    size_t n = ea.u.s->len + eb.u.s->len;
    if (n > c->lim.max_output_bytes) {
        rc = gm_tfail(c, GM_ERANGE, "text longer than %llu bytes", (unsigned long long)c->lim.max_output_bytes);
    } else {
        gm_tstr *s = gm_tstr_new(n);
        if (!s) {
            rc = gm_tfail(c, GM_ENOMEM, "out of memory");
        } else {
            memcpy(s->p, ea.u.s->p, ea.u.s->len);
            memcpy(s->p + ea.u.s->len, eb.u.s->p, eb.u.s->len);
            s->ncp = ea.u.s->ncp + eb.u.s->ncp;
            *out = (gm_tv){.k = TV_STR, .f = markup ? TVF_MARKUP : 0};
            out->u.s = s;
            rc = gm_tstep_out(c, n / 16, out);
        }
    }
    gm_tv_decref(ea);
    gm_tv_decref(eb);
    return rc;
}

static int repeat(gm_tctx *c, gm_tv seq, int64_t times, gm_tv *out)
{
    if (times < 0)
        times = 0;
    int rc;
    if (seq.k == TV_STR) {
        const gm_tstr *s = seq.u.s;
        if (s->len && (uint64_t)times > c->lim.max_output_bytes / s->len)
            return gm_tfail(c, GM_ERANGE, "text longer than %llu bytes", (unsigned long long)c->lim.max_output_bytes);
        size_t n = s->len * (size_t)times;
        gm_tstr *r = gm_tstr_new(n);
        if (!r)
            return gm_tfail(c, GM_ENOMEM, "out of memory");
        for (int64_t i = 0; i < times; i++)
            memcpy(r->p + (size_t)i * s->len, s->p, s->len);
        r->ncp = s->ncp * (size_t)times;
        *out = (gm_tv){.k = TV_STR, .f = seq.f & TVF_MARKUP};
        out->u.s = r;
        return gm_tstep_out(c, n / 16, out);
    }
    const gm_tlist *l = seq.u.l;
    if (l->n && (uint64_t)times > c->lim.max_steps / l->n)
        return gm_tfail(c, GM_ERANGE, "list too long");
    size_t n = l->n * (size_t)times;
    if ((rc = gm_tstep(c, n)) || (rc = gm_tv_list(c, l->lk, n, out)))
        return rc;
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < l->n; j++)
            out->u.l->a[out->u.l->n++] = gm_tv_ref(l->a[j]);
    return 0;
}

static bool plain_seq(gm_tv v) { return v.k == TV_LIST && (v.u.l->lk == LK_LIST || v.u.l->lk == LK_TUPLE); }

/* Python's float floor division and modulo (sign of the divisor). */
static void float_divmod(double x, double y, double *fdiv, double *fmodv)
{
    double mod = fmod(x, y), div = (x - mod) / y;
    if (mod != 0) {
        if ((y < 0) != (mod < 0)) {
            mod += y;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, y);
    }
    double fl;
    if (div != 0) {
        fl = floor(div);
        if (div - fl > 0.5)
            fl += 1.0;
    } else {
        fl = copysign(0.0, x / y);
    }
    *fdiv = fl;
    *fmodv = mod;
}

int gm_tbinop(gm_tctx *c, int op, gm_tv a, gm_tv b, gm_tv *out)
{
    static const char *const opname[] = {"+", "-", "*", "/", "//", "%", "** or pow()"};
    if (a.k == TV_UNDEF)
        return gm_tundef_error(c, a);
    if (op == OP_MOD && a.k == TV_STR)
        return gm_tpercent(c, a, b, out); /* str.__mod__ takes any argument, undefined too */
    if (b.k == TV_UNDEF)
        return gm_tundef_error(c, b);
    bool nums = is_num(a) && is_num(b), ints = nums && a.k != TV_FLOAT && b.k != TV_FLOAT;
    int64_t r;
    switch (op) {
    case OP_ADD:
        if (ints) {
            if (__builtin_add_overflow(as_int(a), as_int(b), &r))
                return gm_toverflow(c);
            *out = gm_tv_int(r);
            return 0;
        }
        if (nums) {
            *out = gm_tv_float(as_dbl(a) + as_dbl(b));
            return 0;
        }
        if (a.k == TV_STR && b.k == TV_STR)
            return str_concat(c, a, b, out);
        if (plain_seq(a) && plain_seq(b) && a.u.l->lk == b.u.l->lk) {
            size_t n = a.u.l->n + b.u.l->n;
            int rc = gm_tstep(c, n / 16);
            if (rc || (rc = gm_tv_list(c, a.u.l->lk, n, out)))
                return rc;
            for (size_t i = 0; i < a.u.l->n; i++)
                out->u.l->a[out->u.l->n++] = gm_tv_ref(a.u.l->a[i]);
            for (size_t i = 0; i < b.u.l->n; i++)
                out->u.l->a[out->u.l->n++] = gm_tv_ref(b.u.l->a[i]);
            return 0;
        }
        if (a.k == TV_STR)
            return gm_tfail(c, GM_ETEMPLATE, "can only concatenate str (not \"%s\") to str", gm_tv_typename(b));
        if (plain_seq(a))
            return gm_tfail(c, GM_ETEMPLATE, "can only concatenate %s (not \"%s\") to %s",
                            gm_tv_typename(a), gm_tv_typename(b), gm_tv_typename(a));
        return op_unsupported(c, "+", a, b);
    case OP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(as_int(a), as_int(b), &r))
                return gm_toverflow(c);
            *out = gm_tv_int(r);
            return 0;
        }
        if (nums) {
            *out = gm_tv_float(as_dbl(a) - as_dbl(b));
            return 0;
        }
        return op_unsupported(c, "-", a, b);
    case OP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(as_int(a), as_int(b), &r))
                return gm_toverflow(c);
            *out = gm_tv_int(r);
            return 0;
        }
        if (nums) {
            *out = gm_tv_float(as_dbl(a) * as_dbl(b));
            return 0;
        }
        if ((a.k == TV_STR || plain_seq(a)) && (b.k == TV_INT || b.k == TV_BOOL))
            return repeat(c, a, as_int(b), out);
        if ((b.k == TV_STR || plain_seq(b)) && (a.k == TV_INT || a.k == TV_BOOL))
            return repeat(c, b, as_int(a), out);
        return op_unsupported(c, "*", a, b);
    case OP_DIV:
        if (!nums)
            return op_unsupported(c, "/", a, b);
        if (as_dbl(b) == 0)
            return gm_tfail(c, GM_ETEMPLATE, "division by zero");
        *out = gm_tv_float(as_dbl(a) / as_dbl(b));
        return 0;
    case OP_FLOORDIV:
    case OP_MOD:
        if (op == OP_MOD && a.k == TV_STR)
            return gm_tpercent(c, a, b, out);
        if (!nums)
            return op_unsupported(c, opname[op], a, b);
        if (ints) {
            int64_t x = as_int(a), y = as_int(b);
            if (y == 0)
                return gm_tfail(c, GM_ETEMPLATE, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == OP_MOD) {
                    *out = gm_tv_int(0);
                    return 0;
                }
                return gm_toverflow(c);
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q -= 1;
                m += y;
            }
            *out = gm_tv_int(op == OP_MOD ? m : q);
            return 0;
        }
        if (as_dbl(b) == 0)
            return gm_tfail(c, GM_ETEMPLATE, op == OP_MOD ? "float modulo" : "float floor division by zero");
        {
            double fd, fm;
            float_divmod(as_dbl(a), as_dbl(b), &fd, &fm);
            *out = gm_tv_float(op == OP_MOD ? fm : fd);
        }
        return 0;
    case OP_POW:
        if (!nums)
            return op_unsupported(c, "** or pow()", a, b);
        if (ints && as_int(b) >= 0) {
            int64_t base = as_int(a), e = as_int(b), acc = 1;
            while (e > 0) {
                if (e & 1)
                    if (__builtin_mul_overflow(acc, base, &acc))
                        return gm_toverflow(c);
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base))
                    return gm_toverflow(c);
            }
            *out = gm_tv_int(acc);
            return 0;
        }
        {
            double x = as_dbl(a), y = as_dbl(b);
            if (x == 0 && y < 0)
                return gm_tfail(c, GM_ETEMPLATE, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y))
                return gm_tfail(c, GM_EUNSUPPORTED, "a negative number to a fractional power is complex");
            double pw = pow(x, y);
            if (isinf(pw) && isfinite(x) && isfinite(y))
                return gm_tfail(c, GM_ETEMPLATE, "(34, 'Numerical result out of range')");
            *out = gm_tv_float(pw);
        }
        return 0;
    }
    return gm_tfail(c, GM_ETEMPLATE, "unknown operator");
}

int gm_tcontains(gm_tctx *c, gm_tv container, gm_tv item, bool *in)
{
    *in = false;
    switch (container.k) {
    case TV_UNDEF:
        if (container.f & TVF_UNSAFE)
            return gm_tundef_error(c, container);
        return 0;
    case TV_STR:
        if (item.k != TV_STR)
            return gm_tfail(c, GM_ETEMPLATE, "'in <string>' requires string as left operand, not %s",
                            gm_tv_typename(item));
        if (item.u.s->len == 0) {
            *in = true;
            return 0;
        }
        *in = memmem(container.u.s->p, container.u.s->len, item.u.s->p, item.u.s->len) != NULL;
        return 0;
    case TV_LIST:
        for (size_t i = 0; i < container.u.l->n; i++) {
            gm_tv e = container.u.l->a[i];
            if (gm_tv_heap(e) && gm_tv_heap(item) && e.u.o == item.u.o) {
                *in = true;
                return 0;
            }
            int rc = gm_tv_eq(c, e, item, in);
            if (rc || *in)
                return rc;
        }
        return gm_tstep(c, container.u.l->n / 16);
    case TV_DICT:
        if (!gm_tv_hashable(item))
            return gm_tfail(c, GM_ETEMPLATE, "unhashable type: '%s'", gm_tv_typename(item));
        *in = gm_tdict_get(container.u.m, item) != NULL;
        return 0;
    case TV_LOOP: {
        gm_tv l = {.k = TV_LIST};
        l.u.l = ((gm_tloop *)container.u.o)->items;
        return gm_tcontains(c, l, item, in);
    }
    default:
        return gm_tfail(c, GM_ETEMPLATE, "argument of type '%s' is not iterable", gm_tv_typename(container));
    }
}
