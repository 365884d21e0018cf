/* Tests of the chat-template renderer (src/template) against Python Jinja2 as transformers runs
 * it. Every expected string comes from Python: tests/fixtures/templates/make-golden.py renders
 * the 70 model templates against the conversations in contexts/ (golden/) and a list of
 * focused and seeded random cases (unit-cases.json); the few strings written inline below were
 * checked with /usr/bin/python3 and python3-jinja2 3.1.2 in the same environment.
 *
 *   goldens      each template x context, byte for byte; a failure in a must-pass template
 *                (the MoE families gmlx serves) fails the test, the others are reported
 *   unit cases   whitespace control, repr, tojson, operators, methods, loops, macros, filters,
 *                tests, errors: all must match (or fail where Python raises)
 *   errors       syntax errors with their line, unsupported constructs named, raise_exception,
 *                sandbox refusals, limits (steps, output, depth, hostile nesting) -> GM_ERANGE
 *   api, threads, speed
 *   regen        when /usr/bin/python3 has jinja2: make-golden.py into a temporary folder must
 *                reproduce the committed fixtures (skipped otherwise) */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "template/template.h"
#include "testutil.h"

#define NOW_UNIX_S 1773480413 /* make-golden.py's NOW: 2026-03-14 09:26:53 UTC */

static const char *const must_pass[] = {
    "Qwen-Qwen3-0.6B", "Qwen3-Coder", "Qwen3.5-4B", "Kimi-K2-Instruct", "Kimi-K2-Thinking", "Kimi-K3",
    "moonshotai-Kimi-K2", "GLM-4.6", "GLM-4.7-Flash", "openai-gpt-oss-120b", "MiniMax-M2", "MiniMax-M3",
    "tencent-Hy3",
};

static bool is_must_pass(const char *name)
{
    if (strncmp(name, "deepseek-ai-DeepSeek-", 21) == 0)
        return true;
    for (size_t i = 0; i < sizeof must_pass / sizeof must_pass[0]; i++)
        if (strcmp(name, must_pass[i]) == 0)
            return true;
    return false;
}

static char *fixture_path(const char *rel)
{
    return strdup(gm_fixture(rel));
}

static void opts_now(gm_tmpl_render_opts *o)
{
    gm_tmpl_render_opts_default(o);
    o->now_set = true;
    o->now_unix_s = NOW_UNIX_S;
}

/* Parses and renders src; the result (malloc'd) or NULL with err filled. */
static char *render_with(const char *src, const json_t *vars, const gm_tmpl_render_opts *o, int *rc, gm_err *err)
{
    gm_tmpl *t = NULL;
    char *out = NULL;
    size_t n = 0;
    memset(err, 0, sizeof *err);
    *rc = gm_tmpl_parse(&t, src, strlen(src), err);
    if (!*rc)
        *rc = gm_tmpl_render(t, vars, o, &out, &n, err);
    gm_tmpl_free(t);
    if (*rc)
        assert_null(out);
    else
        assert_int_equal(n, strlen(out));
    return out;
}

static char *render(const char *src, const char *vars_json, int *rc, gm_err *err)
{
    json_t *vars = NULL;
    if (vars_json) {
        json_error_t je;
        vars = json_loads(vars_json, 0, &je);
        assert_non_null(vars);
    }
    gm_tmpl_render_opts o;
    opts_now(&o);
    char *out = render_with(src, vars, &o, rc, err);
    json_decref(vars);
    return out;
}

static void expect(const char *src, const char *vars, const char *want)
{
    int rc;
    gm_err err;
    char *out = render(src, vars, &rc, &err);
    if (rc)
        fail_msg("%s\n  failed: %s", src, err.msg);
    if (strcmp(out, want) != 0)
        fail_msg("%s\n  want [%s]\n  got  [%s]", src, want, out);
    free(out);
}

/* Expects failure with code; contains (if not NULL) must occur in the message. */
static void expect_fail(const char *src, const char *vars, int code, const char *contains)
{
    int rc;
    gm_err err;
    char *out = render(src, vars, &rc, &err);
    if (!rc)
        fail_msg("%s\n  rendered [%s], expected error %d", src, out, code);
    if (rc != code)
        fail_msg("%s\n  error %d (%s), expected %d", src, rc, err.msg, code);
    if (contains && !strstr(err.msg, contains))
        fail_msg("%s\n  message [%s] lacks [%s]", src, err.msg, contains);
}

