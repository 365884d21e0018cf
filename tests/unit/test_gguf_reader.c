/* Tests of gguf/gguf on valid files: every metadata value type through the getters and the
 * array accessors, the integer conversions and GM_ETYPE, versions 2 and 3, general.alignment,
 * tensor lookup and data placement, a three-part split set, and the bundled trained-qwen3moe
 * model (checked against an independent parse: tests/fixtures/trained-qwen3moe/gguf-dump.txt for
 * names and dims, gguf-py's layout for the Q4_K_M types and offsets).
 * The files are made with tests/unit/gguf_builder, which writes the bytes of the GGUF
 * specification without using the reader. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/types.h"
#include "gguf_builder.h"
#include "gmlx.h"
#include "testutil.h"

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", gm_test_tmpdir(), name);
    return p;
}

/* Writes b to a temp file called name and opens it; the test fails when the open does. */
static gm_gguf *open_built(const gm_gb *b, const char *name)
{
    const char *path = tmp_path(name);
    assert_int_equal(gm_gb_write(b, path), 0);
    gm_gguf *g = NULL;
    gm_err err = {0};
    int rc = gm_gguf_open(&g, path, &err);
    if (rc != 0)
        fail_msg("gm_gguf_open(%s): %d %s", path, rc, err.msg);
    assert_non_null(g);
    assert_string_equal(gm_gguf_path(g), path);
    return g;
}

static void assert_str(gm_gguf_str s, const char *want)
{
    if (!gm_gguf_str_eq(s, want))
        fail_msg("got '%.*s' (%llu bytes), want '%s'", (int)s.len, s.ptr, (unsigned long long)s.len,
                 want);
}

/* ---- metadata of every type ---- */

static void build_types_file(gm_gb *b)
{
    gm_gb_header(b, 3, 0, 26);
    gm_gb_key(b, "t.u8", GM_GB_U8);
    gm_gb_u8(b, 200);
    gm_gb_key(b, "t.i8", GM_GB_I8);
    gm_gb_u8(b, (uint8_t)-5);
    gm_gb_key(b, "t.u16", GM_GB_U16);
    gm_gb_u16(b, 60000);
    gm_gb_key(b, "t.i16", GM_GB_I16);
    gm_gb_u16(b, (uint16_t)-300);
    gm_gb_kv_u32(b, "t.u32", 4000000000u);
    gm_gb_key(b, "t.i32", GM_GB_I32);
    gm_gb_u32(b, (uint32_t)-2000000000);
    gm_gb_key(b, "t.f32", GM_GB_F32);
    gm_gb_f32(b, 1.5f);
    gm_gb_kv_bool(b, "t.bool", 1);
    gm_gb_kv_str(b, "t.str", "h\xc3\xa9llo");
    gm_gb_key(b, "t.arr.u8", GM_GB_ARRAY); /* 9 */
    gm_gb_arr(b, GM_GB_U8, 3);
    gm_gb_u8(b, 1);
    gm_gb_u8(b, 2);
    gm_gb_u8(b, 255);
    gm_gb_kv_u64(b, "t.u64", (1ull << 40) | 5); /* 10 */
    gm_gb_key(b, "t.i64", GM_GB_I64);
    gm_gb_u64(b, (uint64_t)-(int64_t)(1ull << 40));
    gm_gb_key(b, "t.f64", GM_GB_F64);
    gm_gb_f64(b, 2.25);
    gm_gb_key(b, "t.arr.i16", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_I16, 2);
    gm_gb_u16(b, (uint16_t)-1);
    gm_gb_u16(b, 300);
    gm_gb_key(b, "t.arr.f32", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_F32, 2);
    gm_gb_f32(b, 0.5f);
    gm_gb_f32(b, -2.0f);
    gm_gb_key(b, "t.arr.str", GM_GB_ARRAY); /* 15 */
    gm_gb_arr(b, GM_GB_STRING, 3);
    gm_gb_str(b, "");
    gm_gb_str(b, "ab");
    gm_gb_str(b, "\xc4\x89");
    /* [[1u32, 2u32], ["q"], [[-1i8]], [] of u8] */
    gm_gb_key(b, "t.arr.nested", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_ARRAY, 4);
    gm_gb_arr(b, GM_GB_U32, 2);
    gm_gb_u32(b, 1);
    gm_gb_u32(b, 2);
    gm_gb_arr(b, GM_GB_STRING, 1);
    gm_gb_str(b, "q");
    gm_gb_arr(b, GM_GB_ARRAY, 1);
    gm_gb_arr(b, GM_GB_I8, 1);
    gm_gb_u8(b, 0xff);
    gm_gb_arr(b, GM_GB_U8, 0);
    gm_gb_key(b, "t.arr.bool", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_BOOL, 2);
    gm_gb_u8(b, 1);
    gm_gb_u8(b, 0);
    gm_gb_key(b, "t.arr.empty", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_U64, 0);
    gm_gb_key(b, "t.arr.u64", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_U64, 2);
    gm_gb_u64(b, UINT64_MAX);
    gm_gb_u64(b, 9);
    gm_gb_key(b, "t.arr.i64", GM_GB_ARRAY); /* 20 */
    gm_gb_arr(b, GM_GB_I64, 1);
    gm_gb_u64(b, (uint64_t)INT64_MIN);
    gm_gb_key(b, "t.arr.f64", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_F64, 1);
    gm_gb_f64(b, 3.5);
    gm_gb_kv_str(b, "t.str.empty", "");
    gm_gb_kv_u64(b, "t.u64.max", UINT64_MAX);
    gm_gb_key(b, "t.i32.pos", GM_GB_I32);
    gm_gb_u32(b, 12);
    gm_gb_key(b, "t.bool.false", GM_GB_BOOL); /* 25 */
    gm_gb_u8(b, 0);
}

static const char *const k_type_keys[26] = {
    "t.u8",      "t.i8",      "t.u16",       "t.i16",       "t.u32",     "t.i32",
    "t.f32",     "t.bool",    "t.str",       "t.arr.u8",    "t.u64",     "t.i64",
    "t.f64",     "t.arr.i16", "t.arr.f32",   "t.arr.str",   "t.arr.nested", "t.arr.bool",
    "t.arr.empty", "t.arr.u64", "t.arr.i64", "t.arr.f64",   "t.str.empty", "t.u64.max",
    "t.i32.pos", "t.bool.false",
};
static const gm_gguf_vtype k_type_types[26] = {
    GM_GGUF_U8,    GM_GGUF_I8,    GM_GGUF_U16,    GM_GGUF_I16,   GM_GGUF_U32,   GM_GGUF_I32,
    GM_GGUF_F32,   GM_GGUF_BOOL,  GM_GGUF_STRING, GM_GGUF_ARRAY, GM_GGUF_U64,   GM_GGUF_I64,
    GM_GGUF_F64,   GM_GGUF_ARRAY, GM_GGUF_ARRAY,  GM_GGUF_ARRAY, GM_GGUF_ARRAY, GM_GGUF_ARRAY,
    GM_GGUF_ARRAY, GM_GGUF_ARRAY, GM_GGUF_ARRAY,  GM_GGUF_ARRAY, GM_GGUF_STRING, GM_GGUF_U64,
    GM_GGUF_I32,   GM_GGUF_BOOL,
};

static gm_gguf *open_types_file(void)
{
    gm_gb b;
    gm_gb_init(&b);
    build_types_file(&b);
    gm_gguf *g = open_built(&b, "types.gguf");
    gm_gb_free(&b);
    return g;
}

