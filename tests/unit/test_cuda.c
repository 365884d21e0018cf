/* The CUDA backend's dequantization against the CPU reference (kernels/dequant.h): for each block
 * type the device decodes, random blocks give the same float32 values bit for bit; its
 * matrix-vector product equals the exact product of the CPU's decoded rows within float32
 * rounding (and the 8-bit path, for the types that have it, the exact product of the decoded rows
 * and the quantized vector); the device's copies of the value tables equal the host's; the errors
 * (a type without a kernel, a length that is not whole blocks) are values with messages. Without
 * a CUDA device the test is skipped (exit 77) and says why. Plain C, no test framework, so that
 * bench/cuda/device-check.sh builds it on a GPU machine that has only the CUDA toolkit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "gguf/types.h"
#include "kernels/dequant.h"
#include "kernels/quant.h"
#include "kernels/quant_tables.h"
#include "block_scales.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* A finite half in [2^-14, 2^1): the blocks' scales (a NaN scale's payload is not portable) */
static uint16_t finite_half(void) { return (uint16_t)((next() & 0x8000) | ((1 + next() % 15) << 10) | (next() & 0x3ff)); }

/* Random blocks of type (n_elems values), with finite scales where the type has them. */
static void fill(uint32_t type, uint8_t *buf, uint64_t bytes, uint64_t n_elems)
{
    for (uint64_t i = 0; i < bytes; i++)
        buf[i] = (uint8_t)next();
    const gm_type_info *ti = gm_type_get(type);
    const uint64_t nb = n_elems / ti->block_elems;
    for (uint64_t b = 0; b < nb; b++) {
        uint8_t *p = buf + b * ti->block_bytes;
        const uint16_t h[2] = {finite_half(), finite_half()};
        gm_test_block_scales(type, p, h, type == GM_TYPE_MXFP4 ? (uint8_t)(120 + next() % 15) : 0); /* 2^-8..2^6 */
    }
}

/* The device's value tables (blocks.cuh) against the host's (kernels/quant_tables.c): a block of
 * each table type whose scale is 1 and whose 32 codes are 0..15 twice decodes to the table itself;
 * and MXFP4 blocks of every exponent 0..255 (subnormal scales, overflow to infinity) decode as the
 * CPU's, bit for bit. */
static void check_tables(void)
{
    const int failures_before = failures;
    static const uint32_t tabled[] = {GM_TYPE_IQ4_NL, GM_TYPE_MXFP4};
    for (size_t k = 0; k < 2; k++) {
        const uint32_t t = tabled[k];
        const int8_t *kv = t == GM_TYPE_IQ4_NL ? gm_kvalues_iq4nl : gm_kvalues_mxfp4;
        uint8_t blk[32] = {0};
        uint8_t *qs = blk + (t == GM_TYPE_IQ4_NL ? offsetof(gm_block_iq4_nl, qs) : offsetof(gm_block_mxfp4, qs));
        if (t == GM_TYPE_IQ4_NL) {
            const uint16_t one = 0x3c00; /* f16 1.0 */
            memcpy(blk + offsetof(gm_block_iq4_nl, d), &one, 2);
        } else {
            blk[offsetof(gm_block_mxfp4, e)] = 128; /* 2^(128-127) / 2 = 1 */
        }
        for (int j = 0; j < 16; j++) /* element j: low nibble of byte j; element 16 + j: its high nibble */
            qs[j] = (uint8_t)(j | ((15 - j) << 4));
        float out[32];
        gm_err err = {0};
        const int rc = gm_cuda_dequant(t, blk, 32, out, &err);
        CHECK(rc == 0, "%s table block: %s", gm_type_name(t), err.msg);
        int bad = 0;
        for (int j = 0; rc == 0 && j < 16; j++)
            bad += out[j] != (float)kv[j] || out[16 + j] != (float)kv[15 - j];
        CHECK(bad == 0, "%s: %d values of the device's table differ from the host's", gm_type_name(t), bad);
    }
    enum { NB = 256 };
    uint8_t blocks[NB * sizeof(gm_block_mxfp4)];
    for (int b = 0; b < NB; b++) {
        uint8_t *p = blocks + b * sizeof(gm_block_mxfp4);
        p[offsetof(gm_block_mxfp4, e)] = (uint8_t)b;
        for (int j = 0; j < 16; j++)
            p[offsetof(gm_block_mxfp4, qs) + j] = (uint8_t)(j | ((j + b) % 16) << 4);
    }
    float cpu[NB * 32], gpu[NB * 32];
    gm_err err = {0};
    CHECK(gm_dequant_row(GM_TYPE_MXFP4, blocks, cpu, NB * 32) == 0, "MXFP4: the CPU reference refused");
    const int rc = gm_cuda_dequant(GM_TYPE_MXFP4, blocks, NB * 32, gpu, &err);
    CHECK(rc == 0, "MXFP4 exponents: %s", err.msg);
    int diff = 0;
    for (int i = 0; rc == 0 && i < NB * 32; i++)
        diff += memcmp(&cpu[i], &gpu[i], sizeof(float)) != 0;
    CHECK(diff == 0, "MXFP4: %d values of blocks of every exponent differ from the CPU's", diff);
    if (failures == failures_before)
        printf("test_cuda: the device's IQ4_NL and MXFP4 tables equal the host's; MXFP4 of every exponent as the CPU's\n");
}

