/* stream/stats: the feeder's figures and the [stream] lines they print (see stream.h). */
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

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

void gm_stream_print_stats(const gm_stream *s, gm_strbuf *out)
{
    gm_stream_stats st;
    gm_stream_get_stats(s, &st);
    if (st.la_adopted)
        gm_strbuf_putf(out, "[stream] decode feeder arena hit rate: %.1f%% (%llu of %llu expert lookups; %.1f%% were "
                       "resident before the lookahead read ahead)\n", pct(st.hits, st.lookups),
                       (unsigned long long)st.hits, (unsigned long long)st.lookups,
                       pct(st.hits > st.la_adopted ? st.hits - st.la_adopted : 0, st.lookups));
    else
        gm_strbuf_putf(out, "[stream] decode feeder arena hit rate: %.1f%% (%llu of %llu expert lookups)\n",
                       pct(st.hits, st.lookups), (unsigned long long)st.hits, (unsigned long long)st.lookups);
    gm_policy_spread sp;
    gm_policy_spread_of(s->dec_hits, s->dec_lookups, s->n_layers, &sp);
    if (sp.n_layers)
        gm_strbuf_putf(out, "[stream] per-layer hit rate: min %.1f%% (layer %u) / median %.1f%% / max %.1f%% (layer %u) over %u MoE layers\n",
                       sp.min_pct, sp.min_layer, sp.median_pct, sp.max_pct, sp.max_layer, sp.n_layers);
    if (st.prefill_lookups)
        gm_strbuf_putf(out, "[stream] prefill: %llu expert lookups through the arena, %.1f%% resident\n",
                       (unsigned long long)st.prefill_lookups, pct(st.prefill_hits, st.prefill_lookups));
    if (st.split_calls)
        gm_strbuf_putf(out, "[stream] arena token split: %llu short prefills after decode (%llu tokens) through the "
                       "decode arena (GMLX_ARENA_TOKEN_SPLIT=0 disables)\n", (unsigned long long)st.split_calls,
                       (unsigned long long)st.split_tokens);
    if (st.ring_layers)
        gm_strbuf_putf(out, "[stream] prefill ring: %llu layers from 2 x %.2f GB slots (%llu of them only the routed "
                       "experts, %llu read ahead on a prediction, %llu then read more), %.2f GB read, waited %.2f s\n",
                       (unsigned long long)st.ring_layers, (double)st.ring_bytes / 2e9,
                       (unsigned long long)st.ring_sparse, (unsigned long long)st.ring_predicted,
                       (unsigned long long)st.ring_missed, (double)st.ring_read_bytes / 1e9, st.ring_wait_s);
    if (st.ring_seeded)
        gm_strbuf_putf(out, "[stream] prefill ring seeded the decode arena with %llu experts (%.2f GB copied in %.2f s, "
                       "not read again; GMLX_FEEDER_PREFILL_SEED=0 disables)\n", (unsigned long long)st.ring_seeded,
                       (double)st.ring_seeded_bytes / 1e9, st.ring_seed_s);
    if (st.ring_seed_cold)
        gm_strbuf_putf(out, "[stream] prefill ring: %llu layers seeded only the slots already mapped (the rest are "
                       "filled by decode reads)\n", (unsigned long long)st.ring_seed_cold);
    if (s->warm)
        gm_strbuf_putf(out, "[stream] decode arena: %.2f GB of %.2f GB mapped ahead by an idle-priority thread%s "
                       "(GMLX_DECODE_ARENA_WARM=0 disables)\n", (double)st.warm_bytes / 1e9,
                       (double)st.arena_sized_bytes / 1e9, st.warm_finished ? "" : ", still going");
    if (st.la_issued || st.la_declined)
        gm_strbuf_putf(out, "[stream] lookahead prestage: %llu predicted expert reads, %llu adopted by routing (%llu "
                       "already done, %llu joined), %llu unused (%llu cancelled), %llu discarded (failed); %llu "
                       "declined (no slot colder than the guess); %.2f GB read ahead\n",
                       (unsigned long long)st.la_issued, (unsigned long long)st.la_adopted,
                       (unsigned long long)st.la_done, (unsigned long long)st.la_joined,
                       (unsigned long long)st.la_unused, (unsigned long long)st.la_cancelled,
                       (unsigned long long)st.la_failed, (unsigned long long)st.la_declined, (double)st.la_bytes / 1e9);
    if (st.la_predictions)
        gm_strbuf_putf(out, "[lookahead] router recall (predicted@K vs actual routing) over %llu token-layers: @1 %.1f%% "
                       "@2 %.1f%% @4 %.1f%% @6 %.1f%% @8 %.1f%%; previous-token baseline %.1f%%\n",
                       (unsigned long long)st.la_predictions, pct(st.la_recall_hits[0], st.la_actual),
                       pct(st.la_recall_hits[1], st.la_actual), pct(st.la_recall_hits[2], st.la_actual),
                       pct(st.la_recall_hits[3], st.la_actual), pct(st.la_recall_hits[4], st.la_actual),
                       pct(st.la_prev_hits, st.la_prev_actual));
    gm_strbuf_putf(out, "[stream] arena %.3f GB on %u layers, %u-%u slots per layer; %llu decode tokens\n",
                   (double)st.arena_bytes / 1e9, st.covered_layers, st.min_slots, st.max_slots,
                   (unsigned long long)st.tokens);
    double per_tok = st.tokens ? 1.0 / (double)st.tokens : 0;
    gm_strbuf_putf(out, "[stream] read %.2f GB in %llu reads (%.3f GB per token), stalled %.1f ms per token, %s%s\n",
                   (double)st.bytes_read / 1e9, (unsigned long long)st.reads,
                   (double)st.bytes_read / 1e9 * per_tok, st.stall_s * 1e3 * per_tok,
                   gm_io_backend_name(s->io), s->direct ? " O_DIRECT" : " buffered");
    if (st.pressure_shrinks || st.pressure_regrows)
        gm_strbuf_putf(out, "[stream] memory pressure: %llu shrinking steps, %llu regrowing; arena now %.3f GB of %.3f GB "
                       "sized (%u steps down)\n", (unsigned long long)st.pressure_shrinks,
                       (unsigned long long)st.pressure_regrows, (double)st.arena_bytes / 1e9,
                       (double)st.arena_sized_bytes / 1e9, st.pressure_steps);
    if (st.wedged)
        gm_strbuf_putf(out, "[stream] %llu reads stalled past the timeout and were served from the page cache\n",
                       (unsigned long long)st.wedged);
}

