/* backend/cuda: the CUDA device, seen from C (built when CMake finds the CUDA toolkit; see
 * docs/cuda.md).
 *
 * Owns: the device probe; the dequantization kernels of the block types real MoE files use, each
 * equal bit for bit to the CPU reference (kernels/dequant.h): the same multiplies and adds in the
 * same order, compiled without fused multiply-add; matrix-vector products over the same types;
 * one token's routed experts computed on the device (gm_cuda_ffn), one token's attention
 * (gm_cuda_attn), a decode token through whole layers (gm_cuda_dec), a prompt's chunk through
 * whole layers as matrix-matrix products (gm_cuda_pf), and the device memory their
 * weights live in (gm_cuda_slab). The engine's VRAM tier of experts (infer/gpu.c), its attention
 * (infer/gpu_attn.c) and its device decode (infer/gpu_decode.c) are built on these.
 *
 * Errors: every CUDA failure (no driver, no device, out of memory, a launch error) comes back as
 * a gm_err with the call that failed and CUDA's own words, never an abort. No device is
 * GM_EUNSUPPORTED, a failed allocation GM_ENOMEM, anything else GM_EIO.
 * Threads: any thread; calls use the current thread's device context (device 0 by default).
 */
#ifndef GM_BACKEND_CUDA_H
#define GM_BACKEND_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gm_cuda_info {
    int n_devices;
    char name[256];          /* device 0 */
    int cc_major, cc_minor;  /* compute capability */
    uint64_t total_bytes, free_bytes;
    int n_sms;
    int driver_version, runtime_version; /* as CUDA encodes them: 1000 * major + 10 * minor */
} gm_cuda_info;

/* The CUDA devices of this machine (device 0 described). GM_EUNSUPPORTED when there is none,
 * or no driver. */
int gm_cuda_probe(gm_cuda_info *out, gm_err *err);

/* True when gm_cuda_dequant decodes type (a gm_type id). */
bool gm_cuda_can_dequant(uint32_t type);

/* Decodes n_elems values of type (a whole number of blocks) from host memory src into host
 * memory dst as float32, on the device: an upload, one kernel, a download. For checks and tools;
 * the backend's own paths keep the data on the device. */
int gm_cuda_dequant(uint32_t type, const void *src, uint64_t n_elems, float *dst, gm_err *err);

/* y = W x on the device for W of n_rows rows of n_cols values of type (device memory, rows of
 * whole blocks, one after the other), x n_cols float32 and y n_rows float32 (device memory),
 * queued on stream (a cudaStream_t; NULL: the default stream). Returns the launch's error; the
 * kernel's own surface at the next synchronisation. */
int gm_cuda_matvec(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols, const float *x, float *y,
                   void *stream, gm_err *err);
/* The same from and to host memory (an upload, the product, a download): for checks and tools. */
int gm_cuda_matvec_host(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols, const float *x, float *y,
                        gm_err *err);

/* A vector of float32 quantized by blocks of 32: x ~ d * qs; s = d * sum(qs). 48 bytes, so that
 * each block's codes are 16-byte aligned for the kernels' wide loads. */
typedef struct gm_cuda_q8_block {
    int8_t qs[32];
    float d, s;
    float pad[2];
} gm_cuda_q8_block;

/* Quantizes n float32 (a multiple of 32; device memory) into n / 32 blocks (device memory):
 * d = max |x| / 127, qs = round(x / d) (half away from zero), on stream. */
int gm_cuda_quantize_q8(const float *x, uint64_t n, gm_cuda_q8_block *out, void *stream, gm_err *err);
/* Whether gm_cuda_matvec_q8 has a kernel for type (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0, IQ4_XS and
 * MXFP4 today). */
