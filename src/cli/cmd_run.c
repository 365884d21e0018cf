/* gmlx run: generates text for one prompt (through the model's chat template unless --raw) and
 * streams it to stdout. Uses only the public API. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chatfmt.h"
#include "cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx run [MODEL.gguf] [--prompt TEXT | -f FILE] [-n N] [sampling] [-t N] [-v]\n\n"
            "Generates text for one prompt. stdout carries only the generated text; logs and the\n"
            "end-of-run line (prompt and decode tokens per second) go to stderr. Without a model\n"
            "it runs the bundled one (%s; GMLX_MODEL overrides).\n\n"
            "The prompt is one user turn rendered through the model's chat template\n"
            "(tokenizer.chat_template, with the generation prompt added), as chat and the\n"
            "server send it; a file without a template, or --raw, sends the prompt as it is, with\n"
            "special-token text (such as <|im_start|>) parsed as the special token. Generation\n"
            "stops after -n tokens or at an end-of-generation token (EOS, EOT, <|im_end|>, ...).\n\n"
            "options:\n"
            "  -p, --prompt TEXT        the prompt (default: standard input)\n"
            "  -f, --file FILE          read the prompt from FILE\n"
            "  --raw                    send the prompt as it is, without the chat template\n"
            "  --system TEXT            a system message before the prompt (not with --raw)\n"
            "  --chat-template-file F   use the Jinja template in F instead of the model's\n"
            "  --no-think               turn the model's thinking off, where its template has a\n"
            "                           switch (enable_thinking, thinking_mode, ...)\n"
            "  --special                print special tokens' text too (<think>, <|channel|>, ...)\n"
            "  --ignore-eos             go on past end-of-generation tokens (until -n)\n"
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
            gm_cli_default_model());
    fprintf(f, "\n%s\n%s", gm_cli_lever_help, gm_cli_config_help);
}

int gm_cli_sampling_flag(const char *cmd, const char *a, const char *v, gm_sampling *so, bool *seed_set,
                         uint32_t *last_n)
{
    bool ok;
    if (strcmp(a, "--seed") == 0) {
        /* -1: a new seed each run (llama.cpp's convention), as when the flag is absent */
        *seed_set = !(v && strcmp(v, "-1") == 0);
        uint32_t seed = 0;
        ok = !*seed_set || gm_cli_parse_u32(cmd, a, v, 0, UINT32_MAX, &seed);
        so->seed = seed;
    } else if (strcmp(a, "--temp") == 0) {
        ok = gm_cli_parse_float(cmd, a, v, 0, 100, &so->temp);
    } else if (strcmp(a, "--top-k") == 0) {
        uint32_t k = 0;
        ok = gm_cli_parse_u32(cmd, a, v, 0, 1u << 24, &k);
        so->top_k = (int32_t)k;
    } else if (strcmp(a, "--top-p") == 0) {
        ok = gm_cli_parse_float(cmd, a, v, 0, 1, &so->top_p);
    } else if (strcmp(a, "--min-p") == 0) {
        ok = gm_cli_parse_float(cmd, a, v, 0, 1, &so->min_p);
    } else if (strcmp(a, "--repeat-penalty") == 0) {
        ok = gm_cli_parse_float(cmd, a, v, 0.01f, 100, &so->repeat_penalty);
    } else if (strcmp(a, "--repeat-last-n") == 0) {
        /* -1: the whole context (llama.cpp's convention) */
        if (v && strcmp(v, "-1") == 0)
            *last_n = UINT32_MAX, ok = true;
        else
            ok = gm_cli_parse_u32(cmd, a, v, 0, 1u << 20, last_n);
    } else {
        return 0;
    }
    return ok ? 2 : -1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The generated text to stdout as it comes; a failed write stops generation. */
static bool on_token(void *user, int32_t token, const char *text, size_t len)
{
    bool *write_failed = user;
    (void)token;
    if (len && (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)) {
        *write_failed = true;
        return false;
    }
    return true;
}

