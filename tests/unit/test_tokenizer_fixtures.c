/* Tokenizer against each fixture model's tokenizer-cases.jsonl: 20 strings and the ids the
 * Hugging Face tokenizer gives them (special-token text encoded as the special token). Each
 * must encode to exactly those ids, and decode back to the string where the reference says
 * decoding round-trips. The committed trained-qwen3moe fixture always runs; the fetched models
 * (.fixtures/) are skipped outside CI when absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "text/tokenizer.h"

typedef struct fixture {
    const char *name;
    const char *model;  /* relative path of the GGUF */
    const char *cases;  /* relative path of tokenizer-cases.jsonl */
    int cached;         /* 1: under .fixtures (may be absent outside CI) */
} fixture;

static void run_fixture(void **state)
{
    const fixture *f = *state;
    char model[4096], cases[4096];
    if (f->cached) {
        const char *m = gm_fixture_cached(f->model), *c = gm_fixture_cached(f->cases);
        if (!m || !c) {
            if (gm_test_in_ci())
                fail_msg("fixture %s missing (run scripts/fetch-fixtures.sh)", f->name);
            gm_test_skipped(f->name);
            skip();
        }
        snprintf(model, sizeof model, "%s", gm_fixture_cached(f->model));
        snprintf(cases, sizeof cases, "%s", gm_fixture_cached(f->cases));
    } else {
        snprintf(model, sizeof model, "%s", gm_fixture(f->model));
        snprintf(cases, sizeof cases, "%s", gm_fixture(f->cases));
    }

    gm_err err = {0};
    gm_gguf *g = NULL;
    if (gm_gguf_open(&g, model, &err))
        fail_msg("%s", err.msg);
    gm_tokenizer *t = NULL;
    if (gm_tokenizer_load(&t, g, &err))
        fail_msg("%s", err.msg);
    gm_gguf_close(g);

    FILE *fp = fopen(cases, "r");
    assert_non_null(fp);
    char *line = NULL;
    size_t line_cap = 0;
    int n = 0, n_enc = 0, n_rt = 0, n_rt_cases = 0;
    while (getline(&line, &line_cap, fp) > 0) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o)
            continue;
        n++;
        size_t tl = 0;
        const char *text = json_string_value(json_object_get(o, "text"));
        assert_non_null(text);
        tl = json_string_length(json_object_get(o, "text"));
        json_t *ids = json_object_get(o, "ids");
        assert_true(json_is_array(ids));
        size_t nw = json_array_size(ids);
        int rt_ok = json_is_true(json_object_get(o, "decoded_roundtrip_ok"));

        int32_t got[4096];
        size_t ng = 0;
        int rc = gm_tokenizer_encode(t, text, tl, GM_ENCODE_PARSE_SPECIAL, got, 4096, &ng, &err);
        if (rc)
            fail_msg("%s: encode failed: %s", f->name, err.msg);
        int same = ng == nw;
        for (size_t i = 0; same && i < nw; i++)
            same = got[i] == (int32_t)json_integer_value(json_array_get(ids, i));
        if (same) {
            n_enc++;
        } else {
            print_message("%s case %d %.60s\n   got ", f->name, n, text);
            for (size_t i = 0; i < ng && i < 60; i++)
                print_message(" %d", got[i]);
            print_message("\n   want");
            for (size_t i = 0; i < nw && i < 60; i++)
                print_message(" %d", (int)json_integer_value(json_array_get(ids, i)));
            print_message("\n");
        }

        if (rt_ok) {
            n_rt_cases++;
            int32_t want[4096];
            for (size_t i = 0; i < nw && i < 4096; i++)
                want[i] = (int32_t)json_integer_value(json_array_get(ids, i));
            char out[65536];
            size_t no = 0;
            rc = gm_tokenizer_decode(t, want, nw, GM_DECODE_RENDER_SPECIAL, out, sizeof out, &no,
                                     &err);
            if (rc)
                fail_msg("%s: decode failed: %s", f->name, err.msg);
            if (no == tl && memcmp(out, text, tl) == 0)
                n_rt++;
            else
                print_message("%s case %d: decode gives '%.*s'\n", f->name, n, (int)no, out);
        }
        json_decref(o);
    }
    free(line);
    fclose(fp);
    print_message("%-16s encode %d/%d, decode round trip %d/%d\n", f->name, n_enc, n, n_rt,
                  n_rt_cases);
    gm_tokenizer_free(t);
    assert_true(n > 0);
    assert_int_equal(n_enc, n);
    assert_int_equal(n_rt, n_rt_cases);
}

static const fixture k_fixtures[] = {
    {"trained-qwen3moe", "trained-qwen3moe/model-q4_k_m.gguf",
     "trained-qwen3moe/tokenizer-cases.jsonl", 0},
    {"qwen3moe", "qwen3moe/model-bf16.gguf", "qwen3moe/tokenizer-cases.jsonl", 1},
    {"deepseek-v3", "deepseek-v3/model-bf16.gguf", "deepseek-v3/tokenizer-cases.jsonl", 1},
    {"gpt-oss", "gpt-oss/model-bf16.gguf", "gpt-oss/tokenizer-cases.jsonl", 1},
    {"glm4moe", "glm4moe/model-bf16.gguf", "glm4moe/tokenizer-cases.jsonl", 1},
    {"mixtral", "mixtral/model-bf16.gguf", "mixtral/tokenizer-cases.jsonl", 1},
    {"qwen3next", "qwen3next/model-bf16.gguf", "qwen3next/tokenizer-cases.jsonl", 1},
    {"minimax-m2", "minimax-m2/model-bf16.gguf", "minimax-m2/tokenizer-cases.jsonl", 1},
};

int main(void)
{
    enum { N = sizeof k_fixtures / sizeof *k_fixtures };
    struct CMUnitTest tests[N];
    for (size_t i = 0; i < N; i++) {
        struct CMUnitTest u = {k_fixtures[i].name, run_fixture, NULL, NULL,
                               (void *)&k_fixtures[i]};
        tests[i] = u;
    }
    return gm_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
