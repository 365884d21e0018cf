/* Tests of server/toolcall: each family's tool calls are parsed back out of the text its own
 * chat template rendered (tests/fixtures/templates/golden, as Python's Jinja2 rendered the
 * contexts tool-calls-object and tool-calls-string) and compared, as JSON values, with the
 * context's tool_calls; the format comes from gm_tc_detect on the template's source. Then the
 * forms a model generates that the templates do not show (text around calls, harmony's header
 * order, DeepSeek R1's fenced JSON), malformed markup at every truncation point, the streaming
 * hold-back and typing of text parameters through the request's tools. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "server/toolcall.h"
#include "testutil.h"

#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"

static json_t *load_json(const char *rel)
{
    json_error_t e;
    json_t *j = json_load_file(gm_fixture(rel), 0, &e);
    if (!j)
        fail_msg("%s: %s", rel, e.text);
    return j;
}

static char *load_text(const char *rel)
{
    size_t n = 0;
    char *s = gm_read_file(gm_fixture(rel), &n);
    if (!s)
        fail_msg("cannot read %s", gm_fixture(rel));
    return s;
}

/* The arguments a context's tool call carries, as a JSON object (a string is parsed). */
static json_t *expected_args(const json_t *call)
{
    const json_t *a = json_object_get(json_object_get(call, "function"), "arguments");
    if (json_is_string(a))
        return json_loads(json_string_value(a), 0, NULL);
    return json_incref((json_t *)a);
}

static void check_args(const char *got, const json_t *want, const char *what)
{
    json_error_t e;
    json_t *g = json_loads(got, 0, &e);
    if (!g)
        fail_msg("%s: arguments are not JSON (%s): %s", what, e.text, got);
    if (!json_is_object(g) || !json_equal(g, want)) {
        char *w = json_dumps(want, JSON_SORT_KEYS);
        fail_msg("%s: arguments\n  got  %s\n  want %s", what, got, w);
    }
    json_decref(g);
}

/* Every call's arguments are a JSON object, names are non-empty and ids distinct. */
static void check_well_formed(const gm_tool_call *calls, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_loads(calls[i].arguments, 0, NULL);
        assert_true(json_is_object(a));
        json_decref(a);
        assert_true(calls[i].name[0] != '\0');
        assert_true(calls[i].id[0] != '\0');
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(calls[i].id, calls[j].id);
    }
}

/* ---- the families' own templates ------------------------------------------------------ */

typedef struct golden_case {
    const char *tmpl;    /* jinja/<tmpl>.jinja and golden/<tmpl>.json */
    const char *context; /* contexts/<context>.json */
    gm_tc_format fmt;    /* what gm_tc_detect must say for the template */
    const char *open;    /* the assistant turn starts after the first of these after the user turn */
    const char *close;   /* and ends before the next of these */
    const char *content; /* the content outside the calls in that turn */
} golden_case;

