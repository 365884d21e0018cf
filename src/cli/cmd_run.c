/* gmlx run: generates text for one prompt and streams it to stdout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "cli/cli.h"
#include "infer/engine.h"
#include "infer/sample.h"
#include "text/tokenizer.h"

#ifndef GMLX_DEFAULT_MODEL
#define GMLX_DEFAULT_MODEL "model.gguf"
#endif

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx run [MODEL.gguf] [--prompt TEXT | -f FILE] [-n N] [sampling] [-t N] [-v]\n\n"
            "Generates text for one prompt. stdout carries only the generated text; logs and the\n"
            "end-of-run line (prompt and decode tokens per second) go to stderr. Without a model\n"
            "it runs the bundled one (%s; GMLX_MODEL overrides). Special-token text in the\n"
            "prompt (such as <|im_start|>) is parsed as the special token. Generation stops after\n"
            "-n tokens or at an end-of-generation token (EOS, EOT, <|im_end|>, ...).\n\n"
            "options:\n"
            "  -p, --prompt TEXT        the prompt (default: standard input)\n"
            "  -f, --file FILE          read the prompt from FILE\n"
            "  -n, --n-predict N        tokens to generate at most (default 256)\n"
            "  --temp T                 temperature; 0 = greedy (default 0.8)\n"
            "  --top-k N                keep the N most likely tokens; 0 = off (default 40)\n"
            "  --top-p P                nucleus sampling; 1 = off (default 0.95)\n"
            "  --min-p P                drop tokens below P x the top probability (default 0.05)\n"
            "  --repeat-penalty R       penalise the last --repeat-last-n tokens; 1 = off (default 1)\n"
            "  --repeat-last-n N        tokens the penalty looks back over (default 64; -1: the\n"
            "                           whole context)\n"
            "  --seed S                 random seed (default or -1: from the clock; printed with -v)\n"
            "  -c, --ctx-size N         context in tokens (default: prompt + n)\n"
            "  --prefill-step-size N    prompt tokens per forward call (default 512; when the\n"
            "                           experts stream, up to 8192 as the plan's room holds:\n"
            "                           each chunk reads its experts once; -v prints it)\n"
            "  --kv-type f16|f32|q8_0   KV cache element type (default f16; q8_0: 8-bit blocks,\n"
            "                           a little over half of f16's memory)\n"
            "  --kv-bits 16|32|8        the same as a bit count (--kv-bits 8 = q8_0)\n"
            "  --stream-experts         pin the every-token weights, stream the experts through\n"
            "                           the decode arena (default: when the plan says they do not fit)\n"
            "  --stream-cpu             run the whole model from the page cache (no arena)\n"
            "  --stream-fast-disk M     auto (default: test the drive at load and read ahead\n"
            "                           harder on one of 5 GB/s or more), on or off\n"
            "  -t, --threads N          compute threads (default: all CPUs)\n"
            "  -v, --verbose            print the model, kernels and timings\n"
            "  -h, --help               this help\n",
            GMLX_DEFAULT_MODEL);
    fprintf(f, "\n%s", gm_cli_lever_help);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool parse_float(const char *flag, const char *v, float lo, float hi, float *out)
{
    if (!v) {
        gm_cli_error("run", "%s needs a value", flag);
        return false;
    }
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        gm_cli_error("run", "%s %s: expected a number from %g to %g", flag, v, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

int gm_cmd_run(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *file = NULL;
    uint32_t n_predict = 256, threads = 0, step = 0, ctx = 0, seed = 0, last_n = 64;
    bool seed_set = false, verbose = false;
    gm_kv_type kv = GM_KV_F16;
    gm_sample_opts so;
    gm_sample_opts_default(&so);
    gm_cli_stream sflags = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int sf = gm_cli_stream_flag("run", a, v, &sflags);
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
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) {
            if (!v) {
                gm_cli_error("run", "%s needs a value", a);
                return GM_EXIT_USAGE;
            }
            prompt = v, i++;
        } else if (strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) {
            if (!v) {
                gm_cli_error("run", "%s needs a file", a);
                return GM_EXIT_USAGE;
            }
            file = v, i++;
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-predict") == 0) {
            ok = gm_cli_parse_u32("run", a, v, 0, 1u << 24, &n_predict), i++;
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            ok = gm_cli_parse_u32("run", a, v, 1, 1024, &threads), i++;
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--ctx-size") == 0) {
            ok = gm_cli_parse_u32("run", a, v, 1, 1u << 24, &ctx), i++;
        } else if (strcmp(a, "--prefill-step-size") == 0) {
            ok = gm_cli_parse_u32("run", a, v, 1, 65536, &step), i++;
        } else if (strcmp(a, "--seed") == 0) {
            /* -1: a new seed each run (llama.cpp's convention), as when the flag is absent */
            seed_set = !(v && strcmp(v, "-1") == 0);
            ok = !seed_set || gm_cli_parse_u32("run", a, v, 0, UINT32_MAX, &seed);
            i++;
        } else if (strcmp(a, "--temp") == 0) {
            ok = parse_float(a, v, 0, 100, &so.temp), i++;
        } else if (strcmp(a, "--top-k") == 0) {
            uint32_t k;
            ok = gm_cli_parse_u32("run", a, v, 0, 1u << 24, &k), i++;
            so.top_k = (int32_t)k;
        } else if (strcmp(a, "--top-p") == 0) {
            ok = parse_float(a, v, 0, 1, &so.top_p), i++;
        } else if (strcmp(a, "--min-p") == 0) {
            ok = parse_float(a, v, 0, 1, &so.min_p), i++;
        } else if (strcmp(a, "--repeat-penalty") == 0) {
            ok = parse_float(a, v, 0.01f, 100, &so.repeat_penalty), i++;
        } else if (strcmp(a, "--repeat-last-n") == 0) {
            /* -1: the whole context (llama.cpp's convention) */
            if (v && strcmp(v, "-1") == 0)
                last_n = UINT32_MAX;
            else
                ok = gm_cli_parse_u32("run", a, v, 0, 1u << 20, &last_n);
            i++;
        } else if (strcmp(a, "--kv-type") == 0 || strcmp(a, "--kv-bits") == 0) {
            if (!gm_cli_parse_kv("run", a, v, &kv))
                return GM_EXIT_USAGE;
            i++;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbose = true;
        } else if (a[0] == '-' && a[1]) {
            gm_cli_error("run", "unknown option '%s' (see gmlx run --help)", a);
            return GM_EXIT_USAGE;
        } else if (!model) {
            model = a;
        } else {
            gm_cli_error("run", "one model file at a time ('%s' and '%s')", model, a);
            return GM_EXIT_USAGE;
        }
        if (!ok)
            return GM_EXIT_USAGE;
    }
    if (prompt && file) {
        gm_cli_error("run", "give --prompt or -f, not both");
        return GM_EXIT_USAGE;
    }
    if (!gm_cli_stream_check("run", &sflags))
        return GM_EXIT_USAGE;
    if (!model)
        model = getenv("GMLX_MODEL") ? getenv("GMLX_MODEL") : GMLX_DEFAULT_MODEL;
    so.seed = seed_set ? seed : (uint64_t)time(NULL);
    if (verbose)
        gm_log_set_level(GM_LOG_INFO);

    size_t plen = 0;
    char *owned = NULL;
    if (!prompt) {
        owned = gm_cli_read_text("run", file, &plen);
        if (!owned)
            return GM_EXIT_USAGE;
        prompt = owned;
    } else {
        plen = strlen(prompt);
    }

    gm_err err = {0};
    gm_engine *e = NULL;
    gm_session *s = NULL;
    gm_tokenizer *tok = NULL;
    gm_sampler *smp = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    char *piece = NULL;
    int status = GM_EXIT_USAGE;
    double t_load = now_s();
    /* The prompt's tokens first (the tokenizer needs only the file's header), so that the plan
     * behind the engine's placement reserves the context, chunk and cache this run takes. */
    gm_gguf *g = NULL;
    int trc = gm_gguf_open(&g, model, &err);
    if (trc == 0)
        trc = gm_tokenizer_load(&tok, g, &err);
    gm_gguf_close(g);
    if (trc != 0) {
        gm_cli_error("run", "%s", err.msg);
        goto done;
    }
    size_t n_prompt = 0;
    unsigned flags = GM_ENCODE_ADD_SPECIAL | GM_ENCODE_PARSE_SPECIAL;
    if (gm_tokenizer_encode(tok, prompt, plen, flags, NULL, 0, &n_prompt, &err) != 0) {
        gm_cli_error("run", "%s", err.msg);
        goto done;
    }
    if (n_prompt == 0) {
        gm_cli_error("run", "the prompt is empty");
        goto done;
    }
    /* the last generated token is printed, not evaluated: prompt + n - 1 positions */
    uint64_t need = (uint64_t)n_prompt + (n_predict ? n_predict - 1 : 0);
    if (!ctx)
        ctx = need > (1u << 24) ? (1u << 24) : (uint32_t)need;
    if (n_prompt > ctx) {
        gm_cli_error("run", "the prompt has %zu tokens; the context holds %u", n_prompt, ctx);
        goto done;
    }
    gm_engine_opts eo = {.n_threads = (int)threads, .max_chunk = step, .placement = (gm_placement)sflags.placement,
                         .kv_ctx = ctx, .kv_bits = gm_cli_kv_bits(kv), .verbose = verbose,
                           .levers = &sflags.levers,
                           .fast_disk = (gm_fast_disk)sflags.fast_disk};
    if (gm_engine_load(&e, model, &eo, &err) != 0) {
        gm_cli_error("run", "%s", err.msg);
        goto done;
    }
    t_load = now_s() - t_load;
    so.penalty_last_n = (int32_t)(last_n == UINT32_MAX ? ctx : last_n);
    uint32_t V = gm_engine_n_vocab(e);
    /* an output head wider than the vocabulary (padded rows) is sampled only over the ids the
     * tokenizer can print */
    const uint32_t n_tok = gm_tokenizer_get_info(tok)->n_vocab, V_sample = V < n_tok ? V : n_tok;
    ids = malloc(n_prompt * sizeof *ids);
    logits = malloc((uint64_t)V * sizeof *logits);
    size_t piece_cap = gm_detok_max_out(tok) + 8;
    piece = malloc(piece_cap);
    if (!ids || !logits || !piece) {
        gm_cli_error("run", "out of memory");
        goto done;
    }
    if (gm_tokenizer_encode(tok, prompt, plen, flags, ids, n_prompt, &n_prompt, &err) != 0 ||
        gm_session_create(&s, e, ctx, kv, &err) != 0 || gm_sampler_create(&smp, V_sample, &so, &err) != 0) {
        gm_cli_error("run", "%s", err.msg);
        goto done;
    }
    if (verbose) {
        const gm_model_desc *d = gm_engine_desc(e);
        fprintf(stderr, "[run] %s: %s, %u layers, %u experts (%u per token), vocab %u; %d threads, %s kernels, load %.2f s\n",
                model, d->arch_name, d->hp.n_layer, d->hp.n_expert, d->hp.n_expert_used, V,
                gm_engine_n_threads(e), gm_engine_kernel_level(e), t_load);
        fprintf(stderr, "[run] prompt %zu tokens (prefill chunks of up to %u); sampling temp %.2f top-k %d "
                "top-p %.2f min-p %.2f seed %llu\n", n_prompt, gm_session_max_chunk(s), so.temp, so.top_k,
                so.top_p, so.min_p, (unsigned long long)so.seed);
    }
    for (size_t i = 0; i < n_prompt; i++)
        gm_sampler_accept(smp, ids[i]);
    step = gm_session_max_chunk(s);
    double t0 = now_s();
    for (size_t at = 0; at < n_prompt; at += step) {
        uint32_t m = (uint32_t)(n_prompt - at < step ? n_prompt - at : step);
        if (gm_session_eval(s, ids + at, m, logits, false, &err) != 0) {
            gm_cli_error("run", "%s", err.msg);
            goto done;
        }
    }
    double t_prompt = now_s() - t0;
    gm_detok dt;
    gm_detok_init(&dt, tok, 0);
    uint32_t n_gen = 0, n_decoded = 0;
    t0 = now_s();
    const char *stop = "length";
    while (n_gen < n_predict) {
        int32_t next = gm_sampler_sample(smp, logits);
        if (gm_tokenizer_is_eog(tok, next)) {
            stop = "end of generation";
            break;
        }
        size_t n_out = 0;
        if (gm_detok_push(&dt, next, piece, piece_cap, &n_out, &err) != 0) {
            gm_cli_error("run", "%s", err.msg);
            goto done;
        }
        if (fwrite(piece, 1, n_out, stdout) != n_out || fflush(stdout) != 0)
            goto done; /* main reports the write error */
        gm_sampler_accept(smp, next);
        n_gen++;
        if (n_gen == n_predict)
            break;
        if (gm_session_pos(s) >= gm_session_n_ctx(s)) {
            stop = "context full";
            break;
        }
        if (gm_session_eval(s, &next, 1, logits, false, &err) != 0) {
            gm_cli_error("run", "%s", err.msg);
            goto done;
        }
        n_decoded++;
    }
    double t_gen = now_s() - t0;
    size_t n_out = 0;
    if (gm_detok_finish(&dt, piece, piece_cap, &n_out, &err) == 0)
        fwrite(piece, 1, n_out, stdout);
    if (n_gen)
        fputc('\n', stdout);
    if (fflush(stdout) != 0)
        goto done; /* main reports the write error */
    /* decode speed: forward passes per second (the first token comes from the prompt's logits) */
    fprintf(stderr, "[run] prompt %zu tokens, %.1f tok/s; decode %u tokens, %.1f tok/s; stop: %s\n",
            n_prompt, t_prompt > 0 ? n_prompt / t_prompt : 0.0, n_gen,
            t_gen > 0 && n_decoded ? n_decoded / t_gen : 0.0, stop);
    if (verbose && gm_engine_stream(e))
        gm_stream_print_stats(gm_engine_stream(e), stderr);
    if (gm_engine_levers(e))
        gm_shed_print(gm_engine_levers(e), stderr);
    if (gm_engine_stream(e) && getenv("GMLX_DECODE_PHASE_STATS") && strcmp(getenv("GMLX_DECODE_PHASE_STATS"), "0"))
        gm_stream_print_phases(gm_engine_stream(e), stderr);
    status = GM_EXIT_OK;
done:
    free(ids);
    free(logits);
    free(piece);
    free(owned);
    gm_sampler_free(smp);
    gm_session_free(s);
    gm_tokenizer_free(tok);
    gm_engine_free(e);
    return status;
}
