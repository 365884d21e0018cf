#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

/* The sink is set once by the front end before the work starts, and read by any thread. */
static gm_log_fn g_sink;
static void *g_sink_user;
static gm_log_level g_level = GM_LOG_QUIET;

void gm_log_set_sink(gm_log_fn fn, void *user, gm_log_level max_level)
{
    g_sink = fn;
    g_sink_user = user;
    g_level = fn ? max_level : GM_LOG_QUIET;
}

bool gm_log_enabled(gm_log_level level) { return g_sink && level != GM_LOG_QUIET && level <= g_level; }

void gm_log(gm_log_level level, const char *fmt, ...)
{
    if (!gm_log_enabled(level))
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    g_sink(g_sink_user, level, line);
}

/* Length of the valid UTF-8 sequence starting at s (1-4), or 0. */
static int utf8_seq(const unsigned char *s)
{
    unsigned char b = s[0];
    int need;
    unsigned char lo = 0x80, hi = 0xbf;
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf)
        need = 2;
    else if (b >= 0xe0 && b <= 0xef) {
        need = 3;
        lo = b == 0xe0 ? 0xa0 : 0x80;
        hi = b == 0xed ? 0x9f : 0xbf;
    } else if (b >= 0xf0 && b <= 0xf4) {
        need = 4;
        lo = b == 0xf0 ? 0x90 : 0x80;
        hi = b == 0xf4 ? 0x8f : 0xbf;
    } else
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (int i = 2; i < need; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return need;
}

void gm_printable(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        if (*p < 0x20 || *p == 0x7f) {
            *p++ = '?';
            continue;
        }
        int n = utf8_seq(p);
        if (n == 0)
            *p++ = '?';
        else
            p += n;
    }
}
