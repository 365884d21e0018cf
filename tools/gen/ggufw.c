#include "ggufw.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/checked.h"

#define GGUFW_VERSION 3u
#define GGUFW_BUF_BYTES ((size_t)8 << 20) /* one I/O buffer; a multiple of GGUFW_PAGE */
#define GGUFW_NBUF 4                      /* one being filled, the others in flight */
#define GGUFW_NIO 2                       /* I/O threads: two writes in flight keep the disk busy */
#define GGUFW_PAGE ((size_t)4096)         /* O_DIRECT alignment of offsets, lengths, memory */
#define GGUFW_MAX_NAME 63                 /* ggml keeps tensor names in 64 bytes with the NUL */

/* A growable byte string for the serialised header. */
typedef struct bytebuf {
    uint8_t *p;
    size_t len, cap;
} bytebuf;

static int bb_reserve(bytebuf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    size_t need = b->len + extra;
    if (need < b->len)
        return GM_ENOMEM;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return GM_ENOMEM;
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return GM_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int bb_put(bytebuf *b, const void *data, size_t n)
{
    if (bb_reserve(b, n) != 0)
        return GM_ENOMEM;
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

/* GGUF is little-endian; so are the machines we run on (checked in gm_ggufw_create). */
static int bb_u32(bytebuf *b, uint32_t v) { return bb_put(b, &v, 4); }
static int bb_u64(bytebuf *b, uint64_t v) { return bb_put(b, &v, 8); }
static int bb_str(bytebuf *b, const char *s, uint64_t len)
{
    if (bb_u64(b, len) != 0)
        return GM_ENOMEM;
    return bb_put(b, s, (size_t)len);
}

typedef struct tinfo {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[GM_GGUF_MAX_DIMS];
    uint64_t n_bytes; /* data bytes without padding */
    uint64_t offset;  /* from the start of the data section, aligned */
} tinfo;

/* Buffer states, shared with the I/O threads under mu. */
enum { BUF_FREE = 0, BUF_FULL = 1, BUF_WRITING = 2 };

struct gm_ggufw {
    char *path;
    char *tmp_path;
    int fd;
    bool direct;
    bool begun, sparse, finished;
    uint32_t alignment;

    bytebuf kv;          /* serialised key/value pairs */
    uint64_t n_kv;
    char **keys;         /* for the uniqueness check */
    size_t cap_keys;

    tinfo *t;
    uint64_t n_t, cap_t;
    uint64_t data_offset, data_bytes, file_size;

    /* Tensor streaming position. */
    uint64_t cur_t;          /* tensor being written */
    uint64_t cur_written;    /* bytes of it given so far */
    uint64_t data_written;   /* tensor bytes given so far, all tensors */

    /* Ring of I/O buffers: the caller fills buf[cur]; the I/O threads take full ones in ring
     * order (next_io) and write them, at most GGUFW_NIO at a time. */
    uint8_t *buf[GGUFW_NBUF];
    size_t buf_len[GGUFW_NBUF];
    uint64_t buf_off[GGUFW_NBUF];
    int buf_state[GGUFW_NBUF];
    int cur;                 /* buffer being filled */
    size_t fill;             /* bytes in buf[cur] */
    uint64_t stream_pos;     /* file offset of buf[cur][0] */

    pthread_t th[GGUFW_NIO];
    int n_th;                /* I/O threads started */
    bool th_started;
    bool sync_init;          /* mu and cv initialised */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int next_io;             /* next buffer of the ring for an I/O thread */
    bool stop;
    int io_errno;            /* first error of the I/O threads (0: none) */
    uint64_t io_err_off;
};

/* ---- I/O thread ---------------------------------------------------------------------------- */

static int write_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (r == 0)
            return EIO;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Buffered mode: once the buffer at off is written, every buffer more than GGUFW_NBUF buffers
 * back is on its way (the ring holds no older one): wait for that one to reach the disk and drop
 * its pages, so the page cache never holds more than a few buffers of the file. */
static void drop_behind(int fd, uint64_t off)
{
    uint64_t lag = (uint64_t)GGUFW_NBUF * GGUFW_BUF_BYTES;
    if (off < lag + GGUFW_BUF_BYTES)
        return;
    off_t start = (off_t)(off - lag - GGUFW_BUF_BYTES);
    if (sync_file_range(fd, start, (off_t)GGUFW_BUF_BYTES,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                            SYNC_FILE_RANGE_WAIT_AFTER) == 0)
        (void)posix_fadvise(fd, start, (off_t)GGUFW_BUF_BYTES, POSIX_FADV_DONTNEED);
}

static void *io_main(void *arg)
{
    gm_ggufw *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (w->buf_state[w->next_io] != BUF_FULL && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->buf_state[w->next_io] != BUF_FULL) { /* stop requested and nothing left */
            pthread_mutex_unlock(&w->mu);
            return NULL;
        }
        int i = w->next_io;
        w->next_io = (i + 1) % GGUFW_NBUF;
        w->buf_state[i] = BUF_WRITING;
        bool failed = w->io_errno != 0;
        bool direct = w->direct;
        pthread_mutex_unlock(&w->mu);

        int e = 0;
        if (!failed) {
            e = write_all(w->fd, w->buf[i], w->buf_len[i], w->buf_off[i]);
            if (e == EINVAL && direct) {
                /* The filesystem accepted O_DIRECT at open but not for writes: go buffered. */
                int fl = fcntl(w->fd, F_GETFL);
                if (fl >= 0 && fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) == 0) {
                    direct = false;
                    e = write_all(w->fd, w->buf[i], w->buf_len[i], w->buf_off[i]);
                }
            }
            if (e == 0 && !direct)
                drop_behind(w->fd, w->buf_off[i]);
        }

        pthread_mutex_lock(&w->mu);
        if (!direct)
            w->direct = false;
        if (e != 0 && w->io_errno == 0) {
            w->io_errno = e;
            w->io_err_off = w->buf_off[i];
        }
        w->buf_state[i] = BUF_FREE;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

static int io_error(gm_ggufw *w, gm_err *err)
{
    pthread_mutex_lock(&w->mu);
    int e = w->io_errno;
    uint64_t off = w->io_err_off;
    pthread_mutex_unlock(&w->mu);
    if (e == 0)
        return 0;
    return gm_err_errno(err, GM_EIO, e, "%s: write at offset %llu failed", w->tmp_path,
                        (unsigned long long)off);
}

/* Hands buf[cur] (fill bytes, padded with zeros to a whole page) to the thread and waits until
 * the next buffer of the ring is free. */
static int submit_cur(gm_ggufw *w, gm_err *err)
{
    if (w->fill == 0)
        return 0;
    size_t len = w->fill;
    size_t padded = (len + GGUFW_PAGE - 1) / GGUFW_PAGE * GGUFW_PAGE;
    if (padded > len)
        memset(w->buf[w->cur] + len, 0, padded - len);
    pthread_mutex_lock(&w->mu);
    w->buf_len[w->cur] = padded;
    w->buf_off[w->cur] = w->stream_pos;
    w->buf_state[w->cur] = BUF_FULL;
    pthread_cond_broadcast(&w->cv);
    int next = (w->cur + 1) % GGUFW_NBUF;
    while (w->buf_state[next] != BUF_FREE)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    w->cur = next;
    w->stream_pos += len; /* only the last buffer may be partial; nothing follows it */
    w->fill = 0;
    return io_error(w, err);
}

/* Waits until every submitted buffer was written. */
static int drain(gm_ggufw *w, gm_err *err)
{
    pthread_mutex_lock(&w->mu);
    for (;;) {
        bool busy = false;
        for (int i = 0; i < GGUFW_NBUF; i++)
            busy |= w->buf_state[i] != BUF_FREE;
        if (!busy)
            break;
        pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return io_error(w, err);
}

static int stream_put(gm_ggufw *w, const void *data, size_t n, gm_err *err)
{
    const uint8_t *p = data;
    while (n > 0) {
        size_t room = GGUFW_BUF_BYTES - w->fill;
        size_t k = n < room ? n : room;
        if (p)
            memcpy(w->buf[w->cur] + w->fill, p, k);
        else
            memset(w->buf[w->cur] + w->fill, 0, k);
        w->fill += k;
        n -= k;
        if (p)
            p += k;
        if (w->fill == GGUFW_BUF_BYTES) {
            int rc = submit_cur(w, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* ---- creation ------------------------------------------------------------------------------ */

int gm_ggufw_create(gm_ggufw **out, const char *path, unsigned flags, gm_err *err)
{
    *out = NULL;
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1)
        return gm_err_set(err, GM_EUNSUPPORTED, "the GGUF writer needs a little-endian machine");
    if (!path || !path[0])
        return gm_err_set(err, GM_EINVAL, "no output path given");

    gm_ggufw *w = calloc(1, sizeof *w);
    if (!w)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    w->fd = -1;
    w->alignment = GM_GGUF_DEFAULT_ALIGNMENT;
    size_t plen = strlen(path);
    w->path = strdup(path);
    w->tmp_path = malloc(plen + 5);
    if (!w->path || !w->tmp_path) {
        gm_ggufw_destroy(w);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    memcpy(w->tmp_path, path, plen);
    memcpy(w->tmp_path + plen, ".tmp", 5);

    for (int i = 0; i < GGUFW_NBUF; i++) {
        void *b = NULL;
        if (posix_memalign(&b, GGUFW_PAGE, GGUFW_BUF_BYTES) != 0) {
            gm_ggufw_destroy(w);
            return gm_err_set(err, GM_ENOMEM, "out of memory for the write buffers");
        }
        w->buf[i] = b;
    }

    w->fd = -1;
    errno = EINVAL;
    if (flags & GM_GGUFW_DIRECT)
        w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    w->direct = w->fd >= 0;
    if (w->fd < 0 && errno == EINVAL) /* buffered asked for, or no O_DIRECT here */
        w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        free(w->tmp_path); /* nothing to remove */
        w->tmp_path = NULL;
        gm_ggufw_destroy(w);
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        return gm_err_errno(err, GM_EIO, e, "%s: cannot create", tmp);
    }
    if (pthread_mutex_init(&w->mu, NULL) != 0)
        goto no_sync;
    if (pthread_cond_init(&w->cv, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        goto no_sync;
    }
    w->sync_init = true;
    w->th_started = true;
    for (int i = 0; i < GGUFW_NIO; i++) {
        if (pthread_create(&w->th[i], NULL, io_main, w) != 0) {
            gm_ggufw_destroy(w);
            return gm_err_set(err, GM_ENOMEM, "cannot start the writer threads");
        }
        w->n_th++;
    }
    *out = w;
    return 0;
no_sync:
    gm_ggufw_destroy(w);
    return gm_err_set(err, GM_ENOMEM, "cannot create a mutex");
}

static void stop_thread(gm_ggufw *w)
{
    if (!w->th_started)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->n_th; i++)
        pthread_join(w->th[i], NULL);
    w->n_th = 0;
    w->th_started = false;
}

void gm_ggufw_destroy(gm_ggufw *w)
{
    if (!w)
        return;
    if (w->th_started) {
        /* Abandoning: mark every queued buffer done after the thread stops. */
        pthread_mutex_lock(&w->mu);
        if (w->io_errno == 0)
            w->io_errno = ECANCELED;
        pthread_mutex_unlock(&w->mu);
        stop_thread(w);
    }
    if (w->sync_init) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
    }
    if (w->fd >= 0)
        close(w->fd);
    if (!w->finished && w->tmp_path)
        unlink(w->tmp_path);
    for (int i = 0; i < GGUFW_NBUF; i++)
        free(w->buf[i]);
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->kv.p);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

/* ---- metadata ------------------------------------------------------------------------------ */

static int check_open_for_header(gm_ggufw *w, gm_err *err)
{
    if (w->begun)
        return gm_err_set(err, GM_EINVAL, "%s: metadata and tensor infos must come before the data",
                          w->path);
    return 0;
}

bool gm_ggufw_has_key(const gm_ggufw *w, const char *key)
{
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0)
            return true;
    return false;
}

/* Appends key and type; the caller appends the value. */
static int kv_begin(gm_ggufw *w, const char *key, gm_gguf_vtype vtype, gm_err *err)
{
    int rc = check_open_for_header(w, err);
    if (rc)
        return rc;
    if (!key || !key[0])
        return gm_err_set(err, GM_EINVAL, "metadata key is empty");
    if ((unsigned)vtype >= GM_GGUF_VTYPE_COUNT)
        return gm_err_set(err, GM_EINVAL, "%s: unknown value type %d", key, (int)vtype);
    if (gm_ggufw_has_key(w, key))
        return gm_err_set(err, GM_EINVAL, "metadata key %s is set twice", key);
    if (w->n_kv == w->cap_keys) {
        size_t cap = w->cap_keys ? w->cap_keys * 2 : 64;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (!k)
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        w->keys = k;
        w->cap_keys = cap;
    }
    char *copy = strdup(key);
    if (!copy)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    if (bb_str(&w->kv, key, strlen(key)) != 0 || bb_u32(&w->kv, (uint32_t)vtype) != 0) {
        free(copy);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    w->keys[w->n_kv++] = copy;
    return 0;
}

static int kv_scalar(gm_ggufw *w, const char *key, gm_gguf_vtype vt, const void *v, size_t n,
                     gm_err *err)
{
    int rc = kv_begin(w, key, vt, err);
    if (rc)
        return rc;
    if (bb_put(&w->kv, v, n) != 0)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    return 0;
}

int gm_ggufw_set_u8(gm_ggufw *w, const char *key, uint8_t v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_U8, &v, 1, err);
}
int gm_ggufw_set_i8(gm_ggufw *w, const char *key, int8_t v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_I8, &v, 1, err);
}
int gm_ggufw_set_u16(gm_ggufw *w, const char *key, uint16_t v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_U16, &v, 2, err);
}
int gm_ggufw_set_i16(gm_ggufw *w, const char *key, int16_t v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_I16, &v, 2, err);
}
int gm_ggufw_set_u32(gm_ggufw *w, const char *key, uint32_t v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_U32, &v, 4, err);
}
int gm_ggufw_set_i32(gm_ggufw *w, const char *key, int32_t v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_I32, &v, 4, err);
}
int gm_ggufw_set_u64(gm_ggufw *w, const char *key, uint64_t v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_U64, &v, 8, err);
}
int gm_ggufw_set_i64(gm_ggufw *w, const char *key, int64_t v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_I64, &v, 8, err);
}
int gm_ggufw_set_f32(gm_ggufw *w, const char *key, float v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_F32, &v, 4, err);
}
int gm_ggufw_set_f64(gm_ggufw *w, const char *key, double v, gm_err *err)
{
    return kv_scalar(w, key, GM_GGUF_F64, &v, 8, err);
}
int gm_ggufw_set_bool(gm_ggufw *w, const char *key, bool v, gm_err *err)
{
    uint8_t b = v ? 1 : 0;
    return kv_scalar(w, key, GM_GGUF_BOOL, &b, 1, err);
}

