/* base/log: leveled diagnostics on stderr.
 *
 * Owns: the process-wide log level (the one global besides CPU features). Library code logs
 * progress and facts at INFO/DEBUG; it never logs errors it returns (the caller prints those).
 * Threads: any; each line is written with one fprintf so lines do not interleave.
 */
#ifndef GM_BASE_LOG_H
#define GM_BASE_LOG_H

#include "base/err.h"

typedef enum { GM_LOG_QUIET = 0, GM_LOG_WARN = 1, GM_LOG_INFO = 2, GM_LOG_DEBUG = 3 } gm_log_level;

void gm_log_set_level(gm_log_level level);
gm_log_level gm_log_get_level(void);
void gm_log(gm_log_level level, const char *fmt, ...) GM_PRINTF(2, 3);

/* Makes a string from a file printable in place: control characters and bytes that are not
 * part of valid UTF-8 (strict: no overlongs, surrogates or code points past U+10FFFF) become
 * '?'. For text read from a model file (names, architectures) before it reaches a terminal or a
 * JSON encoder. */
void gm_printable(char *s);

#endif
