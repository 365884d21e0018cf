/* cli/discover: the model files of folders, for init, sync-models and doctor. A file is a
 * *.gguf (any case), the first part of a split set (-00001-of-0000N.gguf) or a single file;
 * partial downloads (.part) and other files are skipped. Each is judged from its header alone:
 * family, whether gmlx runs it, and the streaming plan's verdict for this machine.
 * Threads: the main thread. */
#ifndef GM_CLI_DISCOVER_H
#define GM_CLI_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gmlx.h"

typedef struct gm_found {
    char *path;           /* as found (root joined with the relative path) */
    char *rel;            /* relative to the root it was found under */
    char *id;             /* the entry id it gets (unique among the found and the configured) */
    char arch[64];
    bool runnable;        /* a family gmlx runs, every tensor type supported */
    char why[512];        /* why not, when !runnable (or the header error) */
    bool readable;
    bool moe;
    bool streams;         /* the plan: the experts do not fit in memory, they stream */
    bool cannot_stream;   /* the plan's verdict: it cannot run here at all */
    uint64_t bytes;       /* every part */
    char verdict[512];    /* the plan's "=>" line */
} gm_found;

typedef struct gm_found_list {
    gm_found *v;
    size_t n;
} gm_found_list;

/* Scans root (recursively when recursive) and appends what it finds, sorted by path; progress on
 * stderr ([discover] lines). Returns false (after printing) only when out of memory. */
bool gm_discover_scan(const char *root, bool recursive, gm_found_list *out);
/* Judges one file (a configured entry's). */
void gm_discover_judge(const char *path, gm_found *f);
/* The same for a header already open (a remote or a stored one). */
void gm_discover_judge_file(const gm_file *file, gm_found *f);
/* Adds entries for files (absolute paths; each relative to a model_dirs folder when under one)
 * to the configuration file config_path, with ids as sync-models gives them and stream: experts
 * where the plan says so; files an entry already names are left. Prints "registered ID in FILE"
 * per entry. Returns an exit status (GM_EXIT_USAGE after printing an error). */
int gm_discover_register(const char *cmd, const char *config_path, char *const *files, size_t n_files);
/* Gives every found file an id unique against taken[0..n_taken) and each other. */
bool gm_discover_assign_ids(gm_found_list *l, const char *const *taken, size_t n_taken);
void gm_found_list_free(gm_found_list *l);
/* The id a file name gives (malloc'd): shard suffix and .gguf dropped, the quant tag kept in a
 * compact form (model-Q4_K_M.gguf -> model-q4), lowercase, runs of other characters as '-'. */
char *gm_discover_id(const char *file_name, bool full_codec);

#endif
