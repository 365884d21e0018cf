/* remote/download: a file fetched into its .part, resumed by a range request, checked by size
 * and sha256. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remote/internal.h"

typedef struct file_sink {
    gm_http_req req;
    int fd;
    const char *part_path;
    uint64_t have;        /* bytes of the .part before this response */
    uint64_t written;     /* bytes of this response written */
    EVP_MD_CTX *md;       /* NULL: no hash wanted */
    bool restarted;
    int write_errno;
    gm_remote_progress_fn progress;
    void *ctx;
} file_sink;

/* The final status: a 200 to a range request restarts the .part from zero. */
static int file_status(gm_http_req *q)
{
    file_sink *f = (file_sink *)q;
    if (q->status == 200 && f->have > 0) {
        if (ftruncate(f->fd, 0) != 0) {
            f->write_errno = errno;
            q->sink_failed = true;
            return -1;
        }
        f->have = 0;
        f->restarted = true;
        if (f->md)
            EVP_DigestInit_ex(f->md, EVP_sha256(), NULL);
    }
    return 0;
}

static int file_put(gm_http_req *q, const uint8_t *data, size_t len)
{
    file_sink *f = (file_sink *)q;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(f->fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            f->write_errno = w < 0 ? errno : EIO;
            q->sink_failed = true;
            return -1;
        }
        off += (size_t)w;
    }
    if (f->md)
        EVP_DigestUpdate(f->md, data, len);
    f->written += len;
    return 0;
}

static void file_progress(gm_http_req *q, uint64_t now, uint64_t total)
{
    file_sink *f = (file_sink *)q;
    if (f->progress)
        f->progress(f->ctx, f->have + now, total ? f->have + total : 0);
}

/* Hashes the first n bytes of fd into md. */
static int hash_existing(int fd, uint64_t n, EVP_MD_CTX *md, const char *path, gm_err *err)
{
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    uint64_t at = 0;
    while (at < n) {
        size_t want = n - at < CHUNK ? (size_t)(n - at) : CHUNK;
        ssize_t r = pread(fd, buf, want, (off_t)at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            return gm_err_errno(err, GM_EIO, r < 0 ? errno : EIO, "%s: cannot read the partial download", path);
        }
        EVP_DigestUpdate(md, buf, (size_t)r);
        at += (uint64_t)r;
    }
    free(buf);
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int gm_remote_download(const gm_remote_opts *o, const char *url, const char *part_path, uint64_t expect_size,
                       const char *sha256, gm_remote_progress_fn progress, void *ctx, gm_download_info *info,
                       gm_err *err)
{
    gm_download_info dummy;
    if (!info)
        info = &dummy;
    memset(info, 0, sizeof *info);
    file_sink f = {.fd = -1, .part_path = part_path, .progress = progress, .ctx = ctx};
    f.fd = open(part_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644); /* read too: a resumed .part is hashed */
    if (f.fd < 0)
        return gm_err_errno(err, GM_EIO, errno, "%s: cannot open for writing", part_path);
    int rc = 0;
    struct stat st;
    if (fstat(f.fd, &st) != 0) {
        rc = gm_err_errno(err, GM_EIO, errno, "%s: cannot stat", part_path);
        goto out;
    }
    f.have = (uint64_t)st.st_size;
    if (expect_size && f.have > expect_size) {
        /* longer than the file: not a prefix of it */
        if (ftruncate(f.fd, 0) != 0) {
            rc = gm_err_errno(err, GM_EIO, errno, "%s: cannot truncate", part_path);
            goto out;
        }
        f.have = 0;
        info->restarted = true;
    }
    f.md = EVP_MD_CTX_new();
    if (!f.md || !EVP_DigestInit_ex(f.md, EVP_sha256(), NULL)) {
        rc = gm_err_set(err, GM_ENOMEM, "cannot start a sha256");
        goto out;
    }
    if (f.have && (rc = hash_existing(f.fd, f.have, f.md, part_path, err)))
        goto out;
    const uint64_t had = f.have;
    f.req.url = url;
    f.req.range_from = f.have;
    f.req.sink = file_put;
    f.req.on_status = file_status;
    f.req.progress = file_progress;
    if ((rc = gm_http_run(o, &f.req, err))) {
        /* a stall or a broken connection: what arrived stays in the .part */
        size_t len = strlen(err->msg);
        if (len + 40 < sizeof err->msg)
            snprintf(err->msg + len, sizeof err->msg - len, " - re-run to resume from the .part");
        goto out;
    }
    if (f.req.sink_failed) {
        rc = gm_err_errno(err, GM_EIO, f.write_errno, "%s: cannot write", part_path);
        goto out;
    }
    info->restarted |= f.restarted;
    uint64_t total = 0;
    if (f.req.status == 416) {
        /* the .part may already be whole */
        if (f.req.range_total >= 0 && (uint64_t)f.req.range_total == had) {
            total = had;
        } else {
            rc = gm_err_set(err, GM_EFORMAT,
                            "stale partial download: %s holds %" PRIu64 " bytes, the server's file has %lld; "
                            "the .part was removed, re-run to download again",
                            part_path, had, f.req.range_total);
            unlink(part_path);
            goto out;
        }
    } else if (f.req.status != 200 && f.req.status != 206) {
        rc = gm_http_status_error(&f.req, err);
        goto out;
    } else {
        if (f.req.status == 206 && f.req.range_start >= 0 && (uint64_t)f.req.range_start != had) {
            rc = gm_err_set(err, GM_EFORMAT, "%s: asked for bytes from %" PRIu64 ", the server sent from %lld", url,
                            had, f.req.range_start);
            unlink(part_path);
            goto out;
        }
        if (f.req.range_total >= 0)
            total = (uint64_t)f.req.range_total;
        else if (f.req.content_length >= 0)
            total = f.have + (uint64_t)f.req.content_length;
        else
            total = expect_size;
    }
    info->resumed_from = f.restarted ? 0 : had;
    info->total = total;
    uint64_t now = f.have + f.written;
    if (total && now < total) {
        rc = gm_err_set(err, GM_EIO,
                        "connection closed early: got %" PRIu64 " of %" PRIu64 " bytes for %s - re-run to resume "
                        "from the .part",
                        now, total, base_name(part_path));
        goto out;
    }
    if ((expect_size && now != expect_size) || (total && now != total)) {
        rc = gm_err_set(err, GM_EFORMAT, "%s: %" PRIu64 " bytes arrived, the file has %" PRIu64
                        "; the .part was removed", base_name(part_path), now, expect_size ? expect_size : total);
        unlink(part_path);
        goto out;
    }
    const char *want = sha256 && *sha256 ? sha256 : f.req.linked_etag[0] ? f.req.linked_etag : NULL;
    if (want) {
        unsigned char md[32];
        unsigned int mdlen = 0;
        char hex[65];
        EVP_DigestFinal_ex(f.md, md, &mdlen);
        for (unsigned i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", md[i]);
        if (strcasecmp(hex, want) != 0) {
            rc = gm_err_set(err, GM_EFORMAT,
                            "sha256 mismatch for %s: got %s, the server says %s; the .part was removed, re-run to "
                            "download it again",
                            base_name(part_path), hex, want);
            unlink(part_path);
            goto out;
        }
        info->hash_checked = true;
    }
    if (fsync(f.fd) != 0) {
        rc = gm_err_errno(err, GM_EIO, errno, "%s: cannot sync to disk", part_path);
        goto out;
    }
out:
    if (f.md)
        EVP_MD_CTX_free(f.md);
    if (f.fd >= 0)
        close(f.fd);
    return rc;
}
