/* Failure paths of gguf/gguf: handcrafted corrupt, truncated and hostile files. Each case builds
 * a valid file with tests/unit/gguf_builder, breaks exactly one thing, and checks that
 * gm_gguf_open fails with the documented code, leaves *out NULL, and says in err.msg which file
 * is wrong and what is wrong (a distinctive substring of the message). Loops then truncate a
 * valid file at every length and overwrite every header byte, which must fail (or open) cleanly.
 * Every message is printed, so the test log doubles as a review of what users would read. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/types.h"
#include "gguf_builder.h"
#include "gmlx.h"
#include "testutil.h"

typedef struct ctx {
    const char *name;
    gm_gb b;
    gm_gb_layout lay;
    char path[512];      /* what gm_gguf_open is given; preset to TMPDIR/<case>.gguf */
    char named[512];     /* the file the message must name; empty: path */
    char parts[3][512];  /* split cases: the part paths */
    bool write;          /* write b to path before opening (preset true) */
} ctx;

typedef struct corrupt_case {
    const char *name;
    void (*build)(ctx *c);
    int code;
    const char *substr;
} corrupt_case;

/* ---- helpers ---- */

/* The default valid file: 4 kvs, tensors "a" (F32 [4, 4]) and "b" (Q8_0 [32, 2]). */
static void base(ctx *c)
{
    gm_gb_model m = {.tensors = gm_gb_default_tensors, .n_tensors = 2};
    gm_gb_model_build(&c->b, &m, &c->lay);
}

static void base_aligned(ctx *c, uint32_t alignment)
{
    gm_gb_model m = {.alignment = alignment, .tensors = gm_gb_default_tensors, .n_tensors = 2};
    gm_gb_model_build(&c->b, &m, &c->lay);
}

static void truncate_to(ctx *c, size_t len)
{
    assert_true(len <= c->b.len);
    c->b.len = len;
}

/* A three-part split set named TMPDIR/<case>-0000N-of-00003.gguf: tensors a, b | c | d. hook
 * may change a part's model before it is built, patch its bytes after; skip names a part that
 * is not written (-1: none). c->path is the first part. */
typedef void (*part_hook)(uint32_t part, gm_gb_model *m);
typedef void (*part_patch)(uint32_t part, gm_gb *b, const gm_gb_layout *lay);

static const gm_gb_tensor_spec k_p2[1] = {{"c", 1, {8, 1, 1, 1}, GM_TYPE_F32, 32}};
static const gm_gb_tensor_spec k_p3[1] = {{"d", 2, {2, 2, 1, 1}, GM_TYPE_F32, 16}};

static void write_split(ctx *c, part_hook hook, part_patch patch, int skip)
{
    const gm_gb_tensor_spec *specs[3] = {gm_gb_default_tensors, k_p2, k_p3};
    const uint32_t counts[3] = {2, 1, 1};
    for (uint32_t p = 0; p < 3; p++) {
        snprintf(c->parts[p], sizeof c->parts[p], "%s/%s-%05u-of-00003.gguf", gm_test_tmpdir(),
                 c->name, p + 1);
        gm_gb_model m = {.split_no = p, .split_count = 3, .split_tensors = 4,
                         .tensors = specs[p], .n_tensors = counts[p]};
        if (hook)
            hook(p, &m);
        gm_gb b;
        gm_gb_layout lay;
        gm_gb_init(&b);
        gm_gb_model_build(&b, &m, &lay);
        if (patch)
            patch(p, &b, &lay);
        if ((int)p != skip)
            assert_int_equal(gm_gb_write(&b, c->parts[p]), 0);
        gm_gb_free(&b);
    }
    snprintf(c->path, sizeof c->path, "%s", c->parts[0]);
    c->write = false;
}

/* ---- the file and its header ---- */

static void build_empty(ctx *c) { (void)c; }

static void build_short_header(ctx *c)
{
    gm_gb_header(&c->b, 3, 0, 0);
    truncate_to(c, 20);
}

static void build_bad_magic(ctx *c)
{
    base(c);
    gm_gb_set_u8(&c->b, 0, 'g');
}

/* A text file: its bytes 8..15 read as a huge tensor count, yet the answer is "not GGUF". */
static void build_text_file(ctx *c)
{
    const char *t = "This is a README, not a model file; it is long enough for a header.\n";
    gm_gb_bytes(&c->b, t, strlen(t));
}

static void build_version_0(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.version, 0);
}

/* GGUF v1 had u32 counts and u32 string lengths: the u64 tensor count of v2 would read as
 * 1 + (4 << 32). The version must be reported, not the count. */