int gm_ggufw_set_strn(gm_ggufw *w, const char *key, const char *v, uint64_t len, gm_err *err)
{
    if (!v && len)
        return gm_err_set(err, GM_EINVAL, "%s: NULL string", key ? key : "?");
    int rc = kv_begin(w, key, GM_GGUF_STRING, err);
    if (rc)
        return rc;
    if (bb_str(&w->kv, v, len) != 0)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    return 0;
}

int gm_ggufw_set_str(gm_ggufw *w, const char *key, const char *v, gm_err *err)
{
    return gm_ggufw_set_strn(w, key, v, v ? strlen(v) : 0, err);
}

static size_t scalar_size(gm_gguf_vtype t)
{
    switch (t) {
    case GM_GGUF_U8: case GM_GGUF_I8: case GM_GGUF_BOOL: return 1;
    case GM_GGUF_U16: case GM_GGUF_I16: return 2;
    case GM_GGUF_U32: case GM_GGUF_I32: case GM_GGUF_F32: return 4;
    case GM_GGUF_U64: case GM_GGUF_I64: case GM_GGUF_F64: return 8;
    default: return 0;
    }
}

int gm_ggufw_set_arr(gm_ggufw *w, const char *key, gm_gguf_vtype elem_type, const void *data,
                     uint64_t n, gm_err *err)
{
    size_t es = scalar_size(elem_type);
    if (es == 0)
        return gm_err_set(err, GM_EINVAL, "%s: array elements must be scalars", key ? key : "?");
    uint64_t bytes;
    if (!gm_mul_u64(n, es, &bytes) || bytes > SIZE_MAX)
        return gm_err_set(err, GM_ERANGE, "%s: array too large", key ? key : "?");
    if (!data && n)
        return gm_err_set(err, GM_EINVAL, "%s: NULL array data", key ? key : "?");
    int rc = kv_begin(w, key, GM_GGUF_ARRAY, err);
    if (rc)
        return rc;
    if (bb_u32(&w->kv, (uint32_t)elem_type) != 0 || bb_u64(&w->kv, n) != 0 ||
        bb_put(&w->kv, data, (size_t)bytes) != 0)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    return 0;
}

