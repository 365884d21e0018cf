/* qwen4exp's n-gram hash embedding (PLE): on one layer, before its attention's mixing, every
 * residual stream gains a gated value and a causal convolution of rows gathered from a lookup
 * table by hashes of the token and the ones before it.
 *
 * For the token at position P (llama.cpp's src/models/qwen4exp.cpp, llm_graph_input_ple and
 * build_ple, the reference), with n-grams of N, the predecessors t_1.. t_{N-1} (a position
 * before the first, or one past a ple.eos_token_id, reads as that token):
 *   mixed_n = (t_0 m_0) ^ (t_1 m_1) ^ ... ^ (t_{n-1} m_{n-1})        n = 2..N, 64-bit wrapping
 *   row_h   = mixed_n % vocab_h + offset_h                          heads_per_ngram heads per n
 *   e       = the rows of per_layer_token_embd, head after head      n_embd values
 *   key_j   = rms_norm((ple_key e)_j) * norm_key_j                   per stream j
 *   query_j = rms_norm(x_j) * norm_query_j
 *   s_j     = (key_j . query_j) / sqrt(n_embd);  gate_j = sigmoid(sgn(s_j) sqrt(max(|s_j|, 1e-6)))
 *   g_j     = (ple_value e) gate_j
 *   c_j     = rms_norm(g_j) * norm_conv_j                            the convolution's input
 *   x_j    += g_j + silu(sum over k of w[k] c_j at P - (K - 1 - k) N)  a depthwise kernel of K
 * The convolution's history (its last (K - 1) N inputs) is a state of the session, as the
 * Gated DeltaNet's is; the tokens are kept per position so that a chunk finds its predecessors.
 * Rows are read from the table by row, never whole: when the experts stream or the in-memory load
 * left the table on disk, straight from the file (stream/table.h: O_DIRECT gathers, all of a
 * gather's reads in flight), else from the file's mapping. */
#include <math.h>
#include <string.h>

#include "infer/recipe.h"
#include "kernels/dequant.h"
#include "stream/table.h"

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static float silu(float x) { return x / (1.0f + expf(-x)); }

/* Dequantizes n table rows at raw (row_bytes apart) into the head slots dst[i] (HD floats each). */
static int unpack(const gm_engine *e, const uint8_t *raw, float *const *dst, uint32_t n, gm_err *err)
{
    for (uint32_t i = 0; i < n; i++)
        if (gm_dequant_row(e->ple_table->type, raw + (uint64_t)i * e->ple_row_bytes, dst[i], e->desc.hp.ple_head_dim) != 0)
            return gm_err_set(err, GM_EUNSUPPORTED, "per_layer_token_embd: type %s cannot be read",
                              gm_type_name(e->ple_table->type));
    return 0;
}

/* The rows of token t of the chunk (position pos + t), head after head, into rows[ple_n_heads]. */
static void rows_of(const gm_fwd *s, uint32_t t, int64_t *rows)
{
    const gm_hparams *hp = &s->e->desc.hp;
    const uint32_t N = hp->ple_ngram, P = s->pos + t;
    const int64_t eos = hp->ple_eos;
    int64_t ctx[GM_MAX_PLE_NGRAM];
    ctx[0] = s->tok_hist[P];
    bool cut = false;
    for (uint32_t k = 1; k < N; k++) {
        const int64_t tk = cut || P < k ? -1 : s->tok_hist[P - k];
        cut = cut || tk < 0 || tk == eos;
        ctx[k] = cut ? eos : tk;
    }
    for (uint32_t len = 2; len <= N; len++) {
        uint64_t mixed = (uint64_t)ctx[0] * hp->ple_mult[0];
        for (uint32_t j = 1; j < len; j++)
            mixed ^= (uint64_t)ctx[j] * hp->ple_mult[j];
        for (uint32_t g = 0; g < hp->ple_per_ngram; g++) {
            const uint32_t h = (len - 2) * hp->ple_per_ngram + g;
            rows[h] = (int64_t)(mixed % hp->ple_vocab[h] + hp->ple_offset[h]);
        }
    }
}

int gm_ple_start(gm_fwd *s, uint32_t n, gm_err *err)
{
    const gm_engine *e = s->e;
    const uint32_t NH = e->desc.hp.ple_n_heads;
    s->ple_started = false;
    if (!e->ple_rows || (uint64_t)n * NH > GM_PLE_GATHER)
        return 0;
    int64_t want[GM_PLE_GATHER];
    for (uint32_t t = 0; t < n; t++)
        rows_of(s, t, want + (uint64_t)t * NH);
    int rc = gm_table_start(e->ple_rows, want, n * NH, err);
    s->ple_started = rc == 0;
    return rc;
}

/* The chunk's gathered rows into emb ([n][n_embd]): the gather gm_ple_start began, or from the
 * file in gathers of GM_PLE_GATHER rows when the table is read from it (e->ple_rows), else from
 * the mapping. */