static void build_version_1(ctx *c)
{
    gm_gb_bytes(&c->b, "GGUF", 4);
    gm_gb_u32(&c->b, 1);
    gm_gb_u32(&c->b, 1); /* tensors */
    gm_gb_u32(&c->b, 4); /* kvs */
    gm_gb_u32(&c->b, 20);
    gm_gb_bytes(&c->b, "general.architecture", 20);
    gm_gb_u32(&c->b, GM_GB_STRING);
    gm_gb_u32(&c->b, 5);
    gm_gb_bytes(&c->b, "llama", 5);
}

static void build_version_4(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.version, 4);
}

static void build_version_max(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.version, UINT32_MAX);
}

/* A big-endian v3 file: version and counts in big-endian byte order. */
static void build_big_endian(ctx *c)
{
    static const uint8_t hdr[] = {'G', 'G', 'U', 'F', 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 2,
                                  0, 0, 0, 0, 0, 0, 0, 4};
    base(c);
    memcpy(c->b.buf, hdr, sizeof hdr);
}

static void build_big_endian_v2(ctx *c)
{
    static const uint8_t hdr[] = {'G', 'G', 'U', 'F', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0,
                                  0, 0, 0, 0, 0, 0, 0, 0};
    gm_gb_bytes(&c->b, hdr, sizeof hdr);
}

/* ---- truncation inside a field ---- */

static void build_truncated_in_key(ctx *c)
{
    base(c);
    truncate_to(c, c->lay.kv_key[GM_GB_KV_LIST] + 8 + 4); /* "test" of "test.list" */
}

static void build_truncated_in_value(ctx *c)
{
    base(c);
    truncate_to(c, c->lay.kv_val[GM_GB_KV_COUNT] + 2); /* half of the u32 */
}

static void build_truncated_in_array(ctx *c)
{
    base(c);
    truncate_to(c, c->lay.kv_val[GM_GB_KV_LIST] + 4 + 8 + 8 + 1 + 8); /* before "yz" */
}

static void build_truncated_in_tensor_info(ctx *c)
{
    base(c);
    truncate_to(c, c->lay.t_offset[1] + 3); /* inside b's offset */
}

static void build_truncated_before_data(ctx *c)
{
    base(c);
    truncate_to(c, c->lay.infos_end + 1); /* padding cut short, no data */
}

static void build_truncated_in_data(ctx *c)
{
    base(c);
    truncate_to(c, c->b.len - 1);
}

/* ---- counts and lengths ---- */

static void build_huge_tensor_count(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.n_tensors, 1ull << 60);
}

static void build_tensor_count_past_file(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.n_tensors, c->b.len / 32 + 1); /* under the hard limit */
}

static void build_huge_kv_count(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.n_kv, UINT64_MAX);
}

static void build_huge_array_length(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.kv_val[GM_GB_KV_LIST] + 4, 1ull << 40);
}

static void build_array_length_over_limit(ctx *c)
{
    /* 2^26 + 1 u8 elements would fit in a 64 MiB file; the per-array limit stops it first */
    gm_gb_header(&c->b, 3, 0, 1);
    gm_gb_key(&c->b, "big", GM_GB_ARRAY);
    gm_gb_arr(&c->b, GM_GB_U8, (1ull << 26) + 1);
    gm_gb_zeros(&c->b, 64);
}

static void build_huge_string_length(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.kv_val[GM_GB_KV_ARCH], 1ull << 40);
}

/* pos + len would wrap around in u64 arithmetic */
static void build_string_length_wraps(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.kv_val[GM_GB_KV_ARCH], UINT64_MAX - 3);
}

static void build_array_string_length_wraps(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.kv_val[GM_GB_KV_LIST] + 12, UINT64_MAX);
}

static void build_key_length_huge(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.kv_key[GM_GB_KV_COUNT], UINT64_MAX);
}

static void build_tensor_name_too_long(ctx *c)
{
    char name[1100];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    static const uint64_t ne[1] = {8};
    gm_gb_header(&c->b, 3, 1, 0);
    gm_gb_tensor(&c->b, name, 1, ne, GM_TYPE_F32, 0);
    gm_gb_align(&c->b, 32);
    gm_gb_zeros(&c->b, 32);
}

/* ---- metadata values ---- */

static void build_unknown_value_type(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.kv_type[GM_GB_KV_COUNT], 13);
}

static void build_value_type_max(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.kv_type[GM_GB_KV_FLAG], UINT32_MAX);
}

