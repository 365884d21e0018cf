/* A decode token through every layer on the CUDA device (see gpu_decode.h). */
#include "infer/gpu_decode.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "infer/internal.h"

#ifdef GMLX_HAVE_CUDA

#include "backend/cuda/cuda.h"
#include "gguf/types.h"
#include "infer/gpu.h"
#include "infer/gpu_attn.h"
#include "infer/gpu_copy.h"
#include "infer/recipe.h"
#include "stream/stream.h"

/* Tokens of a prompt's chunk on the device at most: a longer chunk runs as several (the pairs'
 * buffers grow with it: about 0.4 MB a token on a Qwen3-235B shape). */
#define GM_GPU_PF_TOKENS 512u

struct gm_gpu_dec {
    gm_engine *e;
    uint64_t replays;       /* tokens replayed as a CUDA graph */
    bool prompt;            /* a prompt's chunks whole on the device too */
    uint64_t pf_tokens;     /* prompt tokens whole on the device, and their time */
    double pf_s;
    bool partial;           /* not every routed expert in VRAM */
    bool staged;            /* partial: a prompt's chunk runs here, staging the experts VRAM lacks */
    bool split;             /* partial: a decode token runs here, the experts VRAM lacks on the CPU */
    bool promotes;          /* split: the CPU's experts offered to the tier after the token */
    bool bounce;            /* staged: the copies through page-locked buffers (gpu_copy.h) */
    uint64_t n_staged, staged_bytes; /* experts copied in through the staging slots, and the time */
    double stage_s;
    gm_gpu_copy_stats copy; /* of those bytes, through page-locked buffers, and the time filling them */
    uint64_t host_experts;  /* split: experts the CPU computed, the time that took, the time waited */
    double host_s, route_s; /*   for the layers' routing */
    gm_cuda_slab *slab;
    gm_cuda_moe_layer *m;   /* [n_layer]: device pointers */
    const float *out_norm;  /* device */
    gm_cuda_dec_shape shape;
    uint64_t tokens;
    double token_s;
};

struct gm_gpu_tok {
    gm_cuda_dec *cd;        /* NULL: a decode token runs layer by layer (d->staged) */
    gm_cuda_pf *pf;         /* NULL: a prompt runs layer by layer */
    float *cs;              /* [GM_GPU_PF_TOKENS][n_rot]: a chunk's rotations */
    gm_cuda_expert *table;  /* [n_expert]: a layer's experts in VRAM (d->partial) */
    int32_t *staged;        /* [staging slots]: the experts a staged pass copied into each */
    uint8_t *need;          /* [n_expert]: a staged layer's experts that its passes copy in */
    gm_gpu_copies *cp;      /* a staged pass's copies (d->staged and pf) */
};

/* Whether m's rows are packed (the device's products step by the packed row). */
static bool packed(const gm_mat *m)
{
    uint64_t rb;
    gm_err sub = {0};
    return m->data && gm_type_row_bytes(m->type, m->n_cols, &rb, &sub) == 0 && rb == m->row_bytes;
}

/* The shape of the FFN gate, up, down (the shared expert's, or a dense layer's) on the device:
 * false (why) when it cannot run there. */
static bool ffn_shape(const gm_engine *e, const gm_mat *g, const gm_mat *u, const gm_mat *dn, gm_cuda_ffn_shape *sh,
                      const char **why)
{
    *sh = (gm_cuda_ffn_shape){
        .gate_type = g->type, .up_type = u->type, .down_type = dn->type, .dim = e->n_embd, .ff = g->n_rows,
        .glu = {.act = e->situ_beta > 0.0f ? GM_CUDA_SITU : e->ops.swiglu_clamped ? GM_CUDA_SWIGLU_OAI : GM_CUDA_SWIGLU,
                .beta = e->situ_beta, .lbeta = e->situ_linear_beta},
    };
    if (!packed(g) || !packed(u) || !packed(dn) || g->n_cols != e->n_embd || u->n_cols != e->n_embd ||
        u->n_rows != sh->ff || dn->n_cols != sh->ff || dn->n_rows != e->n_embd) {
        *why = "a shared expert or dense FFN the device does not take";
        return false;
    }
    return gm_cuda_ffn_supports(sh, why);
}

