/* The trained fixture model answers its task battery through `gmlx run` (greedy, at most 48
 * tokens, stop at an end-of-generation token) at the reference's accuracy per family, within 3
 * points. The reference is transformers in float32 (reference-accuracy.json); llama.cpp scores
 * 399/400 on both files.
 * Usage: test_battery GMLX_BINARY (run by ctest). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <fcntl.h>
#include <jansson.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

extern char **environ;
static const char *g_gmlx;

/* Runs gmlx run on prompt_path; returns its stdout (malloc'd) or NULL when it failed. */
static char *run_gmlx(const char *model, const char *prompt_path)
{
    char out_path[512];
    snprintf(out_path, sizeof out_path, "%s/out.txt", gm_test_tmpdir());
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    /* the battery's prompts are written in the format each task was trained on: sent as they are */
    char *argv[] = {(char *)g_gmlx, "run", (char *)model, "--raw", "-f", (char *)prompt_path, "--temp", "0",
                    "-n", "48", "-t", "1", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, g_gmlx, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return NULL;
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return NULL;
    size_t len;
    char *txt = gm_read_file(out_path, &len);
    if (txt)
        txt[len] = '\0';
    return txt;
}

static char *strip(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static void check_model(const char *model)
{
    json_error_t jerr;
    json_t *acc = json_load_file(gm_fixture("trained-qwen3moe/reference-accuracy.json"), 0, &jerr);
    assert_non_null(acc);
    json_t *per = json_object_get(json_object_get(acc, "top4_default"), "per_family");
    assert_non_null(per);
    FILE *f = fopen(gm_fixture("trained-qwen3moe/battery.jsonl"), "r");
    assert_non_null(f);
    char prompt_path[512];
    snprintf(prompt_path, sizeof prompt_path, "%s/prompt.txt", gm_test_tmpdir());
    json_t *correct = json_object(), *total = json_object();
    char line[8192];
    int n = 0, n_ok = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, &jerr);
        assert_non_null(j);
        const char *fam = json_string_value(json_object_get(j, "family"));
        const char *prompt = json_string_value(json_object_get(j, "prompt"));
        const char *answer = json_string_value(json_object_get(j, "answer"));
        assert_non_null(fam);
        assert_int_equal(gm_write_file(prompt_path, prompt, strlen(prompt)), 0);
        char *out = run_gmlx(model, prompt_path);
        if (!out)
            fail_msg("gmlx run failed on: %s", prompt);
        int ok = strcmp(strip(out), answer) == 0;
        free(out);
        json_object_set_new(total, fam, json_integer(json_integer_value(json_object_get(total, fam)) + 1));
        json_object_set_new(correct, fam, json_integer(json_integer_value(json_object_get(correct, fam)) + ok));
        n++;
        n_ok += ok;
        json_decref(j);
    }
    fclose(f);
    print_message("%s: %d/%d correct\n", model, n_ok, n);
    assert_int_equal(n, 400);
    const char *fam;
    json_t *v;
    json_object_foreach(total, fam, v)
    {
        double mine = (double)json_integer_value(json_object_get(correct, fam)) / (double)json_integer_value(v);
        double want = json_real_value(json_object_get(json_object_get(per, fam), "accuracy"));
        if (!json_is_real(json_object_get(json_object_get(per, fam), "accuracy")))
            want = (double)json_integer_value(json_object_get(json_object_get(per, fam), "accuracy"));
        print_message("  %-8s %.2f (reference %.2f)\n", fam, mine, want);
        assert_true(mine >= want - 0.03);
    }
    json_decref(correct);
    json_decref(total);
    json_decref(acc);
}

static void test_battery_q4_k_m(void **state)
{
    (void)state;
    char p[4096];
    snprintf(p, sizeof p, "%s", gm_fixture("trained-qwen3moe/model-q4_k_m.gguf"));
    check_model(p);
}

static void test_battery_bf16(void **state)
{
    (void)state;
    const char *p = gm_fixture_cached("trained-qwen3moe/model-bf16.gguf");
    if (!p) {
        if (gm_test_in_ci())
            fail_msg("trained-qwen3moe/model-bf16.gguf missing: run scripts/fetch-fixtures.sh");
        gm_test_skipped("trained-qwen3moe/model-bf16.gguf");
        skip();
    }
    char path[4096];
    snprintf(path, sizeof path, "%s", p);
    check_model(path);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_battery GMLX_BINARY\n");
        return 2;
    }
    g_gmlx = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_battery_q4_k_m),
        cmocka_unit_test(test_battery_bf16),
    };
    return gm_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
