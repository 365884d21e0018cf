/* cli: the gmlx command-line tool. Owns argument parsing, printing and exit statuses; the
 * library never prints errors or exits. Exit statuses: 0 success, 1 the command's answer is
 * "no" (e.g. validate: the model cannot run), 2 bad usage, unreadable input or output that could
 * not be written. Every command sees only gmlx.h (and serve the server's server.h): the file
 * diagnostics (validate, inspect, doctor, init, sync-models, pull) read a file's header, plan and
 * this machine through its gm_file, gm_machine and gm_remote_model sections, and print the text
 * the library formats.
 * Threads: the main thread only (chat's Ctrl-C handler only calls gm_session_cancel). */
#ifndef GM_CLI_CLI_H
#define GM_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gmlx.h"

#define GM_EXIT_OK 0
#define GM_EXIT_NO 1
#define GM_EXIT_USAGE 2

typedef struct gm_cmd {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} gm_cmd;

int gm_cmd_validate(int argc, char **argv);
int gm_cmd_inspect(int argc, char **argv);
int gm_cmd_logits(int argc, char **argv);
int gm_cmd_bench(int argc, char **argv);
int gm_cmd_run(int argc, char **argv);
int gm_cmd_chat(int argc, char **argv);
int gm_cmd_template(int argc, char **argv);
int gm_cmd_tokenize(int argc, char **argv);
int gm_cmd_init(int argc, char **argv);
int gm_cmd_sync_models(int argc, char **argv);
int gm_cmd_doctor(int argc, char **argv);
int gm_cmd_pull(int argc, char **argv);
int gm_cmd_serve(int argc, char **argv);

/* Reads a whole file (or standard input when path is NULL) as bytes (malloc'd, NUL added), or
 * prints why not and returns NULL. */
char *gm_cli_read_text(const char *cmd, const char *path, size_t *len);

/* Reads whitespace-separated token ids from path (malloc'd), or prints why not and returns NULL. */
int32_t *gm_cli_read_ids(const char *cmd, const char *path, uint32_t *n_out);

/* Prints "gmlx CMD: message" to stderr. */
void gm_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a decimal unsigned integer option value in [lo, hi]; prints an error naming the flag
 * and returns false when it is not one. */
bool gm_cli_parse_u32(const char *cmd, const char *flag, const char *value, uint32_t lo,
                      uint32_t hi, uint32_t *out);
/* The same for a number in [lo, hi]. */
bool gm_cli_parse_float(const char *cmd, const char *flag, const char *value, float lo, float hi, float *out);

/* Placement flags shared by run, bench and logits: --stream-experts and --stream-cpu. Returns 1
 * when arg was one of them (and stores it in *placement, an int holding a gm_placement), 0 when
 * it is not, -1 after printing an error (both given). */
int gm_cli_placement_flag(const char *cmd, const char *arg, int *placement);

/* The streaming flags run, bench, chat and logits share: the placement, --stream-fast-disk and
 * the lossy levers. */
typedef struct gm_cli_stream {
    int placement;        /* a gm_placement */
    int fast_disk;        /* a gm_fast_disk */
    gm_levers levers;
    int prefill_feeder;   /* --[no-]prefill-feeder: 1 on, -1 off, 0 as the environment says */
    int decode_feeder;    /* --[no-]decode-feeder: the same */
    int gpu;              /* --gpu 1, --no-gpu -1, 0 as GMLX_GPU says (unset: the GPU when the
                             experts stream and a device is found) */
    float vram_gb;        /* --vram-gb; 0: as GMLX_VRAM_GB says */
} gm_cli_stream;
/* 0 when arg is none of them, else how many arguments it took (1 or 2; *o updated), -1 after
 * printing an error. */
int gm_cli_stream_flag(const char *cmd, const char *arg, const char *value, gm_cli_stream *o);
/* After parsing: the rules between the flags (the levers' ranges and exclusions); prints an
 * error and returns false when one fails. */
bool gm_cli_stream_check(const char *cmd, const gm_cli_stream *o);

/* --stream-fast-disk auto|on|off: 0 when arg is something else, 2 when it took the value
 * (*fast, an int holding a gm_fast_disk), -1 after printing an error. */
int gm_cli_fast_disk_flag(const char *cmd, const char *arg, const char *value, int *fast);

