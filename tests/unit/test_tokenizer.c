/* Unit tests of text/tokenizer on small vocabularies written with gguf_builder (byte-level BPE
 * and SentencePiece-style), plus the committed trained model's vocabulary for streaming real
 * multi-byte text: UTF-8 helpers, special tokens, end of generation, streaming detokenisation,
 * hostile input (invalid UTF-8, buffers too small, broken metadata). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf_builder.h"
#include "testutil.h"
#include "text/text_impl.h"
#include "text/tokenizer.h"

/* ---- building vocabularies ---- */

enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5, T_BYTE = 6 };

typedef struct vspec {
    const char *model;          /* NULL: no tokenizer.ggml.model key */
    const char *pre;            /* NULL: no key */
    const char **tokens;        /* n_tokens strings (bytes; lengths from tok_len when set) */
    const uint32_t *tok_len;
    const int32_t *types;       /* NULL: no key */
    uint32_t n_tokens, n_types;
    const float *scores;        /* NULL: no key */
    const char **merges;        /* NULL: no key */
    uint32_t n_merges;
    int64_t eos, bos, eot;      /* -1: no key */
    int add_bos;                /* -1: no key */
} vspec;

static char *write_vocab(const vspec *v, const char *name)
{
    gm_gb b;
    gm_gb_init(&b);
    uint64_t n_kv = (v->model != NULL) + (v->pre != NULL) + (v->tokens != NULL) +
                    (v->types != NULL) + (v->scores != NULL) + (v->merges != NULL) +
                    (v->eos >= 0) + (v->bos >= 0) + (v->eot >= 0) + (v->add_bos >= 0);
    gm_gb_header(&b, 3, 0, n_kv);
    if (v->model)
        gm_gb_kv_str(&b, "tokenizer.ggml.model", v->model);
    if (v->pre)
        gm_gb_kv_str(&b, "tokenizer.ggml.pre", v->pre);
    if (v->tokens) {
        gm_gb_key(&b, "tokenizer.ggml.tokens", GM_GB_ARRAY);
        gm_gb_arr(&b, GM_GB_STRING, v->n_tokens);
        for (uint32_t i = 0; i < v->n_tokens; i++)
            gm_gb_strn(&b, v->tokens[i], v->tok_len ? v->tok_len[i] : strlen(v->tokens[i]));
    }
    if (v->types) {
        gm_gb_key(&b, "tokenizer.ggml.token_type", GM_GB_ARRAY);
        gm_gb_arr(&b, GM_GB_I32, v->n_types);
        for (uint32_t i = 0; i < v->n_types; i++)
            gm_gb_u32(&b, (uint32_t)v->types[i]);
    }
    if (v->scores) {
        gm_gb_key(&b, "tokenizer.ggml.scores", GM_GB_ARRAY);
        gm_gb_arr(&b, GM_GB_F32, v->n_tokens);
        for (uint32_t i = 0; i < v->n_tokens; i++)
            gm_gb_f32(&b, v->scores[i]);
    }
    if (v->merges) {
        gm_gb_key(&b, "tokenizer.ggml.merges", GM_GB_ARRAY);
        gm_gb_arr(&b, GM_GB_STRING, v->n_merges);
        for (uint32_t i = 0; i < v->n_merges; i++)
            gm_gb_str(&b, v->merges[i]);
    }
    if (v->eos >= 0)
        gm_gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->bos >= 0)
        gm_gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eot >= 0)
        gm_gb_kv_u32(&b, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot);
    if (v->add_bos >= 0)
        gm_gb_kv_bool(&b, "tokenizer.ggml.add_bos_token", v->add_bos);
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s.gguf", gm_test_tmpdir(), name);
    assert_int_equal(gm_gb_write(&b, path), 0);
    gm_gb_free(&b);
    return path;
}

/* Loads spec; returns the code, *out the tokenizer (NULL on failure). */
static int load_spec(const vspec *v, const char *name, gm_tokenizer **out, gm_err *err)
{
    const char *path = write_vocab(v, name);
    gm_gguf *g = NULL;
    gm_err e2 = {0};
    assert_int_equal(gm_gguf_open(&g, path, &e2), 0);
    int rc = gm_tokenizer_load(out, g, err);
    gm_gguf_close(g);
    remove(path);
    return rc;
}

/* The small BPE vocabulary: 256 byte tokens (byte-level characters, in byte order), merges
 * making "he", "ll", "hell", "hello", "Ġhello", and special tokens. */
#define BPE_N_BYTES 256
enum {
    ID_HE = 256, ID_LL, ID_HELL, ID_HELLO, ID_GHELLO, ID_EOT_TEXT, ID_IM_START, ID_IM, ID_ENDOFTEXT,
    ID_TOOL, ID_RETURN, ID_CALL, ID_END, ID_COUNT
};
static char g_bytechars[256][4];
static const char *g_bpe_tokens[ID_COUNT];
static uint32_t g_bpe_len[ID_COUNT];
static int32_t g_bpe_types[ID_COUNT];
static const char *g_bpe_merges[] = {"h e", "l l", "he ll", "hell o", "\xc4\xa0 hello",
                                     "broken-merge-without-space"};

