/* text/pretok: pre-tokenizers of byte-level BPE vocabularies, one regex list per
 * tokenizer.ggml.pre value (the lists follow the tokenizer.json files of each family, as
 * llama.cpp documents them), compiled with PCRE2 in UTF + UCP mode so \p{L}, \p{N}, \s follow
 * Unicode. Invalid UTF-8 in the text is allowed (PCRE2_MATCH_INVALID_UTF): no pattern matches
 * an invalid byte, so such bytes end up in the text between matches, which is kept.
 * See text_impl.h for the splitting rule. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "text/text_impl.h"

/* The GPT-2 pattern (HF's ByteLevel pre-tokenizer), with its final \s+ alternative. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

#define RE_CONTRACTIONS_I "(?i:'s|'t|'re|'ve|'m|'ll|'d)"

#define RE_LLAMA3                                                                         \
    RE_CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
                      "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_QWEN2                                                                      \
    RE_CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
                      "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_QWEN35                                                                          \
    RE_CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+" \
                      "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* o200k (GPT-4o, gpt-oss, Llama 4, MiniMax-M2). */
#define RE_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_GPT4O                                                                              \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+" RE_CONTRACTIONS_I "?"                   \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*" RE_CONTRACTIONS_I "?"                  \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_TEKKEN                                                                      \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+"                                  \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*"                                 \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Kimi-K2: like o200k, with Han characters taken out of the letter classes and matched on
 * their own first ("[...&&[^\p{Han}]]" written as a negative lookahead). */
#define RE_K2_UPPER "(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define RE_K2_LOWER "(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
#define RE_KIMI_K2                                                                            \
    "\\p{Han}+"                                                                                \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_K2_UPPER "*" RE_K2_LOWER "+" RE_CONTRACTIONS_I "?"             \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_K2_UPPER "+" RE_K2_LOWER "*" RE_CONTRACTIONS_I "?"            \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* DeepSeek LLM: cased letters of many scripts as an explicit list. */
#define RE_DS_LETTERS                                                                            \
    "\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"          \
    "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}"          \
    "\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"  \
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"     \
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"                 \
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"                 \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"          \
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"         \
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"                 \
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"         \
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"          \
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"                   \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"                  \
    "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"                 \
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"                 \
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"             \
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"         \
    "\\x{1E900}-\\x{1E943}"

#define RE_DS3_MAIN                                                                         \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"      \
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"

typedef struct pretok_entry {
    const char *names[10];          /* the first is the canonical name */
    const char *re[GM_PRETOK_MAX_RE];
    bool ignore_merges, add_bos, no_bos;
} pretok_entry;