int gm_cmd_run(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *file = NULL, *system = NULL, *tmpl_file = NULL, *config = NULL;
    uint32_t n_predict = 256, last_n = 64;
    gm_cli_load load = {.kv = GM_KV_F16};
    bool seed_set = false, verbose = false, raw = false, no_think = false, special = false, ignore_eos = false;
    gm_sampling so;
    gm_sampling_default(&so);
    gm_cli_stream sflags = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int sf = gm_cli_stream_flag("run", a, v, &sflags);
        if (sf == 0)
            sf = gm_cli_sampling_flag("run", a, v, &so, &seed_set, &last_n);
        if (sf == 0)
            sf = gm_cli_load_flag("run", a, v, &load);
        if (sf < 0)
            return GM_EXIT_USAGE;
        if (sf > 0) {
            i += sf - 1;
            continue;
        }
        bool ok = true;
        const char **text_opt = strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0 ? &prompt
                                : strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0 ? &file
                                : strcmp(a, "--system") == 0                         ? &system
                                : strcmp(a, "--chat-template-file") == 0             ? &tmpl_file
                                                                                     : NULL;
        if (gm_cli_is_help(a)) {
            help(stdout);
            return GM_EXIT_OK;
        } else if (text_opt) {
            if (!v) {
                gm_cli_error("run", "%s needs a value", a);
                return GM_EXIT_USAGE;
            }
            *text_opt = v, i++;
        } else if (strcmp(a, "--raw") == 0) {
            raw = true;
        } else if (strcmp(a, "--no-think") == 0 || strcmp(a, "--think") == 0) {
            no_think = a[2] == 'n';
        } else if (strcmp(a, "--config") == 0) {
            if (!v) {
                gm_cli_error("run", "--config needs a file");
                return GM_EXIT_USAGE;
            }
            config = v, i++;
        } else if (strcmp(a, "--special") == 0) {
            special = true;
        } else if (strcmp(a, "--ignore-eos") == 0) {
            ignore_eos = true;
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-predict") == 0) {
            ok = gm_cli_parse_u32("run", a, v, 0, 1u << 24, &n_predict), i++;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbose = true;
        } else {
            ok = gm_cli_model_arg("run", a, &model);
        }
        if (!ok)
            return GM_EXIT_USAGE;
    }
    int crc = gm_cli_config_rerun("run", argc, argv, model, config, gm_cmd_run);
    if (crc >= 0)
        return crc;
    if (prompt && file) {
        gm_cli_error("run", "give --prompt or -f, not both");
        return GM_EXIT_USAGE;
    }
    if (raw && (system || tmpl_file || no_think)) {
        gm_cli_error("run", "--raw sends the prompt as it is: --system, --chat-template-file and --no-think "
                     "need the template");
        return GM_EXIT_USAGE;
    }
    if (!gm_cli_stream_check("run", &sflags))
        return GM_EXIT_USAGE;
    if (!model)
        model = gm_cli_default_model();
    so.seed = seed_set ? so.seed : (uint64_t)time(NULL);
    gm_cli_log_setup(verbose);

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
    gm_vocab *voc = NULL;
    gm_model *m = NULL;
    gm_session *s = NULL;
    gm_cli_tmpl tmpl = {0};
    json_t *msgs = NULL, *vars = NULL;
    char *rendered = NULL;
    int32_t *ids = NULL;
    size_t n_prompt = 0;
    int status = GM_EXIT_USAGE;
    double t_load = now_s();
    /* the prompt's tokens first (the vocabulary needs only the file's header), so that the plan
     * behind the placement reserves the context this run takes */
    if (gm_vocab_open(&voc, model, &err) != 0) {
        gm_cli_error("run", "%s", err.msg);
        goto done;
    }
    int have = raw ? 0 : gm_cli_tmpl_load("run", voc, tmpl_file, &tmpl);
    if (have < 0)
        goto done;
    const char *text = prompt;
    size_t text_len = plen;
    unsigned tflags = GM_TOKENIZE_PARSE_SPECIAL | GM_TOKENIZE_ADD_SPECIAL;
    if (have) {
        if (!(msgs = gm_cli_messages(system, prompt, plen))) {
            gm_cli_error("run", "the prompt is not valid UTF-8 text (--raw sends bytes as they are)");
            goto done;
        }
        vars = gm_cli_vars(voc, msgs, true, NULL);
        if (no_think && !gm_cli_thinking_var(tmpl.src, false, vars))
            gm_cli_error("run", "note: %s has no thinking switch; --no-think changes nothing", tmpl.origin);
        if (!(rendered = gm_cli_render("run", &tmpl, vars, &text_len)))
            goto done;
        text = rendered;
        tflags = GM_TOKENIZE_PARSE_SPECIAL; /* the template decides BOS, as transformers encodes */
    } else if (!raw && system) {
        gm_cli_error("run", "%s has no chat template: --system needs one (--chat-template-file gives one)", model);
        goto done;
    }
    if (gm_tokenize(voc, text, text_len, tflags, &ids, &n_prompt, &err) != 0) {
        gm_cli_error("run", "%s", err.msg);
        goto done;
    }
    if (n_prompt == 0) {
        gm_cli_error("run", "the prompt is empty");
        goto done;
    }
    /* the last generated token is printed, not evaluated: prompt + n - 1 positions */
    uint64_t need = (uint64_t)n_prompt + (n_predict ? n_predict - 1 : 0);
    uint32_t ctx = load.ctx;
    if (!ctx)
        ctx = need > (1u << 24) ? (1u << 24) : (uint32_t)need;
    if (n_prompt > ctx) {
        gm_cli_error("run", "the prompt has %zu tokens; the context holds %u", n_prompt, ctx);
        goto done;
    }
    gm_model_opts mo;
    if (!gm_cli_model_opts("run", &sflags, &mo))
        goto done;
    gm_cli_load_apply(&load, &mo);
    mo.n_ctx = ctx;
    if (gm_model_load(&m, model, &mo, &err) != 0) {
        gm_cli_progress_done();
        gm_cli_error("run", "%s", err.msg);
        goto done;
    }
    t_load = now_s() - t_load;
    gm_session_opts sopt;
    gm_session_opts_default(&sopt);
    sopt.n_ctx = ctx;
    if (gm_session_create(&s, m, &sopt, &err) != 0) {
        gm_cli_error("run", "%s", err.msg);
        goto done;
    }
    const gm_model_info *in = gm_model_get_info(m);
    if (verbose) {
        fprintf(stderr, "[run] %s: %s, %u layers, %u experts (%u per token), vocab %u; %d threads, %s kernels, "
                "load %.2f s\n", model, in->arch, in->n_layer, in->n_expert, in->n_expert_used,
                gm_vocab_get_info(voc)->n_vocab, in->n_threads, in->kernels, t_load);
        fprintf(stderr, "[run] prompt %zu tokens (%s; prefill chunks of up to %u); sampling temp %.2f "
                "top-k %d top-p %.2f min-p %.2f seed %llu\n", n_prompt,
                have ? "through the chat template" : "as it is", in->max_chunk < ctx ? in->max_chunk : ctx,
                so.temp, so.top_k, so.top_p, so.min_p, (unsigned long long)so.seed);
    }
    so.penalty_last_n = (int32_t)(last_n == UINT32_MAX ? ctx : last_n);
    bool write_failed = false;
    gm_generate_opts go;
    gm_generate_opts_default(&go);
    go.sampling = so;
    go.render_special = special;
    go.ignore_eog = ignore_eos;
    go.on_token = on_token;
    go.user = &write_failed;
    gm_generate_result res;
    int rc = 0;
    if (n_predict == 0) {
        /* nothing to print: the prompt is evaluated for its timing */
        double t0 = now_s();
        rc = gm_session_eval(s, ids, (uint32_t)n_prompt, NULL, false, &err);
        res = (gm_generate_result){.stop = GM_STOP_LENGTH, .n_prompt = (uint32_t)n_prompt, .prefill_s = now_s() - t0};
    } else {
        go.max_tokens = n_predict;
        rc = gm_session_generate(s, ids, (uint32_t)n_prompt, &go, &res, &err);
    }
    if (rc != 0) {
        gm_cli_error("run", "%s", err.msg);
        goto done;
    }
    if (write_failed)
        goto done; /* main reports the write error */
    if (res.n_generated)
        fputc('\n', stdout);
    if (fflush(stdout) != 0)
        goto done;
    /* decode speed: forward passes per second (the first token comes from the prompt's logits) */
    const uint32_t n_decoded = res.n_generated ? res.n_generated - 1 : 0;
    const char *stop = res.stop == GM_STOP_EOG ? "end of generation" : gm_stop_reason_name(res.stop);
    fprintf(stderr, "[run] prompt %zu tokens, %.1f tok/s; decode %u tokens, %.1f tok/s; stop: %s\n", n_prompt,
            res.prefill_s > 0 ? (double)n_prompt / res.prefill_s : 0.0, res.n_generated,
            res.decode_s > 0 && n_decoded ? n_decoded / res.decode_s : 0.0, stop);
    char *st = gm_model_stats_text(m, (verbose ? GM_STATS_STREAM : 0) | GM_STATS_LEVERS | GM_STATS_PHASES | GM_STATS_PROFILE | GM_STATS_GPU);
    if (st)
        fputs(st, stderr);
    free(st);
    status = GM_EXIT_OK;
done:
    free(ids);
    free(rendered);
    json_decref(vars);
    json_decref(msgs);
    gm_cli_tmpl_free(&tmpl);
    free(owned);
    gm_session_free(s);
    gm_model_free(m);
    gm_vocab_free(voc);
    return status;
}
