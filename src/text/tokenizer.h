/* text/tokenizer: turns text into token ids and token ids back into text, from the vocabulary a
 * GGUF file carries (tokenizer.ggml.*).
 *
 * Owns: gm_tokenizer, a self-contained copy of the vocabulary (the gm_gguf may be closed once
 * gm_tokenizer_load returns), its merge ranks or scores, its special tokens, the compiled
 * pre-tokenizer regexes and a table of each token's decoded bytes.
 *
 * Supported vocabularies:
 *   - tokenizer.ggml.model = "gpt2": byte-level BPE (merges applied by rank) after the
 *     pre-tokenizer named by tokenizer.ggml.pre (see docs/tokenizer.md for the list);
 *   - tokenizer.ggml.model = "llama": SentencePiece-style BPE over scores, "▁" for spaces, byte
 *     fallback through the <0xXX> tokens.
 * Anything else gives GM_EUNSUPPORTED at load.
 *
 * Special tokens: control, unknown and user-defined tokens found in the input text are matched
 * as whole tokens before the text is split (longest first). User-defined tokens are always
 * matched; control and unknown tokens only with GM_ENCODE_PARSE_SPECIAL.
 *
 * End of generation: gm_tokenizer_is_eog says whether a token ends generation (EOS, EOT, EOM and
 * tokens whose text is a known end-of-turn marker, see docs/tokenizer.md).
 *
 * Hostile input: the text to encode may be any bytes. Bytes that are not valid UTF-8 are kept and
 * encoded as byte tokens (never dropped, never a crash). Output is bounded by the caller's
 * buffer: a buffer that is too small gives GM_ERANGE and says how much is needed.
 *
 * Threads: after gm_tokenizer_load returns, a gm_tokenizer is immutable: encode and decode may run
 * on any number of threads at once. A gm_detok (streaming decoder state) belongs to one thread.
 * Allocation: encoding allocates scratch space per call; decoding (gm_detok_push,
 * gm_tokenizer_piece, gm_tokenizer_decode) never allocates.
 */
#ifndef GM_TEXT_TOKENIZER_H
#define GM_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

typedef struct gm_tokenizer gm_tokenizer;

/* The algorithm a vocabulary uses. */
typedef enum gm_tokenizer_kind {
    GM_TOKENIZER_KIND_BPE = 0, /* "gpt2": byte-level BPE with merges */
    GM_TOKENIZER_KIND_SPM = 1, /* "llama": SentencePiece-style, scores and byte fallback */
} gm_tokenizer_kind;

/* Token types, with the numbers of tokenizer.ggml.token_type. */
typedef enum gm_token_type {
    GM_TOKEN_TYPE_UNDEFINED = 0, /* absent or out-of-range value in the file */
    GM_TOKEN_TYPE_NORMAL = 1,
    GM_TOKEN_TYPE_UNKNOWN = 2,
    GM_TOKEN_TYPE_CONTROL = 3,
    GM_TOKEN_TYPE_USER_DEFINED = 4,
    GM_TOKEN_TYPE_UNUSED = 5,
    GM_TOKEN_TYPE_BYTE = 6,
} gm_token_type;

/* Flags of gm_tokenizer_encode. */
enum gm_encode_flag {
    GM_ENCODE_ADD_SPECIAL = 1u << 0,   /* add BOS/EOS where the vocabulary asks for them */
    GM_ENCODE_PARSE_SPECIAL = 1u << 1, /* control/unknown token text in the input -> that token */
};

/* Flags of gm_detok_init, gm_tokenizer_piece and gm_tokenizer_decode. */
enum gm_decode_flag {
    GM_DECODE_RENDER_SPECIAL = 1u << 0, /* control/unknown tokens give their text (else nothing) */
    GM_DECODE_STRIP_SPACE = 1u << 1,    /* SPM: drop the space the encoder put before the text
                                         * (one leading space of the first non-empty piece).
                                         * Only for ids that start a text: the leading space of
                                         * a continuation (generated after a prompt) is real. */
};

/* Facts about a loaded vocabulary. Token ids are -1 where the vocabulary has none. */
typedef struct gm_tokenizer_info {
    gm_tokenizer_kind kind;
    const char *model;        /* tokenizer.ggml.model as given ("gpt2", "llama") */
    const char *pre;          /* tokenizer.ggml.pre as given, "default" when absent */
    uint32_t n_vocab;
    uint32_t n_merges;        /* BPE merges kept (0 for SPM) */
    int32_t bos, eos, eot, eom, pad, unk;
    bool add_bos;             /* GM_ENCODE_ADD_SPECIAL puts BOS first */
    bool add_eos;             /* GM_ENCODE_ADD_SPECIAL puts EOS last */
    bool add_space_prefix;    /* SPM: a space is put before the text (and after special tokens) */
    uint32_t n_eog;           /* tokens for which gm_tokenizer_is_eog is true */
    size_t max_piece_bytes;   /* longest decoded token, in bytes */
} gm_tokenizer_info;

