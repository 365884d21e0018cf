#include "base/sysinfo.h"

#include <errno.h>
#include <stdbool.h>
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
    /* a plain decimal: strtod would also take leading spaces, hex ("0x10") and "inf" */
    bool decimal = (value[0] >= '0' && value[0] <= '9') || value[0] == '.';
    for (const char *c = value; decimal && c < end; c++)
        decimal = strchr("0123456789.eE+-", *c) != NULL;
    if (errno != 0 || !converted || *end != '\0' || !isfinite(v) || !decimal)
        return gm_err_set(err, GM_EINVAL, "%s=%s is not a number of GiB", name, value);
    if (v < 0 || v > 1048576.0)
        return gm_err_set(err, GM_EINVAL, "%s=%s is out of range (0 to 1048576 GiB)", name, value);
    *bytes = (uint64_t)(v * GM_GIB);
    return 0;
}

/* Reads the first line of a small file into buf; returns 0 on success. */
static int read_line(const char *root, const char *path, char *buf, size_t len)
{
    char full[2400];
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

/* The cgroup path of this process: the v2 line "0::/path" (controller NULL), or the v1 line of
 * that controller ("4:memory:/path", "5:cpu,cpuacct:/path"). */
static int cgroup_path(const char *root, const char *controller, char *out, size_t len)
{
    char full[1024];
    snprintf(full, sizeof full, "%s/proc/self/cgroup", root);
    FILE *f = fopen(full, "r");
    if (!f)
        return -1;
    char line[1024];
    int found = -1;
    while (found != 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        if (!c1)
            continue;
        char *c2 = strchr(c1 + 1, ':');
        if (!c2)
            continue;
        *c2 = '\0';
        char *ctrl = c1 + 1;
        bool match = false;
        if (!controller) {
            match = line[0] == '0' && c1 == line + 1 && *ctrl == '\0';
        } else {
            for (char *save = NULL, *tok = strtok_r(ctrl, ",", &save); tok && !match;
                 tok = strtok_r(NULL, ",", &save))
                match = strcmp(tok, controller) == 0;
        }
        if (match) {
            snprintf(out, len, "%s", c2 + 1);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

int gm_sysinfo_cgroup_v2_path(const char *root, char *out, size_t len)
{
    return cgroup_path(root, NULL, out, len);
}

/* The value of a "name N" line of a memory.stat file, or 0. */
static uint64_t stat_value(const char *root, const char *file, const char *name)
{
    char full[2400], line[256];
    snprintf(full, sizeof full, "%s%s", root, file);
    FILE *f = fopen(full, "r");
    if (!f)
        return 0;
    uint64_t v = 0;
    size_t n = strlen(name);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, name, n) == 0 && line[n] == ' ') {
            v = strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* Calls visit(dir) for the cgroup directory cg under base and each ancestor up to the root;
 * stops early when visit returns true. */
static void cgroup_walk(const char *base, const char *path, bool (*visit)(const char *dir, void *ctx),
                        void *ctx)
{
    char cg[768], dir[1024];
    snprintf(cg, sizeof cg, "%s", path);
    for (int depth = 0; depth < 64; depth++) {
        snprintf(dir, sizeof dir, "%s%s", base, strcmp(cg, "/") == 0 ? "" : cg);
        if (visit(dir, ctx))
            return;
        char *slash = strrchr(cg, '/');
        if (!slash || strcmp(cg, "/") == 0 || cg[0] == '\0')
            return;
        if (slash == cg)
            cg[1] = '\0';
        else
            *slash = '\0';
    }
}

typedef struct mem_walk {
    const char *root;
    bool v2;
    uint64_t limit, usage;
} mem_walk;

/* The smallest memory limit on the path (a parent's limit applies too), with that cgroup's usage
 * less its inactive file cache (reclaimable, as MemAvailable counts it). */
static bool mem_visit(const char *dir, void *ctx)
{
    mem_walk *w = ctx;
    char file[1100], buf[128];
    snprintf(file, sizeof file, "%s/%s", dir, w->v2 ? "memory.max" : "memory.limit_in_bytes");
    if (read_line(w->root, file, buf, sizeof buf) != 0)
        return false;
    uint64_t lim = parse_limit(buf);
    if (!lim || (w->limit && lim >= w->limit))
        return false;
    w->limit = lim;
    w->usage = 0;
    snprintf(file, sizeof file, "%s/%s", dir, w->v2 ? "memory.current" : "memory.usage_in_bytes");
    if (read_line(w->root, file, buf, sizeof buf) == 0)
        w->usage = parse_limit(buf);
    snprintf(file, sizeof file, "%s/memory.stat", dir);
    uint64_t cache = stat_value(w->root, file, w->v2 ? "inactive_file" : "total_inactive_file");
    w->usage = w->usage > cache ? w->usage - cache : 0;
    return false;
}

/* The cgroup memory limit (0: none) and the usage under it: v2 when the process has a v2 path
 * with a limit, else the v1 memory controller (hybrid hosts list both). */
static uint64_t cgroup_limit(const char *root, uint64_t *usage_out)
{
    char cg[768];
    mem_walk w = {root, true, 0, 0};
    if (cgroup_path(root, NULL, cg, sizeof cg) == 0)
        cgroup_walk("/sys/fs/cgroup", cg, mem_visit, &w);
    if (!w.limit && cgroup_path(root, "memory", cg, sizeof cg) == 0) {
        w.v2 = false;
        cgroup_walk("/sys/fs/cgroup/memory", cg, mem_visit, &w);
    }
    *usage_out = w.usage;
    return w.limit;
}

typedef struct cpu_walk {
    const char *root;
    bool v2;
    double cpus; /* the smallest quota / period on the path, 0: none */
} cpu_walk;

static bool cpu_visit(const char *dir, void *ctx)
{
    cpu_walk *w = ctx;
    char file[1100], buf[128];
    double quota = 0, period = 0;
    if (w->v2) {
        /* cpu.max: "max 100000" or "QUOTA PERIOD" */
        snprintf(file, sizeof file, "%s/cpu.max", dir);
        if (read_line(w->root, file, buf, sizeof buf) != 0 || strncmp(buf, "max", 3) == 0)
            return false;
        if (sscanf(buf, "%lf %lf", &quota, &period) != 2)
            return false;
    } else {
        snprintf(file, sizeof file, "%s/cpu.cfs_quota_us", dir);
        if (read_line(w->root, file, buf, sizeof buf) != 0 || sscanf(buf, "%lf", &quota) != 1)
            return false;
        snprintf(file, sizeof file, "%s/cpu.cfs_period_us", dir);
        if (read_line(w->root, file, buf, sizeof buf) != 0 || sscanf(buf, "%lf", &period) != 1)
            return false;
    }
    if (quota > 0 && period > 0 && (w->cpus == 0 || quota / period < w->cpus))
        w->cpus = quota / period;
    return false;
}

/* CPUs the cgroup's CPU quota allows (rounded up), 0 when no quota applies. */
static int cgroup_cpus(const char *root)
{
    char cg[768];
    cpu_walk w = {root, true, 0};
    if (cgroup_path(root, NULL, cg, sizeof cg) == 0)
        cgroup_walk("/sys/fs/cgroup", cg, cpu_visit, &w);
    if (w.cpus == 0 && cgroup_path(root, "cpu", cg, sizeof cg) == 0) {
        w.v2 = false;
        cgroup_walk("/sys/fs/cgroup/cpu", cg, cpu_visit, &w);
        if (w.cpus == 0)
            cgroup_walk("/sys/fs/cgroup/cpu,cpuacct", cg, cpu_visit, &w);
    }
    return w.cpus > 0 ? (int)ceil(w.cpus - 1e-9) : 0;
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
    /* a container's CPU quota (docker --cpus 4) allows fewer than the CPUs it may run on */
    int quota_cpus = cgroup_cpus(root);
    if (quota_cpus > 0 && quota_cpus < out->n_cpus)
        out->n_cpus = quota_cpus;
    out->cpu_features = gm_cpu_features();
    return 0;
}

int gm_sysinfo_probe(gm_sysinfo *out, double ram_gib, double avail_gib, gm_err *err)
{
    /* the overrides go through the same checks as the variables they come from */
    char ram[64], avail[64];
    snprintf(ram, sizeof ram, "%.17g", ram_gib);
    snprintf(avail, sizeof avail, "%.17g", avail_gib);
    return gm_sysinfo_probe_at(out, "", ram_gib >= 0 ? ram : NULL, avail_gib >= 0 ? avail : NULL, err);
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
    /* Detected once; two first callers may both detect (the same value), through atomics so
     * that this is not a data race. Bit 31 marks "detected". */
    static uint32_t cached;
    uint32_t v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (!(v & 0x80000000u)) {
        v = detect_cpu() | 0x80000000u;
        __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
    }
    return v & 0x7fffffffu;
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

int gm_sysinfo_huge_mapped(const void *addr, uint64_t *size_bytes, uint64_t *huge_bytes)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool in = false, found = false;
    uint64_t size_kb = 0, huge_kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi, v;
        /* a mapping's first line starts with its address (lower-case hex), its fields with a
         * capitalised name */
        if (!(line[0] >= 'A' && line[0] <= 'Z') && sscanf(line, "%llx-%llx ", &lo, &hi) == 2) {
            if (in)
                break; /* the next mapping */
            in = (uintptr_t)lo == (uintptr_t)addr;
            found |= in;
            continue;
        }
        if (!in)
            continue;
        if (sscanf(line, "Size: %llu kB", &v) == 1)
            size_kb = v;
        else if (sscanf(line, "FilePmdMapped: %llu kB", &v) == 1 ||
                 sscanf(line, "AnonHugePages: %llu kB", &v) == 1)
            huge_kb += v;
    }
    fclose(f);
    if (!found)
        return -1;
    *size_bytes = size_kb * 1024;
    *huge_bytes = huge_kb * 1024;
    return 0;
}
