/* gmlx init and gmlx sync-models: write a configuration file from the model files of folders,
 * and keep its models: true to the folders (new files added, gone ones removed, stream: experts
 * marked where the plan says the experts do not fit in memory and dropped where they now do).
 * Both edit the file's text through the config editor, so comments and order survive. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "discover.h"

static void init_help(FILE *f)
{
    fprintf(f, "usage: gmlx init [DIR...] [--out FILE] [--force] [--no-recursive]\n\n"
               "Writes a starter configuration file with the models found in the folders: every\n"
               "*.gguf (the first part of a split set), partial downloads and other files skipped.\n"
               "An entry whose experts do not fit in memory on this machine gets stream: experts\n"
               "(the streaming plan's verdict, as gmlx validate prints it). The folders become\n"
               "server.model_dirs, and entries name their files relative to them.\n\n"
               "options:\n"
               "  --out FILE      where to write (default $XDG_CONFIG_HOME/gmlx/gmlx.yaml, else\n"
               "                  ~/.config/gmlx/gmlx.yaml)\n"
               "  --force         replace an existing file\n"
               "  --no-recursive  scan only the folders themselves, not their subfolders\n"
               "  -h, --help      this help\n\n"
               "exit status: 0 written, 1 the file exists (use --force), 2 bad usage or a write error.\n");
}

static void sync_help(FILE *f)
{
    fprintf(f, "usage: gmlx sync-models [DIR...] [--config FILE] [--dry-run] [--no-recursive]\n\n"
               "Brings the configuration file's models: in line with the model folders\n"
               "(server.model_dirs, and the DIRs given, which are added to it):\n"
               "  add     a model file no entry names (at the top of models:)\n"
               "  remove  an entry whose file is gone\n"
               "  keep    an entry that cannot be checked now (a model_dirs folder is missing, e.g.\n"
               "          an unmounted disk), unchanged\n"
               "  update  stream: experts added where the plan says the experts do not fit in\n"
               "          memory on this machine, dropped where they now fit\n"
               "The file's comments, order and formatting survive; the file is replaced atomically.\n\n"
               "options:\n"
               "  --config FILE   the file (default: the one gmlx finds, see gmlx run --help)\n"
               "  --dry-run       print the changes without writing them\n"
               "  --no-recursive  scan only the folders themselves\n"
               "  -h, --help      this help\n\n"
               "exit status: 0 in sync or updated, 2 bad usage, no file, or a write error.\n");
}

static const char k_starter[] =
    "# gmlx configuration (docs/config.md lists every key and the order settings apply in).\n"
    "# `gmlx run ID` and `gmlx chat ID` take the ids under models:; `gmlx sync-models` keeps\n"
    "# the list in line with the folders; `gmlx doctor` checks the file and this machine.\n"
    "server:\n"
    "%s"
    "  # host: 127.0.0.1\n"
    "  # port: 8080\n"
    "\n"
    "# profiles:\n"
    "#   precise:\n"
    "#     sampling: {temperature: 0.2, top_p: 0.9}\n"
    "#     load: {kv_bits: 8}\n"
    "\n"
    "models:\n";

static const char k_starter_tail[] =
    "\n"
    "# aliases:\n"
    "#   fast: ID\n";

/* Appends s to a growing string. */
static bool cat(char **buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    char *b = realloc(*buf, *len + n + 1);
    if (!b)
        return false;
    memcpy(b + *len, s, n + 1);
    *buf = b;
    *len += n;
    return true;
}

static bool yaml_plain(const char *s)
{
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("._/-+~", *p)))
            return false;
    return *s && *s != '-' && *s != '~';
}

static char *abs_path(const char *p)
{
    char real[PATH_MAX];
    return strdup(realpath(p, real) ? real : p);
}