/* The shared expert's (or the dense FFN's) matrices of layer l, or NULL. */
static const gm_mat *ffn_mats(const gm_layer_w *w, int k)
{
    if (w->is_moe && !w->has_shexp)
        return NULL;
    const gm_mat *sh[3] = {&w->sh_gate, &w->sh_up, &w->sh_down}, *dense[3] = {&w->ffn_gate, &w->ffn_up, &w->ffn_down};
    return w->is_moe ? sh[k] : dense[k];
}

/* Why e's model cannot run whole on the device, or NULL when it can: every routed expert in VRAM,
 * or (*partial) not, where a prompt's chunks stage the others (stage) or a decode token computes
 * them on the CPU (split). */
static const char *why_not(const gm_engine *e, bool stage, bool split, bool *partial)
{
    *partial = false;
    if (!e->gpu || !e->gpu_attn)
        return "its attention or its experts run on the CPU";
    *partial = !gm_gpu_all_resident(e->gpu);
    if (*partial && !stage && !split)
        return "not every routed expert is in VRAM";
    if (!gm_gpu_head_weights(e->gpu_attn))
        return "its output head runs on the CPU";
    if (e->recipe->layer != gm_layer_attn_ffn || e->recipe->head || !e->out_norm || e->n_hc != 1 ||
        e->ple_layer >= 0 || e->n_recurrent)
        return "its family's layers are not plain attention + experts";
    if (e->moe_dim != e->n_embd || e->n_expert > 1024 || e->k_route > 64 || !e->k_route ||
        (e->n_group > 1 && e->n_group_used < e->n_group))
        return "its routing (latent, grouped or too wide)";
    if (e->ops.gating != GM_GATING_SOFTMAX && e->ops.gating != GM_GATING_SIGMOID)
        return "its routing function";
    for (uint32_t l = 0; l < e->n_layer; l++) {
        const gm_layer_w *w = &e->layers[l];
        if (!gm_gpu_attn_weights(e->gpu_attn, l) || (w->is_moe && !gm_gpu_layer(e->gpu, l)))
            return "a layer whose attention or experts run on the CPU";
        if (w->routed_down.data || !w->attn_norm || !w->ffn_norm)
            return "a latent MoE, or a layer without its norms";
        const char *why = NULL;
        gm_cuda_ffn_shape sh;
        if (ffn_mats(w, 0) && !ffn_shape(e, ffn_mats(w, 0), ffn_mats(w, 1), ffn_mats(w, 2), &sh, &why))
            return why;
        const gm_cuda_mat r = {w->router.data, w->router.type, w->router.n_rows, w->router.n_cols};
        const gm_cuda_mat g = {w->sh_gate_inp.data, w->sh_gate_inp.type, w->sh_gate_inp.n_rows, w->sh_gate_inp.n_cols};
        if ((w->is_moe && (!packed(&w->router) || !gm_cuda_mv_supports(&r))) ||
            (w->is_moe && w->has_shexp && w->has_sh_gate_inp &&
             (!packed(&w->sh_gate_inp) || g.n_rows != 1 || !gm_cuda_mv_supports(&g))))
            return "a router type without a CUDA product";
    }
    return NULL;
}

static uint64_t up(uint64_t b) { return (b + 255) / 256 * 256; }

void gm_gpu_dec_free(gm_gpu_dec *d)
{
    if (!d)
        return;
    gm_cuda_slab_free(d->slab);
    free(d->m);
    free(d);
}

/* Appends bytes of src (NULL: nothing) to the staging image at *at; its device address (in the
 * slab at base), or NULL. */
static const void *stage(uint8_t *img, uint8_t *base, uint64_t *at, const void *src, uint64_t bytes)
{
    if (!src)
        return NULL;
    if (img)
        memcpy(img + *at, src, bytes);
    const void *dev = base ? base + *at : NULL;
    *at += up(bytes);
    return dev;
}

