/* libFuzzer target for text/tokenizer: the input is arbitrary bytes, used two ways.
 *   1. As text: encoded with and without special-token parsing (counting mode, exact buffer,
 *      a buffer one short), then decoded in one call and token by token.
 *   2. As a sequence of token ids (2 bytes each): decoded in one call and streamed.
 * The vocabulary is loaded once, from $GMLX_FUZZ_TOKENIZER_MODEL or else the compile-time
 * GMLX_FUZZ_TOKENIZER_MODEL (the committed trained-qwen3moe model, a byte-level BPE vocabulary
 * with the qwen2 pre-tokenizer); any GGUF vocabulary works (e.g. the ggml-vocab-*.gguf files).
 * Promises checked (abort = finding): encode never fails on any bytes except for a full buffer;
 * counting and writing agree; the pieces of the ids (special tokens rendered) give back the
 * exact input bytes; decoding always gives valid UTF-8; streaming gives the same bytes as the
 * one-call decode; a too-small buffer gives GM_ERANGE with the size needed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "text/tokenizer.h"

#ifndef GMLX_FUZZ_TOKENIZER_MODEL
#define GMLX_FUZZ_TOKENIZER_MODEL "tests/fixtures/trained-qwen3moe/model-q4_k_m.gguf"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz_tokenizer: %s:%d: broken promise: %s\n", __FILE__,       \
                    __LINE__, #cond);                                                     \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static gm_tokenizer *g_tok;
/* The pieces-give-back-the-input promise holds for the bundled vocabulary. Another one may
 * carry a user-defined token whose text is a byte-level character (DeepSeek's "ÿ"): BPE then
 * emits it, as llama.cpp does, and it decodes to its raw text. */
static bool g_exact;

static void load_once(void)
{
    if (g_tok)
        return;
    const char *path = getenv("GMLX_FUZZ_TOKENIZER_MODEL");
    g_exact = !path || !*path;
    if (g_exact)
        path = GMLX_FUZZ_TOKENIZER_MODEL;
    gm_err err = {0};
    gm_gguf *g = NULL;
    if (gm_gguf_open(&g, path, &err) || gm_tokenizer_load(&g_tok, g, &err)) {
        fprintf(stderr, "fuzz_tokenizer: cannot load the vocabulary: %s\n", err.msg);
        abort();
    }
    gm_gguf_close(g);
}

static bool valid_utf8(const char *s, size_t n)
{
    /* strict: no overlongs, surrogates or code points above U+10FFFF */
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        uint8_t b = p[i];
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b < 0x80) {
            i++;
            continue;
        } else if (b >= 0xC2 && b <= 0xDF) {
            need = 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 3;
            lo = b == 0xE0 ? 0xA0 : 0x80;
            hi = b == 0xED ? 0x9F : 0xBF;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 4;
            lo = b == 0xF0 ? 0x90 : 0x80;
            hi = b == 0xF4 ? 0x8F : 0xBF;
        } else {
            return false;
        }
        if (i + need > n)
            return false;
        for (size_t k = 1; k < need; k++) {
            uint8_t c = p[i + k];
            if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF))
                return false;
        }
        i += need;
    }
    return true;
}

/* Decodes ids in one call and by streaming; both must agree and be valid UTF-8. */
static void check_decode(const int32_t *ids, size_t n, unsigned flags)
{
    gm_err err = {0};
    size_t need = 0;
    CHECK(gm_tokenizer_decode(g_tok, ids, n, flags, NULL, 0, &need, &err) == 0);
    char *full = malloc(need + 1);
    CHECK(full);
    size_t got = 0;
    CHECK(gm_tokenizer_decode(g_tok, ids, n, flags, full, need, &got, &err) == 0);
    CHECK(got == need);
    CHECK(valid_utf8(full, got));
    if (need > 0) {
        size_t again = 0;
        gm_err e2 = {0};
        CHECK(gm_tokenizer_decode(g_tok, ids, n, flags, full, need - 1, &again, &e2) == GM_ERANGE);
        CHECK(again == need && e2.code == GM_ERANGE);
        /* the failed call may have written part of the buffer: decode again */
        CHECK(gm_tokenizer_decode(g_tok, ids, n, flags, full, need, &got, &err) == 0);
    }

    size_t cap = gm_detok_max_out(g_tok);
    char *chunk = malloc(cap);
    CHECK(chunk);
    gm_detok d;
    gm_detok_init(&d, g_tok, flags);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        CHECK(gm_detok_push(&d, ids[i], chunk, cap, &k, &err) == 0);
        CHECK(k <= cap);
        CHECK(valid_utf8(chunk, k));
        CHECK(off + k <= need);
        CHECK(memcmp(full + off, chunk, k) == 0);
        off += k;
    }
    size_t k = 0;
    CHECK(gm_detok_finish(&d, chunk, cap, &k, &err) == 0);
    CHECK(off + k == need);
    CHECK(memcmp(full + off, chunk, k) == 0);
    free(chunk);
    free(full);
}