static void init_bpe_tables(void)
{
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        size_t k = gm_utf8_encode(gm_bytelevel_cp((uint8_t)b), u);
        memcpy(g_bytechars[b], u, k);
        g_bytechars[b][k] = 0;
        g_bpe_tokens[b] = g_bytechars[b];
        g_bpe_types[b] = T_NORMAL;
    }
    static const char *const extra[] = {"he", "ll", "hell", "hello", "\xc4\xa0hello",
                                        "<|im_end|>", "<|im_start|>", "<|im", "<|endoftext|>",
                                        "<tool>", "<|return|>", "<|call|>", "<|end|>"};
    static const int32_t extra_type[] = {T_NORMAL, T_NORMAL, T_NORMAL, T_NORMAL, T_NORMAL,
                                         T_NORMAL /* not marked: found by its text */, T_CONTROL,
                                         T_CONTROL, T_CONTROL, T_USER, T_CONTROL, T_CONTROL,
                                         T_CONTROL};
    for (int i = 0; i < ID_COUNT - 256; i++) {
        g_bpe_tokens[256 + i] = extra[i];
        g_bpe_types[256 + i] = extra_type[i];
    }
    for (int i = 0; i < ID_COUNT; i++)
        g_bpe_len[i] = (uint32_t)strlen(g_bpe_tokens[i]);
}

static vspec bpe_spec(void)
{
    vspec v = {"gpt2", "qwen2", g_bpe_tokens, g_bpe_len, g_bpe_types, ID_COUNT, ID_COUNT, NULL,
               g_bpe_merges, sizeof g_bpe_merges / sizeof *g_bpe_merges, ID_ENDOFTEXT, -1, -1, -1};
    return v;
}

static gm_tokenizer *bpe_tok(void)
{
    vspec v = bpe_spec();
    gm_tokenizer *t = NULL;
    gm_err err = {0};
    if (load_spec(&v, "bpe", &t, &err))
        fail_msg("%s", err.msg);
    return t;
}

static size_t enc(const gm_tokenizer *t, const char *s, size_t n, unsigned flags, int32_t *ids,
                  size_t cap)
{
    size_t k = 0;
    gm_err err = {0};
    if (gm_tokenizer_encode(t, s, n, flags, ids, cap, &k, &err))
        fail_msg("encode: %s", err.msg);
    return k;
}

/* ---- UTF-8 helpers ---- */

static void test_utf8_classify(void **state)
{
    (void)state;
    size_t len;
    assert_int_equal(gm_utf8_classify((const uint8_t *)"a", 1, &len), GM_UTF8_OK);
    assert_int_equal(len, 1);
    assert_int_equal(gm_utf8_classify((const uint8_t *)"\xc3\xa9", 2, &len), GM_UTF8_OK);
    assert_int_equal(len, 2);
    assert_int_equal(gm_utf8_classify((const uint8_t *)"\xf0\x9f\x9a\x80", 4, &len), GM_UTF8_OK);
    assert_int_equal(len, 4);
    assert_int_equal(gm_utf8_classify((const uint8_t *)"\xf0\x9f", 2, &len), GM_UTF8_SHORT);
    assert_int_equal(len, 2);
    /* overlong, surrogate, above U+10FFFF, lone continuation, bad continuation */
    assert_int_equal(gm_utf8_classify((const uint8_t *)"\xc0\xaf", 2, &len), GM_UTF8_BAD);
    assert_int_equal(gm_utf8_classify((const uint8_t *)"\xe0\x80\xaf", 3, &len), GM_UTF8_BAD);
    assert_int_equal(gm_utf8_classify((const uint8_t *)"\xed\xa0\x80", 3, &len), GM_UTF8_BAD);
    assert_int_equal(gm_utf8_classify((const uint8_t *)"\xf4\x90\x80\x80", 4, &len), GM_UTF8_BAD);
    assert_int_equal(gm_utf8_classify((const uint8_t *)"\x80", 1, &len), GM_UTF8_BAD);
    assert_int_equal(gm_utf8_classify((const uint8_t *)"\xe2\x82x", 3, &len), GM_UTF8_BAD);
    assert_int_equal(len, 2);
    uint8_t u[4];
    assert_int_equal(gm_utf8_encode(0x20AC, u), 3);
    assert_memory_equal(u, "\xe2\x82\xac", 3);
    assert_int_equal(gm_utf8_decode(u, 3), 0x20AC);
}

static void test_bytelevel_map(void **state)
{
    (void)state;
    int seen[400] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = gm_bytelevel_cp((uint8_t)b);
        assert_true(cp < 400);
        assert_int_equal(seen[cp], 0);
        seen[cp] = 1;
        assert_int_equal(gm_bytelevel_byte(cp), b);
    }
    assert_int_equal(gm_bytelevel_cp(' '), 0x120);  /* Ġ */
    assert_int_equal(gm_bytelevel_cp('\n'), 0x10A); /* Ċ */
    assert_int_equal(gm_bytelevel_byte(0x2581), -1);
}

