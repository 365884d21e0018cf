/* Test helper shared by the model tests that write their own models: runs gmlx-gen's argument
 * parser and writer in-process (the generator's library), failing the test on any error. */
#ifndef GMLX_TESTS_GENMODEL_H
#define GMLX_TESTS_GENMODEL_H

/* Writes the model gmlx-gen's arguments describe (argv without the program name). */
void gm_test_gen_model(int argc, char **argv);

#endif