void gm_stream_get_stats(const gm_stream *s, gm_stream_stats *out)
{
    *out = s->st;
    out->arena_locked = s->locked;
    out->warm_bytes = gm_warm_bytes(s->warm);
    out->warm_finished = gm_warm_finished(s->warm);
    gm_policy_stats ps;
    gm_policy_total_stats(s->policy, &ps);
    out->la_issued = ps.prestage_issued;
    out->la_adopted = ps.prestage_adopted;
    out->la_done = ps.prestage_done;
    out->la_joined = ps.prestage_joined;
    out->la_unused = ps.prestage_unused;
    out->la_declined = ps.prestage_declined;
}

void gm_stream_print_phases(const gm_stream *s, gm_strbuf *out)
{
    if (!s->ph_tokens)
        return;
    double k = 1e3 / (double)s->ph_tokens, sum = 0;
    for (int i = 0; i < GM_PHASE_COUNT; i++)
        sum += s->ph_sum[i];
    gm_strbuf_putf(out, "[phase] decode per-token ms over %llu tokens: total %.2f | disk stalls %.2f experts %.2f "
                   "stage %.2f prestage %.2f lookahead %.2f | other (attention, router, head) %.2f\n",
                   (unsigned long long)s->ph_tokens, s->ph_total * k, s->ph_sum[GM_PHASE_WAIT] * k,
                   s->ph_sum[GM_PHASE_EXPERTS] * k, s->ph_sum[GM_PHASE_STAGE] * k,
                   s->ph_sum[GM_PHASE_PRESTAGE] * k, s->ph_sum[GM_PHASE_PREDICT] * k, (s->ph_total - sum) * k);
}