/* ------------------------------------------------------------------ goldens */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static json_t *load_json(const char *rel)
{
    json_error_t je;
    json_t *j = json_load_file(gm_fixture(rel), 0, &je);
    if (!j)
        fail_msg("%s: %s (line %d)", rel, je.text, je.line);
    return j;
}

static void test_goldens(void **state)
{
    (void)state;
    char *dir = fixture_path("templates/jinja");
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot open %s", dir);
    char *names[256];
    size_t nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 256) {
        size_t l = strlen(e->d_name);
        if (l > 6 && strcmp(e->d_name + l - 6, ".jinja") == 0)
            names[nn++] = strndup(e->d_name, l - 6);
    }
    closedir(d);
    free(dir);
    qsort(names, nn, sizeof *names, cmp_str);
    json_t *contexts = json_object();
    gm_tmpl_render_opts o;
    opts_now(&o);
    size_t all_pass = 0;
    char bad_must[2048] = "";
    for (size_t i = 0; i < nn; i++) {
        char rel[512];
        snprintf(rel, sizeof rel, "templates/jinja/%s.jinja", names[i]);
        size_t len;
        char *src = gm_read_file(gm_fixture(rel), &len);
        assert_non_null(src);
        gm_err perr = {0};
        gm_tmpl *t = NULL;
        int prc = gm_tmpl_parse(&t, src, len, &perr);
        snprintf(rel, sizeof rel, "templates/golden/%s.json", names[i]);
        json_t *golden = load_json(rel);
        const char *cname;
        json_t *want;
        int pass = 0, total = 0;
        char failed[1024] = "";
        json_object_foreach(golden, cname, want) {
            total++;
            json_t *ctx = json_object_get(contexts, cname);
            if (!ctx) {
                snprintf(rel, sizeof rel, "templates/contexts/%s.json", cname);
                ctx = load_json(rel);
                json_object_set_new(contexts, cname, ctx);
            }
            json_t *out_want = json_object_get(want, "out");
            char *out = NULL;
            size_t out_len = 0;
            gm_err err = {0};
            int rc = prc ? prc : gm_tmpl_render(t, ctx, &o, &out, &out_len, &err);
            bool ok = out_want ? !rc && out_len == json_string_length(out_want) &&
                                     memcmp(out, json_string_value(out_want), out_len) == 0
                               : rc != 0;
            if (ok) {
                pass++;
            } else {
                size_t fl = strlen(failed);
                snprintf(failed + fl, sizeof failed - fl, " %s", cname);
                if (out_want && !rc) {
                    const char *w = json_string_value(out_want);
                    size_t k = 0;
                    while (k < out_len && w[k] == out[k])
                        k++;
                    size_t from = k > 30 ? k - 30 : 0;
                    print_message("  %s/%s differs at byte %zu:\n    want [%.60s]\n    got  [%.60s]\n", names[i],
                                  cname, k, w + from, out + from);
                } else {
                    print_message("  %s/%s: %s\n", names[i], cname,
                                  rc ? (prc ? perr.msg : err.msg) : "rendered where Python raises");
                }
            }
            free(out);
        }
        print_message("%-48s %2d/%2d%s%s\n", names[i], pass, total, failed[0] ? "  failing:" : "", failed);
        if (pass == total)
            all_pass++;
        else if (is_must_pass(names[i])) {
            size_t bl = strlen(bad_must);
            snprintf(bad_must + bl, sizeof bad_must - bl, " %s", names[i]);
        }
        json_decref(golden);
        gm_tmpl_free(t);
        free(src);
    }
    print_message("%zu of %zu templates pass every context\n", all_pass, nn);
    json_decref(contexts);
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    assert_true(nn >= 70);
    if (bad_must[0])
        fail_msg("must-pass templates differ from Python:%s", bad_must);
}

/* ------------------------------------------------------------------ unit cases */