int gm_ggufw_set_arr_str(gm_ggufw *w, const char *key, const char *const *strs,
                         const uint64_t *lens, uint64_t n, gm_err *err)
{
    if (!strs && n)
        return gm_err_set(err, GM_EINVAL, "%s: NULL string array", key ? key : "?");
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i] && (!lens || lens[i]))
            return gm_err_set(err, GM_EINVAL, "%s: string %llu is NULL", key ? key : "?",
                              (unsigned long long)i);
    int rc = kv_begin(w, key, GM_GGUF_ARRAY, err);
    if (rc)
        return rc;
    if (bb_u32(&w->kv, GM_GGUF_STRING) != 0 || bb_u64(&w->kv, n) != 0)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = lens ? lens[i] : strlen(strs[i]);
        if (bb_str(&w->kv, strs[i], len) != 0)
            return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    return 0;
}

int gm_ggufw_set_raw(gm_ggufw *w, const char *key, gm_gguf_vtype vtype, const void *bytes,
                     size_t n_bytes, gm_err *err)
{
    if (!bytes && n_bytes)
        return gm_err_set(err, GM_EINVAL, "%s: NULL value", key ? key : "?");
    int rc = kv_begin(w, key, vtype, err);
    if (rc)
        return rc;
    if (bb_put(&w->kv, bytes, n_bytes) != 0)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    return 0;
}

