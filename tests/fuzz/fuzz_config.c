/* fuzz_config: libFuzzer target of the configuration file reader (src/config). The input is a
 * gmlx.yaml text; when it loads, every entry is resolved into flags and edited (an entry added,
 * one re-marked and one removed) in memory, so the key table, the layering and the line
 * splicing all see hostile input. Any crash, leak or sanitizer report is a finding. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *no_env(const char *name)
{
    (void)name;
    return "/x";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gm_config_opts o = {.lookup_env = no_env};
    gm_config *c = NULL;
    gm_err err = {0};
    if (gm_config_parse(&c, "fuzz.yaml", (const char *)data, size, &o, &err) != 0)
        return 0;
    for (size_t i = 0; i < gm_config_n_models(c); i++) {
        gm_config_resolved r;
        gm_err e2 = {0};
        char name[600];
        snprintf(name, sizeof name, "%s@p", gm_config_model_at(c, i)->id);
        if (gm_config_resolve(c, gm_config_model_at(c, i)->id, &r, &e2) == 0)
            gm_config_resolved_free(&r);
        gm_err e3 = {0};
        if (gm_config_resolve(c, name, &r, &e3) == 0)
            gm_config_resolved_free(&r);
    }
    /* the editor on the same text, through a file in memory: write it to a temporary file */
    char path[] = "/tmp/gmlx-fuzz-config-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        FILE *f = fdopen(fd, "wb");
        if (f && fwrite(data, 1, size, f) == size && fclose(f) == 0) {
            gm_config_edit *e = NULL;
            gm_err ee = {0};
            if (gm_config_edit_open(&e, path, false, &o, &ee) == 0) {
                gm_err x = {0};
                gm_config_edit_add_model(e, "fuzz-new", "a/b.gguf", true, "added", &x);
                if (gm_config_n_models(gm_config_edit_config(e)) > 1) {
                    const char *id = gm_config_model_at(gm_config_edit_config(e), 1)->id;
                    char keep[512];
                    snprintf(keep, sizeof keep, "%s", id);
                    gm_err y = {0}, z = {0};
                    gm_config_edit_set_stream_experts(e, keep, true, &y);
                    gm_config_edit_remove_model(e, keep, &z);
                }
                gm_err w = {0};
                gm_config_edit_add_model_dir(e, "/models", &w);
                gm_config_edit_close(e); /* never committed */
            }
        } else if (f == NULL) {
            close(fd);
        }
        unlink(path);
    }
    gm_config_free(c);
    return 0;
}