/* The 8-bit path: the device's quantization of x equals the reference's (d = max|x| / 127,
 * q = roundf(x / d) by blocks of 32) bit for bit, and its product equals the exact product of
 * the decoded rows and the quantized vector within float32 rounding. */
/* The largest error of y against the exact product of W's decoded rows and x, relative to each
 * row's sum of |w x|; row is scratch of cols floats. */
static double worst_error(uint32_t t, const uint8_t *w, uint64_t row_bytes, uint64_t rows, uint64_t cols,
                          const float *x, const float *y, float *row)
{
    double worst = 0;
    for (uint64_t r = 0; r < rows; r++) {
        gm_dequant_row(t, w + r * row_bytes, row, cols);
        double exact = 0, mag = 0;
        for (uint64_t i = 0; i < cols; i++) {
            exact += (double)row[i] * x[i];
            mag += fabs((double)row[i] * x[i]);
        }
        const double rel = fabs(y[r] - exact) / (mag > 0 ? mag : 1);
        worst = rel > worst ? rel : worst;
    }
    return worst;
}

static void check_q8(uint32_t t, const uint8_t *w, uint64_t row_bytes, uint64_t rows, uint64_t cols, const float *x,
                     float *row)
{
    const uint64_t nq = cols / 32;
    gm_cuda_q8_block *xq = malloc(nq * sizeof *xq);
    float *y = malloc(rows * sizeof *y), *xd = malloc(cols * sizeof *xd);
    gm_err err = {0};
    if (!xq || !y || !xd) {
        CHECK(0, "out of memory");
        return;
    }
    int rc = gm_cuda_matvec_q8_host(t, w, rows, cols, x, y, xq, &err);
    CHECK(rc == 0, "%s matvec_q8: %s", gm_type_name(t), err.msg);
    uint64_t bad = 0;
    for (uint64_t b = 0; rc == 0 && b < nq; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fabsf(x[b * 32 + i]) > amax ? fabsf(x[b * 32 + i]) : amax;
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        bad += memcmp(&xq[b].d, &d, sizeof d) != 0;
        for (int i = 0; i < 32; i++) {
            bad += xq[b].qs[i] != (int8_t)roundf(x[b * 32 + i] * id);
            xd[b * 32 + i] = d * (float)xq[b].qs[i];
        }
    }
    CHECK(bad == 0, "%s: %llu values of the quantized vector differ from the reference's", gm_type_name(t),
          (unsigned long long)bad);
    const double worst = rc == 0 ? worst_error(t, w, row_bytes, rows, cols, xd, y, row) : 0;
    CHECK(worst <= 1e-5, "%s matvec_q8: off by %.3g of the row's |w x| sum", gm_type_name(t), worst);
    if (rc == 0)
        printf("test_cuda: %s 8-bit matvec: the vector quantized as the reference does, the product within %.2g\n",
               gm_type_name(t), worst);
    free(xq);
    free(y);
    free(xd);
}

/* A prompt's product (gm_cuda_mm_host: the tensor cores' tiles, or float32 for F32) of n rows of X
 * against the exact product of the CPU's decoded rows and X, both rounded to half as the tiles
 * take them (F32: not rounded): within 1e-5 of each output's sum of |w x|, so that every decoded
 * value and the tiles' edges (300 rows and 100 rows of X: partial tiles both ways) are checked. */
