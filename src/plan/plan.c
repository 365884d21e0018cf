/* The streaming plan (see plan.h for the formulas, docs/streaming.md for their reasons). */
#include "plan/plan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/strbuf.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

const char *gm_verdict_name(gm_verdict v)
{
    switch (v) {
    case GM_VERDICT_STREAMS: return "streams";
    case GM_VERDICT_NO_ARENA: return "no-arena";
    case GM_VERDICT_CANNOT_STREAM: return "cannot-stream";
    case GM_VERDICT_FITS: return "fits";
    case GM_VERDICT_EXPERTS_IN_MEMORY: return "experts-in-memory";
    }
    return "?";
}

void gm_fmt_bytes(uint64_t b, char *buf, size_t len)
{
    if (b >= 1000000000ull)
        snprintf(buf, len, "%.1f GB", (double)b / 1e9);
    else if (b >= 1000000ull)
        snprintf(buf, len, "%.1f MB", (double)b / 1e6);
    else
        snprintf(buf, len, "%.1f kB", (double)b / 1e3);
}

void gm_plan_opts_default(gm_plan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kv_ctx = GM_PLAN_DEFAULT_KV_CTX;
    o->kv_bits = 16;
    o->prefill_step = GM_PLAN_DEFAULT_PREFILL_STEP;
    o->vram_stage_slots = GM_VRAM_STAGE_SLOTS;
}

void gm_plan_opts_tune(gm_plan_opts *o, const gm_tuning *t)
{
    if (!t)
        return;
    if (t->plan_kv_ctx)
        o->kv_ctx = t->plan_kv_ctx;
    if (t->arena_gb >= 0) {
        o->arena_override = true;
        o->arena_override_bytes = (uint64_t)(t->arena_gb * (double)(1ull << 30));
    }
    if (t->gpu_stage >= 0)
        o->vram_stage_slots = (uint32_t)t->gpu_stage;
    if (t->gpu_prompt == 0 || t->gpu_decode == 0)
        o->vram_stage_slots = 0;
}

/* Activation bytes one prefill token holds while a layer runs on the CPU engine, f32: the
 * residual and its normed copy, q/k/v and the attention output, router logits, and for each
 * routed expert of the token its gate, up and activated rows; plus a quarter for the 8-bit
 * copies the quantized kernels make of their inputs. */
static uint64_t prefill_token_bytes(const gm_model_desc *m)
{
    const gm_hparams *hp = &m->hp;
    uint64_t q = (uint64_t)hp->n_head * (hp->head_dim_k ? hp->head_dim_k : 1);
    uint64_t kv = (uint64_t)hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v);
    if (m->arch && m->arch->mla && hp->kv_lora_rank)
        kv = (uint64_t)hp->kv_lora_rank + hp->n_rot + hp->q_lora_rank;
    uint64_t attn_out = (uint64_t)hp->n_head * hp->head_dim_v;
    uint64_t ff = (uint64_t)hp->n_expert_used * 3 * hp->n_ff_exp;
    ff += 3ull * hp->n_ff_shexp;
    uint64_t dense = 3ull * hp->n_ff;
    if (dense > ff)
        ff = dense;
    uint64_t elems = 2ull * hp->n_embd + q + kv + attn_out + hp->n_expert + ff;
    if (elems < 4ull * hp->n_embd)
        elems = 4ull * hp->n_embd; /* models that name no dims: a floor of a few hidden rows */
    return elems * 4 * 5 / 4;
}

