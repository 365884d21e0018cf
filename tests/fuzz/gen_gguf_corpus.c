/* Writes the seed corpus of fuzz_gguf: a few tiny valid GGUF files made with
 * tests/unit/gguf_builder, each reaching a different part of the reader (every value type and
 * nested arrays, versions 2 and 3, custom alignment, split keys, 1 to 4 dims, block types).
 * Usage: gen_gguf_corpus DIR (the committed seeds are in tests/fuzz/corpus/gguf). */
#include <stdio.h>
#include <string.h>

#include "gguf_builder.h"

static int put(const char *dir, const char *name, gm_gb *b)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = gm_gb_write(b, path);
    if (rc != 0)
        fprintf(stderr, "gen_gguf_corpus: cannot write %s\n", path);
    else
        printf("%s: %zu bytes\n", path, b->len);
    gm_gb_free(b);
    return rc;
}

/* Every value type once, arrays of strings and nested arrays, no tensors. */
static void all_types(gm_gb *b)
{
    gm_gb_header(b, 3, 0, 16);
    gm_gb_key(b, "u8", GM_GB_U8);
    gm_gb_u8(b, 200);
    gm_gb_key(b, "i8", GM_GB_I8);
    gm_gb_u8(b, 0xfb);
    gm_gb_key(b, "u16", GM_GB_U16);
    gm_gb_u16(b, 60000);
    gm_gb_key(b, "i16", GM_GB_I16);
    gm_gb_u16(b, 0xfed4);
    gm_gb_kv_u32(b, "u32", 4000000000u);
    gm_gb_key(b, "i32", GM_GB_I32);
    gm_gb_u32(b, 0x88ca6c00u);
    gm_gb_key(b, "f32", GM_GB_F32);
    gm_gb_f32(b, 1.5f);
    gm_gb_kv_bool(b, "bool", 1);
    gm_gb_kv_str(b, "str", "h\xc3\xa9llo");
    gm_gb_kv_u64(b, "u64", 1ull << 40);
    gm_gb_key(b, "i64", GM_GB_I64);
    gm_gb_u64(b, (uint64_t)-5);
    gm_gb_key(b, "f64", GM_GB_F64);
    gm_gb_f64(b, 2.25);
    gm_gb_key(b, "a.i32", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_I32, 3);
    gm_gb_u32(b, 1);
    gm_gb_u32(b, 0xffffffffu);
    gm_gb_u32(b, 3);
    gm_gb_key(b, "a.str", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_STRING, 3);
    gm_gb_str(b, "");
    gm_gb_str(b, "ab");
    gm_gb_str(b, "\xc4\xa0 A");
    gm_gb_key(b, "a.nested", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_ARRAY, 3);
    gm_gb_arr(b, GM_GB_U16, 2);
    gm_gb_u16(b, 1);
    gm_gb_u16(b, 2);
    gm_gb_arr(b, GM_GB_ARRAY, 1);
    gm_gb_arr(b, GM_GB_STRING, 1);
    gm_gb_str(b, "q");
    gm_gb_arr(b, GM_GB_BOOL, 0);
    gm_gb_key(b, "a.bool", GM_GB_ARRAY);
    gm_gb_arr(b, GM_GB_BOOL, 2);
    gm_gb_u8(b, 1);
    gm_gb_u8(b, 0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int rc = 0;
    gm_gb b;

    gm_gb_init(&b);
    gm_gb_header(&b, 3, 0, 0);
    rc |= put(dir, "header-only.gguf", &b);

    gm_gb_init(&b);
    all_types(&b);
    rc |= put(dir, "all-types.gguf", &b);

    gm_gb_init(&b);
    gm_gb_model m0 = {.tensors = gm_gb_default_tensors, .n_tensors = 2};
    gm_gb_model_build(&b, &m0, NULL);
    rc |= put(dir, "two-tensors-v3.gguf", &b);

    gm_gb_init(&b);
    gm_gb_model m1 = {.version = 2, .alignment = 64, .split_count = 1, .split_tensors = 2,
                      .tensors = gm_gb_default_tensors, .n_tensors = 2};
    gm_gb_model_build(&b, &m1, NULL);
    rc |= put(dir, "v2-align64-split-keys.gguf", &b);

    static const gm_gb_tensor_spec shapes[4] = {
        {"blk.0.ffn_up_exps.weight", 3, {2, 3, 4, 1}, 1 /* F16 */, 48},
        {"d4", 4, {1, 2, 3, 2}, 24 /* I8 */, 12},
        {"q4k", 1, {256, 1, 1, 1}, 12 /* Q4_K: 256 elements in 144 bytes */, 144},
        {"bf", 1, {4, 1, 1, 1}, 30 /* BF16 */, 8},
    };
    gm_gb_init(&b);
    gm_gb_model m2 = {.alignment = 8, .tensors = shapes, .n_tensors = 4, .fill = 1};
    gm_gb_model_build(&b, &m2, NULL);
    rc |= put(dir, "shapes-align8.gguf", &b);
    return rc ? 1 : 0;
}
