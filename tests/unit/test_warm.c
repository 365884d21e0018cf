/* stream/warm: the thread that maps the decode arena's pages in ahead of use. Checked against
 * the kernel's own account of the mapping (mincore: which pages are resident), not against the
 * thread's counters alone: it maps every slot of every layer, in passes, no further than its byte
 * cap, not while paused, and never changes a byte already written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "stream/warm.h"

enum { N_LAYERS = 3, N_SLOTS = 5 };
#define SLOT_BYTES (1ull << 20)
#define TOTAL_BYTES ((uint64_t)N_LAYERS * N_SLOTS * SLOT_BYTES)

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (a liveness bound, not a speed check: 30 s) until cond(w) holds. */
static bool wait_for(gm_warm *w, bool (*cond)(gm_warm *))
{
    for (int i = 0; i < 3000; i++) {
        if (cond(w))
            return true;
        sleep_ms(10);
    }
    return cond(w);
}
static bool is_finished(gm_warm *w) { return gm_warm_finished(w); }
static uint64_t g_want;
static bool reached(gm_warm *w) { return gm_warm_bytes(w) >= g_want; }

/* Resident pages of [p, p + bytes) by mincore. */
static uint64_t resident_pages(const uint8_t *p, uint64_t bytes)
{
    const long page = sysconf(_SC_PAGESIZE);
    size_t n = (size_t)((bytes + (uint64_t)page - 1) / (uint64_t)page);
    unsigned char *vec = malloc(n);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)p, bytes, vec), 0);
    uint64_t r = 0;
    for (size_t i = 0; i < n; i++)
        r += vec[i] & 1;
    free(vec);
    return r;
}

