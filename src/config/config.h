/* config: the configuration file (gmlx.yaml). The public API is the "configuration file"
 * section of gmlx.h; this header is what the module's files share.
 *
 * Owns: the key table (keys.c: every key, its type and range, the flag and option field it
 * stands for, the features it waits for), reading and checking a file with libyaml (load.c:
 * errors as FILE:LINE:COL), resolving a name through the layers into flags (resolve.c), and
 * editing the file's text in place under a lock with an atomic replace (edit.c).
 * Threads: a gm_config is immutable once loaded; a gm_config_edit belongs to one thread.
 */
#ifndef GM_CONFIG_CONFIG_H
#define GM_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gmlx.h"

/* How a key's value is checked and normalised. */
typedef enum cfg_type {
    CT_BOOL,    /* true/false (YAML 1.1 spellings: yes/no/on/off too) */
    CT_INT,     /* a whole number in [lo, hi] */
    CT_NUM,     /* a number in lo..hi (open ends per lo_open/hi_open) */
    CT_ENUM,    /* one of the words in enums ("a|b|c") */
    CT_STR,     /* a string */
    CT_STRS,    /* a string or a list of strings */
    CT_STREAM,  /* stream: experts|cpu|false and their spellings */
    CT_THINK,   /* thinking: on|off|adaptive (bools too) */
    CT_MAP,     /* a mapping kept as it is (chat_template_kwargs, cache) */
    CT_ANY,     /* anything (a section of a feature gmlx does not have) */
} cfg_type;

typedef struct cfg_key {
    gm_config_key pub;
    cfg_type type;
    double lo, hi;
    bool lo_open, hi_open;
    bool nullable;        /* null is a value (counts as unset) */
    const char *enums;    /* CT_ENUM: "a|b|c" */
    const char *alias;    /* another spelling of the key ("temp") */
    /* flags a value becomes: CT_BOOL true/false, CT_THINK off, CT_STREAM experts/cpu */
    const char *flag_on, *flag_off;
} cfg_key;

/* Rows, grouped by section in this order: model, settings, sampling, load, server. */
extern const cfg_key gm_cfg_keys[];
extern const size_t gm_cfg_n_keys;
/* The row of section.name (or its alias), or -1. */
int gm_cfg_key_find(const char *section, const char *name);

/* One layer of settings: a value per key (canonical text; NULL: unset there). */
typedef struct cfg_layer {
    const char **v;       /* gm_cfg_n_keys entries */
} cfg_layer;

typedef struct cfg_profile {
    const char *name;
    const char *extends;  /* NULL: none */
    cfg_layer set;
    uint32_t line, col;
} cfg_profile;

typedef struct cfg_entry_profile {
    const char *name;
    cfg_layer set;
} cfg_entry_profile;

typedef struct cfg_model {
    gm_config_model pub;
    const char *path;     /* pub.path with ~ and $VAR expanded */
    const char *profile;  /* NULL: none */
    cfg_layer own;        /* the entry's own keys (model section) */
    cfg_layer over;       /* overrides: */
    cfg_entry_profile *profiles;
    size_t n_profiles;
    uint32_t end_line;    /* last line of the entry's block (1-based) */
    uint32_t key_col;     /* column of the id (0-based) */
} cfg_model;

typedef struct cfg_alias {
    const char *name, *id, *profile; /* profile may be NULL */
} cfg_alias;

typedef struct cfg_rule {
    const char *match, *profile;
} cfg_rule;

/* Where a top-level or second-level block sits in the text, for the editor. */
typedef struct cfg_span {
    bool present;
    bool flow;            /* written in flow style ({...} or [...]) */
    uint32_t key_line;    /* 1-based line of the key */
    uint32_t key_col;     /* 0-based column of the key */
    uint32_t end_line;    /* last line of its block */
    uint32_t child_col;   /* column of its first child key/item, 0 when empty */
} cfg_span;

struct gm_config {
    char *file;
    char *dir;            /* the file's directory */
    /* every string below points into this arena of blocks */
    struct arena_blk *arena;
    cfg_model *models;
    size_t n_models;
    cfg_profile *profiles;
    size_t n_profiles;
    cfg_alias *aliases;
    size_t n_aliases;
    cfg_rule *rules;
    size_t n_rules;
    const char **model_dirs;
    size_t n_model_dirs;
    const char *default_profile; /* server.defaults.profile */
    cfg_layer server;            /* server: scalar keys */
    /* for the editor */
    cfg_span span_models, span_server, span_model_dirs;
    bool model_dirs_is_scalar;
};

/* Arena strings (NULL on out of memory). */
char *gm_cfg_strdup(gm_config *c, const char *s, size_t n);
void *gm_cfg_alloc(gm_config *c, size_t n);

#endif