int gm_ggufw_set_alignment(gm_ggufw *w, uint32_t alignment, gm_err *err)
{
    int rc = check_open_for_header(w, err);
    if (rc)
        return rc;
    if (alignment < 8 || alignment > 65536 || (alignment & (alignment - 1)) != 0)
        return gm_err_set(err, GM_EINVAL, "alignment %u is not a power of two in 8..65536",
                          alignment);
    if (alignment != GM_GGUF_DEFAULT_ALIGNMENT) {
        if (gm_ggufw_has_key(w, "general.alignment"))
            return gm_err_set(err, GM_EINVAL, "alignment set twice");
        rc = gm_ggufw_set_u32(w, "general.alignment", alignment, err);
        if (rc)
            return rc;
    }
    w->alignment = alignment;
    return 0;
}

/* ---- tensor infos -------------------------------------------------------------------------- */

int gm_ggufw_add_tensor(gm_ggufw *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *ne, gm_err *err)
{
    int rc = check_open_for_header(w, err);
    if (rc)
        return rc;
    if (!name || !name[0] || strlen(name) > GGUFW_MAX_NAME)
        return gm_err_set(err, GM_EINVAL, "tensor name '%s' is empty or longer than %d bytes",
                          name ? name : "", GGUFW_MAX_NAME);
    const gm_type_info *ti = gm_type_get(type);
    if (!ti)
        return gm_err_set(err, GM_EINVAL, "%s: unknown tensor type %u", name, type);
    if (n_dims < 1 || n_dims > GM_GGUF_MAX_DIMS)
        return gm_err_set(err, GM_EINVAL, "%s: %u dims (1..%d allowed)", name, n_dims,
                          GM_GGUF_MAX_DIMS);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0)
            return gm_err_set(err, GM_EINVAL, "%s: dim %u is 0", name, d);
        if (!gm_mul_u64(n_elems, ne[d], &n_elems))
            return gm_err_set(err, GM_ERANGE, "%s: element count overflows", name);
    }
    uint64_t row_bytes;
    gm_err sub = {0};
    if (gm_type_row_bytes(type, ne[0], &row_bytes, &sub) != 0)
        return gm_err_set(err, GM_EINVAL, "%s: %s", name, sub.msg);
    uint64_t n_bytes;
    if (!gm_mul_u64(row_bytes, n_elems / ne[0], &n_bytes))
        return gm_err_set(err, GM_ERANGE, "%s: size overflows", name);
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return gm_err_set(err, GM_EINVAL, "tensor %s is added twice", name);
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? w->cap_t * 2 : 256;
        tinfo *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t)
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        w->t = t;
        w->cap_t = cap;
    }
    tinfo *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < GM_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->n_bytes = n_bytes;
    w->n_t++;
    return 0;
}

