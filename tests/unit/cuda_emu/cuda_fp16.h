/* tests/unit/cuda_emu: half precision as the kernels use it (mm_kernels.cuh), on the CPU. A half is
 * its 16 bits; conversions round to nearest even as __float2half_rn does (the CPU reference's
 * gm_f32_to_f16, which test_kernels_dequant checks), a pair holds x in its low half. */
#ifndef GM_TEST_CUDA_EMU_FP16_H
#define GM_TEST_CUDA_EMU_FP16_H

#include <cstdint>

#include "kernels/quant.h"

struct __half {
    uint16_t bits;
};
struct __half2 {
    __half x, y;
};
inline __half __float2half_rn(float f) { return __half{gm_f32_to_f16(f)}; }
inline float __half2float(__half h) { return gm_f16_to_f32(h.bits); }
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half_rn(a), __float2half_rn(b)}; }

#endif