static void test_pretok_all_compile(void **state)
{
    (void)state;
    for (int i = 0; i < gm_pretok_n_entries(); i++) {
        const char *name = gm_pretok_entry_name(i);
        gm_pretok p;
        gm_err err = {0};
        if (gm_pretok_init(&p, name, strlen(name), &err))
            fail_msg("%s", err.msg);
        assert_true(p.n_re > 0);
        gm_pretok_free(&p);
    }
    gm_pretok p;
    gm_err err = {0};
    assert_int_equal(gm_pretok_init(&p, "no-such-pre", 11, &err), GM_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "no-such-pre"));
}

/* \s is Unicode's White_Space, as in llama.cpp and the Hugging Face tokenizers: U+180E
 * MONGOLIAN VOWEL SEPARATOR (a format character since Unicode 6.3; PCRE2's \s still takes it)
 * is punctuation to the GPT-2 regex: "a \u180Eb" splits as "a", " \u180E", "b". Real spaces
 * (U+3000, U+00A0) stay spaces. */
static void test_pretok_white_space(void **state)
{
    (void)state;
    gm_pretok p;
    gm_err err = {0};
    assert_int_equal(gm_pretok_init(&p, "gpt-2", 5, &err), 0);
    void *md = gm_pretok_match_data();
    gm_spans out = {0}, tmp = {0};
    const char *text = "a \xe1\xa0\x8e" "b";
    assert_int_equal(gm_pretok_split(&p, text, strlen(text), &out, &tmp, md, &err), 0);
    assert_int_equal(out.n, 3);
    assert_int_equal(out.v[1].off, 1);
    assert_int_equal(out.v[1].len, 4);
    /* an ideographic space before a letter: the letter's leading-space rule does not take it,
     * the space run does ("\s+(?!\S)") */
    const char *text2 = "a\xe3\x80\x80" "b";
    assert_int_equal(gm_pretok_split(&p, text2, strlen(text2), &out, &tmp, md, &err), 0);
    assert_int_equal(out.n, 3);
    assert_int_equal(out.v[1].len, 3);
    gm_spans_free(&out);
    gm_spans_free(&tmp);
    gm_pretok_match_data_free(md);
    gm_pretok_free(&p);
}

/* Long runs of one character class, for every pre-tokenizer: the split must succeed, cover
 * the text exactly with non-empty pieces, and not take quadratic time (the JIT's backtracking
 * limit falls back to the interpreter, then to keeping the rest whole). */
static void test_pretok_hostile(void **state)
{
    (void)state;
    static const char *const pats[] = {" ", "a", " a", "\r\n", "'", "1", "!", "\xe4\xb8\xad",
                                        "\xff", " \n", "\t ", "a'", "A", "aA"};
    enum { N = 20000 };
    char *s = malloc(N + 8);
    assert_non_null(s);
    void *md = gm_pretok_match_data();
    assert_non_null(md);
    for (int e = 0; e < gm_pretok_n_entries(); e++) {
        const char *name = gm_pretok_entry_name(e);
        gm_pretok p;
        gm_err err = {0};
        assert_int_equal(gm_pretok_init(&p, name, strlen(name), &err), 0);
        for (size_t k = 0; k < sizeof pats / sizeof *pats; k++) {
            size_t pl = strlen(pats[k]), m = 0;
            while (m + pl <= N) {
                memcpy(s + m, pats[k], pl);
                m += pl;
            }
            s[m++] = 'x';
            gm_spans out = {0}, tmp = {0};
            if (gm_pretok_split(&p, s, m, &out, &tmp, md, &err))
                fail_msg("%s pattern %zu: %s", name, k, err.msg);
            size_t pos = 0;
            for (size_t i = 0; i < out.n; i++) {
                assert_int_equal(out.v[i].off, pos);
                assert_true(out.v[i].len > 0);
                pos += out.v[i].len;
            }
            assert_int_equal(pos, m);
            gm_spans_free(&out);
            gm_spans_free(&tmp);
        }
        gm_pretok_free(&p);
    }
    gm_pretok_match_data_free(md);
    free(s);
}

/* ---- BPE ---- */

