/* Machine probe: RAM from MemTotal and cgroup limits, the GMLX_RAM_GB override, bad values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "base/sysinfo.h"
#include "testutil.h"

#define GIB (1024ull * 1024 * 1024)

static void put(const char *root, const char *rel, const char *text)
{
    assert_int_equal(gm_test_put(root, rel, text), 0);
}

static const char *fake_root(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", gm_test_tmpdir(), name);
    mkdir(buf, 0755);
    return buf;
}

static const char *meminfo_32g =
    "MemTotal:       33554432 kB\nMemFree:         1000000 kB\nMemAvailable:   25165824 kB\n";

static void test_meminfo_only(void **state)
{
    (void)state;
    const char *root = fake_root("plain");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "0::/\n");
    gm_sysinfo s;
    gm_err err = {0};
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.ram_bytes, 32 * GIB);
    assert_int_equal(s.mem_total_bytes, 32 * GIB);
    assert_int_equal(s.cgroup_limit_bytes, 0);
    assert_true(s.avail_known);
    assert_int_equal(s.avail_bytes, 24 * GIB);
    assert_false(s.ram_overridden);
}

static void test_cgroup_v2_limit(void **state)
{
    (void)state;
    const char *root = fake_root("v2");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "0::/user.slice/job\n");
    put(root, "/sys/fs/cgroup/user.slice/job/memory.max", "max\n");
    /* the parent's limit applies to the child */
    put(root, "/sys/fs/cgroup/user.slice/memory.max", "17179869184\n");
    put(root, "/sys/fs/cgroup/user.slice/memory.current", "4294967296\n");
    gm_sysinfo s;
    gm_err err = {0};
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.cgroup_limit_bytes, 16 * GIB);
    assert_int_equal(s.ram_bytes, 16 * GIB);
    /* room in the cgroup (16 - 4) is less than MemAvailable (24) */
    assert_int_equal(s.avail_bytes, 12 * GIB);
}

static void test_cgroup_v1_limit(void **state)
{
    (void)state;
    const char *root = fake_root("v1");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/box\n");
    put(root, "/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "8589934592\n");
    put(root, "/sys/fs/cgroup/memory/box/memory.usage_in_bytes", "1073741824\n");
    gm_sysinfo s;
    gm_err err = {0};
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.ram_bytes, 8 * GIB);
    assert_int_equal(s.avail_bytes, 7 * GIB);
}

/* A hybrid host (systemd "hybrid": v1 controllers and an empty v2 tree, so /proc/self/cgroup has
 * a "0::" line too) keeps its limit in the v1 memory controller. */
static void test_cgroup_hybrid(void **state)
{
    (void)state;
    const char *root = fake_root("hybrid");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n"
                                   "1:name=systemd:/docker/abc\n0::/docker/abc\n");
    put(root, "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "8589934592\n");
    put(root, "/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "1073741824\n");
    gm_sysinfo s;
    gm_err err = {0};
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.cgroup_limit_bytes, 8 * GIB);
    assert_int_equal(s.ram_bytes, 8 * GIB);
    assert_int_equal(s.avail_bytes, 7 * GIB);
}

/* The cgroup's usage counts its file cache, which the kernel reclaims under the limit (as
 * MemAvailable counts it): the inactive part of it is room. v2: memory.stat inactive_file; v1:
 * total_inactive_file. */
static void test_cgroup_reclaimable_cache(void **state)
{
    (void)state;
    const char *root = fake_root("v2cache");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "0::/job\n");
    put(root, "/sys/fs/cgroup/job/memory.max", "17179869184\n");
    put(root, "/sys/fs/cgroup/job/memory.current", "15032385536\n"); /* 14 GiB */
    put(root, "/sys/fs/cgroup/job/memory.stat",
        "anon 2147483648\nfile 12884901888\nactive_file 2147483648\ninactive_file 10737418240\n");
    gm_sysinfo s;
    gm_err err = {0};
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    /* 16 - (14 - 10) = 12 GiB of room, under MemAvailable's 24 */
    assert_int_equal(s.avail_bytes, 12 * GIB);

    root = fake_root("v1cache");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "4:memory:/box\n");
    put(root, "/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "8589934592\n");
    put(root, "/sys/fs/cgroup/memory/box/memory.usage_in_bytes", "7516192768\n"); /* 7 GiB */
    put(root, "/sys/fs/cgroup/memory/box/memory.stat",
        "cache 6442450944\ninactive_file 1\ntotal_inactive_file 5368709120\n");
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.avail_bytes, 6 * GIB); /* 8 - (7 - 5) */
}

/* A CPU quota (docker --cpus) caps the CPUs used: v2 cpu.max, v1 cfs quota / period, rounded up;
 * "max" or -1 is none. */
static void test_cgroup_cpu_quota(void **state)
{
    (void)state;
    gm_sysinfo s;
    gm_err err = {0};
    const char *root = fake_root("cpu2");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "0::/c\n");
    put(root, "/sys/fs/cgroup/c/cpu.max", "50000 100000\n");
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.n_cpus, 1); /* half a CPU: 1 */
    put(root, "/sys/fs/cgroup/c/cpu.max", "max 100000\n");
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    gm_sysinfo real;
    assert_int_equal(gm_sysinfo_probe_at(&real, "/nonexistent", NULL, NULL, &err), 0);
    assert_int_equal(s.n_cpus, real.n_cpus); /* no quota: the affinity count */

    root = fake_root("cpu1");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "5:cpu,cpuacct:/k\n4:memory:/k\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/k/cpu.cfs_quota_us", "100000\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/k/cpu.cfs_period_us", "100000\n");
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.n_cpus, 1);
    put(root, "/sys/fs/cgroup/cpu,cpuacct/k/cpu.cfs_quota_us", "-1\n");
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.n_cpus, real.n_cpus);
}

