#include "base/sysinfo.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/checked.h"

int gm_parse_gib(const char *name, const char *value, uint64_t *bytes, gm_err *err)
{
    if (!value || !*value)
        return gm_err_set(err, GM_EINVAL, "%s is empty; give a size in GiB such as 24", name);
    char *end = NULL;
    errno = 0;
    double v = strtod(value, &end);
    int converted = end != value;
    while (end && (*end == ' ' || *end == '\t' || *end == '\n'))
        end++;
    if (errno != 0 || !converted || *end != '\0' || !isfinite(v))
        return gm_err_set(err, GM_EINVAL, "%s=%s is not a number of GiB", name, value);
    if (v < 0 || v > 1048576.0)
        return gm_err_set(err, GM_EINVAL, "%s=%s is out of range (0 to 1048576 GiB)", name, value);
    *bytes = (uint64_t)(v * GM_GIB);
    return 0;
}

/* Reads the first line of a small file into buf; returns 0 on success. */
static int read_line(const char *root, const char *path, char *buf, size_t len)
{
    char full[1024];
    snprintf(full, sizeof full, "%s%s", root, path);
    FILE *f = fopen(full, "r");
    if (!f)
        return -1;
    int ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

/* Parses a cgroup limit value: "max" means none (0). */
static uint64_t parse_limit(const char *s)
{
    if (strncmp(s, "max", 3) == 0)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s)
        return 0;
    /* cgroup v1 reports "no limit" as a huge page-rounded number. */
    if (v >= (1ull << 62))
        return 0;
    return (uint64_t)v;
}

/* The cgroup path of this process: v2 line "0::/path", or the v1 memory controller line. */
static int cgroup_path(const char *root, int want_v2, char *out, size_t len)
{
    char full[1024];
    snprintf(full, sizeof full, "%s/proc/self/cgroup", root);
    FILE *f = fopen(full, "r");
    if (!f)
        return -1;
    char line[1024];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        if (!c1)
            continue;
        char *c2 = strchr(c1 + 1, ':');
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrl = c1 + 1;
        int is_v2 = line[0] == '0' && c1 == line + 1 && *ctrl == '\0';
        int is_mem_v1 = strstr(ctrl, "memory") != NULL;
        if ((want_v2 && is_v2) || (!want_v2 && is_mem_v1)) {
            snprintf(out, len, "%s", c2 + 1);
            found = 0;
            break;
        }
    }
    fclose(f);
    return found;
}

/* Smallest limit on the cgroup path and its ancestors (a parent's limit applies too). */
static uint64_t cgroup_limit(const char *root, uint64_t *usage_out)
{
    char cg[768], file[1024], buf[128];
    uint64_t best = 0;
    *usage_out = 0;
    int v2 = cgroup_path(root, 1, cg, sizeof cg) == 0;
    const char *base = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    const char *limit_name = v2 ? "memory.max" : "memory.limit_in_bytes";
    const char *usage_name = v2 ? "memory.current" : "memory.usage_in_bytes";
    if (!v2 && cgroup_path(root, 0, cg, sizeof cg) != 0)
        return 0;
    for (int depth = 0; depth < 64; depth++) {
        snprintf(file, sizeof file, "%s%s/%s", base, strcmp(cg, "/") == 0 ? "" : cg, limit_name);
        if (read_line(root, file, buf, sizeof buf) == 0) {
            uint64_t lim = parse_limit(buf);
            if (lim && (!best || lim < best)) {
                best = lim;
                snprintf(file, sizeof file, "%s%s/%s", base, strcmp(cg, "/") == 0 ? "" : cg,
                         usage_name);
                if (read_line(root, file, buf, sizeof buf) == 0)
                    *usage_out = parse_limit(buf);
            }
        }
        char *slash = strrchr(cg, '/');
        if (!slash || strcmp(cg, "/") == 0 || cg[0] == '\0')
            break;
        if (slash == cg)
            cg[1] = '\0';
        else
            *slash = '\0';
    }
    return best;
}

static void read_meminfo(const char *root, uint64_t *total, uint64_t *avail)
{
    char full[1024];
    snprintf(full, sizeof full, "%s/proc/meminfo", root);
    *total = *avail = 0;
    FILE *f = fopen(full, "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            *total = (uint64_t)kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            *avail = (uint64_t)kb * 1024;
    }
    fclose(f);
}