static const golden_case k_golden[] = {
    {"Qwen-Qwen2.5-7B-Instruct", "tool-calls-object", GM_TC_HERMES, "<|im_start|>assistant\n", "<|im_end|>", ""},
    {"Qwen-Qwen2.5-7B-Instruct", "tool-calls-string", GM_TC_HERMES, "<|im_start|>assistant\n", "<|im_end|>", ""},
    {"Qwen-Qwen3-0.6B", "tool-calls-string", GM_TC_HERMES, "<|im_start|>assistant\n", "<|im_end|>", ""},
    {"Qwen-QwQ-32B", "tool-calls-string", GM_TC_HERMES, "<|im_start|>assistant\n", "<|im_end|>", ""},
    {"MiMo-VL", "tool-calls-object", GM_TC_HERMES, "<|im_start|>assistant\n", "<|im_end|>", ""},
    {"Reka-Edge", "tool-calls-object", GM_TC_HERMES, "<sep>assistant: ", "<sep>", ""},
    {"ibm-granite-granite-4.0", "tool-calls-object", GM_TC_HERMES, "<|start_of_role|>assistant<|end_of_role|>",
     "<|end_of_text|>", ""},
    {"Qwen3-Coder", "tool-calls-object", GM_TC_QWEN3_CODER, "<|im_start|>assistant\n", "<|im_end|>", ""},
    {"Qwen3.5-4B", "tool-calls-object", GM_TC_QWEN3_CODER, "<|im_start|>assistant\n", "<|im_end|>", ""},
    {"StepFun3.5-Flash", "tool-calls-object", GM_TC_QWEN3_CODER, "<|im_start|>assistant\n", "<|im_end|>", ""},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "tool-calls-object", GM_TC_QWEN3_CODER, "<|im_start|>assistant\n",
     "<|im_end|>", "<think></think>"},
    {"openai-gpt-oss-120b", "tool-calls-string", GM_TC_HARMONY, "<|end|>", "<|start|>functions.", ""},
    {"deepseek-ai-DeepSeek-V3.1", "tool-calls-object", GM_TC_DEEPSEEK, "<｜Assistant｜>", "<｜end▁of▁sentence｜>",
     "<think></think>"},
    {"deepseek-ai-DeepSeek-V3.1", "tool-calls-string", GM_TC_DEEPSEEK, "<｜Assistant｜>", "<｜end▁of▁sentence｜>",
     "<think></think>"},
    {"GLM-4.6", "tool-calls-object", GM_TC_GLM, "<|assistant|>", "<|observation|>", "\n<think></think>\nNone"},
    {"GLM-4.7-Flash", "tool-calls-object", GM_TC_GLM, "<|assistant|>", "<|observation|>", "</think>None"},
    {"Spark2.5", "tool-calls-object", GM_TC_GLM, "<|Bot|>", "<｜end▁of▁sentence｜>", "</think>"},
    {"inclusionai-ling-3.0-flash", "tool-calls-object", GM_TC_GLM, "<role>ASSISTANT</role>", "<|role_end|>",
     "\n<think></think>"},
    {"poolside-Laguna-XS.2", "tool-calls-object", GM_TC_GLM, "<assistant>", "</assistant>", "\n</think>"},
    {"moonshotai-Kimi-K2", "tool-calls-object", GM_TC_KIMI, "<|im_assistant|>assistant<|im_middle|>", "<|im_end|>", ""},
    {"moonshotai-Kimi-K2", "tool-calls-string", GM_TC_KIMI, "<|im_assistant|>assistant<|im_middle|>", "<|im_end|>", ""},
    {"MiniMax-M2", "tool-calls-object", GM_TC_MINIMAX, "]~b]ai\n", "[e~[", "None"},
};

/* The assistant turn of g's rendered context that carries the tool calls (malloc'd), those
 * calls (*want, a reference) and the context's tools as JSON text (malloc'd). */
static char *golden_turn(const golden_case *g, json_t **want, char **tools)
{
    char rel[256];
    snprintf(rel, sizeof rel, "templates/golden/%s.json", g->tmpl);
    json_t *gold = load_json(rel);
    const char *out = json_string_value(json_object_get(json_object_get(gold, g->context), "out"));
    if (!out)
        fail_msg("%s has no rendering of %s", rel, g->context);
    snprintf(rel, sizeof rel, "templates/contexts/%s.json", g->context);
    json_t *ctx = load_json(rel);
    const json_t *msgs = json_object_get(ctx, "messages");
    const char *anchor = NULL;
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        if (json_object_get(m, "tool_calls")) {
            *want = json_incref(json_object_get(m, "tool_calls"));
            break;
        }
        if (json_is_string(json_object_get(m, "content")))
            anchor = json_string_value(json_object_get(m, "content"));
    }
    assert_non_null(anchor);
    *tools = json_dumps(json_object_get(ctx, "tools"), 0);
    const char *a = strstr(out, anchor);
    const char *o = a ? strstr(a + strlen(anchor), g->open) : NULL;
    if (!o)
        fail_msg("%s: no %s after the user turn", g->tmpl, g->open);
    o += strlen(g->open);
    const char *c = strstr(o, g->close);
    if (!c)
        fail_msg("%s: the assistant turn does not end with %s", g->tmpl, g->close);
    char *turn = strndup(o, (size_t)(c - o));
    json_decref(ctx);
    json_decref(gold);
    return turn;
}

static void check_golden_calls(const golden_case *g, const gm_tool_call *calls, size_t n, const json_t *want)
{
    char what[160];
    if (n != json_array_size(want))
        fail_msg("%s %s: %zu calls, want %zu", g->tmpl, g->context, n, json_array_size(want));
    check_well_formed(calls, n);
    for (size_t i = 0; i < n; i++) {
        const json_t *w = json_array_get(want, i);
        const char *name = json_string_value(json_object_get(json_object_get(w, "function"), "name"));
        snprintf(what, sizeof what, "%s %s call %zu", g->tmpl, g->context, i);
        assert_string_equal(calls[i].name, name);
        json_t *args = expected_args(w);
        check_args(calls[i].arguments, args, what);
        json_decref(args);
        if (g->fmt == GM_TC_KIMI) {
            snprintf(what, sizeof what, "functions.%s:%zu", name, i);
            assert_string_equal(calls[i].id, what);
        } else {
            assert_memory_equal(calls[i].id, "call_", 5);
        }
    }
}

