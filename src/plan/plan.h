/* plan/plan: the streaming plan, a pure function of (model description, machine, options).
 *
 * Owns: gm_plan and the formulas that size the memory tiers (docs/streaming.md gives each one
 * with its reason):
 *   host floor    = 1 GiB + 2% of RAM, at most 8 GiB        (the kernel and the rest of the system)
 *   host overhead = 512 MiB + 1% of RAM                      (the engine's own buffers, page-cache room)
 *   ceiling       = RAM - host floor - host overhead
 *   KV room       = KV cache at kv_ctx tokens + prefill chunk activations + the buffer pool
 *   arena         = ceiling - every-token weights - KV room, at most the experts (at most half of
 *                   them when the whole model fits), or GMLX_DECODE_ARENA_GB
 *   prefill ring  = 2 slots, each the largest layer's expert stacks (the largest stack per kind)
 *   cold token    = sum over MoE layers of experts-per-token x bytes of one expert
 * and the verdict: exactly one line from the table of docs/streaming.md, plus, when the experts
 * could stay in memory, the line that says what a load does with the memory free now.
 * Threads: pure functions; a gm_plan is a plain value.
 */
#ifndef GM_PLAN_PLAN_H
#define GM_PLAN_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "base/sysinfo.h"
#include "model/model.h"

#define GM_PLAN_DEFAULT_KV_CTX 32768u
#define GM_PLAN_DEFAULT_PREFILL_STEP 8192u
#define GM_PLAN_POOL_BYTES (512ull << 20)

typedef enum gm_verdict {
    GM_VERDICT_STREAMS = 0,         /* => streams with --stream-experts */
    GM_VERDICT_NO_ARENA,            /* => streams, but no decode arena */
    GM_VERDICT_CANNOT_STREAM,       /* => cannot stream */
    GM_VERDICT_FITS,                /* => the whole file fits in RAM */
    GM_VERDICT_EXPERTS_IN_MEMORY,   /* => loads with its experts in memory */
} gm_verdict;

typedef enum gm_now {
    GM_NOW_NONE = 0,          /* no "memory free now" line (the experts stream anyway) */
    GM_NOW_EXPERTS_STAY,      /* => with the memory free now, its experts stay in memory */
    GM_NOW_AUTO_MTP_OFF,      /* => ... auto MTP is off */
    GM_NOW_TABLES_OFFLOADED,  /* => ... its tables are offloaded to disk */
    GM_NOW_EXPERTS_STREAM,    /* => the experts stream because ... */
} gm_now;

typedef struct gm_plan_opts {
    uint32_t kv_ctx;            /* tokens of KV room (GMLX_STREAM_KV_CTX), default 32768 */
    uint32_t kv_bits;           /* 16 (default), 8 (--kv-bits 8) or 32 (an f32 cache) */
    uint32_t prefill_step;      /* prefill chunk tokens, default 8192 */
    bool arena_override;        /* GMLX_DECODE_ARENA_GB was set */
    uint64_t arena_override_bytes;
    uint64_t vram_bytes;        /* a VRAM tier of experts this large (--gpu, --vram-gb); 0: none */
    uint32_t vram_stage_slots;  /* of which staging slots (GM_VRAM_STAGE_SLOTS; GMLX_GPU_STAGE) */
} gm_plan_opts;

typedef struct gm_plan {
    /* model */
    uint64_t file_bytes, every_token_bytes, expert_bytes, lookup_bytes, mtp_bytes;
    uint64_t group_bytes[GM_TG_COUNT];
    uint32_t n_moe_layers, n_experts, n_experts_used;
    bool is_moe;
    /* machine */
    uint64_t ram_bytes, avail_bytes;
    bool avail_known;
    uint64_t host_floor_bytes, host_overhead_bytes, ceiling_bytes;
    /* KV room */
    uint32_t kv_ctx, kv_bits, prefill_chunk_tokens;
    uint64_t kv_cache_bytes, prefill_chunk_bytes, prefill_pool_bytes, kv_room_bytes;
    /* arena and ring */
    uint64_t arena_bytes;
    bool arena_overridden;
    double arena_share;             /* arena / expert bytes */
    uint32_t arena_min_slots;       /* the fewest slots any MoE layer gets under the even split */
    bool arena_viable;              /* every MoE layer holds at least a token's experts */
    uint64_t prefill_ring_bytes;
    bool ring_fits_arena;
    uint64_t cold_token_bytes;
    /* the tiers with a GPU (opts.vram_bytes): the VRAM tier's slots (as infer/gpu.c lays them
     * out: the largest layer's expert, every layer alike), the routed experts it holds of all,
     * and the share of the experts each tier holds (VRAM, the RAM arena or the whole model in
     * memory, the rest read from the SSD) */
    uint64_t vram_bytes, vram_slot_bytes;
    uint32_t vram_experts, n_routed_experts;
    double vram_share, ram_share, ssd_share;
    /* what a decode token's attention and output head take of the VRAM first (infer/gpu_attn.c):
     * the weights of the head and of vram_attn_layers layers' attention (grouped-query over the
     * whole context; 0: it stays on the CPU) and their cache of kv_ctx positions; the experts'
     * slots take the rest */
    uint64_t vram_attn_bytes, vram_kv_bytes;
    uint32_t vram_attn_layers;
    /* the slots kept apart as staging for a prompt's experts (every layer's attention on the
     * device, the experts in memory, not all of them in VRAM; as infer/gpu_decode.c stages for
     * the families whose chunks run whole on the device), not counted in vram_experts */
    uint32_t vram_stage_slots;
    /* verdicts */
    gm_verdict verdict;
    gm_now now;
    bool experts_in_memory_now, auto_mtp_off_now, tables_from_file_now;
    uint64_t room_now_bytes;        /* what a load could hold now: min(ceiling, avail - overhead) */
} gm_plan;

/* The default options. */
void gm_plan_opts_default(gm_plan_opts *o);
/* What the tuning sets of them (GMLX_STREAM_KV_CTX, GMLX_DECODE_ARENA_GB); t NULL: nothing. */
void gm_plan_opts_tune(gm_plan_opts *o, const gm_tuning *t);

/* Computes the plan. Pure: reads nothing but its arguments. */
void gm_plan_compute(const gm_model_desc *m, const gm_sysinfo *sys, const gm_plan_opts *o, gm_plan *p);

/* The plan's lines (the "streaming:" block and the => lines), each prefixed by indent (NULL:
 * none) and ended by a newline, as one malloc'd string the caller frees; NULL when out of
 * memory. The library formats, the front end prints. */
char *gm_plan_text(const gm_plan *p, const char *indent);

/* The => verdict line and the "memory free now" line (empty when none), without indent. */
void gm_plan_verdict_line(const gm_plan *p, char *buf, size_t len);
void gm_plan_now_line(const gm_plan *p, char *buf, size_t len);

/* Short machine-readable names ("streams", "no-arena", "cannot-stream", "fits",
 * "experts-in-memory"). */
const char *gm_verdict_name(gm_verdict v);

/* Formats bytes as the plan prints them: "62.2 GB", "12.3 MB" (decimal units). */
void gm_fmt_bytes(uint64_t bytes, char *buf, size_t len);

#endif
