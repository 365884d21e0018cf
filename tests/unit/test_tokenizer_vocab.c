/* Tokenizer against llama.cpp's vocabulary test suites (fetched into .fixtures/tokenizers/):
 * ggml-vocab-<name>.gguf holds a vocabulary, .inp the test strings (separated by lines
 * "__ggml_vocab_test__"), .out one line of expected ids per string (no BOS). The expected ids
 * come from the Hugging Face tokenizers, not from gmlx. Each vocabulary's pass count is
 * printed; every listed vocabulary must pass every string. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "text/tokenizer.h"

static const char *const k_sep = "\n__ggml_vocab_test__\n";

/* Next test string of the .inp buffer at *pos, or NULL at the end. */
static const char *next_case(const char *buf, size_t len, size_t *pos, size_t *out_len)
{
    if (*pos >= len)
        return NULL;
    const char *s = buf + *pos;
    const char *e = memmem(s, len - *pos, k_sep, strlen(k_sep));
    if (!e)
        return NULL; /* the file ends with a separator: no text after it is a case */
    *out_len = (size_t)(e - s);
    *pos += *out_len + strlen(k_sep);
    return s;
}

static size_t parse_ids(const char *line, int32_t *ids, size_t cap)
{
    size_t n = 0;
    const char *p = line;
    while (*p && *p != '\n') {
        while (*p == ' ')
            p++;
        if (!*p || *p == '\n')
            break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (n < cap)
            ids[n] = (int32_t)v;
        n++;
        p = end;
    }
    return n;
}

static void run_vocab(void **state)
{
    const char *name = *state;
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/ggml-vocab-%s.gguf", name);
    const char *p = gm_fixture_cached(rel);
    if (!p) {
        if (gm_test_in_ci())
            fail_msg("fixture %s missing (run scripts/fetch-fixtures.sh)", rel);
        gm_test_skipped(rel);
        skip();
    }
    char gpath[4096], ipath[4200], opath[4200];
    snprintf(gpath, sizeof gpath, "%s", p);
    snprintf(ipath, sizeof ipath, "%s.inp", gpath);
    snprintf(opath, sizeof opath, "%s.out", gpath);

    gm_err err = {0};
    gm_gguf *g = NULL;
    assert_int_equal(gm_gguf_open(&g, gpath, &err), 0);
    gm_tokenizer *t = NULL;
    int rc = gm_tokenizer_load(&t, g, &err);
    if (rc)
        fail_msg("load %s: %s", name, err.msg);
    gm_gguf_close(g); /* the tokenizer keeps its own copy */

    size_t ilen = 0, olen = 0;
    char *inp = gm_read_file(ipath, &ilen);
    char *outp = gm_read_file(opath, &olen);
    assert_non_null(inp);
    assert_non_null(outp);
    outp[olen] = '\0';

    size_t ipos = 0, clen;
    const char *line = outp;
    int n_cases = 0, n_pass = 0;
    const char *c;
    while ((c = next_case(inp, ilen, &ipos, &clen)) != NULL) {
        assert_true(*line != '\0' || clen == 0);
        int32_t want[1024], got[1024];
        size_t nw = parse_ids(line, want, 1024), ng = 0;
        assert_true(nw <= 1024);
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : line + strlen(line);
        n_cases++;
        rc = gm_tokenizer_encode(t, c, clen, 0, got, 1024, &ng, &err);
        if (rc)
            fail_msg("%s case %d: encode failed: %s", name, n_cases, err.msg);
        if (ng == nw && memcmp(got, want, nw * sizeof *got) == 0) {
            n_pass++;
        } else {
            print_message("%s case %d '%.*s': got", name, n_cases, (int)(clen > 60 ? 60 : clen), c);
            for (size_t i = 0; i < ng && i < 40; i++)
                print_message(" %d", got[i]);
            print_message("\n   want");
            for (size_t i = 0; i < nw && i < 40; i++)
                print_message(" %d", want[i]);
            print_message("\n");
        }
    }
    print_message("vocab %-14s %s: %d/%d strings match\n", name,
                  gm_tokenizer_get_info(t)->kind == GM_TOKENIZER_KIND_BPE ? "BPE" : "SPM", n_pass,
                  n_cases);
    free(inp);
    free(outp);
    gm_tokenizer_free(t);
    assert_true(n_cases > 0);
    assert_int_equal(n_pass, n_cases);
}

int main(void)
{
    if (!gm_fixture_cached("tokenizers")) {
        if (gm_test_in_ci()) {
            fprintf(stderr, "test_tokenizer_vocab: .fixtures/tokenizers missing under CI\n");
            return 1;
        }
        fprintf(stderr, "test_tokenizer_vocab: .fixtures/tokenizers not fetched; skipping\n");
        return GM_TEST_SKIP;
    }
    static const char *const names[] = {"gpt-2", "deepseek-llm", "falcon", "starcoder",
                                        "mpt", "refact", "llama-spm"};
    struct CMUnitTest tests[sizeof names / sizeof *names];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        struct CMUnitTest u = {names[i], run_vocab, NULL, NULL, (void *)names[i]};
        tests[i] = u;
    }
    return gm_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
