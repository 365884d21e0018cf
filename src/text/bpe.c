/* text/bpe: byte-level BPE of one pre-tokenized word.
 *
 * Each byte of the word starts as one symbol: the GPT-2 character that stands for it. The pair
 * of neighbours with the lowest merge rank (the leftmost on ties) is merged, again and again,
 * until no neighbouring pair has a merge. Symbols are strmap entries, so a merge is one hash
 * lookup on two integers. Each final symbol that is a token is emitted; one that is not (a
 * vocabulary whose merges make strings it lacks) falls back to the tokens of its bytes. */
#include <string.h>

#include "text/text_impl.h"

typedef struct bigram {
    int32_t rank;
    int32_t left, right;    /* symbol positions */
    int32_t lsym, rsym;     /* their strmap entries when the pair was queued */
    int32_t result;
} bigram;

static bool bg_before(const bigram *a, const bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
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

/* Queues the pair (l, r) when it has a merge; the heap grows as needed. */
static int try_pair(const gm_tokenizer *t, gm_scratch *sc, size_t *n, int32_t l, int32_t r,
                    gm_err *err)
{
    if (l < 0 || r < 0)
        return 0;
    int32_t res;
    int32_t rank = gm_mergemap_find(&t->merges, sc->sym[l], sc->sym[r], &res);
    if (rank < 0)
        return 0;
    int rc = gm_scratch_heap(sc, *n + 1, sizeof(bigram), err);
    if (rc)
        return rc;
    bigram b = {rank, l, r, sc->sym[l], sc->sym[r], res};
    heap_push(sc->heap, n, b);
    return 0;
}

static int emit_bytes(const gm_tokenizer *t, const uint8_t *bytes, size_t n, gm_idsink *out)
{
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->map.ent[t->byte_sym[bytes[i]]].value;
        if (id < 0)
            id = t->info.unk;
        if (id < 0)
            continue; /* the vocabulary cannot express this byte */
        int rc = gm_idsink_push(out, id);
        if (rc)
            return rc;
    }
    return 0;
}

int gm_bpe_word(const gm_tokenizer *t, const uint8_t *text, size_t len, gm_scratch *sc,
                gm_idsink *out, gm_err *err)
{
    int rc;
    if (len == 0)
        return 0;
    if (len > INT32_MAX / 4)
        return gm_err_set(err, GM_ERANGE, "tokenizer: a word of %zu bytes is too long", len);

    if (t->pre.ignore_merges) {
        /* The whole word, in byte-level form, may be a token by itself. */
        if ((rc = gm_scratch_buf(sc, len * 2, err)))
            return rc;
        size_t k = 0;
        for (size_t i = 0; i < len; i++)
            k += gm_utf8_encode(gm_bytelevel_cp(text[i]), sc->buf + k);
        int32_t e = gm_strmap_find(&t->map, sc->buf, k);
        if (e >= 0 && t->map.ent[e].value >= 0)
            return gm_idsink_push(out, t->map.ent[e].value);
    }

    if ((rc = gm_scratch_syms(sc, len, err)) || (rc = gm_scratch_heap(sc, 1, sizeof(bigram), err)))
        return rc;
    int32_t n = (int32_t)len;
    for (int32_t i = 0; i < n; i++) {
        sc->sym[i] = t->byte_sym[text[i]];
        sc->prev[i] = i - 1;
        sc->next[i] = i + 1 < n ? i + 1 : -1;
        sc->start[i] = (uint32_t)i;
        sc->len[i] = 1;
    }
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        if ((rc = try_pair(t, sc, &nh, i, i + 1, err)))
            return rc;

    while (nh > 0) {
        bigram b = heap_pop(sc->heap, &nh);
        /* Stale when either side was merged away or changed since the pair was queued. */
        if (sc->len[b.left] == 0 || sc->len[b.right] == 0 || sc->next[b.left] != b.right ||
            sc->sym[b.left] != b.lsym || sc->sym[b.right] != b.rsym)
            continue;
        sc->sym[b.left] = b.result;
        sc->len[b.left] += sc->len[b.right];
        sc->len[b.right] = 0;
        int32_t nx = sc->next[b.right];
        sc->next[b.left] = nx;
        if (nx >= 0)
            sc->prev[nx] = b.left;
        if ((rc = try_pair(t, sc, &nh, sc->prev[b.left], b.left, err)) ||
            (rc = try_pair(t, sc, &nh, b.left, nx, err)))
            return rc;
    }

    for (int32_t i = 0; i >= 0; i = sc->next[i]) {
        int32_t id = t->map.ent[sc->sym[i]].value;
        if (id >= 0)
            rc = gm_idsink_push(out, id);
        else
            rc = emit_bytes(t, text + sc->start[i], sc->len[i], out);
        if (rc)
            return rc;
    }
    return 0;
}