static const pretok_entry k_entries[] = {
    {{"default"},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false, false},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
     {RE_LLAMA3}, true, true, false},
    {{"dbrx", "smaug-bpe"}, {RE_LLAMA3}, false, false, false},
    {{"deepseek-llm"},
     {"[\\r\\n]", "\\s?[" RE_DS_LETTERS "]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      "\\s+$", "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}+"},
     false, false, false},
    {{"deepseek-coder"},
     {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
      "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"},
     false, false, false},
    {{"deepseek-v3", "deepseek3-llm", "hunyuan-dense", "joyai-llm", "hy_v4"},
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", RE_DS3_MAIN},
     false, false, false},
    {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, false, false},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
     {"\\p{N}", RE_GPT2}, false, false, false},
    {{"gpt-2", "mpt", "phi-2", "olmo", "jais", "trillion", "granite-docling", "exaone4", "gigachat",
      "mellum"},
     {RE_GPT2}, false, false, false},
    {{"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez", "solar-open", "kormo",
      "grok-2"},
     {RE_QWEN2}, false, false, false},
    {{"qwen35"}, {RE_QWEN35}, false, false, false},
    {{"glm4", "chatglm-bpe"}, {RE_LLAMA3}, false, false, true},
    {{"gpt-4o", "llama4", "minimax-m2", "kanana2"}, {RE_GPT4O}, false, false, false},
    {{"tekken"}, {RE_TEKKEN}, true, true, false},
    {{"kimi-k2"}, {RE_KIMI_K2}, false, false, false},
    {{"bailingmoe", "bailingmoe2", "llada-moe"},
     {"'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*"
      "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
     false, false, false},
    {{"seed-coder"},
     {RE_CONTRACTIONS_I "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+"
                        "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     false, false, false},
    {{"poro-chat", "bloom", "gpt3-finnish"}, {RE_BLOOM}, false, false, false},
    {{"viking"}, {RE_BLOOM, "\\p{N}"}, false, false, false},
};

#define N_ENTRIES ((int)(sizeof k_entries / sizeof k_entries[0]))

int gm_pretok_n_entries(void)
{
    return N_ENTRIES;
}

const char *gm_pretok_entry_name(int i)
{
    return (i >= 0 && i < N_ENTRIES) ? k_entries[i].names[0] : NULL;
}

static const pretok_entry *find_entry(const char *name, size_t len)
{
    for (int i = 0; i < N_ENTRIES; i++)
        for (int j = 0; j < 10 && k_entries[i].names[j]; j++)
            if (strlen(k_entries[i].names[j]) == len && memcmp(k_entries[i].names[j], name, len) == 0)
                return &k_entries[i];
    return NULL;
}

/* Unicode's White_Space set, as a class body. PCRE2's \s (with UCP) also takes U+180E MONGOLIAN
 * VOWEL SEPARATOR, which Unicode stopped counting as a space in 6.3 and which llama.cpp's and
 * the Hugging Face tokenizers' \s do not match. */
#define WHITE_SPACE "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* re with every \s and \S outside a class, and every \s inside one, spelled as WHITE_SPACE, into
 * out; 0, or -1 when out is too small. */
static int white_space_re(const char *re, char *out, size_t cap)
{
    size_t n = 0;
    bool in_class = false;
#define PUT(str)                                                                                   \
    do {                                                                                           \
        size_t l_ = strlen(str);                                                                   \
        if (n + l_ + 1 > cap)                                                                      \
            return -1;                                                                             \
        memcpy(out + n, str, l_);                                                                  \
        n += l_;                                                                                   \
    } while (0)
    for (const char *c = re; *c; c++) {
        char one[3] = {c[0], 0, 0};
        if (c[0] == '\\' && c[1]) {
            if (c[1] == 's')
                PUT(in_class ? WHITE_SPACE : "[" WHITE_SPACE "]");
            else if (c[1] == 'S' && !in_class)
                PUT("[^" WHITE_SPACE "]");
            else {
                one[1] = c[1];
                PUT(one);
            }
            c++;
            continue;
        }
        if (c[0] == '[' && !in_class)
            in_class = true;
        else if (c[0] == ']' && in_class)
            in_class = false;
        PUT(one);
    }
#undef PUT
    out[n] = '\0';
    return 0;
}

int gm_pretok_init(gm_pretok *p, const char *name, size_t len, gm_err *err)
{
    memset(p, 0, sizeof *p);
    const pretok_entry *e = find_entry(name, len);
    if (!e)
        return gm_err_set(err, GM_EUNSUPPORTED, "tokenizer: unknown pre-tokenizer '%.*s'",
                          (int)(len > 64 ? 64 : len), name);
    p->name = e->names[0];
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    if (!mc)
        return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory for the regex context");
    /* Bounds for the interpreter fallback: about 10 M steps and 64 MiB of backtracking. */
    pcre2_set_match_limit(mc, 10000000);
    pcre2_set_heap_limit(mc, 64 * 1024);
    p->mctx = mc;
    p->ignore_merges = e->ignore_merges;
    p->add_bos = e->add_bos;
    p->no_bos = e->no_bos;
    for (int i = 0; i < GM_PRETOK_MAX_RE && e->re[i]; i++) {
        int ecode;
        PCRE2_SIZE eoff;
        /* DOLLAR_ENDONLY: "$" is the end of the piece, never "before a final newline". */
        uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
        char spelled[8192];
        if (white_space_re(e->re[i], spelled, sizeof spelled) != 0) {
            gm_pretok_free(p);
            return gm_err_set(err, GM_EUNSUPPORTED, "tokenizer: pre-tokenizer '%s' regex %d is too long",
                              e->names[0], i);
        }
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)spelled, PCRE2_ZERO_TERMINATED, opts, &ecode,
                                       &eoff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ecode, msg, sizeof msg);
            gm_pretok_free(p);
            return gm_err_set(err, GM_EUNSUPPORTED,
                              "tokenizer: pre-tokenizer '%s' regex %d does not compile at %zu: %s",
                              e->names[0], i, (size_t)eoff, (const char *)msg);
        }
        /* JIT when this build of PCRE2 has it; the interpreter gives the same matches. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        p->re[p->n_re++] = re;
    }
    return 0;
}

void gm_pretok_free(gm_pretok *p)
{
    for (int i = 0; i < p->n_re; i++)
        pcre2_code_free((pcre2_code *)p->re[i]);
    pcre2_match_context_free((pcre2_match_context *)p->mctx);
    memset(p, 0, sizeof *p);
}

void *gm_pretok_match_data(void)
{
    return pcre2_match_data_create(1, NULL);
}

void gm_pretok_match_data_free(void *md)
{
    pcre2_match_data_free((pcre2_match_data *)md);
}

int gm_spans_push(gm_spans *s, size_t off, size_t len, gm_err *err)
{
    if (s->n == s->cap) {
        size_t c2 = s->cap ? s->cap * 2 : 64;
        if (c2 > SIZE_MAX / sizeof *s->v)
            return gm_err_set(err, GM_ENOMEM, "tokenizer: too many pieces");
        gm_span *v2 = realloc(s->v, c2 * sizeof *v2);
        if (!v2)
            return gm_err_set(err, GM_ENOMEM, "tokenizer: out of memory splitting text");
        s->v = v2;
        s->cap = c2;
    }
    s->v[s->n].off = off;
    s->v[s->n].len = len;
    s->n++;
    return 0;
}

void gm_spans_free(gm_spans *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* True for the errors that mean "this input needs more backtracking than allowed". */
static bool is_limit_error(int m)
{
    return m == PCRE2_ERROR_JIT_STACKLIMIT || m == PCRE2_ERROR_MATCHLIMIT ||
           m == PCRE2_ERROR_DEPTHLIMIT || m == PCRE2_ERROR_HEAPLIMIT ||
           m == PCRE2_ERROR_NOMEMORY;
}

/* Splits one piece with one regex: matches and the text between them, in order. A match that
 * runs out of backtracking room under the JIT is retried with the interpreter (bounded by the
 * match context's limits); if that fails too, the rest of the piece is kept whole, as if
 * nothing matched there: hostile input then gets a coarser split, never an error. */
static int split_piece(pcre2_code *re, const pcre2_match_context *mc, const char *text,
                       gm_span piece, gm_spans *out, pcre2_match_data *md, gm_err *err)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + piece.off);
    size_t n = piece.len, pos = 0, last = 0;
    int rc;
    while (pos < n) {
        int m = pcre2_match(re, subj, n, pos, 0, md, NULL);
        if (is_limit_error(m))
            m = pcre2_match(re, subj, n, pos, PCRE2_NO_JIT, md, (pcre2_match_context *)mc);
        if (m == PCRE2_ERROR_NOMATCH || is_limit_error(m))
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(m, msg, sizeof msg);
            return gm_err_set(err, GM_ERANGE, "tokenizer: pre-tokenizer regex failed at byte %zu: %s",
                              piece.off + pos, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms < pos || me < ms || me > n) /* cannot happen without \K; be safe */
            break;
        if (me == ms) {
            /* An empty match splits nothing; look again one character further. */
            pos = ms + gm_utf8_char_len((const uint8_t *)subj + ms, n - ms);
            continue;
        }
        if (ms > last && (rc = gm_spans_push(out, piece.off + last, ms - last, err)))
            return rc;
        if ((rc = gm_spans_push(out, piece.off + ms, me - ms, err)))
            return rc;
        last = pos = me;
    }
    if (last < n && (rc = gm_spans_push(out, piece.off + last, n - last, err)))
        return rc;
    return 0;
}

int gm_pretok_split(const gm_pretok *p, const char *text, size_t len, gm_spans *out,
                    gm_spans *tmp, void *md, gm_err *err)
{
    out->n = 0;
    int rc;
    if (len == 0)
        return 0;
    if ((rc = gm_spans_push(out, 0, len, err)))
        return rc;
    for (int r = 0; r < p->n_re; r++) {
        gm_spans t = *tmp;
        t.n = 0;
        for (size_t i = 0; i < out->n; i++) {
            if ((rc = split_piece((pcre2_code *)p->re[r], p->mctx, text, out->v[i], &t, md,
                                  err))) {
                *tmp = t;
                return rc;
            }
        }
        *tmp = *out;
        *out = t;
    }
    return 0;
}