static void test_kv_order_and_types(void **state)
{
    (void)state;
    gm_gguf *g = open_types_file();
    assert_int_equal(gm_gguf_version(g), 3);
    assert_int_equal(gm_gguf_n_kv(g), 26);
    assert_int_equal(gm_gguf_n_tensors(g), 0);
    for (uint64_t i = 0; i < 26; i++) {
        assert_str(gm_gguf_kv_key(g, i), k_type_keys[i]);
        assert_int_equal(gm_gguf_kv_type(g, i), k_type_types[i]);
        assert_int_equal(gm_gguf_find_kv(g, k_type_keys[i]), (int64_t)i);
    }
    assert_int_equal(gm_gguf_find_kv(g, "t.u"), -1);
    assert_int_equal(gm_gguf_find_kv(g, "t.u8x"), -1);
    assert_int_equal(gm_gguf_find_kv(g, ""), -1);
    assert_int_equal(gm_gguf_kv_key(g, 26).len, 0);
    assert_int_equal(gm_gguf_kv_type(g, 26), GM_GGUF_VTYPE_COUNT);
    assert_string_equal(gm_gguf_vtype_name(GM_GGUF_BOOL), "bool");
    assert_string_equal(gm_gguf_vtype_name(GM_GGUF_F64), "f64");
    assert_string_equal(gm_gguf_vtype_name(13), "unknown");
    assert_string_equal(gm_gguf_vtype_name(UINT32_MAX), "unknown");
    gm_gguf_close(g);
}

static void test_scalar_getters(void **state)
{
    (void)state;
    gm_gguf *g = open_types_file();
    uint64_t u;
    int64_t i;
    double f;
    bool bo;
    gm_gguf_str s;

    assert_int_equal(gm_gguf_get_u64(g, "t.u8", &u, NULL), 0);
    assert_int_equal(u, 200);
    assert_int_equal(gm_gguf_get_i64(g, "t.i8", &i, NULL), 0);
    assert_int_equal(i, -5);
    assert_int_equal(gm_gguf_get_u64(g, "t.u16", &u, NULL), 0);
    assert_int_equal(u, 60000);
    assert_int_equal(gm_gguf_get_i64(g, "t.i16", &i, NULL), 0);
    assert_int_equal(i, -300);
    assert_int_equal(gm_gguf_get_u64(g, "t.u32", &u, NULL), 0);
    assert_int_equal(u, 4000000000u);
    assert_int_equal(gm_gguf_get_i64(g, "t.i32", &i, NULL), 0);
    assert_int_equal(i, -2000000000);
    assert_int_equal(gm_gguf_get_f64(g, "t.f32", &f, NULL), 0);
    assert_true(f == 1.5);
    assert_int_equal(gm_gguf_get_bool(g, "t.bool", &bo, NULL), 0);
    assert_true(bo);
    assert_int_equal(gm_gguf_get_bool(g, "t.bool.false", &bo, NULL), 0);
    assert_false(bo);
    assert_int_equal(gm_gguf_get_str(g, "t.str", &s, NULL), 0);
    assert_str(s, "h\xc3\xa9llo");
    assert_int_equal(s.len, 6);
    assert_int_equal(gm_gguf_get_str(g, "t.str.empty", &s, NULL), 0);
    assert_int_equal(s.len, 0);
    assert_int_equal(gm_gguf_get_u64(g, "t.u64", &u, NULL), 0);
    assert_int_equal(u, (1ull << 40) | 5);
    assert_int_equal(gm_gguf_get_i64(g, "t.i64", &i, NULL), 0);
    assert_true(i == -(int64_t)(1ull << 40));
    assert_int_equal(gm_gguf_get_f64(g, "t.f64", &f, NULL), 0);
    assert_true(f == 2.25);
    assert_int_equal(gm_gguf_get_u64(g, "t.u64.max", &u, NULL), 0);
    assert_true(u == UINT64_MAX);

    /* the same through the by-index getters */
    int64_t k = gm_gguf_find_kv(g, "t.u16");
    assert_int_equal(gm_gguf_kv_u64(g, (uint64_t)k, &u), 0);
    assert_int_equal(u, 60000);
    k = gm_gguf_find_kv(g, "t.str");
    assert_int_equal(gm_gguf_kv_str(g, (uint64_t)k, &s), 0);
    assert_str(s, "h\xc3\xa9llo");
    k = gm_gguf_find_kv(g, "t.bool");
    assert_int_equal(gm_gguf_kv_bool(g, (uint64_t)k, &bo), 0);
    assert_true(bo);
    assert_int_equal(gm_gguf_kv_u64(g, 26, &u), GM_ENOTFOUND);
    assert_int_equal(gm_gguf_kv_str(g, 1000, &s), GM_ENOTFOUND);
    assert_int_equal(gm_gguf_kv_arr(g, UINT64_MAX, &(gm_gguf_arr){0}), GM_ENOTFOUND);
    gm_gguf_close(g);
}

