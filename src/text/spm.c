/* text/spm: SentencePiece-style tokenization of one text fragment (spaces already written as
 * "▁", the leading space already added).
 *
 * The fragment starts as one symbol per UTF-8 character (one per byte where the bytes are not
 * valid UTF-8). The neighbouring pair whose concatenation is the token with the highest score
 * (the leftmost on ties) is merged, until no neighbouring pair forms a token. A final symbol
 * that is not a token (a character the vocabulary lacks) becomes its bytes' <0xXX> tokens. */
#include <string.h>

#include "text/text_impl.h"

typedef struct bigram {
    float score;
    int32_t left, right;
    uint32_t size;   /* bytes of the pair when queued */
} bigram;

static bool bg_before(const bigram *a, const bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(bigram *h, size_t *n, bigram v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(&v, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static bigram heap_pop(bigram *h, size_t *n)
{
    bigram top = h[0];
    bigram last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && bg_before(&h[c + 1], &h[c]))
            c++;
        if (!bg_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0)
        h[i] = last;
    return top;
}

static int32_t token_of(const gm_tokenizer *t, const uint8_t *s, size_t n)
{
    int32_t e = gm_strmap_find(&t->map, s, n);
    return e >= 0 ? t->map.ent[e].value : -1;
}

/* Queues the pair (l, r) when together they are a token; the heap grows as needed. */
static int try_pair(const gm_tokenizer *t, const uint8_t *text, gm_scratch *sc, size_t *n,
                    int32_t l, int32_t r, gm_err *err)
{
    if (l < 0 || r < 0)
        return 0;
    uint32_t size = sc->len[l] + sc->len[r];
    int32_t id = token_of(t, text + sc->start[l], size);
    if (id < 0)
        return 0;
    int rc = gm_scratch_heap(sc, *n + 1, sizeof(bigram), err);
    if (rc)
        return rc;
    bigram b = {t->score[id], l, r, size};
    heap_push(sc->heap, n, b);
    return 0;
}

/* The length of the symbol starting with byte b, from b alone (SentencePiece's and llama.cpp's
 * rule: an invalid lead byte takes the bytes after it into its symbol, which then falls back to
 * one byte token each). */
static size_t lead_len(uint8_t b)
{
    static const uint8_t k_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return k_len[b >> 4];
}

int gm_spm_fragment(const gm_tokenizer *t, const uint8_t *text, size_t len, gm_scratch *sc,
                    gm_idsink *out, gm_err *err)
{
    int rc;
    if (len == 0)
        return 0;
    if (len > INT32_MAX / 4)
        return gm_err_set(err, GM_ERANGE, "tokenizer: a fragment of %zu bytes is too long", len);
    if ((rc = gm_scratch_syms(sc, len, err)) || (rc = gm_scratch_heap(sc, 1, sizeof(bigram), err)))
        return rc;

    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t cl = lead_len(text[off]);
        if (cl > len - off)
            cl = len - off;
        sc->start[n] = (uint32_t)off;
        sc->len[n] = (uint32_t)cl;
        sc->prev[n] = n - 1;
        sc->next[n] = n + 1;
        n++;
        off += cl;
    }
    sc->next[n - 1] = -1;

    size_t nh = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        if ((rc = try_pair(t, text, sc, &nh, i, i + 1, err)))
            return rc;

    while (nh > 0) {
        bigram b = heap_pop(sc->heap, &nh);
        if (sc->len[b.left] == 0 || sc->len[b.right] == 0 || sc->next[b.left] != b.right ||
            sc->len[b.left] + sc->len[b.right] != b.size)
            continue;
        sc->len[b.left] += sc->len[b.right];
        sc->len[b.right] = 0;
        int32_t nx = sc->next[b.right];
        sc->next[b.left] = nx;
        if (nx >= 0)
            sc->prev[nx] = b.left;
        if ((rc = try_pair(t, text, sc, &nh, sc->prev[b.left], b.left, err)) ||
            (rc = try_pair(t, text, sc, &nh, b.left, nx, err)))
            return rc;
    }

    for (int32_t i = 0; i >= 0; i = sc->next[i]) {
        int32_t id = token_of(t, text + sc->start[i], sc->len[i]);
        if (id >= 0) {
            if ((rc = gm_idsink_push(out, id)))
                return rc;
            continue;
        }
        for (uint32_t k = 0; k < sc->len[i]; k++) {
            int32_t b = t->byte_tok[text[sc->start[i] + k]];
            if (b < 0)
                b = t->info.unk;
            if (b >= 0 && (rc = gm_idsink_push(out, b)))
                return rc;
        }
    }
    return 0;
}
