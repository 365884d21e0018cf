/* tests/unit/cuda_emu: the WMMA fragments mm_tc uses (16 x 16 x 16, half inputs, float sums), on
 * the CPU. A fragment is warp-wide on the device; here lane 0 of the warp holds the whole 16 x 16
 * tile, loads, multiplies and stores it, and the other lanes' calls do nothing. Layouts as
 * NVIDIA documents them: a row-major A has element (i, k) at p[i * ldm + k], a column-major B
 * element (k, j) at p[j * ldm + k], and a column-major store puts (i, j) at p[j * ldm + i]. The
 * products are exact in float (a half times a half is), summed in k order: the device's tensor
 * cores sum in their own order, which the tests' tolerances allow. */
#ifndef GM_TEST_CUDA_EMU_MMA_H
#define GM_TEST_CUDA_EMU_MMA_H

#include "cuda_fp16.h"
#include "cuda_runtime.h"

#include <type_traits>

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation takes 16 x 16 x 16 fragments");
    float v[16][16]; /* A: (i, k); B: (k, j); the accumulator: (i, j) */
};

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float value)
{
    for (auto &r : f.v)
        for (auto &e : r)
            e = value;
}

inline bool wmma_lane0() { return threadIdx.x % 32 == 0; }

/* v[r][c] = element (r, c): at p[r * ldm + c] row-major, p[c * ldm + r] column-major */
template <typename Use, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __half, Layout> &f, const __half *p, unsigned ldm)
{
    if (!wmma_lane0())
        return;
    constexpr bool rows = std::is_same<Layout, row_major>::value;
    for (unsigned r = 0; r < 16; r++)
        for (unsigned c = 0; c < 16; c++)
            f.v[r][c] = __half2float(p[rows ? r * ldm + c : c * ldm + r]);
}

inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __half, row_major> &a,
                     const fragment<matrix_b, 16, 16, 16, __half, col_major> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c)
{
    if (!wmma_lane0())
        return;
    float out[16][16];
    for (unsigned i = 0; i < 16; i++)
        for (unsigned j = 0; j < 16; j++) {
            float s = c.v[i][j];
            for (unsigned k = 0; k < 16; k++)
                s += a.v[i][k] * b.v[k][j];
            out[i][j] = s;
        }
    for (unsigned i = 0; i < 16; i++)
        for (unsigned j = 0; j < 16; j++)
            d.v[i][j] = out[i][j];
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm, layout_t l)
{
    if (!wmma_lane0())
        return;
    for (unsigned i = 0; i < 16; i++)
        for (unsigned j = 0; j < 16; j++)
            p[l == mem_col_major ? j * ldm + i : i * ldm + j] = f.v[i][j];
}
} // namespace wmma
} // namespace nvcuda

#endif