static void build_unknown_array_elem_type(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.kv_val[GM_GB_KV_LIST], 13);
}

static void build_nested_too_deep(ctx *c)
{
    gm_gb_header(&c->b, 3, 0, 1);
    gm_gb_key(&c->b, "deep", GM_GB_ARRAY);
    for (int d = 0; d < 12; d++)
        gm_gb_arr(&c->b, GM_GB_ARRAY, 1);
    gm_gb_arr(&c->b, GM_GB_U8, 0);
}

/* one level past the limit: the value's array and 9 more below it */
static void build_nested_one_too_deep(ctx *c)
{
    gm_gb_header(&c->b, 3, 0, 1);
    gm_gb_key(&c->b, "deep", GM_GB_ARRAY);
    for (int d = 0; d < 9; d++)
        gm_gb_arr(&c->b, GM_GB_ARRAY, 1);
    gm_gb_arr(&c->b, GM_GB_U8, 1);
    gm_gb_u8(&c->b, 42);
}

static void build_bool_value_2(ctx *c)
{
    base(c);
    gm_gb_set_u8(&c->b, c->lay.kv_val[GM_GB_KV_FLAG], 2);
}

static void build_bool_array_element(ctx *c)
{
    gm_gb_header(&c->b, 3, 0, 1);
    gm_gb_key(&c->b, "flags", GM_GB_ARRAY);
    gm_gb_arr(&c->b, GM_GB_BOOL, 3);
    gm_gb_u8(&c->b, 1);
    gm_gb_u8(&c->b, 0);
    gm_gb_u8(&c->b, 0xff);
}

/* ---- keys ---- */

static void build_key_bad_utf8(ctx *c)
{
    base(c);
    gm_gb_set_u8(&c->b, c->lay.kv_key[GM_GB_KV_COUNT] + 8, 0xc3); /* 0xc3 '(' */
    gm_gb_set_u8(&c->b, c->lay.kv_key[GM_GB_KV_COUNT] + 9, '(');
}

static void build_key_overlong_utf8(ctx *c)
{
    base(c);
    gm_gb_set_u8(&c->b, c->lay.kv_key[GM_GB_KV_COUNT] + 8, 0xc0); /* overlong '/' */
    gm_gb_set_u8(&c->b, c->lay.kv_key[GM_GB_KV_COUNT] + 9, 0xaf);
}

static void build_key_surrogate(ctx *c)
{
    base(c);
    size_t k = c->lay.kv_key[GM_GB_KV_COUNT] + 8; /* U+D800, not a scalar value */
    gm_gb_set_u8(&c->b, k, 0xed);
    gm_gb_set_u8(&c->b, k + 1, 0xa0);
    gm_gb_set_u8(&c->b, k + 2, 0x80);
}

static void build_key_with_nul(ctx *c)
{
    base(c);
    gm_gb_set_u8(&c->b, c->lay.kv_key[GM_GB_KV_COUNT] + 8 + 4, 0); /* "test\0count" */
}

static void build_empty_key(ctx *c)
{
    gm_gb_header(&c->b, 3, 0, 2);
    gm_gb_kv_u32(&c->b, "ok", 1);
    gm_gb_kv_u32(&c->b, "", 2);
}

static void build_duplicate_key(ctx *c)
{
    gm_gb_header(&c->b, 3, 0, 3);
    gm_gb_kv_str(&c->b, "general.architecture", "llama");
    gm_gb_kv_u32(&c->b, "llama.block_count", 4);
    gm_gb_kv_str(&c->b, "general.architecture", "qwen3moe");
}

/* ---- tensor infos ---- */

static void build_duplicate_tensor_name(ctx *c)
{
    base(c);
    gm_gb_set_u8(&c->b, c->lay.t_name[1] + 8, 'a');
}

static void build_empty_tensor_name(ctx *c)
{
    static const uint64_t ne[1] = {8};
    gm_gb_header(&c->b, 3, 1, 0);
    gm_gb_tensor(&c->b, "", 1, ne, GM_TYPE_F32, 0);
    gm_gb_align(&c->b, 32);
    gm_gb_zeros(&c->b, 32);
}

static void build_tensor_name_nul(ctx *c)
{
    static const uint64_t ne[1] = {8};
    gm_gb_header(&c->b, 3, 1, 0);
    gm_gb_tensor(&c->b, "ab", 1, ne, GM_TYPE_F32, 0);
    gm_gb_set_u8(&c->b, 24 + 8 + 1, 0);
    gm_gb_align(&c->b, 32);
    gm_gb_zeros(&c->b, 32);
}