static void check_mm(uint32_t t, const uint8_t *w, uint64_t row_bytes, uint64_t rows, uint64_t cols, float *row)
{
    const uint32_t n = 100;
    const bool half = t != GM_TYPE_F32;
    float *x = malloc((uint64_t)n * cols * sizeof *x), *y = malloc((uint64_t)n * rows * sizeof *y);
    if (!x || !y) {
        CHECK(0, "out of memory");
        free(x);
        free(y);
        return;
    }
    for (uint64_t i = 0; i < (uint64_t)n * cols; i++)
        x[i] = (float)((int)(next() % 2001) - 1000) / 1000.0f;
    gm_err err = {0};
    const int rc = gm_cuda_mm_host(t, w, rows, cols, x, n, y, &err);
    CHECK(rc == 0, "%s prompt product: %s", gm_type_name(t), err.msg);
    if (half)
        for (uint64_t i = 0; i < (uint64_t)n * cols; i++)
            x[i] = gm_f16_to_f32(gm_f32_to_f16(x[i]));
    double worst = 0;
    for (uint64_t r = 0; rc == 0 && r < rows; r++) {
        gm_dequant_row(t, w + r * row_bytes, row, cols);
        if (half)
            for (uint64_t i = 0; i < cols; i++)
                row[i] = gm_f16_to_f32(gm_f32_to_f16(row[i]));
        for (uint32_t j = 0; j < n; j++) {
            double exact = 0, mag = 0;
            for (uint64_t i = 0; i < cols; i++) {
                exact += (double)row[i] * x[(uint64_t)j * cols + i];
                mag += fabs((double)row[i] * x[(uint64_t)j * cols + i]);
            }
            const double rel = fabs(y[(uint64_t)j * rows + r] - exact) / (mag > 0 ? mag : 1);
            worst = rel > worst ? rel : worst;
        }
    }
    CHECK(worst <= 1e-5, "%s prompt product: off by %.3g of the output's |w x| sum", gm_type_name(t), worst);
    if (rc == 0)
        printf("test_cuda: %s prompt product %llux%llu by %u rows: within %.2g of the exact product of the halves\n",
               gm_type_name(t), (unsigned long long)rows, (unsigned long long)cols, n, worst);
    free(x);
    free(y);
}

