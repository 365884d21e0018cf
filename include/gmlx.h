/* gmlx public API: error codes and the error record shared by every module.
 *
 * Owns: the gm_err type and the GM_E* codes. Library code reports failures as a negative
 * GM_E* return value plus a filled gm_err; only the command-line tool and the server decide
 * what to print and which exit status a code maps to.
 * Threads: a gm_err belongs to the caller's thread.
 */
#ifndef GMLX_H
#define GMLX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GMLX_VERSION "0.1.0"

enum {
    GM_OK = 0,
    GM_EIO = -1,         /* the operating system refused a read, open or map */
    GM_EFORMAT = -2,     /* the input is malformed (corrupt, truncated, hostile) */
    GM_ENOMEM = -3,      /* an allocation failed */
    GM_EINVAL = -4,      /* a caller's argument or option is invalid */
    GM_ENOTFOUND = -5,   /* a key, tensor or file is absent */
    GM_ETYPE = -6,       /* a value has another type than the one asked for */
    GM_EUNSUPPORTED = -7,/* valid input that this build cannot handle */
    GM_ERANGE = -8,      /* a number is out of the range it must lie in */
    GM_ETEMPLATE = -9,   /* a chat template failed to render (raise_exception, a type error) */
};

/* The first error of an operation, with its context. Filling an already-set error keeps the
 * first message: the root cause is what a user needs. */
typedef struct gm_err {
    int code;            /* 0 while no error was recorded, else a GM_E* code */
    char msg[512];       /* one line, no trailing newline: "FILE: what is wrong" */
} gm_err;

/* Name of a GM_E* code, e.g. "format error". */
const char *gm_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif
