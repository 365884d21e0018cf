/* config/edit: changes to the file made on its text, so the user's comments, order, quoting and
 * formatting survive: an entry is a run of lines found from the parser's positions and the
 * indentation, and a change inserts or deletes whole lines. Writers hold a lock on the file's
 * folder (flock), read the file after taking it, and replace the file atomically (FILE.tmp,
 * fsync, rename, fsync of the folder), so two writers at once cannot lose each other's entries
 * and a crash leaves the old file or the new one. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "config/config.h"

struct gm_config_edit {
    char *path;       /* the file edited (a symlink's target) */
    char *dir;
    int lock_fd;
    char *text;
    size_t len;
    gm_config *cfg;
    gm_config_opts opts;
    mode_t mode;
};

/* ---- lines ---- */

/* Offset of the start of 1-based line n (len when past the end). */
static size_t line_off(const char *t, size_t len, uint32_t n)
{
    size_t o = 0;
    for (uint32_t l = 1; l < n && o < len; o++)
        if (t[o] == '\n')
            l++;
    return o;
}

static uint32_t n_lines(const char *t, size_t len)
{
    uint32_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += t[i] == '\n';
    return n + (len && t[len - 1] != '\n');
}

typedef struct line_info {
    uint32_t indent;
    bool blank, comment, dash;
} line_info;

static line_info line_at(const char *t, size_t len, uint32_t n)
{
    line_info li = {0};
    size_t o = line_off(t, len, n);
    while (o < len && t[o] == ' ')
        o++, li.indent++;
    li.blank = o >= len || t[o] == '\n' || t[o] == '\r';
    li.comment = !li.blank && t[o] == '#';
    li.dash = !li.blank && t[o] == '-' && (o + 1 >= len || t[o + 1] == ' ' || t[o + 1] == '\n');
    return li;
}

/* The last line of the block of the key at key_line / key_col: the lines after it indented
 * deeper (or list items at its own column), comments among them included; trailing blank lines
 * and comments indented no deeper than the key belong to what follows. */
static uint32_t block_end(const char *t, size_t len, uint32_t key_line, uint32_t key_col)
{
    uint32_t end = key_line, total = n_lines(t, len);
    for (uint32_t l = key_line + 1; l <= total; l++) {
        line_info li = line_at(t, len, l);
        if (li.blank)
            continue;
        if (li.indent > key_col || (li.indent == key_col && li.dash && !li.comment))
            end = l;
        else
            break;
    }
    return end;
}

/* The rest of the key line after "key:" holds a value (flow or scalar), not only a comment. */
static bool inline_value(const char *t, size_t len, uint32_t line)
{
    size_t o = line_off(t, len, line), e = o;
    while (e < len && t[e] != '\n')
        e++;
    const char *colon = NULL;
    bool sq = false, dq = false;
    for (size_t i = o; i < e; i++) {
        if (t[i] == '\'' && !dq)
            sq = !sq;
        else if (t[i] == '"' && !sq)
            dq = !dq;
        else if (t[i] == ':' && !sq && !dq && (i + 1 == e || t[i + 1] == ' ')) {
            colon = t + i;
            break;
        }
    }
    if (!colon)
        return false;
    for (const char *p = colon + 1; p < t + e; p++) {
        if (*p == '#')
            return false;
        if (*p != ' ' && *p != '\r')
            return true;
    }
    return false;
}

/* ---- text changes ---- */

static int text_splice(gm_config_edit *e, size_t at, size_t del, const char *ins, gm_err *err)
{
    size_t n = strlen(ins);
    char *t = malloc(e->len - del + n + 1);
    if (!t)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    memcpy(t, e->text, at);
    memcpy(t + at, ins, n);
    memcpy(t + at + n, e->text + at + del, e->len - at - del);
    size_t len = e->len - del + n;
    t[len] = '\0';
    gm_config *c = NULL;
    gm_err perr = {0};
    gm_config_opts quiet = e->opts;
    quiet.warn = NULL; /* the file's warnings were shown when it was opened */
    if (gm_config_parse(&c, e->path, t, len, &quiet, &perr) != 0) {
        free(t);
        return gm_err_set(err, GM_EINVAL, "%s: the change would not parse (%s); the file is unchanged", e->path,
                          perr.msg);
    }
    free(e->text);
    e->text = t;
    e->len = len;
    gm_config_free(e->cfg);
    e->cfg = c;
    return 0;
}