static void test_golden(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof k_golden / sizeof *k_golden; k++) {
        const golden_case *g = &k_golden[k];
        char rel[256];
        snprintf(rel, sizeof rel, "templates/jinja/%s.jinja", g->tmpl);
        char *src = load_text(rel);
        gm_tc_format f = gm_tc_detect(src, NULL);
        if (f != g->fmt)
            fail_msg("%s detected as %s, want %s", g->tmpl, gm_tc_format_name(f), gm_tc_format_name(g->fmt));
        free(src);
        json_t *want = NULL;
        char *tools = NULL;
        char *turn = golden_turn(g, &want, &tools);
        /* without and with the request's tools (the templates' values all keep their type) */
        for (int with_tools = 0; with_tools < 2; with_tools++) {
            char *content = NULL;
            gm_tool_call *calls = NULL;
            size_t n = 0;
            gm_err err = {0};
            assert_int_equal(gm_tc_parse(f, turn, strlen(turn), with_tools ? tools : NULL, &content, &calls, &n, &err), 0);
            check_golden_calls(g, calls, n, want);
            if (strcmp(content, g->content) != 0)
                fail_msg("%s %s: content \"%s\", want \"%s\"", g->tmpl, g->context, content, g->content);
            gm_tc_free(calls, n);
            free(content);
        }
        /* every truncation: never a crash, no more calls than the whole has, the text kept
         * whole when no call came out; a byte changed anywhere: still well-formed calls. And
         * streamed, what is shown before the end never reaches into the calls' markup. */
        size_t len = strlen(turn), shown = 0;
        for (size_t cut = 0; cut <= len; cut++) {
            size_t safe = gm_tc_safe_prefix(f, turn, cut);
            assert_true(safe <= cut);
            shown = safe > shown ? safe : shown;
            char *content = NULL;
            gm_tool_call *calls = NULL;
            size_t n = 0;
            gm_err err = {0};
            char *prefix = strndup(turn, cut); /* its own allocation, so ASan sees a read past cut */
            assert_int_equal(gm_tc_parse(f, prefix, cut, tools, &content, &calls, &n, &err), 0);
            assert_true(n <= json_array_size(want));
            check_well_formed(calls, n);
            if (n == 0)
                assert_true(strlen(content) == cut && memcmp(content, turn, cut) == 0);
            gm_tc_free(calls, n);
            free(content);
            if (cut < len) {
                prefix = realloc(prefix, len);
                assert_non_null(prefix);
                memcpy(prefix, turn, len);
                prefix[cut] = (char)(prefix[cut] == '"' ? '}' : '"');
                assert_int_equal(gm_tc_parse(f, prefix, len, tools, &content, &calls, &n, &err), 0);
                check_well_formed(calls, n);
                gm_tc_free(calls, n);
                free(content);
            }
            free(prefix);
        }
        const size_t cl = strlen(g->content), common = shown < cl ? shown : cl;
        if (memcmp(turn, g->content, common) != 0 || strspn(turn + common, " \n") < shown - common)
            fail_msg("%s %s: %zu bytes shown while streaming, beyond the content", g->tmpl, g->context, shown);
        free(turn);
        free(tools);
        json_decref(want);
    }
}

/* ---- detection ------------------------------------------------------------------------ */