bool gm_cuda_matvec_q8_has(uint32_t type);
/* y = W x for x quantized by gm_cuda_quantize_q8 (n_cols / 32 blocks, 16-byte aligned), W as for
 * gm_cuda_matvec, its start and row length aligned for the kernel's loads (Q4_K and Q5_K 16 bytes,
 * IQ4_XS 8, Q2_K 4, Q3_K 2; GM_EINVAL otherwise), on stream: integer dot products of the codes
 * (IQ4_XS and MXFP4 codes mapped through their value tables first), scaled per block. */
int gm_cuda_matvec_q8(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols, const gm_cuda_q8_block *xq,
                      float *y, void *stream, gm_err *err);
/* Up to three products y[j] = W[j] x (n_rows[j] rows each) of one type and row length n_cols by
 * the same quantized x, in one launch, each row computed as gm_cuda_matvec_q8 computes it: a
 * layer's q, k and v, whose small products then run beside the large one. */
int gm_cuda_matvec_q8_multi(uint32_t type, const void *const *w, const uint64_t *n_rows, float *const *y, uint32_t n,
                            uint64_t n_cols, const gm_cuda_q8_block *xq, void *stream, gm_err *err);
/* The same from and to host memory, the vector's blocks copied back to xq_out (n_cols / 32 of
 * them) when it is not NULL: for checks and tools. */
int gm_cuda_matvec_q8_host(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols, const float *x, float *y,
                           gm_cuda_q8_block *xq_out, gm_err *err);

/* ---- one token's routed experts (ffn.cu) -------------------------------------------------- */

/* The gated activation between an expert's gate and up products and its down product, as the
 * CPU's (infer/moe.c): SwiGLU silu(g) u; gpt-oss's clamped form; silu(min(g, limit))
 * clamp(u, -limit, limit); Kimi-K3's situ (beta, and lbeta > 0 for its linear part). */
typedef enum gm_cuda_act { GM_CUDA_SWIGLU = 0, GM_CUDA_SWIGLU_OAI, GM_CUDA_SWIGLU_LIMIT, GM_CUDA_SITU } gm_cuda_act;
typedef struct gm_cuda_glu {
    gm_cuda_act act;
    float limit, beta, lbeta;
} gm_cuda_glu;

/* A layer's expert shape: gate and up are ff rows of dim values, down dim rows of ff. */
typedef struct gm_cuda_ffn_shape {
    uint32_t gate_type, up_type, down_type;
    uint64_t dim, ff;
    gm_cuda_glu glu;
} gm_cuda_ffn_shape;

/* One expert's three matrices in device memory (rows of whole blocks, one after the other). */
typedef struct gm_cuda_expert {
    const void *gate, *up, *down;
} gm_cuda_expert;

/* The scratch and the stream of routed experts: device buffers for up to max_pairs (expert, token)
 * pairs over up to max_tokens tokens, of up to max_dim x max_ff, pinned host buffers for the
 * tokens and the results. One owner thread. */
typedef struct gm_cuda_ffn gm_cuda_ffn;
int gm_cuda_ffn_create(gm_cuda_ffn **out, uint64_t max_dim, uint64_t max_ff, uint32_t max_pairs, uint32_t max_tokens,
                       gm_err *err);
void gm_cuda_ffn_free(gm_cuda_ffn *f);
/* Whether gm_cuda_ffn_start takes experts of this shape: every type has a product (the 8-bit one
 * where gm_cuda_matvec_q8_has, rows aligned for it; else a decoder of gm_cuda_dequant's) and dim
 * and ff are whole blocks. Why not, in why (may be NULL), when it does not. */
bool gm_cuda_ffn_supports(const gm_cuda_ffn_shape *sh, const char **why);
/* Queues, for n pairs (expert ex[j], token tok[j] of the n_tok tokens x: host memory, n_tok rows of
 * sh->dim float32; tok NULL: every pair takes token 0), out_j = down_j(glu(gate_j x, up_j x)), and
 * returns: the host may work meanwhile. x is copied before this returns. Each pair is computed
 * alone, by the same arithmetic whatever the other pairs. GM_EINVAL for a shape
 * gm_cuda_ffn_supports refuses, or more pairs, tokens or a larger shape than f was made for. */
