#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *gm_strerror(int code)
{
    switch (code) {
    case GM_OK: return "ok";
    case GM_EIO: return "I/O error";
    case GM_EFORMAT: return "format error";
    case GM_ENOMEM: return "out of memory";
    case GM_EINVAL: return "invalid argument";
    case GM_ENOTFOUND: return "not found";
    case GM_ETYPE: return "wrong type";
    case GM_EUNSUPPORTED: return "unsupported";
    case GM_ERANGE: return "out of range";
    case GM_ETEMPLATE: return "template error";
    case GM_ECANCELED: return "canceled";
    case GM_ENOSPACE: return "cannot fit";
    default: return "unknown error";
    }
}

static void err_vset(gm_err *err, int code, const char *fmt, va_list ap)
{
    if (!err || err->code != 0)
        return;
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

int gm_err_set(gm_err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(err, code, fmt, ap);
    va_end(ap);
    return code;
}

int gm_err_errno(gm_err *err, int code, int errnum, const char *fmt, ...)
{
    if (!err || err->code != 0)
        return code;
    va_list ap;
    va_start(ap, fmt);
    err_vset(err, code, fmt, ap);
    va_end(ap);
    size_t len = strlen(err->msg);
    if (len < sizeof err->msg)
        snprintf(err->msg + len, sizeof err->msg - len, ": %s", strerror(errnum));
    return code;
}

void gm_err_clear(gm_err *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}