int gm_cmd_init(int argc, char **argv)
{
    const char *out = NULL;
    bool force = false, recursive = true;
    const char *dirs[64];
    size_t n_dirs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (gm_cli_is_help(a)) {
            init_help(stdout);
            return GM_EXIT_OK;
        } else if (strcmp(a, "--out") == 0) {
            if (i + 1 >= argc) {
                gm_cli_error("init", "--out needs a file");
                return GM_EXIT_USAGE;
            }
            out = argv[++i];
        } else if (strcmp(a, "--force") == 0) {
            force = true;
        } else if (strcmp(a, "--no-recursive") == 0) {
            recursive = false;
        } else if (a[0] == '-' && a[1]) {
            gm_cli_error("init", "unknown option '%s' (see gmlx init --help)", a);
            return GM_EXIT_USAGE;
        } else if (n_dirs < 64) {
            struct stat st;
            if (stat(a, &st) != 0 || !S_ISDIR(st.st_mode)) {
                gm_cli_error("init", "%s: not a folder", a);
                return GM_EXIT_USAGE;
            }
            dirs[n_dirs++] = a;
        }
    }
    char *path = out ? strdup(out) : gm_cli_config_default_write_path();
    struct stat st;
    if (stat(path, &st) == 0 && !force) {
        fprintf(stderr, "gmlx init: refusing to overwrite %s (use --force)\n", path);
        free(path);
        return GM_EXIT_NO;
    }
    gm_found_list found = {0};
    char *abs[64];
    for (size_t i = 0; i < n_dirs; i++) {
        abs[i] = abs_path(dirs[i]);
        if (!abs[i] || !gm_discover_scan(abs[i], recursive, &found)) {
            for (size_t j = 0; j <= i; j++)
                free(abs[j]);
            gm_found_list_free(&found);
            free(path);
            return GM_EXIT_USAGE;
        }
    }
    char *text = NULL, dirs_yaml[16384] = "";
    size_t len = 0, pos = 0;
    if (n_dirs) {
        pos += (size_t)snprintf(dirs_yaml, sizeof dirs_yaml, "  model_dirs:\n");
        for (size_t i = 0; i < n_dirs && pos < sizeof dirs_yaml; i++)
            pos += (size_t)snprintf(dirs_yaml + pos, sizeof dirs_yaml - pos,
                                    yaml_plain(abs[i]) ? "    - %s\n" : "    - \"%s\"\n", abs[i]);
    } else {
        snprintf(dirs_yaml, sizeof dirs_yaml, "  # model_dirs:\n  #   - /srv/models\n");
    }
    char head[sizeof k_starter + sizeof dirs_yaml];
    snprintf(head, sizeof head, k_starter, dirs_yaml);
    int rc = GM_EXIT_OK;
    gm_err err = {0};
    gm_config_edit *e = NULL;
    gm_config_opts o = gm_cli_config_opts();
    size_t n_models = 0;
    if (!cat(&text, &len, head) || !cat(&text, &len, k_starter_tail) ||
        !gm_discover_assign_ids(&found, NULL, 0)) {
        gm_cli_error("init", "out of memory");
        rc = GM_EXIT_USAGE;
        goto done;
    }
    if (force)
        unlink(path); /* the new file starts from the starter text, not the old one */
    if (gm_config_edit_open(&e, path, true, &o, &err) != 0 || gm_config_edit_set_text(e, text, len, &err) != 0) {
        gm_cli_error("init", "%s", err.msg);
        rc = GM_EXIT_USAGE;
        goto done;
    }
    /* entries go in at the top of models:, so the last found first */
    for (size_t i = found.n; i-- > 0;) {
        gm_found *f = &found.v[i];
        if (!f->readable || !f->runnable)
            continue;
        if (gm_config_edit_add_model(e, f->id, f->rel, f->streams, NULL, &err) != 0) {
            gm_cli_error("init", "%s", err.msg);
            rc = GM_EXIT_USAGE;
            goto done;
        }
        n_models++;
    }
    if (gm_config_edit_commit(e, &err) != 0) {
        gm_cli_error("init", "%s", err.msg);
        rc = GM_EXIT_USAGE;
        goto done;
    }
    printf("wrote %s (%zu model(s) discovered)\n", path, n_models);
    for (size_t i = 0; i < found.n; i++) {
        gm_found *f = &found.v[i];
        if (f->readable && f->runnable)
            printf("  %-32s %s%s\n", f->id, f->rel, f->streams ? "  (stream: experts)" : "");
    }
    printf("\nnext: gmlx run ID%s%s (or gmlx chat ID)\n", out ? " --config " : "", out ? path : "");
