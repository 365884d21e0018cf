#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

static gm_log_level g_level = GM_LOG_WARN;

void gm_log_set_level(gm_log_level level) { g_level = level; }
gm_log_level gm_log_get_level(void) { return g_level; }

void gm_log(gm_log_level level, const char *fmt, ...)
{
    if (level > g_level)
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