static void test_bpe_merges(void **state)
{
    (void)state;
    gm_tokenizer *t = bpe_tok();
    const gm_tokenizer_info *in = gm_tokenizer_get_info(t);
    assert_int_equal(in->kind, GM_TOKENIZER_KIND_BPE);
    assert_string_equal(in->pre, "qwen2");
    assert_int_equal(in->n_vocab, ID_COUNT);
    assert_int_equal(in->n_merges, 5); /* the malformed merge is skipped */
    assert_int_equal(in->eos, ID_ENDOFTEXT);
    assert_false(in->add_bos);

    int32_t ids[64];
    size_t n = enc(t, "hello hello", 11, 0, ids, 64);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], ID_HELLO);
    assert_int_equal(ids[1], ID_GHELLO);
    /* "hel" -> he + l; unknown text falls to byte tokens */
    n = enc(t, "helx", 4, 0, ids, 64);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], ID_HE);
    assert_int_equal(ids[1], 'l');
    assert_int_equal(ids[2], 'x');
    /* empty input */
    assert_int_equal(enc(t, "", 0, 0, ids, 64), 0);
    assert_int_equal(gm_tokenizer_find(t, "hello", 5), ID_HELLO);
    assert_int_equal(gm_tokenizer_find(t, "nope", 4), -1);
    gm_tokenizer_free(t);
}

static void test_special_tokens(void **state)
{
    (void)state;
    gm_tokenizer *t = bpe_tok();
    int32_t ids[64];
    const char *s = "<|im_start|>hello<|im_end|><tool><|im";
    size_t n = enc(t, s, strlen(s), GM_ENCODE_PARSE_SPECIAL, ids, 64);
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], ID_IM_START); /* longest first: not "<|im" + "_start|>" */
    assert_int_equal(ids[1], ID_HELLO);
    assert_int_equal(ids[2], ID_EOT_TEXT);
    assert_int_equal(ids[3], ID_TOOL);
    assert_int_equal(ids[4], ID_IM);
    /* without parse_special only the user-defined token is matched */
    n = enc(t, s, strlen(s), 0, ids, 64);
    int n_tool = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_not_equal(ids[i], ID_IM_START);
        assert_int_not_equal(ids[i], ID_EOT_TEXT);
        n_tool += ids[i] == ID_TOOL;
    }
    assert_int_equal(n_tool, 1);
    /* the text between specials is unchanged when decoded */
    char out[256];
    size_t no;
    gm_err err = {0};
    assert_int_equal(gm_tokenizer_decode(t, ids, n, 0, out, sizeof out, &no, &err), 0);
    assert_int_equal(no, strlen(s));
    assert_memory_equal(out, s, no);
    gm_tokenizer_free(t);
}

static void test_add_special(void **state)
{
    (void)state;
    vspec v = bpe_spec();
    v.bos = ID_IM_START;
    v.add_bos = 1;
    gm_tokenizer *t = NULL;
    gm_err err = {0};
    assert_int_equal(load_spec(&v, "bos", &t, &err), 0);
    int32_t ids[8];
    assert_int_equal(enc(t, "hello", 5, GM_ENCODE_ADD_SPECIAL, ids, 8), 2);
    assert_int_equal(ids[0], ID_IM_START);
    assert_int_equal(ids[1], ID_HELLO);
    assert_int_equal(enc(t, "hello", 5, 0, ids, 8), 1);
    gm_tokenizer_free(t);
}

/* ---- end of generation ---- */

static void test_eog(void **state)
{
    (void)state;
    gm_tokenizer *t = bpe_tok();
    assert_true(gm_tokenizer_is_eog(t, ID_ENDOFTEXT)); /* eos from metadata */
    assert_true(gm_tokenizer_is_eog(t, ID_EOT_TEXT));  /* <|im_end|> by its text */
    /* a marker found by text becomes a control token: not rendered unless asked */
    assert_int_equal(gm_tokenizer_token_type(t, ID_EOT_TEXT), GM_TOKEN_TYPE_CONTROL);
    assert_int_equal(gm_tokenizer_get_info(t)->eot, ID_EOT_TEXT);
    /* harmony: <|return|> and <|call|> end generation, <|end|> only ends a message */
    assert_true(gm_tokenizer_is_eog(t, ID_RETURN));
    assert_true(gm_tokenizer_is_eog(t, ID_CALL));
    assert_false(gm_tokenizer_is_eog(t, ID_END));
    assert_int_equal(gm_tokenizer_token_type(t, ID_END), GM_TOKEN_TYPE_USER_DEFINED);
    assert_false(gm_tokenizer_is_eog(t, ID_HELLO));
    assert_false(gm_tokenizer_is_eog(t, ID_IM_START));
    assert_false(gm_tokenizer_is_eog(t, -1));
    assert_false(gm_tokenizer_is_eog(t, ID_COUNT));
    assert_int_equal(gm_tokenizer_get_info(t)->n_eog, 4);
    gm_tokenizer_free(t);

    /* without <|return|>/<|call|>, <|end|> ends generation (Phi-style) */
    vspec v = bpe_spec();
    static const char *toks[ID_COUNT];
    memcpy(toks, g_bpe_tokens, sizeof toks);
    toks[ID_RETURN] = "<|end|>";
    v.tokens = toks;
    static uint32_t lens[ID_COUNT];
    memcpy(lens, g_bpe_len, sizeof lens);
    lens[ID_RETURN] = 7;
    v.tok_len = lens;
    v.n_tokens = v.n_types = ID_RETURN + 1; /* no <|call|>: "<|end|>" is the last token */
    v.eos = -1;
    v.eot = ID_HELLO; /* metadata wins over text detection */
    gm_err err = {0};
    assert_int_equal(load_spec(&v, "phi", &t, &err), 0);
    assert_true(gm_tokenizer_is_eog(t, ID_RETURN)); /* "<|end|>" here */
    assert_true(gm_tokenizer_is_eog(t, ID_HELLO));
    assert_true(gm_tokenizer_is_eog(t, ID_EOT_TEXT));
    assert_true(gm_tokenizer_is_eog(t, ID_ENDOFTEXT)); /* by text, eos key absent */
    assert_int_equal(gm_tokenizer_get_info(t)->eos, -1);
    gm_tokenizer_free(t);

    /* FIM pad / repo / file-separator tokens end generation, found by their text when the
     * fim_*_token_id keys are absent (Qwen's <|fim_pad|>, <|repo_name|>, <|file_sep|>) */
    v = bpe_spec();
    memcpy(toks, g_bpe_tokens, sizeof toks);
    memcpy(lens, g_bpe_len, sizeof lens);
    toks[ID_IM] = "<|fim_pad|>";
    toks[ID_TOOL] = "<|repo_name|>";
    toks[ID_HELL] = "<|file_sep|>";
    lens[ID_IM] = 11;
    lens[ID_TOOL] = 13;
    lens[ID_HELL] = 12;
    v.tokens = toks;
    v.tok_len = lens;
    assert_int_equal(load_spec(&v, "fim", &t, &err), 0);
    assert_true(gm_tokenizer_is_eog(t, ID_IM));
    assert_true(gm_tokenizer_is_eog(t, ID_TOOL));
    assert_true(gm_tokenizer_is_eog(t, ID_HELL));
    assert_int_equal(gm_tokenizer_token_type(t, ID_HELL), GM_TOKEN_TYPE_CONTROL);
    assert_false(gm_tokenizer_is_eog(t, ID_HELLO));
    gm_tokenizer_free(t);
}

