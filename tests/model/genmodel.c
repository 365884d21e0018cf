#include "genmodel.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "gen.h"
#include "testutil.h"

void gm_test_gen_model(int argc, char **argv)
{
    gm_gen_opts go;
    gm_gen_opts_init(&go);
    gm_err err = {0};
    assert_int_equal(gm_gen_parse_args(&go, argc, argv, &err), GM_GEN_ARGS_RUN);
    if (gm_gen_run(&go, NULL, &err) != 0)
        fail_msg("gen: %s", err.msg);
}

void gm_test_gen_arch(char *model, size_t len, const char *name, const char *arch, const char *seed,
                      const char *const *shape)
{
    snprintf(model, len, "%s/%s.gguf", gm_test_tmpdir(), name);
    char *argv[48];
    int argc = 0;
    argv[argc++] = "--arch";
    argv[argc++] = (char *)arch;
    for (; *shape && argc < 36; shape++)
        argv[argc++] = (char *)*shape;
    argv[argc++] = "--vocab";
    argv[argc++] = "300";
    argv[argc++] = "--seed";
    argv[argc++] = (char *)seed;
    argv[argc++] = "-q";
    argv[argc++] = "-o";
    argv[argc++] = model;
    gm_test_gen_model(argc, argv);
}

static gm_tuning g_tuning;
static int g_tuning_set;

gm_tuning *gm_test_tuning(void)
{
    if (!g_tuning_set) {
        gm_tuning_default(&g_tuning);
        g_tuning_set = 1;
    }
    return &g_tuning;
}

void gm_test_arena(const char *gib)
{
    gm_test_tuning()->arena_gb = gib ? atof(gib) : -1;
}
