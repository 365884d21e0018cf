/* gmlx bench: prefill and decode speed on a seeded pseudo-random token sequence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx bench MODEL.gguf [-p N] [-n N] [-t N] [--seed S] [--ids FILE]\n"
            "                  [--prefill-step-size N] [--kv-type f16|f32|q8_0] [--turn N [--turn-n N]]\n\n"
            "Loads the model once, times a prefill of -p prompt tokens (in chunks of\n"
            "--prefill-step-size) and a decode of -n tokens fed one at a time. The tokens are a\n"
            "seeded pseudo-random sequence (or the ids of --ids), so that a random-weight model\n"
            "still routes to varied experts. The first --warmup decode tokens (default 2) are\n"
            "not timed. Prints one line:\n"
            "  bench: model=M load_s=X prompt_tokens=P prefill_tok_s=X decode_tokens=N decode_tok_s=X threads=T kernels=K\n\n"
            "options:\n"
            "  -p N                   prompt tokens (default 512; 0 skips prefill)\n"
            "  -n N                   decode tokens (default 128)\n"
            "  -t, --threads N        compute threads (default: all CPUs)\n"
            "  --seed S               seed of the token sequence (default 1)\n"
            "  --warmup N             decode tokens run before the timed ones (default 2)\n"
            "  --ids FILE             use these token ids (repeated as needed) instead\n"
            "  --prefill-step-size N  tokens per prefill call (default 512; when the experts\n"
            "                         stream, up to 8192 as the plan's room holds)\n"
            "  --kv-type f16|f32|q8_0 KV cache element type (default f16; --kv-bits 16|32|8 the same)\n"
            "  --turn N               then a second turn: a prefill of N more tokens into the same\n"
            "                         session and --turn-n decode tokens after it (a chat's next\n"
            "                         turn; with the experts streamed, prefills of up to 256 tokens\n"
            "                         after decode go through the decode arena unless\n"
            "                         GMLX_ARENA_TOKEN_SPLIT=0); prints a bench-turn: line\n"
            "  --turn-n N             decode tokens timed after the second turn (default 32)\n"
            "  --stream-experts       stream the experts through the decode arena\n"
            "  --stream-cpu           the whole model from the page cache (the baseline)\n"
            "  --stream-fast-disk M   auto (default: test the drive at load, read ahead harder\n"
            "                         from 5 GB/s), on or off\n"
            "  -h, --help             this help\n");
    fprintf(f, "\n%s", gm_cli_lever_help);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int gm_cmd_bench(int argc, char **argv)
{
    const char *model = NULL, *ids_path = NULL;
    uint32_t n_prompt = 512, n_gen = 128, threads = 0, seed = 1, step = 0, warmup = 2, turn = 0, turn_n = 32;
    gm_kv_type kv = GM_KV_F16;
    gm_cli_stream sflags = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int sf = gm_cli_stream_flag("bench", a, v, &sflags);
        if (sf < 0)
            return GM_EXIT_USAGE;
        if (sf > 0) {
            i += sf - 1;
            continue;
        }
        bool ok = true;
        if (gm_cli_is_help(a)) {
            help(stdout);
            return GM_EXIT_OK;
        } else if (strcmp(a, "-p") == 0) {
            ok = gm_cli_parse_u32("bench", a, v, 0, 1u << 20, &n_prompt), i++;
        } else if (strcmp(a, "-n") == 0) {
            ok = gm_cli_parse_u32("bench", a, v, 0, 1u << 20, &n_gen), i++;
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            ok = gm_cli_parse_u32("bench", a, v, 1, 1024, &threads), i++;
        } else if (strcmp(a, "--turn") == 0) {
            ok = gm_cli_parse_u32("bench", a, v, 1, 1u << 20, &turn), i++;
        } else if (strcmp(a, "--turn-n") == 0) {
            ok = gm_cli_parse_u32("bench", a, v, 0, 1u << 20, &turn_n), i++;
        } else if (strcmp(a, "--warmup") == 0) {
            ok = gm_cli_parse_u32("bench", a, v, 0, 1u << 20, &warmup), i++;
        } else if (strcmp(a, "--seed") == 0) {
            ok = gm_cli_parse_u32("bench", a, v, 0, UINT32_MAX, &seed), i++;
        } else if (strcmp(a, "--prefill-step-size") == 0) {
            ok = gm_cli_parse_u32("bench", a, v, 1, 65536, &step), i++;
        } else if (strcmp(a, "--ids") == 0) {
            if (!v) {
                gm_cli_error("bench", "--ids needs a file");
                return GM_EXIT_USAGE;
            }
            ids_path = v, i++;
        } else if (strcmp(a, "--kv-type") == 0 || strcmp(a, "--kv-bits") == 0) {
            if (!gm_cli_parse_kv("bench", a, v, &kv))
                return GM_EXIT_USAGE;
            i++;
        } else if (a[0] == '-' && a[1]) {
            gm_cli_error("bench", "unknown option '%s' (see gmlx bench --help)", a);
            return GM_EXIT_USAGE;
        } else if (!model) {
            model = a;
        } else {
            gm_cli_error("bench", "one model file at a time");
            return GM_EXIT_USAGE;
        }
        if (!ok)
            return GM_EXIT_USAGE;
    }
    if (!model) {
        gm_cli_error("bench", "no model file given (see gmlx bench --help)");
        return GM_EXIT_USAGE;
    }
    if (warmup >= n_gen && n_gen > 0) {
        gm_cli_error("bench", "--warmup %u leaves no decode token to time (-n %u)", warmup, n_gen);
        return GM_EXIT_USAGE;
    }
    if (n_prompt + n_gen == 0) {
        gm_cli_error("bench", "nothing to time: -p and -n are both 0");
        return GM_EXIT_USAGE;
    }
    uint32_t n_file = 0;
    int32_t *file_ids = NULL;
    if (ids_path && !(file_ids = gm_cli_read_ids("bench", ids_path, &n_file)))
        return GM_EXIT_USAGE;

    gm_err err = {0};
    gm_model *m = NULL;
    gm_session *s = NULL;
    int32_t *toks = NULL;
    float *logits = NULL;
    int status = GM_EXIT_USAGE;
    double t0 = now_s();
    gm_model_opts mo;
    if (!gm_cli_stream_check("bench", &sflags) || !gm_cli_model_opts("bench", &sflags, &mo))
        goto done; /* status is GM_EXIT_USAGE */
    gm_cli_log_setup(true);
    mo.n_threads = (int)threads;
    mo.prefill_step = step;
    mo.n_ctx = n_prompt + n_gen + (turn ? turn + turn_n : 0) + 1;
    mo.kv_type = kv;
    gm_session_opts so;
    gm_session_opts_default(&so);
    if (gm_model_load(&m, model, &mo, &err) != 0 || gm_session_create(&s, m, &so, &err) != 0) {
        gm_cli_progress_done();
        gm_cli_error("bench", "%s", err.msg);
        goto done;
    }
    double load_s = now_s() - t0;
    const gm_model_info *in = gm_model_get_info(m);
    uint32_t V = gm_session_n_logits(s), total = n_prompt + n_gen + (turn ? turn + turn_n : 0);
    toks = malloc((total ? total : 1) * sizeof *toks);
    logits = malloc((uint64_t)V * sizeof *logits);
    if (!toks || !logits) {
        gm_cli_error("bench", "out of memory");
        goto done;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (uint32_t i = 0; i < total; i++) {
        if (file_ids) {
            toks[i] = file_ids[i % n_file];
        } else {
            x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
            toks[i] = (int32_t)((x * 2685821657736338717ull >> 33) % V);
        }
        if (toks[i] < 0 || (uint32_t)toks[i] >= V) {
            gm_cli_error("bench", "token id %d is outside the vocabulary (%u)", toks[i], V);
            goto done;
        }
    }
    double pp_s = 0;
    t0 = now_s();
    if (n_prompt && gm_session_eval(s, toks, n_prompt, logits, false, &err) != 0) {
        gm_cli_error("bench", "%s", err.msg);
        goto done;
    }
    pp_s = now_s() - t0;
    uint32_t warm = n_gen > warmup ? warmup : 0, timed = 0;
    double tg_s = 0;
    gm_stats st0 = {0}, st1 = {0};
    for (uint32_t i = 0; i < n_gen; i++) {
        if (i == warm && in->streams)
            gm_model_get_stats(m, &st0); /* the timed tokens' reads start here */
        double ts = now_s();
        if (gm_session_eval(s, toks + n_prompt + i, 1, logits, false, &err) != 0) {
            gm_cli_error("bench", "%s", err.msg);
            goto done;
        }
        if (i >= warm) {
            tg_s += now_s() - ts;
            timed++;
        }
    }
    const char *base = strrchr(model, '/');
    printf("bench: model=%s load_s=%.3f prompt_tokens=%u prefill_tok_s=%.2f decode_tokens=%u "
           "decode_tok_s=%.2f threads=%d kernels=%s\n",
           base ? base + 1 : model, load_s, n_prompt, n_prompt && pp_s > 0 ? n_prompt / pp_s : 0.0,
           timed, timed && tg_s > 0 ? timed / tg_s : 0.0, in->n_threads, in->kernels);
    if (in->streams && timed) {
        /* the streaming figures of the timed tokens alone (the warm-up excluded) */
        gm_model_get_stats(m, &st1);
        uint64_t lookups = st1.lookups - st0.lookups, hits = st1.hits - st0.hits;
        printf("bench-stream: hit_pct=%.1f gb_per_tok=%.3f stall_ms_per_tok=%.1f other_ms_per_tok=%.1f "
               "prestaged_per_tok=%.1f\n", lookups ? 100.0 * (double)hits / (double)lookups : 0.0,
               (double)(st1.bytes_read - st0.bytes_read) / 1e9 / timed, (st1.stall_s - st0.stall_s) * 1e3 / timed,
               (tg_s - (st1.stall_s - st0.stall_s)) * 1e3 / timed, (double)(st1.prestaged - st0.prestaged) / timed);
    }
    if (turn) {
        /* the second turn: its prefill into the decoded session, then decode after it */
        const int32_t *tt = toks + n_prompt + n_gen;
        gm_stats s0 = {0}, s1 = {0};
        gm_model_get_stats(m, &s0);
        t0 = now_s();
        if (gm_session_eval(s, tt, turn, logits, false, &err) != 0) {
            gm_cli_error("bench", "%s", err.msg);
            goto done;
        }
        const double turn_s = now_s() - t0;
        gm_model_get_stats(m, &s1);
        t0 = now_s();
        if (turn_n && gm_session_eval(s, tt + turn, 1, logits, false, &err) != 0) {
            gm_cli_error("bench", "%s", err.msg);
            goto done;
        }
        for (uint32_t i = 1; i < turn_n; i++)
            if (gm_session_eval(s, tt + turn + i, 1, logits, false, &err) != 0) {
                gm_cli_error("bench", "%s", err.msg);
                goto done;
            }
        const double dec_s = now_s() - t0;
        printf("bench-turn: prompt_tokens=%u prefill_tok_s=%.2f decode_tokens=%u decode_tok_s=%.2f "
               "through_arena=%s gb_read=%.3f\n", turn, turn_s > 0 ? turn / turn_s : 0.0, turn_n,
               turn_n && dec_s > 0 ? turn_n / dec_s : 0.0, s1.split_calls > s0.split_calls ? "yes" : "no",
               (double)(s1.bytes_read - s0.bytes_read + s1.ring_read_bytes - s0.ring_read_bytes) / 1e9);
    }
    char *text = gm_model_stats_text(m, GM_STATS_STREAM | GM_STATS_LEVERS | GM_STATS_PHASES | GM_STATS_PROFILE | GM_STATS_GPU);
    if (text)
        fputs(text, stderr);
    free(text);
    status = GM_EXIT_OK;
done:
    free(file_ids);
    free(toks);
    free(logits);
    gm_session_free(s);
    gm_model_free(m);
    return status;
}