static void test_detect(void **state)
{
    (void)state;
    static const struct {
        const char *tmpl;
        gm_tc_format f;
    } k[] = {
        {"Qwen-Qwen3-0.6B", GM_TC_HERMES},
        {"Qwen-Qwen2.5-7B-Instruct", GM_TC_HERMES},
        {"Qwen-QwQ-32B", GM_TC_HERMES},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", GM_TC_HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", GM_TC_HERMES},
        {"ibm-granite-granite-4.1", GM_TC_HERMES},
        {"Bielik-11B-v3.0-Instruct", GM_TC_HERMES},
        {"Qwen3-Coder", GM_TC_QWEN3_CODER},
        {"Qwen3.5-4B", GM_TC_QWEN3_CODER},
        {"openai-gpt-oss-120b", GM_TC_HARMONY},
        {"deepseek-ai-DeepSeek-V3.1", GM_TC_DEEPSEEK},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", GM_TC_DEEPSEEK},
        {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", GM_TC_DEEPSEEK},
        {"llama-cpp-deepseek-r1", GM_TC_DEEPSEEK},
        {"GLM-4.6", GM_TC_GLM},
        {"GLM-4.7-Flash", GM_TC_GLM},
        {"poolside-Laguna-S-2.1", GM_TC_GLM},
        {"moonshotai-Kimi-K2", GM_TC_KIMI},
        {"Kimi-K2-Instruct", GM_TC_KIMI},
        {"Kimi-K2-Thinking", GM_TC_KIMI},
        {"MiniMax-M2", GM_TC_MINIMAX},
        /* other formats: not mistaken for one of these */
        {"MiniMax-M3", GM_TC_NONE},
        {"MiniMax-M1", GM_TC_NONE},
        {"Kimi-K3", GM_TC_NONE},
        {"deepseek-ai-DeepSeek-V3.2", GM_TC_NONE},
        {"unsloth-Apriel-1.5", GM_TC_NONE},
        {"ByteDance-Seed-OSS", GM_TC_NONE},
        {"tencent-Hy3", GM_TC_NONE},
        {"meta-llama-Llama-3.1-8B-Instruct", GM_TC_NONE},
        {"mistralai-Mistral-Nemo-Instruct-2407", GM_TC_NONE},
        {"google-gemma-2-2b-it", GM_TC_NONE},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "templates/jinja/%s.jinja", k[i].tmpl);
        char *src = load_text(rel);
        gm_tc_format f = gm_tc_detect(src, NULL);
        if (f != k[i].f)
            fail_msg("%s detected as %s, want %s", k[i].tmpl, gm_tc_format_name(f), gm_tc_format_name(k[i].f));
        /* markers (or a way of rendering calls not listed) win over the architecture */
        if (strstr(src, "tool_call"))
            assert_int_equal(gm_tc_detect(src, "gpt-oss"), k[i].f == GM_TC_HARMONY ? GM_TC_HARMONY : k[i].f);
        free(src);
    }
    /* no template, or one that says nothing of tools: the architecture */
    assert_int_equal(gm_tc_detect(NULL, "gpt-oss"), GM_TC_HARMONY);
    assert_int_equal(gm_tc_detect("{{ messages[0].content }}", "glm4moe"), GM_TC_GLM);
    assert_int_equal(gm_tc_detect(NULL, "minimax-m2"), GM_TC_MINIMAX);
    assert_int_equal(gm_tc_detect(NULL, "qwen3moe"), GM_TC_HERMES);
    assert_int_equal(gm_tc_detect(NULL, "qwen35moe"), GM_TC_QWEN3_CODER);
    assert_int_equal(gm_tc_detect(NULL, "llama"), GM_TC_NONE);
    assert_int_equal(gm_tc_detect(NULL, NULL), GM_TC_NONE);
    assert_int_equal(gm_tc_detect("{% for tool_call in m.tool_calls %}[TOOL_CALLS]{% endfor %}", "qwen3moe"),
                     GM_TC_NONE);
    assert_string_equal(gm_tc_format_name(GM_TC_NONE), "none");
    assert_string_equal(gm_tc_format_name(GM_TC_QWEN3_CODER), "qwen3-coder");
    assert_string_equal(gm_tc_format_name(GM_TC_MINIMAX), "minimax");
    assert_string_equal(gm_tc_format_name((gm_tc_format)99), "none");
}

/* ---- forms a model writes that the templates do not show ------------------------------ */

typedef struct built_case {
    gm_tc_format f;
    const char *text;
    const char *content;
    size_t n;
    const char *name[2];
    const char *args[2]; /* JSON, compared as values */
    const char *exact;   /* when set: the first call's arguments byte for byte */
} built_case;