static void test_unit_cases(void **state)
{
    (void)state;
    json_t *all = load_json("templates/unit-cases.json");
    json_t *shared = json_object_get(all, "shared"), *cases = json_object_get(all, "cases");
    assert_non_null(cases);
    size_t i, failures = 0, skipped = 0;
    json_t *c;
    gm_tmpl_render_opts o;
    opts_now(&o);
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        if (json_object_get(c, "skip")) {
            skipped++;
            continue;
        }
        const char *src = json_string_value(json_object_get(c, "template"));
        json_t *vars = json_object_get(c, "vars");
        if (json_object_get(c, "shared"))
            vars = json_object_get(shared, json_string_value(json_object_get(c, "shared")));
        /* templates may pop() from lists: a fresh copy per case */
        json_t *copy = vars ? json_deep_copy(vars) : NULL;
        json_t *want = json_object_get(c, "out");
        int rc;
        gm_err err;
        char *out = render_with(src, copy, &o, &rc, &err);
        json_decref(copy);
        bool ok = want ? !rc && strlen(out) == json_string_length(want) && strcmp(out, json_string_value(want)) == 0
                       : rc != 0;
        if (!ok) {
            failures++;
            print_message("FAIL %s\n  template [%s]\n  want [%s]\n  got  [%s]\n", name, src,
                          want ? json_string_value(want) : json_string_value(json_object_get(c, "error")),
                          rc ? err.msg : out);
        }
        free(out);
    }
    print_message("%zu unit cases, %zu failed, %zu skipped (known divergences)\n", json_array_size(cases), failures,
                  skipped);
    json_decref(all);
    assert_int_equal(failures, 0);
}

/* ------------------------------------------------------------------ inline cases */

/* Strings checked with /usr/bin/python3 (python3-jinja2 3.1.2, transformers' environment). */
static void test_inline(void **state)
{
    (void)state;
    expect("a\n{% if true %}\nb\n{% endif %}\nc", NULL, "a\nb\nc");
    expect("a\n    {% if true %}\n    b\n    {% endif %}\nc", NULL, "a\n    b\nc");
    expect("a\n    {{ 'x' }}\n", NULL, "a\n    x");
    expect("a   \n  {%- if true -%}  \n b \n {%- endif -%}  \n c", NULL, "abc");
    expect("{{ none }} {{ true }} {{ 1.0 }} {{ 7/2 }} {{ 7//2 }} {{ -7 % 3 }}", NULL, "None True 1.0 3.5 3 2");
    expect("{{ ['it\\'s', \"q\\\"x\", 'a\\\\b'] }}", NULL, "[\"it's\", 'q\"x', 'a\\\\b']");
    expect("{{ x|tojson }}", "{\"x\": [0.1, 1e22, 1e-7, 100.0, 3.0e16]}", "[0.1, 1e+22, 1e-07, 100.0, 3e+16]");
    expect("{{ x|tojson(indent=2) }}", "{\"x\": {\"a\": [1]}}", "{\n  \"a\": [\n    1\n  ]\n}");
    expect("{{ x|string }}", "{\"x\": [\"string\", \"null\"]}", "['string', 'null']");
    expect("{{ 'a</think>b'.split('</think>', 1)[1] }}", NULL, "b");
    expect("{% for x in [3, 1, 2] if x > 1 %}{{ loop.index }}:{{ x }},{% endfor %}", NULL, "1:3,2:2,");
    expect("{% macro f(n) %}{% if n <= 1 %}1{% else %}{{ n * f(n - 1)|int }}{% endif %}{% endmacro %}{{ f(5) }}", NULL,
           "120");
    expect("{% set ns = namespace(c=0) %}{% for i in range(3) %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}", NULL,
           "3");
    expect("{{ strftime_now('%Y-%m-%d %d %b %Y') }}", NULL, "2026-03-14 14 Mar 2026");
    expect("{{ d['items'] }} {{ d.items()|list }}", "{\"d\": {\"items\": 1}}", "1 [('items', 1)]");
}

/* ------------------------------------------------------------------ errors */

static void test_syntax_errors(void **state)
{
    (void)state;
    static const struct {
        const char *src;
        int line;
    } cases[] = {
        {"line1\nline2\n{{ 1 + }}\n", 3},
        {"a\n\n{% frobnicate %}", 3},
        {"{% if true %}\nx", 2},
        {"{{ 'abc }}", 1},
        {"x\n{# abc", 2},
        {"\n\n\n{{ (1] }}", 4},
        {"{% for x in y %}\n{% endif %}", 2},
        {"{% set 1 = 2 %}", 1},
        {"\n{{ 1|no_such_filter }}", 2},
        {"\n\n{% break %}", 3},
        {"{% macro m(a=1, b) %}{% endmacro %}", 1},
        {"{{ 1 is odd is even }}", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gm_tmpl *t = NULL;
        gm_err err = {0};
        int rc = gm_tmpl_parse(&t, cases[i].src, strlen(cases[i].src), &err);
        if (rc != GM_EFORMAT)
            fail_msg("%s: rc %d (%s), expected GM_EFORMAT", cases[i].src, rc, err.msg);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "line %d: ", cases[i].line);
        if (strncmp(err.msg, prefix, strlen(prefix)) != 0)
            fail_msg("%s: message [%s], expected it to start with [%s]", cases[i].src, err.msg, prefix);
        assert_null(t);
    }
    /* invalid UTF-8 in the source */
    gm_tmpl *t = NULL;
    gm_err err = {0};
    assert_int_equal(gm_tmpl_parse(&t, "a\xff{{ x }}", 8, &err), GM_EFORMAT);
    assert_null(t);
}