/* ---- decoding ---- */

static void push_expect(gm_detok *d, int32_t id, const char *want, size_t want_len)
{
    char out[64];
    size_t n = 99;
    gm_err err = {0};
    if (gm_detok_push(d, id, out, sizeof out, &n, &err))
        fail_msg("push %d: %s", id, err.msg);
    assert_int_equal(n, want_len);
    assert_memory_equal(out, want, want_len);
}

static void test_stream_utf8(void **state)
{
    (void)state;
    gm_tokenizer *t = bpe_tok();
    gm_detok d;
    gm_detok_init(&d, t, 0);
    /* é = C3 A9, one byte token each */
    push_expect(&d, 0xC3, "", 0);
    push_expect(&d, 0xA9, "\xc3\xa9", 2);
    /* 🚀 = F0 9F 9A 80 over four tokens, then ASCII */
    push_expect(&d, 0xF0, "", 0);
    push_expect(&d, 0x9F, "", 0);
    push_expect(&d, 0x9A, "", 0);
    push_expect(&d, 0x80, "\xf0\x9f\x9a\x80", 4);
    push_expect(&d, ID_HELLO, "hello", 5);
    /* a broken sequence: C3 then 'a' -> U+FFFD then 'a' */
    push_expect(&d, 0xC3, "", 0);
    push_expect(&d, 'a', "\xef\xbf\xbd" "a", 4);
    /* bytes that never start UTF-8 */
    push_expect(&d, 0xFF, "\xef\xbf\xbd", 3);
    push_expect(&d, 0x80, "\xef\xbf\xbd", 3);
    /* control tokens: nothing unless rendering is asked */
    push_expect(&d, ID_IM_START, "", 0);
    push_expect(&d, ID_TOOL, "<tool>", 6); /* user-defined: always written */
    /* an incomplete sequence at the end becomes U+FFFD */
    push_expect(&d, 0xE2, "", 0);
    push_expect(&d, 0x82, "", 0);
    char out[8];
    size_t n;
    gm_err err = {0};
    assert_int_equal(gm_detok_finish(&d, out, sizeof out, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "\xef\xbf\xbd", 3);
    assert_int_equal(gm_detok_finish(&d, out, sizeof out, &n, &err), 0);
    assert_int_equal(n, 0);

    gm_detok_init(&d, t, GM_DECODE_RENDER_SPECIAL);
    push_expect(&d, ID_IM_START, "<|im_start|>", 12);
    /* a bad id is refused and changes nothing */
    assert_int_equal(gm_detok_push(&d, ID_COUNT, out, sizeof out, &n, &err), GM_EINVAL);
    assert_int_equal(gm_detok_push(&d, -5, out, sizeof out, &n, NULL), GM_EINVAL);
    assert_true(gm_detok_max_out(t) >= 3 * 12);
    gm_tokenizer_free(t);
}

static void test_small_buffers(void **state)
{
    (void)state;
    gm_tokenizer *t = bpe_tok();
    const char *s = "hello hello hello hello";
    int32_t ids[2];
    size_t n = 0;
    gm_err err = {0};
    assert_int_equal(gm_tokenizer_encode(t, s, strlen(s), 0, ids, 2, &n, &err), GM_ERANGE);
    assert_int_equal(err.code, GM_ERANGE);
    assert_non_null(strstr(err.msg, "token slots"));
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], ID_HELLO);
    /* counting mode */
    assert_int_equal(gm_tokenizer_encode(t, s, strlen(s), 0, NULL, 0, &n, NULL), 0);
    assert_int_equal(n, 4);
    /* NULL arguments */
    assert_int_equal(gm_tokenizer_encode(t, NULL, 3, 0, ids, 2, &n, NULL), GM_EINVAL);
    assert_int_equal(gm_tokenizer_encode(t, s, 3, 0, NULL, 2, &n, NULL), GM_EINVAL);

    /* decode: too small gives the size needed, counting mode too */
    int32_t all[4] = {ID_HELLO, ID_GHELLO, ID_GHELLO, 0xC3};
    char out[64];
    gm_err e2 = {0};
    assert_int_equal(gm_tokenizer_decode(t, all, 4, 0, out, 8, &n, &e2), GM_ERANGE);
    assert_int_equal(e2.code, GM_ERANGE);
    assert_int_equal(n, 5 + 6 + 6 + 3);
    assert_int_equal(gm_tokenizer_decode(t, all, 4, 0, NULL, 0, &n, NULL), 0);
    assert_int_equal(n, 20);
    assert_int_equal(gm_tokenizer_decode(t, all, 4, 0, out, sizeof out, &n, NULL), 0);
    assert_int_equal(n, 20);
    assert_memory_equal(out, "hello hello hello\xef\xbf\xbd", 20);
    all[1] = 99999;
    assert_int_equal(gm_tokenizer_decode(t, all, 4, 0, out, sizeof out, &n, NULL), GM_EINVAL);

    /* streaming: too small leaves the state as it was */
    gm_detok d;
    gm_detok_init(&d, t, 0);
    push_expect(&d, 0xC3, "", 0);
    gm_err e3 = {0};
    assert_int_equal(gm_detok_push(&d, ID_HELLO, out, 3, &n, &e3), GM_ERANGE);
    assert_int_equal(n, 8); /* U+FFFD + "hello" */
    push_expect(&d, 0xA9, "\xc3\xa9", 2);
    gm_tokenizer_free(t);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    gm_tokenizer *t = bpe_tok();
    /* Every byte string must encode without error, and the token pieces must give back the
     * exact bytes (byte-level BPE can express any byte). */
    static const char *const inputs[] = {
        "\xff\xfe hello \xc3", "\x80\x80\x80", "a\xc3(b", "\xed\xa0\x80 x", "\xf4\x90\x80\x80",
        "hello\x00world", "\xe2\x82", "  \xff\n\n\xfe\t",
    };
    static const size_t lens[] = {10, 3, 4, 5, 4, 11, 2, 7};
    for (size_t k = 0; k < sizeof inputs / sizeof *inputs; k++) {
        int32_t ids[64];
        size_t n = enc(t, inputs[k], lens[k], GM_ENCODE_PARSE_SPECIAL, ids, 64);
        char buf[256];
        size_t off = 0;
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            const char *p = gm_tokenizer_piece(t, ids[i], GM_DECODE_RENDER_SPECIAL, &pl);
            assert_non_null(p);
            assert_true(off + pl <= sizeof buf);
            memcpy(buf + off, p, pl);
            off += pl;
        }
        assert_int_equal(off, lens[k]);
        assert_memory_equal(buf, inputs[k], lens[k]);
        /* and decoding gives valid UTF-8 */
        char out[512];
        size_t no;
        assert_int_equal(gm_tokenizer_decode(t, ids, n, 0, out, sizeof out, &no, NULL), 0);
        for (size_t i = 0; i < no;) {
            size_t cl;
            assert_int_equal(gm_utf8_classify((const uint8_t *)out + i, no - i, &cl), GM_UTF8_OK);
            i += cl;
        }
    }
    /* a long run of one byte class stays bounded by the caller's buffer */
    size_t big = 1 << 20;
    char *s = malloc(big);
    assert_non_null(s);
    memset(s, 'x', big);
    int32_t ids[16];
    size_t n;
    gm_err err = {0};
    assert_int_equal(gm_tokenizer_encode(t, s, big, 0, ids, 16, &n, &err), GM_ERANGE);
    memset(s, 0xff, big);
    assert_int_equal(gm_tokenizer_encode(t, s, big, 0, NULL, 0, &n, NULL), 0);
    assert_int_equal(n, big);
    free(s);
    gm_tokenizer_free(t);
}