done:
    gm_config_edit_close(e);
    for (size_t i = 0; i < n_dirs; i++)
        free(abs[i]);
    gm_found_list_free(&found);
    free(text);
    free(path);
    return rc;
}

/* ---- sync-models ---- */

typedef struct change {
    enum { CH_KEEP, CH_REMOVE, CH_ADD, CH_STREAM_ON, CH_STREAM_OFF } kind;
    char *id;
    char *detail;
    char *rel;
    bool streams; /* an added entry gets stream: experts */
} change;

/* fresh borrows found's paths but owns the ids given to it */
static void free_fresh(gm_found_list *fresh)
{
    for (size_t i = 0; i < fresh->n; i++)
        free(fresh->v[i].id);
    free(fresh->v);
    fresh->v = NULL;
    fresh->n = 0;
}

static bool dir_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int gm_cmd_sync_models(int argc, char **argv)
{
    const char *config = NULL;
    bool dry = false, recursive = true;
    const char *dirs[64];
    size_t n_dirs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (gm_cli_is_help(a)) {
            sync_help(stdout);
            return GM_EXIT_OK;
        } else if (strcmp(a, "--config") == 0) {
            if (i + 1 >= argc) {
                gm_cli_error("sync-models", "--config needs a file");
                return GM_EXIT_USAGE;
            }
            config = argv[++i];
        } else if (strcmp(a, "--dry-run") == 0) {
            dry = true;
        } else if (strcmp(a, "--no-recursive") == 0) {
            recursive = false;
        } else if (a[0] == '-' && a[1]) {
            gm_cli_error("sync-models", "unknown option '%s' (see gmlx sync-models --help)", a);
            return GM_EXIT_USAGE;
        } else if (n_dirs < 64) {
            if (!dir_exists(a)) {
                gm_cli_error("sync-models", "%s: not a folder", a);
                return GM_EXIT_USAGE;
            }
            dirs[n_dirs++] = a;
        }
    }
    bool searched;
    char *path = gm_cli_config_path(config, &searched);
    if (!path) {
        gm_cli_error("sync-models", "no configuration file in the default places; run `gmlx init DIR` first "
                                    "(or pass --config FILE)");
        return GM_EXIT_USAGE;
    }
    gm_err err = {0};
    gm_config_edit *e = NULL;
    gm_config_opts o = gm_cli_config_opts();
    if (gm_config_edit_open(&e, path, false, &o, &err) != 0) {
        gm_cli_error("sync-models", "%s", err.msg);
        free(path);
        return GM_EXIT_USAGE;
    }
    int rc = GM_EXIT_OK;
    gm_found_list found = {0};
    change *ch = NULL;
    size_t n_ch = 0, kept = 0, n_add = 0, n_rm = 0, n_up = 0;
    char **roots = NULL, **have = NULL;
    size_t n_roots = 0, n_have = 0;
    const gm_config *c = gm_config_edit_config(e);
    /* the roots: the file's model_dirs, then the DIRs given (added to it) */
    roots = calloc(gm_config_n_model_dirs(c) + n_dirs + 1, sizeof *roots);
    ch = calloc(gm_config_n_models(c) * 2 + 1, sizeof *ch);
    if (!roots || !ch)
        goto oom;
    for (size_t i = 0; i < gm_config_n_model_dirs(c); i++)
        if (!(roots[n_roots++] = abs_path(gm_config_model_dir(c, i))))
            goto oom;
    size_t first_new_root = n_roots;
    for (size_t i = 0; i < n_dirs; i++) {
        char *a = abs_path(dirs[i]);
        bool dup = false;
        for (size_t j = 0; a && j < n_roots; j++)
            dup |= strcmp(roots[j], a) == 0;
        if (!a)
            goto oom;
        if (dup)
            free(a);
        else
            roots[n_roots++] = a;
    }
    if (!n_roots) {
        gm_cli_error("sync-models", "%s defines no server.model_dirs and no DIR was given: nothing to scan", path);
        rc = GM_EXIT_USAGE;
        goto done;
    }
    bool missing_root = false;
    for (size_t i = 0; i < n_roots; i++)
        if (!dir_exists(roots[i])) {
            fprintf(stderr, "warning: model_dirs folder not on disk right now: %s - entries under it are kept "
                            "unverified\n", roots[i]);
            missing_root = true;
        }
    /* 1. the entries */
    if (!(have = calloc(gm_config_n_models(c) + 1, sizeof *have)))
        goto oom;
    for (size_t i = 0; i < gm_config_n_models(c); i++) {
        const gm_config_model *m = gm_config_model_at(c, i);
        char *p = NULL;
        gm_err perr = {0};
        int prc = gm_config_model_path(c, m, &p, &perr);
        if (prc == 0) {
            have[n_have++] = abs_path(p);
            gm_found f = {0};
            gm_discover_judge(p, &f);
            if (f.readable && f.runnable && f.streams && m->stream == GM_CONFIG_STREAM_UNSET)
                ch[n_ch++] = (change){CH_STREAM_ON, strdup(m->id),
                                      strdup("stream: experts - the experts do not fit in memory here"), NULL, false};
            else if (f.readable && f.runnable && !f.streams && !f.cannot_stream && m->stream == GM_CONFIG_STREAM_EXPERTS)
                ch[n_ch++] = (change){CH_STREAM_OFF, strdup(m->id),
                                      strdup("stream: experts dropped - the experts fit in memory here"), NULL, false};
            kept++;
        } else if (prc == GM_ENOTFOUND && missing_root && m->path[0] != '/') {
            ch[n_ch++] = (change){CH_KEEP, strdup(m->id), strdup("unverified - a model_dirs folder is missing"), NULL, false};
        } else {
            char d[8300];
            snprintf(d, sizeof d, "%s - gone", p ? p : m->path);
            ch[n_ch++] = (change){CH_REMOVE, strdup(m->id), strdup(d), NULL, false};
        }
        free(p);
    }
    /* 2. the folders */
    for (size_t i = 0; i < n_roots; i++)
        if (dir_exists(roots[i]) && !gm_discover_scan(roots[i], recursive, &found))
            goto oom;
    const char **taken = calloc(gm_config_n_models(c) + 1, sizeof *taken);
    if (!taken)
        goto oom;
    for (size_t i = 0; i < gm_config_n_models(c); i++)
        taken[i] = gm_config_model_at(c, i)->id;
    /* files an entry already names are not new */
    gm_found_list fresh = {0};
    fresh.v = calloc(found.n + 1, sizeof *fresh.v);
    if (!fresh.v) {
        free(taken);
        goto oom;
    }
    for (size_t i = 0; i < found.n; i++) {
        gm_found *f = &found.v[i];
        char *a = abs_path(f->path);
        bool known = false;
        for (size_t j = 0; a && j < n_have; j++)
            known |= have[j] && strcmp(have[j], a) == 0;
        free(a);
        if (!known && f->readable && f->runnable)
            fresh.v[fresh.n++] = *f;
    }
    bool ids_ok = gm_discover_assign_ids(&fresh, taken, gm_config_n_models(c));
    free(taken);
    if (!ids_ok)
        goto oom;
    change *nch = realloc(ch, (n_ch + fresh.n + 1) * sizeof *ch);
    if (!nch)
        goto oom;
    ch = nch;
    for (size_t i = 0; i < fresh.n; i++)
        ch[n_ch++] = (change){CH_ADD, strdup(fresh.v[i].id), NULL, strdup(fresh.v[i].rel), fresh.v[i].streams};
    /* 3. the report */
    printf("\nsync-models %s:\n  kept:    %zu model(s)\n", path, kept);
    for (int kind = CH_KEEP; kind <= CH_STREAM_OFF; kind++)
        for (size_t i = 0; i < n_ch; i++) {
            change *x = &ch[i];
            if ((int)x->kind != kind && !(kind == CH_STREAM_ON && x->kind == CH_STREAM_OFF))
                continue;
            if (kind == CH_STREAM_OFF)
                continue;
            const char *label = x->kind == CH_KEEP     ? "keep:  "
                                : x->kind == CH_REMOVE ? "remove:"
                                : x->kind == CH_ADD    ? "add:   "
                                                       : "update:";
            printf("  %s  %s  (%s%s)\n", label, x->id, x->kind == CH_ADD ? x->rel : x->detail,
                   x->kind == CH_ADD && x->streams ? "; stream: experts" : "");
        }
    size_t n_real = 0;
    for (size_t i = 0; i < n_ch; i++)
        n_real += ch[i].kind != CH_KEEP;
    bool new_roots = first_new_root < n_roots;
    if (!n_real && !new_roots) {
        printf("  (already in sync)\n");
        free_fresh(&fresh);
        goto done;
    }
    if (dry) {
        printf("\n(dry run - no changes written)\n");
        free_fresh(&fresh);
        goto done;
    }
    for (size_t i = first_new_root; i < n_roots && rc == GM_EXIT_OK; i++)
        if (gm_config_edit_add_model_dir(e, roots[i], &err) != 0)
            rc = GM_EXIT_USAGE;
    for (size_t i = 0; i < n_ch && rc == GM_EXIT_OK; i++) {
        change *x = &ch[i];
        int r = 0;
        if (x->kind == CH_REMOVE)
            r = gm_config_edit_remove_model(e, x->id, &err), n_rm++;
        else if (x->kind == CH_STREAM_ON || x->kind == CH_STREAM_OFF)
            r = gm_config_edit_set_stream_experts(e, x->id, x->kind == CH_STREAM_ON, &err), n_up++;
        if (r != 0)
            rc = GM_EXIT_USAGE;
    }
    /* new entries at the top of models:, the last found first so they read in order */
    for (size_t i = fresh.n; i-- > 0 && rc == GM_EXIT_OK;) {
        if (gm_config_edit_add_model(e, fresh.v[i].id, fresh.v[i].rel, fresh.v[i].streams, NULL, &err) != 0)
            rc = GM_EXIT_USAGE;
        n_add++;
    }
    free_fresh(&fresh);
    if (rc == GM_EXIT_OK && gm_config_edit_commit(e, &err) != 0)
        rc = GM_EXIT_USAGE;
    if (rc != GM_EXIT_OK) {
        gm_cli_error("sync-models", "%s (the file is unchanged)", err.msg);
        goto done;
    }
    printf("\nupdated %s (+%zu / -%zu / ~%zu)\n", path, n_add, n_rm, n_up);
    goto done;
