/* cli/chatfmt: conversations as a chat template sees them, shared by run, chat and template:
 * loading the template (the file's, or --chat-template-file), the variables transformers passes
 * (messages, add_generation_prompt, bos_token, eos_token, the thinking switch the template
 * reads), rendering, and the rendered prompt's tokens. Prints what goes wrong, naming cmd. */
#ifndef GM_CLI_CHATFMT_H
#define GM_CLI_CHATFMT_H

#include <stdbool.h>

#include <jansson.h>

#include "gmlx.h"

typedef struct gm_cli_tmpl {
    gm_template *t;
    char *src;         /* the template's source */
    const char *origin; /* "the model's template" or the file's path */
} gm_cli_tmpl;

/* The template of path_or_null (a file) or else the vocabulary's. Returns 1 when loaded, 0 when
 * there is none (no file given and the model carries none), -1 after printing an error. */
int gm_cli_tmpl_load(const char *cmd, const gm_vocab *v, const char *path, gm_cli_tmpl *out);
void gm_cli_tmpl_free(gm_cli_tmpl *t);

/* The variables of a render: messages (a reference is taken), add_generation_prompt, bos_token
 * and eos_token of v (when v is not NULL), then extra's keys over them (NULL: none). */
json_t *gm_cli_vars(const gm_vocab *v, json_t *messages, bool add_generation_prompt, const json_t *extra);

/* The thinking switch the template reads (the seed's mapping): thinking_mode, enable_thinking,
 * or Hy3's reasoning_effort "no_think"; set in vars. Returns false when the template has none
 * (the caller says so). */
bool gm_cli_thinking_var(const char *src, bool on, json_t *vars);

/* Renders; the text (malloc'd) or NULL after printing the error (a raise_exception names the
 * template's message). */
char *gm_cli_render(const char *cmd, const gm_cli_tmpl *t, json_t *vars, size_t *len);

/* {"role": role, "content": text}, or NULL when text is not valid UTF-8. */
json_t *gm_cli_message(const char *role, const char *text, size_t len);

/* A single-turn conversation: [system?, user]; NULL when a text is not valid UTF-8 (JSON
 * strings are) or memory runs out. */
json_t *gm_cli_messages(const char *system, const char *user, size_t user_len);

#endif
