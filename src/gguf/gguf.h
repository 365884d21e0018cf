/* gguf/gguf: a bounds-checked reader of GGUF files (versions 2 and 3), split files included.
 *
 * Owns: an opened model file set. Each part is mapped read-only (the mapping costs no memory
 * until a page is touched; the header is the only part read at open). Every length and offset
 * taken from a file goes through an overflow-checked cursor bounded by the part's size, so a
 * corrupt, truncated or hostile file gives GM_EFORMAT with a message that names the file and
 * the problem, and never a crash, a hang or an allocation of more than a few times the size of
 * the header (array element indexes are bounded by a budget of 8 bytes of index per byte of
 * the file).
 *
 * Split files: opening "NAME-00001-of-0000N.gguf" opens all N parts. The parts must carry
 * split.no (0-based, matching the part's position), the same split.count = N, and together
 * exactly split.tensors.count tensors; metadata is taken from the first part.
 *
 * Checks at open: magic, version 2 or 3, key/tensor counts bounded by the bytes left, UTF-8
 * keys without NUL, unique keys, unique tensor names, 1 to 4 dims each > 0, element counts that
 * do not overflow, known tensor types with whole blocks per row, general.alignment a power of
 * two (default 32), tensor offsets aligned, tensor bytes inside their part, no two tensors of a
 * part overlapping.
 *
 * Threads: after gm_gguf_open returns, a gm_gguf is immutable and may be read from any thread;
 * gm_gguf_close must not race with readers.
 */
#ifndef GM_GGUF_GGUF_H
#define GM_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/types.h"

#define GM_GGUF_MAX_DIMS 4
#define GM_GGUF_MAX_PARTS 1024
#define GM_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types as stored in the file. */
typedef enum gm_gguf_vtype {
    GM_GGUF_U8 = 0,
    GM_GGUF_I8 = 1,
    GM_GGUF_U16 = 2,
    GM_GGUF_I16 = 3,
    GM_GGUF_U32 = 4,
    GM_GGUF_I32 = 5,
    GM_GGUF_F32 = 6,
    GM_GGUF_BOOL = 7,
    GM_GGUF_STRING = 8,
    GM_GGUF_ARRAY = 9,
    GM_GGUF_U64 = 10,
    GM_GGUF_I64 = 11,
    GM_GGUF_F64 = 12,
    GM_GGUF_VTYPE_COUNT = 13,
} gm_gguf_vtype;

/* A string inside the mapped file: not NUL-terminated. */
typedef struct gm_gguf_str {
    const char *ptr;
    uint64_t len;
} gm_gguf_str;

/* An array value. For scalar element types, data points at n packed little-endian elements.
 * For string and array elements use gm_gguf_arr_str / gm_gguf_arr_sub. */
typedef struct gm_gguf_arr {
    gm_gguf_vtype elem_type;
    uint64_t n;
    const uint8_t *data;      /* first element's bytes in the mapping */
    uint64_t data_bytes;      /* bytes of all elements */
    const uint64_t *offsets;  /* string/array elements: byte offset of element i from data */
    const struct gm_gguf_arr *subs; /* array elements: the parsed nested arrays */
} gm_gguf_arr;

/* A tensor of the file set. */
typedef struct gm_gguf_tensor {
    const char *name;            /* NUL-terminated copy */
    uint32_t type;               /* gm_type id (always a known one) */
    uint32_t n_dims;             /* 1..4 */
    uint64_t ne[GM_GGUF_MAX_DIMS]; /* ggml dims, innermost first; unused dims are 1 */
    uint64_t n_elems;
    uint64_t n_bytes;
    uint32_t part;               /* index of the part file that holds the data */
    uint64_t offset;             /* offset of the data within its part's data section */
    uint64_t file_offset;        /* absolute offset of the data in its part file */
} gm_gguf_tensor;

typedef struct gm_gguf gm_gguf;

/* Opens path (and, for a split name, every part). On failure *out is NULL and err says which
 * file and what is wrong: GM_EIO when a file cannot be opened or mapped (or is not a regular
 * file), GM_EFORMAT when its contents are invalid, GM_EUNSUPPORTED for GGUF version 1 and
 * big-endian files, GM_EINVAL when a split part other than the first is named, GM_ENOMEM. */
