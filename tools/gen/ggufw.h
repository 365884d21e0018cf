/* tools/gen/ggufw: a streaming writer of GGUF v3 files.
 *
 * Owns: one output file while it is being written. The file is written as PATH.tmp and renamed
 * to PATH by gm_ggufw_finish; gm_ggufw_destroy of an unfinished writer removes PATH.tmp, so a
 * failed or interrupted write never leaves a file at PATH.
 *
 * Order of use: create -> metadata (set_*) and tensor infos (add_tensor), in any order ->
 * begin_data -> tensor bytes in tensor order (write, or buf + commit for zero-copy filling) ->
 * finish -> destroy. Padding (to the alignment, default 32) after the header and after every
 * tensor is written by the writer, never by the caller.
 *
 * Memory is constant: metadata and tensor infos are held until begin_data (they are small; a
 * copied tokenizer is a few MB), tensor bytes go through a fixed ring of four 8 MiB buffers
 * that two I/O threads write out. Before the data the whole file is reserved with fallocate (a
 * full disk fails at once). Buffered writes (the default) drop their pages once they are on the
 * disk, a few buffers behind the writing, so a file of hundreds of GB neither fills the page
 * cache nor evicts anyone's pages; GM_GGUFW_DIRECT writes with O_DIRECT instead (measured slower
 * on the virtual disks we tried, see docs/generator.md).

 * Sparse mode (begin_data with sparse = true): only the header is written and the file is
 * extended with ftruncate to its final size, so its tensor data reads as zeros and costs no disk
 * blocks; the caller writes no tensor bytes.
 *
 * Threads: one caller thread per writer; the writer owns two internal I/O threads.
 */
#ifndef GM_TOOLS_GEN_GGUFW_H
#define GM_TOOLS_GEN_GGUFW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

typedef struct gm_ggufw gm_ggufw;

/* Flags of gm_ggufw_create. */
enum {
    GM_GGUFW_DIRECT = 1, /* O_DIRECT writes where the filesystem has them */
};

/* Opens PATH.tmp for writing (truncating an old one). */
int gm_ggufw_create(gm_ggufw **out, const char *path, unsigned flags, gm_err *err);
/* Frees the writer; an unfinished file is closed and PATH.tmp removed. NULL is allowed. */
void gm_ggufw_destroy(gm_ggufw *w);

/* Alignment of tensor data (a power of two, 8..65536; default 32). A value other than 32 is also
 * recorded as general.alignment. Before begin_data. */
int gm_ggufw_set_alignment(gm_ggufw *w, uint32_t alignment, gm_err *err);

/* Metadata, stored in call order. Keys must be unique and non-empty. */
int gm_ggufw_set_u8(gm_ggufw *w, const char *key, uint8_t v, gm_err *err);
int gm_ggufw_set_i8(gm_ggufw *w, const char *key, int8_t v, gm_err *err);
int gm_ggufw_set_u16(gm_ggufw *w, const char *key, uint16_t v, gm_err *err);
int gm_ggufw_set_i16(gm_ggufw *w, const char *key, int16_t v, gm_err *err);
int gm_ggufw_set_u32(gm_ggufw *w, const char *key, uint32_t v, gm_err *err);
int gm_ggufw_set_i32(gm_ggufw *w, const char *key, int32_t v, gm_err *err);
int gm_ggufw_set_u64(gm_ggufw *w, const char *key, uint64_t v, gm_err *err);
int gm_ggufw_set_i64(gm_ggufw *w, const char *key, int64_t v, gm_err *err);
int gm_ggufw_set_f32(gm_ggufw *w, const char *key, float v, gm_err *err);
int gm_ggufw_set_f64(gm_ggufw *w, const char *key, double v, gm_err *err);
int gm_ggufw_set_bool(gm_ggufw *w, const char *key, bool v, gm_err *err);
int gm_ggufw_set_str(gm_ggufw *w, const char *key, const char *v, gm_err *err);
int gm_ggufw_set_strn(gm_ggufw *w, const char *key, const char *v, uint64_t len, gm_err *err);
/* An array of n scalars of elem_type (not STRING/ARRAY), packed little-endian in data. */
int gm_ggufw_set_arr(gm_ggufw *w, const char *key, gm_gguf_vtype elem_type, const void *data,
                     uint64_t n, gm_err *err);
/* An array of n strings; lens may be NULL (then each string is NUL-terminated). */
int gm_ggufw_set_arr_str(gm_ggufw *w, const char *key, const char *const *strs,
                         const uint64_t *lens, uint64_t n, gm_err *err);
/* A value given already serialised as GGUF stores it after the type field (for an ARRAY: element
 * type, count, elements). Used to copy values of any shape from another file. */
int gm_ggufw_set_raw(gm_ggufw *w, const char *key, gm_gguf_vtype vtype, const void *bytes,
                     size_t n_bytes, gm_err *err);
/* True when key was already set. */
bool gm_ggufw_has_key(const gm_ggufw *w, const char *key);

/* A tensor info: dims innermost first (ggml order), 1..4 dims each > 0, rows whole blocks of
 * type. Tensor data is expected in the order the infos were added. */
int gm_ggufw_add_tensor(gm_ggufw *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *ne, gm_err *err);
uint64_t gm_ggufw_n_tensors(const gm_ggufw *w);

/* Writes magic, counts, metadata, tensor infos and the padding up to the data section. In sparse
 * mode it then extends the file to its final size. No set_* or add_tensor after this. */
int gm_ggufw_begin_data(gm_ggufw *w, bool sparse, gm_err *err);

/* Sizes, valid after begin_data. */
uint64_t gm_ggufw_data_offset(const gm_ggufw *w);  /* start of the data section */
uint64_t gm_ggufw_file_size(const gm_ggufw *w);    /* final size of the file */
uint64_t gm_ggufw_data_written(const gm_ggufw *w); /* tensor bytes given so far */
bool gm_ggufw_is_direct(const gm_ggufw *w);        /* writing with O_DIRECT now */

/* Appends n bytes of tensor data; a call may span the end of one tensor and the start of the
 * next (the padding between them is inserted). Not in sparse mode. */
int gm_ggufw_write(gm_ggufw *w, const void *data, size_t n, gm_err *err);
/* Zero-copy filling: space for up to *avail bytes of the current tensor (*avail > 0 unless all
 * tensor bytes were given); fill some of it, then commit that many bytes. */
uint8_t *gm_ggufw_buf(gm_ggufw *w, size_t *avail, gm_err *err);
int gm_ggufw_commit(gm_ggufw *w, size_t n, gm_err *err);

/* Checks that every tensor byte was given (not in sparse mode), flushes, fsyncs, renames
 * PATH.tmp to PATH. */
int gm_ggufw_finish(gm_ggufw *w, gm_err *err);

#endif
