/* base/log: leveled diagnostics, delivered to the sink the front end sets (gmlx.h
 * gm_log_set_sink); the library itself never writes to a terminal or a file.
 *
 * Owns: the process-wide sink and its level (the one global besides CPU features). Library code
 * logs what a load decided at NOTE, details at INFO/DEBUG, things to act on at WARN; it never
 * logs errors it returns (the caller prints those).
 * Threads: any; the sink is called on the logging thread, one whole line per call.
 */
#ifndef GM_BASE_LOG_H
#define GM_BASE_LOG_H

#include <stdbool.h>

#include "base/err.h"

/* True when a line at level would reach the sink (to skip work for lines nobody reads). */
bool gm_log_enabled(gm_log_level level);
void gm_log(gm_log_level level, const char *fmt, ...) GM_PRINTF(2, 3);

/* Makes a string from a file printable in place: control characters and bytes that are not
 * part of valid UTF-8 (strict: no overlongs, surrogates or code points past U+10FFFF) become
 * '?'. For text read from a model file (names, architectures) before it reaches a terminal or a
 * JSON encoder. */
void gm_printable(char *s);

#endif
