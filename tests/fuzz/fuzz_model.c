/* libFuzzer target for the model path behind `gmlx run`: the input is a whole GGUF model file,
 * written to a memfd and opened through /proc/self/fd/N. It goes through what a run does with
 * a file it is given: the engine load (gguf, model description, hyper-parameter checks, plan,
 * placement, weight binding with shape checks), a session, a prefill of three tokens and one
 * decode step, and the tokenizer built from the same metadata (encode, decode, streaming
 * detokenisation). The seeds are tiny models written by gmlx-gen (gen_model_corpus.sh), so the
 * mutations land on real metadata and tensor tables.
 *
 * Promises checked (abort = finding, besides any sanitizer report): a failed load or tokenizer
 * build leaves *out NULL with an error code and a message; a loaded model evaluates (an eval
 * fails only with a message: out-of-range tokens are not fed); every logit is a number or an
 * infinity/NaN from the weights, never a crash; decoded text is bounded by the buffer the API
 * asked for. Threads: one compute thread, the page-cache placement (no feeder threads) except
 * on inputs whose size is odd, which take the streamed-experts placement. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "infer/engine.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz_model: %s:%d: broken promise: %s\n", __FILE__, __LINE__,       \
                    #cond);                                                                      \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

static volatile float g_sink;

/* A failed call's error contract. */
static void check_failed(int rc, const void *out, const gm_err *err)
{
    CHECK(rc != 0);
    CHECK(out == NULL);
    CHECK(err->code == rc);
    CHECK(err->msg[0] != '\0');
}

static void run_model(gm_engine *e)
{
    const uint32_t V = gm_engine_n_vocab(e);
    CHECK(V > 0);
    gm_fwd *s = NULL;
    gm_err err = {0};
    int rc = gm_fwd_create(&s, e, 8, GM_KV_F16, &err);
    if (rc) {
        check_failed(rc, s, &err);
        return;
    }
    float *logits = malloc((size_t)V * 3 * sizeof *logits);
    if (!logits) {
        gm_fwd_free(s);
        return;
    }
    const int32_t toks[3] = {0, (int32_t)(V / 2), (int32_t)(V - 1)};
    rc = gm_fwd_eval(s, toks, 3, logits, true, &err);
    if (rc == 0) {
        float acc = 0;
        for (size_t i = 0; i < (size_t)V * 3; i++)
            acc += logits[i];
        g_sink = acc;
        CHECK(gm_fwd_pos(s) == 3);
        rc = gm_fwd_eval(s, &toks[1], 1, logits, false, &err);
        if (rc == 0)
            g_sink = logits[V - 1];
    }
    if (rc)
        CHECK(err.msg[0] != '\0');
    free(logits);
    gm_fwd_free(s);
}

static void run_tokenizer(const gm_gguf *g)
{
    gm_tokenizer *t = NULL;
    gm_err err = {0};
    int rc = gm_tokenizer_load(&t, g, &err);
    if (rc) {
        check_failed(rc, t, &err);
        return;
    }
    static const char text[] = "Hello, world! <|im_start|>user\n  x = 1234; // \xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82";
    int32_t ids[256];
    size_t n = 0;
    rc = gm_tokenizer_encode(t, text, sizeof text - 1, GM_ENCODE_PARSE_SPECIAL, ids,
                             sizeof ids / sizeof ids[0], &n, &err);
    if (rc == 0) {
        const size_t cap = gm_detok_max_out(t) + 1;
        char *out = malloc(cap);
        if (out) {
            gm_detok d;
            gm_detok_init(&d, t, 0);
            for (size_t i = 0; i < n; i++) {
                size_t got = 0;
                if (gm_detok_push(&d, ids[i], out, cap, &got, &err) == 0)
                    CHECK(got <= cap);
            }
            size_t got = 0;
            if (gm_detok_finish(&d, out, cap, &got, &err) == 0)
                CHECK(got <= cap);
            free(out);
        }
        size_t len = 0;
        char buf[1024];
        if (gm_tokenizer_decode(t, ids, n, 0, buf, sizeof buf, &len, &err) == 0)
            CHECK(len <= sizeof buf);
    } else {
        CHECK(err.msg[0] != '\0');
    }
    gm_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz_model", 0);
    if (fd < 0)
        return 0;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return 0;
        }
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    gm_engine_opts opts = {0};
    opts.n_threads = 1;
    opts.max_chunk = 4;
    opts.kv_ctx = 8;
    opts.placement = size % 2 ? GM_PLACE_EXPERTS : GM_PLACE_CPU;
    gm_engine *e = NULL;
    gm_err err = {0};
    int rc = gm_engine_load(&e, path, &opts, &err);
    if (rc) {
        check_failed(rc, e, &err);
    } else {
        run_model(e);
        run_tokenizer(gm_engine_gguf(e));
        gm_engine_free(e);
    }
    close(fd);
    return 0;
}