static void build_dims_0(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.t_ndims[0], 0);
}

static void build_dims_5(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.t_ndims[1], 5);
}

static void build_dims_max(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.t_ndims[0], UINT32_MAX);
}

static void build_zero_dim(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_ne[0] + 8, 0);
}

static void build_dim_too_large(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_ne[0], 1ull << 63);
}

static void build_elem_count_overflow(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_ne[0], 1ull << 40);
    gm_gb_set_u64(&c->b, c->lay.t_ne[0] + 8, 1ull << 40);
}

static void build_byte_size_overflow(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_ne[0], 1ull << 62); /* 2^62 f32 = 2^64 bytes */
    gm_gb_set_u64(&c->b, c->lay.t_ne[0] + 8, 1);
}

static void build_unknown_type(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.t_type[0], GM_TYPE_COUNT);
}

static void build_type_max(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.t_type[1], UINT32_MAX);
}

static void build_retired_type_4(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.t_type[0], 4); /* Q4_2 */
}

static void build_retired_type_5(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.t_type[0], 5); /* Q4_3 */
}

static void build_retired_type_31(ctx *c)
{
    base(c);
    gm_gb_set_u32(&c->b, c->lay.t_type[0], 31); /* Q4_0_4_4 */
}

static void build_row_not_whole_blocks(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_ne[1], 16); /* Q8_0 rows of 16: half a block */
    gm_gb_set_u64(&c->b, c->lay.t_ne[1] + 8, 4);
}

static void build_offset_unaligned(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_offset[1], 68);
}

static void build_offset_unaligned_custom(ctx *c)
{
    base_aligned(c, 64);
    gm_gb_set_u64(&c->b, c->lay.t_offset[1], 96);
}

static void build_tensor_past_end(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_offset[1], 1ull << 20);
}

static void build_tensor_offset_wraps(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_offset[1], UINT64_MAX - 31); /* aligned, data + offset wraps */
}

static void build_tensors_overlap(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_offset[1], 32); /* inside a's 64 bytes */
}

static void build_tensors_same_offset(ctx *c)
{
    base(c);
    gm_gb_set_u64(&c->b, c->lay.t_offset[0], 64); /* a now at b's place */
}

/* ---- general.alignment ---- */

static void build_alignment_not_pow2(ctx *c) { base_aligned(c, 48); }

static void build_alignment_0(ctx *c)
{
    base_aligned(c, 32);
    gm_gb_set_u32(&c->b, c->lay.kv_val[GM_GB_KV_BASE], 0);
}

static void build_alignment_huge(ctx *c)
{
    base_aligned(c, 32);
    gm_gb_set_u32(&c->b, c->lay.kv_val[GM_GB_KV_BASE], 1u << 31);
}

static void build_alignment_float(ctx *c)
{
    base_aligned(c, 32);
    gm_gb_set_u32(&c->b, c->lay.kv_type[GM_GB_KV_BASE], GM_GB_F32); /* 32 as f32 bits */
}

/* ---- split sets ---- */

static void build_split_not_first(ctx *c)
{
    write_split(c, NULL, NULL, -1);
    snprintf(c->path, sizeof c->path, "%s", c->parts[1]);
}

static void build_split_missing_part(ctx *c)
{
    write_split(c, NULL, NULL, 1);
    snprintf(c->named, sizeof c->named, "%s", c->parts[1]);
}

static void hook_wrong_no(uint32_t p, gm_gb_model *m)
{
    if (p == 1)
        m->split_no = 2;
}

static void build_split_wrong_no(ctx *c)
{
    write_split(c, hook_wrong_no, NULL, -1);
    snprintf(c->named, sizeof c->named, "%s", c->parts[1]);
}

static void hook_wrong_count(uint32_t p, gm_gb_model *m)
{
    if (p == 2)
        m->split_count = 4;
}

static void build_split_wrong_count(ctx *c)
{
    write_split(c, hook_wrong_count, NULL, -1);
    snprintf(c->named, sizeof c->named, "%s", c->parts[2]);
}

static void hook_tensors_count(uint32_t p, gm_gb_model *m)
{
    (void)p;
    m->split_tensors = 5;
}

static void build_split_tensors_mismatch(ctx *c) { write_split(c, hook_tensors_count, NULL, -1); }

/* "split.tensors.count" renamed to "split.tensors.cOunt": the key is missing */
static void patch_no_tensors_count(uint32_t p, gm_gb *b, const gm_gb_layout *lay)
{
    if (p == 0)
        gm_gb_set_u8(b, lay->kv_key[GM_GB_KV_BASE + 2] + 8 + 15, 'O');
}