static void fuzz_text(const char *text, size_t len, unsigned flags)
{
    gm_err err = {0};
    size_t n = 0;
    CHECK(gm_tokenizer_encode(g_tok, text, len, flags, NULL, 0, &n, &err) == 0);
    CHECK(n <= len + 2); /* at most one token per byte, plus BOS/EOS */
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    CHECK(ids);
    size_t n2 = 0;
    CHECK(gm_tokenizer_encode(g_tok, text, len, flags, ids, n, &n2, &err) == 0);
    CHECK(n2 == n);
    uint32_t n_vocab = gm_tokenizer_get_info(g_tok)->n_vocab;
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] >= 0 && (uint32_t)ids[i] < n_vocab);
    if (n > 0) {
        int32_t *short_ids = malloc(n * sizeof *short_ids);
        CHECK(short_ids);
        size_t n3 = 0;
        gm_err e2 = {0};
        CHECK(gm_tokenizer_encode(g_tok, text, len, flags, short_ids, n - 1, &n3, &e2) ==
              GM_ERANGE);
        CHECK(e2.code == GM_ERANGE);
        CHECK(n3 == n - 1 || n3 == 0); /* 0: refused up front as too long to fit */
        CHECK(n3 == 0 || memcmp(short_ids, ids, n3 * sizeof *ids) == 0);
        free(short_ids);
    }

    /* byte-level BPE loses nothing: the pieces (special tokens rendered) are the input */
    if (g_exact && !(flags & GM_ENCODE_ADD_SPECIAL) &&
        gm_tokenizer_get_info(g_tok)->kind == GM_TOKENIZER_KIND_BPE) {
        size_t off = 0;
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            const char *p = gm_tokenizer_piece(g_tok, ids[i], GM_DECODE_RENDER_SPECIAL, &pl);
            CHECK(p && off + pl <= len);
            CHECK(memcmp(text + off, p, pl) == 0);
            off += pl;
        }
        CHECK(off == len);
    }
    check_decode(ids, n, GM_DECODE_RENDER_SPECIAL);
    check_decode(ids, n, 0);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_once();
    if (size == 0)
        return 0;
    uint8_t mode = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    fuzz_text(text, len, (mode & 1) ? GM_ENCODE_PARSE_SPECIAL : 0);
    if (mode & 2)
        fuzz_text(text, len, GM_ENCODE_PARSE_SPECIAL | GM_ENCODE_ADD_SPECIAL);

    /* the bytes as token ids, in range and out of it */
    size_t n = len / 2;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    CHECK(ids);
    uint32_t n_vocab = gm_tokenizer_get_info(g_tok)->n_vocab;
    bool all_ok = true;
    for (size_t i = 0; i < n; i++) {
        uint16_t v = (uint16_t)(data[1 + 2 * i] | (data[2 + 2 * i] << 8));
        ids[i] = (mode & 4) ? (int32_t)v : (int32_t)(v % n_vocab);
        all_ok &= (uint32_t)ids[i] < n_vocab;
        CHECK(gm_tokenizer_is_eog(g_tok, ids[i]) == false || (uint32_t)ids[i] < n_vocab);
    }
    if (all_ok) {
        check_decode(ids, n, GM_DECODE_RENDER_SPECIAL);
        check_decode(ids, n, GM_DECODE_STRIP_SPACE);
    } else {
        size_t k = 0;
        char buf[8];
        gm_err err = {0};
        CHECK(gm_tokenizer_decode(g_tok, ids, n, 0, buf, sizeof buf, &k, &err) == GM_EINVAL);
    }
    free(ids);
    return 0;
}
