/* cli/config: the configuration file for the commands: which file (--config, GMLX_CONFIG, the
 * search), its warnings on stderr, and `gmlx run ID` / `gmlx chat ID`: a model name that is not
 * a file resolved to its entry, the entry's settings put before the user's flags. Uses only the
 * public API. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char *lookup_env(const char *name) { return getenv(name); }

static void warn_line(void *user, const char *line)
{
    (void)user;
    fprintf(stderr, "%s\n", line);
}

gm_config_opts gm_cli_config_opts(void)
{
    return (gm_config_opts){.warn = warn_line, .lookup_env = lookup_env};
}

char *gm_cli_config_path(const char *explicit_path, bool *from_search)
{
    if (from_search)
        *from_search = false;
    if (explicit_path)
        return strdup(explicit_path);
    const char *env = getenv("GMLX_CONFIG");
    if (env && *env)
        return strdup(env);
    char *cand[3];
    size_t n = gm_config_search_paths(getenv("HOME"), getenv("XDG_CONFIG_HOME"), cand);
    char *found = NULL;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (!found && stat(cand[i], &st) == 0)
            found = cand[i];
        else
            free(cand[i]);
    }
    if (found && from_search)
        *from_search = true;
    return found;
}

char *gm_cli_config_default_write_path(void)
{
    char *cand[3];
    size_t n = gm_config_search_paths(getenv("HOME"), getenv("XDG_CONFIG_HOME"), cand);
    char *r = n > 1 ? cand[1] : NULL; /* CONFIG_HOME/gmlx/gmlx.yaml */
    for (size_t i = 0; i < n; i++)
        if (cand[i] != r)
            free(cand[i]);
    return r ? r : strdup("gmlx.yaml");
}

gm_config *gm_cli_config_open(const char *cmd, const char *explicit_path, bool required, int *rc)
{
    *rc = GM_EXIT_OK;
    bool searched;
    char *path = gm_cli_config_path(explicit_path, &searched);
    if (!path) {
        if (required) {
            gm_cli_error(cmd, "no configuration file: looked for ./gmlx.yaml, %s and ~/.gmlx.yaml "
                              "(gmlx init writes one; --config FILE or GMLX_CONFIG names another)",
                         getenv("XDG_CONFIG_HOME") && getenv("XDG_CONFIG_HOME")[0] == '/'
                             ? "$XDG_CONFIG_HOME/gmlx/gmlx.yaml"
                             : "~/.config/gmlx/gmlx.yaml");
            *rc = GM_EXIT_USAGE;
        }
        return NULL;
    }
    gm_config *c = NULL;
    gm_err err = {0};
    gm_config_opts o = gm_cli_config_opts();
    if (gm_config_load(&c, path, &o, &err) != 0) {
        gm_cli_error(cmd, "%s", err.msg);
        *rc = GM_EXIT_USAGE;
    }
    free(path);
    return c;
}

/* A model argument that names a config entry rather than a file: not an existing path, no '/',
 * not ending in .gguf. */
static bool looks_like_name(const char *a)
{
    struct stat st;
    size_t n = strlen(a);
    return n && !strchr(a, '/') && !(n >= 5 && strcasecmp(a + n - 5, ".gguf") == 0) && stat(a, &st) != 0;
}

int gm_cli_config_rerun(const char *cmd, int argc, char **argv, const char *model, const char *config_path,
                        int (*fn)(int, char **))
{
    if (!model || !looks_like_name(model))
        return -1;
    int rc;
    gm_config *c = gm_cli_config_open(cmd, config_path, false, &rc);
    if (!c) {
        if (rc != GM_EXIT_OK)
            return rc;
        gm_cli_error(cmd, "%s: no such file, and there is no configuration file to look it up in (gmlx init "
                          "writes one)", model);
        return GM_EXIT_USAGE;
    }
    gm_config_resolved r;
    gm_err err = {0};
    if (gm_config_resolve(c, model, &r, &err) != 0) {
        gm_cli_error(cmd, "%s: no such file, and %s", model, err.msg);
        gm_config_free(c);
        return GM_EXIT_USAGE;
    }
    char *path = NULL;
    if (gm_config_model_path(c, r.model, &path, &err) != 0) {
        gm_cli_error(cmd, "%s", err.msg);
        free(path);
        gm_config_resolved_free(&r);
        gm_config_free(c);
        return GM_EXIT_USAGE;
    }
    fprintf(stderr, "[config] '%s' -> %s  (from %s)\n", model, path, gm_config_file(c));
    /* argv: the command, the entry's flags the user did not type, then the user's arguments with
     * the name replaced by the file */
    char **nv = calloc((size_t)argc + r.n_args + 1, sizeof *nv);
    int nc = 0;
    if (!nv) {
        gm_cli_error(cmd, "out of memory");
        rc = GM_EXIT_USAGE;
        goto done;
    }
    nv[nc++] = argv[0];
    char applied[1024];
    size_t pos = 0;
    applied[0] = '\0';
    for (size_t i = 0; i < r.n_args;) {
        uint32_t k = r.arg_key[i];
        size_t j = i;
        while (j < r.n_args && r.arg_key[j] == k)
            j++;
        const gm_config_key *key = gm_config_key_at(k);
        if (!gm_config_flag_typed(key, argc - 1, argv + 1)) {
            for (size_t x = i; x < j; x++)
                nv[nc++] = r.args[x];
            if (pos < sizeof applied)
                pos += (size_t)snprintf(applied + pos, sizeof applied - pos, "%s%s", pos ? ", " : "", key->name);
        }
        i = j;
    }
    for (int i = 1; i < argc; i++)
        nv[nc++] = argv[i] == model ? path : argv[i];
    nv[nc] = NULL;
    if (applied[0] && r.profile)
        fprintf(stderr, "[config] applied: %s  (profile %s)\n", applied, r.profile);
    else if (applied[0])
        fprintf(stderr, "[config] applied: %s\n", applied);
    rc = fn(nc, nv);
done:
    free(nv);
    free(path);
    gm_config_resolved_free(&r);
    gm_config_free(c);
    return rc;
}