int gm_cuda_ffn_start(gm_cuda_ffn *f, const gm_cuda_ffn_shape *sh, const gm_cuda_expert *ex, const uint32_t *tok,
                      uint32_t n, const float *x, uint32_t n_tok, gm_err *err);
/* Waits for the last start and, when out is not NULL, copies its n rows of dim float32 there
 * (host memory); gm_cuda_ffn_rows gives them in place (pinned memory, valid until the next start).
 * Any error of the queued work (a launch, a fault in a kernel) is returned here. */
int gm_cuda_ffn_finish(gm_cuda_ffn *f, float *out, gm_err *err);
const float *gm_cuda_ffn_rows(const gm_cuda_ffn *f);

/* ---- one token's attention (attn.cu) ------------------------------------------------------ */

/* Head dims gm_cuda_attn takes, at most (a multiple of 32). */
#define GM_CUDA_ATTN_MAX_HD 256

/* A matrix in device memory: n_rows packed rows of n_cols values of type. */
typedef struct gm_cuda_mat {
    const void *data;
    uint32_t type;
    uint64_t n_rows, n_cols;
} gm_cuda_mat;

/* The model's attention shape: grouped-query heads, RoPE over the first n_rot values of each
 * head (neox: pairs i, i + n_rot / 2; else 2i, 2i + 1), per-head RMSNorm of q and k before the
 * rotation (or after it), the softmax scale of q.k, and the cache's type (GM_TYPE_F32, F16). */
typedef struct gm_cuda_attn_shape {
    uint32_t n_embd, n_head, n_head_kv, head_dim, n_rot;
    bool neox, norm_after_rope;
    float eps, scale;
    uint32_t cache_type;
} gm_cuda_attn_shape;

/* One layer's weights in device memory: the projections (wq: n_head x head_dim rows of n_embd,
 * wk, wv: n_head_kv x head_dim rows, wo: n_embd rows of n_head x head_dim) and, each NULL when the
 * layer has none, their biases, the per-head norms' weights (head_dim floats) and the heads'
 * sink logits (n_head floats). */
typedef struct gm_cuda_attn_layer {
    gm_cuda_mat wq, wk, wv, wo;
    const float *bq, *bk, *bv, *bo, *q_norm, *k_norm, *sinks;
} gm_cuda_attn_layer;

/* Whether gm_cuda_attn_token takes this shape and these matrices (their types have a product,
 * the head dim and the rotation fit the kernels); why not in why (may be NULL). */
bool gm_cuda_attn_supports(const gm_cuda_attn_shape *sh, const gm_cuda_attn_layer *w, const char **why);

/* The scratch and stream of one token's attention, for contexts of up to max_ctx positions.
 * One owner thread. */
typedef struct gm_cuda_attn gm_cuda_attn;
int gm_cuda_attn_create(gm_cuda_attn **out, const gm_cuda_attn_shape *sh, uint32_t max_ctx, gm_err *err);
void gm_cuda_attn_free(gm_cuda_attn *a);
/* Layer w's attention of one token at position pos, and waits for it: x (host, n_embd floats, the
 * normalised residual), rope_cs (host, the position's n_rot / 2 cosines then sines) in; the
 * token's K and V rows cached into kc and vc (device, the layer's [n_head_kv][cap] rows of the
 * cache type, the token in row pos % cap) over the positions 0 .. pos, the output projection's
 * n_embd floats into out (host) and the token's cached rows (n_head_kv rows each) into k_rows and
 * v_rows (host), so that a cache on the host can hold what the device's holds. */
int gm_cuda_attn_token(gm_cuda_attn *a, const gm_cuda_attn_layer *w, void *kc, void *vc, uint32_t cap, uint32_t pos,
                       const float *rope_cs, const float *x, float *out, void *k_rows, void *v_rows, gm_err *err);