uint64_t gm_ggufw_n_tensors(const gm_ggufw *w) { return w->n_t; }

/* ---- data ---------------------------------------------------------------------------------- */

int gm_ggufw_begin_data(gm_ggufw *w, bool sparse, gm_err *err)
{
    int rc = check_open_for_header(w, err);
    if (rc)
        return rc;

    /* Offsets of the tensors within the data section. */
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t end;
        if (!gm_add_u64(off, w->t[i].n_bytes, &end) ||
            !gm_align_up_u64(end, w->alignment, &off))
            return gm_err_set(err, GM_ERANGE, "%s: the tensor data does not fit in 64 bits",
                              w->path);
    }
    w->data_bytes = off;

    bytebuf h = {0};
    bool ok = bb_put(&h, "GGUF", 4) == 0 && bb_u32(&h, GGUFW_VERSION) == 0 &&
              bb_u64(&h, w->n_t) == 0 && bb_u64(&h, w->n_kv) == 0 &&
              bb_put(&h, w->kv.p, w->kv.len) == 0;
    for (uint64_t i = 0; ok && i < w->n_t; i++) {
        const tinfo *t = &w->t[i];
        ok = bb_str(&h, t->name, strlen(t->name)) == 0 && bb_u32(&h, t->n_dims) == 0;
        for (uint32_t d = 0; ok && d < t->n_dims; d++)
            ok = bb_u64(&h, t->ne[d]) == 0;
        ok = ok && bb_u32(&h, t->type) == 0 && bb_u64(&h, t->offset) == 0;
    }
    uint64_t data_off = 0;
    if (ok && gm_align_up_u64(h.len, w->alignment, &data_off))
        ok = bb_reserve(&h, (size_t)(data_off - h.len)) == 0;
    if (!ok) {
        free(h.p);
        return gm_err_set(err, GM_ENOMEM, "out of memory for the GGUF header");
    }
    memset(h.p + h.len, 0, (size_t)(data_off - h.len));
    h.len = (size_t)data_off;
    w->data_offset = data_off;
    if (!gm_add_u64(data_off, w->data_bytes, &w->file_size)) {
        free(h.p);
        return gm_err_set(err, GM_ERANGE, "%s: the file size does not fit in 64 bits", w->path);
    }
    w->begun = true;
    w->sparse = sparse;
    free(w->kv.p); /* the header holds it now */
    w->kv = (bytebuf){0};

    if (!sparse) {
        /* Reserve the whole file now: a full disk fails here rather than after hours, and
         * O_DIRECT writes go into allocated blocks (ext4 routes O_DIRECT writes that extend a
         * file through the page cache). Filesystems without fallocate skip this: fallocate(2),
         * not posix_fallocate, which would emulate it by writing a byte into every block. */
        int e = fallocate(w->fd, 0, 0, (off_t)w->file_size) == 0 ? 0 : errno;
        if (e == ENOSPC || e == EFBIG) {
            free(h.p);
            return gm_err_errno(err, GM_EIO, e, "%s: cannot reserve %llu bytes", w->tmp_path,
                                (unsigned long long)w->file_size);
        }
    }
    rc = stream_put(w, h.p, h.len, err);
    free(h.p);
    if (rc)
        return rc;
    if (sparse) {
        rc = submit_cur(w, err);
        if (!rc)
            rc = drain(w, err);
        if (rc)
            return rc;
        if (ftruncate(w->fd, (off_t)w->file_size) != 0)
            return gm_err_errno(err, GM_EIO, errno, "%s: cannot extend to %llu bytes",
                                w->tmp_path, (unsigned long long)w->file_size);
    }
    return 0;
}

