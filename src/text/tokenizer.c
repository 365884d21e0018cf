/* text/tokenizer: loading a vocabulary from GGUF metadata, special tokens, end of generation,
 * and the encode/decode API (see tokenizer.h). The algorithms live in bpe.c, spm.c, pretok.c. */
#include <float.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "text/text_impl.h"

/* ---- scratch ---- */

void gm_scratch_free(gm_scratch *s)
{
    free(s->buf);
    free(s->sym);
    free(s->prev);
    free(s->next);
    free(s->start);
    free(s->len);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

static int grow(void **p, size_t *cap, size_t n, size_t elem, gm_err *err)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < n) {
        if (c > SIZE_MAX / 2 / elem)
            return gm_err_set(err, GM_ENOMEM, "tokenizer: scratch of %zu elements too large", n);
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q)
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory (%zu bytes of scratch)", c * elem);
    *p = q;
    *cap = c;
    return 0;
}

int gm_scratch_buf(gm_scratch *s, size_t n, gm_err *err)
{
    void *p = s->buf;
    int rc = grow(&p, &s->buf_cap, n, 1, err);
    s->buf = p;
    return rc;
}

int gm_scratch_syms(gm_scratch *s, size_t n, gm_err *err)
{
    if (n <= s->sym_cap)
        return 0;
    size_t c = s->sym_cap;
    void *p;
    int rc;
    /* Each array grows to the same capacity; c is recomputed from the first. */
    p = s->sym;
    if ((rc = grow(&p, &c, n, sizeof(int32_t), err)))
        return rc;
    s->sym = p;
    size_t c2;
#define GROW_TO(field, T)                                                  \
    do {                                                                   \
        c2 = s->sym_cap;                                                   \
        p = s->field;                                                      \
        if ((rc = grow(&p, &c2, c, sizeof(T), err)))                       \
            return rc;                                                     \
        s->field = p;                                                      \
    } while (0)
    GROW_TO(prev, int32_t);
    GROW_TO(next, int32_t);
    GROW_TO(start, uint32_t);
    GROW_TO(len, uint32_t);
#undef GROW_TO
    s->sym_cap = c;
    return 0;
}

int gm_scratch_heap(gm_scratch *s, size_t n, size_t elem, gm_err *err)
{
    if (s->heap_elem != elem) {
        free(s->heap);
        s->heap = NULL;
        s->heap_cap = 0;
        s->heap_elem = elem;
    }
    return grow(&s->heap, &s->heap_cap, n, elem, err);
}

/* ---- loading ---- */

static const char *const k_key_model = "tokenizer.ggml.model";
static const char *const k_key_pre = "tokenizer.ggml.pre";
static const char *const k_key_tokens = "tokenizer.ggml.tokens";
static const char *const k_key_types = "tokenizer.ggml.token_type";
static const char *const k_key_scores = "tokenizer.ggml.scores";
static const char *const k_key_merges = "tokenizer.ggml.merges";

/* Texts that mark the end of a turn even when the metadata does not say so (as llama.cpp
 * recognises them): chat formats of Qwen/ChatML, Llama 3, Phi, gpt-oss (harmony), Gemma,
 * GPT-2/NeoX, Llama 2, Granite, CodeLlama, Kimi-K2, SmolDocling, DeepSeek, MiniMax. */
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
};

/* Candidates for EOT when tokenizer.ggml.eot_token_id is absent. */
static const char *const k_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "<end_of_utterance>",
};

static int32_t find_text(const gm_tokenizer *t, const char *s)
{
    int32_t e = gm_strmap_find(&t->map, s, strlen(s));
    return e >= 0 ? t->map.ent[e].value : -1;
}

/* A special-token id from metadata; -1 when absent or out of range (ignored with a warning). */
static int32_t get_id(const gm_gguf *g, const char *key, uint32_t n_vocab, int32_t dflt)
{
    int64_t v;
    int rc = gm_gguf_get_i64(g, key, &v, NULL);
    if (rc == GM_ENOTFOUND)
        return dflt;
    if (rc != 0 || v < 0 || v >= (int64_t)n_vocab) {
        gm_log(GM_LOG_WARN, "%s: %s is not a token id of this vocabulary; ignored",
               gm_gguf_path(g), key);
        return -1;
    }
    return (int32_t)v;
}

static bool get_bool(const gm_gguf *g, const char *key, bool dflt)
{
    bool v;
    return gm_gguf_get_bool(g, key, &v, NULL) == 0 ? v : dflt;
}

static void set_control(gm_tokenizer *t, int32_t id)
{
    if (id >= 0 && t->type[id] != GM_TOKEN_TYPE_CONTROL)
        t->type[id] = GM_TOKEN_TYPE_CONTROL;
}

