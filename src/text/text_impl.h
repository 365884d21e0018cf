/* text/text_impl: internals shared by the files of the text module (not a public header).
 *
 * Owns the layout of gm_tokenizer and the helpers each file provides to the others:
 *   utf8.c     UTF-8 classification and the GPT-2 byte <-> unicode map;
 *   strmap.c   an interning string -> int32 hash map and a (pair -> merge) hash map;
 *   pretok.c   the pre-tokenizer table (regex lists per tokenizer.ggml.pre) and the splitter;
 *   bpe.c      byte-level BPE of one pre-tokenized word;
 *   spm.c      SentencePiece-style tokenization of one text fragment;
 *   tokenizer.c loading, special tokens, encode/decode API, end of generation.
 * Threads: everything here is either immutable after load or per-call scratch.
 */
#ifndef GM_TEXT_TEXT_IMPL_H
#define GM_TEXT_TEXT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

/* ---- utf8.c ---- */

enum { GM_UTF8_OK = 0, GM_UTF8_SHORT = 1, GM_UTF8_BAD = 2 };

/* Classifies the bytes at s[0..n), n >= 1: GM_UTF8_OK and *len = length of the valid sequence
 * that starts there; GM_UTF8_SHORT when all n bytes are a valid but incomplete start (*len = n);
 * GM_UTF8_BAD and *len = bytes of the maximal invalid part to replace (>= 1). Strict: no
 * overlong forms, no surrogates, nothing above U+10FFFF. */
int gm_utf8_classify(const uint8_t *s, size_t n, size_t *len);

/* Length of the character at s[0..n) for splitting text into symbols: the valid sequence's
 * length, or 1 for a byte that does not start a complete valid sequence. n >= 1. */
size_t gm_utf8_char_len(const uint8_t *s, size_t n);

/* Code point of the valid sequence s[0..len) (len from gm_utf8_classify). */
uint32_t gm_utf8_decode(const uint8_t *s, size_t len);

/* Writes cp (<= 0x10FFFF) as UTF-8 into out; returns 1..4. */
size_t gm_utf8_encode(uint32_t cp, uint8_t out[4]);

/* GPT-2 byte-level map: the code point that stands for byte b, and the byte a code point stands
 * for (-1 when cp is not in the map). */
uint32_t gm_bytelevel_cp(uint8_t b);
int gm_bytelevel_byte(uint32_t cp);

/* ---- strmap.c ---- */

typedef struct gm_strmap_ent {
    uint64_t off;    /* in arena */
    uint32_t len;
    int32_t value;   /* token id, or -1 */
} gm_strmap_ent;

/* Interns byte strings; entry indices are dense (0..n_ent-1) and stable. */
typedef struct gm_strmap {
    char *arena;
    size_t arena_len, arena_cap;
    gm_strmap_ent *ent;
    uint32_t n_ent, cap_ent;
    uint32_t *slots;     /* entry index + 1; 0 = empty */
    uint32_t n_slots;    /* power of two, at least 2 * n_ent */
} gm_strmap;

int gm_strmap_init(gm_strmap *m, uint32_t expect, gm_err *err);
void gm_strmap_free(gm_strmap *m);
/* Entry index of s[0..n), or -1. */
int32_t gm_strmap_find(const gm_strmap *m, const void *s, size_t n);
/* Entry index of s[0..n), added (value -1) when absent. GM_ENOMEM, GM_ERANGE (too many). */
int gm_strmap_intern(gm_strmap *m, const void *s, size_t n, int32_t *idx, gm_err *err);
static inline const char *gm_strmap_str(const gm_strmap *m, int32_t idx, size_t *len)
{
    *len = m->ent[idx].len;
    return m->arena + m->ent[idx].off;
}

/* BPE merges: (left symbol, right symbol) -> (rank, merged symbol), symbols being strmap
 * entry indices. */
typedef struct gm_mergemap {
    uint64_t *keys;      /* (left << 32) | right; UINT64_MAX = empty */
    int32_t *rank;
    int32_t *result;
    uint32_t n, n_slots; /* n_slots: power of two */
} gm_mergemap;

int gm_mergemap_init(gm_mergemap *m, uint32_t expect, gm_err *err);
void gm_mergemap_free(gm_mergemap *m);
/* Adds a merge unless the pair is already there (the first, lowest rank wins). */
int gm_mergemap_add(gm_mergemap *m, int32_t left, int32_t right, int32_t rank, int32_t result,
                    gm_err *err);
/* Rank of the pair (and the merged symbol in *result), or -1. */
int32_t gm_mergemap_find(const gm_mergemap *m, int32_t left, int32_t right, int32_t *result);

/* ---- pretok.c ---- */

#define GM_PRETOK_MAX_RE 6

typedef struct gm_span {
    size_t off, len;
} gm_span;