int gm_gguf_open(gm_gguf **out, const char *path, gm_err *err);
void gm_gguf_close(gm_gguf *g);

/* The header of a file set read from elsewhere (HTTP range reads): part i is given as its first
 * len bytes and the size of the whole part. Every check of gm_gguf_open holds, against the
 * parts' real sizes; path names the set as gm_gguf_open's does (a split name gives the count,
 * and n_parts must equal it). When a part's header runs past its len bytes the call fails with
 * GM_GGUF_NEED_MORE and *short_part (when not NULL) names the part, so the caller can read more
 * of it and try again; the bytes are copied, so the caller's buffers may be freed at once. The
 * result answers every metadata and tensor-table question; gm_gguf_tensor_data gives NULL for
 * tensors past the bytes given and gm_gguf_populate refuses. */
typedef struct gm_gguf_prefix {
    const char *path;   /* the part's name in messages (a URL) */
    const void *bytes;
    uint64_t len;       /* bytes given (at most size are used) */
    uint64_t size;      /* bytes of the whole part */
} gm_gguf_prefix;
#define GM_GGUF_NEED_MORE (-64) /* a header goes on past the bytes given */
int gm_gguf_open_prefixes(gm_gguf **out, const char *path, const gm_gguf_prefix *parts,
                          uint32_t n_parts, uint32_t *short_part, gm_err *err);
/* Recognises a split set's name, "PREFIX-NNNNN-of-MMMMM.gguf": the prefix's length, the part
 * number (1-based) and the count. */
bool gm_gguf_split_name(const char *path, size_t *prefix_len, unsigned *no, unsigned *count);
/* Whether g was opened by gm_gguf_open_prefixes. */
bool gm_gguf_header_only(const gm_gguf *g);

uint32_t gm_gguf_version(const gm_gguf *g);
uint32_t gm_gguf_alignment(const gm_gguf *g);
const char *gm_gguf_path(const gm_gguf *g);        /* the path as given */

/* Parts (1 for an unsplit file). */
uint32_t gm_gguf_n_parts(const gm_gguf *g);
const char *gm_gguf_part_path(const gm_gguf *g, uint32_t part);
uint64_t gm_gguf_part_size(const gm_gguf *g, uint32_t part);      /* bytes of the part file */
uint64_t gm_gguf_part_data_offset(const gm_gguf *g, uint32_t part); /* start of tensor data */
uint64_t gm_gguf_total_size(const gm_gguf *g);                    /* sum of part sizes */

/* Maps the tensor data of every part into the process's page tables now (MADV_POPULATE_READ:
 * read from the file where the page cache lacks it), in huge pages where the kernel can
 * (MADV_HUGEPAGE; large folios in the page cache), so that the first pass over the weights
 * takes no page faults and later passes few TLB misses. A sizeable part that the page cache
 * held mostly in small pages (a file written in small pieces and still cached) is dropped from
 * the cache and read again, which brings it in large folios, when a probe of 64 MiB read again
 * shows that this kernel and file system make them (else the rest is left as it is). On a
 * kernel without
 * MADV_POPULATE_READ (before Linux 5.14) the kernel is only asked to read ahead. Works in steps
 * of 256 MiB, calling progress (when not NULL) after each with the bytes done and in all (a
 * second read adds to both). info (when not NULL): what came of it. GM_EIO when the file cannot
 * be read; other refusals (no memory for the page tables) are not errors: the pages then fault
 * in on first use as before. */
typedef void (*gm_gguf_progress_fn)(void *ctx, uint64_t done_bytes, uint64_t total_bytes);
typedef struct gm_gguf_populate_info {
    uint64_t bytes;      /* of the parts' mappings */
    uint64_t huge_bytes; /* of those, mapped by huge pages (0 where /proc cannot tell) */
    bool reread;         /* a part was dropped from the page cache and read again */
} gm_gguf_populate_info;
int gm_gguf_populate(const gm_gguf *g, gm_gguf_progress_fn progress, void *ctx,
                     gm_gguf_populate_info *info, gm_err *err);