static const built_case k_built[] = {
    {GM_TC_HERMES,
     "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"x\": 0.1, \"y\": 1e22, \"s\": \"a\\\"b\"}}\n"
     "</tool_call>\nOne moment.",
     "Let me look.\n\nOne moment.", 1, {"get_weather"}, {"{\"x\": 0.1, \"y\": 1e22, \"s\": \"a\\\"b\"}"},
     "{\"x\": 0.1, \"y\": 1e22, \"s\": \"a\\\"b\"}"},
    {GM_TC_HERMES, "<tool_call>{\"name\": \"now\"}</tool_call><tool_call>{\"parameters\": {\"a\": [1]}, \"name\": \"b\"}</tool_call>",
     "", 2, {"now", "b"}, {"{}", "{\"a\": [1]}"}, "{}"},
    {GM_TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"k\\\": 1}\"}\n</tool_call>", "", 1, {"f"},
     {"{\"k\": 1}"}, "{\"k\": 1}"},
    {GM_TC_QWEN3_CODER,
     "I'll check.\n\n<tool_call>\n<function=get_weather>\n<parameter=location>\nOslo, Norway\n</parameter>\n"
     "<parameter=days>\n3\n</parameter>\n<parameter=note>\nline one\nline two\n</parameter>\n</function>\n</tool_call>",
     "I'll check.", 1, {"get_weather"}, {"{\"location\": \"Oslo, Norway\", \"days\": 3, \"note\": \"line one\\nline two\"}"},
     NULL},
    {GM_TC_QWEN3_CODER, "<tool_call>\n<function=list_files>\n</function>\n</tool_call>", "", 1, {"list_files"}, {"{}"}, "{}"},
    {GM_TC_HARMONY,
     "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Oslo\",\"t\":0.1}<|call|>",
     "<|channel|>analysis<|message|>Need the weather.<|end|>", 1, {"get_weather"}, {"{\"location\": \"Oslo\", \"t\": 0.1}"},
     "{\"location\":\"Oslo\",\"t\":0.1}"},
    {GM_TC_HARMONY, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Oslo\"}", "",
     1, {"get_weather"}, {"{\"location\": \"Oslo\"}"}, NULL},
    {GM_TC_HARMONY, " to=functions.a<|channel|>commentary json<|message|>{}<|call|><|start|>assistant to=functions.b"
                    "<|channel|>commentary json<|message|>{\"q\": [1, 2]}<|call|>",
     "", 2, {"a", "b"}, {"{}", "{\"q\": [1, 2]}"}, "{}"},
    {GM_TC_DEEPSEEK,
     "Sure." DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "get_weather\n```json\n{\"location\": \"Oslo\"}\n```" DS_CALL_END
     "\n" DS_CALL_BEGIN "function" DS_SEP "search_docs\n```json\n{\"query\": \"rain\"}\n```" DS_CALL_END DS_CALLS_END,
     "Sure.", 2, {"get_weather", "search_docs"}, {"{\"location\": \"Oslo\"}", "{\"query\": \"rain\"}"},
     "{\"location\": \"Oslo\"}"},
    {GM_TC_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "put" DS_SEP "{\"code\": \"```json\\n{}\\n```\"}" DS_CALL_END DS_CALLS_END,
     "", 1, {"put"}, {"{\"code\": \"```json\\n{}\\n```\"}"}, NULL},
    {GM_TC_GLM, "Checking.<tool_call>get_weather<arg_key>location</arg_key><arg_value>Oslo</arg_value></tool_call>",
     "Checking.", 1, {"get_weather"}, {"{\"location\": \"Oslo\"}"}, NULL},
    {GM_TC_GLM, "<tool_call>list_files</tool_call>\n<tool_call>now\n</tool_call>", "", 2, {"list_files", "now"}, {"{}", "{}"},
     "{}"},
    {GM_TC_KIMI,
     "Checking now.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
     "{\"location\": \"Oslo\"}<|tool_call_end|><|tool_calls_section_end|>",
     "Checking now.", 1, {"get_weather"}, {"{\"location\": \"Oslo\"}"}, "{\"location\": \"Oslo\"}"},
    {GM_TC_MINIMAX,
     "<think>x</think>\nChecking.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"location\">Oslo"
     "</parameter>\n</invoke>\n</minimax:tool_call>",
     "<think>x</think>\nChecking.", 1, {"get_weather"}, {"{\"location\": \"Oslo\"}"}, NULL},
    /* a block that does not parse stays, the next one is taken */
    {GM_TC_HERMES, "A<tool_call>{bad}</tool_call>B<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>",
     "A<tool_call>{bad}</tool_call>B", 1, {"x"}, {"{}"}, "{}"},
};