/* ---- broken metadata ---- */

static void test_bad_metadata(void **state)
{
    (void)state;
    gm_tokenizer *t = (gm_tokenizer *)1;
    gm_err err = {0};
    vspec v = bpe_spec();
    v.pre = "no-such-pre";
    assert_int_equal(load_spec(&v, "b1", &t, &err), GM_EUNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(err.msg, "no-such-pre"));

    v = bpe_spec();
    v.model = "bert";
    gm_err_clear(&err);
    assert_int_equal(load_spec(&v, "b2", &t, &err), GM_EUNSUPPORTED);

    v = bpe_spec();
    v.merges = NULL;
    gm_err_clear(&err);
    assert_int_equal(load_spec(&v, "b3", &t, &err), GM_ENOTFOUND);
    assert_non_null(strstr(err.msg, "merges"));

    v = bpe_spec();
    v.tokens = NULL;
    gm_err_clear(&err);
    assert_int_equal(load_spec(&v, "b4", &t, &err), GM_ENOTFOUND);

    v = bpe_spec();
    v.model = NULL;
    gm_err_clear(&err);
    assert_int_equal(load_spec(&v, "b5", &t, &err), GM_ENOTFOUND);

    v = bpe_spec();
    v.n_types = 10; /* fewer types than tokens */
    gm_err_clear(&err);
    assert_int_equal(load_spec(&v, "b6", &t, &err), GM_EFORMAT);

    /* an eos id outside the vocabulary is ignored, not trusted */
    v = bpe_spec();
    v.eos = 1u << 30;
    gm_err_clear(&err);
    assert_int_equal(load_spec(&v, "b7", &t, &err), 0);
    assert_int_equal(gm_tokenizer_get_info(t)->eos, -1);
    gm_tokenizer_free(t);

    /* a missing pre-tokenizer means "default" */
    v = bpe_spec();
    v.pre = NULL;
    assert_int_equal(load_spec(&v, "b8", &t, &err), 0);
    assert_string_equal(gm_tokenizer_get_info(t)->pre, "default");
    gm_tokenizer_free(t);

    /* duplicate and empty token texts do not break lookups */
    static const char *toks[ID_COUNT];
    memcpy(toks, g_bpe_tokens, sizeof toks);
    static uint32_t lens[ID_COUNT];
    memcpy(lens, g_bpe_len, sizeof lens);
    toks[ID_LL] = "he";
    lens[ID_LL] = 2;
    lens[ID_IM] = 0;
    v = bpe_spec();
    v.tokens = toks;
    v.tok_len = lens;
    assert_int_equal(load_spec(&v, "b9", &t, &err), 0);
    assert_int_equal(gm_tokenizer_find(t, "he", 2), ID_HE);
    int32_t ids[8];
    size_t n = enc(t, "<|im", 4, GM_ENCODE_PARSE_SPECIAL, ids, 8);
    assert_true(n > 1); /* the empty token is never matched */
    gm_tokenizer_free(t);
}

