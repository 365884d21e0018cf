#include "genmodel.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gen.h"

void gm_test_gen_model(int argc, char **argv)
{
    gm_gen_opts go;
    gm_gen_opts_init(&go);
    gm_err err = {0};
    assert_int_equal(gm_gen_parse_args(&go, argc, argv, &err), GM_GEN_ARGS_RUN);
    if (gm_gen_run(&go, NULL, &err) != 0)
        fail_msg("gen: %s", err.msg);
}