int gm_sysinfo_probe_at(gm_sysinfo *out, const char *root, const char *ram_gb_env,
                        const char *avail_gb_env, gm_err *err)
{
    memset(out, 0, sizeof *out);
    uint64_t total, avail, cg_usage;
    read_meminfo(root, &total, &avail);
    out->mem_total_bytes = total;
    out->cgroup_limit_bytes = cgroup_limit(root, &cg_usage);
    out->ram_bytes = total;
    if (out->cgroup_limit_bytes && (!total || out->cgroup_limit_bytes < total))
        out->ram_bytes = out->cgroup_limit_bytes;
    out->avail_known = avail > 0;
    out->avail_bytes = avail;
    if (out->cgroup_limit_bytes) {
        uint64_t room = out->cgroup_limit_bytes > cg_usage ? out->cgroup_limit_bytes - cg_usage : 0;
        if (room < out->avail_bytes || !out->avail_known)
            out->avail_bytes = room;
        out->avail_known = 1;
    }
    if (ram_gb_env) {
        uint64_t b;
        int rc = gm_parse_gib("GMLX_RAM_GB", ram_gb_env, &b, err);
        if (rc)
            return rc;
        if (b == 0)
            return gm_err_set(err, GM_EINVAL, "GMLX_RAM_GB=%s: RAM must be more than 0", ram_gb_env);
        out->ram_bytes = b;
        out->ram_overridden = true;
        out->avail_bytes = b;
        out->avail_known = true;
    }
    if (avail_gb_env) {
        uint64_t b;
        int rc = gm_parse_gib("GMLX_AVAIL_GB", avail_gb_env, &b, err);
        if (rc)
            return rc;
        out->avail_bytes = b;
        out->avail_known = true;
    }
    if (out->avail_known && out->avail_bytes > out->ram_bytes)
        out->avail_bytes = out->ram_bytes;

    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
        out->memlock_limit_bytes = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    cpu_set_t set;
    out->n_cpus = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        out->n_cpus = CPU_COUNT(&set);
    else {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        out->n_cpus = n > 0 ? (int)n : 1;
    }
    out->cpu_features = gm_cpu_features();
    return 0;
}

int gm_sysinfo_probe(gm_sysinfo *out, gm_err *err)
{
    return gm_sysinfo_probe_at(out, "", getenv("GMLX_RAM_GB"), getenv("GMLX_AVAIL_GB"), err);
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static uint32_t detect_cpu(void)
{
    uint32_t f = 0;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    if (c & bit_SSE3) f |= GM_CPU_SSE3;
    if (c & bit_SSSE3) f |= GM_CPU_SSSE3;
    if (c & bit_FMA) f |= GM_CPU_FMA;
    if (c & bit_F16C) f |= GM_CPU_F16C;
    int os_avx = 0, os_avx512 = 0;
    if ((c & bit_OSXSAVE) && (c & bit_AVX)) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        os_avx = (lo & 0x6) == 0x6;
        os_avx512 = (lo & 0xe6) == 0xe6;
    }
    if (os_avx)
        f |= GM_CPU_AVX;
    else
        f &= ~(uint32_t)(GM_CPU_FMA | GM_CPU_F16C);
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        if (os_avx && (b & bit_AVX2)) f |= GM_CPU_AVX2;
        if (os_avx512) {
            if (b & bit_AVX512F) f |= GM_CPU_AVX512F;
            if (b & bit_AVX512BW) f |= GM_CPU_AVX512BW;
            if (b & bit_AVX512VL) f |= GM_CPU_AVX512VL;
            if (c & bit_AVX512VNNI) f |= GM_CPU_AVX512VNNI;
        }
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        if (os_avx && (a & (1u << 4))) f |= GM_CPU_AVXVNNI;
        if (os_avx512 && (a & (1u << 5))) f |= GM_CPU_AVX512BF16;
    }
    return f;
}
#elif defined(__aarch64__)
#include <sys/auxv.h>
static uint32_t detect_cpu(void)
{
    uint32_t f = GM_CPU_NEON;
#ifdef HWCAP_ASIMDDP
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP)
        f |= GM_CPU_DOTPROD;
#endif
    return f;
}
#else
static uint32_t detect_cpu(void) { return 0; }
#endif

uint32_t gm_cpu_features(void)
{
    /* Detected once; a benign race would compute the same value twice. */
    static int done;
    static uint32_t features;
    if (!done) {
        features = detect_cpu();
        done = 1;
    }
    return features;
}

void gm_cpu_features_str(uint32_t features, char *buf, int buf_len)
{
    static const struct { uint32_t bit; const char *name; } names[] = {
        {GM_CPU_SSE3, "sse3"}, {GM_CPU_SSSE3, "ssse3"}, {GM_CPU_AVX, "avx"},
        {GM_CPU_AVX2, "avx2"}, {GM_CPU_FMA, "fma"}, {GM_CPU_F16C, "f16c"},
        {GM_CPU_AVX512F, "avx512f"}, {GM_CPU_AVX512BW, "avx512bw"},
        {GM_CPU_AVX512VL, "avx512vl"}, {GM_CPU_AVX512VNNI, "avx512vnni"},
        {GM_CPU_AVX512BF16, "avx512bf16"}, {GM_CPU_AVXVNNI, "avxvnni"},
        {GM_CPU_NEON, "neon"}, {GM_CPU_DOTPROD, "dotprod"},
    };
    int pos = 0;
    if (buf_len > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(features & names[i].bit))
            continue;
        int n = snprintf(buf + pos, (size_t)(buf_len - pos), "%s%s", pos ? " " : "", names[i].name);
        if (n < 0 || n >= buf_len - pos)
            break;
        pos += n;
    }
}