/* ---- a decode token through whole layers (decode.cu) --------------------------------------- */

/* A layer's weights after its attention's, in device memory: the norms before the attention and
 * before the FFN (n_embd floats each); the router (n_expert rows of n_embd, any type
 * gm_cuda_mv_supports; data NULL: a dense layer, no routed experts) and its biases (n_expert
 * floats, or NULL), the selection bias added to the probabilities to choose the experts (or
 * NULL), the layer's table of every expert's matrices (n_expert entries, device memory) and their
 * shape (dim n_embd); the shared expert, or a dense layer's FFN (shared.gate NULL: none), its shape
 * and the row of its sigmoid gate (1 x n_embd; data NULL: none, the expert's output added
 * whole), added after the routed experts as infer/moe.c adds it. */
typedef struct gm_cuda_moe_layer {
    const float *attn_norm, *ffn_norm;
    gm_cuda_mat router;
    const float *router_b, *sel_bias;
    const gm_cuda_expert *experts;
    gm_cuda_ffn_shape ffn;
    gm_cuda_expert shared;
    gm_cuda_ffn_shape shared_ffn;
    gm_cuda_mat shared_gate;
} gm_cuda_moe_layer;

/* What every layer of a token shares: n_layer layers; routing to k (<= 64) of n_expert (<= 1024)
 * experts by their softmax or sigmoid probabilities, renormalised over the k (norm_topk), times
 * scale; experts (routed, shared or dense) of up to max_ff rows (a multiple of 32); the RMSNorms'
 * eps; an output head of up to n_vocab rows; whether a token is replayed as a CUDA graph
 * (graph). */
typedef struct gm_cuda_dec_shape {
    uint32_t n_layer, n_expert, k;
    bool softmax, norm_topk;
    float scale, eps;
    uint64_t max_ff, n_vocab;
    bool graph;
} gm_cuda_dec_shape;

/* A decode token of a pre-norm model of attention and an FFN of routed experts, a shared expert
 * or both, or a dense one (x += attn(norm(x)); x += ffn(norm(x)) a layer, then the output norm and
 * head) run on the device with one upload and one download, nothing in between: the attention as
 * gm_cuda_attn_token computes it, the routing as infer/moe.c's (route_kernels.cuh), each expert as
 * gm_cuda_ffn_start computes it, their sum in ascending id order, then the shared expert's. It runs on a's stream with a's scratch (a outlives it). With sh->graph, the
 * first token's launches are captured as a CUDA graph (they read the position from device memory,
 * so that they do not change with it), and each later token whose layers, norm and head are the
 * same (the same pointers: the weights must not move) replays it in one launch; a token that
 * differs runs without it, and the graph is dropped. One owner thread. */
typedef struct gm_cuda_dec gm_cuda_dec;
int gm_cuda_dec_create(gm_cuda_dec **out, gm_cuda_attn *a, const gm_cuda_dec_shape *sh, gm_err *err);
void gm_cuda_dec_free(gm_cuda_dec *d);
/* Begins the token at pos: x its embedding (host, n_embd floats), rope_cs its position's n_rot / 2
 * cosines then sines (host). */
int gm_cuda_dec_begin(gm_cuda_dec *d, const float *x, const float *rope_cs, uint32_t pos, gm_err *err);
/* Queues layer l (0, 1, ... in turn) of the token at pos: its attention w over the cache kc, vc
 * of cap rows (as gm_cuda_attn_token), then its routed experts m. */
int gm_cuda_dec_layer(gm_cuda_dec *d, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m, void *kc,
                      void *vc, uint32_t cap, uint32_t pos, gm_err *err);