static void test_cgroup_v1_unlimited(void **state)
{
    (void)state;
    const char *root = fake_root("v1u");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "4:memory:/\n");
    put(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    gm_sysinfo s;
    gm_err err = {0};
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.ram_bytes, 32 * GIB);
    assert_int_equal(s.cgroup_limit_bytes, 0);
}

static void test_limit_above_memtotal(void **state)
{
    (void)state;
    const char *root = fake_root("big");
    put(root, "/proc/meminfo", meminfo_32g);
    put(root, "/proc/self/cgroup", "0::/a\n");
    put(root, "/sys/fs/cgroup/a/memory.max", "68719476736\n");
    gm_sysinfo s;
    gm_err err = {0};
    assert_int_equal(gm_sysinfo_probe_at(&s, root, NULL, NULL, &err), 0);
    assert_int_equal(s.ram_bytes, 32 * GIB);
}

static void test_ram_override(void **state)
{
    (void)state;
    const char *root = fake_root("ovr");
    put(root, "/proc/meminfo", meminfo_32g);
    gm_sysinfo s;
    gm_err err = {0};
    assert_int_equal(gm_sysinfo_probe_at(&s, root, "128", NULL, &err), 0);
    assert_int_equal(s.ram_bytes, 128 * GIB);
    assert_true(s.ram_overridden);
    assert_int_equal(s.avail_bytes, 128 * GIB); /* a what-if machine is idle */
    assert_int_equal(gm_sysinfo_probe_at(&s, root, "64", "7.5", &err), 0);
    assert_int_equal(s.ram_bytes, 64 * GIB);
    assert_int_equal(s.avail_bytes, 7 * GIB + GIB / 2);
}

static void test_bad_override(void **state)
{
    (void)state;
    const char *bad[] = {"", "abc", "-4", "12GB", "nan", "1e300", " ", "0", "0x10", " 8", "inf"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gm_sysinfo s;
        gm_err err = {0};
        assert_int_equal(gm_sysinfo_probe_at(&s, "/nonexistent", bad[i], NULL, &err), GM_EINVAL);
        assert_non_null(strstr(err.msg, "GMLX_RAM_GB"));
    }
}

/* gm_sysinfo_huge_mapped finds a mapping by its start (/proc/self/smaps) and reports its size;
 * an address that starts no mapping is refused. Whether the 8 MiB get huge pages depends on the
 * machine's THP setting, so only the bound is checked. */
static void test_huge_mapped(void **state)
{
    (void)state;
    const size_t len = 8u << 20;
    uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    (void)madvise(m, len, MADV_HUGEPAGE);
    memset(m, 1, len);
    uint64_t size = 0, huge = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        skip(); /* no /proc here */
    fclose(f);
    /* its own mapping: MADV_HUGEPAGE's flag keeps it from merging with a neighbour */
    assert_int_equal(gm_sysinfo_huge_mapped(m, &size, &huge), 0);
    assert_int_equal(size, len);
    assert_true(huge <= size);
    print_message("8 MiB anonymous mapping: %llu of %llu bytes in huge pages\n",
                  (unsigned long long)huge, (unsigned long long)size);
    assert_int_equal(gm_sysinfo_huge_mapped(m + 4096, &size, &huge), -1);
    munmap(m, len);
}

static void test_real_machine(void **state)
{
    (void)state;
    gm_sysinfo s;
    gm_err err = {0};
    assert_int_equal(gm_sysinfo_probe_at(&s, "", NULL, NULL, &err), 0);
    assert_true(s.ram_bytes > 0);
    assert_true(s.n_cpus >= 1);
    assert_true(s.memlock_limit_bytes > 0);
#if defined(__x86_64__)
    /* every x86-64 CPU this engine targets has SSE3; AVX2 implies AVX */
    assert_true(s.cpu_features & GM_CPU_SSE3);
    if (s.cpu_features & GM_CPU_AVX2)
        assert_true(s.cpu_features & GM_CPU_AVX);
#endif
    char buf[256];
    gm_cpu_features_str(GM_CPU_AVX2 | GM_CPU_FMA, buf, sizeof buf);
    assert_string_equal(buf, "avx2 fma");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meminfo_only),     cmocka_unit_test(test_cgroup_v2_limit),
        cmocka_unit_test(test_cgroup_v1_limit),  cmocka_unit_test(test_cgroup_v1_unlimited),
        cmocka_unit_test(test_limit_above_memtotal), cmocka_unit_test(test_ram_override),
        cmocka_unit_test(test_bad_override),     cmocka_unit_test(test_real_machine),
        cmocka_unit_test(test_cgroup_hybrid),    cmocka_unit_test(test_cgroup_reclaimable_cache),
        cmocka_unit_test(test_cgroup_cpu_quota),  cmocka_unit_test(test_huge_mapped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