/* End-of-generation set and the type fix-ups that go with it. */
static void build_eog(gm_tokenizer *t, const gm_gguf *g)
{
    uint32_t n = t->n_vocab;
    gm_tokenizer_info *in = &t->info;

    if (in->eot < 0) {
        for (size_t k = 0; k < sizeof k_eot_texts / sizeof *k_eot_texts && in->eot < 0; k++)
            in->eot = find_text(t, k_eot_texts[k]);
        set_control(t, in->eot);
    }
    if (in->eom < 0) {
        in->eom = find_text(t, "<|eom_id|>");
        set_control(t, in->eom);
    }

    static const char *const fim_keys[] = {"tokenizer.ggml.fim_pad_token_id",
                                           "tokenizer.ggml.fim_rep_token_id",
                                           "tokenizer.ggml.fim_sep_token_id"};
    /* without the key, the token is found by its text (as llama.cpp does: Qwen's FIM tokens
     * end generation whether or not the converter named them) */
    static const char *const fim_texts[3][6] = {
        {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL},
        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
        {"<|file_sep|>", NULL}};
    for (size_t k = 0; k < 3; k++) {
        int32_t id = get_id(g, fim_keys[k], n, -1);
        for (size_t j = 0; id < 0 && fim_texts[k][j]; j++)
            if ((id = find_text(t, fim_texts[k][j])) >= 0)
                set_control(t, id);
        if (id >= 0)
            t->eog[id] = 1;
    }
    for (size_t k = 0; k < sizeof k_eog_texts / sizeof *k_eog_texts; k++) {
        int32_t id = find_text(t, k_eog_texts[k]);
        if (id >= 0) {
            t->eog[id] = 1;
            set_control(t, id);
        }
    }
    if (in->eos >= 0)
        t->eog[in->eos] = 1;
    if (in->eot >= 0)
        t->eog[in->eot] = 1;
    if (in->eom >= 0)
        t->eog[in->eom] = 1;

    /* gpt-oss (harmony) and Solar-Open: "<|end|>" ends a message, not the generation, when the
     * vocabulary has "<|return|>" and "<|call|>" (or "<|calls|>" and "<|flush|>"). */
    int32_t ret = find_text(t, "<|return|>"), call = find_text(t, "<|call|>");
    int32_t calls = find_text(t, "<|calls|>"), flush = find_text(t, "<|flush|>");
    int32_t end = find_text(t, "<|end|>");
    if (end >= 0 && t->eog[end] &&
        ((ret >= 0 && t->eog[ret] && call >= 0 && t->eog[call]) ||
         (calls >= 0 && t->eog[calls] && flush >= 0 && t->eog[flush]))) {
        t->eog[end] = 0;
        t->type[end] = GM_TOKEN_TYPE_USER_DEFINED;
    }
    /* Gemma 4: "</s>" is an ordinary token next to "<|tool_response>". */
    int32_t tool = find_text(t, "<|tool_response>"), s = find_text(t, "</s>");
    if (tool >= 0 && s >= 0 && t->eog[tool] && t->eog[s] && s != in->eos) {
        t->eog[s] = 0;
        t->type[s] = GM_TOKEN_TYPE_NORMAL;
    }
    /* gpt-oss: these structure tokens are always written out. */
    static const char *const shown[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t k = 0; k < 4; k++) {
        int32_t id = find_text(t, shown[k]);
        if (id >= 0)
            t->type[id] = GM_TOKEN_TYPE_USER_DEFINED;
    }
    in->n_eog = 0;
    for (uint32_t i = 0; i < n; i++)
        in->n_eog += t->eog[i];
}

/* Decoded bytes of token id into out (room for the token's text length); returns the count. */
static size_t make_piece(const gm_tokenizer *t, int32_t id, char *out)
{
    size_t n;
    const uint8_t *s = (const uint8_t *)gm_tokenizer_token_text(t, id, &n);
    uint8_t ty = t->type[id];
    if (ty == GM_TOKEN_TYPE_UNUSED)
        return 0;
    if (ty == GM_TOKEN_TYPE_CONTROL || ty == GM_TOKEN_TYPE_UNKNOWN ||
        ty == GM_TOKEN_TYPE_USER_DEFINED) {
        memcpy(out, s, n);
        return n;
    }
    if (ty == GM_TOKEN_TYPE_BYTE) {
        /* "<0xXX>" */
        static const char hex[] = "0123456789abcdef";
        if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>') {
            const char *hi = memchr(hex, s[3] | 0x20, 16), *lo = memchr(hex, s[4] | 0x20, 16);
            if (hi && lo && s[3] && s[4]) {
                out[0] = (char)(((hi - hex) << 4) | (lo - hex));
                return 1;
            }
        }
        memcpy(out, s, n);
        return n;
    }
    size_t k = 0;
    if (t->info.kind == GM_TOKENIZER_KIND_SPM) {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) {
                out[k++] = ' ';
                i += 3;
            } else {
                out[k++] = (char)s[i++];
            }
        }
        return k;
    }
    /* byte-level BPE: each character stands for one byte; others are copied as they are */
    for (size_t i = 0; i < n;) {
        size_t cl;
        if (gm_utf8_classify(s + i, n - i, &cl) == GM_UTF8_OK) {
            int b = gm_bytelevel_byte(gm_utf8_decode(s + i, cl));
            if (b >= 0) {
                out[k++] = (char)b;
            } else {
                memcpy(out + k, s + i, cl);
                k += cl;
            }
            i += cl;
        } else {
            out[k++] = (char)s[i++];
        }
    }
    return k;
}

typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int cmp_special(const void *a, const void *b)
{
    const len_id *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int build_special(gm_tokenizer *t, gm_err *err)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->type[i];
        if ((ty == GM_TOKEN_TYPE_CONTROL || ty == GM_TOKEN_TYPE_UNKNOWN ||
             ty == GM_TOKEN_TYPE_USER_DEFINED) &&
            t->map.ent[t->tok_ent[i]].len > 0)
            n++;
    }
    t->n_special = 0;
    if (n == 0)
        return 0;
    len_id *v = malloc((size_t)n * sizeof *v);
    t->special = malloc((size_t)n * sizeof *t->special);
    if (!v || !t->special) {
        free(v);
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for special tokens");
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->type[i];
        uint32_t len = t->map.ent[t->tok_ent[i]].len;
        if ((ty == GM_TOKEN_TYPE_CONTROL || ty == GM_TOKEN_TYPE_UNKNOWN ||
             ty == GM_TOKEN_TYPE_USER_DEFINED) && len > 0) {
            v[k].len = len;
            v[k].id = (int32_t)i;
            k++;
        }
    }
    qsort(v, n, sizeof *v, cmp_special);
    for (uint32_t i = 0; i < n; i++)
        t->special[i] = v[i].id;
    t->n_special = n;
    free(v);
    return 0;
}

static int build_pieces(gm_tokenizer *t, gm_err *err)
{
    size_t total = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        total += t->map.ent[t->tok_ent[i]].len;
    t->piece_arena = malloc(total ? total : 1);
    t->piece_off = malloc((size_t)t->n_vocab * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)t->n_vocab * sizeof *t->piece_len);
    if (!t->piece_arena || !t->piece_off || !t->piece_len)
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for decoded tokens");
    size_t off = 0, max = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        size_t k = make_piece(t, (int32_t)i, t->piece_arena + off);
        t->piece_off[i] = off;
        t->piece_len[i] = (uint32_t)k;
        off += k;
        if (k > max)
            max = k;
    }
    t->info.max_piece_bytes = max;
    return 0;
}

static int load_merges(gm_tokenizer *t, const gm_gguf *g, gm_err *err)
{
    const char *path = gm_gguf_path(g);
    gm_gguf_arr a;
    int rc = gm_gguf_get_arr(g, k_key_merges, &a, NULL);
    if (rc == GM_ENOTFOUND)
        return gm_err_set(err, GM_ENOTFOUND, "%s: BPE vocabulary without %s", path, k_key_merges);
    if (rc || a.elem_type != GM_GGUF_STRING)
        return gm_err_set(err, GM_EFORMAT, "%s: %s is not an array of strings", path, k_key_merges);
    if (a.n > INT32_MAX / 4)
        return gm_err_set(err, GM_EFORMAT, "%s: %s has %llu entries, too many", path,
                          k_key_merges, (unsigned long long)a.n);
    if ((rc = gm_mergemap_init(&t->merges, (uint32_t)a.n, err)))
        return rc;
    char *cat = NULL;
    size_t cat_cap = 0;
    for (uint64_t i = 0; i < a.n; i++) {
        gm_gguf_str s;
        if (gm_gguf_arr_str(&a, i, &s) != 0) {
            free(cat);
            return gm_err_set(err, GM_EFORMAT, "%s: %s[%llu] is unreadable", path, k_key_merges,
                              (unsigned long long)i);
        }
        /* "left right": split at the first space after the first byte */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp || (uint64_t)(sp - s.ptr) + 1 >= s.len)
            continue; /* malformed: the rank is used up, the merge never applies */
        size_t ll = (size_t)(sp - s.ptr), rl = s.len - ll - 1;
        int32_t l, r, res;
        if ((rc = gm_strmap_intern(&t->map, s.ptr, ll, &l, err)) ||
            (rc = gm_strmap_intern(&t->map, sp + 1, rl, &r, err))) {
            free(cat);
            return rc;
        }
        if (ll + rl > cat_cap) {
            size_t c2 = (ll + rl) * 2;
            char *c = realloc(cat, c2);
            if (!c) {
                free(cat);
                return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory reading merges");
            }
            cat = c;
            cat_cap = c2;
        }
        memcpy(cat, s.ptr, ll);
        memcpy(cat + ll, sp + 1, rl);
        if ((rc = gm_strmap_intern(&t->map, cat, ll + rl, &res, err)) ||
            (rc = gm_mergemap_add(&t->merges, l, r, (int32_t)i, res, err))) {
            free(cat);
            return rc;
        }
    }
    free(cat);
    t->info.n_merges = t->merges.n;
    return 0;
}