static void build_split_tensors_count_missing(ctx *c)
{
    write_split(c, NULL, patch_no_tensors_count, -1);
}

static void hook_no_split_keys(uint32_t p, gm_gb_model *m)
{
    if (p == 2)
        m->split_count = 0;
}

static void build_split_part_without_keys(ctx *c)
{
    write_split(c, hook_no_split_keys, NULL, -1);
    snprintf(c->named, sizeof c->named, "%s", c->parts[2]);
}

static void patch_bad_magic(uint32_t p, gm_gb *b, const gm_gb_layout *lay)
{
    (void)lay;
    if (p == 2)
        gm_gb_set_u8(b, 3, 'X');
}

static void build_split_part_bad_magic(ctx *c)
{
    write_split(c, NULL, patch_bad_magic, -1);
    snprintf(c->named, sizeof c->named, "%s", c->parts[2]);
}

static void patch_truncate(uint32_t p, gm_gb *b, const gm_gb_layout *lay)
{
    if (p == 1)
        b->len = lay->t_type[0];
}

static void build_split_part_truncated(ctx *c)
{
    write_split(c, NULL, patch_truncate, -1);
    snprintf(c->named, sizeof c->named, "%s", c->parts[1]);
}

static void patch_dup_name(uint32_t p, gm_gb *b, const gm_gb_layout *lay)
{
    if (p == 1)
        gm_gb_set_u8(b, lay->t_name[0] + 8, 'a'); /* "c" becomes "a", also in part 1 */
}

static void build_split_duplicate_tensor(ctx *c)
{
    write_split(c, NULL, patch_dup_name, -1);
    snprintf(c->named, sizeof c->named, "%s", c->parts[1]);
}

static void build_split_part_zero(ctx *c)
{
    snprintf(c->path, sizeof c->path, "%s/zero-00000-of-00003.gguf", gm_test_tmpdir());
    c->write = false;
}

static void build_split_too_many_parts(ctx *c)
{
    snprintf(c->path, sizeof c->path, "%s/many-00001-of-09999.gguf", gm_test_tmpdir());
    c->write = false;
}

/* A file not named as a split part that says it is part 1 of 3. */
static void build_unsplit_name_split_keys(ctx *c)
{
    gm_gb_model m = {.split_no = 0, .split_count = 3, .split_tensors = 4,
                     .tensors = gm_gb_default_tensors, .n_tensors = 2};
    gm_gb_model_build(&c->b, &m, &c->lay);
}

/* ---- the path itself ---- */

static void build_directory(ctx *c)
{
    assert_int_equal(mkdir(c->path, 0700), 0);
    c->write = false;
}

static void build_nonexistent(ctx *c) { c->write = false; }

/* A FIFO without a writer: opening it for reading must not block. */
static void build_fifo(ctx *c)
{
    assert_int_equal(mkfifo(c->path, 0600), 0);
    c->write = false;
}

#define CASE(nm, code, substr) {#nm, build_##nm, code, substr}

