/* cli/remote_cli: what validate and pull share for remote models (cmd_pull.c): the options from
 * the environment, and a remote header opened with its errors printed. Over the public API
 * alone (gmlx.h "remote model files"). */
#ifndef GM_CLI_REMOTE_CLI_H
#define GM_CLI_REMOTE_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "gmlx.h"

/* HF_ENDPOINT (the hub's address), HF_TOKEN (or HUGGING_FACE_HUB_TOKEN) and GMLX_HTTP_STALL_S.
 * false after printing an error (a stall limit that is not a number). */
bool gm_cli_remote_opts(const char *cmd, gm_fetch_opts *o);

/* Whether arg names a remote model (and is not a file on disk). -1 after printing why a remote
 * form is invalid. */
int gm_cli_remote_ref(const char *cmd, const char *arg);

/* Resolves the remote ref arg (printing "[resolved] ARG -> NAME" for a quant ref) and opens its
 * header by range reads. Returns an exit status; on GM_EXIT_OK *rm and *f are the caller's. */
int gm_cli_remote_open(const char *cmd, const char *arg, const gm_fetch_opts *o, uint64_t max_bytes,
                       gm_remote_model **rm, gm_file **f);

/* --max-mb N: 0 when arg is not it, 2 when taken, -1 after printing an error. */
int gm_cli_max_mb_flag(const char *cmd, const char *arg, const char *value, uint64_t *max_bytes);

#endif