/* Builds a tokenizer from g's tokenizer.ggml.* metadata. On failure *out is NULL and err says
 * what is missing or malformed: GM_ENOTFOUND (no vocabulary), GM_EFORMAT (a key of the wrong
 * type, arrays of mismatched lengths), GM_EUNSUPPORTED (unknown model or pre-tokenizer),
 * GM_ENOMEM. */
int gm_tokenizer_load(gm_tokenizer **out, const gm_gguf *g, gm_err *err);
void gm_tokenizer_free(gm_tokenizer *t);

const gm_tokenizer_info *gm_tokenizer_get_info(const gm_tokenizer *t);

/* The token's text as stored in the vocabulary (byte-level form for BPE, "▁" for SPM spaces),
 * not NUL-terminated; NULL (and *len 0) for an id out of range. */
const char *gm_tokenizer_token_text(const gm_tokenizer *t, int32_t id, size_t *len);
/* GM_TOKEN_TYPE_UNDEFINED for an id out of range. */
gm_token_type gm_tokenizer_token_type(const gm_tokenizer *t, int32_t id);
/* The id of the token whose stored text is exactly s[0..len), or -1. */
int32_t gm_tokenizer_find(const gm_tokenizer *t, const char *s, size_t len);

/* True when generating id should end generation: EOS, EOT, EOM, FIM pad/repo/separator, and
 * tokens whose text is a known end-of-turn marker (<|im_end|>, <|eot_id|>, <|endoftext|>, ...).
 * False for an id out of range. */
bool gm_tokenizer_is_eog(const gm_tokenizer *t, int32_t id);

/* Encodes text[0..text_len) (any bytes) into ids. Counting mode: with ids == NULL and
 * ids_cap == 0 nothing is written, *n_ids gets the count and 0 is returned. Otherwise, when more
 * than ids_cap ids would be produced, returns GM_ERANGE (err says so) as soon as that is known:
 * *n_ids is the number of leading ids written (ids_cap, or 0 when the text is too long to fit
 * at all: no token covers more bytes than the longest token text). flags: gm_encode_flag.
 * GM_EINVAL for NULL arguments, GM_ENOMEM when scratch space cannot be allocated. */
int gm_tokenizer_encode(const gm_tokenizer *t, const char *text, size_t text_len, unsigned flags,
                        int32_t *ids, size_t ids_cap, size_t *n_ids, gm_err *err);

/* The bytes of one token (not NUL-terminated): byte-level BPE decoded to raw bytes, "▁" turned
 * into spaces, <0xXX> into the byte; control/unknown tokens give their text only with
 * GM_DECODE_RENDER_SPECIAL. The bytes may be part of a UTF-8 sequence; use gm_detok to stream
 * text. Returns NULL (and *len 0) for an id out of range. Never allocates. */
const char *gm_tokenizer_piece(const gm_tokenizer *t, int32_t id, unsigned flags, size_t *len);

/* Streaming detokenisation: state for one generated sequence. Each push emits only complete
 * UTF-8 sequences; an incomplete one at the end of a token is held back until the next token
 * completes it. Bytes that cannot form valid UTF-8 become U+FFFD, so the output is always
 * valid UTF-8. The struct is plain data: put it on the stack or in a session; no allocation. */
typedef struct gm_detok {
    const gm_tokenizer *tok;
    unsigned flags;          /* gm_decode_flag */
    uint8_t held[4];         /* start of an incomplete UTF-8 sequence */
    uint8_t n_held;          /* 0..3 */
    bool started;            /* a non-empty piece was seen (for GM_DECODE_STRIP_SPACE) */
} gm_detok;

void gm_detok_init(gm_detok *d, const gm_tokenizer *t, unsigned flags);

/* Bytes of output one push may need at most: enough for any token of t. */
size_t gm_detok_max_out(const gm_tokenizer *t);

/* Adds token id; writes the bytes that became complete to out and their count to *n_out.
 * GM_EINVAL for an id out of range; GM_ERANGE when cap is too small (*n_out = bytes needed);
 * on error the state is unchanged and the push may be retried. */
int gm_detok_push(gm_detok *d, int32_t id, char *out, size_t cap, size_t *n_out, gm_err *err);

/* Ends the sequence: a held incomplete sequence is written as U+FFFD (at most 3 bytes). Leaves
 * the state ready for a new sequence. GM_ERANGE when cap is too small. */
int gm_detok_finish(gm_detok *d, char *out, size_t cap, size_t *n_out, gm_err *err);

/* Decodes a whole sequence (gm_detok over ids, then finish) into out. Counting mode: out == NULL
 * and cap == 0 gives the length in *n_out. GM_ERANGE when cap is too small (*n_out = bytes
 * needed), GM_EINVAL for an id out of range. No NUL is written. */
int gm_tokenizer_decode(const gm_tokenizer *t, const int32_t *ids, size_t n_ids, unsigned flags,
                        char *out, size_t cap, size_t *n_out, gm_err *err);

#endif
