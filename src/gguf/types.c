#include "gguf/types.h"

#include <strings.h>

#include "base/checked.h"

/* Block geometry of every GGUF type (ggml's type ids). The quantized block sizes follow the
 * block layouts: e.g. Q4_K = f16 d + f16 dmin + 12 bytes of 6-bit scales + 128 bytes of nibbles. */
static const gm_type_info k_types[GM_TYPE_COUNT] = {
    [GM_TYPE_F32] = {"F32", 1, 4, false},
    [GM_TYPE_F16] = {"F16", 1, 2, false},
    [GM_TYPE_Q4_0] = {"Q4_0", 32, 18, true},
    [GM_TYPE_Q4_1] = {"Q4_1", 32, 20, true},
    [GM_TYPE_Q5_0] = {"Q5_0", 32, 22, true},
    [GM_TYPE_Q5_1] = {"Q5_1", 32, 24, true},
    [GM_TYPE_Q8_0] = {"Q8_0", 32, 34, true},
    [GM_TYPE_Q8_1] = {"Q8_1", 32, 36, true},
    [GM_TYPE_Q2_K] = {"Q2_K", 256, 84, true},
    [GM_TYPE_Q3_K] = {"Q3_K", 256, 110, true},
    [GM_TYPE_Q4_K] = {"Q4_K", 256, 144, true},
    [GM_TYPE_Q5_K] = {"Q5_K", 256, 176, true},
    [GM_TYPE_Q6_K] = {"Q6_K", 256, 210, true},
    [GM_TYPE_Q8_K] = {"Q8_K", 256, 292, true},
    [GM_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66, true},
    [GM_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74, true},
    [GM_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98, true},
    [GM_TYPE_IQ1_S] = {"IQ1_S", 256, 50, true},
    [GM_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, true},
    [GM_TYPE_IQ3_S] = {"IQ3_S", 256, 110, true},
    [GM_TYPE_IQ2_S] = {"IQ2_S", 256, 82, true},
    [GM_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136, true},
    [GM_TYPE_I8] = {"I8", 1, 1, false},
    [GM_TYPE_I16] = {"I16", 1, 2, false},
    [GM_TYPE_I32] = {"I32", 1, 4, false},
    [GM_TYPE_I64] = {"I64", 1, 8, false},
    [GM_TYPE_F64] = {"F64", 1, 8, false},
    [GM_TYPE_IQ1_M] = {"IQ1_M", 256, 56, true},
    [GM_TYPE_BF16] = {"BF16", 1, 2, false},
    [GM_TYPE_TQ1_0] = {"TQ1_0", 256, 54, true},
    [GM_TYPE_TQ2_0] = {"TQ2_0", 256, 66, true},
    [GM_TYPE_MXFP4] = {"MXFP4", 32, 17, true},
};

const gm_type_info *gm_type_get(uint32_t type)
{
    if (type >= GM_TYPE_COUNT || k_types[type].name == NULL)
        return NULL;
    return &k_types[type];
}

int gm_type_from_name(const char *name)
{
    for (uint32_t t = 0; t < GM_TYPE_COUNT; t++)
        if (k_types[t].name && strcasecmp(k_types[t].name, name) == 0)
            return (int)t;
    return -1;
}

const char *gm_type_name(uint32_t type)
{
    const gm_type_info *ti = gm_type_get(type);
    return ti ? ti->name : "unknown";
}

int gm_type_row_bytes(uint32_t type, uint64_t n_elems, uint64_t *bytes, gm_err *err)
{
    const gm_type_info *ti = gm_type_get(type);
    if (!ti)
        return gm_err_set(err, GM_EFORMAT, "unknown tensor type %u", type);
    if (n_elems % ti->block_elems != 0)
        return gm_err_set(err, GM_EFORMAT,
                          "a row of %llu elements is not a whole number of %s blocks of %u",
                          (unsigned long long)n_elems, ti->name, ti->block_elems);
    if (!gm_mul_u64(n_elems / ti->block_elems, ti->block_bytes, bytes))
        return gm_err_set(err, GM_EFORMAT, "tensor size overflows");
    return 0;
}
