/* stream/warm: maps the decode arena's pages in ahead of their first use, on a thread of its own
 * at idle priority (SCHED_IDLE), so that the page faults of a fresh arena are paid while the
 * CPUs would otherwise wait (for the disk, between layers) instead of on the engine's thread in
 * the middle of a prefill. The stream pauses it while it decodes (gm_warm_pause).
 *
 * On the 24 GiB virtual test machine a page of free memory costs about 2 s per GB to map the
 * first time (the hypervisor takes freed memory back); a 128-token cold prefill that copied
 * 16 GB of experts into a fresh arena spent 31 s of its 50 s doing so.
 *
 * The thread only calls madvise(MADV_POPULATE_WRITE) on the arena's address range: a page
 * already mapped (a read landing in it, a copy) is left as it is, so the engine's use of a slot
 * never races with it. It maps a layer's slots from the lowest (the slots a seed or a read takes
 * first), two at a time, starting from the layer the stream hints it will need next
 * (gm_warm_hint: a prefill names the layer after the one it computes) and going on to the
 * following layers, wrapping around; it publishes per layer how many slots are mapped, and stops
 * at the byte cap, when asked, or when everything is mapped. A kernel without MADV_POPULATE_WRITE (before 5.14) makes it a no-op.
 *
 * Threads: created and stopped by the stream's owning thread; gm_warm_slots and gm_warm_bytes
 * may be read from it at any time. */
#ifndef GM_STREAM_WARM_H
#define GM_STREAM_WARM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

typedef struct gm_warm gm_warm;

typedef struct gm_warm_layer {
    uint8_t *slots;       /* the layer's first slot (NULL: not in the arena) */
    uint64_t slot_bytes;
    uint32_t n_slots;
} gm_warm_layer;

/* Starts mapping the slots of n_layers layers (the array is copied), at most cap_bytes in all.
 * GM_ENOMEM, or the thread's creation failure (GM_EIO) as an error value. */
int gm_warm_start(gm_warm **out, const gm_warm_layer *layers, uint32_t n_layers, uint64_t cap_bytes,
                  gm_err *err);
/* Raises (or lowers) the byte cap: a thread that stopped at the cap goes on. */
void gm_warm_set_cap(gm_warm *w, uint64_t cap_bytes);
/* The layer to map first from now on (taken at the thread's next step). */
void gm_warm_hint(gm_warm *w, uint32_t layer);
/* Pauses the thread (after the madvise call under way) or lets it go on. A cold page takes the
 * kernel milliseconds to map on the test machine, during which a compute thread woken on that
 * CPU waits: fine for a prefill's long jobs, not for a decode token's many short ones. */
void gm_warm_pause(gm_warm *w, bool paused);
/* Slots of layer l mapped so far (0..n_slots; grows only). */
uint32_t gm_warm_slots(const gm_warm *w, uint32_t layer);
/* Bytes mapped so far. */
uint64_t gm_warm_bytes(const gm_warm *w);
/* True when the thread has ended (everything mapped, stopped, or the kernel lacks the call). */
bool gm_warm_finished(const gm_warm *w);
/* Stops the thread and waits for it (a madvise call under way finishes first: at most
 * GM_WARM_STEP_BYTES). The counts stay readable. Idempotent. */
void gm_warm_stop(gm_warm *w);
/* Stops it and frees it. NULL is a no-op. */
void gm_warm_free(gm_warm *w);

/* Bytes one madvise call maps: the most a stop waits for, and the longest the thread holds the
 * address space's lock for reading at a time (an mmap or munmap of the owner waits for it). */
#define GM_WARM_STEP_BYTES (2ull << 20)

#endif