oom:
    gm_cli_error("sync-models", "out of memory");
    rc = GM_EXIT_USAGE;
done:
    for (size_t i = 0; i < n_ch; i++) {
        free(ch[i].id);
        free(ch[i].detail);
        free(ch[i].rel);
    }
    free(ch);
    for (size_t i = 0; i < n_roots; i++)
        free(roots[i]);
    free(roots);
    if (have) {
        for (size_t i = 0; i < n_have; i++)
            free(have[i]);
        free(have);
    }
    /* found owns the strings fresh borrowed */
    gm_found_list_free(&found);
    gm_config_edit_close(e);
    free(path);
    return rc;
}

/* ---- registering downloaded files (pull) ---- */

/* p relative to root when p is under it, else NULL. */
static const char *under_root(const char *p, const char *root)
{
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        n--;
    if (strncmp(p, root, n) == 0 && p[n] == '/')
        return p + n + 1;
    return NULL;
}

int gm_discover_register(const char *cmd, const char *config_path, char *const *files, size_t n_files)
{
    gm_err err = {0};
    gm_config_edit *e = NULL;
    gm_config_opts o = gm_cli_config_opts();
    if (gm_config_edit_open(&e, config_path, false, &o, &err) != 0) {
        gm_cli_error(cmd, "%s", err.msg);
        return GM_EXIT_USAGE;
    }
    const gm_config *c = gm_config_edit_config(e); /* stale once the text is edited */
    gm_found_list l = {0};
    const size_t n_roots = gm_config_n_model_dirs(c);
    char **roots = calloc(n_roots + 1, sizeof *roots);
    const char **taken = calloc(gm_config_n_models(c) + 1, sizeof *taken);
    l.v = calloc(n_files + 1, sizeof *l.v);
    int rc = GM_EXIT_OK;
    if (!roots || !taken || !l.v) {
        gm_cli_error(cmd, "out of memory");
        rc = GM_EXIT_USAGE;
        goto done;
    }
    for (size_t i = 0; i < n_roots; i++)
        roots[i] = abs_path(gm_config_model_dir(c, i));
    for (size_t i = 0; i < gm_config_n_models(c); i++)
        taken[i] = gm_config_model_at(c, i)->id;
    for (size_t i = 0; i < n_files; i++) {
        char *a = abs_path(files[i]);
        bool known = false;
        for (size_t j = 0; a && j < gm_config_n_models(c) && !known; j++) {
            const gm_config_model *m = gm_config_model_at(c, j);
            char *p = NULL;
            gm_err perr = {0};
            if (gm_config_model_path(c, m, &p, &perr) == 0) {
                char *pa = abs_path(p);
                if (pa && strcmp(pa, a) == 0) {
                    printf("already registered as %s in %s\n", m->id, config_path);
                    known = true;
                }
                free(pa);
            }
            free(p);
        }
        if (!a || known) {
            free(a);
            continue;
        }
        gm_found *f = &l.v[l.n];
        f->path = a;
        const char *rel = NULL;
        for (size_t j = 0; j < n_roots && !rel; j++)
            rel = roots[j] ? under_root(a, roots[j]) : NULL;
        f->rel = strdup(rel ? rel : a);
        gm_discover_judge(a, f);
        l.n++;
    }
    if (!gm_discover_assign_ids(&l, taken, gm_config_n_models(c))) {
        gm_cli_error(cmd, "out of memory");
        rc = GM_EXIT_USAGE;
        goto done;
    }
    size_t added = 0;
    for (size_t i = l.n; i-- > 0;) {
        if (gm_config_edit_add_model(e, l.v[i].id, l.v[i].rel, l.v[i].streams, NULL, &err) != 0) {
            gm_cli_error(cmd, "%s (the file is unchanged)", err.msg);
            rc = GM_EXIT_USAGE;
            goto done;
        }
        added++;
    }
    if (added && gm_config_edit_commit(e, &err) != 0) {
        gm_cli_error(cmd, "%s (the file is unchanged)", err.msg);
        rc = GM_EXIT_USAGE;
        goto done;
    }
    for (size_t i = 0; i < l.n; i++)
        printf("registered %s in %s%s\n", l.v[i].id, config_path, l.v[i].streams ? "  (stream: experts)" : "");
done:
    if (roots)
        for (size_t i = 0; i < n_roots; i++)
            free(roots[i]);
    free(roots);
    free(taken);
    gm_found_list_free(&l);
    gm_config_edit_close(e);
    return rc;
}