int main(void)
{
    gm_cuda_info info;
    gm_err err = {0};
    int rc = gm_cuda_probe(&info, &err);
    if (rc == GM_EUNSUPPORTED) {
        printf("test_cuda: skipped: %s\n", err.msg);
        return 77;
    }
    if (rc) {
        fprintf(stderr, "test_cuda: the probe failed: %s\n", err.msg);
        return 1;
    }
    printf("test_cuda: %d device(s); device 0: %s, compute %d.%d, %d SMs, %.1f of %.1f GiB free, driver %d, runtime %d\n",
           info.n_devices, info.name, info.cc_major, info.cc_minor, info.n_sms, info.free_bytes / 1073741824.0,
           info.total_bytes / 1073741824.0, info.driver_version, info.runtime_version);

    check_tables();
    static const uint32_t types[] = {GM_TYPE_F32,  GM_TYPE_F16,  GM_TYPE_BF16, GM_TYPE_Q4_0,  GM_TYPE_Q5_0,
                                     GM_TYPE_Q8_0, GM_TYPE_IQ4_NL, GM_TYPE_MXFP4, GM_TYPE_Q2_K, GM_TYPE_Q3_K,
                                     GM_TYPE_Q4_K, GM_TYPE_Q5_K, GM_TYPE_Q6_K, GM_TYPE_IQ4_XS,
                                     GM_TYPE_IQ2_XXS, GM_TYPE_IQ2_XS, GM_TYPE_IQ2_S, GM_TYPE_IQ3_XXS,
                                     GM_TYPE_IQ3_S, GM_TYPE_IQ1_S, GM_TYPE_IQ1_M};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const uint32_t t = types[k];
        CHECK(gm_cuda_can_dequant(t), "%s has no kernel", gm_type_name(t));
        /* a few blocks, and a run long enough for many thread blocks */
        const uint64_t counts[] = {256, 256ull * 4099};
        for (size_t c = 0; c < 2; c++) {
            const uint64_t n = counts[c];
            uint64_t bytes;
            if (gm_type_row_bytes(t, n, &bytes, &err) != 0) {
                CHECK(0, "%s: %s", gm_type_name(t), err.msg);
                continue;
            }
            uint8_t *src = malloc(bytes);
            float *cpu = malloc(n * sizeof *cpu), *gpu = malloc(n * sizeof *gpu);
            if (!src || !cpu || !gpu) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            fill(t, src, bytes, n);
            CHECK(gm_dequant_row(t, src, cpu, n) == 0, "%s: the CPU reference refused", gm_type_name(t));
            gm_err_clear(&err);
            rc = gm_cuda_dequant(t, src, n, gpu, &err);
            CHECK(rc == 0, "%s: %s", gm_type_name(t), err.msg);
            uint64_t diff = 0, first = n;
            for (uint64_t i = 0; i < n; i++)
                if (memcmp(&cpu[i], &gpu[i], sizeof(float)) != 0 && diff++ == 0)
                    first = i;
            CHECK(diff == 0, "%s: %llu of %llu values differ from the CPU's, the first at %llu (%.9g, CPU %.9g)",
                  gm_type_name(t), (unsigned long long)diff, (unsigned long long)n, (unsigned long long)first,
                  first < n ? gpu[first] : 0.0, first < n ? cpu[first] : 0.0);
            if (c == 1 && diff == 0)
                printf("test_cuda: %s: %llu values equal to the CPU's bit for bit\n", gm_type_name(t),
                       (unsigned long long)n);
            free(src);
            free(cpu);
            free(gpu);
        }
    }
    /* y = W x against the exact product of the CPU's decoded rows: within 1e-5 of the sum of
     * |w x| over the row (float32 sums of a few thousand terms, in another order) */
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const uint32_t t = types[k];
        const uint64_t rows = 300, cols = 256 * 17;
        uint64_t row_bytes;
        if (gm_type_row_bytes(t, cols, &row_bytes, &err) != 0) {
            CHECK(0, "%s: %s", gm_type_name(t), err.msg);
            continue;
        }
        uint8_t *w = malloc(row_bytes * rows);
        float *x = malloc(cols * sizeof *x), *y = malloc(rows * sizeof *y), *row = malloc(cols * sizeof *row);
        if (!w || !x || !y || !row) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        fill(t, w, row_bytes * rows, cols * rows);
        if (t == GM_TYPE_F32 || t == GM_TYPE_F16 || t == GM_TYPE_BF16) /* finite values for a product */
            for (uint64_t i = 0; i < cols * rows; i++) {
                const float v = (float)((int)(next() % 2001) - 1000) / 1000.0f;
                if (t == GM_TYPE_F32)
                    memcpy(w + 4 * i, &v, 4);
                else {
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    const uint16_t h = t == GM_TYPE_BF16 ? (uint16_t)(u >> 16) : gm_f32_to_f16(v);
                    memcpy(w + 2 * i, &h, 2);
                }
            }
        for (uint64_t i = 0; i < cols; i++)
            x[i] = (float)((int)(next() % 2001) - 1000) / 1000.0f;
        gm_err_clear(&err);
        rc = gm_cuda_matvec_host(t, w, rows, cols, x, y, &err);
        CHECK(rc == 0, "%s matvec: %s", gm_type_name(t), err.msg);
        const double worst = rc == 0 ? worst_error(t, w, row_bytes, rows, cols, x, y, row) : 0;
        CHECK(worst <= 1e-5, "%s matvec: off by %.3g of the row's |w x| sum", gm_type_name(t), worst);
        if (rc == 0)
            printf("test_cuda: %s matvec %llux%llu: within %.2g of the exact product (relative to sum |w x|)\n",
                   gm_type_name(t), (unsigned long long)rows, (unsigned long long)cols, worst);
        if (gm_cuda_matvec_q8_has(t))
            check_q8(t, w, row_bytes, rows, cols, x, row);
        check_mm(t, w, row_bytes, rows, cols, row);
        free(w);
        free(x);
        free(y);
        free(row);
    }
    /* errors are values with messages */
    float out[256];
    uint8_t blk[256] = {0};
    gm_err_clear(&err);
    CHECK(gm_cuda_dequant(GM_TYPE_TQ1_0, blk, 256, out, &err) == GM_EUNSUPPORTED &&
              strstr(err.msg, "no dequantization kernel for TQ1_0"),
          "unsupported type: %s", err.msg);
    gm_err_clear(&err);
    CHECK(gm_cuda_dequant(GM_TYPE_Q4_K, blk, 100, out, &err) == GM_EINVAL, "a partial block: %s", err.msg);
    gm_err_clear(&err);
    CHECK(gm_cuda_matvec_host(GM_TYPE_TQ1_0, blk, 1, 256, out, out, &err) == GM_EUNSUPPORTED &&
              strstr(err.msg, "no matrix-vector kernel for TQ1_0"),
          "matvec of an unsupported type: %s", err.msg);
    gm_err_clear(&err);
    CHECK(gm_cuda_matvec_q8_host(GM_TYPE_TQ1_0, blk, 1, 256, out, out, NULL, &err) == GM_EUNSUPPORTED &&
              strstr(err.msg, "no 8-bit matrix-vector kernel for TQ1_0"),
          "8-bit matvec of a type without it: %s", err.msg);
    if (failures)
        fprintf(stderr, "test_cuda: %d checks failed\n", failures);
    else
        printf("test_cuda: passed\n");
    return failures ? 1 : 0;
}