static int load(gm_tokenizer *t, const gm_gguf *g, gm_err *err)
{
    const char *path = gm_gguf_path(g);
    gm_tokenizer_info *in = &t->info;
    int rc;

    gm_gguf_str model;
    rc = gm_gguf_get_str(g, k_key_model, &model, NULL);
    if (rc == GM_ENOTFOUND)
        return gm_err_set(err, GM_ENOTFOUND, "%s: no vocabulary (%s is absent)", path, k_key_model);
    if (rc)
        return gm_err_set(err, GM_EFORMAT, "%s: %s is not a string", path, k_key_model);
    if (gm_gguf_str_eq(model, "gpt2"))
        in->kind = GM_TOKENIZER_KIND_BPE;
    else if (gm_gguf_str_eq(model, "llama"))
        in->kind = GM_TOKENIZER_KIND_SPM;
    else
        return gm_err_set(err, GM_EUNSUPPORTED, "%s: tokenizer model '%.*s' is not supported "
                          "(only gpt2 and llama)", path, (int)(model.len > 32 ? 32 : model.len),
                          model.ptr);
    snprintf(t->model, sizeof t->model, "%.*s", (int)model.len, model.ptr);
    in->model = t->model;

    gm_gguf_arr toks;
    rc = gm_gguf_get_arr(g, k_key_tokens, &toks, NULL);
    if (rc == GM_ENOTFOUND)
        return gm_err_set(err, GM_ENOTFOUND, "%s: no vocabulary (%s is absent)", path, k_key_tokens);
    if (rc || toks.elem_type != GM_GGUF_STRING)
        return gm_err_set(err, GM_EFORMAT, "%s: %s is not an array of strings", path, k_key_tokens);
    if (toks.n == 0 || toks.n > INT32_MAX / 4)
        return gm_err_set(err, GM_EFORMAT, "%s: %s has %llu tokens", path, k_key_tokens,
                          (unsigned long long)toks.n);
    uint32_t n = (uint32_t)toks.n;
    t->n_vocab = in->n_vocab = n;

    t->tok_ent = malloc((size_t)n * sizeof *t->tok_ent);
    t->type = malloc(n);
    t->eog = calloc(n, 1);
    if (!t->tok_ent || !t->type || !t->eog)
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for %u tokens", n);

    gm_gguf_arr merges_arr;
    uint64_t n_merges = gm_gguf_get_arr(g, k_key_merges, &merges_arr, NULL) == 0 ? merges_arr.n : 0;
    if (n_merges > INT32_MAX / 4)
        n_merges = 0; /* load_merges reports it */
    if ((rc = gm_strmap_init(&t->map, (uint32_t)(n + 2 * n_merges + 256), err)))
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        gm_gguf_str s;
        if (gm_gguf_arr_str(&toks, i, &s) != 0 || s.len > UINT32_MAX)
            return gm_err_set(err, GM_EFORMAT, "%s: %s[%u] is unreadable", path, k_key_tokens, i);
        int32_t e;
        if ((rc = gm_strmap_intern(&t->map, s.ptr, s.len, &e, err)))
            return rc;
        t->tok_ent[i] = e;
        if (s.len > t->max_text_len)
            t->max_text_len = s.len;
        if (t->map.ent[e].value < 0 && s.len > 0)
            t->map.ent[e].value = (int32_t)i; /* a duplicate text keeps its first id */
    }

    gm_gguf_arr types;
    rc = gm_gguf_get_arr(g, k_key_types, &types, NULL);
    if (rc == GM_ENOTFOUND) {
        memset(t->type, GM_TOKEN_TYPE_NORMAL, n);
    } else {
        if (rc || types.n < n)
            return gm_err_set(err, GM_EFORMAT, "%s: %s is not an array of %u integers", path,
                              k_key_types, n);
        for (uint32_t i = 0; i < n; i++) {
            int64_t v;
            if (gm_gguf_arr_i64(&types, i, &v) != 0)
                return gm_err_set(err, GM_EFORMAT, "%s: %s is not an array of integers", path,
                                  k_key_types);
            t->type[i] = (v >= GM_TOKEN_TYPE_NORMAL && v <= GM_TOKEN_TYPE_BYTE)
                             ? (uint8_t)v : (uint8_t)GM_TOKEN_TYPE_UNDEFINED;
        }
    }

    if (in->kind == GM_TOKENIZER_KIND_SPM) {
        t->score = calloc(n, sizeof *t->score);
        if (!t->score)
            return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for %u scores", n);
        gm_gguf_arr sc;
        rc = gm_gguf_get_arr(g, k_key_scores, &sc, NULL);
        if (rc != GM_ENOTFOUND) {
            if (rc || sc.n < n)
                return gm_err_set(err, GM_EFORMAT, "%s: %s is not an array of %u numbers", path,
                                  k_key_scores, n);
            for (uint32_t i = 0; i < n; i++) {
                double v;
                if (gm_gguf_arr_f64(&sc, i, &v) != 0)
                    return gm_err_set(err, GM_EFORMAT, "%s: %s is not an array of numbers", path,
                                      k_key_scores);
                if (isnan(v))
                    v = -FLT_MAX;
                t->score[i] = v > FLT_MAX ? FLT_MAX : v < -FLT_MAX ? -FLT_MAX : (float)v;
            }
        }
        for (int b = 0; b < 256; b++) {
            char hx[8];
            snprintf(hx, sizeof hx, "<0x%02X>", b);
            int32_t id = find_text(t, hx);
            if (id < 0) {
                char c = (char)b;
                int32_t e = gm_strmap_find(&t->map, &c, 1);
                id = e >= 0 ? t->map.ent[e].value : -1;
            }
            t->byte_tok[b] = id;
        }
        in->pre = "default";
        snprintf(t->pre_name, sizeof t->pre_name, "default");
    } else {
        gm_gguf_str pre;
        rc = gm_gguf_get_str(g, k_key_pre, &pre, NULL);
        if (rc == GM_ENOTFOUND) {
            pre.ptr = "default";
            pre.len = 7;
        } else if (rc) {
            return gm_err_set(err, GM_EFORMAT, "%s: %s is not a string", path, k_key_pre);
        }
        if ((rc = gm_pretok_init(&t->pre, pre.ptr, pre.len, err)))
            return rc;
        snprintf(t->pre_name, sizeof t->pre_name, "%.*s", (int)(pre.len > 63 ? 63 : pre.len),
                 pre.ptr);
        in->pre = t->pre_name;
        for (int b = 0; b < 256; b++) {
            uint8_t u[4];
            size_t k = gm_utf8_encode(gm_bytelevel_cp((uint8_t)b), u);
            if ((rc = gm_strmap_intern(&t->map, u, k, &t->byte_sym[b], err)))
                return rc;
        }
        if ((rc = load_merges(t, g, err)))
            return rc;
    }

    /* special tokens and flags */
    bool spm = in->kind == GM_TOKENIZER_KIND_SPM;
    in->bos = get_id(g, "tokenizer.ggml.bos_token_id", n, spm && n > 1 ? 1 : -1);
    in->eos = get_id(g, "tokenizer.ggml.eos_token_id", n, spm && n > 2 ? 2 : -1);
    in->unk = get_id(g, "tokenizer.ggml.unknown_token_id", n, spm ? 0 : -1);
    in->eot = get_id(g, "tokenizer.ggml.eot_token_id", n, -1);
    in->eom = get_id(g, "tokenizer.ggml.eom_token_id", n, -1);
    in->pad = get_id(g, "tokenizer.ggml.padding_token_id", n, -1);
    if (!spm && t->pre.no_bos && gm_gguf_find_kv(g, "tokenizer.ggml.bos_token_id") < 0)
        in->bos = -1;
    in->add_bos = get_bool(g, "tokenizer.ggml.add_bos_token", spm || t->pre.add_bos);
    in->add_eos = get_bool(g, "tokenizer.ggml.add_eos_token", false);
    in->add_space_prefix = spm && get_bool(g, "tokenizer.ggml.add_space_prefix", true);
    if (in->add_bos && in->bos < 0)
        in->add_bos = false;
    if (in->add_eos && in->eos < 0)
        in->add_eos = false;

    t->every_byte = true;
    for (int b = 0; b < 256 && in->unk < 0; b++) {
        int32_t id = spm ? t->byte_tok[b] : t->map.ent[t->byte_sym[b]].value;
        if (id < 0)
            t->every_byte = false;
    }

    build_eog(t, g);
    if ((rc = build_special(t, err)) || (rc = build_pieces(t, err)))
        return rc;
    return 0;
}