static uint64_t sub_floor0(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

void gm_plan_compute(const gm_model_desc *m, const gm_sysinfo *sys, const gm_plan_opts *o, gm_plan *p)
{
    memset(p, 0, sizeof *p);
    p->file_bytes = m->file_bytes;
    p->every_token_bytes = m->every_token_bytes;
    p->expert_bytes = m->expert_bytes;
    p->lookup_bytes = m->lookup_bytes;
    p->mtp_bytes = m->mtp_bytes;
    memcpy(p->group_bytes, m->group_bytes, sizeof p->group_bytes);
    p->n_moe_layers = m->n_moe_layers;
    p->n_experts = m->hp.n_expert ? m->hp.n_expert : m->max_expert_count;
    p->n_experts_used = m->hp.n_expert_used;
    if (p->n_experts_used == 0 || p->n_experts_used > m->max_expert_count)
        p->n_experts_used = m->max_expert_count ? (m->hp.n_expert_used ? m->max_expert_count : 1) : 0;
    p->is_moe = m->n_moe_layers > 0;
    p->cold_token_bytes = m->cold_token_bytes;

    /* The machine. */
    p->ram_bytes = sys->ram_bytes;
    p->avail_bytes = sys->avail_bytes;
    p->avail_known = sys->avail_known;
    uint64_t floor_b = GIB + p->ram_bytes / 50;
    if (floor_b > 8 * GIB)
        floor_b = 8 * GIB;
    p->host_floor_bytes = floor_b;
    p->host_overhead_bytes = 512 * MIB + p->ram_bytes / 100;
    p->ceiling_bytes = sub_floor0(p->ram_bytes, p->host_floor_bytes + p->host_overhead_bytes);

    /* KV room: the cache at kv_ctx tokens, the prefill chunk's activations and the pool. */
    p->kv_ctx = o->kv_ctx ? o->kv_ctx : GM_PLAN_DEFAULT_KV_CTX;
    p->kv_bits = o->kv_bits == 8 || o->kv_bits == 32 ? o->kv_bits : 16;
    p->kv_cache_bytes = gm_model_kv_bytes(m, p->kv_ctx, p->kv_bits);
    uint32_t step = o->prefill_step ? o->prefill_step : GM_PLAN_DEFAULT_PREFILL_STEP;
    p->prefill_chunk_tokens = step < p->kv_ctx ? step : p->kv_ctx;
    p->prefill_chunk_bytes = (uint64_t)p->prefill_chunk_tokens * prefill_token_bytes(m);
    p->prefill_pool_bytes = GM_PLAN_POOL_BYTES;
    p->kv_room_bytes = p->kv_cache_bytes + p->prefill_chunk_bytes + p->prefill_pool_bytes;

    /* Prefill ring: two slots, each the largest stack of every kind among MoE layers. */
    uint64_t slot = 0;
    for (int k = 0; k < GM_EXP_KIND_COUNT; k++) {
        uint64_t mx = 0;
        for (uint32_t l = 0; l < m->n_layers; l++)
            if (m->layers[l].is_moe && !m->layers[l].is_mtp && m->layers[l].stack_bytes[k] > mx)
                mx = m->layers[l].stack_bytes[k];
        slot += mx;
    }
    p->prefill_ring_bytes = 2 * slot;

    /* Decode arena: what the ceiling leaves after the pinned every-token weights and KV room. */
    uint64_t fixed = p->every_token_bytes + p->kv_room_bytes;
    bool whole_fits = p->file_bytes + p->kv_room_bytes <= p->ceiling_bytes;
    bool experts_fit = p->every_token_bytes + p->expert_bytes + p->kv_room_bytes <= p->ceiling_bytes;
    if (o->arena_override) {
        p->arena_overridden = true;
        p->arena_bytes = o->arena_override_bytes;
    } else {
        p->arena_bytes = sub_floor0(p->ceiling_bytes, fixed);
        /* On a model that fits, streamed experts keep at most half in the arena. */
        if (experts_fit && p->arena_bytes > p->expert_bytes / 2)
            p->arena_bytes = p->expert_bytes / 2;
    }
    /* No more than lets every MoE layer hold all its experts under the even split, in the
     * feeder's slot layout (each slice padded to the alignment: capping at the expert bytes
     * left every layer a slot short) */
    uint64_t layer_need = 0;
    for (uint32_t l = 0; l < m->n_layers; l++) {
        const gm_layer_desc *L = &m->layers[l];
        if (L->is_moe && !L->is_mtp && L->n_expert * gm_layer_slot_bytes(L, GM_SLOT_ALIGN_BYTES) > layer_need)
            layer_need = L->n_expert * gm_layer_slot_bytes(L, GM_SLOT_ALIGN_BYTES);
    }
    if (p->arena_bytes > layer_need * p->n_moe_layers)
        p->arena_bytes = layer_need * p->n_moe_layers;
    p->arena_share = p->expert_bytes ? (double)p->arena_bytes / (double)p->expert_bytes : 0;
    if (p->arena_share > 1)
        p->arena_share = 1;

    /* The VRAM tier: what the engine's slots hold of the routed experts, after the output head and
     * the attention of the layers the device runs (as infer/gpu_attn.c chooses them: grouped-query
     * attention over the whole context with a head dim of whole warps up to 256, a cache of 16 or
     * 32 bits; their weights and cache at most half of the memory). */
    uint32_t n_all_attn = 0; /* every layer full attention: its count */
    if (o->vram_bytes && p->is_moe) {
        const gm_hparams *hp = &m->hp;
        uint32_t n_attn = 0, n_full = 0, n_mtp = 0;
        for (uint32_t l = 0; l < m->n_layers; l++) {
            const gm_layer_desc *L = &m->layers[l];
            n_mtp += L->is_mtp;
            if (L->is_recurrent || L->is_mtp)
                continue;
            n_attn++;
            n_full += !L->is_sliding;
        }
        const uint32_t hd = hp->head_dim_k;
        uint64_t w = p->group_bytes[GM_TG_OUTPUT], kv = 0; /* the output head goes too */
        if (n_full && !hp->kv_lora_rank && !hp->idx_topk && hd && hd % 32 == 0 && hd <= 256 && o->kv_bits != 8) {
            const uint64_t parts = 64ull * hp->n_head * (hd + 2) * 4; /* the attention's scratch */
            w += p->group_bytes[GM_TG_ATTENTION] / n_attn * n_full;
            kv = 2ull * n_full * hp->n_head_kv * hd * p->kv_ctx * (o->kv_bits == 32 ? 4 : 2) + parts;
            p->vram_attn_layers = n_full;
        }
        n_all_attn = n_attn == n_full && n_full == m->n_layers - n_mtp ? n_full : 0;
        if (2 * (w + kv) <= o->vram_bytes) {
            p->vram_attn_bytes = w;
            p->vram_kv_bytes = kv;
        } else {
            p->vram_attn_layers = 0;
        }
        p->vram_bytes = o->vram_bytes - p->vram_attn_bytes - p->vram_kv_bytes;
        for (uint32_t l = 0; l < m->n_layers; l++) {
            const gm_layer_desc *L = &m->layers[l];
            if (!L->is_moe || L->is_mtp)
                continue;
            p->n_routed_experts += L->n_expert;
            const uint64_t b = gm_layer_vram_slot_bytes(L);
            p->vram_slot_bytes = b > p->vram_slot_bytes ? b : p->vram_slot_bytes;
        }
        const uint64_t fit = p->vram_slot_bytes ? p->vram_bytes / p->vram_slot_bytes : 0;
        p->vram_experts = fit < p->n_routed_experts ? (uint32_t)fit : p->n_routed_experts;
        p->vram_share = p->n_routed_experts ? (double)p->vram_experts / (double)p->n_routed_experts : 0;
    }

    /* Even split over MoE layers; a layer must hold the experts of one token. */
    p->arena_min_slots = 0;
    if (p->n_moe_layers) {
        uint64_t per_layer = p->arena_bytes / p->n_moe_layers;
        uint32_t min_slots = UINT32_MAX;
        bool viable = true;
        for (uint32_t l = 0; l < m->n_layers; l++) {
            const gm_layer_desc *L = &m->layers[l];
            const uint64_t slot_bytes = gm_layer_slot_bytes(L, GM_SLOT_ALIGN_BYTES);
            if (!L->is_moe || L->is_mtp || !slot_bytes)
                continue;
            uint64_t slots = per_layer / slot_bytes;
            if (slots > L->n_expert)
                slots = L->n_expert;
            if (slots < min_slots)
                min_slots = (uint32_t)slots;
            uint32_t k = p->n_experts_used < L->n_expert ? p->n_experts_used : L->n_expert;
            if (slots < k)
                viable = false;
        }
        p->arena_min_slots = min_slots == UINT32_MAX ? 0 : min_slots;
        p->arena_viable = viable && p->arena_bytes > 0;
    }
    p->ring_fits_arena = p->prefill_ring_bytes <= p->arena_bytes;

    /* The verdict. */
    if (whole_fits)
        p->verdict = GM_VERDICT_FITS;
    else if (p->is_moe && experts_fit)
        p->verdict = GM_VERDICT_EXPERTS_IN_MEMORY;
    else if (fixed > p->ceiling_bytes || !p->is_moe)
        p->verdict = GM_VERDICT_CANNOT_STREAM;
    else if (p->arena_viable)
        p->verdict = GM_VERDICT_STREAMS;
    else
        p->verdict = GM_VERDICT_NO_ARENA;

    /* The tiers' shares with a GPU: VRAM first; the arena holds of the others what it can (the
     * whole model in memory holds them all); the SSD the rest. */
    if (p->vram_bytes && p->is_moe) {
        const bool in_memory = p->verdict == GM_VERDICT_FITS || p->verdict == GM_VERDICT_EXPERTS_IN_MEMORY;
        /* staging slots out of the tier's (infer/gpu.c) where a prompt's chunk can stage */
        const uint32_t stage = o->vram_stage_slots;
        if (in_memory && stage && n_all_attn && p->vram_attn_layers == n_all_attn &&
            p->vram_experts < p->n_routed_experts && p->vram_experts > stage) {
            p->vram_stage_slots = stage;
            p->vram_experts -= stage;
            p->vram_share = (double)p->vram_experts / (double)p->n_routed_experts;
        }
        const double rest = 1.0 - p->vram_share;
        p->ram_share = in_memory ? rest : p->arena_share < rest ? p->arena_share : rest;
        p->ssd_share = rest - p->ram_share > 0 ? rest - p->ram_share : 0;
    }

    /* What a load does with the memory free now, when the experts could stay in memory. */
    uint64_t room = p->ceiling_bytes;
    if (p->avail_known) {
        uint64_t r = sub_floor0(p->avail_bytes, p->host_overhead_bytes);
        if (r < room)
            room = r;
    }
    p->room_now_bytes = room;
    if (p->verdict == GM_VERDICT_FITS || p->verdict == GM_VERDICT_EXPERTS_IN_MEMORY) {
        uint64_t core = p->every_token_bytes + p->expert_bytes + p->kv_room_bytes;
        if (!p->is_moe) {
            p->now = GM_NOW_NONE;
            p->experts_in_memory_now = true;
        } else if (core + p->lookup_bytes + p->mtp_bytes <= room) {
            p->now = GM_NOW_EXPERTS_STAY;
        } else if (p->mtp_bytes && core + p->lookup_bytes <= room) {
            p->now = GM_NOW_AUTO_MTP_OFF;
            p->auto_mtp_off_now = true;
        } else if (p->lookup_bytes && core <= room) {
            p->now = GM_NOW_TABLES_OFFLOADED;
            p->tables_from_file_now = true;
            p->auto_mtp_off_now = p->mtp_bytes > 0;
        } else {
            p->now = GM_NOW_EXPERTS_STREAM;
        }
        p->experts_in_memory_now = p->now != GM_NOW_EXPERTS_STREAM;
    }
}

static void share_str(double share, char *buf, size_t len)
{
    if (share >= 1.0)
        snprintf(buf, len, "all");
    else if (share > 0 && share < 0.01)
        snprintf(buf, len, "under 1%%");
    else
        snprintf(buf, len, "%.0f%%", share * 100);
}

void gm_plan_verdict_line(const gm_plan *p, char *buf, size_t len)
{
    char a[32], b[32], c[32], d[32];
    switch (p->verdict) {
    case GM_VERDICT_STREAMS:
        snprintf(buf, len, "=> streams with --stream-experts (server: stream: experts)");
        break;
    case GM_VERDICT_NO_ARENA:
        gm_fmt_bytes(p->arena_bytes, a, sizeof a);
        snprintf(buf, len,
                 "=> streams, but no decode arena (its %s hold %u experts per layer, fewer than the "
                 "%u a token uses); expect slow decode",
                 a, p->arena_min_slots, p->n_experts_used);
        break;
    case GM_VERDICT_CANNOT_STREAM:
        gm_fmt_bytes(p->kv_room_bytes, b, sizeof b);
        gm_fmt_bytes(p->ceiling_bytes, c, sizeof c);
        if (!p->is_moe) {
            /* a dense model streams nothing: the check that failed is the whole file's */
            gm_fmt_bytes(p->file_bytes, a, sizeof a);
            gm_fmt_bytes(sub_floor0(p->file_bytes + p->kv_room_bytes, p->ceiling_bytes), d, sizeof d);
            snprintf(buf, len, "=> cannot stream: the file %s + KV room %s exceed the %s ceiling by %s "
                     "(a dense model has no experts to stream)", a, b, c, d);
            break;
        }
        gm_fmt_bytes(p->every_token_bytes, a, sizeof a);
        gm_fmt_bytes(sub_floor0(p->every_token_bytes + p->kv_room_bytes, p->ceiling_bytes), d, sizeof d);
        snprintf(buf, len, "=> cannot stream: every-token weights %s + KV room %s exceed the %s ceiling by %s",
                 a, b, c, d);
        break;
    case GM_VERDICT_FITS:
        snprintf(buf, len, "=> the whole file fits in RAM; streaming is optional");
        break;
    case GM_VERDICT_EXPERTS_IN_MEMORY:
        snprintf(buf, len, "=> loads with its experts in memory; --stream-experts streams them");
        break;
    }
}

void gm_plan_now_line(const gm_plan *p, char *buf, size_t len)
{
    char a[32], b[32];
    buf[0] = '\0';
    switch (p->now) {
    case GM_NOW_NONE:
        break;
    case GM_NOW_EXPERTS_STAY:
        snprintf(buf, len, "=> with the memory free now, its experts stay in memory");
        break;
    case GM_NOW_AUTO_MTP_OFF:
        gm_fmt_bytes(p->mtp_bytes, a, sizeof a);
        snprintf(buf, len,
                 "=> with the memory free now, auto MTP is off: the experts stay in memory, and the "
                 "%s MTP drafter does not fit beside them",
                 a);
        break;
    case GM_NOW_TABLES_OFFLOADED:
        gm_fmt_bytes(p->lookup_bytes, a, sizeof a);
        snprintf(buf, len,
                 "=> with the memory free now, its tables are offloaded to disk (%s of lookup tables "
                 "read from the file)",
                 a);
        break;
    case GM_NOW_EXPERTS_STREAM:
        gm_fmt_bytes(p->every_token_bytes + p->expert_bytes + p->kv_room_bytes, a, sizeof a);
        gm_fmt_bytes(p->room_now_bytes, b, sizeof b);
        snprintf(buf, len,
                 "=> the experts stream because the memory free now does not hold them: holding them "
                 "takes %s, past the %s free",
                 a, b);
        break;
    }
}

/* The plan's lines into out (gm_plan_text's buffer: the library prints nowhere). */
static void plan_print(const gm_plan *p, gm_strbuf *out, const char *in)
{
    char a[32], b[32], c[32], d[32], e[32], g[32], line[512];
    gm_fmt_bytes(p->every_token_bytes, a, sizeof a);
    gm_fmt_bytes(p->expert_bytes, b, sizeof b);
    gm_fmt_bytes(p->prefill_ring_bytes, c, sizeof c);
    if (p->is_moe)
        gm_strbuf_putf(out, "%sstreaming: every-token weights %s, routed experts %s (%u layers, %u experts, %u per token), prefill ring %s\n",
                       in, a, b, p->n_moe_layers, p->n_experts, p->n_experts_used, c);
    else
        gm_strbuf_putf(out, "%sstreaming: every-token weights %s, no routed experts (a dense model streams nothing)\n", in, a);

    /* every-token groups, largest first */
    static const gm_tensor_group order[] = {GM_TG_ATTENTION, GM_TG_SHARED_EXPERTS, GM_TG_DENSE_FFN_ROUTERS,
                                            GM_TG_EMBEDDINGS, GM_TG_OUTPUT, GM_TG_OTHER};
    int idx[6] = {0, 1, 2, 3, 4, 5};
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            if (p->group_bytes[order[idx[j]]] > p->group_bytes[order[idx[i]]]) {
                int t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
            }
    int pos = snprintf(line, sizeof line, "%s  every-token by group:", in);
    int first = 1;
    for (int i = 0; i < 6; i++) {
        uint64_t v = p->group_bytes[order[idx[i]]];
        if (!v)
            continue;
        gm_fmt_bytes(v, a, sizeof a);
        pos += snprintf(line + pos, sizeof line - (size_t)pos, "%s %s %s", first ? "" : ",",
                        gm_tensor_group_name(order[idx[i]]), a);
        first = 0;
        if (pos >= (int)sizeof line)
            break;
    }
    gm_strbuf_putf(out, "%s\n", line);
    if (p->lookup_bytes || p->mtp_bytes) {
        gm_fmt_bytes(p->lookup_bytes, a, sizeof a);
        gm_fmt_bytes(p->mtp_bytes, b, sizeof b);
        if (p->lookup_bytes && p->mtp_bytes)
            gm_strbuf_putf(out, "%s  read from the file: lookup tables %s; left out unless speculative: MTP drafter %s\n", in, a, b);
        else if (p->lookup_bytes)
            gm_strbuf_putf(out, "%s  read from the file: lookup tables %s\n", in, a);
        else
            gm_strbuf_putf(out, "%s  left out unless speculative: MTP drafter %s\n", in, b);
    }

    gm_fmt_bytes(p->ram_bytes, a, sizeof a);
    gm_fmt_bytes(p->ceiling_bytes, b, sizeof b);
    gm_fmt_bytes(p->kv_room_bytes, c, sizeof c);
    gm_fmt_bytes(p->prefill_chunk_bytes + p->prefill_pool_bytes, d, sizeof d);
    gm_fmt_bytes(p->host_floor_bytes, e, sizeof e);
    gm_fmt_bytes(p->host_overhead_bytes, g, sizeof g);
    gm_strbuf_putf(out, "%s  this machine: %s RAM, ceiling %s, KV room %s at %u tokens (%s of it the prefill chunk and its pool), host floor %s, host overhead %s\n",
                   in, a, b, c, p->kv_ctx, d, e, g);
    if (p->is_moe) {
        char share[32];
        share_str(p->arena_share, share, sizeof share);
        gm_fmt_bytes(p->arena_bytes, a, sizeof a);
        gm_fmt_bytes(p->cold_token_bytes, b, sizeof b);
        gm_strbuf_putf(out, "%s  decode arena %s (%s of the experts%s); a cold token reads about %s of experts\n",
                       in, a, share, p->arena_overridden ? ", set by GMLX_DECODE_ARENA_GB" : "", b);
        gm_fmt_bytes(p->prefill_ring_bytes, a, sizeof a);
        if (p->ring_fits_arena)
            gm_strbuf_putf(out, "%s  prefill ring %s fits in the arena; prefill borrows the arena's memory\n", in, a);
        else
            gm_strbuf_putf(out, "%s  prefill ring %s exceeds the arena; prefill runs from the page cache\n", in, a);
    }
    if (p->vram_bytes && p->is_moe) {
        char v[32];
        gm_fmt_bytes(p->vram_bytes, a, sizeof a);
        gm_fmt_bytes(p->vram_slot_bytes, b, sizeof b);
        share_str(p->vram_share, v, sizeof v);
        if (p->vram_attn_bytes) {
            char w[32], k[32];
            gm_fmt_bytes(p->vram_attn_bytes, w, sizeof w);
            gm_fmt_bytes(p->vram_kv_bytes, k, sizeof k);
            if (p->vram_attn_layers)
                gm_strbuf_putf(out, "%s  VRAM attention and output head (--gpu): %u layers, weights %s and a cache of "
                               "%u positions %s, computed on the GPU in decode\n", in, p->vram_attn_layers, w,
                               p->kv_ctx, k);
            else
                gm_strbuf_putf(out, "%s  VRAM output head (--gpu): %s, computed on the GPU in decode\n", in, w);
        }
        gm_strbuf_putf(out, "%s  VRAM tier %s (--gpu): %u of the %u routed experts (%s; %s each), computed on the GPU "
                       "in decode\n", in, a, p->vram_experts, p->n_routed_experts, v, b);
        if (p->vram_stage_slots)
            gm_strbuf_putf(out, "%s  VRAM staging (--gpu): %u more slots, through which a prompt's chunk copies the "
                           "experts it needs from RAM\n", in, p->vram_stage_slots);
    }
    gm_plan_verdict_line(p, line, sizeof line);
    gm_strbuf_putf(out, "%s  %s\n", in, line);
    gm_plan_now_line(p, line, sizeof line);
    if (line[0])
        gm_strbuf_putf(out, "%s  %s\n", in, line);
    if (p->vram_bytes && p->is_moe) {
        char v[32], r[32], s[32];
        share_str(p->vram_share, v, sizeof v);
        share_str(p->ram_share, r, sizeof r);
        share_str(p->ssd_share, s, sizeof s);
        gm_strbuf_putf(out, "%s  => with --gpu, the experts by tier: VRAM %s, RAM %s, SSD %s\n", in, v,
                       p->ram_share > 0 ? r : "none", p->ssd_share > 0 ? s : "none");
    }
}

char *gm_plan_text(const gm_plan *p, const char *indent)
{
    gm_strbuf b = GM_STRBUF_INIT;
    plan_print(p, &b, indent ? indent : "");
    return gm_strbuf_take(&b);
}