/* A layer whose routed experts are not all in VRAM, in two steps instead of gm_cuda_dec_layer
 * (a token of such layers runs without a graph: sh->graph false; m->experts is not read):
 * - gm_cuda_dec_route queues its attention and routing, copies table (host, the layer's n_expert
 *   entries as they are now; an expert VRAM lacks has no gate) up for the products of the chosen
 *   experts it holds, queues those, and waits for the routing only: gm_cuda_dec_xn (the FFN's
 *   input row), gm_cuda_dec_ids and gm_cuda_dec_weights of layer l hold it on return;
 * - the host then writes the rows of the other chosen experts into gm_cuda_dec_host_rows (pinned,
 *   k rows of n_embd floats in order of choice; free to write from gm_cuda_dec_route's return
 *   until gm_cuda_dec_rows), and gm_cuda_dec_rows (any: whether the host computed one) queues
 *   their copy up, the sum of all k in ascending id order and the shared expert's, and ends the
 *   layer without waiting. */
int gm_cuda_dec_route(gm_cuda_dec *d, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m,
                      const gm_cuda_expert *table, void *kc, void *vc, uint32_t cap, uint32_t pos, gm_err *err);
float *gm_cuda_dec_host_rows(gm_cuda_dec *d);
int gm_cuda_dec_rows(gm_cuda_dec *d, uint32_t l, const gm_cuda_moe_layer *m, bool any, gm_err *err);
/* Ends the token after its last layer: the residual normalised by out_norm, the head's logits
 * (head->n_rows floats) into logits (host; head or logits NULL: none), and waits for it all. Any
 * error of the queued work surfaces here. */
int gm_cuda_dec_end(gm_cuda_dec *d, const float *out_norm, const gm_cuda_mat *head, float *logits, gm_err *err);
/* The last token's, after its end (pinned host memory, valid until the next begin): the residual
 * and its normalised row (n_embd floats), layer l's cached K and V rows (n_head_kv rows each, as
 * gm_cuda_attn_token gives them), its k experts in order of choice and their weights. */
const float *gm_cuda_dec_x(const gm_cuda_dec *d);
const float *gm_cuda_dec_xn(const gm_cuda_dec *d);
const void *gm_cuda_dec_k_rows(const gm_cuda_dec *d, uint32_t l);
const void *gm_cuda_dec_v_rows(const gm_cuda_dec *d, uint32_t l);
const int32_t *gm_cuda_dec_ids(const gm_cuda_dec *d, uint32_t l);
const float *gm_cuda_dec_weights(const gm_cuda_dec *d, uint32_t l);
/* Whether d holds a token's graph now, and the tokens it replayed. */
bool gm_cuda_dec_graph(const gm_cuda_dec *d);
uint64_t gm_cuda_dec_replays(const gm_cuda_dec *d);

/* ---- a prompt's chunk through whole layers (prefill.cu) ------------------------------------ */

/* The chunk of up to max_tokens tokens of the model gm_cuda_dec_create takes (the same shape;
 * every layer's weights in device memory, the same structs), computed with every step over all
 * the chunk's tokens at once: the products as matrix-matrix products on the tensor cores (the
 * weights decoded to half precision by blocks.cuh's arithmetic, the activations rounded to half,
 * float32 sums; float32 weights, the routers, in float32), the causal attention over the cache,
 * the routing as a decode token's, the (token, expert) pairs grouped by expert on the device and
 * each expert's products over its pairs, their sums in ascending id order, then the shared
 * expert's. It runs on a's stream with a's scratch (a outlives it). Not bit for bit a decode
 * token's: the products round the activations to half where a decode token's quantize them to
 * 8 bits. One owner thread. */
typedef struct gm_cuda_pf gm_cuda_pf;
/* Whether the prompt's attention takes the shape (head dims that are whole warps up to
 * GM_CUDA_ATTN_MAX_HD, at most 32 query heads a kv head); why not in why. */
bool gm_cuda_pf_supports(const gm_cuda_attn_shape *sh, const char **why);
int gm_cuda_pf_create(gm_cuda_pf **out, gm_cuda_attn *a, const gm_cuda_dec_shape *sh, uint32_t max_tokens,
                      gm_err *err);
