/* The public text API: vocabularies (from a file's header or a loaded model), tokenising and
 * streaming detokenisation (gmlx.h "text"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/err.h"
#include "gguf/gguf.h"

static char *dup_str(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

static char *token_text(const gm_tokenizer *t, int32_t id)
{
    size_t n = 0;
    const char *p = id >= 0 ? gm_tokenizer_token_text(t, id, &n) : NULL;
    return dup_str(p ? p : "", p ? n : 0);
}

void gm_vocab_clear(gm_vocab *v)
{
    gm_tokenizer_free(v->tok);
    free(v->chat_template);
    free(v->bos_text);
    free(v->eos_text);
    memset(v, 0, sizeof *v);
}

int gm_vocab_fill(gm_vocab *v, const gm_gguf *g, gm_err *err)
{
    memset(v, 0, sizeof *v);
    int rc = gm_tokenizer_load(&v->tok, g, err);
    if (rc)
        return rc;
    gm_gguf_str s;
    gm_err ignore = {0};
    if (gm_gguf_get_str(g, "general.architecture", &s, &ignore) == 0)
        snprintf(v->arch, sizeof v->arch, "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
    gm_err_clear(&ignore);
    if (gm_gguf_get_str(g, "tokenizer.chat_template", &s, &ignore) == 0 &&
        !(v->chat_template = dup_str(s.ptr, s.len)))
        goto oom;
    uint64_t ctx = 0;
    char key[96];
    snprintf(key, sizeof key, "%s.context_length", v->arch);
    gm_err_clear(&ignore);
    if (v->arch[0] && gm_gguf_get_u64(g, key, &ctx, &ignore) == 0 && ctx <= UINT32_MAX)
        v->info.n_ctx_train = (uint32_t)ctx;
    const gm_tokenizer_info *ti = gm_tokenizer_get_info(v->tok);
    if (!(v->bos_text = token_text(v->tok, ti->bos)) || !(v->eos_text = token_text(v->tok, ti->eos)))
        goto oom;
    v->info.arch = v->arch;
    v->info.n_vocab = ti->n_vocab;
    v->info.bos = ti->bos;
    v->info.eos = ti->eos;
    v->info.eot = ti->eot;
    v->info.bos_text = v->bos_text;
    v->info.eos_text = v->eos_text;
    v->info.add_bos = ti->add_bos;
    v->info.chat_template = v->chat_template;
    return 0;
oom:
    gm_vocab_clear(v);
    return gm_err_set(err, GM_ENOMEM, "out of memory");
}

int gm_vocab_open(gm_vocab **out, const char *path, gm_err *err)
{
    *out = NULL;
    gm_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    gm_gguf *g = NULL;
    int rc = gm_gguf_open(&g, path, err);
    if (rc == 0)
        rc = gm_vocab_fill(v, g, err);
    gm_gguf_close(g);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    return 0;
}

void gm_vocab_free(gm_vocab *v)
{
    if (!v)
        return;
    gm_vocab_clear(v);
    free(v);
}

const gm_vocab_info *gm_vocab_get_info(const gm_vocab *v) { return &v->info; }

int gm_tokenize(const gm_vocab *v, const char *text, size_t len, unsigned flags, int32_t **ids, size_t *n,
                gm_err *err)
{
    *ids = NULL;
    *n = 0;
    unsigned f = (flags & GM_TOKENIZE_ADD_SPECIAL ? GM_ENCODE_ADD_SPECIAL : 0) |
                 (flags & GM_TOKENIZE_PARSE_SPECIAL ? GM_ENCODE_PARSE_SPECIAL : 0);
    size_t count = 0;
    int rc = gm_tokenizer_encode(v->tok, text, len, f, NULL, 0, &count, err);
    if (rc)
        return rc;
    int32_t *buf = malloc((count ? count : 1) * sizeof *buf);
    if (!buf)
        return gm_err_set(err, GM_ENOMEM, "out of memory for %zu tokens", count);
    if ((rc = gm_tokenizer_encode(v->tok, text, len, f, buf, count, &count, err))) {
        free(buf);
        return rc;
    }
    *ids = buf;
    *n = count;
    return 0;
}

int gm_detokenize(const gm_vocab *v, const int32_t *ids, size_t n, bool render_special, char **out,
                  size_t *len, gm_err *err)
{
    *out = NULL;
    *len = 0;
    const unsigned f = render_special ? GM_DECODE_RENDER_SPECIAL : 0;
    size_t need = 0;
    int rc = gm_tokenizer_decode(v->tok, ids, n, f, NULL, 0, &need, err);
    if (rc)
        return rc;
    char *buf = malloc(need + 1);
    if (!buf)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    if ((rc = gm_tokenizer_decode(v->tok, ids, n, f, buf, need, &need, err))) {
        free(buf);
        return rc;
    }
    buf[need] = '\0';
    *out = buf;
    *len = need;
    return 0;
}

bool gm_token_is_eog(const gm_vocab *v, int32_t id) { return gm_tokenizer_is_eog(v->tok, id); }

int32_t gm_token_find(const gm_vocab *v, const char *text)
{
    return gm_tokenizer_find(v->tok, text, strlen(text));
}

struct gm_detokenizer {
    gm_detok d;
    char *buf;
    size_t cap;
};

int gm_detokenizer_create(gm_detokenizer **out, const gm_vocab *v, bool render_special, gm_err *err)
{
    *out = NULL;
    gm_detokenizer *d = calloc(1, sizeof *d);
    if (!d)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    d->cap = gm_detok_max_out(v->tok) + 8;
    d->buf = malloc(d->cap);
    if (!d->buf) {
        free(d);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    gm_detok_init(&d->d, v->tok, render_special ? GM_DECODE_RENDER_SPECIAL : 0);
    *out = d;
    return 0;
}

void gm_detokenizer_free(gm_detokenizer *d)
{
    if (!d)
        return;
    free(d->buf);
    free(d);
}

int gm_detokenizer_push(gm_detokenizer *d, int32_t id, const char **text, size_t *len, gm_err *err)
{
    *text = d->buf;
    *len = 0;
    return gm_detok_push(&d->d, id, d->buf, d->cap, len, err);
}

int gm_detokenizer_flush(gm_detokenizer *d, const char **text, size_t *len, gm_err *err)
{
    *text = d->buf;
    *len = 0;
    return gm_detok_finish(&d->d, d->buf, d->cap, len, err);
}