/* Lays out (img, base NULL: only counts *at) every layer's part and the output norm. */
static int lay_out(gm_gpu_dec *d, uint8_t *img, uint8_t *base, uint64_t *at, gm_cuda_expert *table, gm_err *err)
{
    gm_engine *e = d->e;
    const uint64_t E = e->n_embd, N = e->n_expert;
    for (uint32_t l = 0; l < e->n_layer; l++) {
        const gm_layer_w *w = &e->layers[l];
        gm_cuda_moe_layer *m = &d->m[l];
        m->attn_norm = stage(img, base, at, w->attn_norm, E * 4);
        m->ffn_norm = stage(img, base, at, w->ffn_norm, E * 4);
        if (ffn_mats(w, 0)) { /* the shared expert, or the dense FFN */
            const gm_mat *g = ffn_mats(w, 0), *u = ffn_mats(w, 1), *dn = ffn_mats(w, 2);
            const char *why;
            ffn_shape(e, g, u, dn, &m->shared_ffn, &why); /* why_not took it */
            m->shared = (gm_cuda_expert){stage(img, base, at, g->data, g->n_rows * g->row_bytes),
                                         stage(img, base, at, u->data, u->n_rows * u->row_bytes),
                                         stage(img, base, at, dn->data, dn->n_rows * dn->row_bytes)};
            if (w->is_moe && w->has_sh_gate_inp)
                m->shared_gate = (gm_cuda_mat){stage(img, base, at, w->sh_gate_inp.data, w->sh_gate_inp.row_bytes),
                                               w->sh_gate_inp.type, 1, w->sh_gate_inp.n_cols};
        }
        if (!w->is_moe)
            continue;
        m->router = (gm_cuda_mat){stage(img, base, at, w->router.data, N * w->router.row_bytes), w->router.type,
                                  w->router.n_rows, w->router.n_cols};
        m->router_b = stage(img, base, at, w->router_b, N * 4);
        m->sel_bias = stage(img, base, at, w->router_bias, N * 4);
        int rc = gm_gpu_expert_table(e->gpu, l, d->partial ? NULL : table, &m->ffn, err);
        if (rc)
            return rc;
        m->experts = d->partial ? NULL : stage(img, base, at, table, N * sizeof *table);
    }
    d->out_norm = stage(img, base, at, e->out_norm, E * 4);
    return 0;
}

int gm_gpu_dec_create(gm_gpu_dec **out, gm_engine *e, const gm_gpu_dec_opts *o, gm_err *err)
{
    *out = NULL;
    const bool graph = o->graph, prompt = o->prompt;
    bool split = o->split;
    bool partial;
    /* the CPU's share of a split token comes from the experts in host memory, not the arena */
    split = split && !e->stream;
    const bool can_stage = prompt && gm_gpu_stage_slots(e->gpu) > 0;
    const char *why = why_not(e, can_stage, split, &partial);
    if (why) {
        if (e->gpu && e->gpu_attn)
            gm_log(GM_LOG_NOTE, "[gpu] decode runs layer by layer, through the host: %s", why);
        return gm_gpu_unstage(e->gpu, err); /* no chunk of this model stages through them */
    }
    int rc;
    if (!(partial && can_stage) && gm_gpu_stage_slots(e->gpu)) { /* no chunk stages: the slots hold experts */
        if ((rc = gm_gpu_unstage(e->gpu, err)))
            return rc;
        partial = !gm_gpu_all_resident(e->gpu);
    }
    gm_gpu_dec *d = calloc(1, sizeof *d);
    gm_cuda_expert *table = calloc(e->n_expert, sizeof *table);
    uint8_t *img = NULL;
    rc = 0;
    if (!d || !table || !(d->m = calloc(e->n_layer, sizeof *d->m))) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto done;
    }
    d->e = e;
    d->partial = partial;
    d->staged = partial && can_stage;
    d->split = partial && split;
    d->promotes = d->split && o->split_promotes;
    d->bounce = o->bounce;
    d->prompt = prompt && (!partial || d->staged);
    uint64_t bytes = 0, at = 0, max_ff = 0;
    if ((rc = lay_out(d, NULL, NULL, &bytes, table, err)))
        goto done;
    for (uint32_t l = 0; l < e->n_layer; l++) {
        max_ff = d->m[l].ffn.ff > max_ff ? d->m[l].ffn.ff : max_ff;
        max_ff = d->m[l].shared_ffn.ff > max_ff ? d->m[l].shared_ffn.ff : max_ff;
    }
    if (!(img = calloc(1, bytes))) {
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
        goto done;
    }
    gm_err serr = {0};
    if ((rc = gm_cuda_slab_create(&d->slab, bytes, bytes, &serr)) == GM_ENOMEM) {
        gm_log(GM_LOG_NOTE, "[gpu] decode runs layer by layer, through the host: %s", serr.msg);
        gm_gpu_dec_free(d);
        d = NULL;
        rc = gm_gpu_unstage(e->gpu, err);
        goto done;
    }
    if (rc) {
        gm_err_set(err, rc, "%s", serr.msg);
        goto done;
    }
    if ((rc = lay_out(d, img, gm_cuda_slab_base(d->slab), &at, table, err)) ||
        (rc = gm_cuda_upload(gm_cuda_slab_base(d->slab), img, bytes, err)))
        goto done;
    d->shape = (gm_cuda_dec_shape){.n_layer = e->n_layer, .n_expert = e->n_expert, .k = e->k_route,
                                   .softmax = e->ops.gating == GM_GATING_SOFTMAX, .norm_topk = e->ops.norm_topk,
                                   .scale = e->ops.expert_scale, .eps = e->rms_eps, .max_ff = max_ff,
                                   .n_vocab = e->n_vocab, .graph = graph && !d->split};
    if (d->staged)
        gm_log(GM_LOG_NOTE, "[gpu] a prompt's chunks run whole on the device (%.2f MB of norms and routers), the "
               "experts VRAM lacks copied in through %u staging slots", (double)bytes / 1e6,
               gm_gpu_stage_slots(e->gpu));
    if (d->split)
        gm_log(GM_LOG_NOTE, "[gpu] decode runs on the device (%.2f MB of norms and routers), the experts VRAM lacks "
               "computed on the CPU from host memory: one round trip a layer", (double)bytes / 1e6);
    else if (d->partial)
        gm_log(GM_LOG_NOTE, "[gpu] decode runs layer by layer, through the host: not every routed expert is in VRAM");
    if (!d->partial)
        gm_log(GM_LOG_NOTE, "[gpu] decode runs whole on the device (%.2f MB of norms, routers and expert tables)",
               (double)bytes / 1e6);
