/* stream/lookahead: predicting the next layer's experts, prestaging them and scoring the
 * predictions against the routing (see stream.h and feeder_internal.h). */
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

bool gm_feed_routed(const int32_t *ids, uint32_t k, int32_t x)
{
    for (uint32_t j = 0; j < k; j++)
        if (ids[j] == x)
            return true;
    return false;
}

/* The layer's previous prediction against its routing now: recall counts and the rank gate. */
void gm_feed_score_prediction(gm_stream *s, layer_state *ls, const int32_t *ids, uint32_t k)
{
    uint32_t uniq = 0;
    for (uint32_t j = 0; j < k; j++)
        uniq += !gm_feed_routed(ids, j, ids[j]);
    if (ls->n_pred) {
        static const uint32_t at[5] = {1, 2, 4, 6, 8};
        s->st.la_predictions++;
        s->st.la_actual += uniq;
        for (uint32_t r = 0; r < ls->n_pred && r < GM_STREAM_PREDICT_MAX; r++) {
            bool hit = gm_feed_routed(ids, k, ls->pred[r]);
            for (int i = 0; i < 5; i++)
                s->st.la_recall_hits[i] += hit && r < at[i];
            ls->gate_ema[r] += ((hit ? 1.0f : 0.0f) - ls->gate_ema[r]) * (1.0f / 64.0f);
        }
        ls->n_pred = 0;
    }
    if (ls->n_prev) {
        s->st.la_prev_actual += uniq;
        for (uint32_t j = 0; j < k; j++)
            s->st.la_prev_hits += !gm_feed_routed(ids, j, ids[j]) && gm_feed_routed(ls->prev, ls->n_prev, ids[j]);
    }
    memcpy(ls->prev, ids, k * sizeof *ids);
    ls->n_prev = k;
}

/* At a layer's call: prestages it did not route that are still reading are cancelled (their
 * slots empty when the cancellation lands); the routed ones are joined by the call. */
void gm_feed_settle_prestages(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k)
{
    layer_state *ls = &s->layers[layer];
    for (uint32_t i = 0; i < ls->n_pre_slots; i++) {
        uint32_t slot = (uint32_t)ls->pre_slots[i];
        if (ls->is_pre[slot] != 1 || !ls->inflight[slot] || gm_feed_routed(ids, k, ls->slot_expert[slot]))
            continue;
        if (s->o.lookahead_cancel) {
            for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
                if (ls->kind[kd].present)
                    gm_io_cancel(s->io, gm_feed_tag(layer, slot, kd));
            ls->is_pre[slot] = 2;
            ls->n_cancelling++;
        }
    }
    /* a small arena may need the slots those reads hold: let them end first (a cancelled read
     * ends at once unless it is on the device), so the call never falls to the page cache */
    double t0 = gm_feed_now();
    double deadline = gm_feed_read_deadline(s);
    while (!gm_policy_would_fit(s->policy, layer, ids, k)) {
        bool loading = false;
        for (uint32_t i = 0; i < ls->n_pre_slots; i++)
            loading |= ls->is_pre[ls->pre_slots[i]] && ls->inflight[ls->pre_slots[i]];
        if (!loading)
            break;
        int timeout = gm_feed_timeout_until(s, deadline);
        uint32_t n = 0;
        gm_err ignore = {0};
        if (timeout == 0 || gm_feed_pump(s, timeout, &n, &ignore) != 0 || n == 0) {
            for (uint32_t i = 0; i < ls->n_pre_slots; i++)
                if (ls->is_pre[ls->pre_slots[i]] && ls->inflight[ls->pre_slots[i]])
                    gm_feed_quarantine(s, layer, (uint32_t)ls->pre_slots[i], true);
            break;
        }
    }
    double waited = gm_feed_now() - t0;
    s->st.stall_s += waited;
    gm_stream_phase_add(s, GM_PHASE_WAIT, waited);
    ls->n_pre_slots = 0;
}