uint64_t gm_ggufw_data_offset(const gm_ggufw *w) { return w->data_offset; }
uint64_t gm_ggufw_file_size(const gm_ggufw *w) { return w->file_size; }
uint64_t gm_ggufw_data_written(const gm_ggufw *w) { return w->data_written; }

bool gm_ggufw_is_direct(const gm_ggufw *w)
{
    pthread_mutex_lock((pthread_mutex_t *)&w->mu);
    bool d = w->direct;
    pthread_mutex_unlock((pthread_mutex_t *)&w->mu);
    return d;
}

static int check_streaming(gm_ggufw *w, gm_err *err)
{
    if (!w->begun || w->finished)
        return gm_err_set(err, GM_EINVAL, "%s: tensor data outside begin_data .. finish", w->path);
    if (w->sparse)
        return gm_err_set(err, GM_EINVAL, "%s: a sparse file takes no tensor data", w->path);
    return 0;
}

uint8_t *gm_ggufw_buf(gm_ggufw *w, size_t *avail, gm_err *err)
{
    *avail = 0;
    if (check_streaming(w, err) != 0)
        return NULL;
    if (w->cur_t >= w->n_t)
        return w->buf[w->cur] + w->fill;
    if (w->fill == GGUFW_BUF_BYTES && submit_cur(w, err) != 0)
        return NULL;
    uint64_t left = w->t[w->cur_t].n_bytes - w->cur_written;
    size_t room = GGUFW_BUF_BYTES - w->fill;
    *avail = left < room ? (size_t)left : room;
    return w->buf[w->cur] + w->fill;
}

