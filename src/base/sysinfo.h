/* base/sysinfo: what this machine offers the engine (memory, locking, CPU features).
 *
 * Owns: the machine probe. RAM is the smaller of MemTotal and the memory limit of this
 * process's cgroup (v2 memory.max on the path or an ancestor, else, as on hybrid hosts, v1
 * memory.limit_in_bytes); the cgroup's room is its limit less its usage, the inactive file cache
 * counted as free (memory.stat). CPUs: the affinity mask, capped by the cgroup's CPU quota (v2
 * cpu.max, v1 cfs quota / period, rounded up). An override (GMLX_RAM_GB) replaces RAM
 * for tests and what-if plans; available memory is then assumed to be all of that RAM (an idle
 * machine of that size) unless GMLX_AVAIL_GB says otherwise.
 * Threads: gm_sysinfo_probe may be called from any thread; gm_cpu_features() is computed once.
 */
#ifndef GM_BASE_SYSINFO_H
#define GM_BASE_SYSINFO_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

typedef enum {
    GM_CPU_SSE3 = 1u << 0,
    GM_CPU_SSSE3 = 1u << 1,
    GM_CPU_AVX = 1u << 2,
    GM_CPU_AVX2 = 1u << 3,
    GM_CPU_FMA = 1u << 4,
    GM_CPU_F16C = 1u << 5,
    GM_CPU_AVX512F = 1u << 6,
    GM_CPU_AVX512BW = 1u << 7,
    GM_CPU_AVX512VL = 1u << 8,
    GM_CPU_AVX512VNNI = 1u << 9,
    GM_CPU_AVX512BF16 = 1u << 10,
    GM_CPU_AVXVNNI = 1u << 11,
    GM_CPU_NEON = 1u << 12,
    GM_CPU_DOTPROD = 1u << 13,
} gm_cpu_feature;

typedef struct gm_sysinfo {
    uint64_t ram_bytes;           /* min(MemTotal, cgroup limit), or GMLX_RAM_GB */
    uint64_t mem_total_bytes;     /* MemTotal of /proc/meminfo (0 when unknown) */
    uint64_t cgroup_limit_bytes;  /* 0 when no limit applies */
    uint64_t avail_bytes;         /* memory a load could take now (MemAvailable, capped by the
                                     cgroup's room); 0 when unknown */
    bool avail_known;
    uint64_t memlock_limit_bytes; /* RLIMIT_MEMLOCK soft limit; UINT64_MAX when unlimited */
    bool ram_overridden;          /* GMLX_RAM_GB was set */
    int n_cpus;                   /* CPUs this process may run on, within its CPU quota */
    uint32_t cpu_features;        /* gm_cpu_feature bits */
} gm_sysinfo;

/* Probes the machine. ram_gib / avail_gib (GMLX_RAM_GB / GMLX_AVAIL_GB as the front end read
 * them; negative: not set) replace what the probe finds; fails only on an invalid one. */
int gm_sysinfo_probe(gm_sysinfo *out, double ram_gib, double avail_gib, gm_err *err);

/* The process's cgroup v2 path ("/user.slice/job", "/" for the root cgroup) from
 * root/proc/self/cgroup into out; -1 when the process has no v2 line (cgroup v1 only, no file). */
int gm_sysinfo_cgroup_v2_path(const char *root, char *out, size_t len);

/* The same probe with the files it reads taken under root (for tests: a fake /proc and
 * /sys/fs/cgroup tree) and the environment overrides passed explicitly (NULL = unset). */
int gm_sysinfo_probe_at(gm_sysinfo *out, const char *root, const char *ram_gb_env,
                        const char *avail_gb_env, gm_err *err);

/* CPU feature bits of this machine, detected once. */
uint32_t gm_cpu_features(void);

/* Space-separated names of the bits set in features, into buf. */
void gm_cpu_features_str(uint32_t features, char *buf, int buf_len);

/* Parses a decimal number of GiB from an environment value ("24", "7.5"). Returns 0 and
 * stores bytes, or GM_EINVAL for an empty, negative, non-numeric or absurd value. */
int gm_parse_gib(const char *name, const char *value, uint64_t *bytes, gm_err *err);

/* For the mapping of this process that starts at addr (/proc/self/smaps): its size and how much
 * of it is mapped by huge (PMD-sized) pages, file-backed or anonymous. Returns 0, or -1 when
 * there is no such mapping or smaps cannot be read (not Linux, no /proc). */
int gm_sysinfo_huge_mapped(const void *addr, uint64_t *size_bytes, uint64_t *huge_bytes);

#endif
