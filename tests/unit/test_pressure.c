/* The decode arena's memory-pressure rules (spec 3.6 on Linux, src/stream/pressure.h):
 * reading PSI and MemAvailable (well-formed, malformed and missing files), the level thresholds,
 * the shrinking steps (+1 on warning, +2 on critical, at most 3, 8 polls apart), the regrow
 * after 256 normal polls only when the memory it takes back is available, and the slot counts
 * of each step. Expected values come from the rules as the spec states them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "stream/pressure.h"
#include "testutil.h"

#define GIB (1024ull * 1024 * 1024)

static void put(const char *path, const char *text)
{
    assert_int_equal(gm_write_file(path, text, strlen(text)), 0);
}

static void test_read(void **state)
{
    (void)state;
    char psi[512], mem[512];
    snprintf(psi, sizeof psi, "%s/psi", gm_test_tmpdir());
    snprintf(mem, sizeof mem, "%s/meminfo", gm_test_tmpdir());
    put(psi, "some avg10=12.50 avg60=3.00 avg300=1.00 total=123\nfull avg10=0.75 avg60=0.10 avg300=0.00 total=9\n");
    put(mem, "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:    2097152 kB\n");
    gm_pressure_sample s;
    gm_pressure_read(psi, mem, &s);
    assert_true(s.psi_known && s.avail_known);
    assert_true(s.some_avg10 == 12.5 && s.full_avg10 == 0.75);
    assert_true(s.avail_bytes == 2 * GIB);

    /* malformed and missing files leave their part unknown */
    put(psi, "some avg10=abc\n");
    put(mem, "MemTotal: 5 kB\n");
    gm_pressure_read(psi, mem, &s);
    assert_false(s.psi_known);
    assert_false(s.avail_known);
    put(psi, "full avg10=50.00 avg60=0 avg300=0 total=0\n"); /* no "some" line */
    gm_pressure_read(psi, "/nonexistent/meminfo", &s);
    assert_false(s.psi_known);
    assert_false(s.avail_known);
    put(psi, "some avg10=101.00 avg60=0 avg300=0 total=0\n"); /* out of range */
    gm_pressure_read(psi, NULL, &s);
    assert_false(s.psi_known);
    assert_int_equal(gm_pressure_level_of(&(gm_pressure_sample){0}, GIB), GM_PRESSURE_NORMAL);
}

/* The live reading caps MemAvailable by the room under the process's cgroup memory limit: a
 * container whose 16 GiB limit is 14 GiB used has 2 GiB available, whatever the host's 24 GiB
 * MemAvailable says, so a 3 GiB floor is crossed (warning); without a limit the host's count. */