/* The lossy levers: --moe-experts K, --moe-expert-mass P, --moe-expert-probe, --moe-miss-shed P,
 * --moe-prestage ranked|keepers, --moe-layer-shed P. Returns 0 when arg is none of them, else
 * how many arguments it took (1 or 2; *o updated), -1 after printing an error. */
int gm_cli_lever_flag(const char *cmd, const char *arg, const char *value, gm_levers *o);
/* The help lines of those flags. */
extern const char gm_cli_lever_help[];
/* The help lines on MODEL as a configuration entry (run, chat). */
extern const char gm_cli_config_help[];

/* Parses the value of flag --kv-type (f32, f16, q8_0) or --kv-bits (32, 16, 8) into *kv; prints
 * an error and returns false otherwise. */
bool gm_cli_parse_kv(const char *cmd, const char *flag, const char *value, gm_kv_type *kv);

/* The sampling flags run and chat share (--temp, --top-k, --top-p, --min-p, --repeat-penalty,
 * --repeat-last-n, --seed; -1 for the last two as llama.cpp takes it): 2 when arg was one (it
 * took a value), 0 when not, -1 after printing an error. */
int gm_cli_sampling_flag(const char *cmd, const char *a, const char *v, gm_sampling *so, bool *seed_set,
                         uint32_t *last_n);

/* The loading flags run, chat, bench and logits share: -t/--threads N, -c/--ctx-size N,
 * --prefill-step-size N, --kv-type / --kv-bits. 0 (unset) keeps a field's default. */
typedef struct gm_cli_load {
    uint32_t threads, ctx, step;
    gm_kv_type kv;
} gm_cli_load;
/* 2 when arg was one (it took its value), 0 when not, -1 after printing an error. */
int gm_cli_load_flag(const char *cmd, const char *arg, const char *value, gm_cli_load *l);
/* Sets the model options the flags name. */
void gm_cli_load_apply(const gm_cli_load *l, gm_model_opts *o);

/* An argument that is no flag of cmd's: an unknown option (an error), else the model file
 * (once). Prints the error and returns false. */
bool gm_cli_model_arg(const char *cmd, const char *arg, const char **model);

/* True when arg is -h or --help. */
bool gm_cli_is_help(const char *arg);

/* ---- env.c: the one place that reads the GMLX_* variables ---- */

/* The tuning the GMLX_* variables set (docs/streaming.md); prints what is wrong with one and
 * returns false. */
bool gm_cli_tuning(const char *cmd, gm_tuning *t);
/* Model options for a command: the defaults, the tuning from the environment, the streaming
 * flags; false after printing an error. */
bool gm_cli_model_opts(const char *cmd, const gm_cli_stream *sflags, gm_model_opts *o);
/* The bundled model's path, or GMLX_MODEL when set. */
const char *gm_cli_default_model(void);
/* Log lines to stderr (NOTE and above; INFO too with verbose), and a load progress line on a
 * terminal. */
void gm_cli_log_setup(bool verbose);
void gm_cli_progress(void *user, const char *what, uint64_t done, uint64_t total);
/* Clears a progress line still on the terminal. */
void gm_cli_progress_done(void);

/* ---- config.c: the configuration file ---- */

/* Options that print warnings to stderr and expand ~ and $VAR from the environment. */
gm_config_opts gm_cli_config_opts(void);
/* The file to read: explicit (--config), else GMLX_CONFIG, else the first of the search that
 * exists (*from_search true), else NULL. malloc'd. */
char *gm_cli_config_path(const char *explicit_path, bool *from_search);
/* Where init writes by default: $XDG_CONFIG_HOME/gmlx/gmlx.yaml, else ~/.config/gmlx/gmlx.yaml. */
char *gm_cli_config_default_write_path(void);
/* Loads the file gm_cli_config_path picks. NULL with *rc 0 when there is none and !required;
 * NULL with *rc GM_EXIT_USAGE after printing the error (a missing explicit file too). */
gm_config *gm_cli_config_open(const char *cmd, const char *explicit_path, bool required, int *rc);
/* For run and chat: when model names a configuration entry or alias (not a file), runs fn on
 * argv with the entry's settings as flags before the user's (those the user typed are left out)
 * and the name replaced by the entry's file, and returns its exit status; -1 when model is a
 * file (the caller goes on). */
int gm_cli_config_rerun(const char *cmd, int argc, char **argv, const char *model, const char *config_path,
                        int (*fn)(int, char **));

#endif