/* A scalar as YAML: plain when that reads back as the same string, else double-quoted. */
static void yaml_scalar(const char *s, char *out, size_t cap)
{
    bool plain_ok = *s && strchr("-?:,[]{}#&*!|>'\"%@` ~", s[0]) == NULL;
    for (const char *p = s; *p && plain_ok; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr("._/+-~=", *p)))
            plain_ok = false;
    static const char *const reserved[] = {"true", "false", "yes", "no", "on", "off", "null", "~", NULL};
    for (const char *const *r = reserved; *r && plain_ok; r++)
        if (strcasecmp(s, *r) == 0)
            plain_ok = false;
    char *end;
    if (plain_ok && (strtod(s, &end), *end == '\0'))
        plain_ok = false; /* a number would read back as one */
    if (plain_ok) {
        snprintf(out, cap, "%s", s);
        return;
    }
    size_t o = 0;
    out[o++] = '"';
    for (const char *p = s; *p && o + 8 < cap; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\')
            out[o++] = '\\', out[o++] = (char)ch;
        else if (ch < 0x20)
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
        else
            out[o++] = (char)ch;
    }
    out[o++] = '"';
    out[o] = '\0';
}

static const cfg_model *entry(const gm_config_edit *e, const char *id, gm_err *err)
{
    for (size_t i = 0; i < e->cfg->n_models; i++)
        if (strcmp(e->cfg->models[i].pub.id, id) == 0)
            return &e->cfg->models[i];
    gm_err_set(err, GM_ENOTFOUND, "%s: no model '%s'", e->path, id);
    return NULL;
}

static int refuse_flow(const gm_config_edit *e, const char *what, gm_err *err)
{
    return gm_err_set(err, GM_EUNSUPPORTED,
                      "%s: %s is written on one line ({...} or [...]); write it as a block (one key per "
                      "line) so gmlx can edit it",
                      e->path, what);
}

/* Columns an entry's keys sit at, from an existing entry (default: 2 deeper). */
static uint32_t child_indent(const gm_config_edit *e, uint32_t key_line, uint32_t key_col)
{
    uint32_t total = n_lines(e->text, e->len);
    for (uint32_t l = key_line + 1; l <= total; l++) {
        line_info li = line_at(e->text, e->len, l);
        if (li.blank || li.comment)
            continue;
        return li.indent > key_col ? li.indent : key_col + 2;
    }
    return key_col + 2;
}

/* The text ends with a line break (so appended lines start on their own line). */
static int ensure_newline(gm_config_edit *e, gm_err *err)
{
    if (e->len && e->text[e->len - 1] != '\n')
        return text_splice(e, e->len, 0, "\n", err);
    return 0;
}

