/* template: a sandboxed Jinja2 renderer for the chat templates GGUF files carry
 * (tokenizer.chat_template).
 *
 * Owns: parsing a template's source into a tree (gm_tmpl) and rendering it against variables
 * given as a JSON object (jansson), exactly as Hugging Face transformers renders
 * apply_chat_template: Python Jinja2's ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks, the loopcontrols extension, the globals raise_exception and strftime_now, and
 * transformers' tojson (json.dumps with ensure_ascii=False: key order kept, ", " and ": "
 * separators, floats as Python writes them). Values print as Python prints them (None, True,
 * 1.0, ['a', 'b'], {'k': 1}).
 *
 * Sandbox: a template reaches only the variables passed in and the built-in filters, tests,
 * globals and methods; nothing touches files, the environment or the process. Rendering is
 * bounded by gm_tmpl_limits (output bytes, evaluation steps, recursion depth); exceeding one is
 * GM_ERANGE, never a crash or an unbounded loop. Templates come from untrusted files: every
 * input is parsed with bounds checks.
 *
 * Errors (gm_err, message "line N: ..." naming the template line):
 *   GM_EFORMAT       the source is not valid Jinja (a syntax error)
 *   GM_EUNSUPPORTED  valid Jinja using a construct this renderer does not implement (named)
 *   GM_ETEMPLATE     rendering failed: raise_exception(msg) (the message is msg itself, no
 *                    "line N:" before it: the template author's words), an undefined
 *                    value used where Python Jinja2 raises, a type error, a sandbox refusal
 *   GM_ERANGE        a limit was exceeded
 *   GM_ENOMEM        an allocation failed
 *
 * Threads: a parsed gm_tmpl is immutable; any number of threads may render it at once.
 */
#ifndef GM_TEMPLATE_TEMPLATE_H
#define GM_TEMPLATE_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"

typedef struct gm_tmpl gm_tmpl;

typedef struct gm_tmpl_limits {
    uint64_t max_output_bytes; /* rendered text (default 16 MiB) */
    uint64_t max_steps;        /* loop iterations, calls, output writes and allocations (a step per
                                  16 bytes of text, per list element) together (default 10^7) */
    uint32_t max_depth;        /* nesting of macro calls and of the expression being evaluated
                                  (default 200; the parser bounds nesting the same way) */
} gm_tmpl_limits;

void gm_tmpl_limits_default(gm_tmpl_limits *l);

typedef struct gm_tmpl_render_opts {
    gm_tmpl_limits limits;
    bool now_set;        /* strftime_now formats now_unix_s in UTC (deterministic output) ... */
    int64_t now_unix_s;  /* ... else the current local time */
} gm_tmpl_render_opts;

/* Defaults: gm_tmpl_limits_default, the current time. */
void gm_tmpl_render_opts_default(gm_tmpl_render_opts *o);

/* Parses len bytes of template source (nesting bounded at the default max_depth). */
int gm_tmpl_parse(gm_tmpl **out, const char *src, size_t len, gm_err *err);
void gm_tmpl_free(gm_tmpl *t);

/* Renders t with vars (a JSON object: messages, tools, add_generation_prompt, bos_token, ...;
 * NULL: no variables) into *out (malloc'd, NUL-terminated; *out_len bytes without the NUL).
 * opts NULL: the defaults. On failure *out is NULL. */
int gm_tmpl_render(const gm_tmpl *t, const json_t *vars, const gm_tmpl_render_opts *opts, char **out,
                   size_t *out_len, gm_err *err);

#endif
