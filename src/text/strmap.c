/* text/strmap: the interning string map and the BPE merge map (see text_impl.h).
 * Open addressing with linear probing; tables stay at most half full. */
#include <stdlib.h>
#include <string.h>

#include "text/text_impl.h"

#define GM_STRMAP_MAX_ENT (1u << 30)

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static uint32_t pow2_at_least(uint64_t v)
{
    uint32_t n = 16;
    while (n < v && n < (1u << 31))
        n <<= 1;
    return n;
}

int gm_strmap_init(gm_strmap *m, uint32_t expect, gm_err *err)
{
    memset(m, 0, sizeof *m);
    if (expect > GM_STRMAP_MAX_ENT)
        return gm_err_set(err, GM_ERANGE, "tokenizer: %u strings are more than supported", expect);
    m->n_slots = pow2_at_least((uint64_t)expect * 2 + 1);
    m->slots = calloc(m->n_slots, sizeof *m->slots);
    m->cap_ent = expect > 16 ? expect : 16;
    m->ent = malloc((size_t)m->cap_ent * sizeof *m->ent);
    m->arena_cap = (size_t)m->cap_ent * 8;
    m->arena = malloc(m->arena_cap);
    if (!m->slots || !m->ent || !m->arena) {
        gm_strmap_free(m);
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for the string table");
    }
    return 0;
}

void gm_strmap_free(gm_strmap *m)
{
    free(m->arena);
    free(m->ent);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static bool ent_eq(const gm_strmap *m, uint32_t e, const void *s, size_t n)
{
    return m->ent[e].len == n && memcmp(m->arena + m->ent[e].off, s, n) == 0;
}

int32_t gm_strmap_find(const gm_strmap *m, const void *s, size_t n)
{
    if (!m->slots)
        return -1;
    uint32_t mask = m->n_slots - 1;
    for (uint32_t i = (uint32_t)hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t v = m->slots[i];
        if (v == 0)
            return -1;
        if (ent_eq(m, v - 1, s, n))
            return (int32_t)(v - 1);
    }
}

static int grow_slots(gm_strmap *m, gm_err *err)
{
    uint32_t n2 = m->n_slots * 2;
    uint32_t *s2 = calloc(n2, sizeof *s2);
    if (!s2)
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for the string table");
    for (uint32_t e = 0; e < m->n_ent; e++) {
        uint64_t h = hash_bytes(m->arena + m->ent[e].off, m->ent[e].len);
        uint32_t i = (uint32_t)h & (n2 - 1);
        while (s2[i])
            i = (i + 1) & (n2 - 1);
        s2[i] = e + 1;
    }
    free(m->slots);
    m->slots = s2;
    m->n_slots = n2;
    return 0;
}

int gm_strmap_intern(gm_strmap *m, const void *s, size_t n, int32_t *idx, gm_err *err)
{
    int32_t f = gm_strmap_find(m, s, n);
    if (f >= 0) {
        *idx = f;
        return 0;
    }
    if (m->n_ent >= GM_STRMAP_MAX_ENT || n > UINT32_MAX)
        return gm_err_set(err, GM_ERANGE, "tokenizer: string table full");
    if ((uint64_t)(m->n_ent + 1) * 2 > m->n_slots) {
        int rc = grow_slots(m, err);
        if (rc)
            return rc;
    }
    if (m->n_ent == m->cap_ent) {
        uint32_t c2 = m->cap_ent * 2;
        gm_strmap_ent *e2 = realloc(m->ent, (size_t)c2 * sizeof *e2);
        if (!e2)
            return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for the string table");
        m->ent = e2;
        m->cap_ent = c2;
    }
    if (n > m->arena_cap - m->arena_len) {
        size_t c2 = m->arena_cap;
        while (n > c2 - m->arena_len) {
            if (c2 > SIZE_MAX / 2)
                return gm_err_set(err, GM_ENOMEM, "tokenizer: string table too large");
            c2 *= 2;
        }
        char *a2 = realloc(m->arena, c2);
        if (!a2)
            return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for the string table");
        m->arena = a2;
        m->arena_cap = c2;
    }
    if (n)
        memcpy(m->arena + m->arena_len, s, n);
    uint32_t e = m->n_ent++;
    m->ent[e].off = m->arena_len;
    m->ent[e].len = (uint32_t)n;
    m->ent[e].value = -1;
    m->arena_len += n;
    uint32_t mask = m->n_slots - 1;
    uint32_t i = (uint32_t)hash_bytes(s, n) & mask;
    while (m->slots[i])
        i = (i + 1) & mask;
    m->slots[i] = e + 1;
    *idx = (int32_t)e;
    return 0;
}

/* ---- merges ---- */

static uint64_t pair_key(int32_t l, int32_t r)
{
    return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
}

static uint32_t pair_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

int gm_mergemap_init(gm_mergemap *m, uint32_t expect, gm_err *err)
{
    memset(m, 0, sizeof *m);
    if (expect > GM_STRMAP_MAX_ENT)
        return gm_err_set(err, GM_ERANGE, "tokenizer: %u merges are more than supported", expect);
    m->n_slots = pow2_at_least((uint64_t)expect * 2 + 1);
    m->keys = malloc((size_t)m->n_slots * sizeof *m->keys);
    m->rank = malloc((size_t)m->n_slots * sizeof *m->rank);
    m->result = malloc((size_t)m->n_slots * sizeof *m->result);
    if (!m->keys || !m->rank || !m->result) {
        gm_mergemap_free(m);
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for the merge table");
    }
    memset(m->keys, 0xff, (size_t)m->n_slots * sizeof *m->keys);
    return 0;
}

void gm_mergemap_free(gm_mergemap *m)
{
    free(m->keys);
    free(m->rank);
    free(m->result);
    memset(m, 0, sizeof *m);
}

int gm_mergemap_add(gm_mergemap *m, int32_t left, int32_t right, int32_t rank, int32_t result,
                    gm_err *err)
{
    if ((uint64_t)(m->n + 1) * 2 > m->n_slots)
        return gm_err_set(err, GM_ERANGE, "tokenizer: merge table full");
    uint64_t k = pair_key(left, right);
    uint32_t mask = m->n_slots - 1;
    uint32_t i = pair_hash(k) & mask;
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == k)
            return 0;
        i = (i + 1) & mask;
    }
    m->keys[i] = k;
    m->rank[i] = rank;
    m->result[i] = result;
    m->n++;
    return 0;
}

int32_t gm_mergemap_find(const gm_mergemap *m, int32_t left, int32_t right, int32_t *result)
{
    if (!m->keys || m->n == 0)
        return -1;
    uint64_t k = pair_key(left, right);
    uint32_t mask = m->n_slots - 1;
    for (uint32_t i = pair_hash(k) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == UINT64_MAX)
            return -1;
        if (m->keys[i] == k) {
            *result = m->result[i];
            return m->rank[i];
        }
    }
}