static void test_unsupported(void **state)
{
    (void)state;
    static const char *const tags[] = {"include", "extends", "import", "from", "block"};
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
        char src[128], name[64];
        snprintf(src, sizeof src, "ok\n{%% %s 'x.html' %%}", tags[i]);
        snprintf(name, sizeof name, "%s", tags[i]);
        gm_tmpl *t = NULL;
        gm_err err = {0};
        assert_int_equal(gm_tmpl_parse(&t, src, strlen(src), &err), GM_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, name));
        assert_non_null(strstr(err.msg, "line 2"));
    }
    /* a Jinja filter this renderer lacks fails when it runs, naming it */
    expect_fail("{{ x|pprint }}", "{\"x\": 1}", GM_EUNSUPPORTED, "pprint");
    expect("{% if false %}{{ x|pprint }}{% endif %}ok", NULL, "ok");
    /* Python's big integers */
    expect_fail("{{ 9223372036854775807 + 1 }}", NULL, GM_EUNSUPPORTED, "64 bits");
    expect_fail("{{ 2 ** 64 }}", NULL, GM_EUNSUPPORTED, "64 bits");
    expect_fail("{{ 99999999999999999999 }}", NULL, GM_EUNSUPPORTED, "64 bits");
}

static void test_raise_and_sandbox(void **state)
{
    (void)state;
    const char *mixtral = "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
                          "{% endif %}{{ m['content'] }}{% endfor %}";
    const char *two_users = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]}";
    int rc;
    gm_err err;
    char *out = render(mixtral, two_users, &rc, &err);
    assert_null(out);
    assert_int_equal(rc, GM_ETEMPLATE);
    assert_string_equal(err.msg, "Conversation roles must alternate user/assistant/user/assistant/...");
    /* the immutable sandbox: list.append / dict.update are refused, list.pop is not */
    expect_fail("{% set l = [] %}{% set _ = l.append(1) %}{{ l }}", NULL, GM_ETEMPLATE, "unsafe");
    expect_fail("{% set _ = d.update({'x': 1}) %}", "{\"d\": {}}", GM_ETEMPLATE, "unsafe");
    expect_fail("{{ ''.__class__() }}", NULL, GM_ETEMPLATE, "unsafe");
    expect("{% set l = [1, 2] %}{{ l.pop() }}{{ l }}", NULL, "2[1]");
    expect("[{{ l.append }}]", "{\"l\": []}", "[]");
    /* undefined: printing is fine, an attribute of it is not */
    expect("[{{ m.missing }}]{{ m.missing is defined }}", "{\"m\": {}}", "[]False");
    expect_fail("{{ m.missing.deeper }}", "{\"m\": {}}", GM_ETEMPLATE, "missing");
}

static gm_tmpl_render_opts small_limits(uint64_t steps, uint64_t bytes, uint32_t depth)
{
    gm_tmpl_render_opts o;
    opts_now(&o);
    if (steps)
        o.limits.max_steps = steps;
    if (bytes)
        o.limits.max_output_bytes = bytes;
    if (depth)
        o.limits.max_depth = depth;
    return o;
}

static void expect_range(const char *src, const gm_tmpl_render_opts *o)
{
    int rc;
    gm_err err;
    char *out = render_with(src, NULL, o, &rc, &err);
    if (rc != GM_ERANGE)
        fail_msg("%s: rc %d (%s), expected GM_ERANGE", src, rc, rc ? err.msg : out);
}

static char *repeat_str(const char *pre, const char *unit, size_t k, const char *post)
{
    size_t n = strlen(pre) + strlen(unit) * k + strlen(post) + 1;
    char *s = malloc(n), *p = s;
    assert_non_null(s);
    p += sprintf(p, "%s", pre);
    for (size_t i = 0; i < k; i++)
        p += sprintf(p, "%s", unit);
    sprintf(p, "%s", post);
    return s;
}

