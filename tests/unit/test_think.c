/* Tests of the reasoning splitter (gmlx.h "thinking"): the families' markers are dropped and
 * the text between them tagged reasoning or answer, whatever way the text is cut into pieces
 * (every split point of each sample is tried, so a marker cut across two pieces is held back
 * and recognised); a prompt that leaves a block open starts generation inside it. The samples
 * are written from the formats the templates of tests/fixtures/templates produce. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gmlx.h"

typedef struct spans {
    char reasoning[512], answer[512];
    size_t nr, na;
} spans;

static void on_span(void *user, bool reasoning, const char *text, size_t len)
{
    spans *s = user;
    char *dst = reasoning ? s->reasoning : s->answer;
    size_t *n = reasoning ? &s->nr : &s->na;
    assert_true(*n + len < sizeof s->reasoning);
    memcpy(dst + *n, text, len);
    *n += len;
    dst[*n] = '\0';
}

/* Feeds text to a splitter in two pieces cut at every point, and in one byte at a time; each way
 * must give want_r and want_a. */
static void check(gm_think_style style, bool inside, const char *text, const char *want_r, const char *want_a)
{
    const size_t n = strlen(text);
    for (size_t cut = 0; cut <= n + 1; cut++) {
        gm_think *t = NULL;
        gm_err err = {0};
        assert_int_equal(gm_think_create(&t, style, inside, &err), 0);
        spans s = {0};
        if (cut <= n) {
            gm_think_push(t, text, cut, on_span, &s);
            gm_think_push(t, text + cut, n - cut, on_span, &s);
        } else {
            for (size_t i = 0; i < n; i++)
                gm_think_push(t, text + i, 1, on_span, &s);
        }
        gm_think_flush(t, on_span, &s);
        gm_think_free(t);
        if (strcmp(s.reasoning, want_r) != 0 || strcmp(s.answer, want_a) != 0)
            fail_msg("cut %zu of \"%s\": reasoning \"%s\" answer \"%s\", wanted \"%s\" / \"%s\"", cut, text,
                     s.reasoning, s.answer, want_r, want_a);
    }
}

static void test_tags(void **state)
{
    (void)state;
    check(GM_THINK_TAGS, false, "<think>\nI add.\n</think>\n\n42", "\nI add.\n", "\n\n42");
    /* the template opened the block (Qwen3 with enable_thinking, DeepSeek-R1) */
    check(GM_THINK_TAGS, true, "I add.\n</think>\n\n42", "I add.\n", "\n\n42");
    check(GM_THINK_TAGS, false, "no thinking at all", "", "no thinking at all");
    /* Hy3, MiniMax-M3, Kimi-K3 */
    check(GM_THINK_TAGS, false, "<think:opensource>hmm</think:opensource>yes", "hmm", "yes");
    check(GM_THINK_TAGS, false, "<mm:think>hmm</mm:think>yes", "hmm", "yes");
    check(GM_THINK_TAGS, false, "<|open|>think<|sep|>hmm<|close|>think<|sep|><|open|>response<|sep|>yes<|close|>response<|sep|>",
          "hmm", "yes");
    /* text that only looks like the start of a marker is text */
    check(GM_THINK_TAGS, false, "a <b> and <thin", "", "a <b> and <thin");
    check(GM_THINK_NONE, false, "<think>kept</think>", "", "<think>kept</think>");
}

static void test_harmony(void **state)
{
    (void)state;
    /* gpt-oss after its generation prompt "<|start|>assistant": the header first */
    check(GM_THINK_HARMONY, true,
          "<|channel|>analysis<|message|>User asks 2+2.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>",
          "User asks 2+2.", "4");
    check(GM_THINK_HARMONY, true, "<|channel|>commentary to=functions.get<|constrain|>json<|message|>{\"a\":1}<|call|>",
          "{\"a\":1}", "");
    check(GM_THINK_HARMONY, true, "<|channel|>final<|message|>only the answer", "", "only the answer");
    /* a raw prompt without a header: text is the answer until a header comes */
    check(GM_THINK_HARMONY, false, "plain", "", "plain");
}

static void test_prompt_open(void **state)
{
    (void)state;
    const char *q3 = "<|im_start|>assistant\n<think>\n";
    assert_true(gm_think_prompt_open(GM_THINK_TAGS, q3, strlen(q3)));
    const char *q3off = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_false(gm_think_prompt_open(GM_THINK_TAGS, q3off, strlen(q3off)));
    const char *oss = "<|start|>user<|message|>hi<|end|><|start|>assistant";
    assert_true(gm_think_prompt_open(GM_THINK_HARMONY, oss, strlen(oss)));
    const char *oss_done = "<|start|>assistant<|channel|>final<|message|>x";
    assert_false(gm_think_prompt_open(GM_THINK_HARMONY, oss_done, strlen(oss_done)));
    assert_false(gm_think_prompt_open(GM_THINK_NONE, q3, strlen(q3)));
    gm_think *t = NULL;
    gm_err err = {0};
    assert_int_equal(gm_think_create(&t, (gm_think_style)9, false, &err), GM_EINVAL);
    assert_null(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tags),
        cmocka_unit_test(test_harmony),
        cmocka_unit_test(test_prompt_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