void gm_cuda_pf_free(gm_cuda_pf *p);
uint32_t gm_cuda_pf_max_tokens(const gm_cuda_pf *p);
/* Begins the chunk of n tokens at positions pos .. pos + n - 1: x their embeddings (host, n rows
 * of n_embd floats), rope_cs their rotations (host, n rows of n_rot / 2 cosines then sines). */
int gm_cuda_pf_begin(gm_cuda_pf *p, const float *x, const float *rope_cs, uint32_t pos, uint32_t n, gm_err *err);
/* Queues layer l (0, 1, ... in turn) of the chunk: its attention w over the cache kc, vc of cap
 * rows (rows pos .. pos + n - 1 written, no ring: pos + n <= cap), then its experts m. */
int gm_cuda_pf_layer(gm_cuda_pf *p, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m, void *kc,
                     void *vc, uint32_t cap, gm_err *err);
/* The same layer in steps, for a layer whose routed experts are not all in VRAM (the engine
 * copies the others in from host memory between the steps; m->experts is not read):
 * - gm_cuda_pf_route queues its attention and routing and waits for them: *count says how many
 *   of the chunk's (token, expert) pairs each expert has (host, n_expert entries, valid until the
 *   next call on p);
 * - gm_cuda_pf_upload queues a copy from host memory to device memory on the chunk's stream,
 *   after what is queued and before what follows (rows of width bytes, src's a spitch apart,
 *   dst's a dpitch apart; src stays as it is until the chunk's end);
 * - gm_cuda_pf_experts queues the products over their pairs of the experts whose entry of table
 *   (pageable host memory, n_expert entries, copied before it returns) is not NULL, the others
 *   left for a later call (an expert named twice is computed twice); the call with last adds
 *   every expert's output in ascending id order, then the shared expert's, and ends the layer. */
int gm_cuda_pf_route(gm_cuda_pf *p, uint32_t l, const gm_cuda_attn_layer *w, const gm_cuda_moe_layer *m, void *kc,
                     void *vc, uint32_t cap, const uint32_t **count, gm_err *err);
int gm_cuda_pf_upload(gm_cuda_pf *p, void *dst, uint64_t dpitch, const void *src, uint64_t spitch, uint64_t width,
                      uint64_t rows, gm_err *err);
/* Page-locked host buffers for those copies, so that they run at the bus's speed instead of
 * through the driver's own buffer (a copy from pageable memory): gm_cuda_pf_bounce hands out the
 * next of GM_CUDA_PF_BOUNCE buffers of GM_CUDA_PF_BOUNCE_BYTES (made at the first call), once the
 * copies queued from it before are done; the caller fills it, queues copies from it
 * (gm_cuda_pf_upload) and calls gm_cuda_pf_bounce_sent, which marks them. GM_ENOMEM when the host
 * cannot page-lock them (then, and after, the caller copies from its own memory). */
#define GM_CUDA_PF_BOUNCE 4
#define GM_CUDA_PF_BOUNCE_BYTES ((uint64_t)64 << 20)
int gm_cuda_pf_bounce(gm_cuda_pf *p, uint8_t **buf, uint64_t *bytes, gm_err *err);
int gm_cuda_pf_bounce_sent(gm_cuda_pf *p, gm_err *err);
/* Queues a copy of bytes from device memory src to device memory dst on the chunk's stream,
 * after what is queued and before what follows (between the chunk's begin and its end). */
int gm_cuda_pf_copy(gm_cuda_pf *p, void *dst, const void *src, uint64_t bytes, gm_err *err);
int gm_cuda_pf_experts(gm_cuda_pf *p, uint32_t l, const gm_cuda_moe_layer *m, const gm_cuda_expert *table, bool last,
                       gm_err *err);