static void test_limits(void **state)
{
    (void)state;
    gm_tmpl_limits l;
    gm_tmpl_limits_default(&l);
    assert_int_equal(l.max_output_bytes, 16u << 20);
    assert_int_equal(l.max_steps, 10000000);
    assert_int_equal(l.max_depth, 200);

    gm_tmpl_render_opts o = small_limits(100000, 0, 0);
    expect_range("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", &o);
    expect_range("{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(60) }}", &o);
    expect_range("{% set ns = namespace(s=[1]) %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", &o);
    o = small_limits(0, 1 << 20, 0);
    expect_range("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", &o);
    expect_range("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", &o);
    expect_range("{{ 'x' * 100000000000 }}", &o);
    expect_range("{% set ns = namespace(s=[1]) %}{% for i in range(60) %}{% set ns.s = [ns.s, ns.s] %}{% endfor %}{{ ns.s }}",
                 &o);
    o = small_limits(0, 0, 0);
    expect_range("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", &o);
    expect_range("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", &o);
    expect_range("{% set ns = namespace(s=[1]) %}{% for i in range(1000) %}{% set ns.s = [ns.s] %}{% endfor %}{{ ns.s|tojson }}",
                 &o);
    expect_range("{{ range(1000000)|length }}", &o);

    /* hostile nesting in the source is an error, not a stack overflow */
    static const struct {
        const char *pre, *unit, *post;
    } deep[] = {
        {"{{ ", "(", "1 }}"}, {"{{ ", "not ", "1 }}"}, {"{{ ", "-", "1 }}"}, {"{{ ", "[", "1 }}"},
        {"", "{% if true %}", "x"}, {"", "{% for i in [1] %}", "x"}, {"{{ 'x'", "|upper", " }}"},
        {"{{ x", "[0]", " }}"}, {"{{ 1 if 1 else ", "2 if 1 else ", "3 }}"},
    };
    for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
        char *src = repeat_str(deep[i].pre, deep[i].unit, 50000, deep[i].post);
        gm_tmpl *t = NULL;
        gm_err err = {0};
        int rc = gm_tmpl_parse(&t, src, strlen(src), &err);
        if (rc == 0)
            fail_msg("%.40s... (50000 deep) parsed", src);
        assert_null(t);
        free(src);
    }
    /* a long chain of one operator is not nesting */
    char *chain = repeat_str("{{ 0", " + 1", 100000, " }}");
    expect(chain, NULL, "100000");
    free(chain);
}

/* ------------------------------------------------------------------ api */

static void test_api(void **state)
{
    (void)state;
    gm_tmpl *t = NULL;
    gm_err err = {0};
    char *out = (char *)1;
    size_t n = 99;
    assert_int_equal(gm_tmpl_parse(&t, "", 0, &err), 0);
    assert_int_equal(gm_tmpl_render(t, NULL, NULL, &out, &n, &err), 0);
    assert_string_equal(out, "");
    assert_int_equal(n, 0);
    free(out);
    json_t *arr = json_array();
    out = (char *)1;
    assert_int_equal(gm_tmpl_render(t, arr, NULL, &out, &n, &err), GM_EINVAL);
    assert_null(out);
    json_decref(arr);
    gm_tmpl_free(t);
    gm_tmpl_free(NULL);

    gm_tmpl_render_opts o;
    gm_tmpl_render_opts_default(&o);
    assert_false(o.now_set);
    assert_int_equal(o.limits.max_depth, 200);
    /* the current time when now is not set: a plausible year */
    expect_fail("{{ raise_exception(strftime_now('%Y')|int > 2020) }}", NULL, GM_ETEMPLATE, "True");

    /* bytes after a NUL in a JSON string survive */
    json_t *v = json_pack("{s:s%}", "x", "a\0b", (size_t)3);
    assert_int_equal(gm_tmpl_parse(&t, "[{{ x }}]{{ x|length }}", 23, &err), 0);
    assert_int_equal(gm_tmpl_render(t, v, NULL, &out, &n, &err), 0);
    assert_int_equal(n, 6);
    assert_memory_equal(out, "[a\0b]3", 6);
    free(out);
    gm_tmpl_free(t);
    json_decref(v);
}

/* ------------------------------------------------------------------ threads, speed */

typedef struct thread_job {
    const gm_tmpl *t;
    json_t *ctx;
    const char *want;
    int bad;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    gm_tmpl_render_opts o;
    opts_now(&o);
    for (int i = 0; i < 30; i++) {
        char *out = NULL;
        size_t n;
        gm_err err = {0};
        if (gm_tmpl_render(j->t, j->ctx, &o, &out, &n, &err) || strcmp(out, j->want) != 0)
            j->bad++;
        free(out);
    }
    return NULL;
}