/* The same, leaving out the whole pages inside each tensor i with skip[i] set (skip: one flag a
 * tensor, NULL for none): a lookup table read from the file by row stays on disk. With a tensor
 * left out, the parts are read in one pass (no huge-page reread). */
int gm_gguf_populate_except(const gm_gguf *g, const uint8_t *skip, gm_gguf_progress_fn progress, void *ctx,
                            gm_gguf_populate_info *info, gm_err *err);

/* Metadata of the first part, in file order. */
uint64_t gm_gguf_n_kv(const gm_gguf *g);
gm_gguf_str gm_gguf_kv_key(const gm_gguf *g, uint64_t i);
gm_gguf_vtype gm_gguf_kv_type(const gm_gguf *g, uint64_t i);
/* Index of key, or -1 when absent. */
int64_t gm_gguf_find_kv(const gm_gguf *g, const char *key);

/* Typed getters by key. Return 0, GM_ENOTFOUND when the key is absent, or GM_ETYPE when the
 * stored type cannot be converted exactly (integers convert between widths when the value fits;
 * get_f64 accepts any integer or float type; get_bool accepts only BOOL). err may be NULL. */
int gm_gguf_get_u64(const gm_gguf *g, const char *key, uint64_t *out, gm_err *err);
int gm_gguf_get_i64(const gm_gguf *g, const char *key, int64_t *out, gm_err *err);
int gm_gguf_get_f64(const gm_gguf *g, const char *key, double *out, gm_err *err);
int gm_gguf_get_bool(const gm_gguf *g, const char *key, bool *out, gm_err *err);
int gm_gguf_get_str(const gm_gguf *g, const char *key, gm_gguf_str *out, gm_err *err);
int gm_gguf_get_arr(const gm_gguf *g, const char *key, gm_gguf_arr *out, gm_err *err);

/* The same by index (for printing every key). */
int gm_gguf_kv_u64(const gm_gguf *g, uint64_t i, uint64_t *out);
int gm_gguf_kv_i64(const gm_gguf *g, uint64_t i, int64_t *out);
int gm_gguf_kv_f64(const gm_gguf *g, uint64_t i, double *out);
int gm_gguf_kv_bool(const gm_gguf *g, uint64_t i, bool *out);
int gm_gguf_kv_str(const gm_gguf *g, uint64_t i, gm_gguf_str *out);
int gm_gguf_kv_arr(const gm_gguf *g, uint64_t i, gm_gguf_arr *out);

/* Array element access; i < arr->n. Scalars are converted as the getters above do. */
int gm_gguf_arr_u64(const gm_gguf_arr *a, uint64_t i, uint64_t *out);
int gm_gguf_arr_i64(const gm_gguf_arr *a, uint64_t i, int64_t *out);
int gm_gguf_arr_f64(const gm_gguf_arr *a, uint64_t i, double *out);
int gm_gguf_arr_str(const gm_gguf_arr *a, uint64_t i, gm_gguf_str *out);
int gm_gguf_arr_sub(const gm_gguf_arr *a, uint64_t i, gm_gguf_arr *out); /* nested arrays */

/* Tensors of all parts, in file order (part 0 first). */
uint64_t gm_gguf_n_tensors(const gm_gguf *g);
const gm_gguf_tensor *gm_gguf_tensor_at(const gm_gguf *g, uint64_t i);
const gm_gguf_tensor *gm_gguf_find_tensor(const gm_gguf *g, const char *name); /* NULL: absent */

/* The tensor's bytes in the mapping (valid until gm_gguf_close). Touching them reads the file
 * through the page cache. */
const void *gm_gguf_tensor_data(const gm_gguf *g, const gm_gguf_tensor *t);

/* Name of a value type ("u32", "string", ...). */
const char *gm_gguf_vtype_name(uint32_t vtype);

/* Compares a gm_gguf_str with a C string. */
bool gm_gguf_str_eq(gm_gguf_str s, const char *c);

#endif