/* ---- SPM ---- */

static void test_spm(void **state)
{
    (void)state;
    enum { S_UNK = 0, S_BOS, S_EOS, S_BYTE0, S_SP = S_BYTE0 + 256, S_A, S_B, S_SPA, S_AB, S_SPAB,
           S_N };
    static char bytes[256][8];
    static const char *toks[S_N];
    static int32_t types[S_N];
    static float scores[S_N];
    toks[S_UNK] = "<unk>";
    types[S_UNK] = T_UNKNOWN;
    toks[S_BOS] = "<s>";
    types[S_BOS] = T_CONTROL;
    toks[S_EOS] = "</s>";
    types[S_EOS] = T_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[S_BYTE0 + b] = bytes[b];
        types[S_BYTE0 + b] = T_BYTE;
    }
    static const char *const words[] = {"\xe2\x96\x81", "a", "b", "\u2581a", "ab", "\u2581ab"};
    static const float sc[] = {-1, -2, -2, -3, -1.5f, -4};
    for (int i = 0; i < 6; i++) {
        toks[S_SP + i] = words[i];
        types[S_SP + i] = T_NORMAL;
        scores[S_SP + i] = sc[i];
    }
    vspec v = {"llama", NULL, toks, NULL, types, S_N, S_N, scores, NULL, 0, -1, -1, -1, -1};
    gm_tokenizer *t = NULL;
    gm_err err = {0};
    if (load_spec(&v, "spm", &t, &err))
        fail_msg("%s", err.msg);
    const gm_tokenizer_info *in = gm_tokenizer_get_info(t);
    assert_int_equal(in->kind, GM_TOKENIZER_KIND_SPM);
    assert_int_equal(in->bos, S_BOS); /* SPM defaults */
    assert_int_equal(in->eos, S_EOS);
    assert_int_equal(in->unk, S_UNK);
    assert_true(in->add_bos);
    assert_true(in->add_space_prefix);

    int32_t ids[32];
    /* "ab" -> "▁ab": "ab" (-1.5) merges before "▁a" (-3), then "▁" + "ab" -> "▁ab" */
    size_t n = enc(t, "ab", 2, GM_ENCODE_ADD_SPECIAL, ids, 32);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], S_BOS);
    assert_int_equal(ids[1], S_SPAB);
    /* unknown characters fall back to bytes */
    n = enc(t, "a\xc3\xa9", 3, 0, ids, 32);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], S_SPA);
    assert_int_equal(ids[1], S_BYTE0 + 0xC3);
    assert_int_equal(ids[2], S_BYTE0 + 0xA9);
    char out[32];
    size_t no;
    assert_int_equal(gm_tokenizer_decode(t, ids, n, GM_DECODE_STRIP_SPACE, out, sizeof out, &no,
                                         NULL), 0);
    assert_int_equal(no, 3);
    assert_memory_equal(out, "a\xc3\xa9", 3);
    assert_int_equal(gm_tokenizer_decode(t, ids, n, 0, out, sizeof out, &no, NULL), 0);
    assert_int_equal(no, 4);
    assert_memory_equal(out, " a\xc3\xa9", 4);
    /* special tokens in the text; the text after one gets the space prefix again */
    n = enc(t, "<s>ab</s>b", 10, GM_ENCODE_PARSE_SPECIAL, ids, 32);
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], S_BOS);
    assert_int_equal(ids[1], S_SPAB);
    assert_int_equal(ids[2], S_EOS);
    assert_int_equal(ids[3], S_SP);
    assert_int_equal(ids[4], S_B);
    assert_true(gm_tokenizer_is_eog(t, S_EOS));
    /* invalid bytes: byte tokens, no crash */
    n = enc(t, "\xff\xc3", 2, 0, ids, 32);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], S_BYTE0 + 0xFF);
    /* a symbol's length comes from its lead byte alone (llama.cpp's SPM): an invalid lead 0xE4
     * takes the "ab" after it into one 3-byte symbol, which is no token, so each of its bytes
     * becomes a byte token ("ab" is not merged) */
    n = enc(t, "\xe4" "ab", 3, 0, ids, 32);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], S_SP);
    assert_int_equal(ids[1], S_BYTE0 + 0xE4);
    assert_int_equal(ids[2], S_BYTE0 + 'a');
    assert_int_equal(ids[3], S_BYTE0 + 'b');
    gm_tokenizer_free(t);
}