static const corrupt_case k_cases[] = {
    CASE(empty, GM_EFORMAT, "0 bytes is too small to be a GGUF file"),
    CASE(short_header, GM_EFORMAT, "20 bytes is too small to be a GGUF file"),
    CASE(bad_magic, GM_EFORMAT, "not a GGUF file (bad magic)"),
    CASE(text_file, GM_EFORMAT, "not a GGUF file (bad magic)"),
    CASE(version_0, GM_EFORMAT, "unknown GGUF version 0"),
    CASE(version_1, GM_EUNSUPPORTED, "GGUF version 1 is not supported"),
    CASE(version_4, GM_EFORMAT, "unknown GGUF version 4"),
    CASE(version_max, GM_EFORMAT, "unknown GGUF version 4294967295"),
    CASE(big_endian, GM_EUNSUPPORTED, "big-endian GGUF files are not supported"),
    CASE(big_endian_v2, GM_EUNSUPPORTED, "big-endian GGUF files are not supported"),
    CASE(truncated_in_key, GM_EFORMAT, "truncated or corrupt: metadata key needs 9 bytes"),
    CASE(truncated_in_value, GM_EFORMAT, "truncated or corrupt: metadata value needs 4 bytes"),
    CASE(truncated_in_array, GM_EFORMAT, "truncated or corrupt: array string needs 2 bytes"),
    CASE(truncated_in_tensor_info, GM_EFORMAT, "truncated or corrupt: tensor offset needs 8 bytes"),
    CASE(truncated_before_data, GM_EFORMAT, "truncated: the tensor data would start at"),
    CASE(truncated_in_data, GM_EFORMAT, "tensor 'b' (68 bytes at data offset 64) ends past the end"),
    CASE(huge_tensor_count, GM_EFORMAT, "tensor count 1152921504606846976 does not fit in the file"),
    CASE(tensor_count_past_file, GM_EFORMAT, "does not fit in the file"),
    CASE(huge_kv_count, GM_EFORMAT, "metadata count 18446744073709551615 does not fit in the file"),
    CASE(huge_array_length, GM_EFORMAT, "array of 1099511627776 string elements"),
    CASE(array_length_over_limit, GM_EFORMAT, "array of 67108865 u8 elements"),
    CASE(huge_string_length, GM_EFORMAT, "string value needs 1099511627776 bytes"),
    CASE(string_length_wraps, GM_EFORMAT, "string value needs 18446744073709551612 bytes"),
    CASE(array_string_length_wraps, GM_EFORMAT, "array string needs 18446744073709551615 bytes"),
    CASE(key_length_huge, GM_EFORMAT, "is 18446744073709551615 bytes long (limit 65535)"),
    CASE(tensor_name_too_long, GM_EFORMAT, "tensor name at offset 24 is 1099 bytes long (limit 1024)"),
    CASE(unknown_value_type, GM_EFORMAT, "unknown metadata value type 13 at offset"),
    CASE(value_type_max, GM_EFORMAT, "unknown metadata value type 4294967295"),
    CASE(unknown_array_elem_type, GM_EFORMAT, "unknown array element type 13"),
    CASE(nested_too_deep, GM_EFORMAT, "arrays nested deeper than 8"),
    CASE(nested_one_too_deep, GM_EFORMAT, "arrays nested deeper than 8"),
    CASE(bool_value_2, GM_EFORMAT, "is 2, not 0 or 1 (key 'test.flag')"),
    CASE(bool_array_element, GM_EFORMAT, "bool array element 2 is 255"),
    CASE(key_bad_utf8, GM_EFORMAT, "metadata key 1 is empty or not valid UTF-8"),
    CASE(key_overlong_utf8, GM_EFORMAT, "metadata key 1 is empty or not valid UTF-8"),
    CASE(key_surrogate, GM_EFORMAT, "metadata key 1 is empty or not valid UTF-8"),
    CASE(key_with_nul, GM_EFORMAT, "metadata key 1 is empty or not valid UTF-8"),
    CASE(empty_key, GM_EFORMAT, "metadata key 1 is empty or not valid UTF-8"),
    CASE(duplicate_key, GM_EFORMAT, "metadata key 'general.architecture' appears twice"),
    CASE(duplicate_tensor_name, GM_EFORMAT, "tensor name 'a' appears twice"),
    CASE(empty_tensor_name, GM_EFORMAT, "tensor 0 has an empty or invalid UTF-8 name"),
    CASE(tensor_name_nul, GM_EFORMAT, "tensor 0 has an empty or invalid UTF-8 name"),
    CASE(dims_0, GM_EFORMAT, "tensor 'a' has 0 dimensions (1 to 4 allowed)"),
    CASE(dims_5, GM_EFORMAT, "tensor 'b' has 5 dimensions (1 to 4 allowed)"),
    CASE(dims_max, GM_EFORMAT, "tensor 'a' has 4294967295 dimensions"),
    CASE(zero_dim, GM_EFORMAT, "tensor 'a' has dimension 1 of size 0"),
    CASE(dim_too_large, GM_EFORMAT, "tensor 'a' has dimension 0 of size 9223372036854775808"),
    CASE(elem_count_overflow, GM_EFORMAT, "tensor 'a' element count overflows"),
    CASE(byte_size_overflow, GM_EFORMAT, "tensor 'a': tensor size overflows"),
    CASE(unknown_type, GM_EFORMAT, "tensor 'a' has unknown type 40"),
    CASE(type_max, GM_EFORMAT, "tensor 'b' has unknown type 4294967295"),
    CASE(retired_type_4, GM_EFORMAT, "tensor 'a' has unknown type 4"),
    CASE(retired_type_5, GM_EFORMAT, "tensor 'a' has unknown type 5"),
    CASE(retired_type_31, GM_EFORMAT, "tensor 'a' has unknown type 31"),
    CASE(row_not_whole_blocks, GM_EFORMAT, "a row of 16 elements is not a whole number of Q8_0 blocks"),
    CASE(offset_unaligned, GM_EFORMAT, "tensor 'b' offset 68 is not a multiple of the alignment 32"),
    CASE(offset_unaligned_custom, GM_EFORMAT, "offset 96 is not a multiple of the alignment 64"),
    CASE(tensor_past_end, GM_EFORMAT, "tensor 'b' (68 bytes at data offset 1048576) ends past the end"),
    CASE(tensor_offset_wraps, GM_EFORMAT, "at data offset 18446744073709551584) ends past the end"),
    CASE(tensors_overlap, GM_EFORMAT, "tensors 'a' and 'b' overlap"),
    CASE(tensors_same_offset, GM_EFORMAT, "overlap"),
    CASE(alignment_not_pow2, GM_EFORMAT, "general.alignment must be a power of two"),
    CASE(alignment_0, GM_EFORMAT, "general.alignment must be a power of two"),
    CASE(alignment_huge, GM_EFORMAT, "general.alignment must be a power of two up to 1048576"),
    CASE(alignment_float, GM_EFORMAT, "general.alignment must be a power of two"),
    CASE(split_not_first, GM_EINVAL, "this is part 2 of 3; name the first part"),
    CASE(split_missing_part, GM_EIO, "cannot open: No such file or directory"),
    CASE(split_wrong_no, GM_EFORMAT, "it says part 3 of 3, its name says part 2 of 3"),
    CASE(split_wrong_count, GM_EFORMAT, "it says part 3 of 4, its name says part 3 of 3"),
    CASE(split_tensors_mismatch, GM_EFORMAT, "the parts hold 4 tensors but split.tensors.count says 5"),
    CASE(split_tensors_count_missing, GM_EFORMAT, "split.tensors.count is missing"),
    CASE(split_part_without_keys, GM_EFORMAT, "split part without split.count / split.no"),
    CASE(split_part_bad_magic, GM_EFORMAT, "not a GGUF file (bad magic)"),
    CASE(split_part_truncated, GM_EFORMAT, "truncated or corrupt: tensor type needs 4 bytes"),
    CASE(split_duplicate_tensor, GM_EFORMAT, "tensor name 'a' appears twice"),
    CASE(split_part_zero, GM_EFORMAT, "part number 0 of 3 is not valid"),
    CASE(split_too_many_parts, GM_EFORMAT, "part number 1 of 9999 is not valid"),
    CASE(unsplit_name_split_keys, GM_EFORMAT, "this file is part 1 of a 3-part split model"),
    CASE(directory, GM_EIO, "not a regular file"),
    CASE(nonexistent, GM_EIO, "cannot open: No such file or directory"),
    CASE(fifo, GM_EIO, "not a regular file"),
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

static void run_case(void **state)
{
    const corrupt_case *cc = *state;
    ctx c;
    memset(&c, 0, sizeof c);
    c.name = cc->name;
    gm_gb_init(&c.b);
    snprintf(c.path, sizeof c.path, "%s/%s.gguf", gm_test_tmpdir(), cc->name);
    c.write = true;
    cc->build(&c);
    if (c.write)
        assert_int_equal(gm_gb_write(&c.b, c.path), 0);

    gm_gguf *g = (gm_gguf *)&c; /* must be overwritten with NULL */
    gm_err err = {0};
    int rc = gm_gguf_open(&g, c.path, &err);
    print_message("  %-28s %s\n", cc->name, err.msg);
    if (rc == 0)
        gm_gguf_close(g);
    assert_int_equal(rc, cc->code);
    assert_null(g);
    assert_int_equal(err.code, cc->code);
    const char *named = c.named[0] ? c.named : c.path;
    if (!strstr(err.msg, named))
        fail_msg("message does not name %s: %s", named, err.msg);
    if (!strstr(err.msg, cc->substr))
        fail_msg("message lacks \"%s\": %s", cc->substr, err.msg);

    /* the same with no gm_err to fill */
    g = (gm_gguf *)&c;
    assert_int_equal(gm_gguf_open(&g, c.path, NULL), cc->code);
    assert_null(g);

    remove(c.path);
    for (int p = 0; p < 3; p++)
        if (c.parts[p][0])
            remove(c.parts[p]);
    gm_gb_free(&c.b);
}

/* ---- loops ---- */

static const char *const k_truncation_words[] = {"too small", "truncated", "does not fit"};

static void check_fails_cleanly(const char *path, const char *what, size_t at)
{
    gm_gguf *g = (gm_gguf *)&at;
    gm_err err = {0};
    int rc = gm_gguf_open(&g, path, &err);
    if (rc == 0)
        fail_msg("%s at %zu: the file opened", what, at);
    assert_null(g);
    if (rc != GM_EFORMAT)
        fail_msg("%s at %zu: code %d: %s", what, at, rc, err.msg);
    if (!strstr(err.msg, path))
        fail_msg("%s at %zu: message does not name the file: %s", what, at, err.msg);
    bool said = false;
    for (size_t k = 0; k < sizeof k_truncation_words / sizeof k_truncation_words[0]; k++)
        said = said || strstr(err.msg, k_truncation_words[k]) != NULL;
    if (!said)
        fail_msg("%s at %zu: message does not say the file is short: %s", what, at, err.msg);
}

/* Every proper prefix of a valid file fails with GM_EFORMAT and a message about its length. */
static void test_truncated_at_every_byte(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/truncated.gguf", gm_test_tmpdir());
    for (int variant = 0; variant < 2; variant++) {
        gm_gb b;
        gm_gb_init(&b);
        if (variant == 0) {
            gm_gb_model m = {.tensors = gm_gb_default_tensors, .n_tensors = 2};
            gm_gb_model_build(&b, &m, NULL);
        } else {
            gm_gb_model m = {.version = 2, .alignment = 64, .split_count = 1, .split_tensors = 2,
                             .tensors = gm_gb_default_tensors, .n_tensors = 2};
            gm_gb_model_build(&b, &m, NULL);
        }
        size_t full = b.len;
        assert_int_equal(gm_gb_write(&b, path), 0);
        gm_gguf *g = NULL;
        assert_int_equal(gm_gguf_open(&g, path, NULL), 0);
        gm_gguf_close(g);
        for (size_t len = 0; len < full; len++) {
            b.len = len;
            assert_int_equal(gm_gb_write(&b, path), 0);
            check_fails_cleanly(path, "truncated", len);
        }
        print_message("  variant %d: %zu truncations fail cleanly\n", variant, full);
        gm_gb_free(&b);
    }
    remove(path);
}

/* Each header byte set to 0x00, 0x01, 0x80 and 0xff in turn: the open either works or fails
 * with a message naming the file; nothing crashes (the sanitizers watch). */
static void test_every_header_byte(void **state)
{
    (void)state;
    static const uint8_t vals[] = {0x00, 0x01, 0x80, 0xff};
    char path[512];
    snprintf(path, sizeof path, "%s/flipped.gguf", gm_test_tmpdir());
    gm_gb b;
    gm_gb_layout lay;
    gm_gb_init(&b);
    gm_gb_model m = {.alignment = 32, .tensors = gm_gb_default_tensors, .n_tensors = 2};
    gm_gb_model_build(&b, &m, &lay);
    unsigned opened = 0, failed = 0;
    for (size_t at = 0; at < lay.data; at++) {
        uint8_t orig = b.buf[at];
        for (size_t k = 0; k < sizeof vals; k++) {
            if (vals[k] == orig)
                continue;
            b.buf[at] = vals[k];
            assert_int_equal(gm_gb_write(&b, path), 0);
            gm_gguf *g = (gm_gguf *)&b;
            gm_err err = {0};
            int rc = gm_gguf_open(&g, path, &err);
            if (rc == 0) {
                assert_non_null(g);
                for (uint64_t i = 0; i < gm_gguf_n_tensors(g); i++) {
                    const gm_gguf_tensor *t = gm_gguf_tensor_at(g, i);
                    assert_true(t->file_offset + t->n_bytes <= b.len);
                }
                gm_gguf_close(g);
                opened++;
                continue;
            }
            failed++;
            assert_null(g);
            assert_true(rc == GM_EFORMAT || rc == GM_EUNSUPPORTED);
            if (!strstr(err.msg, path))
                fail_msg("byte %zu = 0x%02x: message does not name the file: %s", at, vals[k],
                         err.msg);
        }
        b.buf[at] = orig;
    }
    print_message("  %u variants opened, %u failed cleanly\n", opened, failed);
    gm_gb_free(&b);
    remove(path);
}

int main(void)
{
    struct CMUnitTest tests[N_CASES + 2];
    for (size_t i = 0; i < N_CASES; i++)
        tests[i] = (struct CMUnitTest){k_cases[i].name, run_case, NULL, NULL, (void *)&k_cases[i]};
    tests[N_CASES] = (struct CMUnitTest)cmocka_unit_test(test_truncated_at_every_byte);
    tests[N_CASES + 1] = (struct CMUnitTest)cmocka_unit_test(test_every_header_byte);
    return _cmocka_run_group_tests("gguf_corrupt", tests, N_CASES + 2, NULL, NULL);
}
