/* base/err: recording errors with context.
 *
 * Owns: gm_err_set and its helpers. The first error recorded in a gm_err wins; later calls do
 * nothing, so a low-level cause is not overwritten by a vaguer message from a caller.
 * Threads: any; a gm_err is used by one thread at a time.
 */
#ifndef GM_BASE_ERR_H
#define GM_BASE_ERR_H

#include "gmlx.h"

#if defined(__GNUC__)
#define GM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GM_PRINTF(a, b)
#endif

/* Records code and the formatted message when err is non-NULL and empty. Returns code, so
 * callers can write `return gm_err_set(err, GM_EFORMAT, "...")`. */
int gm_err_set(gm_err *err, int code, const char *fmt, ...) GM_PRINTF(3, 4);

/* Same, with strerror(errnum) appended as ": <reason>". */
int gm_err_errno(gm_err *err, int code, int errnum, const char *fmt, ...) GM_PRINTF(4, 5);

/* Empties err so it can record again. */
void gm_err_clear(gm_err *err);

#endif