static uint8_t *map_arena(gm_warm_layer *L)
{
    uint8_t *a = mmap(NULL, TOTAL_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(a != MAP_FAILED);
    for (uint32_t l = 0; l < N_LAYERS; l++)
        L[l] = (gm_warm_layer){.slots = a + (uint64_t)l * N_SLOTS * SLOT_BYTES, .slot_bytes = SLOT_BYTES,
                               .n_slots = N_SLOTS};
    return a;
}

static bool has_populate(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    bool ok = p != MAP_FAILED && madvise(p, 4096, 23 /* MADV_POPULATE_WRITE */) == 0;
    if (p != MAP_FAILED)
        munmap(p, 4096);
    return ok;
}

/* Every slot of every layer ends up mapped; bytes written before stay as they were. */
static void test_maps_everything(void **state)
{
    (void)state;
    if (!has_populate())
        skip();
    gm_warm_layer L[N_LAYERS];
    uint8_t *a = map_arena(L);
    memset(L[1].slots + 3 * SLOT_BYTES + 100, 0x5a, 5000); /* a read that landed in layer 1, slot 3 */
    assert_true(resident_pages(a, TOTAL_BYTES) < TOTAL_BYTES / 4096);
    gm_warm *w = NULL;
    gm_err err = {0};
    assert_int_equal(gm_warm_start(&w, L, N_LAYERS, UINT64_MAX, &err), 0);
    assert_true(wait_for(w, is_finished));
    assert_int_equal(gm_warm_bytes(w), TOTAL_BYTES);
    for (uint32_t l = 0; l < N_LAYERS; l++)
        assert_int_equal(gm_warm_slots(w, l), N_SLOTS);
    assert_int_equal(resident_pages(a, TOTAL_BYTES), TOTAL_BYTES / (uint64_t)sysconf(_SC_PAGESIZE));
    for (uint32_t i = 0; i < 5000; i++)
        assert_int_equal(L[1].slots[3 * SLOT_BYTES + 100 + i], 0x5a);
    assert_int_equal(L[1].slots[3 * SLOT_BYTES + 99], 0);
    gm_warm_free(w);
    munmap(a, TOTAL_BYTES);
}

/* The cap: layer 0's five slots (two, two, one) fit and the next step (two of layer 1) does not,
 * so the thread stops there and nothing past layer 0 is mapped; raising the cap lets it finish.
 * Paused, it maps nothing. */
static void test_cap_and_pause(void **state)
{
    (void)state;
    if (!has_populate())
        skip();
    gm_warm_layer L[N_LAYERS];
    uint8_t *a = map_arena(L);
    gm_warm *w = NULL;
    gm_err err = {0};
    const uint64_t cap = 6 * SLOT_BYTES, layer = N_SLOTS * SLOT_BYTES;
    assert_int_equal(gm_warm_start(&w, L, N_LAYERS, cap, &err), 0);
    g_want = layer;
    assert_true(wait_for(w, reached));
    sleep_ms(100); /* it would go on here if it ignored the cap */
    assert_int_equal(gm_warm_bytes(w), layer);
    assert_false(gm_warm_finished(w));
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    assert_int_equal(gm_warm_slots(w, 0), N_SLOTS);
    assert_int_equal(resident_pages(L[0].slots, layer), layer / page);
    for (uint32_t l = 1; l < N_LAYERS; l++) {
        assert_int_equal(gm_warm_slots(w, l), 0);
        assert_int_equal(resident_pages(L[l].slots, layer), 0);
    }
    gm_warm_pause(w, true);
    gm_warm_set_cap(w, UINT64_MAX);
    sleep_ms(100); /* it would go on here if it ignored the pause */
    assert_int_equal(gm_warm_bytes(w), layer);
    gm_warm_pause(w, false);
    assert_true(wait_for(w, is_finished));
    assert_int_equal(gm_warm_bytes(w), TOTAL_BYTES);
    assert_int_equal(resident_pages(a, TOTAL_BYTES), TOTAL_BYTES / page);
    gm_warm_free(w);
    munmap(a, TOTAL_BYTES);
}

/* The hint: from layer 2 on, wrapping (2, then 0, then 1): with room for one layer, layer 2 is
 * the one mapped. */
static void test_hint(void **state)
{
    (void)state;
    if (!has_populate())
        skip();
    gm_warm_layer L[N_LAYERS];
    uint8_t *a = map_arena(L);
    gm_warm *w = NULL;
    gm_err err = {0};
    const uint64_t layer = N_SLOTS * SLOT_BYTES, page = (uint64_t)sysconf(_SC_PAGESIZE);
    assert_int_equal(gm_warm_start(&w, L, N_LAYERS, 0, &err), 0); /* held at the cap: nothing yet */
    gm_warm_hint(w, 2 + N_LAYERS); /* taken modulo the layers */
    gm_warm_set_cap(w, layer);
    g_want = layer;
    assert_true(wait_for(w, reached));
    sleep_ms(100);
    assert_int_equal(gm_warm_bytes(w), layer);
    assert_int_equal(gm_warm_slots(w, 2), N_SLOTS);
    assert_int_equal(gm_warm_slots(w, 0), 0);
    assert_int_equal(resident_pages(L[2].slots, layer), layer / page);
    assert_int_equal(resident_pages(a, 2 * layer), 0);
    gm_warm_free(w);
    munmap(a, TOTAL_BYTES);
}

/* A stop ends the thread at once even while it waits at the cap; stop and free are idempotent
 * and take NULL. */
static void test_stop(void **state)
{
    (void)state;
    gm_warm_layer L[N_LAYERS];
    uint8_t *a = map_arena(L);
    gm_warm *w = NULL;
    gm_err err = {0};
    assert_int_equal(gm_warm_start(&w, L, N_LAYERS, 0, &err), 0);
    gm_warm_stop(w);
    assert_true(gm_warm_finished(w));
    assert_int_equal(gm_warm_bytes(w), 0);
    assert_int_equal(resident_pages(a, TOTAL_BYTES), 0);
    gm_warm_stop(w);
    gm_warm_free(w);
    gm_warm_stop(NULL);
    gm_warm_free(NULL);
    assert_int_equal(gm_warm_slots(NULL, 0), 0);
    munmap(a, TOTAL_BYTES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_maps_everything), cmocka_unit_test(test_cap_and_pause), cmocka_unit_test(test_hint),
                                       cmocka_unit_test(test_stop)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