static int gather(gm_fwd *s, uint32_t n, float *emb, gm_err *err)
{
    const gm_engine *e = s->e;
    const gm_hparams *hp = &e->desc.hp;
    const uint32_t HD = hp->ple_head_dim, E = e->n_embd, NH = hp->ple_n_heads;
    const uint8_t *table = gm_engine_tensor_data(e, e->ple_table);
    int64_t rows[GM_MAX_PLE_HEADS], want[GM_PLE_GATHER];
    float *dst[GM_PLE_GATHER];
    uint32_t queued = 0;
    int rc;
    if (s->ple_started) { /* its rows are the chunk's, token after token */
        s->ple_started = false;
        for (uint32_t i = 0; i < n * NH; i++)
            dst[i] = emb + (uint64_t)(i / NH) * E + (uint64_t)(i % NH) * HD;
        if ((rc = gm_table_finish(e->ple_rows, s->ple_raw, err)))
            return rc;
        return unpack(e, s->ple_raw, dst, n * NH, err);
    }
    for (uint32_t t = 0; t < n; t++) {
        rows_of(s, t, rows);
        for (uint32_t h = 0; h < NH; h++) {
            float *out = emb + (uint64_t)t * E + (uint64_t)h * HD;
            if (!e->ple_rows) {
                if ((rc = unpack(e, table + (uint64_t)rows[h] * e->ple_row_bytes, &out, 1, err)))
                    return rc;
                continue;
            }
            want[queued] = rows[h];
            dst[queued++] = out;
            if (queued == GM_PLE_GATHER) {
                if ((rc = gm_table_gather(e->ple_rows, want, queued, s->ple_raw, err)) ||
                    (rc = unpack(e, s->ple_raw, dst, queued, err)))
                    return rc;
                queued = 0;
            }
        }
    }
    if (queued && ((rc = gm_table_gather(e->ple_rows, want, queued, s->ple_raw, err)) ||
                   (rc = unpack(e, s->ple_raw, dst, queued, err))))
        return rc;
    return 0;
}

int gm_ple_block(gm_fwd *s, uint32_t l, uint32_t n, gm_err *err)
{
    const gm_engine *e = s->e;
    const gm_hparams *hp = &e->desc.hp;
    const gm_layer_w *w = &e->layers[l];
    const uint32_t E = e->n_embd, H = e->n_hc, K = hp->ple_conv, dil = hp->ple_ngram, hist = e->ple_hist;
    const uint64_t W = (uint64_t)H * E, T = s->max_chunk;
    float *emb = s->ple_buf, *val = emb + T * E, *key = val + T * E, *rows = s->ple_conv_rows;
    int rc;
    const uint64_t t0 = gm_now_ns();
    if ((rc = gather(s, n, emb, err)))
        return rc;
    gm_engine *em = s->e;
    const uint64_t dt = gm_now_ns() - t0;
    if (n == 1) {
        em->ple_decode_calls++;
        em->ple_decode_ns += dt;
        em->ple_decode_max_ns = dt > em->ple_decode_max_ns ? dt : em->ple_decode_max_ns;
    } else {
        em->ple_prefill_ns += dt;
    }
    if ( (rc = gm_project(s, &w->ple_key, emb, E, n, key, W, err)) ||
        (rc = gm_project(s, &w->ple_value, emb, E, n, val, E, err)))
        return rc;
    const float inv_sqrt = 1.0f / sqrtf((float)E);
    float *qn = s->tmp; /* one stream's normalised query */
    for (uint32_t t = 0; t < n; t++) {
        for (uint32_t j = 0; j < H; j++) {
            float *kj = key + t * W + (uint64_t)j * E;
            const uint64_t nj = (uint64_t)j * E;
            gm_rms_norm(kj, w->ple_norm_key + nj, kj, 1, E, e->rms_eps);
            gm_rms_norm(s->x + t * W + nj, w->ple_norm_query + nj, qn, 1, E, e->rms_eps);
            double dot = 0.0; /* float products summed in double, as ggml's sum_rows */
            for (uint32_t d = 0; d < E; d++)
                dot += (double)(kj[d] * qn[d]);
            const float sc = (float)dot * inv_sqrt, a = fabsf(sc);
            const float sgn = sc > 0.0f ? 1.0f : sc < 0.0f ? -1.0f : 0.0f;
            const float gate = sigmoid(sgn * sqrtf(a > 1e-6f ? a : 1e-6f));
            const float *v = val + (uint64_t)t * E;
            for (uint32_t d = 0; d < E; d++) /* key_j is spent: it holds g_j from here */
                kj[d] = v[d] * gate;
            gm_rms_norm(kj, w->ple_norm_conv + nj, rows + (hist + t) * W + nj, 1, E, e->rms_eps);
        }
    }
    for (uint32_t t = 0; t < n; t++) {
        float *x = s->x + t * W;
        const float *g = key + t * W;
        for (uint64_t c = 0; c < W; c++) {
            float acc = 0.0f;
            for (uint32_t k = 0; k < K; k++) {
                const float term = rows[(hist + t - (uint64_t)(K - 1 - k) * dil) * W + c] * w->ple_kernel[c * K + k];
                acc = k == 0 ? term : acc + term;
            }
            x[c] += g[c] + silu(acc);
        }
    }
    memmove(rows, rows + (uint64_t)n * W, (uint64_t)hist * W * sizeof(float)); /* the history for the next chunk */
    return 0;
}