static void test_built(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof k_built / sizeof *k_built; k++) {
        const built_case *b = &k_built[k];
        char *content = NULL;
        gm_tool_call *calls = NULL;
        size_t n = 0;
        gm_err err = {0};
        assert_int_equal(gm_tc_parse(b->f, b->text, strlen(b->text), NULL, &content, &calls, &n, &err), 0);
        if (n != b->n)
            fail_msg("case %zu (%s): %zu calls, want %zu", k, gm_tc_format_name(b->f), n, b->n);
        check_well_formed(calls, n);
        assert_string_equal(content, b->content);
        for (size_t i = 0; i < n; i++) {
            char what[64];
            snprintf(what, sizeof what, "case %zu call %zu", k, i);
            assert_string_equal(calls[i].name, b->name[i]);
            json_t *want = json_loads(b->args[i], 0, NULL);
            assert_non_null(want);
            check_args(calls[i].arguments, want, what);
            json_decref(want);
        }
        if (b->exact)
            assert_string_equal(calls[0].arguments, b->exact);
        gm_tc_free(calls, n);
        free(content);
    }
}

/* ---- malformed markup ----------------------------------------------------------------- */

static void test_malformed(void **state)
{
    (void)state;
    static const struct {
        gm_tc_format f;
        const char *text;
    } k[] = {
        {GM_TC_HERMES, "Hi <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}"},
        {GM_TC_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": }\n</tool_call>"},
        {GM_TC_HERMES, "<tool_call>\n{\"arguments\": {}}\n</tool_call>"},
        {GM_TC_HERMES, "<tool_call>\n{\"name\": \"x\", \"arguments\": \"not json\"}\n</tool_call>"},
        {GM_TC_HERMES, "<tool_call>\n{\"name\": \"x\", \"arguments\": [1]}\n</tool_call>"},
        {GM_TC_HERMES, "<tool_call>\n[1, 2]\n</tool_call>"},
        {GM_TC_HERMES, "<tool_call>\n{\"name\": \"two words\", \"arguments\": {}}\n</tool_call>"},
        {GM_TC_HERMES, "</tool_call><tool_call>"},
        {GM_TC_QWEN3_CODER, "<tool_call>\n<function=get_weather>\n<parameter=location>\nOslo\n</function>\n</tool_call>"},
        {GM_TC_QWEN3_CODER, "<tool_call>\n<function=get_weather>\n</tool_call>"},
        {GM_TC_QWEN3_CODER, "<tool_call>\n<function=get weather>\n</function>\n</tool_call>"},
        {GM_TC_QWEN3_CODER, "<tool_call>\n<function=f>\n</function>\ntrailing\n</tool_call>"},
        {GM_TC_QWEN3_CODER, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"},
        {GM_TC_HARMONY, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\": "},
        {GM_TC_HARMONY, "<|channel|>commentary to=functions.get_weather <|constrain|>json"},
        {GM_TC_HARMONY, "<|channel|>commentary to=functions. json<|message|>{}<|call|>"},
        {GM_TC_HARMONY, "<|channel|>final<|message|>Call to=functions.f<|message|>{}<|call|>"},
        {GM_TC_HARMONY, "<|channel|>commentary to=functions.f<|end|><|message|>{}<|call|>"},
        {GM_TC_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather" DS_SEP "{bad}" DS_CALL_END DS_CALLS_END},
        {GM_TC_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather" DS_SEP "{}" DS_CALL_END},
        {GM_TC_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather{}" DS_CALL_END DS_CALLS_END},
        {GM_TC_DEEPSEEK, DS_CALLS_BEGIN DS_CALLS_END},
        {GM_TC_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "f\n```json\n{}" DS_CALL_END DS_CALLS_END},
        {GM_TC_GLM, "<tool_call>get_weather\n<arg_key>location</arg_key>\n</tool_call>"},
        {GM_TC_GLM, "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Oslo</tool_call>"},
        {GM_TC_GLM, "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>\xff\xfe</arg_value>\n</tool_call>"},
        {GM_TC_GLM, "<tool_call>\n</tool_call>"},
        {GM_TC_KIMI, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\":"
                     "<|tool_call_end|><|tool_calls_section_end|>"},
        {GM_TC_KIMI, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>"},
        {GM_TC_KIMI, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0{}<|tool_call_end|><|tool_calls_section_end|>"},
        {GM_TC_MINIMAX, "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"location\">Oslo</invoke>\n"
                        "</minimax:tool_call>"},
        {GM_TC_MINIMAX, "<minimax:tool_call>\n</minimax:tool_call>"},
        /* a section is taken whole: one bad invoke keeps the good one in the content too */
        {GM_TC_MINIMAX, "<minimax:tool_call>\n<invoke name=\"a\">\n</invoke>\n<invoke name=\"b\">\n<parameter name=\"k\">"
                        "</invoke>\n</minimax:tool_call>"},
        {GM_TC_NONE, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        char *content = NULL;
        gm_tool_call *calls = NULL;
        size_t n = 0;
        gm_err err = {0};
        size_t len = strlen(k[i].text);
        assert_int_equal(gm_tc_parse(k[i].f, k[i].text, len, NULL, &content, &calls, &n, &err), 0);
        if (n != 0)
            fail_msg("case %zu (%s): %zu calls from malformed markup", i, gm_tc_format_name(k[i].f), n);
        assert_null(calls);
        assert_string_equal(content, k[i].text);
        free(content);
    }
    /* no text at all, and text with a NUL inside (kept, length honoured) */
    char *content = NULL;
    gm_tool_call *calls = NULL;
    size_t n = 1;
    gm_err err = {0};
    assert_int_equal(gm_tc_parse(GM_TC_HERMES, NULL, 5, NULL, &content, &calls, &n, &err), 0);
    assert_string_equal(content, "");
    assert_int_equal(n, 0);
    free(content);
    static const char nul[] = "a\0<tool_call>{\"name\": \"f\"}</tool_call>";
    assert_int_equal(gm_tc_parse(GM_TC_HERMES, nul, sizeof nul - 1, NULL, &content, &calls, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_memory_equal(content, "a\0", 2);
    gm_tc_free(calls, n);
    free(content);
    assert_int_equal(gm_tc_parse(GM_TC_HERMES, "x", 1, NULL, NULL, &calls, &n, &err), GM_EINVAL);
}

/* ---- streaming hold-back -------------------------------------------------------------- */

static void test_safe_prefix(void **state)
{
    (void)state;
    static const struct {
        gm_tc_format f;
        const char *text;
        size_t safe;
    } k[] = {
        {GM_TC_HERMES, "", 0},
        {GM_TC_HERMES, "Hello", 5},
        {GM_TC_HERMES, "Hello <tool", 6},
        {GM_TC_HERMES, "Hello <tool_call>\n{\"na", 6},
        {GM_TC_HERMES, "a<", 1},
        {GM_TC_HERMES, "<", 0},
        {GM_TC_HERMES, "x <tool_callx", 13},
        {GM_TC_HERMES, "a < b", 5},
        {GM_TC_QWEN3_CODER, "ok <tool_call", 3},
        {GM_TC_GLM, "ok\n<tool_c", 3},
        {GM_TC_DEEPSEEK, "ok<\xef\xbd\x9ctool\xe2\x96", 2},
        {GM_TC_DEEPSEEK, "ok" DS_CALLS_BEGIN DS_CALL_BEGIN "f", 2},
        {GM_TC_DEEPSEEK, "ok" DS_CALL_BEGIN, 2 + sizeof DS_CALL_BEGIN - 1},
        {GM_TC_KIMI, "ok<|tool_calls_sec", 2},
        {GM_TC_KIMI, "ok<|tool_calls_section_begin|><|tool_call_begin|>", 2},
        {GM_TC_MINIMAX, "ok\n<minimax:to", 3},
        {GM_TC_MINIMAX, "ok <minimax:tool_call>\n<invoke", 3},
        {GM_TC_MINIMAX, "ok <tool_call>", 14},
        {GM_TC_HARMONY, "Plain text", 9}, /* "t" may begin "to=functions." */
        {GM_TC_HARMONY, "<|channel|>comment", 0},
        {GM_TC_HARMONY, "<|channel|>analysis<|message|>Think", 35},
        {GM_TC_HARMONY, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{", 0},
        {GM_TC_HARMONY, "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant", 40},
        {GM_TC_HARMONY, "<|channel|>analysis<|message|>Hm.<|end|><|sta", 40},
        {GM_TC_HARMONY, "<|channel|>final<|message|>Use to=functions.x", 45},
        {GM_TC_HARMONY, " to=functions.f<|channel|>commentary json<|message|>{}", 1},
        {GM_TC_HARMONY, "I want to", 7},
        {GM_TC_NONE, "<tool_call>", 11},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        size_t got = gm_tc_safe_prefix(k[i].f, k[i].text, strlen(k[i].text));
        if (got != k[i].safe)
            fail_msg("case %zu (%s) \"%s\": %zu, want %zu", i, gm_tc_format_name(k[i].f), k[i].text, got, k[i].safe);
    }
    assert_int_equal(gm_tc_safe_prefix(GM_TC_HERMES, NULL, 3), 0);
    /* streamed byte by byte, a golden turn never shows a byte of its markup: the shown prefix
     * only grows and stops at the first marker */
    static const char turn[] = "Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    size_t shown = 0;
    for (size_t n = 0; n <= sizeof turn - 1; n++) {
        size_t s = gm_tc_safe_prefix(GM_TC_HERMES, turn, n);
        assert_true(s <= n && s <= 5);
        shown = s > shown ? s : shown;
    }
    assert_int_equal(shown, 5);
}

/* ---- parameters typed by the request's tools ------------------------------------------ */

static void parse_one(gm_tc_format f, const char *text, const char *tools, const char *want_args)
{
    char *content = NULL;
    gm_tool_call *calls = NULL;
    size_t n = 0;
    gm_err err = {0};
    assert_int_equal(gm_tc_parse(f, text, strlen(text), tools, &content, &calls, &n, &err), 0);
    if (n != 1)
        fail_msg("%s: %zu calls from %s", gm_tc_format_name(f), n, text);
    json_t *want = json_loads(want_args, 0, NULL);
    assert_non_null(want);
    check_args(calls[0].arguments, want, gm_tc_format_name(f));
    json_decref(want);
    gm_tc_free(calls, n);
    free(content);
}

static void test_typed(void **state)
{
    (void)state;
    json_t *ctx = load_json("templates/contexts/tools.json");
    char *tools = json_dumps(json_object_get(ctx, "tools"), 0);
    json_decref(ctx);
    static const char coder[] = "<tool_call>\n<function=search_docs>\n<parameter=query>\n42\n</parameter>\n"
                                "<parameter=limit>\n7\n</parameter>\n<parameter=tags>\n[\"a\"]\n</parameter>\n"
                                "</function>\n</tool_call>";
    parse_one(GM_TC_QWEN3_CODER, coder, tools, "{\"query\": \"42\", \"limit\": 7, \"tags\": [\"a\"]}");
    parse_one(GM_TC_QWEN3_CODER, coder, NULL, "{\"query\": 42, \"limit\": 7, \"tags\": [\"a\"]}");
    parse_one(GM_TC_QWEN3_CODER, coder, "not json", "{\"query\": 42, \"limit\": 7, \"tags\": [\"a\"]}");

    static const char glm[] = "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>true</arg_value>\n"
                              "<arg_key>days</arg_key>\n<arg_value>None</arg_value>\n<arg_key>unit</arg_key>\n"
                              "<arg_value>\"celsius\"</arg_value>\n</tool_call>";
    parse_one(GM_TC_GLM, glm, tools, "{\"location\": \"true\", \"days\": null, \"unit\": \"\\\"celsius\\\"\"}");
    parse_one(GM_TC_GLM, glm, NULL, "{\"location\": true, \"days\": \"None\", \"unit\": \"celsius\"}");

    /* Anthropic's shape of tools; Python's True through a boolean */
    static const char anthropic[] =
        "[{\"name\": \"set\", \"input_schema\": {\"type\": \"object\", \"properties\": {\"flag\": {\"type\": \"boolean\"},"
        " \"note\": {\"type\": \"string\"}, \"cfg\": {\"type\": \"object\"}}}}]";
    static const char mm[] = "<minimax:tool_call>\n<invoke name=\"set\">\n<parameter name=\"flag\">True</parameter>\n"
                             "<parameter name=\"note\">{\"a\": 1}</parameter>\n<parameter name=\"cfg\">{\"a\": 1}"
                             "</parameter>\n</invoke>\n</minimax:tool_call>";
    parse_one(GM_TC_MINIMAX, mm, anthropic, "{\"flag\": true, \"note\": \"{\\\"a\\\": 1}\", \"cfg\": {\"a\": 1}}");
    parse_one(GM_TC_MINIMAX, mm, NULL, "{\"flag\": \"True\", \"note\": {\"a\": 1}, \"cfg\": {\"a\": 1}}");
    free(tools);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),     cmocka_unit_test(test_detect), cmocka_unit_test(test_built),
        cmocka_unit_test(test_malformed),  cmocka_unit_test(test_safe_prefix), cmocka_unit_test(test_typed),
    };
    return gm_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