typedef struct gm_pretok {
    const char *name;                 /* the table's canonical name */
    void *re[GM_PRETOK_MAX_RE];       /* pcre2_code_8 * */
    int n_re;
    void *mctx;                       /* pcre2_match_context_8 *: limits of the fallback */
    bool ignore_merges;               /* a word that is a whole token is not split */
    bool add_bos;                     /* default of add_bos for this family */
    bool no_bos;                      /* the family has no BOS token */
} gm_pretok;

/* Compiles the regex list of pre-tokenizer name[0..len). GM_EUNSUPPORTED for a name outside the
 * table. */
int gm_pretok_init(gm_pretok *p, const char *name, size_t len, gm_err *err);
void gm_pretok_free(gm_pretok *p);

/* Number of canonical entries and the first name of entry i (for tests that compile them all). */
int gm_pretok_n_entries(void);
const char *gm_pretok_entry_name(int i);

/* Growable span list (per encode call). */
typedef struct gm_spans {
    gm_span *v;
    size_t n, cap;
} gm_spans;

/* Splits text[0..len) into words: each regex of the list splits every piece the previous one
 * left into its matches and the text between them (both kept, in order). Result in *out
 * (replaced). tmp is scratch. md is the match data (pcre2_match_data_8 *). */
int gm_pretok_split(const gm_pretok *p, const char *text, size_t len, gm_spans *out,
                    gm_spans *tmp, void *md, gm_err *err);
int gm_spans_push(gm_spans *s, size_t off, size_t len, gm_err *err);
void gm_spans_free(gm_spans *s);
/* Match data big enough for the table's regexes; NULL when out of memory. */
void *gm_pretok_match_data(void);
void gm_pretok_match_data_free(void *md);

/* ---- the tokenizer ---- */

struct gm_tokenizer {
    gm_tokenizer_info info;
    char model[32];
    char pre_name[64];

    uint32_t n_vocab;
    size_t max_text_len;     /* longest token text in bytes: no token covers more input */
    bool every_byte;         /* every byte has a token (or unk): no input byte is dropped */
    int32_t *tok_ent;        /* token id -> strmap entry of its text */
    uint8_t *type;           /* gm_token_type */
    float *score;            /* SPM scores (NULL for BPE) */
    uint8_t *eog;            /* 1 when the token ends generation */

    char *piece_arena;       /* decoded bytes of every token */
    uint64_t *piece_off;
    uint32_t *piece_len;

    gm_strmap map;           /* token texts (value = id) and, for BPE, merge symbols */

    /* BPE */
    gm_mergemap merges;
    int32_t byte_sym[256];   /* strmap entry of the byte-level character of each byte */
    gm_pretok pre;

    /* SPM */
    int32_t byte_tok[256];   /* byte fallback token of each byte, or -1 */

    /* special tokens matched in the input, longest text first */
    int32_t *special;
    uint32_t n_special;
};

/* Where encoded ids go. count_only: only n is counted. */
typedef struct gm_idsink {
    int32_t *ids;
    size_t cap;
    size_t n;
    bool count_only;
    bool full;   /* a push did not fit; the caller reports it */
} gm_idsink;

/* GM_ERANGE (without touching any gm_err; full is set) when the sink is full. */
static inline int gm_idsink_push(gm_idsink *s, int32_t id)
{
    if (s->count_only) {
        s->n++;
        return 0;
    }
    if (s->n >= s->cap) {
        s->full = true;
        return GM_ERANGE;
    }
    s->ids[s->n++] = id;
    return 0;
}

/* Per-call scratch of the encoders; grows on demand, freed by gm_scratch_free. */
typedef struct gm_scratch {
    uint8_t *buf;            /* encoded word / escaped text */
    size_t buf_cap;
    int32_t *sym;            /* symbol: strmap entry (BPE) */
    int32_t *prev, *next;
    uint32_t *start, *len;   /* byte range of each symbol in the word */
    size_t sym_cap;
    void *heap;              /* bigram heap (layout private to bpe.c / spm.c) */
    size_t heap_cap, heap_elem;
} gm_scratch;

void gm_scratch_free(gm_scratch *s);
int gm_scratch_syms(gm_scratch *s, size_t n, gm_err *err);
int gm_scratch_buf(gm_scratch *s, size_t n, gm_err *err);
int gm_scratch_heap(gm_scratch *s, size_t n, size_t elem, gm_err *err);

/* Byte-level BPE of one word text[0..len) (raw bytes, already pre-tokenized). */
int gm_bpe_word(const gm_tokenizer *t, const uint8_t *text, size_t len, gm_scratch *sc,
                gm_idsink *out, gm_err *err);

/* SPM of one fragment: text is already escaped ("▁" for spaces, prefix added). */
int gm_spm_fragment(const gm_tokenizer *t, const uint8_t *text, size_t len, gm_scratch *sc,
                    gm_idsink *out, gm_err *err);

#endif