int gm_config_edit_add_model(gm_config_edit *e, const char *id, const char *path, bool stream_experts,
                             const char *comment, gm_err *err)
{
    if (!*id || strchr(id, '@') || strchr(id, '\n') || strchr(path, '\n'))
        return gm_err_set(err, GM_EINVAL, "'%s' cannot be a model id", id);
    if (gm_config_find_model(e->cfg, id))
        return gm_err_set(err, GM_EINVAL, "%s: model '%s' is already there", e->path, id);
    /* first, as it re-parses: the positions below are of the text as it then stands */
    if (ensure_newline(e, err) != 0)
        return err->code;
    const gm_config *c = e->cfg;
    if (c->span_models.flow)
        return refuse_flow(e, "models:", err);
    char qid[1024], qpath[8192], block[10240];
    yaml_scalar(id, qid, sizeof qid);
    yaml_scalar(path, qpath, sizeof qpath);
    uint32_t col, ccol;
    if (c->n_models) {
        col = c->models[0].key_col;
        ccol = child_indent(e, c->models[0].pub.line, col) - col;
    } else {
        col = c->span_models.present ? c->span_models.key_col + 2 : 2;
        ccol = 2;
    }
    size_t o = 0;
    if (comment)
        o += (size_t)snprintf(block + o, sizeof block - o, "%*s# %s\n", (int)col, "", comment);
    o += (size_t)snprintf(block + o, sizeof block - o, "%*s%s:\n%*spath: %s\n", (int)col, "", qid,
                          (int)(col + ccol), "", qpath);
    if (stream_experts && o < sizeof block)
        o += (size_t)snprintf(block + o, sizeof block - o,
                              "%*s# the experts stream from the SSD (they do not fit in memory here)\n"
                              "%*sstream: experts\n",
                              (int)(col + ccol), "", (int)(col + ccol), "");
    if (o >= sizeof block)
        return gm_err_set(err, GM_EINVAL, "model '%s': the path is too long", id);
    if (!c->span_models.present) {
        char sec[10300];
        if (ensure_newline(e, err) != 0)
            return err->code;
        snprintf(sec, sizeof sec, "%smodels:\n%s", e->len ? "\n" : "", block);
        return text_splice(e, e->len, 0, sec, err);
    }
    if (inline_value(e->text, e->len, c->span_models.key_line))
        return refuse_flow(e, "models:", err);
    /* at the top of models:, right under its key */
    size_t at = line_off(e->text, e->len, c->span_models.key_line + 1);
    if (at == e->len && (ensure_newline(e, err) != 0 || (at = e->len, 0)))
        return err->code;
    return text_splice(e, at, 0, block, err);
}

int gm_config_edit_remove_model(gm_config_edit *e, const char *id, gm_err *err)
{
    const cfg_model *m = entry(e, id, err);
    if (!m)
        return err->code;
    if (e->cfg->span_models.flow)
        return refuse_flow(e, "models:", err);
    uint32_t end = block_end(e->text, e->len, m->pub.line, m->key_col);
    size_t a = line_off(e->text, e->len, m->pub.line), b = line_off(e->text, e->len, end + 1);
    return text_splice(e, a, b - a, "", err);
}

int gm_config_edit_set_stream_experts(gm_config_edit *e, const char *id, bool experts, gm_err *err)
{
    if (ensure_newline(e, err) != 0)
        return err->code;
    const cfg_model *m = entry(e, id, err);
    if (!m)
        return err->code;
    if (e->cfg->span_models.flow || inline_value(e->text, e->len, m->pub.line))
        return refuse_flow(e, id, err);
    uint32_t end = block_end(e->text, e->len, m->pub.line, m->key_col);
    uint32_t ccol = child_indent(e, m->pub.line, m->key_col);
    uint32_t stream_line = 0;
    for (uint32_t l = m->pub.line + 1; l <= end && !stream_line; l++) {
        line_info li = line_at(e->text, e->len, l);
        size_t o = line_off(e->text, e->len, l) + li.indent;
        if (!li.blank && !li.comment && li.indent == ccol && e->len - o >= 7 &&
            (memcmp(e->text + o, "stream:", 7) == 0 || memcmp(e->text + o, "cpu_moe:", 8) == 0))
            stream_line = l;
    }
    char line[256];
    snprintf(line, sizeof line, "%*sstream: experts\n", (int)ccol, "");
    if (stream_line) {
        size_t a = line_off(e->text, e->len, stream_line), b = line_off(e->text, e->len, stream_line + 1);
        return text_splice(e, a, b - a, experts ? line : "", err);
    }
    if (!experts)
        return 0;
    size_t at = line_off(e->text, e->len, end + 1);
    if (at == e->len && ensure_newline(e, err) != 0)
        return err->code;
    return text_splice(e, line_off(e->text, e->len, end + 1), 0, line, err);
}

