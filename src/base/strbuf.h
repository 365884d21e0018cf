/* base/strbuf: a growable byte buffer that library code formats text into (reports, tables,
 * traces), so that nothing below the front ends writes to a FILE*: the caller takes the finished
 * string and decides where it goes.
 *
 * Owns: the malloc'd bytes in data (len bytes, NUL-terminated whenever data is non-NULL; cap is
 * their allocated size). A zeroed gm_strbuf (GM_STRBUF_INIT or = {0}) is empty and ready.
 * Invariants: an allocation or formatting failure sets failed and is sticky: every later append
 * does nothing and gm_strbuf_take returns NULL, so a caller checks once at the end instead of
 * after each call. Nothing here aborts or prints.
 * Threads: a gm_strbuf is used by one thread at a time.
 */
#ifndef GM_BASE_STRBUF_H
#define GM_BASE_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

typedef struct gm_strbuf {
    char *data;  /* NULL until the first append; else NUL-terminated */
    size_t len;  /* bytes of text, not counting the NUL */
    size_t cap;  /* bytes allocated at data */
    bool failed; /* an append could not allocate or format: sticky until reset */
} gm_strbuf;

#define GM_STRBUF_INIT {NULL, 0, 0, false}

/* Makes room for n more bytes of text (and the NUL) so that appends up to that size do not
 * allocate (e.g. before a loop that must not). Returns false (and sets failed) when it cannot. */
bool gm_strbuf_reserve(gm_strbuf *b, size_t n);

/* Appends n bytes of p (which may hold NUL bytes). */
void gm_strbuf_put(gm_strbuf *b, const void *p, size_t n);
/* Appends one byte. */
void gm_strbuf_putc(gm_strbuf *b, char c);
/* Appends the string s (without its NUL). */
void gm_strbuf_puts(gm_strbuf *b, const char *s);
/* Appends printf-formatted text (exactly what fprintf would write for the same arguments). */
void gm_strbuf_putf(gm_strbuf *b, const char *fmt, ...) GM_PRINTF(2, 3);
void gm_strbuf_vputf(gm_strbuf *b, const char *fmt, va_list ap) GM_PRINTF(2, 0);

/* Hands the text to the caller, who frees it: a NUL-terminated malloc'd string ("" when nothing
 * was appended), or NULL when an append failed. Either way b is left empty (as GM_STRBUF_INIT). */
char *gm_strbuf_take(gm_strbuf *b);

/* Empties b and clears failed, keeping its memory for the next text. */
void gm_strbuf_reset(gm_strbuf *b);

/* Releases the memory; b is left empty (as GM_STRBUF_INIT). NULL is fine. */
void gm_strbuf_free(gm_strbuf *b);

#endif