int gm_ggufw_commit(gm_ggufw *w, size_t n, gm_err *err)
{
    int rc = check_streaming(w, err);
    if (rc)
        return rc;
    if (n == 0)
        return 0;
    if (w->cur_t >= w->n_t)
        return gm_err_set(err, GM_EINVAL, "%s: more tensor data than the tensors hold", w->path);
    uint64_t left = w->t[w->cur_t].n_bytes - w->cur_written;
    if (n > left || n > GGUFW_BUF_BYTES - w->fill)
        return gm_err_set(err, GM_EINVAL, "%s: commit of %zu bytes past the space given", w->path,
                          n);
    w->fill += n;
    w->cur_written += n;
    w->data_written += n;
    if (w->cur_written == w->t[w->cur_t].n_bytes) {
        const tinfo *t = &w->t[w->cur_t];
        uint64_t pad = (w->alignment - t->n_bytes % w->alignment) % w->alignment;
        w->cur_t++;
        w->cur_written = 0;
        if (pad) {
            rc = stream_put(w, NULL, (size_t)pad, err);
            if (rc)
                return rc;
        }
    }
    if (w->fill == GGUFW_BUF_BYTES)
        return submit_cur(w, err);
    return 0;
}

int gm_ggufw_write(gm_ggufw *w, const void *data, size_t n, gm_err *err)
{
    const uint8_t *p = data;
    while (n > 0) {
        size_t avail;
        uint8_t *dst = gm_ggufw_buf(w, &avail, err);
        if (!dst)
            return err && err->code ? err->code : GM_EINVAL;
        if (avail == 0)
            return gm_err_set(err, GM_EINVAL, "%s: more tensor data than the tensors hold",
                              w->path);
        size_t k = n < avail ? n : avail;
        memcpy(dst, p, k);
        int rc = gm_ggufw_commit(w, k, err);
        if (rc)
            return rc;
        p += k;
        n -= k;
    }
    return 0;
}

int gm_ggufw_finish(gm_ggufw *w, gm_err *err)
{
    if (!w->begun)
        return gm_err_set(err, GM_EINVAL, "%s: finish before begin_data", w->path);
    if (w->finished)
        return gm_err_set(err, GM_EINVAL, "%s: finished twice", w->path);
    if (!w->sparse && w->cur_t < w->n_t)
        return gm_err_set(err, GM_EINVAL, "%s: tensor %s has %llu of %llu bytes", w->path,
                          w->t[w->cur_t].name, (unsigned long long)w->cur_written,
                          (unsigned long long)w->t[w->cur_t].n_bytes);
    int rc = submit_cur(w, err);
    if (!rc)
        rc = drain(w, err);
    if (rc)
        return rc;
    stop_thread(w);
    /* The last buffer was padded to a whole page; cut the file to its real size. */
    if (ftruncate(w->fd, (off_t)w->file_size) != 0)
        return gm_err_errno(err, GM_EIO, errno, "%s: cannot set the size", w->tmp_path);
    if (fsync(w->fd) != 0)
        return gm_err_errno(err, GM_EIO, errno, "%s: fsync failed", w->tmp_path);
    /* The last buffers' pages are clean now: drop them too (benchmarks want a cold cache). */
    (void)posix_fadvise(w->fd, 0, 0, POSIX_FADV_DONTNEED);
    struct stat st;
    if (fstat(w->fd, &st) != 0 || (uint64_t)st.st_size != w->file_size)
        return gm_err_set(err, GM_EIO, "%s: size is not the %llu bytes written", w->tmp_path,
                          (unsigned long long)w->file_size);
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0)
        return gm_err_errno(err, GM_EIO, errno, "%s: close failed", w->tmp_path);
    if (rename(w->tmp_path, w->path) != 0)
        return gm_err_errno(err, GM_EIO, errno, "cannot rename %s to %s", w->tmp_path, w->path);
    w->finished = true;
    return 0;
}