int gm_config_edit_add_model_dir(gm_config_edit *e, const char *dir, gm_err *err)
{
    if (ensure_newline(e, err) != 0)
        return err->code;
    const gm_config *c = e->cfg;
    for (size_t i = 0; i < c->n_model_dirs; i++)
        if (strcmp(c->model_dirs[i], dir) == 0)
            return 0;
    char q[8192], buf[16640];
    yaml_scalar(dir, q, sizeof q);
    if (!c->span_server.present) {
        if (ensure_newline(e, err) != 0)
            return err->code;
        snprintf(buf, sizeof buf, "%sserver:\n  model_dirs:\n    - %s\n", e->len ? "\n" : "", q);
        /* server: first in a new file reads best; at the end of an existing one disturbs least */
        return text_splice(e, e->len, 0, buf, err);
    }
    if (c->span_server.flow || inline_value(e->text, e->len, c->span_server.key_line))
        return refuse_flow(e, "server:", err);
    uint32_t scol = child_indent(e, c->span_server.key_line, c->span_server.key_col);
    if (!c->span_model_dirs.present) {
        snprintf(buf, sizeof buf, "%*smodel_dirs:\n%*s- %s\n", (int)scol, "", (int)scol + 2, "", q);
        size_t at = line_off(e->text, e->len, c->span_server.key_line + 1);
        if (at == e->len && ensure_newline(e, err) != 0)
            return err->code;
        return text_splice(e, line_off(e->text, e->len, c->span_server.key_line + 1), 0, buf, err);
    }
    const cfg_span *d = &c->span_model_dirs;
    if (d->flow)
        return refuse_flow(e, "server.model_dirs", err);
    uint32_t end = block_end(e->text, e->len, d->key_line, d->key_col);
    if (c->model_dirs_is_scalar || !c->n_model_dirs) {
        /* model_dirs: /one  becomes a list of the two; an empty one a list of the new */
        char old[8192] = "";
        if (c->n_model_dirs)
            yaml_scalar(c->model_dirs[0], old, sizeof old);
        if (c->n_model_dirs)
            snprintf(buf, sizeof buf, "%*smodel_dirs:\n%*s- %s\n%*s- %s\n", (int)d->key_col, "", (int)d->key_col + 2,
                     "", old, (int)d->key_col + 2, "", q);
        else
            snprintf(buf, sizeof buf, "%*smodel_dirs:\n%*s- %s\n", (int)d->key_col, "", (int)d->key_col + 2, "", q);
        size_t a = line_off(e->text, e->len, d->key_line), b = line_off(e->text, e->len, end + 1);
        return text_splice(e, a, b - a, buf, err);
    }
    uint32_t icol = end > d->key_line ? line_at(e->text, e->len, end).indent : d->key_col + 2;
    snprintf(buf, sizeof buf, "%*s- %s\n", (int)icol, "", q);
    size_t at = line_off(e->text, e->len, end + 1);
    if (at == e->len && ensure_newline(e, err) != 0)
        return err->code;
    return text_splice(e, line_off(e->text, e->len, end + 1), 0, buf, err);
}

int gm_config_edit_set_text(gm_config_edit *e, const char *text, size_t len, gm_err *err)
{
    char *t = strndup(text, len);
    if (!t)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    size_t old_len = e->len;
    int rc = text_splice(e, 0, old_len, t, err);
    free(t);
    return rc;
}

const char *gm_config_edit_text(const gm_config_edit *e, size_t *len)
{
    if (len)
        *len = e->len;
    return e->text;
}

const gm_config *gm_config_edit_config(const gm_config_edit *e) { return e->cfg; }

/* ---- open, commit, close ---- */