/* ---- the committed model's vocabulary ---- */

static void test_trained_stream(void **state)
{
    (void)state;
    gm_gguf *g = NULL;
    gm_err err = {0};
    if (gm_gguf_open(&g, gm_fixture("trained-qwen3moe/model-q4_k_m.gguf"), &err))
        fail_msg("%s", err.msg);
    gm_tokenizer *t = NULL;
    if (gm_tokenizer_load(&t, g, &err))
        fail_msg("%s", err.msg);
    gm_gguf_close(g);
    assert_true(gm_tokenizer_is_eog(t, gm_tokenizer_get_info(t)->eos));
    int32_t im_end = gm_tokenizer_find(t, "<|im_end|>", 10);
    assert_true(im_end >= 0);
    assert_true(gm_tokenizer_is_eog(t, im_end));

    /* a 1014-token vocabulary splits most non-ASCII characters over several tokens */
    const char *s = "中文字符测试，日本語のテキスト、한국어 🚀🦙 👨\u200d👩 café";
    int32_t ids[512];
    size_t n = enc(t, s, strlen(s), 0, ids, 512);
    int split = 0;
    gm_detok d;
    gm_detok_init(&d, t, 0);
    char all[1024];
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        gm_tokenizer_piece(t, ids[i], 0, &pl);
        char chunk[256];
        size_t k;
        assert_true(gm_detok_max_out(t) <= sizeof chunk);
        assert_int_equal(gm_detok_push(&d, ids[i], chunk, sizeof chunk, &k, &err), 0);
        split += k != pl;
        /* every chunk is whole UTF-8 on its own */
        for (size_t j = 0; j < k;) {
            size_t cl;
            assert_int_equal(gm_utf8_classify((const uint8_t *)chunk + j, k - j, &cl), GM_UTF8_OK);
            j += cl;
        }
        memcpy(all + off, chunk, k);
        off += k;
    }
    size_t k;
    assert_int_equal(gm_detok_finish(&d, all + off, sizeof all - off, &k, &err), 0);
    assert_int_equal(k, 0);
    assert_true(split > 0);
    assert_int_equal(off, strlen(s));
    assert_memory_equal(all, s, off);
    gm_tokenizer_free(t);
}

int main(void)
{
    init_bpe_tables();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_classify),  cmocka_unit_test(test_bytelevel_map),
        cmocka_unit_test(test_pretok_all_compile), cmocka_unit_test(test_pretok_hostile),
        cmocka_unit_test(test_pretok_white_space),
        cmocka_unit_test(test_bpe_merges),
        cmocka_unit_test(test_special_tokens), cmocka_unit_test(test_add_special),
        cmocka_unit_test(test_eog),            cmocka_unit_test(test_stream_utf8),
        cmocka_unit_test(test_small_buffers),  cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_bad_metadata),   cmocka_unit_test(test_spm),
        cmocka_unit_test(test_trained_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
