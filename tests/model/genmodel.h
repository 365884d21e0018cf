/* Test helper shared by the model tests that write their own models: runs gmlx-gen's argument
 * parser and writer in-process (the generator's library), failing the test on any error. */
#ifndef GMLX_TESTS_GENMODEL_H
#define GMLX_TESTS_GENMODEL_H

#include <stddef.h>

#include "gmlx.h"

/* Writes the model gmlx-gen's arguments describe (argv without the program name). */
void gm_test_gen_model(int argc, char **argv);

/* Writes a generated model of arch (vocabulary 300) with the shape options (NULL-ended) and
 * seed to name.gguf in the test directory; its path in model. */
void gm_test_gen_arch(char *model, size_t len, const char *name, const char *arch, const char *seed,
                      const char *const *shape);

/* The tuning model tests load engines with (gm_engine_opts.tuning): the defaults, and the decode
 * arena gm_test_arena sets ("0.004" GiB as GMLX_DECODE_ARENA_GB takes it; NULL: the plan's). */
gm_tuning *gm_test_tuning(void);
void gm_test_arena(const char *gib);

#endif