/* A routed expert whose prestage was cancelled at an earlier call (and whose read has not come
 * back yet) would join a read that may end cancelled: let it end first, so the call sees the
 * expert resident (the read finished anyway) or absent (it reads it again). */
void gm_feed_await_cancelled(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k)
{
    layer_state *ls = &s->layers[layer];
    double t0 = gm_feed_now();
    for (uint32_t i = 0; i < ls->n_slots && ls->n_cancelling; i++) {
        if (ls->is_pre[i] != 2 || !gm_feed_routed(ids, k, ls->slot_expert[i]))
            continue;
        double deadline = gm_feed_read_deadline(s);
        while (ls->is_pre[i] == 2 && ls->inflight[i]) {
            int timeout = gm_feed_timeout_until(s, deadline);
            uint32_t n = 0;
            gm_err ignore = {0};
            if (timeout == 0 || gm_feed_pump(s, timeout, &n, &ignore) != 0 || n == 0) {
                gm_feed_quarantine(s, layer, i, false);
                break;
            }
        }
    }
    double waited = gm_feed_now() - t0;
    s->st.stall_s += waited;
    gm_stream_phase_add(s, GM_PHASE_WAIT, waited);
}

/* Reads the queued prediction's misses at speculative priority. */
void gm_feed_submit_prestage(gm_stream *s)
{
    s->la_queued = false;
    double t0 = gm_feed_now();
    layer_state *ls = &s->layers[s->la_layer];
    uint32_t n_kinds = 0;
    for (uint32_t kd = 0; kd < GM_EXP_KIND_COUNT; kd++)
        n_kinds += ls->kind[kd].present;
    for (uint32_t r = 0; r < s->la_n; r++) {
        if (gm_io_free_slots(s->io, GM_IO_SPECULATIVE) < n_kinds)
            break;
        int32_t slot = -1;
        uint32_t flags = s->la_hard[r] ? GM_POLICY_PRESTAGE_HARD : 0;
        if (ls->n_pre_slots == GM_STREAM_PREDICT_MAX)
            break; /* the layer's earlier prestages are not settled yet (a call cut short) */
        if (gm_policy_prestage(s->policy, s->la_layer, s->la_ids[r], flags, &slot) != 0 || slot < 0)
            continue;
        gm_err ignore = {0};
        if (gm_feed_read_expert(s, s->la_layer, (uint32_t)slot, s->la_ids[r], GM_IO_SPECULATIVE, &ignore) != 0) {
            gm_policy_loaded(s->policy, s->la_layer, (uint32_t)slot, false);
            continue;
        }
        ls->pre_slots[ls->n_pre_slots++] = slot;
    }
    gm_stream_phase_add(s, GM_PHASE_PRESTAGE, gm_feed_now() - t0);
}

/* True while some expert of the current call is still reading. */
bool gm_feed_call_loading(const gm_stream *s)
{
    const layer_state *ls = &s->layers[s->cur_layer];
    for (uint32_t j = 0; j < s->cur_k; j++) {
        const call_entry *c = &s->cur[j];
        if (!c->hit && !c->wedged && ls->inflight[c->slot])
            return true;
    }
    return false;
}

int32_t gm_stream_next_layer(const gm_stream *s, uint32_t l)
{
    return l < s->n_layers && s->layers[l].covered ? s->layers[l].next_layer : -1;
}

bool gm_stream_wants_prediction(const gm_stream *s) { return s->o.lookahead || s->o.lookahead_probe; }

/* Checks a prediction's ids and records the ranking for the recall figures. */
static int record_prediction(gm_stream *s, uint32_t layer, const int32_t *ranked, uint32_t *n, gm_err *err)
{
    if (layer >= s->n_layers || !s->layers[layer].covered)
        return gm_err_set(err, GM_EINVAL, "lookahead: layer %u does not stream its experts", layer);
    layer_state *ls = &s->layers[layer];
    if (*n > GM_STREAM_PREDICT_MAX)
        *n = GM_STREAM_PREDICT_MAX;
    for (uint32_t r = 0; r < *n; r++)
        if (ranked[r] < 0 || (uint32_t)ranked[r] >= ls->n_expert)
            return gm_err_set(err, GM_EINVAL, "lookahead: expert %d of layer %u is out of range", ranked[r], layer);
    memcpy(ls->pred, ranked, *n * sizeof *ranked);
    ls->n_pred = *n;
    return 0;
}

int gm_stream_predict_keepers(gm_stream *s, uint32_t layer, const int32_t *ranked, uint32_t n,
                              const int32_t *keep, uint32_t n_keep, gm_err *err)
{
    int rc = record_prediction(s, layer, ranked, &n, err);
    if (rc)
        return rc;
    if (!s->o.lookahead || s->prefill || n_keep == 0)
        return 0;
    if (n_keep > GM_STREAM_PREDICT_MAX)
        n_keep = GM_STREAM_PREDICT_MAX;
    for (uint32_t r = 0; r < n_keep; r++)
        if (keep[r] < 0 || (uint32_t)keep[r] >= s->layers[layer].n_expert)
            return gm_err_set(err, GM_EINVAL, "lookahead: expert %d of layer %u is out of range", keep[r], layer);
    s->la_layer = layer;
    s->la_n = n_keep;
    memcpy(s->la_ids, keep, n_keep * sizeof *keep);
    memset(s->la_hard, 1, n_keep);
    s->la_queued = true;
    if (!gm_feed_call_loading(s))
        gm_feed_submit_prestage(s);
    return 0;
}

bool gm_stream_present(const gm_stream *s, uint32_t layer, int32_t expert)
{
    if (layer >= s->n_layers || !s->layers[layer].covered)
        return false;
    const layer_state *ls = &s->layers[layer];
    const int32_t slot = gm_policy_slot(s->policy, layer, expert);
    /* a read that failed, or a prestage whose cancellation was asked, is not on its way */
    return slot >= 0 && ls->is_pre[slot] != 2 && !ls->failed[slot] && !ls->slot_bad[slot];
}

void gm_stream_note_routing(gm_stream *s, uint32_t layer, const int32_t *ids, uint32_t k)
{
    if (layer >= s->n_layers || !s->layers[layer].covered || s->prefill)
        return;
    gm_feed_score_prediction(s, &s->layers[layer], ids, k > MAX_K ? MAX_K : k);
    s->layers[layer].noted = true;
}

void gm_stream_skip(gm_stream *s, uint32_t layer)
{
    if (layer >= s->n_layers || !s->layers[layer].covered)
        return;
    layer_state *ls = &s->layers[layer];
    ls->n_pred = 0;
    const int32_t none[1] = {-1};
    if (ls->n_pre_slots)
        gm_feed_settle_prestages(s, layer, none, 0); /* nothing routed: every read-ahead is unrouted */
}

int gm_stream_predict(gm_stream *s, uint32_t layer, const int32_t *ranked, uint32_t n, gm_err *err)
{
    int rc = record_prediction(s, layer, ranked, &n, err);
    if (rc)
        return rc;
    layer_state *ls = &s->layers[layer];
    if (!s->o.lookahead || s->prefill)
        return 0;
    uint32_t width = s->o.lookahead_k < n ? s->o.lookahead_k : n, r = 0;
    while (r < width && ls->gate_ema[r] >= s->o.lookahead_min_p)
        r++;
    if (r == 0)
        return 0;
    s->la_layer = layer;
    s->la_n = r;
    memcpy(s->la_ids, ranked, r * sizeof *ranked);
    for (uint32_t i = 0; i < r; i++)
        s->la_hard[i] = ls->gate_ema[i] >= s->o.lookahead_hard_p;
    s->la_queued = true;
    if (!gm_feed_call_loading(s))
        gm_feed_submit_prestage(s);
    return 0;
}
