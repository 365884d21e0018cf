/* gmlx logits: the logits of every position of a token-id file, as raw float32. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx logits MODEL.gguf --ids FILE --out FILE [--prefill-step-size N] [--kv-type T] [-t N]\n\n"
            "Reads token ids (whitespace-separated integers) and writes the logits of every\n"
            "position as raw little-endian float32, one row of n_vocab per position, from one\n"
            "forward pass over the ids in chunks of --prefill-step-size tokens (default 512).\n"
            "\n"
            "options:\n"
            "  --ids FILE               token ids to evaluate\n"
            "  --out FILE               where the logits go\n"
            "  --prefill-step-size N    tokens per forward call (default 512)\n"
            "  --kv-type f32|f16|q8_0   KV cache element type (default f32: the exact path;\n"
            "                           --kv-bits 32|16|8 the same)\n"
            "  --stream-experts         experts through the decode arena (single-token calls;\n"
            "                           use --prefill-step-size 1 to put every position through it)\n"
            "  --stream-cpu             the whole model from the page cache\n"
            "  --stream-fast-disk M     auto (default), on or off: how hard decode reads ahead\n"
            "  -t, --threads N          compute threads (default: all CPUs)\n"
            "  -h, --help               this help\n");
    fprintf(f, "\n%s", gm_cli_lever_help);
}

/* Reads whitespace-separated token ids; returns a malloc'd array or NULL with a message. */
int32_t *gm_cli_read_ids(const char *cmd, const char *path, uint32_t *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        gm_cli_error(cmd, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    uint32_t cap = 256, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    char word[64];
    int ch, len = 0;
    bool ok = ids != NULL;
    while (ok) {
        ch = fgetc(f);
        if (ch == EOF || ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r' || ch == ',') {
            if (len > 0) {
                word[len] = '\0';
                char *end;
                errno = 0;
                long v = strtol(word, &end, 10);
                if (errno || *end || v < 0 || v > INT32_MAX) {
                    gm_cli_error(cmd, "%s: '%s' is not a token id", path, word);
                    ok = false;
                    break;
                }
                if (n == cap) {
                    cap *= 2;
                    int32_t *nb = realloc(ids, cap * sizeof *nb);
                    if (!nb) {
                        ok = false;
                        break;
                    }
                    ids = nb;
                }
                ids[n++] = (int32_t)v;
                len = 0;
            }
            if (ch == EOF)
                break;
        } else if (len < (int)sizeof word - 1) {
            word[len++] = (char)ch;
        } else {
            gm_cli_error(cmd, "%s: a token id is too long", path);
            ok = false;
        }
    }
    fclose(f);
    if (ok && n == 0) {
        gm_cli_error(cmd, "%s: no token ids", path);
        ok = false;
    }
    if (!ok) {
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

int gm_cmd_logits(int argc, char **argv)
{
    const char *model = NULL, *ids_path = NULL, *out_path = NULL;
    uint32_t step = 512, threads = 0;
    gm_kv_type kv = GM_KV_F32;
    gm_cli_stream sflags = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int sf = gm_cli_stream_flag("logits", a, v, &sflags);
        if (sf < 0)
            return GM_EXIT_USAGE;
        if (sf > 0) {
            i += sf - 1;
            continue;
        }
        if (gm_cli_is_help(a)) {
            help(stdout);
            return GM_EXIT_OK;
        } else if (strcmp(a, "--ids") == 0 || strcmp(a, "--out") == 0) {
            if (!v) {
                gm_cli_error("logits", "%s needs a file", a);
                return GM_EXIT_USAGE;
            }
            *(a[2] == 'i' ? &ids_path : &out_path) = v;
            i++;
        } else if (strcmp(a, "--prefill-step-size") == 0) {
            if (!gm_cli_parse_u32("logits", a, v, 1, 65536, &step))
                return GM_EXIT_USAGE;
            i++;
        } else if (strcmp(a, "--kv-type") == 0 || strcmp(a, "--kv-bits") == 0) {
            if (!gm_cli_parse_kv("logits", a, v, &kv))
                return GM_EXIT_USAGE;
            i++;
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if (!gm_cli_parse_u32("logits", a, v, 1, 1024, &threads))
                return GM_EXIT_USAGE;
            i++;
        } else if (a[0] == '-' && a[1]) {
            gm_cli_error("logits", "unknown option '%s' (see gmlx logits --help)", a);
            return GM_EXIT_USAGE;
        } else if (!model) {
            model = a;
        } else {
            gm_cli_error("logits", "one model file at a time");
            return GM_EXIT_USAGE;
        }
    }
    if (!model || !ids_path || !out_path) {
        gm_cli_error("logits", "needs MODEL, --ids FILE and --out FILE (see gmlx logits --help)");
        return GM_EXIT_USAGE;
    }
    uint32_t n = 0;
    int32_t *ids = gm_cli_read_ids("logits", ids_path, &n);
    if (!ids)
        return GM_EXIT_USAGE;
    gm_err err = {0};
    gm_model *m = NULL;
    gm_session *s = NULL;
    float *logits = NULL;
    FILE *out = NULL;
    int status = GM_EXIT_USAGE;
    gm_model_opts mo;
    if (!gm_cli_stream_check("logits", &sflags) || !gm_cli_model_opts("logits", &sflags, &mo))
        goto done; /* status is GM_EXIT_USAGE */
    gm_cli_log_setup(false);
    mo.n_threads = (int)threads;
    mo.prefill_step = step;
    mo.n_ctx = n;
    mo.kv_type = kv;
    if (gm_model_load(&m, model, &mo, &err) != 0 || gm_session_create(&s, m, NULL, &err) != 0) {
        gm_cli_progress_done();
        gm_cli_error("logits", "%s", err.msg);
        goto done;
    }
    uint32_t V = gm_session_n_logits(s);
    logits = malloc((uint64_t)step * V * sizeof *logits);
    out = fopen(out_path, "wb");
    if (!logits || !out) {
        gm_cli_error("logits", "%s: cannot write: %s", out_path, logits ? strerror(errno) : "out of memory");
        goto done;
    }
    for (uint32_t at = 0; at < n; at += step) {
        uint32_t c = n - at < step ? n - at : step;
        if (gm_session_eval(s, ids + at, c, logits, true, &err) != 0) {
            gm_cli_error("logits", "%s", err.msg);
            goto done;
        }
        if (fwrite(logits, sizeof(float), (size_t)c * V, out) != (size_t)c * V) {
            gm_cli_error("logits", "%s: write failed: %s", out_path, strerror(errno));
            goto done;
        }
    }
    if (fclose(out) != 0) {
        out = NULL;
        gm_cli_error("logits", "%s: write failed: %s", out_path, strerror(errno));
        goto done;
    }
    out = NULL;
    char *text = gm_model_stats_text(m, GM_STATS_LEVERS | GM_STATS_GPU);
    if (text)
        fputs(text, stderr);
    free(text);
    status = GM_EXIT_OK;
done:
    if (out) {
        fclose(out);
        remove(out_path);
    }
    free(logits);
    free(ids);
    gm_session_free(s);
    gm_model_free(m);
    return status;
}
