/* remote/ref: the forms a remote model is named by (remote.h lists them). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "remote/remote.h"

static bool ends_gguf(const char *s)
{
    size_t n = strlen(s);
    return n > 5 && strcasecmp(s + n - 5, ".gguf") == 0;
}

/* A repo id: ORG/REPO, each of letters, digits, '-', '_', '.', not "." or "..". */
static bool repo_part_ok(const char *s, size_t n)
{
    if (n == 0 || n > 96 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
              c == '_' || c == '.'))
            return false;
    }
    return true;
}

/* No "..", no empty segment, no backslash, nothing below space. */
static bool repo_path_ok(const char *p)
{
    if (!*p || *p == '/')
        return false;
    for (const char *s = p; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == '\\')
            return false;
    const char *seg = p;
    for (;;) {
        const char *e = strchr(seg, '/');
        size_t n = e ? (size_t)(e - seg) : strlen(seg);
        if (n == 0 || (n == 2 && seg[0] == '.' && seg[1] == '.') || (n == 1 && seg[0] == '.'))
            return false;
        if (!e)
            return true;
        seg = e + 1;
    }
}

/* Fills repo, path and rev of a hub file from "ORG/REPO/PATH[@REV]". */
static int parse_hub_path(const char *s, const char *shown, gm_ref *r, gm_err *err)
{
    char tmp[2048];
    if (strlen(s) >= sizeof tmp)
        return gm_err_set(err, GM_EINVAL, "%s: too long", shown);
    strcpy(tmp, s);
    snprintf(r->rev, sizeof r->rev, "main");
    char *at = strrchr(tmp, '@');
    if (at) {
        *at = '\0';
        if (!at[1] || strlen(at + 1) >= sizeof r->rev || strchr(at + 1, '/'))
            return gm_err_set(err, GM_EINVAL, "%s: the revision after '@' is empty or not valid", shown);
        snprintf(r->rev, sizeof r->rev, "%s", at + 1);
    }
    char *s1 = strchr(tmp, '/');
    char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    if (!s1 || !s2)
        return gm_err_set(err, GM_EINVAL, "%s: name a file: hf://ORG/REPO/FILE.gguf", shown);
    if (!repo_part_ok(tmp, (size_t)(s1 - tmp)) || !repo_part_ok(s1 + 1, (size_t)(s2 - s1 - 1)))
        return gm_err_set(err, GM_EINVAL, "%s: '%.*s' is not a repo id (ORG/REPO)", shown, (int)(s2 - tmp), tmp);
    if (!repo_path_ok(s2 + 1))
        return gm_err_set(err, GM_EINVAL, "%s: the file path has an empty, '.' or '..' part", shown);
    if (!ends_gguf(s2 + 1))
        return gm_err_set(err, GM_EINVAL, "%s: not a .gguf file (use ORG/REPO:QUANT to pick one of a repo's)", shown);
    if ((size_t)(s2 - tmp) >= sizeof r->repo || strlen(s2 + 1) >= sizeof r->path)
        return gm_err_set(err, GM_EINVAL, "%s: too long", shown);
    snprintf(r->repo, sizeof r->repo, "%.*s", (int)(s2 - tmp), tmp);
    snprintf(r->path, sizeof r->path, "%s", s2 + 1);
    r->kind = GM_REF_HUB_FILE;
    return 0;
}

int gm_ref_parse(const char *s, gm_ref *r, gm_err *err)
{
    memset(r, 0, sizeof *r);
    snprintf(r->rev, sizeof r->rev, "main");
    if (!s || !*s)
        return gm_err_set(err, GM_EINVAL, "an empty model name");
    if (strncmp(s, "hf://", 5) == 0)
        return parse_hub_path(s + 5, s, r, err);
    if (strncmp(s, "hf:", 3) == 0)
        return parse_hub_path(s + 3, s, r, err);
    if (strncasecmp(s, "http://", 7) == 0 || strncasecmp(s, "https://", 8) == 0) {
        if (strlen(s) >= sizeof r->url)
            return gm_err_set(err, GM_EINVAL, "%s: URL too long", s);
        const char *host = strstr(s, "://") + 3;
        const char *slash = strchr(host, '/');
        if (!slash || !slash[1])
            return gm_err_set(err, GM_EINVAL, "%s: the URL names no file", s);
        /* the hub's own file addresses: HOST/ORG/REPO/(resolve|blob)/REV/PATH */
        size_t hl = (size_t)(slash - host);
        if ((hl == 14 && strncasecmp(host, "huggingface.co", 14) == 0) ||
            (hl == 5 && strncasecmp(host, "hf.co", 5) == 0)) {
            char org[128], repo[128], verb[16], rev[128];
            int used = 0;
            if (sscanf(slash, "/%127[^/]/%127[^/]/%15[^/]/%127[^/]/%n", org, repo, verb, rev, &used) == 4 &&
                used > 0 && (strcmp(verb, "resolve") == 0 || strcmp(verb, "blob") == 0)) {
                char hub[2048];
                const char *path = slash + used;
                size_t pl = strcspn(path, "?#");
                snprintf(hub, sizeof hub, "%s/%s/%.*s@%s", org, repo, (int)pl, path, rev);
                return parse_hub_path(hub, s, r, err);
            }
        }
        size_t pl = strcspn(slash, "?#");
        const char *last = slash + pl;
        while (last > slash && last[-1] != '/')
            last--;
        if (last == slash + pl)
            return gm_err_set(err, GM_EINVAL, "%s: the URL names no file", s);
        snprintf(r->url, sizeof r->url, "%s", s);
        snprintf(r->path, sizeof r->path, "%.*s", (int)(slash + pl - last), last);
        r->kind = GM_REF_URL;
        return 0;
    }
    /* ORG/REPO:QUANT - a path with a ':' after exactly one '/' and nothing else of a path */
    const char *colon = strchr(s, ':');
    const char *sl = strchr(s, '/');
    if (colon && sl && sl < colon && !strchr(sl + 1, '/') && s[0] != '/' && s[0] != '.' && s[0] != '~') {
        if (!repo_part_ok(s, (size_t)(sl - s)) || !repo_part_ok(sl + 1, (size_t)(colon - sl - 1)))
            return gm_err_set(err, GM_EINVAL, "%s: '%.*s' is not a repo id (ORG/REPO)", s, (int)(colon - s), s);
        const char *q = colon + 1;
        if (!*q || strlen(q) >= sizeof r->quant || strpbrk(q, "/:@ "))
            return gm_err_set(err, GM_EINVAL, "%s: name a quantization after ':' (ORG/REPO:Q4_K_M)", s);
        snprintf(r->repo, sizeof r->repo, "%.*s", (int)(colon - s), s);
        snprintf(r->quant, sizeof r->quant, "%s", q);
        r->kind = GM_REF_HUB_QUANT;
        return 0;
    }
    r->kind = GM_REF_LOCAL;
    return 0;
}

void gm_ref_hub_name(const char *repo, const char *rev, const char *path, char *buf, size_t len)
{
    if (rev && *rev && strcmp(rev, "main") != 0)
        snprintf(buf, len, "hf://%s/%s@%s", repo, path, rev);
    else
        snprintf(buf, len, "hf://%s/%s", repo, path);
}