static void test_read_cgroup(void **state)
{
    (void)state;
    char root[512];
    snprintf(root, sizeof root, "%s/fake-root", gm_test_tmpdir());
    mkdir(root, 0755);
    assert_int_equal(gm_test_put(root, "/proc/meminfo",
                                 "MemTotal:       33554432 kB\nMemAvailable:   25165824 kB\n"), 0);
    assert_int_equal(gm_test_put(root, "/proc/pressure/memory",
                                 "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                                 "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0);
    assert_int_equal(gm_test_put(root, "/proc/self/cgroup", "0::/job\n"), 0);
    assert_int_equal(gm_test_put(root, "/sys/fs/cgroup/job/memory.max", "17179869184\n"), 0);
    assert_int_equal(gm_test_put(root, "/sys/fs/cgroup/job/memory.current", "15032385536\n"), 0);
    gm_pressure_sample s;
    gm_pressure_read_at(root, &s);
    assert_true(s.psi_known && s.avail_known);
    assert_true(s.avail_bytes == 2 * GIB);
    assert_int_equal(gm_pressure_level_of(&s, 3 * GIB), GM_PRESSURE_WARNING);
    assert_int_equal(gm_test_put(root, "/sys/fs/cgroup/job/memory.max", "max\n"), 0);
    gm_pressure_read_at(root, &s);
    assert_true(s.avail_bytes == 24 * GIB);
    assert_int_equal(gm_pressure_level_of(&s, 3 * GIB), GM_PRESSURE_NORMAL);

    /* the cgroup's own stalls, where it has a memory.pressure, rather than the system's */
    assert_false(s.psi_cgroup);
    assert_int_equal(gm_test_put(root, "/sys/fs/cgroup/job/memory.pressure",
                                 "some avg10=12.50 avg60=1.00 avg300=0.20 total=99\n"
                                 "full avg10=3.00 avg60=0.00 avg300=0.00 total=9\n"), 0);
    gm_pressure_read_at(root, &s);
    assert_true(s.psi_known && s.psi_cgroup);
    assert_true(s.some_avg10 == 12.5 && s.full_avg10 == 3.0);
    assert_int_equal(gm_pressure_level_of(&s, 3 * GIB), GM_PRESSURE_WARNING);
    /* an unreadable cgroup file falls back to the system's */
    assert_int_equal(gm_test_put(root, "/sys/fs/cgroup/job/memory.pressure", "garbage\n"), 0);
    gm_pressure_read_at(root, &s);
    assert_true(s.psi_known && !s.psi_cgroup && s.some_avg10 == 0.0);
    /* the root cgroup has no memory.pressure of its own: the system's */
    assert_int_equal(gm_test_put(root, "/proc/self/cgroup", "0::/\n"), 0);
    gm_pressure_read_at(root, &s);
    assert_true(s.psi_known && !s.psi_cgroup);
}

static void test_levels(void **state)
{
    (void)state;
    gm_pressure_sample s = {.psi_known = true, .avail_known = true, .avail_bytes = 10 * GIB};
    assert_int_equal(gm_pressure_level_of(&s, GIB), GM_PRESSURE_NORMAL);
    s.some_avg10 = 9.99;
    assert_int_equal(gm_pressure_level_of(&s, GIB), GM_PRESSURE_NORMAL);
    s.some_avg10 = 10;
    assert_int_equal(gm_pressure_level_of(&s, GIB), GM_PRESSURE_WARNING);
    s.full_avg10 = 10;
    assert_int_equal(gm_pressure_level_of(&s, GIB), GM_PRESSURE_CRITICAL);
    s = (gm_pressure_sample){.avail_known = true, .avail_bytes = GIB - 1};
    assert_int_equal(gm_pressure_level_of(&s, GIB), GM_PRESSURE_WARNING);
    s.avail_bytes = GIB / 2 - 1;
    assert_int_equal(gm_pressure_level_of(&s, GIB), GM_PRESSURE_CRITICAL);
    s.avail_bytes = GIB;
    assert_int_equal(gm_pressure_level_of(&s, GIB), GM_PRESSURE_NORMAL);
}

static void test_steps(void **state)
{
    (void)state;
    gm_pressure p;
    gm_pressure_init(&p, GIB);
    gm_pressure_sample s = {.avail_known = true, .avail_bytes = 100 * GIB};
    /* the first warning steps at once */
    assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_WARNING, &s, 0, 0), 1);
    assert_int_equal(p.steps, 1);
    /* the next 7 polls cannot step; the 8th can */
    for (int i = 0; i < 7; i++)
        assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_WARNING, &s, 0, 0), 0);
    assert_int_equal(p.steps, 1);
    assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_CRITICAL, &s, 0, 0), 1);
    assert_int_equal(p.steps, 3); /* +2 */
    for (int i = 0; i < 20; i++)
        assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_CRITICAL, &s, 0, 0), 0); /* at most 3 */
    assert_int_equal(p.steps, 3);

    /* regrow: 255 normal polls are not enough, the 256th is, when the memory is there */
    const uint64_t now = 4 * GIB, back = 6 * GIB;
    for (int i = 0; i < 255; i++)
        assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_NORMAL, &s, now, back), 0);
    assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_NORMAL, &s, now, back), -1);
    assert_int_equal(p.steps, 2);
    /* a warning resets the streak */
    for (int i = 0; i < 200; i++)
        gm_pressure_poll(&p, GM_PRESSURE_NORMAL, &s, now, back);
    gm_pressure_poll(&p, GM_PRESSURE_WARNING, &s, now, back); /* steps back to 3 (8 polls passed) */
    assert_int_equal(p.steps, 3);
    for (int i = 0; i < 255; i++)
        assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_NORMAL, &s, now, back), 0);
    /* not enough memory available for the 2 GiB the step takes back plus the 1 GiB floor */
    s.avail_bytes = 3 * GIB - 1;
    assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_NORMAL, &s, now, back), 0);
    s.avail_bytes = 3 * GIB;
    assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_NORMAL, &s, now, back), -1);
    assert_int_equal(p.steps, 2);
    assert_int_equal(p.shrinks, 3);
    assert_int_equal(p.regrows, 2);
    /* unknown available memory never regrows */
    gm_pressure_sample unk = {0};
    for (int i = 0; i < 600; i++)
        assert_int_equal(gm_pressure_poll(&p, GM_PRESSURE_NORMAL, &unk, now, back), 0);
}

static void test_slots(void **state)
{
    (void)state;
    assert_int_equal(gm_pressure_slots(40, 8, 0), 40);
    assert_int_equal(gm_pressure_slots(40, 8, 1), 30);
    assert_int_equal(gm_pressure_slots(40, 8, 2), 20);
    assert_int_equal(gm_pressure_slots(40, 8, 3), 10);
    assert_int_equal(gm_pressure_slots(40, 8, 9), 10);
    assert_int_equal(gm_pressure_slots(21, 8, 3), 8); /* floor(5.25) = 5 < a token's 8 experts */
    assert_int_equal(gm_pressure_slots(6, 8, 0), 6); /* never above the sized count */
    assert_int_equal(gm_pressure_slots(3, 0, 3), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_read_cgroup),
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