/* Integers convert between widths when the value fits; nothing else converts. */
static void test_conversions_and_etype(void **state)
{
    (void)state;
    gm_gguf *g = open_types_file();
    uint64_t u;
    int64_t i;
    double f;
    bool bo;
    gm_gguf_str s;
    gm_gguf_arr a;
    gm_err err = {0};

    /* widening and signedness changes that fit */
    assert_int_equal(gm_gguf_get_i64(g, "t.u8", &i, NULL), 0);
    assert_int_equal(i, 200);
    assert_int_equal(gm_gguf_get_i64(g, "t.u32", &i, NULL), 0);
    assert_int_equal(i, 4000000000);
    assert_int_equal(gm_gguf_get_u64(g, "t.i32.pos", &u, NULL), 0);
    assert_int_equal(u, 12);
    assert_int_equal(gm_gguf_get_i64(g, "t.u64", &i, NULL), 0);
    assert_int_equal(i, (int64_t)((1ull << 40) | 5));
    /* get_f64 takes any integer or float */
    assert_int_equal(gm_gguf_get_f64(g, "t.i16", &f, NULL), 0);
    assert_true(f == -300.0);
    assert_int_equal(gm_gguf_get_f64(g, "t.u32", &f, NULL), 0);
    assert_true(f == 4e9);
    assert_int_equal(gm_gguf_get_f64(g, "t.i64", &f, NULL), 0);
    assert_true(f == -1099511627776.0);

    /* values that do not fit */
    assert_int_equal(gm_gguf_get_u64(g, "t.i8", &u, &err), GM_ETYPE);
    assert_int_equal(err.code, GM_ETYPE);
    assert_non_null(strstr(err.msg, "types.gguf"));
    assert_non_null(strstr(err.msg, "'t.i8' holds a i8, not a non-negative integer"));
    assert_int_equal(gm_gguf_get_u64(g, "t.i64", &u, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_i64(g, "t.u64.max", &i, NULL), GM_ETYPE);
    /* other kinds */
    assert_int_equal(gm_gguf_get_u64(g, "t.f32", &u, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_i64(g, "t.f64", &i, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_u64(g, "t.bool", &u, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_f64(g, "t.bool", &f, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_bool(g, "t.u8", &bo, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_u64(g, "t.str", &u, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_f64(g, "t.arr.u8", &f, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_str(g, "t.u32", &s, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_str(g, "t.arr.str", &s, NULL), GM_ETYPE);
    assert_int_equal(gm_gguf_get_arr(g, "t.str", &a, NULL), GM_ETYPE);
    gm_err_clear(&err);
    assert_int_equal(gm_gguf_get_arr(g, "t.u8", &a, &err), GM_ETYPE);
    assert_non_null(strstr(err.msg, "'t.u8' holds a u8, not an array"));

    /* absent keys */
    gm_err_clear(&err);
    assert_int_equal(gm_gguf_get_u64(g, "no.such.key", &u, &err), GM_ENOTFOUND);
    assert_int_equal(err.code, GM_ENOTFOUND);
    assert_non_null(strstr(err.msg, "'no.such.key' is missing"));
    assert_int_equal(gm_gguf_get_str(g, "no.such.key", &s, NULL), GM_ENOTFOUND);
    assert_int_equal(gm_gguf_get_arr(g, "no.such.key", &a, NULL), GM_ENOTFOUND);
    assert_int_equal(gm_gguf_get_bool(g, "no.such.key", &bo, NULL), GM_ENOTFOUND);
    gm_gguf_close(g);
}

static void test_arrays(void **state)
{
    (void)state;
    gm_gguf *g = open_types_file();
    gm_gguf_arr a, sub, sub2;
    uint64_t u;
    int64_t i;
    double f;
    gm_gguf_str s;

    assert_int_equal(gm_gguf_get_arr(g, "t.arr.u8", &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_U8);
    assert_int_equal(a.n, 3);
    assert_int_equal(a.data_bytes, 3);
    assert_int_equal(a.data[2], 255);
    assert_int_equal(gm_gguf_arr_u64(&a, 0, &u), 0);
    assert_int_equal(u, 1);
    assert_int_equal(gm_gguf_arr_i64(&a, 2, &i), 0);
    assert_int_equal(i, 255);
    assert_int_equal(gm_gguf_arr_f64(&a, 1, &f), 0);
    assert_true(f == 2.0);
    assert_int_equal(gm_gguf_arr_u64(&a, 3, &u), GM_ERANGE);
    assert_int_equal(gm_gguf_arr_str(&a, 0, &s), GM_ETYPE);
    assert_int_equal(gm_gguf_arr_sub(&a, 0, &sub), GM_ETYPE);

    assert_int_equal(gm_gguf_get_arr(g, "t.arr.i16", &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_I16);
    assert_int_equal(a.data_bytes, 4);
    assert_int_equal(gm_gguf_arr_i64(&a, 0, &i), 0);
    assert_int_equal(i, -1);
    assert_int_equal(gm_gguf_arr_u64(&a, 0, &u), GM_ETYPE); /* negative */
    assert_int_equal(gm_gguf_arr_u64(&a, 1, &u), 0);
    assert_int_equal(u, 300);

    assert_int_equal(gm_gguf_get_arr(g, "t.arr.f32", &a, NULL), 0);
    assert_int_equal(gm_gguf_arr_f64(&a, 0, &f), 0);
    assert_true(f == 0.5);
    assert_int_equal(gm_gguf_arr_f64(&a, 1, &f), 0);
    assert_true(f == -2.0);
    assert_int_equal(gm_gguf_arr_i64(&a, 0, &i), GM_ETYPE);

    assert_int_equal(gm_gguf_get_arr(g, "t.arr.u64", &a, NULL), 0);
    assert_int_equal(gm_gguf_arr_u64(&a, 0, &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(gm_gguf_arr_i64(&a, 0, &i), GM_ETYPE); /* does not fit */
    assert_int_equal(gm_gguf_arr_i64(&a, 1, &i), 0);
    assert_int_equal(i, 9);
    assert_int_equal(gm_gguf_get_arr(g, "t.arr.i64", &a, NULL), 0);
    assert_int_equal(gm_gguf_arr_i64(&a, 0, &i), 0);
    assert_true(i == INT64_MIN);
    assert_int_equal(gm_gguf_get_arr(g, "t.arr.f64", &a, NULL), 0);
    assert_int_equal(gm_gguf_arr_f64(&a, 0, &f), 0);
    assert_true(f == 3.5);

    assert_int_equal(gm_gguf_get_arr(g, "t.arr.bool", &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_BOOL);
    assert_int_equal(a.n, 2);
    assert_int_equal(a.data[0], 1);
    assert_int_equal(a.data[1], 0);

    assert_int_equal(gm_gguf_get_arr(g, "t.arr.empty", &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_U64);
    assert_int_equal(a.n, 0);
    assert_int_equal(a.data_bytes, 0);
    assert_int_equal(gm_gguf_arr_u64(&a, 0, &u), GM_ERANGE);

    /* strings */
    assert_int_equal(gm_gguf_get_arr(g, "t.arr.str", &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_STRING);
    assert_int_equal(a.n, 3);
    assert_int_equal(a.data_bytes, 3 * 8 + 0 + 2 + 2);
    assert_int_equal(gm_gguf_arr_str(&a, 0, &s), 0);
    assert_int_equal(s.len, 0);
    assert_int_equal(gm_gguf_arr_str(&a, 1, &s), 0);
    assert_str(s, "ab");
    assert_int_equal(gm_gguf_arr_str(&a, 2, &s), 0);
    assert_str(s, "\xc4\x89");
    assert_int_equal(gm_gguf_arr_str(&a, 3, &s), GM_ERANGE);
    assert_int_equal(gm_gguf_arr_u64(&a, 0, &u), GM_ETYPE);
    assert_int_equal(gm_gguf_arr_sub(&a, 0, &sub), GM_ETYPE);

    /* nested: [[1, 2], ["q"], [[-1]], []] */
    assert_int_equal(gm_gguf_get_arr(g, "t.arr.nested", &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_ARRAY);
    assert_int_equal(a.n, 4);
    assert_int_equal(gm_gguf_arr_u64(&a, 0, &u), GM_ETYPE);
    assert_int_equal(gm_gguf_arr_str(&a, 0, &s), GM_ETYPE);
    assert_int_equal(gm_gguf_arr_sub(&a, 4, &sub), GM_ERANGE);
    assert_int_equal(gm_gguf_arr_sub(&a, 0, &sub), 0);
    assert_int_equal(sub.elem_type, GM_GGUF_U32);
    assert_int_equal(sub.n, 2);
    assert_int_equal(gm_gguf_arr_u64(&sub, 1, &u), 0);
    assert_int_equal(u, 2);
    assert_int_equal(gm_gguf_arr_sub(&a, 1, &sub), 0);
    assert_int_equal(sub.elem_type, GM_GGUF_STRING);
    assert_int_equal(gm_gguf_arr_str(&sub, 0, &s), 0);
    assert_str(s, "q");
    assert_int_equal(gm_gguf_arr_sub(&a, 2, &sub), 0);
    assert_int_equal(sub.elem_type, GM_GGUF_ARRAY);
    assert_int_equal(sub.n, 1);
    assert_int_equal(gm_gguf_arr_sub(&sub, 0, &sub2), 0);
    assert_int_equal(sub2.elem_type, GM_GGUF_I8);
    assert_int_equal(gm_gguf_arr_i64(&sub2, 0, &i), 0);
    assert_int_equal(i, -1);
    assert_int_equal(gm_gguf_arr_sub(&a, 3, &sub), 0);
    assert_int_equal(sub.elem_type, GM_GGUF_U8);
    assert_int_equal(sub.n, 0);
    /* the outer array's bytes: 4 headers of 12 bytes plus the elements */
    assert_int_equal(a.data_bytes, 4 * 12 + 8 + (8 + 1) + (12 + 1) + 0);
    gm_gguf_close(g);
}

/* Arrays nested to the reader's limit (8 levels below the value) open and can be walked. */
static void test_nested_at_depth_limit(void **state)
{
    (void)state;
    gm_gb b;
    gm_gb_init(&b);
    gm_gb_header(&b, 3, 0, 1);
    gm_gb_key(&b, "deep", GM_GB_ARRAY);
    for (int d = 0; d < 8; d++)
        gm_gb_arr(&b, GM_GB_ARRAY, 1);
    gm_gb_arr(&b, GM_GB_U8, 1);
    gm_gb_u8(&b, 42);
    gm_gguf *g = open_built(&b, "deep.gguf");
    gm_gguf_arr a;
    assert_int_equal(gm_gguf_get_arr(g, "deep", &a, NULL), 0);
    for (int d = 0; d < 8; d++) {
        assert_int_equal(a.elem_type, GM_GGUF_ARRAY);
        gm_gguf_arr sub;
        assert_int_equal(gm_gguf_arr_sub(&a, 0, &sub), 0);
        a = sub;
    }
    uint64_t u;
    assert_int_equal(a.elem_type, GM_GGUF_U8);
    assert_int_equal(gm_gguf_arr_u64(&a, 0, &u), 0);
    assert_int_equal(u, 42);
    gm_gguf_close(g);
    gm_gb_free(&b);
}

/* The fuzz seeds (tests/fuzz/corpus/gguf, written by tests/fuzz/gen_gguf_corpus) must stay
 * valid files, or the fuzzer starts from nothing. */
static void test_fuzz_seeds_open(void **state)
{
    (void)state;
    static const char *const seeds[] = {"header-only.gguf", "all-types.gguf",
                                        "two-tensors-v3.gguf", "v2-align64-split-keys.gguf",
                                        "shapes-align8.gguf"};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "../fuzz/corpus/gguf/%s", seeds[i]);
        gm_gguf *g = NULL;
        gm_err err = {0};
        if (gm_gguf_open(&g, gm_fixture(rel), &err) != 0)
            fail_msg("seed %s: %s", seeds[i], err.msg);
        gm_gguf_close(g);
    }
}

/* ---- tensors ---- */

static const gm_gb_tensor_spec k_four[4] = {
    {"a", 2, {4, 4, 1, 1}, GM_TYPE_F32, 64},
    {"b", 2, {32, 2, 1, 1}, GM_TYPE_Q8_0, 68},
    {"blk.0.c", 3, {2, 3, 4, 1}, GM_TYPE_F16, 48},
    {"d", 4, {1, 2, 3, 4}, GM_TYPE_I8, 24},
};

static void check_tensor(const gm_gguf *g, const gm_gb *b, const gm_gb_layout *lay,
                         const gm_gb_tensor_spec *spec, uint64_t idx, uint8_t fill)
{
    const gm_gguf_tensor *t = gm_gguf_tensor_at(g, idx);
    assert_non_null(t);
    assert_string_equal(t->name, spec->name);
    assert_ptr_equal(gm_gguf_find_tensor(g, spec->name), t);
    assert_int_equal(t->type, spec->type);
    assert_int_equal(t->n_dims, spec->n_dims);
    uint64_t n = 1;
    for (uint32_t d = 0; d < GM_GGUF_MAX_DIMS; d++) {
        assert_int_equal(t->ne[d], d < spec->n_dims ? spec->ne[d] : 1);
        n *= t->ne[d];
    }
    assert_int_equal(t->n_elems, n);
    assert_int_equal(t->n_bytes, spec->n_bytes);
    assert_int_equal(t->offset, lay->t_data_offset[idx]);
    assert_int_equal(t->file_offset, lay->data + lay->t_data_offset[idx]);
    assert_int_equal(t->file_offset, gm_gguf_part_data_offset(g, t->part) + t->offset);
    const uint8_t *p = gm_gguf_tensor_data(g, t);
    assert_non_null(p);
    assert_memory_equal(p, b->buf + t->file_offset, t->n_bytes);
    for (uint64_t k = 0; k < t->n_bytes; k++)
        if (p[k] != (uint8_t)(fill + 7 * idx + k))
            fail_msg("tensor %s byte %llu", t->name, (unsigned long long)k);
}

static void test_tensors(void **state)
{
    (void)state;
    gm_gb b;
    gm_gb_layout lay;
    gm_gb_init(&b);
    gm_gb_model m = {.tensors = k_four, .n_tensors = 4, .fill = 3};
    gm_gb_model_build(&b, &m, &lay);
    gm_gguf *g = open_built(&b, "tensors.gguf");

    assert_int_equal(gm_gguf_alignment(g), 32);
    assert_int_equal(gm_gguf_n_parts(g), 1);
    assert_string_equal(gm_gguf_part_path(g, 0), gm_gguf_path(g));
    assert_null(gm_gguf_part_path(g, 1));
    assert_int_equal(gm_gguf_part_size(g, 0), b.len);
    assert_int_equal(gm_gguf_total_size(g), b.len);
    assert_int_equal(gm_gguf_part_data_offset(g, 0), lay.data);
    assert_int_equal(lay.data % 32, 0);
    assert_int_equal(gm_gguf_n_tensors(g), 4);
    for (uint64_t i = 0; i < 4; i++) {
        check_tensor(g, &b, &lay, &k_four[i], i, 3);
        assert_int_equal(gm_gguf_tensor_at(g, i)->part, 0);
    }
    /* offsets as laid out: 0, 64, 160 (64 + 68 rounded up to 32), 224 */
    assert_int_equal(gm_gguf_find_tensor(g, "b")->offset, 64);
    assert_int_equal(gm_gguf_find_tensor(g, "blk.0.c")->offset, 160);
    assert_int_equal(gm_gguf_find_tensor(g, "d")->offset, 224);
    assert_null(gm_gguf_tensor_at(g, 4));
    assert_null(gm_gguf_find_tensor(g, "c"));
    assert_null(gm_gguf_find_tensor(g, "blk.0."));
    assert_null(gm_gguf_find_tensor(g, ""));

    /* metadata of the model builder */
    gm_gguf_str s;
    uint64_t u;
    assert_int_equal(gm_gguf_get_str(g, "general.architecture", &s, NULL), 0);
    assert_str(s, "test");
    assert_int_equal(gm_gguf_get_u64(g, "test.count", &u, NULL), 0);
    assert_int_equal(u, 7);
    gm_gguf_close(g);
    gm_gb_free(&b);
}

static void test_versions(void **state)
{
    (void)state;
    for (uint32_t v = 2; v <= 3; v++) {
        gm_gb b;
        gm_gb_layout lay;
        gm_gb_init(&b);
        gm_gb_model m = {.version = v, .tensors = gm_gb_default_tensors, .n_tensors = 2};
        gm_gb_model_build(&b, &m, &lay);
        gm_gguf *g = open_built(&b, v == 2 ? "v2.gguf" : "v3.gguf");
        assert_int_equal(gm_gguf_version(g), v);
        assert_int_equal(gm_gguf_n_tensors(g), 2);
        check_tensor(g, &b, &lay, &gm_gb_default_tensors[1], 1, 0);
        gm_gguf_close(g);
        gm_gb_free(&b);
    }
}

/* The smallest valid file: a header with no metadata and no tensors. */
static void test_header_only(void **state)
{
    (void)state;
    gm_gb b;
    gm_gb_init(&b);
    gm_gb_header(&b, 3, 0, 0);
    assert_int_equal(b.len, 24);
    gm_gguf *g = open_built(&b, "header-only.gguf");
    assert_int_equal(gm_gguf_n_kv(g), 0);
    assert_int_equal(gm_gguf_n_tensors(g), 0);
    assert_int_equal(gm_gguf_find_kv(g, "general.architecture"), -1);
    assert_null(gm_gguf_find_tensor(g, "a"));
    assert_int_equal(gm_gguf_alignment(g), 32);
    gm_gguf_close(g);
    gm_gb_free(&b);
}

/* A file named as the only part of a split set ("-00001-of-00001") but without split keys is a
 * single file (llama.cpp decides by the metadata, not the name). */
static void test_single_part_name(void **state)
{
    (void)state;
    gm_gb b;
    gm_gb_init(&b);
    gm_gb_header(&b, 3, 0, 1);
    gm_gb_kv_str(&b, "general.architecture", "llama");
    gm_gguf *g = open_built(&b, "solo-00001-of-00001.gguf");
    assert_int_equal(gm_gguf_n_parts(g), 1);
    assert_int_equal(gm_gguf_find_kv(g, "general.architecture"), 0);
    gm_gguf_close(g);
    gm_gb_free(&b);
}

static void test_custom_alignment(void **state)
{
    (void)state;
    static const uint32_t aligns[] = {1, 8, 64, 4096};
    for (size_t k = 0; k < sizeof aligns / sizeof aligns[0]; k++) {
        uint32_t al = aligns[k];
        gm_gb b;
        gm_gb_layout lay;
        gm_gb_init(&b);
        gm_gb_model m = {.alignment = al, .tensors = k_four, .n_tensors = 4, .fill = 9};
        gm_gb_model_build(&b, &m, &lay);
        char name[64];
        snprintf(name, sizeof name, "align-%u.gguf", al);
        gm_gguf *g = open_built(&b, name);
        assert_int_equal(gm_gguf_alignment(g), al);
        uint64_t u;
        assert_int_equal(gm_gguf_get_u64(g, "general.alignment", &u, NULL), 0);
        assert_int_equal(u, al);
        assert_int_equal(gm_gguf_part_data_offset(g, 0), lay.data);
        assert_int_equal(lay.data % al, 0);
        if (al == 1)
            assert_int_equal(lay.data, lay.infos_end); /* no padding at all */
        for (uint64_t i = 0; i < 4; i++) {
            check_tensor(g, &b, &lay, &k_four[i], i, 9);
            assert_int_equal(gm_gguf_tensor_at(g, i)->offset % al, 0);
        }
        gm_gguf_close(g);
        gm_gb_free(&b);
    }
}

/* One byte of each of n pages at d. Not instrumented by AddressSanitizer: its checks would read
 * the shadow of the pages, whose first use faults, and the faults of the pages are what count. */
__attribute__((no_sanitize("address"))) static unsigned touch_pages(const uint8_t *d, size_t n,
                                                                    size_t page)
{
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += ((const volatile uint8_t *)d)[i * page];
    return sum;
}

static void count_progress(void *ctx, uint64_t done, uint64_t total)
{
    uint64_t *seen = ctx;
    assert_true(done <= total && done > seen[1]);
    seen[0]++;
    seen[1] = done;
}

/* Pages of [d, d + n pages) mapped into this process (/proc/self/pagemap's present bit), or -1
 * when it cannot be read. */
static long mapped_pages(const uint8_t *d, size_t n, size_t page)
{
    FILE *f = fopen("/proc/self/pagemap", "rb");
    if (!f)
        return -1;
    long present = 0;
    uint64_t e;
    const bool ok = fseeko(f, (off_t)((uintptr_t)d / page * sizeof e), SEEK_SET) == 0;
    for (size_t i = 0; ok && i < n && fread(&e, sizeof e, 1, f) == 1; i++)
        present += (long)(e >> 63);
    fclose(f);
    return ok ? present : -1;
}

/* gm_gguf_populate_except leaves a tensor out (a lookup table read by row stays on disk): after
 * it, every page of the tensors before and after the table is mapped into the process, as after
 * gm_gguf_populate, and most of the table's are not (the page cache may hold them all the same:
 * the kernel reads ahead past a populated range, 8 MiB on some drives, so the mapping, not the
 * cache, is what is checked; a huge page at either end may map up to 2 MiB of it). Linux before 5.14 has no
 * MADV_POPULATE_READ: only the call's result is checked there. */
static void test_populate_except(void **state)
{
    (void)state;
    static const gm_gb_tensor_spec ts[3] = {{"a", 2, {256, 1024, 1, 1}, GM_TYPE_F32, 1u << 20},
                                            {"table", 2, {4096, 1024, 1, 1}, GM_TYPE_F32, 16u << 20},
                                            {"c", 2, {256, 1024, 1, 1}, GM_TYPE_F32, 1u << 20}};
    gm_gb b;
    gm_gb_layout lay;
    gm_gb_init(&b);
    gm_gb_model m = {.alignment = 4096, .tensors = ts, .n_tensors = 3, .fill = 5};
    gm_gb_model_build(&b, &m, &lay);
    const char *path = tmp_path("populate-except.gguf");
    assert_int_equal(gm_gb_write(&b, path), 0);
    gm_gguf *g = NULL;
    gm_err err = {0};
    if (gm_gguf_open(&g, path, &err) != 0)
        fail_msg("%s", err.msg);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const gm_gguf_tensor *table = gm_gguf_find_tensor(g, "table");
    uint8_t skip[3] = {0};
    skip[table - gm_gguf_tensor_at(g, 0)] = 1;
    gm_gguf_populate_info info;
    if (gm_gguf_populate_except(g, skip, NULL, NULL, &info, &err) != 0)
        fail_msg("populate: %s", err.msg);
    /* the part's bytes less the table's whole pages */
    assert_int_equal(info.bytes, gm_gguf_part_size(g, 0) - gm_gguf_part_data_offset(g, 0) / page * page -
                                     table->n_bytes);
    struct utsname un;
    unsigned major = 0, minor = 0;
    if (uname(&un) == 0 && sscanf(un.release, "%u.%u", &major, &minor) == 2 &&
        (major > 5 || (major == 5 && minor >= 14))) {
        long mapped[3];
        size_t pages[3];
        for (int i = 0; i < 3; i++) {
            const gm_gguf_tensor *t = gm_gguf_find_tensor(g, ts[i].name);
            pages[i] = (size_t)(t->n_bytes / page);
            mapped[i] = mapped_pages(gm_gguf_tensor_data(g, t), pages[i], page);
        }
        print_message("pages mapped after populating all but the table: a %ld/%zu, table %ld/%zu, c %ld/%zu\n",
                      mapped[0], pages[0], mapped[1], pages[1], mapped[2], pages[2]);
        if (mapped[0] >= 0) {
            assert_int_equal(mapped[0], (long)pages[0]);
            assert_int_equal(mapped[2], (long)pages[2]);
            assert_true(mapped[1] < (long)pages[1] / 2);
        }
    }
    check_tensor(g, &b, &lay, &ts[1], 1, 5);
    gm_gguf_close(g);
    remove(path);
    gm_gb_free(&b);
}

/* gm_gguf_populate maps a part's tensor data in: with the file's pages dropped from the page
 * cache first, a 4 MiB tensor is not resident after the open (which reads the header only) and
 * is resident, every page, after populate. Where the file system keeps the pages regardless
 * (tmpfs) the first half cannot be seen and only the second is checked. */
static void test_populate(void **state)
{
    (void)state;
    static const gm_gb_tensor_spec big[1] = {{"w", 2, {1024, 1024, 1, 1}, GM_TYPE_F32, 4u << 20}};
    gm_gb b;
    gm_gb_layout lay;
    gm_gb_init(&b);
    gm_gb_model m = {.alignment = 4096, .tensors = big, .n_tensors = 1, .fill = 3};
    gm_gb_model_build(&b, &m, &lay);
    const char *path = tmp_path("populate.gguf");
    assert_int_equal(gm_gb_write(&b, path), 0);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fdatasync(fd), 0);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    gm_gguf *g = NULL;
    gm_err err = {0};
    if (gm_gguf_open(&g, path, &err) != 0)
        fail_msg("%s", err.msg);
    const gm_gguf_tensor *t = gm_gguf_find_tensor(g, "w");
    const uint8_t *d = gm_gguf_tensor_data(g, t);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), n_pages = (size_t)(t->n_bytes / page);
    assert_true((uintptr_t)d % page == 0);
    unsigned char *vec = malloc(n_pages);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)d, n_pages * page, vec), 0);
    size_t before = 0;
    for (size_t i = 0; i < n_pages; i++)
        before += vec[i] & 1;
    uint64_t seen[2] = {0, 0};
    gm_gguf_populate_info info;
    if (gm_gguf_populate(g, count_progress, seen, &info, &err) != 0)
        fail_msg("populate: %s", err.msg);
    /* progress: reported, growing, the last call with everything done; the mapping's size (a
     * 4 MiB part is too small to be read again) */
    assert_true(seen[0] >= 1);
    assert_false(info.reread);
    assert_true(info.bytes >= t->n_bytes);
    assert_int_equal(seen[1],
                     gm_gguf_part_size(g, 0) - gm_gguf_part_data_offset(g, 0) / page * page);
    assert_int_equal(mincore((void *)d, n_pages * page, vec), 0);
    for (size_t i = 0; i < n_pages; i++)
        if (!(vec[i] & 1))
            fail_msg("page %zu of %zu not resident after populate (%zu were before)", i, n_pages,
                     before);
    /* and mapped into this process: reading every page takes (almost) no page fault. Linux
     * before 5.14 has no MADV_POPULATE_READ and only reads ahead: not checked there. */
    struct utsname un;
    unsigned major = 0, minor = 0;
    if (uname(&un) == 0 && sscanf(un.release, "%u.%u", &major, &minor) == 2 &&
        (major > 5 || (major == 5 && minor >= 14))) {
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        const unsigned sum = touch_pages(d, n_pages, page);
        getrusage(RUSAGE_SELF, &r1);
        const long faults = r1.ru_minflt - r0.ru_minflt + r1.ru_majflt - r0.ru_majflt;
        print_message("populate: %zu of %zu pages resident before, all after; %ld page faults "
                      "reading them (sum %u)\n", before, n_pages, faults, sum);
        if (faults > (long)(n_pages / 64))
            fail_msg("%ld page faults reading %zu populated pages", faults, n_pages);
    }
    check_tensor(g, &b, &lay, &big[0], 0, 3);
    free(vec);
    gm_gguf_close(g);
    remove(path);
    gm_gb_free(&b);
}

/* ---- split sets ---- */

static const gm_gb_tensor_spec k_part1[2] = {
    {"a", 2, {4, 4, 1, 1}, GM_TYPE_F32, 64},
    {"b", 2, {32, 2, 1, 1}, GM_TYPE_Q8_0, 68},
};
static const gm_gb_tensor_spec k_part2[1] = {
    {"c", 1, {8, 1, 1, 1}, GM_TYPE_F32, 32},
};
static const gm_gb_tensor_spec k_part3[2] = {
    {"d", 2, {2, 2, 1, 1}, GM_TYPE_F32, 16},
    {"e", 1, {64, 1, 1, 1}, GM_TYPE_Q8_0, 68},
};

static void test_split_three_parts(void **state)
{
    (void)state;
    const gm_gb_tensor_spec *specs[3] = {k_part1, k_part2, k_part3};
    const uint32_t counts[3] = {2, 1, 2};
    gm_gb b[3];
    gm_gb_layout lay[3];
    char paths[3][512];
    uint64_t total = 0;
    for (uint32_t p = 0; p < 3; p++) {
        gm_gb_init(&b[p]);
        gm_gb_model m = {.alignment = p == 1 ? 64 : 0, .split_no = p, .split_count = 3,
                         .split_tensors = 5, .tensors = specs[p], .n_tensors = counts[p],
                         .fill = (uint8_t)(50 * p)};
        gm_gb_model_build(&b[p], &m, &lay[p]);
        snprintf(paths[p], sizeof paths[p], "%s/split-model-%05u-of-00003.gguf", gm_test_tmpdir(),
                 p + 1);
        assert_int_equal(gm_gb_write(&b[p], paths[p]), 0);
        total += b[p].len;
    }
    gm_gguf *g = NULL;
    gm_err err = {0};
    int rc = gm_gguf_open(&g, paths[0], &err);
    if (rc)
        fail_msg("%s", err.msg);
    assert_int_equal(gm_gguf_n_parts(g), 3);
    assert_int_equal(gm_gguf_total_size(g), total);
    for (uint32_t p = 0; p < 3; p++) {
        assert_string_equal(gm_gguf_part_path(g, p), paths[p]);
        assert_int_equal(gm_gguf_part_size(g, p), b[p].len);
        assert_int_equal(gm_gguf_part_data_offset(g, p), lay[p].data);
    }
    assert_int_equal(gm_gguf_alignment(g), 32); /* the first part's */
    assert_int_equal(gm_gguf_n_tensors(g), 5);
    uint64_t idx = 0;
    for (uint32_t p = 0; p < 3; p++) {
        for (uint32_t i = 0; i < counts[p]; i++, idx++) {
            const gm_gguf_tensor *t = gm_gguf_tensor_at(g, idx);
            const gm_gb_tensor_spec *sp = &specs[p][i];
            assert_string_equal(t->name, sp->name);
            assert_ptr_equal(gm_gguf_find_tensor(g, sp->name), t);
            assert_int_equal(t->part, p);
            assert_int_equal(t->type, sp->type);
            assert_int_equal(t->n_bytes, sp->n_bytes);
            assert_int_equal(t->offset, lay[p].t_data_offset[i]);
            assert_int_equal(t->file_offset, lay[p].data + lay[p].t_data_offset[i]);
            const uint8_t *d = gm_gguf_tensor_data(g, t);
            for (uint64_t k = 0; k < t->n_bytes; k++)
                if (d[k] != (uint8_t)(50 * p + 7 * i + k))
                    fail_msg("tensor %s byte %llu", t->name, (unsigned long long)k);
        }
    }
    /* the third part's second tensor is laid out after the first with the default alignment */
    assert_int_equal(gm_gguf_find_tensor(g, "e")->offset, 32);
    /* metadata is the first part's */
    uint64_t u;
    assert_int_equal(gm_gguf_get_u64(g, "split.no", &u, NULL), 0);
    assert_int_equal(u, 0);
    assert_int_equal(gm_gguf_get_u64(g, "split.tensors.count", &u, NULL), 0);
    assert_int_equal(u, 5);
    assert_int_equal(gm_gguf_find_kv(g, "general.alignment"), -1);
    gm_gguf_close(g);
    for (uint32_t p = 0; p < 3; p++) {
        remove(paths[p]);
        gm_gb_free(&b[p]);
    }
}

/* A one-part "split" set is still a split set: it needs its split keys. */
static void test_split_one_part(void **state)
{
    (void)state;
    gm_gb b;
    gm_gb_init(&b);
    gm_gb_model m = {.split_no = 0, .split_count = 1, .split_tensors = 2,
                     .tensors = gm_gb_default_tensors, .n_tensors = 2};
    gm_gb_model_build(&b, &m, NULL);
    gm_gguf *g = open_built(&b, "single-00001-of-00001.gguf");
    assert_int_equal(gm_gguf_n_parts(g), 1);
    assert_int_equal(gm_gguf_n_tensors(g), 2);
    gm_gguf_close(g);
    gm_gb_free(&b);
}

/* ---- hostile but valid: keys crafted to collide ---- */

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* 40000 keys whose unseeded FNV-1a hashes share their low 17 bits (the slot in a table of
 * 2^17 entries, the size the reader uses for 40000 keys): the low bits of FNV-1a depend only on
 * low bits, so two steering bytes chosen by meet-in-the-middle land any prefix on one slot.
 * With such a table open was quadratic (2 s for this 1 MB file at -O2; minutes for the 1M keys
 * the reader allows); the reader's hash is seeded, so it must stay fast. */
#define N_FLOOD 40000u
static void test_colliding_keys_open_fast(void **state)
{
    (void)state;
    const uint64_t mask = (1u << 17) - 1, target = 12345 & mask, p = 1099511628211ull;
    uint64_t inv = p; /* p^-1 mod 2^64 by Newton's iteration */
    for (int i = 0; i < 6; i++)
        inv *= 2 - p * inv;
    uint32_t *back = malloc((mask + 1) * sizeof *back); /* state before b3 -> b3 b4 */
    assert_non_null(back);
    memset(back, 0xff, (mask + 1) * sizeof *back);
    for (uint32_t b4 = 0x21; b4 < 0x7f; b4++)
        for (uint32_t b3 = 0x21; b3 < 0x7f; b3++) {
            uint64_t s3 = ((target * inv) & mask) ^ b4;
            back[((s3 * inv) & mask) ^ b3] = (b3 << 8) | b4;
        }
    gm_gb b;
    gm_gb_init(&b);
    gm_gb_header(&b, 3, 0, N_FLOOD);
    char key[32];
    uint32_t made = 0;
    for (uint32_t i = 0; made < N_FLOOD; i++) {
        int len = snprintf(key, sizeof key, "k%08x", i);
        uint64_t h = fnv1a(key, (size_t)len);
        bool found = false;
        for (uint32_t b1 = 0x21; b1 < 0x7f && !found; b1++)
            for (uint32_t b2 = 0x21; b2 < 0x7f && !found; b2++) {
                uint64_t st = (((h ^ b1) * p ^ b2) * p) & mask;
                if (back[st] != UINT32_MAX) {
                    key[len] = (char)b1;
                    key[len + 1] = (char)b2;
                    key[len + 2] = (char)(back[st] >> 8);
                    key[len + 3] = (char)(back[st] & 0xff);
                    key[len + 4] = '\0';
                    found = true;
                }
            }
        if (!found)
            continue;
        assert_int_equal(fnv1a(key, (size_t)len + 4) & mask, target);
        gm_gb_kv_u32(&b, key, made++);
    }
    free(back);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gm_gguf *g = open_built(&b, "colliding-keys.gguf");
    assert_int_equal(gm_gguf_n_kv(g), N_FLOOD);
    for (uint64_t i = 0; i < N_FLOOD; i += 97) {
        gm_gguf_str k = gm_gguf_kv_key(g, i);
        memcpy(key, k.ptr, k.len);
        key[k.len] = '\0';
        assert_int_equal(gm_gguf_find_kv(g, key), (int64_t)i);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* The time is printed for a person to read; speed is not asserted (no timing
     * thresholds in tests): the lookups above check that every colliding key is found. */
    print_message("  open and lookups of %u colliding keys: %.3f s\n", N_FLOOD, s);
    gm_gguf_close(g);
    gm_gb_free(&b);
}

/* ---- the bundled model ---- */

typedef struct want_tensor {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[3];
} want_tensor;

static void test_real_model(void **state)
{
    (void)state;
    const char *path = gm_fixture("trained-qwen3moe/model-q4_k_m.gguf");
    gm_gguf *g = NULL;
    gm_err err = {0};
    int rc = gm_gguf_open(&g, path, &err);
    if (rc)
        fail_msg("%s", err.msg);
    assert_int_equal(gm_gguf_version(g), 3);
    assert_int_equal(gm_gguf_n_parts(g), 1);
    assert_int_equal(gm_gguf_alignment(g), 32);
    assert_int_equal(gm_gguf_n_kv(g), 30);
    assert_int_equal(gm_gguf_n_tensors(g), 75);
    assert_int_equal(gm_gguf_part_size(g, 0), 12343776);
    assert_int_equal(gm_gguf_part_data_offset(g, 0), 32160);

    gm_gguf_str s;
    uint64_t u;
    double f;
    bool bo;
    gm_gguf_arr a;
    int64_t i;
    assert_int_equal(gm_gguf_get_str(g, "general.architecture", &s, NULL), 0);
    assert_str(s, "qwen3moe");
    assert_int_equal(gm_gguf_get_str(g, "tokenizer.ggml.pre", &s, NULL), 0);
    assert_str(s, "qwen2");
    assert_int_equal(gm_gguf_get_u64(g, "qwen3moe.block_count", &u, NULL), 0);
    assert_int_equal(u, 6);
    assert_int_equal(gm_gguf_get_u64(g, "qwen3moe.expert_count", &u, NULL), 0);
    assert_int_equal(u, 16);
    assert_int_equal(gm_gguf_get_u64(g, "qwen3moe.expert_used_count", &u, NULL), 0);
    assert_int_equal(u, 4);
    assert_int_equal(gm_gguf_get_u64(g, "tokenizer.ggml.eos_token_id", &u, NULL), 0);
    assert_int_equal(u, 1005);
    assert_int_equal(gm_gguf_get_f64(g, "qwen3moe.rope.freq_base", &f, NULL), 0);
    assert_true(f == 10000.0);
    assert_int_equal(gm_gguf_get_f64(g, "qwen3moe.attention.layer_norm_rms_epsilon", &f, NULL), 0);
    assert_true(fabs(f - 1e-6) < 1e-12);
    assert_int_equal(gm_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bo, NULL), 0);
    assert_false(bo);
    assert_int_equal(gm_gguf_get_arr(g, "tokenizer.ggml.tokens", &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_STRING);
    assert_int_equal(a.n, 1014);
    assert_int_equal(gm_gguf_arr_str(&a, 0, &s), 0);
    assert_str(s, "!");
    assert_int_equal(gm_gguf_arr_str(&a, 4, &s), 0);
    assert_str(s, "%");
    assert_int_equal(gm_gguf_get_arr(g, "tokenizer.ggml.token_type", &a, NULL), 0);
    assert_int_equal(a.elem_type, GM_GGUF_I32);
    assert_int_equal(a.n, 1014);
    assert_int_equal(gm_gguf_arr_i64(&a, 0, &i), 0);
    assert_int_equal(i, 1);
    assert_int_equal(gm_gguf_get_arr(g, "tokenizer.ggml.merges", &a, NULL), 0);
    assert_int_equal(a.n, 749);
    assert_int_equal(gm_gguf_arr_str(&a, 0, &s), 0);
    assert_str(s, "\xc4\xa0 A");
    assert_int_equal(gm_gguf_arr_str(&a, 1, &s), 0);
    assert_str(s, "e r");

    /* names and dims from gguf-dump.txt; types of this Q4_K_M file */
    static const want_tensor want[] = {
        {"output.weight", GM_TYPE_Q6_K, 2, {256, 1014, 1}},
        {"token_embd.weight", GM_TYPE_Q4_K, 2, {256, 1014, 1}},
        {"output_norm.weight", GM_TYPE_F32, 1, {256, 1, 1}},
        {"blk.0.attn_norm.weight", GM_TYPE_F32, 1, {256, 1, 1}},
        {"blk.0.ffn_down_exps.weight", GM_TYPE_Q4_K, 3, {256, 256, 16}},
        {"blk.0.ffn_gate_inp.weight", GM_TYPE_F32, 2, {256, 16, 1}},
        {"blk.0.attn_k.weight", GM_TYPE_Q4_K, 2, {256, 128, 1}},
        {"blk.3.attn_q_norm.weight", GM_TYPE_F32, 1, {64, 1, 1}},
        {"blk.5.ffn_up_exps.weight", GM_TYPE_Q4_K, 3, {256, 256, 16}},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const gm_gguf_tensor *t = gm_gguf_find_tensor(g, want[k].name);
        if (!t)
            fail_msg("tensor %s is missing", want[k].name);
        assert_int_equal(t->type, want[k].type);
        assert_int_equal(t->n_dims, want[k].n_dims);
        for (uint32_t d = 0; d < 3; d++)
            assert_int_equal(t->ne[d], want[k].ne[d]);
        assert_int_equal(t->ne[3], 1);
    }
    const gm_gguf_tensor *t = gm_gguf_tensor_at(g, 0);
    assert_string_equal(t->name, "output.weight");
    assert_int_equal(t->file_offset, 32160);
    assert_int_equal(t->n_bytes, 1014 * 210); /* Q6_K: 210 bytes per 256 elements */
    t = gm_gguf_find_tensor(g, "blk.5.ffn_up_exps.weight");
    assert_ptr_equal(t, gm_gguf_tensor_at(g, 74));
    assert_int_equal(t->offset, 11721792);
    assert_int_equal(t->n_bytes, 256 * 16 * 144);
    assert_int_equal(t->file_offset + t->n_bytes, gm_gguf_part_size(g, 0)); /* the last bytes */

    /* every tensor: found by its name, inside the file, its data pointer where its offset says */
    const uint8_t *base = (const uint8_t *)gm_gguf_tensor_data(g, gm_gguf_tensor_at(g, 0)) - 32160;
    uint64_t sum = 0;
    for (uint64_t k = 0; k < 75; k++) {
        t = gm_gguf_tensor_at(g, k);
        assert_ptr_equal(gm_gguf_find_tensor(g, t->name), t);
        assert_true(t->file_offset + t->n_bytes <= gm_gguf_part_size(g, 0));
        assert_ptr_equal(gm_gguf_tensor_data(g, t), base + t->file_offset);
        sum += t->n_bytes;
    }
    assert_true(sum <= 12343776 - 32160);
    gm_gguf_close(g);
}


/* ---- headers given as prefixes (remote files read by range requests) ---- */

/* Opens the parts' bytes as prefixes of len[i] bytes, growing the short one 4x at a time from
 * first bytes as the remote reader does, and checks that the result describes exactly what
 * gm_gguf_open of the files does. Returns how many times a part was short. */
static int open_as_prefixes(const gm_gguf *want, const gm_gb *b, uint32_t n, const char *name, uint64_t first)
{
    gm_gguf_prefix pre[3];
    uint64_t len[3];
    for (uint32_t i = 0; i < n; i++) {
        len[i] = first < b[i].len ? first : b[i].len;
        pre[i] = (gm_gguf_prefix){gm_gguf_part_path(want, i), b[i].buf, len[i], b[i].len};
    }
    int shorts = 0;
    gm_gguf *g = NULL;
    for (;;) {
        gm_err err = {0};
        uint32_t sp = 99;
        int rc = gm_gguf_open_prefixes(&g, name, pre, n, &sp, &err);
        if (rc == 0)
            break;
        if (rc != GM_GGUF_NEED_MORE)
            fail_msg("prefix open: %s", err.msg);
        assert_null(g);
        assert_true(sp < n);
        assert_true(pre[sp].len < b[sp].len); /* only a part that has more to give is short */
        pre[sp].len = pre[sp].len * 4 < b[sp].len ? pre[sp].len * 4 : b[sp].len;
        shorts++;
    }
    assert_true(gm_gguf_header_only(g));
    assert_false(gm_gguf_header_only(want));
    assert_int_equal(gm_gguf_n_parts(g), n);
    assert_int_equal(gm_gguf_total_size(g), gm_gguf_total_size(want));
    assert_int_equal(gm_gguf_n_kv(g), gm_gguf_n_kv(want));
    for (uint64_t i = 0; i < gm_gguf_n_kv(want); i++) {
        gm_gguf_str a = gm_gguf_kv_key(g, i), c = gm_gguf_kv_key(want, i);
        assert_int_equal(a.len, c.len);
        assert_memory_equal(a.ptr, c.ptr, a.len);
        assert_int_equal(gm_gguf_kv_type(g, i), gm_gguf_kv_type(want, i));
    }
    assert_int_equal(gm_gguf_n_tensors(g), gm_gguf_n_tensors(want));
    for (uint64_t i = 0; i < gm_gguf_n_tensors(want); i++) {
        const gm_gguf_tensor *a = gm_gguf_tensor_at(g, i), *c = gm_gguf_tensor_at(want, i);
        assert_string_equal(a->name, c->name);
        assert_int_equal(a->type, c->type);
        assert_int_equal(a->part, c->part);
        assert_int_equal(a->n_bytes, c->n_bytes);
        assert_int_equal(a->file_offset, c->file_offset);
        /* data past the bytes given is not readable */
        const void *d = gm_gguf_tensor_data(g, a);
        if (a->file_offset + a->n_bytes > pre[a->part].len)
            assert_null(d);
        else
            assert_memory_equal(d, gm_gguf_tensor_data(want, c), (size_t)a->n_bytes);
    }
    gm_err err = {0};
    assert_int_equal(gm_gguf_populate(g, NULL, NULL, NULL, &err), GM_EINVAL);
    gm_gguf_close(g);
    return shorts;
}

static void test_prefixes_split_set(void **state)
{
    (void)state;
    const gm_gb_tensor_spec *specs[3] = {k_part1, k_part2, k_part3};
    const uint32_t counts[3] = {2, 1, 2};
    gm_gb b[3];
    char paths[3][512];
    for (uint32_t p = 0; p < 3; p++) {
        gm_gb_init(&b[p]);
        gm_gb_model m = {.alignment = p == 1 ? 64 : 0, .split_no = p, .split_count = 3,
                         .split_tensors = 5, .tensors = specs[p], .n_tensors = counts[p],
                         .fill = (uint8_t)(50 * p)};
        gm_gb_model_build(&b[p], &m, NULL);
        snprintf(paths[p], sizeof paths[p], "%s/pre-model-%05u-of-00003.gguf", gm_test_tmpdir(), p + 1);
        assert_int_equal(gm_gb_write(&b[p], paths[p]), 0);
    }
    gm_gguf *want = NULL;
    gm_err err = {0};
    if (gm_gguf_open(&want, paths[0], &err))
        fail_msg("%s", err.msg);
    /* from 24 bytes every part is short several times; from the whole file never */
    assert_true(open_as_prefixes(want, b, 3, paths[0], 24) >= 3);
    assert_int_equal(open_as_prefixes(want, b, 3, paths[0], 1u << 20), 0);
    /* a wrong part count, a part that is not GGUF, a size too small for the tensors */
    gm_gguf_prefix pre[3];
    for (uint32_t p = 0; p < 3; p++)
        pre[p] = (gm_gguf_prefix){paths[p], b[p].buf, b[p].len, b[p].len};
    gm_gguf *g = NULL;
    gm_err e1 = {0};
    assert_int_equal(gm_gguf_open_prefixes(&g, paths[0], pre, 2, NULL, &e1), GM_EINVAL);
    assert_null(g);
    pre[1].size = b[1].len - 8; /* the last tensor would end past the file */
    gm_err e2 = {0};
    assert_int_equal(gm_gguf_open_prefixes(&g, paths[0], pre, 3, NULL, &e2), GM_EFORMAT);
    assert_non_null(strstr(e2.msg, "past the end"));
    pre[1].size = b[1].len;
    uint8_t bad[64] = "GGUX";
    pre[2] = (gm_gguf_prefix){paths[2], bad, sizeof bad, b[2].len};
    gm_err e3 = {0};
    uint32_t sp = 0;
    assert_int_equal(gm_gguf_open_prefixes(&g, paths[0], pre, 3, &sp, &e3), GM_EFORMAT);
    assert_non_null(strstr(e3.msg, "not a GGUF"));
    gm_gguf_close(want);
    for (uint32_t p = 0; p < 3; p++) {
        remove(paths[p]);
        gm_gb_free(&b[p]);
    }
}

/* The bundled model's header (vocabulary arrays of thousands of strings) read from 24 bytes up. */
static void test_prefixes_real_model(void **state)
{
    (void)state;
    const char *path = gm_fixture("trained-qwen3moe/model-q4_k_m.gguf");
    gm_gguf *want = NULL;
    gm_err err = {0};
    if (gm_gguf_open(&want, path, &err))
        fail_msg("%s", err.msg);
    gm_gb whole;
    gm_gb_init(&whole);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t buf[65536];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0)
        gm_gb_bytes(&whole, buf, r);
    fclose(f);
    assert_true(open_as_prefixes(want, &whole, 1, path, 24) > 3);
    gm_gb_free(&whole);
    gm_gguf_close(want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_order_and_types),
        cmocka_unit_test(test_scalar_getters),
        cmocka_unit_test(test_conversions_and_etype),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_nested_at_depth_limit),
        cmocka_unit_test(test_fuzz_seeds_open),
        cmocka_unit_test(test_tensors),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_header_only),
        cmocka_unit_test(test_single_part_name),
        cmocka_unit_test(test_custom_alignment),
        cmocka_unit_test(test_populate),
        cmocka_unit_test(test_populate_except),
        cmocka_unit_test(test_split_three_parts),
        cmocka_unit_test(test_split_one_part),
        cmocka_unit_test(test_colliding_keys_open_fast),
        cmocka_unit_test(test_real_model),
        cmocka_unit_test(test_prefixes_split_set),
        cmocka_unit_test(test_prefixes_real_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