int gm_tokenizer_load(gm_tokenizer **out, const gm_gguf *g, gm_err *err)
{
    if (!out || !g)
        return gm_err_set(err, GM_EINVAL, "gm_tokenizer_load: NULL argument");
    *out = NULL;
    gm_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory");
    for (int b = 0; b < 256; b++)
        t->byte_tok[b] = t->byte_sym[b] = -1;
    t->info.bos = t->info.eos = t->info.eot = t->info.eom = t->info.pad = t->info.unk = -1;
    int rc = load(t, g, err);
    if (rc) {
        gm_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void gm_tokenizer_free(gm_tokenizer *t)
{
    if (!t)
        return;
    free(t->tok_ent);
    free(t->type);
    free(t->score);
    free(t->eog);
    free(t->piece_arena);
    free(t->piece_off);
    free(t->piece_len);
    free(t->special);
    gm_strmap_free(&t->map);
    gm_mergemap_free(&t->merges);
    gm_pretok_free(&t->pre);
    free(t);
}

/* ---- queries ---- */

const gm_tokenizer_info *gm_tokenizer_get_info(const gm_tokenizer *t)
{
    return &t->info;
}

static bool in_range(const gm_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_vocab;
}

const char *gm_tokenizer_token_text(const gm_tokenizer *t, int32_t id, size_t *len)
{
    if (!in_range(t, id)) {
        *len = 0;
        return NULL;
    }
    return gm_strmap_str(&t->map, t->tok_ent[id], len);
}

gm_token_type gm_tokenizer_token_type(const gm_tokenizer *t, int32_t id)
{
    return in_range(t, id) ? (gm_token_type)t->type[id] : GM_TOKEN_TYPE_UNDEFINED;
}

int32_t gm_tokenizer_find(const gm_tokenizer *t, const char *s, size_t len)
{
    if (!s || len == 0)
        return -1;
    int32_t e = gm_strmap_find(&t->map, s, len);
    return e >= 0 ? t->map.ent[e].value : -1;
}

bool gm_tokenizer_is_eog(const gm_tokenizer *t, int32_t id)
{
    return in_range(t, id) && t->eog[id];
}

/* ---- encoding ---- */

typedef struct frag {
    size_t off, len;
    int32_t id; /* >= 0: a special token; -1: text */
} frag;

typedef struct frags {
    frag *v;
    size_t n, cap;
} frags;

static int frags_push(frags *f, size_t off, size_t len, int32_t id, gm_err *err)
{
    if (f->n == f->cap) {
        size_t c2 = f->cap ? f->cap * 2 : 16;
        if (c2 > SIZE_MAX / sizeof *f->v)
            return gm_err_set(err, GM_ENOMEM, "tokenizer: too many special tokens in the text");
        frag *v = realloc(f->v, c2 * sizeof *v);
        if (!v)
            return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory splitting special tokens");
        f->v = v;
        f->cap = c2;
    }
    f->v[f->n].off = off;
    f->v[f->n].len = len;
    f->v[f->n].id = id;
    f->n++;
    return 0;
}

/* Cuts the text at every occurrence of each special token, longest token first (a shorter one
 * is only looked for in the text the longer ones left). */
static int partition(const gm_tokenizer *t, const char *text, size_t len, bool parse_special,
                     frags *cur, frags *tmp, gm_err *err)
{
    int rc;
    cur->n = 0;
    if (len == 0)
        return 0;
    if ((rc = frags_push(cur, 0, len, -1, err)))
        return rc;
    bool present[256] = {false};
    for (size_t i = 0; i < len; i++)
        present[(uint8_t)text[i]] = true;

    for (uint32_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        uint8_t ty = t->type[id];
        if (!parse_special && ty != GM_TOKEN_TYPE_USER_DEFINED)
            continue;
        size_t sl;
        const char *s = gm_tokenizer_token_text(t, id, &sl);
        if (sl == 0 || sl > len || !present[(uint8_t)s[0]])
            continue;
        bool found = false;
        tmp->n = 0;
        for (size_t i = 0; i < cur->n; i++) {
            frag f = cur->v[i];
            if (f.id >= 0 || f.len < sl) {
                if ((rc = frags_push(tmp, f.off, f.len, f.id, err)))
                    return rc;
                continue;
            }
            size_t pos = f.off, end = f.off + f.len;
            while (pos < end) {
                const char *m = end - pos >= sl ? memmem(text + pos, end - pos, s, sl) : NULL;
                if (!m)
                    break;
                size_t at = (size_t)(m - text);
                found = true;
                if (at > pos && (rc = frags_push(tmp, pos, at - pos, -1, err)))
                    return rc;
                if ((rc = frags_push(tmp, at, sl, id, err)))
                    return rc;
                pos = at + sl;
            }
            if (pos < end && (rc = frags_push(tmp, pos, end - pos, -1, err)))
                return rc;
        }
        if (found) {
            frags sw = *cur;
            *cur = *tmp;
            *tmp = sw;
        }
    }
    return 0;
}

typedef struct enc_ctx {
    frags fr, fr_tmp;
    gm_spans words, words_tmp;
    gm_scratch sc;
    void *md;
} enc_ctx;

static int encode_text_bpe(const gm_tokenizer *t, enc_ctx *c, const char *text, size_t len,
                           gm_idsink *out, gm_err *err)
{
    int rc;
    if (!c->md && !(c->md = gm_pretok_match_data()))
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for regex match data");
    if ((rc = gm_pretok_split(&t->pre, text, len, &c->words, &c->words_tmp, c->md, err)))
        return rc;
    for (size_t i = 0; i < c->words.n; i++) {
        gm_span w = c->words.v[i];
        if ((rc = gm_bpe_word(t, (const uint8_t *)text + w.off, w.len, &c->sc, out, err)))
            return rc;
    }
    return 0;
}

static int encode_text_spm(const gm_tokenizer *t, enc_ctx *c, const char *text, size_t len,
                           bool prefix, gm_idsink *out, gm_err *err)
{
    /* " " -> "▁" (3 bytes), and one more for the prefix */
    size_t n_sp = 0;
    for (size_t i = 0; i < len; i++)
        n_sp += text[i] == ' ';
    size_t need = len + 2 * n_sp + (prefix ? 3 : 0);
    if (need < len)
        return gm_err_set(err, GM_ERANGE, "tokenizer: text too long");
    /* the buffer is also the fragment the symbols point into; keep it apart from sc.buf users */
    int rc = gm_scratch_buf(&c->sc, need, err);
    if (rc)
        return rc;
    uint8_t *b = c->sc.buf;
    size_t k = 0;
    if (prefix) {
        b[k++] = 0xE2;
        b[k++] = 0x96;
        b[k++] = 0x81;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            b[k++] = 0xE2;
            b[k++] = 0x96;
            b[k++] = 0x81;
        } else {
            b[k++] = (uint8_t)text[i];
        }
    }
    return gm_spm_fragment(t, b, k, &c->sc, out, err);
}

int gm_tokenizer_encode(const gm_tokenizer *t, const char *text, size_t text_len, unsigned flags,
                        int32_t *ids, size_t ids_cap, size_t *n_ids, gm_err *err)
{
    if (!t || !n_ids || (!text && text_len) || (!ids && ids_cap))
        return gm_err_set(err, GM_EINVAL, "gm_tokenizer_encode: NULL argument");
    *n_ids = 0;
    gm_idsink out = {ids, ids_cap, 0, ids == NULL && ids_cap == 0, false};
    enc_ctx c;
    memset(&c, 0, sizeof c);
    const gm_tokenizer_info *in = &t->info;
    bool add = (flags & GM_ENCODE_ADD_SPECIAL) != 0;
    int rc = 0;

    /* No token covers more than max_text_len bytes of input, and no byte is dropped: a text
     * that cannot fit is refused before any work (a huge input with a small buffer costs
     * nothing). */
    if (!out.count_only && t->every_byte && t->max_text_len > 0 &&
        text_len / t->max_text_len > ids_cap)
        return gm_err_set(err, GM_ERANGE, "tokenizer: a text of %zu bytes needs more than %zu "
                          "token slots", text_len, ids_cap);

    if (add && in->add_bos && (rc = gm_idsink_push(&out, in->bos)))
        goto done;
    if ((rc = partition(t, text, text_len, (flags & GM_ENCODE_PARSE_SPECIAL) != 0, &c.fr,
                        &c.fr_tmp, err)))
        goto done;
    bool prev_special = true; /* SPM: the text after a special token gets the space prefix too */
    for (size_t i = 0; i < c.fr.n; i++) {
        frag f = c.fr.v[i];
        if (f.id >= 0) {
            rc = gm_idsink_push(&out, f.id);
            prev_special = true;
        } else if (in->kind == GM_TOKENIZER_KIND_BPE) {
            rc = encode_text_bpe(t, &c, text + f.off, f.len, &out, err);
        } else {
            rc = encode_text_spm(t, &c, text + f.off, f.len, in->add_space_prefix && prev_special,
                                 &out, err);
            prev_special = false;
        }
        if (rc)
            goto done;
    }
    if (add && in->add_eos)
        rc = gm_idsink_push(&out, in->eos);

done:
    if (rc == GM_ERANGE && out.full)
        gm_err_set(err, GM_ERANGE, "tokenizer: the text needs more than %zu token slots", ids_cap);
    *n_ids = out.n;
    free(c.fr.v);
    free(c.fr_tmp.v);
    gm_spans_free(&c.words);
    gm_spans_free(&c.words_tmp);
    gm_scratch_free(&c.sc);
    if (c.md)
        gm_pretok_match_data_free(c.md);
    return rc;
}

/* ---- decoding ---- */

const char *gm_tokenizer_piece(const gm_tokenizer *t, int32_t id, unsigned flags, size_t *len)
{
    if (!in_range(t, id)) {
        *len = 0;
        return NULL;
    }
    uint8_t ty = t->type[id];
    const char *p = t->piece_arena + t->piece_off[id];
    if ((ty == GM_TOKEN_TYPE_CONTROL || ty == GM_TOKEN_TYPE_UNKNOWN) &&
        !(flags & GM_DECODE_RENDER_SPECIAL)) {
        *len = 0;
        return p;
    }
    *len = t->piece_len[id];
    return p;
}

void gm_detok_init(gm_detok *d, const gm_tokenizer *t, unsigned flags)
{
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->flags = flags;
}

size_t gm_detok_max_out(const gm_tokenizer *t)
{
    return 3 * (t->info.max_piece_bytes + 3);
}

static const uint8_t k_fffd[3] = {0xEF, 0xBF, 0xBD};

/* Output writer: counts always, writes only when out is non-NULL (the caller checked room). */
typedef struct wr {
    uint8_t *out;
    size_t n;
} wr;

static void wr_bytes(wr *w, const uint8_t *s, size_t n)
{
    if (w->out)
        memcpy(w->out + w->n, s, n);
    w->n += n;
}

/* Runs piece p[0..n) through the UTF-8 filter after the held bytes. Returns the new held bytes
 * in held/n_held (not committed to d). */
static void filter(const gm_detok *d, const uint8_t *p, size_t n, wr *w, uint8_t held[4],
                   uint8_t *n_held)
{
    size_t i = 0;
    uint8_t nh = d->n_held;
    memcpy(held, d->held, 4);
    if (nh > 0) {
        /* complete (or reject) the held sequence with the first bytes of p */
        uint8_t c[8];
        memcpy(c, held, nh);
        size_t take = n < 4 ? n : 4;
        memcpy(c + nh, p, take);
        size_t cl;
        int st = gm_utf8_classify(c, nh + take, &cl);
        if (st == GM_UTF8_SHORT) { /* still incomplete: all of p is held too */
            memcpy(held + nh, p, take);
            *n_held = (uint8_t)(nh + take);
            return;
        }
        if (st == GM_UTF8_OK)
            wr_bytes(w, c, cl);
        else
            wr_bytes(w, k_fffd, 3);
        i = cl - nh; /* cl > nh: the held prefix alone was valid */
        nh = 0;
    }
    while (i < n) {
        size_t cl;
        int st = gm_utf8_classify(p + i, n - i, &cl);
        if (st == GM_UTF8_OK) {
            /* copy the whole run of valid text at once */
            size_t j = i + cl;
            while (j < n) {
                size_t cl2;
                if (gm_utf8_classify(p + j, n - j, &cl2) != GM_UTF8_OK)
                    break;
                j += cl2;
            }
            wr_bytes(w, p + i, j - i);
            i = j;
        } else if (st == GM_UTF8_SHORT) {
            memcpy(held, p + i, cl);
            nh = (uint8_t)cl;
            i = n;
        } else {
            wr_bytes(w, k_fffd, 3);
            i += cl;
        }
    }
    *n_held = nh;
}

/* One token: out == NULL only counts. Commits the state when commit is set. */
static int detok_step(gm_detok *d, int32_t id, uint8_t *out, size_t *n_out, bool commit)
{
    const gm_tokenizer *t = d->tok;
    size_t n;
    const uint8_t *p = (const uint8_t *)gm_tokenizer_piece(t, id, d->flags, &n);
    if (!p)
        return GM_EINVAL;
    bool started = d->started;
    if (n > 0 && !started) {
        started = true;
        if ((d->flags & GM_DECODE_STRIP_SPACE) && t->info.add_space_prefix && p[0] == ' ') {
            p++;
            n--;
        }
    }
    wr w = {out, 0};
    uint8_t held[4];
    uint8_t nh;
    filter(d, p, n, &w, held, &nh);
    *n_out = w.n;
    if (commit) {
        memcpy(d->held, held, 4);
        d->n_held = nh;
        d->started = started;
    }
    return 0;
}

int gm_detok_push(gm_detok *d, int32_t id, char *out, size_t cap, size_t *n_out, gm_err *err)
{
    size_t need;
    *n_out = 0;
    if (!d || !d->tok || (!out && cap))
        return gm_err_set(err, GM_EINVAL, "gm_detok_push: NULL argument");
    if (detok_step(d, id, NULL, &need, false))
        return gm_err_set(err, GM_EINVAL, "tokenizer: token id %d is not in the vocabulary (%u)",
                          id, d->tok->n_vocab);
    if (need > cap) {
        *n_out = need;
        return gm_err_set(err, GM_ERANGE, "tokenizer: %zu bytes of output room needed, %zu given",
                          need, cap);
    }
    return detok_step(d, id, (uint8_t *)out, n_out, true);
}

int gm_detok_finish(gm_detok *d, char *out, size_t cap, size_t *n_out, gm_err *err)
{
    *n_out = 0;
    if (!d || (!out && cap))
        return gm_err_set(err, GM_EINVAL, "gm_detok_finish: NULL argument");
    if (d->n_held > 0) {
        if (cap < 3) {
            *n_out = 3;
            return gm_err_set(err, GM_ERANGE, "tokenizer: 3 bytes of output room needed, %zu given",
                              cap);
        }
        memcpy(out, k_fffd, 3);
        *n_out = 3;
    }
    d->n_held = 0;
    d->started = false;
    return 0;
}

int gm_tokenizer_decode(const gm_tokenizer *t, const int32_t *ids, size_t n_ids, unsigned flags,
                        char *out, size_t cap, size_t *n_out, gm_err *err)
{
    if (!t || !n_out || (!ids && n_ids) || (!out && cap))
        return gm_err_set(err, GM_EINVAL, "gm_tokenizer_decode: NULL argument");
    *n_out = 0;
    for (size_t i = 0; i < n_ids; i++)
        if (!in_range(t, ids[i]))
            return gm_err_set(err, GM_EINVAL, "tokenizer: token id %d (at %zu) is not in the "
                              "vocabulary (%u)", ids[i], i, t->n_vocab);
    gm_detok d;
    gm_detok_init(&d, t, flags);
    size_t total = 0;
    bool fits = true;
    for (size_t i = 0; i < n_ids; i++) {
        size_t need;
        detok_step(&d, ids[i], NULL, &need, false);
        if (fits && out && need <= cap - total) {
            detok_step(&d, ids[i], (uint8_t *)out + total, &need, true);
        } else {
            fits = false;
            detok_step(&d, ids[i], NULL, &need, true);
        }
        total += need;
    }
    if (d.n_held > 0) {
        if (fits && out && cap - total >= 3)
            memcpy(out + total, k_fffd, 3);
        else
            fits = false;
        total += 3;
    }
    *n_out = total;
    if (!fits && !(out == NULL && cap == 0))
        return gm_err_set(err, GM_ERANGE, "tokenizer: %zu bytes of output room needed, %zu given",
                          total, cap);
    return 0;
}