static int mkdirs(char *dir)
{
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            int rc = mkdir(dir, 0755);
            *p = '/';
            if (rc != 0 && errno != EEXIST)
                return -1;
        }
    return mkdir(dir, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int gm_config_edit_open(gm_config_edit **out, const char *path, bool create, const gm_config_opts *opts,
                        gm_err *err)
{
    *out = NULL;
    gm_config_edit *e = calloc(1, sizeof *e);
    if (!e)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    e->lock_fd = -1;
    e->mode = 0644;
    if (opts)
        e->opts = *opts;
    char real[PATH_MAX];
    e->path = strdup(realpath(path, real) ? real : path);
    if (!e->path) {
        free(e);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    const char *slash = strrchr(e->path, '/');
    e->dir = slash ? (slash == e->path ? strdup("/") : strndup(e->path, (size_t)(slash - e->path))) : strdup(".");
    int rc = 0;
    if (!e->dir) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto fail;
    }
    if (create && mkdirs(e->dir) != 0) {
        rc = gm_err_errno(err, GM_EIO, errno, "%s: cannot create the folder", e->dir);
        goto fail;
    }
    e->lock_fd = open(e->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (e->lock_fd < 0) {
        rc = gm_err_errno(err, errno == ENOENT ? GM_ENOTFOUND : GM_EIO, errno, "%s", e->dir);
        goto fail;
    }
    while (flock(e->lock_fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            rc = gm_err_errno(err, GM_EIO, errno, "%s: cannot lock the folder for writing", e->dir);
            goto fail;
        }
    struct stat st;
    if (stat(e->path, &st) == 0) {
        e->mode = st.st_mode & 07777;
        gm_config *c = NULL;
        if ((rc = gm_config_load(&c, e->path, &e->opts, err)) != 0)
            goto fail;
        gm_config_free(c);
        FILE *f = fopen(e->path, "rb");
        if (!f) {
            rc = gm_err_errno(err, GM_EIO, errno, "%s", e->path);
            goto fail;
        }
        e->text = malloc((size_t)st.st_size + 1);
        e->len = e->text ? fread(e->text, 1, (size_t)st.st_size, f) : 0;
        fclose(f);
        if (!e->text) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
            goto fail;
        }
        e->text[e->len] = '\0';
    } else if (errno == ENOENT && create) {
        e->text = strdup("");
    } else {
        rc = gm_err_errno(err, errno == ENOENT ? GM_ENOTFOUND : GM_EIO, errno, "%s", e->path);
        goto fail;
    }
    if (!e->text) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto fail;
    }
    gm_config_opts quiet = e->opts;
    quiet.warn = NULL;
    if ((rc = gm_config_parse(&e->cfg, e->path, e->text, e->len, &quiet, err)) != 0)
        goto fail;
    *out = e;
    return 0;
fail:
    gm_config_edit_close(e);
    return rc ? rc : GM_EIO;
}

int gm_config_edit_commit(gm_config_edit *e, gm_err *err)
{
    char tmp[PATH_MAX + 8];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", e->path) >= (int)sizeof tmp)
        return gm_err_set(err, GM_EINVAL, "%s: path too long", e->path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, e->mode ? e->mode : 0644);
    if (fd < 0)
        return gm_err_errno(err, GM_EIO, errno, "%s", tmp);
    size_t done = 0;
    while (done < e->len) {
        ssize_t w = write(fd, e->text + done, e->len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int er = errno;
            close(fd);
            unlink(tmp);
            return gm_err_errno(err, GM_EIO, er ? er : EIO, "%s: write failed", tmp);
        }
        done += (size_t)w;
    }
    if (fchmod(fd, e->mode) != 0 || fsync(fd) != 0) {
        int er = errno;
        close(fd);
        unlink(tmp);
        return gm_err_errno(err, GM_EIO, er, "%s", tmp);
    }
    if (close(fd) != 0 || rename(tmp, e->path) != 0) {
        int er = errno;
        unlink(tmp);
        return gm_err_errno(err, GM_EIO, er, "%s: cannot replace the file", e->path);
    }
    if (e->lock_fd >= 0)
        fsync(e->lock_fd); /* the rename itself, on the folder */
    return 0;
}

void gm_config_edit_close(gm_config_edit *e)
{
    if (!e)
        return;
    if (e->lock_fd >= 0)
        close(e->lock_fd); /* releases the lock */
    gm_config_free(e->cfg);
    free(e->text);
    free(e->path);
    free(e->dir);
    free(e);
}