static gm_tmpl *load_template(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "templates/jinja/%s.jinja", name);
    size_t len;
    char *src = gm_read_file(gm_fixture(rel), &len);
    assert_non_null(src);
    gm_tmpl *t = NULL;
    gm_err err = {0};
    if (gm_tmpl_parse(&t, src, len, &err))
        fail_msg("%s: %s", name, err.msg);
    free(src);
    return t;
}

/* One parsed template, several threads rendering it at once: the same text as alone. */
static void test_threads(void **state)
{
    (void)state;
    gm_tmpl *t = load_template("openai-gpt-oss-120b");
    json_t *golden = load_json("templates/golden/openai-gpt-oss-120b.json");
    json_t *ctx = load_json("templates/contexts/tool-calls-string.json");
    const char *want = json_string_value(json_object_get(json_object_get(golden, "tool-calls-string"), "out"));
    assert_non_null(want);
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){.t = t, .ctx = ctx, .want = want};
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].bad, 0);
    }
    json_decref(ctx);
    json_decref(golden);
    gm_tmpl_free(t);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A 16 KB template and a 10-turn conversation with tools: well under 10 ms a render. */
static void test_speed(void **state)
{
    (void)state;
    gm_tmpl *t = load_template("openai-gpt-oss-120b");
    json_t *ctx = load_json("templates/contexts/multi-turn.json");
    json_t *tools = load_json("templates/contexts/tools.json");
    json_object_set(ctx, "tools", json_object_get(tools, "tools"));
    json_t *msgs = json_object_get(ctx, "messages");
    while (json_array_size(msgs) < 10) {
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", "A reply of some length."));
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", "Another question, please."));
    }
    gm_tmpl_render_opts o;
    opts_now(&o);
    double t0 = now_s();
    int n = 50;
    for (int i = 0; i < n; i++) {
        char *out = NULL;
        size_t len;
        gm_err err = {0};
        if (gm_tmpl_render(t, ctx, &o, &out, &len, &err))
            fail_msg("%s", err.msg);
        free(out);
    }
    double ms = (now_s() - t0) * 1000.0 / n;
    print_message("gpt-oss (16.7 KB), 10 turns + tools: %.3f ms a render\n", ms);
    json_decref(tools);
    json_decref(ctx);
    gm_tmpl_free(t);
}

/* ------------------------------------------------------------------ regeneration */

static bool files_equal(const char *a, const char *b)
{
    size_t na, nb;
    char *pa = gm_read_file(a, &na), *pb = gm_read_file(b, &nb);
    bool eq = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return eq;
}

static void test_regen(void **state)
{
    (void)state;
    if (access("/usr/bin/python3", X_OK) != 0 || system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0) {
        print_message("regen: /usr/bin/python3 with jinja2 is not installed; skipped\n");
        skip();
    }
    char *script = fixture_path("templates/make-golden.py");
    const char *tmp = gm_test_tmpdir();
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", script, tmp);
    free(script);
    assert_int_equal(system(cmd), 0);
    char *gdir = fixture_path("templates/golden");
    DIR *d = opendir(gdir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0, diff = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/%s", gdir, e->d_name);
        snprintf(b, sizeof b, "%s/golden/%s", tmp, e->d_name);
        n++;
        if (!files_equal(a, b)) {
            diff++;
            print_message("regen: golden/%s differs from what Jinja2 renders now\n", e->d_name);
        }
    }
    closedir(d);
    free(gdir);
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s", gm_fixture("templates/unit-cases.json"));
    snprintf(b, sizeof b, "%s/unit-cases.json", tmp);
    if (!files_equal(a, b)) {
        diff++;
        print_message("regen: unit-cases.json differs from what Jinja2 renders now\n");
    }
    print_message("regen: %d golden files and unit-cases.json compared, %d differ\n", n, diff);
    assert_int_equal(diff, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens),   cmocka_unit_test(test_unit_cases),
        cmocka_unit_test(test_inline),    cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_unsupported), cmocka_unit_test(test_raise_and_sandbox),
        cmocka_unit_test(test_limits),    cmocka_unit_test(test_api),
        cmocka_unit_test(test_threads),   cmocka_unit_test(test_speed),
        cmocka_unit_test(test_regen),
    };
    return gm_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
