/* cli: the gmlx command-line tool. Owns argument parsing, printing and exit statuses; the
 * library modules never print errors or exit. Exit statuses: 0 success, 1 the command's answer
 * is "no" (e.g. validate: the model cannot run), 2 bad usage, unreadable input or output that
 * could not be written.
 * Threads: the main thread only. */
#ifndef GM_CLI_CLI_H
#define GM_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infer/engine.h"

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
int gm_cmd_tokenize(int argc, char **argv);

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

/* Placement flags shared by run, bench and logits: --stream-experts and --stream-cpu. Returns 1
 * when arg was one of them (and stores it in *placement, an int holding a gm_placement), 0 when
 * it is not, -1 after printing an error (both given). */
int gm_cli_placement_flag(const char *cmd, const char *arg, int *placement);

/* The streaming flags run, bench and logits share: the placement, --stream-fast-disk and the
 * lossy levers. */
typedef struct gm_cli_stream {
    int placement;        /* a gm_placement */
    int fast_disk;        /* a gm_fast_disk */
    gm_shed_opts levers;
} gm_cli_stream;
/* 0 when arg is none of them, else how many arguments it took (1 or 2; *o updated), -1 after
 * printing an error. */
int gm_cli_stream_flag(const char *cmd, const char *arg, const char *value, gm_cli_stream *o);
/* After parsing: the rules between the flags (the levers' ranges and exclusions); prints an
 * error and returns false when one fails. */
bool gm_cli_stream_check(const char *cmd, const gm_cli_stream *o);

/* --stream-fast-disk auto|on|off (run, bench, logits): 0 when arg is something else, 2 when it
 * took the value (*fast, an int holding a gm_fast_disk), -1 after printing an error. */
int gm_cli_fast_disk_flag(const char *cmd, const char *arg, const char *value, int *fast);

/* The lossy levers (stream/shed.h), shared by run, bench and logits: --moe-experts K,
 * --moe-expert-mass P, --moe-expert-probe, --moe-miss-shed P, --moe-prestage ranked|keepers,
 * --moe-layer-shed P. Returns 0 when arg is none of them, else how many arguments it took (1 or
 * 2; *o updated), -1 after printing an error (a missing or out-of-range value). */
int gm_cli_lever_flag(const char *cmd, const char *arg, const char *value, gm_shed_opts *o);
/* The help lines of those flags. */
extern const char gm_cli_lever_help[];

/* Parses the value of flag --kv-type (f32, f16, q8_0) or --kv-bits (32, 16, 8) into *kv; prints
 * an error and returns false otherwise. */
bool gm_cli_parse_kv(const char *cmd, const char *flag, const char *value, gm_kv_type *kv);
/* Bits per cached element that the plan reserves for kv (8 for Q8_0 blocks). */
uint32_t gm_cli_kv_bits(gm_kv_type kv);

/* True when arg is -h or --help. */
bool gm_cli_is_help(const char *arg);

#endif
