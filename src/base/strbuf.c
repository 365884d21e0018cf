/* base/strbuf: the growable text buffer (see strbuf.h). */
#include "base/strbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool gm_strbuf_reserve(gm_strbuf *b, size_t n)
{
    if (b->failed)
        return false;
    if (n > SIZE_MAX - 1 - b->len) {
        b->failed = true;
        return false;
    }
    const size_t need = b->len + n + 1;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    if (!b->data)
        p[0] = '\0';
    b->data = p;
    b->cap = cap;
    return true;
}

void gm_strbuf_put(gm_strbuf *b, const void *p, size_t n)
{
    if (n == 0 || !gm_strbuf_reserve(b, n))
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void gm_strbuf_putc(gm_strbuf *b, char c) { gm_strbuf_put(b, &c, 1); }

void gm_strbuf_puts(gm_strbuf *b, const char *s) { gm_strbuf_put(b, s, strlen(s)); }

void gm_strbuf_vputf(gm_strbuf *b, const char *fmt, va_list ap)
{
    if (b->failed)
        return;
    /* first try the room already there; only a longer text formats twice */
    const size_t room = b->data ? b->cap - b->len : 0;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        if (b->data)
            b->data[b->len] = '\0'; /* drop whatever the failed call left */
        b->failed = true;
        return;
    }
    if ((size_t)n >= room) {
        if (!gm_strbuf_reserve(b, (size_t)n)) {
            if (b->data)
                b->data[b->len] = '\0';
            return;
        }
        vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    }
    b->len += (size_t)n;
}

void gm_strbuf_putf(gm_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gm_strbuf_vputf(b, fmt, ap);
    va_end(ap);
}

char *gm_strbuf_take(gm_strbuf *b)
{
    char *s = NULL;
    if (!b->failed)
        s = b->data ? b->data : calloc(1, 1);
    else
        free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
    return s;
}

void gm_strbuf_reset(gm_strbuf *b)
{
    b->len = 0;
    b->failed = false;
    if (b->data)
        b->data[0] = '\0';
}

void gm_strbuf_free(gm_strbuf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}
