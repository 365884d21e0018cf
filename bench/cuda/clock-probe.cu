/* gmlx-clock-probe: does the GPU lower its clocks while it waits between pieces of work (as it
 * would while gmlx waits for the SSD between layers)? Each round leaves the GPU idle for a gap
 * (the host sleeps), then runs one kernel that spins a fixed number of SM cycles and records
 * clock64() and %globaltimer at its start and end: cycles / nanoseconds is the SM clock the
 * kernel ran at, and the kernel's wall time is what a layer's compute would see; then a kernel
 * reads 1 GiB of device memory (memory-bound, as decode's products are) and its rate is taken.
 * Prints, per gap, the medians over the rounds (gap 0: back-to-back launches).
 *
 * Build and run (on a machine with an NVIDIA GPU):
 *   nvcc -O2 -arch=native -o gmlx-clock-probe bench/cuda/clock-probe.cu && ./gmlx-clock-probe
 * Usage: gmlx-clock-probe [ROUNDS] [SPIN_CYCLES]   (default 9 rounds, 2,000,000 cycles) */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "gmlx-clock-probe: %s: %s\n", #x, cudaGetErrorString(e_));             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__device__ __forceinline__ unsigned long long global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* One thread per SM spins; thread 0 of block 0 records what it saw. */
__global__ void spin(long long cycles, unsigned long long *out)
{
    const long long c0 = clock64();
    const unsigned long long t0 = global_ns();
    while (clock64() - c0 < cycles) {
    }
    const long long c1 = clock64();
    const unsigned long long t1 = global_ns();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = (unsigned long long)(c1 - c0);
        out[1] = t1 - t0;
    }
}

/* Reads n float4s (a memory-bound kernel, as a decode's matrix-vector products are). */
__global__ void stream_read(const float4 *p, size_t n, float *sink)
{
    float acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = p[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 12345.0f)
        *sink = acc; /* keeps the loads */
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 9;
    const long long cycles = argc > 2 ? atoll(argv[2]) : 2000000;
    if (rounds < 1 || cycles < 1000) {
        fprintf(stderr, "usage: gmlx-clock-probe [ROUNDS >= 1] [SPIN_CYCLES >= 1000]\n");
        return 2;
    }
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    unsigned long long *d = nullptr, h[2];
    CHECK(cudaMalloc(&d, sizeof h));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    printf("device: %s, %d SMs, rated SM clock %.2f GHz; spin %lld cycles per kernel, %d rounds\n", p.name,
           p.multiProcessorCount, clock_khz / 1e6, cycles, rounds);
    const size_t n4 = (1ull << 30) / sizeof(float4);
    float4 *buf = nullptr;
    float *sink = nullptr;
    CHECK(cudaMalloc(&buf, n4 * sizeof(float4)));
    CHECK(cudaMalloc(&sink, sizeof(float)));
    CHECK(cudaMemset(buf, 0, n4 * sizeof(float4)));
    printf("%10s %12s %14s %12s %14s\n", "gap ms", "SM GHz", "spin ms", "vs gap 0", "read GB/s");
    const int gaps[] = {0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000};
    double base_ms = 0;
    for (int gi = 0; gi < (int)(sizeof gaps / sizeof gaps[0]); gi++) {
        std::vector<double> ghz, ms, gbs;
        for (int r = 0; r < rounds + 1; r++) {
            sleep_ms(gaps[gi]);
            CHECK(cudaEventRecord(a));
            spin<<<p.multiProcessorCount, 1>>>(cycles, d);
            CHECK(cudaEventRecord(b));
            CHECK(cudaGetLastError());
            CHECK(cudaEventSynchronize(b));
            float t = 0;
            CHECK(cudaEventElapsedTime(&t, a, b));
            CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
            if (r == 0)
                continue; /* the first round follows the previous gap's last kernel */
            ghz.push_back(h[1] ? (double)h[0] / (double)h[1] : 0);
            ms.push_back(t);
            sleep_ms(gaps[gi]);
            CHECK(cudaEventRecord(a));
            stream_read<<<p.multiProcessorCount * 4, 512>>>(buf, n4, sink);
            CHECK(cudaEventRecord(b));
            CHECK(cudaGetLastError());
            CHECK(cudaEventSynchronize(b));
            CHECK(cudaEventElapsedTime(&t, a, b));
            gbs.push_back((double)(n4 * sizeof(float4)) / (t * 1e6));
        }
        const double m = median(ms);
        if (gi == 0)
            base_ms = m;
        printf("%10d %12.3f %14.3f %11.2fx %14.1f\n", gaps[gi], median(ghz), m, m / base_ms, median(gbs));
    }
    cudaFree(buf);
    cudaFree(sink);
    cudaFree(d);
    return 0;
}