done:
    free(img);
    free(table);
    if (rc) {
        gm_gpu_dec_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void gm_gpu_tok_free(gm_gpu_tok *t)
{
    if (!t)
        return;
    gm_cuda_dec_free(t->cd);
    gm_cuda_pf_free(t->pf);
    gm_gpu_copies_free(t->cp);
    free(t->cs);
    free(t->table);
    free(t->staged);
    free(t->need);
    free(t);
}

int gm_gpu_tok_create(gm_gpu_tok **out, gm_gpu_dec *d, gm_fwd *s, gm_err *err)
{
    *out = NULL;
    gm_cuda_attn *ca = gm_gpu_kv_attn(s->gkv);
    if (!d || !ca)
        return 0;
    gm_gpu_tok *t = calloc(1, sizeof *t);
    if (!t)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    int rc = d->partial && !d->split ? 0 : gm_cuda_dec_create(&t->cd, ca, &d->shape, err);
    if (!rc && d->partial &&
        (!(t->table = calloc(s->e->n_expert, sizeof *t->table)) ||
         !(t->staged = calloc(gm_gpu_stage_slots(s->e->gpu) + 1, sizeof *t->staged)) ||
         !(t->need = calloc(s->e->n_expert, sizeof *t->need))))
        rc = gm_err_set(err, GM_ENOMEM, "out of memory");
    if (rc) {
        gm_gpu_tok_free(t);
        return rc;
    }
    /* a prompt's chunks whole on the device too, where the attention's shape and the memory allow */
    const uint32_t max = s->max_chunk < GM_GPU_PF_TOKENS ? s->max_chunk : GM_GPU_PF_TOKENS;
    gm_err sub = {0};
    if (d->prompt && max > 1 && (t->cs = malloc((uint64_t)max * s->e->n_rot * sizeof(float))) &&
        gm_cuda_pf_create(&t->pf, ca, &d->shape, max, &sub))
        gm_log(GM_LOG_NOTE, "[gpu] a prompt runs layer by layer, through the host: %s", sub.msg);
    /* a pass copies a run of ids with one copy a matrix: 3 a slot at most */
    if (t->pf && d->staged &&
        (rc = gm_gpu_copies_create(&t->cp, 3 * gm_gpu_stage_slots(s->e->gpu), d->bounce && !gm_gpu_pinned(s->e->gpu),
                                   err))) {
        gm_gpu_tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

bool gm_gpu_tok_on(const gm_fwd *s) { return s->gtok && s->gtok->cd && !s->e->shed; }

/* Layer l of a decode token split between the device and the host: its attention, its routing and
 * the chosen experts VRAM holds on the device; the others on the CPU meanwhile, from host memory;
 * their rows up, and the sum, on the device. */
static int split_layer(gm_fwd *s, uint32_t l, void *kc, void *vc, gm_err *err)
{
    gm_engine *e = s->e;
    gm_gpu_dec *d = e->gpu_dec;
    gm_gpu_tok *t = s->gtok;
    gm_gpu *g = e->gpu;
    const uint32_t N = e->n_expert, K = e->k_route;
    for (uint32_t x = 0; x < N; x++)
        if (!gm_gpu_find(g, l, (int32_t)x, &t->table[x]))
            t->table[x] = (gm_cuda_expert){NULL, NULL, NULL};
    const double t0 = gm_stream_now_s();
    int rc = gm_cuda_dec_route(t->cd, l, gm_gpu_attn_weights(e->gpu_attn, l), &d->m[l], t->table, kc, vc,
                               s->kv_cap[l], s->pos, err);
    if (rc)
        return rc;
    const double t1 = gm_stream_now_s();
    d->route_s += t1 - t0;
    const int32_t *ids = gm_cuda_dec_ids(t->cd, l);
    float *rows = gm_cuda_dec_host_rows(t->cd);
    int32_t hx[GM_MAX_EXPERTS_USED];
    float *ho[GM_MAX_EXPERTS_USED];
    uint32_t nh = 0;
    for (uint32_t j = 0; j < K; j++) {
        if (ids[j] < 0 || (uint32_t)ids[j] >= N)
            return gm_err_set(err, GM_EIO, "--gpu: layer %u's routing gave expert %d of %u", l, ids[j], N);
        gm_gpu_note(g, l, ids[j]);
        if (!t->table[ids[j]].gate) {
            hx[nh] = ids[j];
            ho[nh++] = rows + (uint64_t)j * e->n_embd;
        }
    }
    if (nh && (rc = gm_moe_token_experts(s, l, gm_cuda_dec_xn(t->cd), hx, nh, ho, err)))
        return rc;
    d->host_experts += nh;
    d->host_s += gm_stream_now_s() - t1;
    return gm_cuda_dec_rows(t->cd, l, &d->m[l], nh > 0, err);
}

/* After a split token: the experts the CPU computed offered to the VRAM tier (the device is idle:
 * no product reads a slot while it is rewritten). */
static int offer_misses(gm_fwd *s, gm_err *err)
{
    gm_engine *e = s->e;
    for (uint32_t l = 0; l < e->n_layer; l++) {
        const gm_layer_w *w = &e->layers[l];
        const int32_t *ids = gm_cuda_dec_ids(s->gtok->cd, l);
        for (uint32_t j = 0; w->is_moe && j < e->k_route; j++) {
            const int32_t x = ids[j];
            if (gm_gpu_has(e->gpu, l, x))
                continue;
            const gm_stream_expert src = gm_layer_expert(w, x);
            int rc = gm_gpu_offer(e->gpu, l, x, &src, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int gm_gpu_tok_run(gm_fwd *s, float *logits, gm_err *err)
{
    gm_engine *e = s->e;
    gm_gpu_dec *d = e->gpu_dec;
    gm_gpu_tok *t = s->gtok;
    if (!d || !t || !t->cd)
        return gm_err_set(err, GM_EINVAL, "--gpu: this session does not decode on the device");
    const double t0 = gm_stream_now_s();
    float cs[GM_CUDA_ATTN_MAX_HD];
    if (e->n_rot > GM_CUDA_ATTN_MAX_HD)
        return gm_err_set(err, GM_EINVAL, "--gpu: a rotation of %u values", e->n_rot);
    gm_gpu_rope_cs(s, 0, cs);
    int rc = gm_cuda_dec_begin(t->cd, s->x, cs, s->pos, err);
    for (uint32_t l = 0; l < e->n_layer && !rc; l++) {
        void *kc = NULL, *vc = NULL;
        if ((rc = gm_gpu_kv_layer(s->gkv, s, l, &kc, &vc, err)))
            break;
        if (d->split && e->layers[l].is_moe)
            rc = split_layer(s, l, kc, vc, err);
        else
            rc = gm_cuda_dec_layer(t->cd, l, gm_gpu_attn_weights(e->gpu_attn, l), &d->m[l], kc, vc, s->kv_cap[l],
                                   s->pos, err);
    }
    if (rc)
        return rc;
    const uint64_t r0 = gm_cuda_dec_replays(t->cd);
    if ((rc = gm_cuda_dec_end(t->cd, d->out_norm, logits ? gm_gpu_head_weights(e->gpu_attn) : NULL, logits, err)))
        return rc;
    d->replays += gm_cuda_dec_replays(t->cd) - r0;
    const uint64_t E = e->n_embd;
    memcpy(s->x, gm_cuda_dec_x(t->cd), E * sizeof(float));
    memcpy(s->xn, gm_cuda_dec_xn(t->cd), E * sizeof(float));
    for (uint32_t l = 0; l < e->n_layer; l++) {
        gm_gpu_kv_store(s, l, gm_cuda_dec_k_rows(t->cd, l), gm_cuda_dec_v_rows(t->cd, l));
        const int32_t *ids = gm_cuda_dec_ids(t->cd, l);
        for (uint32_t j = 0; !d->split && e->layers[l].is_moe && j < e->k_route; j++)
            gm_gpu_note(e->gpu, l, ids[j]);
    }
    if (d->promotes && (rc = offer_misses(s, err)))
        return rc;
    d->tokens++;
    d->token_s += gm_stream_now_s() - t0;
    return 0;
}

bool gm_gpu_chunk_on(const gm_fwd *s, uint32_t n) { return n > 1 && s->gtok && s->gtok->pf && !s->e->shed; }

/* After a staged pass: its experts in the staging slots (xs[i] in slot i, n of them) move into
 * the tier where the tier takes them (the prompt used them more than the residents they replace),
 * copied within the device after the pass's products and before the next pass's copies. */
static int seed_tier(gm_fwd *s, uint32_t l, const int32_t *xs, uint32_t n, gm_err *err)
{
    gm_engine *e = s->e;
    gm_gpu *g = e->gpu;
    const gm_layer_w *w = &e->layers[l];
    const uint64_t eb[3] = {w->gate.expert_bytes, w->up.expert_bytes, w->down.expert_bytes};
    for (uint32_t i = 0; i < n; i++) {
        gm_cuda_expert to;
        if (!gm_gpu_claim(g, l, xs[i], &to))
            continue;
        uint64_t pitch[3];
        const gm_cuda_expert from = gm_gpu_stage_expert(g, l, i, pitch);
        const void *src[3] = {from.gate, from.up, from.down};
        void *dst[3] = {(void *)to.gate, (void *)to.up, (void *)to.down};
        int rc = 0;
        for (int k = 0; k < 3 && !rc; k++)
            rc = gm_cuda_pf_copy(s->gtok->pf, dst[k], src[k], eb[k], err);
        if (rc) {
            gm_gpu_unclaim(g, l, xs[i]);
            return rc;
        }
        gm_gpu_count_seeded(g, l);
    }
    return 0;
}

/* Layer l of the chunk when not every expert is in VRAM: its attention and routing on the device,
 * then its experts with pairs in passes: the first computes those in VRAM and as many others as
 * the staging slots hold, copied in from host memory (a run of consecutive ids with one copy a
 * matrix), each next pass as many of the rest. The chunk's pairs count as uses of the tier's
 * experts, and each pass's staged experts move into the tier where it takes them. */
static int staged_layer(gm_fwd *s, uint32_t l, void *kc, void *vc, gm_err *err)
{
    gm_engine *e = s->e;
    gm_gpu_dec *d = e->gpu_dec;
    gm_gpu_tok *t = s->gtok;
    gm_gpu *g = e->gpu;
    const gm_layer_w *w = &e->layers[l];
    const uint32_t *cnt;
    int rc = gm_cuda_pf_route(t->pf, l, gm_gpu_attn_weights(e->gpu_attn, l), &d->m[l], kc, vc, s->kv_cap[l], &cnt,
                              err);
    if (rc)
        return rc;
    gm_gpu_count_prompt(g, l, cnt);
    const uint32_t N = e->n_expert, S = gm_gpu_stage_slots(g);
    const gm_expert_stack *st[3] = {&w->gate, &w->up, &w->down};
    const uint64_t bytes = w->gate.expert_bytes + w->up.expert_bytes + w->down.expert_bytes;
    /* what the first pass finds in the tier it computes there; the rest are staged, even where a
     * pass's seeding moves one of those residents out before the pass that would reach it */
    for (uint32_t y = 0; y < N; y++) {
        t->table[y] = (gm_cuda_expert){NULL, NULL, NULL};
        t->need[y] = cnt[y] && !gm_gpu_find(g, l, (int32_t)y, &t->table[y]);
    }
    for (uint32_t x = 0, pass = 0;; pass++) {
        for (uint32_t y = 0; pass > 0 && y < N; y++)
            t->table[y] = (gm_cuda_expert){NULL, NULL, NULL};
        const double t0 = gm_stream_now_s();
        uint32_t used = 0;
        while (x < N && used < S && !rc) {
            if (!t->need[x]) {
                x++;
                continue;
            }
            uint32_t r = 1; /* a run of ids the tier lacks */
            while (x + r < N && used + r < S && t->need[x + r])
                r++;
            uint64_t pitch[3];
            for (uint32_t i = 0; i < r; i++) {
                t->table[x + i] = gm_gpu_stage_expert(g, l, used + i, pitch);
                t->staged[used + i] = (int32_t)(x + i);
            }
            const void *dst[3] = {t->table[x].gate, t->table[x].up, t->table[x].down};
            for (int k = 0; k < 3 && !rc; k++) {
                const uint64_t eb = st[k]->expert_bytes;
                rc = gm_gpu_copies_add(t->cp, (void *)dst[k], pitch[k], st[k]->data + (uint64_t)x * eb, eb, r, err);
            }
            d->n_staged += r;
            d->staged_bytes += r * bytes;
            used += r;
            x += r;
        }
        if (!rc)
            rc = gm_gpu_copies_flush(t->cp, t->pf, e->pool, &d->copy, err);
        d->stage_s += gm_stream_now_s() - t0;
        bool more = false;
        for (uint32_t y = x; y < N && !more; y++)
            more = t->need[y];
        /* the pass's staged experts move into the tier before the next pass reuses their slots */
        if (rc || (rc = gm_cuda_pf_experts(t->pf, l, &d->m[l], t->table, !more, err)) ||
            (rc = seed_tier(s, l, t->staged, used, err)) || !more)
            return rc;
    }
}

/* The chunk of n tokens at s->pos + at (n at most the scratch's) through every layer: its rows'
 * residuals into s->x, their K and V rows into the host's cache, their (expert, token) pairs into
 * the tier's count of a prompt's; the last token's normalised row into s->xn and its logits into logits (all: every token's;
 * NULL: none). */
static int chunk_part(gm_fwd *s, uint32_t at, uint32_t n, float *logits, bool all, gm_err *err)
{
    gm_engine *e = s->e;
    gm_gpu_dec *d = e->gpu_dec;
    gm_gpu_tok *t = s->gtok;
    const uint32_t pos = s->pos + at;
    const uint64_t E = e->n_embd;
    for (uint32_t i = 0; i < n; i++)
        gm_gpu_rope_cs(s, at + i, t->cs + (uint64_t)i * e->n_rot);
    int rc = gm_cuda_pf_begin(t->pf, s->x + at * E, t->cs, pos, n, err);
    for (uint32_t l = 0; l < e->n_layer && !rc; l++) {
        void *kc = NULL, *vc = NULL;
        if ((rc = gm_gpu_kv_layer(s->gkv, s, l, &kc, &vc, err)))
            break;
        if (d->staged && e->layers[l].is_moe)
            rc = staged_layer(s, l, kc, vc, err);
        else
            rc = gm_cuda_pf_layer(t->pf, l, gm_gpu_attn_weights(e->gpu_attn, l), &d->m[l], kc, vc, s->kv_cap[l],
                                  err);
    }
    if (rc || (rc = gm_cuda_pf_end(t->pf, d->out_norm, logits ? gm_gpu_head_weights(e->gpu_attn) : NULL, logits, all,
                                   err)))
        return rc;
    memcpy(s->x + at * E, gm_cuda_pf_x(t->pf), n * E * sizeof(float));
    memcpy(s->xn, gm_cuda_pf_xn(t->pf), E * sizeof(float));
    for (uint32_t l = 0; l < e->n_layer; l++) {
        if ((rc = gm_gpu_kv_get(s, l, pos, n, err)))
            return rc;
        if (e->layers[l].is_moe)
            gm_gpu_count_pairs(e->gpu, (uint64_t)n * e->k_route);
    }
    return 0;
}

int gm_gpu_chunk_run(gm_fwd *s, uint32_t n, float *logits, bool all, gm_err *err)
{
    gm_engine *e = s->e;
    gm_gpu_dec *d = e->gpu_dec;
    gm_gpu_tok *t = s->gtok;
    if (!d || !t || !t->pf)
        return gm_err_set(err, GM_EINVAL, "--gpu: this session's prompts do not run on the device");
    const double t0 = gm_stream_now_s();
    const uint32_t max = gm_cuda_pf_max_tokens(t->pf);
    for (uint32_t at = 0; at < n;) {
        const uint32_t m = n - at < max ? n - at : max;
        float *lg = !logits ? NULL : all ? logits + (uint64_t)at * e->n_vocab : at + m == n ? logits : NULL;
        int rc = chunk_part(s, at, m, lg, all, err);
        if (rc)
            return rc;
        at += m;
    }
    d->pf_tokens += n;
    d->pf_s += gm_stream_now_s() - t0;
    return 0;
}

void gm_gpu_dec_print_stats(const gm_gpu_dec *d, gm_strbuf *out)
{
    if (d && d->pf_tokens)
        gm_strbuf_putf(out, "[gpu] prompt whole on the device: %llu tokens in %.3f s (%.0f tok/s)\n",
                       (unsigned long long)d->pf_tokens, d->pf_s, (double)d->pf_tokens / d->pf_s);
    if (d && d->staged && d->pf_tokens)
        gm_strbuf_putf(out, "[gpu] experts copied in for the prompt: %llu (%.2f GB, %.3f s queueing the copies; "
                       "%.2f GB through page-locked buffers, %.3f s filling them)\n",
                       (unsigned long long)d->n_staged, (double)d->staged_bytes / 1e9, d->stage_s,
                       (double)d->copy.bounced / 1e9, d->copy.fill_s);
    if (d && d->tokens && !d->split)
        gm_strbuf_putf(out, "[gpu] decode whole on the device: %llu tokens in %.3f s (%.2f ms each), %llu replayed as "
                       "a CUDA graph\n", (unsigned long long)d->tokens, d->token_s, 1e3 * d->token_s / (double)d->tokens,
                       (unsigned long long)d->replays);
    if (d && d->tokens && d->split)
        gm_strbuf_putf(out, "[gpu] decode on the device, the experts VRAM lacks on the CPU: %llu tokens in %.3f s "
                       "(%.2f ms each), %llu experts on the CPU (%.1f a token) in %.3f s, %.3f s waiting for the "
                       "routing\n", (unsigned long long)d->tokens, d->token_s,
                       1e3 * d->token_s / (double)d->tokens, (unsigned long long)d->host_experts,
                       (double)d->host_experts / (double)d->tokens, d->host_s, d->route_s);
}

#else /* no CUDA backend in this build: e->gpu_dec and s->gtok stay NULL */

int gm_gpu_dec_create(gm_gpu_dec **out, struct gm_engine *e, const gm_gpu_dec_opts *o, gm_err *err)
{
    (void)e, (void)o, (void)err;
    *out = NULL;
    return 0;
}
void gm_gpu_dec_free(gm_gpu_dec *d) { (void)d; }
int gm_gpu_tok_create(gm_gpu_tok **out, gm_gpu_dec *d, struct gm_fwd *s, gm_err *err)
{
    (void)d, (void)s, (void)err;
    *out = NULL;
    return 0;
}
void gm_gpu_tok_free(gm_gpu_tok *t) { (void)t; }
bool gm_gpu_tok_on(const struct gm_fwd *s) { return (void)s, false; }
bool gm_gpu_chunk_on(const struct gm_fwd *s, uint32_t n) { return (void)s, (void)n, false; }
int gm_gpu_chunk_run(struct gm_fwd *s, uint32_t n, float *logits, bool all, gm_err *err)
{
    (void)s, (void)n, (void)logits, (void)all;
    return gm_err_set(err, GM_EUNSUPPORTED, "no CUDA backend");
}
int gm_gpu_tok_run(struct gm_fwd *s, float *logits, gm_err *err)
{
    (void)s, (void)logits;
    return gm_err_set(err, GM_EUNSUPPORTED, "no CUDA backend");
}
void gm_gpu_dec_print_stats(const gm_gpu_dec *d, gm_strbuf *out) { (void)d, (void)out; }

#endif
