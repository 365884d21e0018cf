/* tests/unit/cuda_emu: the few CUDA features the backend's kernels use, emulated on the CPU so that
 * test_cuda_emu.cpp can run the kernels' own source where there is no device. A warp is 32 host
 * threads; __shfl_*_sync exchange through a barrier a warp, __syncthreads through one a block
 * (test_cuda_emu.cpp defines them). Semantics
 * as NVIDIA documents them: __dp4a sums four signed byte products into c; __byte_perm picks bytes
 * of the 8-byte value {y, x} by the selector's low three bits per nibble (bit 3, sign
 * replication, is not emulated: the kernels mask it off). */
#ifndef GM_TEST_CUDA_EMU_RUNTIME_H
#define GM_TEST_CUDA_EMU_RUNTIME_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __constant__
#define __shared__ static /* one block at a time: a kernel's shared arrays are its statics */
#define __restrict__

void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);

struct dim3 {
    unsigned x, y, z;
};
extern thread_local dim3 threadIdx, blockIdx, blockDim;

struct int2 {
    int x, y;
};
struct int4 {
    int x, y, z, w;
};
struct uint2 {
    unsigned x, y;
};
struct uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline int2 make_int2(int x, int y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

inline int __dp4a(int a, int b, int c)
{
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}

inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int n = 0; n < 4; n++)
        r |= (unsigned)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
    return r;
}

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }

float __shfl_sync(unsigned mask, float v, int src);
float __shfl_down_sync(unsigned mask, float v, int off);
double __shfl_xor_sync(unsigned mask, double v, int off);
float __shfl_xor_sync(unsigned mask, float v, int off);
int __shfl_xor_sync(unsigned mask, int v, int off);
unsigned __ballot_sync(unsigned mask, int pred);
inline int __popc(unsigned v) { return __builtin_popcount(v); }

typedef int cudaError_t;
typedef void *cudaStream_t;

#endif