/* Ends the chunk after its last layer: the residual normalised by out_norm, the last token's
 * logits (head->n_rows floats; all: every token's, n rows of them) into logits (host; head or
 * logits NULL: none), and waits for it all. Any error of the queued work surfaces here. */
int gm_cuda_pf_end(gm_cuda_pf *p, const float *out_norm, const gm_cuda_mat *head, float *logits, bool all,
                   gm_err *err);
/* The last chunk's, after its end (pinned host memory, valid until the next begin): the residual
 * rows (n rows of n_embd floats), the last token's normalised row. */
const float *gm_cuda_pf_x(const gm_cuda_pf *p);
const float *gm_cuda_pf_xn(const gm_cuda_pf *p);

/* Y (n rows of n_rows) = X (n rows of n_cols floats) W^T by a prompt's products (mm_tc on the
 * tensor cores, X and W as half, float32 sums; mm_f32 for F32), from and to host memory: for
 * checks. */
int gm_cuda_mm_host(uint32_t type, const void *w, uint64_t n_rows, uint64_t n_cols, const float *x, uint32_t n,
                    float *y, gm_err *err);

/* Whether gm_cuda_matvec_q8 takes a matrix of type with rows of n_cols values (a kernel, whole
 * blocks of 32, rows aligned for its loads when their start is). */
bool gm_cuda_matvec_q8_fits(uint32_t type, uint64_t n_cols);

/* ---- a matrix in device memory times a vector from host memory (attn.cu) ------------------- */

/* Scratch, pinned buffers and a stream for y = m x with x and y in host memory, for matrices of up
 * to max_rows x max_cols. One owner thread. */
typedef struct gm_cuda_mv gm_cuda_mv;
int gm_cuda_mv_create(gm_cuda_mv **out, uint64_t max_rows, uint64_t max_cols, gm_err *err);
void gm_cuda_mv_free(gm_cuda_mv *v);
/* Whether gm_cuda_mv_run takes m (its type has a product, whole blocks of 32 values a row). */
bool gm_cuda_mv_supports(const gm_cuda_mat *m);
/* y (host, m->n_rows floats) = m x (x: host, m->n_cols floats), the 8-bit product where the type
 * has one; waits for it. */
int gm_cuda_mv_run(gm_cuda_mv *v, const gm_cuda_mat *m, const float *x, float *y, gm_err *err);

/* ---- device memory for weights (ffn.cu) ---------------------------------------------------- */

/* One allocation of device memory: want_bytes, or, when the device cannot give that much, the
 * most it gives in steps of an eighth less, down to min_bytes (GM_ENOMEM below that).
 * gm_cuda_slab_bytes says what it holds. */
typedef struct gm_cuda_slab gm_cuda_slab;
int gm_cuda_slab_create(gm_cuda_slab **out, uint64_t want_bytes, uint64_t min_bytes, gm_err *err);
void gm_cuda_slab_free(gm_cuda_slab *s);
uint64_t gm_cuda_slab_bytes(const gm_cuda_slab *s);
/* The slab's first byte (device memory, 256-byte aligned). */
uint8_t *gm_cuda_slab_base(gm_cuda_slab *s);
/* Page-locks bytes of host memory from p on (a file's read-only mapping may be given) so that
 * copies from it run at the bus's speed without a bounce through the driver's buffer; undone by
 * gm_cuda_host_unpin(p). GM_EUNSUPPORTED (saying why) where the driver refuses. */
int gm_cuda_host_pin(const void *p, uint64_t bytes, gm_err *err);
void gm_cuda_host_unpin(const void *p);
/* Copies bytes from host memory src to device memory dst and waits for it. */
int gm_cuda_upload(void *dst, const void *src, uint64_t bytes, gm_err *err);
/* Copies bytes from device memory src to host memory dst and waits for it. */
int gm_cuda_download(void *dst, const void *src, uint64_t bytes, gm_err *err);

#ifdef __cplusplus
}
#endif

#endif
