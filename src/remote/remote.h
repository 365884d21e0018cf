/* remote: model files on a web server or the Hugging Face hub, read over HTTP(S) with libcurl.
 *
 * Owns: the forms a remote model is named by (gm_ref), the hub's file listing, header reads by
 * range requests (so a remote file gets the same plan and verdict as a local one without being
 * downloaded), and downloads that resume from a .part file and check the size and sha256.
 * Nothing here prints or reads the environment: the caller passes the hub's address, the token
 * and the stall limit (gm_remote_opts), and gets progress through a callback.
 *
 * Ref forms (gm_ref_parse):
 *   hf://ORG/REPO/PATH.gguf[@REV]   a file of a hub repo (also hf:ORG/REPO/PATH.gguf)
 *   ORG/REPO:QUANT                  the one model of the repo whose file name has QUANT in it
 *   https://HUB/ORG/REPO/resolve|blob/REV/PATH.gguf   the hub's own addresses, taken as hf://
 *   http(s)://ANY/PATH/FILE.gguf    a file on any server
 * A file of a split set is named by any of its parts; every part is read.
 *
 * Authentication: the token goes as "Authorization: Bearer" to the hub's host only, never to
 * another host, a redirect's included (libcurl sends bearer auth to the first host alone).
 * Threads: the caller's; curl_global_init is done once, on first use, under a lock.
 */
#ifndef GM_REMOTE_REMOTE_H
#define GM_REMOTE_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

#define GM_REMOTE_DEFAULT_ENDPOINT "https://huggingface.co"
#define GM_REMOTE_DEFAULT_STALL_S 30u
#define GM_REMOTE_FIRST_READ_BYTES (4ull << 20)
#define GM_REMOTE_DEFAULT_MAX_BYTES (128ull << 20)

typedef struct gm_remote_opts {
    const char *endpoint;  /* the hub's base URL; NULL: GM_REMOTE_DEFAULT_ENDPOINT */
    const char *token;     /* bearer token for the hub's host; NULL or "": none */
    uint32_t stall_s;      /* give a transfer up after this many seconds without a byte (0: default) */
} gm_remote_opts;

typedef enum gm_ref_kind {
    GM_REF_LOCAL = 0,  /* not a remote form: a path */
    GM_REF_HUB_FILE,   /* hf://ORG/REPO/PATH.gguf */
    GM_REF_HUB_QUANT,  /* ORG/REPO:QUANT */
    GM_REF_URL,        /* any other http(s) URL */
} gm_ref_kind;

typedef struct gm_ref {
    gm_ref_kind kind;
    char repo[256];    /* ORG/REPO */
    char rev[128];     /* revision, "main" by default */
    char path[1024];   /* file path in the repo (HUB_FILE) */
    char quant[64];    /* HUB_QUANT */
    char url[4096];    /* URL */
} gm_ref;

/* Parses s. A string that is no remote form is GM_REF_LOCAL (0 returned); a remote form with a
 * fault (no file name, "..", a path that is not a .gguf) is GM_EINVAL with the reason. */
int gm_ref_parse(const char *s, gm_ref *r, gm_err *err);
/* The canonical name of a hub file: "hf://ORG/REPO/PATH" (with "@REV" unless main). */
void gm_ref_hub_name(const char *repo, const char *rev, const char *path, char *buf, size_t len);

/* A remote file set: every part with its URL, its size and sha256 when known. */
typedef struct gm_remote_part {
    char *url;
    char *name;          /* the part's file name (last path segment) */
    uint64_t size;       /* 0: unknown until read */
    char sha256[65];     /* lowercase hex, "" when unknown */
} gm_remote_part;

typedef struct gm_remote_set {
    char *name;          /* hf://... or the URL of the first part */
    char *repo;          /* ORG/REPO for a hub file, else NULL */
    gm_remote_part *parts;
    uint32_t n_parts;
} gm_remote_set;

/* Resolves r into its parts. A hub ref is checked against the repo's listing (its sizes and
 * hashes are kept); a QUANT ref picks the one model that matches (resolved_to gets its hf://
 * name, else ""), failing with GM_ENOTFOUND when none does and GM_EINVAL, listing them, when
 * several do. A plain URL's parts are named from its split pattern, sizes learnt on reading. */
int gm_remote_resolve(const gm_remote_opts *o, const gm_ref *r, gm_remote_set *out, char *resolved_to,
                      size_t resolved_len, gm_err *err);
void gm_remote_set_free(gm_remote_set *s);

/* Opens the set's header by range requests: the first GM_REMOTE_FIRST_READ_BYTES of each part
 * (or max_bytes if smaller), four times as much while the header goes on, up to max_bytes
 * (0: GM_REMOTE_DEFAULT_MAX_BYTES). Fills the parts' sizes. bytes_read (may be NULL) gets the
 * bytes fetched in all. The result is header-only (gm_gguf_header_only). */
int gm_remote_open_header(const gm_remote_opts *o, gm_remote_set *s, uint64_t max_bytes,
                          gm_gguf **out, uint64_t *bytes_read, gm_err *err);

/* Downloads url into part_path, appending to what part_path holds (a "Range: bytes=N-" request;
 * a server that answers 200 instead restarts it from zero). expect_size (0: unknown) and
 * sha256 ("" or NULL: unknown; the server's X-Linked-Etag is used then) are checked at the end:
 * a short body is GM_EIO "connection closed early ... re-run to resume from the .part" (the
 * .part is kept), a size or hash mismatch GM_EFORMAT (the .part is removed, it cannot be
 * resumed). The .part is fsynced before a success returns; the caller renames it. */
typedef void (*gm_remote_progress_fn)(void *ctx, uint64_t done_bytes, uint64_t total_bytes);
typedef struct gm_download_info {
    uint64_t resumed_from;  /* bytes the .part held and the server continued from */
    uint64_t total;         /* the file's size */
    bool restarted;         /* the server ignored the range: the .part was started again */
    bool hash_checked;      /* a sha256 was known and matched */
} gm_download_info;
int gm_remote_download(const gm_remote_opts *o, const char *url, const char *part_path,
                       uint64_t expect_size, const char *sha256, gm_remote_progress_fn progress,
                       void *ctx, gm_download_info *info, gm_err *err);

#endif
