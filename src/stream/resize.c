/* stream/resize: the arena's slots per layer under memory pressure and while lending to the
 * prefill ring (see stream.h and feeder_internal.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "stream/feeder_internal.h"

/* The slots a layer holds at these pressure steps and lend share (never fewer than a token's
 * experts, never more than sized). */
static uint32_t target_slots(const gm_stream *s, const layer_state *ls, uint32_t steps)
{
    uint32_t n = gm_pressure_slots(ls->orig_slots, s->min_slots_k, steps);
    if (s->lend_frac < 1.0) {
        uint32_t m = (uint32_t)((double)n * s->lend_frac);
        n = m > s->min_slots_k ? m : s->min_slots_k;
        if (n > ls->orig_slots)
            n = ls->orig_slots;
    }
    return n;
}

/* The arena's bytes when every layer holds its slots at this many pressure steps. */
static uint64_t arena_at(const gm_stream *s, uint32_t steps)
{
    uint64_t b = 0;
    for (uint32_t l = 0; l < s->n_layers; l++) {
        const layer_state *ls = &s->layers[l];
        if (ls->covered)
            b += (uint64_t)target_slots(s, ls, steps) * ls->slot_bytes;
    }
    return b;
}

void gm_feed_pressure_poll(gm_stream *s)
{
    gm_pressure_sample smp;
    gm_pressure_read(s->o.psi_path, s->o.meminfo_path, &smp);
    gm_pressure_level lv = gm_pressure_level_of(&smp, s->pr.floor_bytes);
    uint32_t before = s->pr.steps;
    uint64_t now = arena_at(s, before), back = before ? arena_at(s, before - 1) : now;
    int d = gm_pressure_poll(&s->pr, lv, &smp, now, back);
    if (d)
        s->resize_gen++;
    if (d > 0)
        gm_log(GM_LOG_WARN, "[stream] memory pressure (level %d: PSI some %.1f%% full %.1f%%, %.2f GB available, "
                "floor %.2f GB): decode arena shrinking toward %.2f GB", (int)lv, smp.some_avg10,
                smp.full_avg10, (double)smp.avail_bytes / 1e9, (double)s->pr.floor_bytes / 1e9,
                (double)arena_at(s, s->pr.steps) / 1e9);
    else if (d < 0)
        gm_log(GM_LOG_NOTE, "[stream] memory pressure cleared: decode arena regrowing toward %.2f GB",
                (double)arena_at(s, s->pr.steps) / 1e9);
    s->st.pressure_steps = s->pr.steps;
    s->st.pressure_shrinks = s->pr.shrinks;
    s->st.pressure_regrows = s->pr.regrows;
}

static uint64_t page_up(uint64_t v) { return (v + 4095) & ~(uint64_t)4095; }

/* Brings a layer to the slot count of the current pressure steps and lend, between two of its calls:
 * the policy picks the experts kept (most popular), their bytes move down, the freed tail goes
 * back to the kernel (or, growing, is wired again). Put off while a read of the layer is in
 * flight or a quarantined slot pins its memory (tried again at the layer's next call). */
void gm_feed_resize_layer(gm_stream *s, uint32_t layer)
{
    layer_state *ls = &s->layers[layer];
    uint32_t want = target_slots(s, ls, s->pr.steps), have = ls->n_slots;
    if (want == have) {
        ls->applied_gen = s->resize_gen;
        return;
    }
    for (uint32_t i = 0; i < have; i++)
        if (ls->inflight[i])
            return;
    if (want < have)
        gm_warm_stop(s->warm); /* memory is short: no more pages mapped ahead (and none in the
                                  tail given back below) */
    int rc = gm_policy_resize(s->policy, layer, want, ls->resize_src, NULL, NULL);
    if (rc == GM_EUNSUPPORTED)
        return; /* a quarantined slot: its abandoned reads may still land */
    if (rc) {
        ls->applied_gen = s->resize_gen;
        return;
    }
    for (uint32_t i = 0; i < want; i++) {
        int32_t src = ls->resize_src[i];
        if (src >= 0 && (uint32_t)src != i) {
            memcpy(ls->slots + (uint64_t)i * ls->slot_bytes, ls->slots + (uint64_t)src * ls->slot_bytes,
                   ls->slot_bytes);
            ls->slot_expert[i] = ls->slot_expert[src];
        } else if (src < 0) {
            ls->slot_expert[i] = -1;
        }
        ls->failed[i] = 0;
        ls->is_pre[i] = 0;
    }
    uintptr_t base = (uintptr_t)ls->slots;
    uint64_t lo = page_up(base + (uint64_t)(want < have ? want : have) * ls->slot_bytes);
    uint64_t hi = (base + (uint64_t)(want < have ? have : want) * ls->slot_bytes) & ~(uint64_t)4095;
    if (want < have) {
        if (hi > lo) {
            if (s->locked)
                munlock((void *)lo, hi - lo);
            madvise((void *)lo, hi - lo, MADV_DONTNEED);
        }
    } else if (s->locked && hi > lo) {
        (void)gm_feed_lock_range((void *)lo, hi - lo);
    }
    s->st.arena_bytes = s->st.arena_bytes - (uint64_t)have * ls->slot_bytes + (uint64_t)want * ls->slot_bytes;
    ls->n_slots = want;
    ls->n_pre_slots = 0;
    ls->applied_gen = s->resize_gen;
    s->st.resized_layers++;
}
