/* gmlx: the command table and the shared helpers of the command-line tool. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gmlx.h"

static const gm_cmd k_cmds[] = {
    {"run", "generate text for one prompt", gm_cmd_run},
    {"chat", "talk to a model in turns (a REPL; scriptable from a pipe)", gm_cmd_chat},
    {"template", "print a chat template rendered for a conversation", gm_cmd_template},
    {"validate", "read a GGUF header and print the streaming plan and a verdict", gm_cmd_validate},
    {"inspect", "print a GGUF file's metadata and tensor table", gm_cmd_inspect},
    {"logits", "write the logits of every position of a token-id file (float32)", gm_cmd_logits},
    {"bench", "time prefill and decode on a seeded token sequence", gm_cmd_bench},
    {"tokenize", "print the token ids of a text", gm_cmd_tokenize},
    {"init", "write a configuration file with the models found in folders", gm_cmd_init},
    {"sync-models", "bring the configuration file's models in line with the folders", gm_cmd_sync_models},
    {"doctor", "check the configuration file and this machine for streaming", gm_cmd_doctor},
    {"serve", "serve models over HTTP (OpenAI and Anthropic APIs)", gm_cmd_serve},
    {"pull", "download a model from the hub or a URL and register it (--list: curated models)", gm_cmd_pull},
};

void gm_cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gmlx %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int gm_cli_placement_flag(const char *cmd, const char *arg, int *placement)
{
    int want;
    if (strcmp(arg, "--stream-experts") == 0)
        want = 1; /* GM_PLACE_EXPERTS */
    else if (strcmp(arg, "--stream-cpu") == 0)
        want = 2; /* GM_PLACE_CPU */
    else
        return 0;
    if (*placement && *placement != want) {
        gm_cli_error(cmd, "--stream-experts and --stream-cpu exclude each other");
        return -1;
    }
    *placement = want;
    return 1;
}

const char gm_cli_lever_help[] =
    "lossy levers (off by default; only when the experts stream; see docs/streaming.md):\n"
    "  --moe-experts K          each token uses K experts (prefill and decode)\n"
    "  --moe-expert-mass P      each token keeps the fewest experts that cover share P of\n"
    "                           its gate weight (prefill and decode)\n"
    "  --moe-expert-probe       keep the trained routing; print at exit what each P of\n"
    "                           --moe-expert-mass would keep and drop\n"
    "  --moe-miss-shed P        decode drops experts that are not in the arena, lowest\n"
    "                           first, while the rest cover share P\n"
    "  --moe-prestage MODE      ranked (default) or keepers: read ahead only the experts\n"
    "                           miss-shed would keep (needs --moe-miss-shed)\n"
    "  --moe-layer-shed P       decode skips a layer's routed experts with probability P\n"
    "                           where a shared expert runs instead\n"
    "\nfeeders (when the experts stream; default on, or as GMLX_FEEDER_PREFILL and\n"
    "GMLX_DECODE_LOOKAHEAD say):\n"
    "  --no-prefill-feeder      prefill reads each expert when a chunk needs it instead of\n"
    "                           whole layers ahead of the compute (--prefill-feeder: on)\n"
    "  --no-decode-feeder       decode reads the experts a token routes to when it needs them,\n"
    "                           with no read-ahead of predicted ones (--decode-feeder: on)\n"
    "\nGPU (a CUDA build; docs/cuda.md):\n"
    "  --gpu                    compute on the CUDA device the routed experts it holds in VRAM\n"
    "                           (every expert when they fit, else the most used) and a decode\n"
    "                           token's attention and output head (GMLX_GPU=1;\n"
    "                           GMLX_GPU_ATTN=0 keeps those two on the CPU)\n"
    "  --no-gpu                 the CPU only (GMLX_GPU=0). Without either, the GPU is used\n"
    "                           when the experts stream through the decode arena and a\n"
    "                           CUDA device is found\n"
    "  --vram-gb N              the most device memory gmlx takes (GMLX_VRAM_GB; default:\n"
    "                           what the device has free, less 1.5 GB)\n"
    "  --no-gpu-keepwarm        accepted; nothing keeps the GPU warm (it keeps its clocks)\n"
    ;

const char gm_cli_config_help[] =
    "configuration file: MODEL may be a model id or alias of gmlx.yaml (./gmlx.yaml,\n"
    "$XDG_CONFIG_HOME/gmlx/gmlx.yaml or ~/.config/gmlx/gmlx.yaml, ~/.gmlx.yaml; --config FILE\n"
    "or GMLX_CONFIG names another): its file and settings apply, below the flags typed here\n"
    "(docs/config.md). --think undoes a thinking: off of the file.\n"
    "  --config FILE            the configuration file to look MODEL up in\n";

int gm_cli_fast_disk_flag(const char *cmd, const char *arg, const char *value, int *fast)
{
    if (strcmp(arg, "--stream-fast-disk") != 0)
        return 0;
    static const char *names[] = {"auto", "on", "off"}; /* gm_fast_disk order */
    for (int i = 0; value && i < 3; i++)
        if (strcmp(value, names[i]) == 0) {
            *fast = i;
            return 2;
        }
    gm_cli_error(cmd, "--stream-fast-disk takes auto, on or off");
    return -1;
}

int gm_cli_stream_flag(const char *cmd, const char *arg, const char *value, gm_cli_stream *o)
{
    /* the feeders: whole-layer prefill reads (the ring) and decode's read-ahead */
    if (strcmp(arg, "--prefill-feeder") == 0 || strcmp(arg, "--no-prefill-feeder") == 0) {
        o->prefill_feeder = arg[2] == 'n' ? -1 : 1;
        return 1;
    }
    if (strcmp(arg, "--decode-feeder") == 0 || strcmp(arg, "--no-decode-feeder") == 0) {
        o->decode_feeder = arg[2] == 'n' ? -1 : 1;
        return 1;
    }
    /* the CUDA device's VRAM tier of experts */
    if (strcmp(arg, "--gpu") == 0 || strcmp(arg, "--no-gpu") == 0) {
        o->gpu = arg[2] == 'n' ? -1 : 1;
        return 1;
    }
    /* the GPU does not drop its clocks between layers (docs/dev/gpu-clocks.md): nothing to keep warm */
    if (strcmp(arg, "--no-gpu-keepwarm") == 0)
        return 1;
    if (strcmp(arg, "--vram-gb") == 0)
        return gm_cli_parse_float(cmd, arg, value, 0.01f, 1e6f, &o->vram_gb) ? 2 : -1;
    int n = gm_cli_placement_flag(cmd, arg, &o->placement);
    if (n == 0)
        n = gm_cli_fast_disk_flag(cmd, arg, value, &o->fast_disk);
    if (n == 0)
        n = gm_cli_lever_flag(cmd, arg, value, &o->levers);
    return n;
}

bool gm_cli_stream_check(const char *cmd, const gm_cli_stream *o)
{
    gm_err err = {0};
    if (gm_levers_check(&o->levers, &err) == 0)
        return true;
    gm_cli_error(cmd, "%s", err.msg);
    return false;
}

/* A share for a lever: a number in (0, 1] (or (0, 1) when open_hi). */
static bool lever_share(const char *cmd, const char *flag, const char *v, bool open_hi, float *out)
{
    char *end;
    errno = 0;
    float x = v ? strtof(v, &end) : 0;
    if (!v || errno || end == v || *end || !(x > 0 && (open_hi ? x < 1 : x <= 1))) {
        gm_cli_error(cmd, "%s %s: expected a number above 0 and %s 1", flag, v ? v : "(none)",
                     open_hi ? "below" : "at most");
        return false;
    }
    *out = x;
    return true;
}

int gm_cli_lever_flag(const char *cmd, const char *arg, const char *value, gm_levers *o)
{
    if (strcmp(arg, "--moe-expert-probe") == 0) {
        o->probe = true;
        return 1;
    }
    if (strcmp(arg, "--moe-experts") == 0)
        return gm_cli_parse_u32(cmd, arg, value, 1, GM_LEVERS_MAX_EXPERTS, &o->experts) ? 2 : -1;
    if (strcmp(arg, "--moe-expert-mass") == 0)
        return lever_share(cmd, arg, value, false, &o->expert_mass) ? 2 : -1;
    if (strcmp(arg, "--moe-miss-shed") == 0)
        return lever_share(cmd, arg, value, false, &o->miss_shed) ? 2 : -1;
    if (strcmp(arg, "--moe-layer-shed") == 0)
        return lever_share(cmd, arg, value, true, &o->layer_shed) ? 2 : -1;
    if (strcmp(arg, "--moe-prestage") == 0) {
        if (value && (strcmp(value, "ranked") == 0 || strcmp(value, "keepers") == 0)) {
            o->keepers = strcmp(value, "keepers") == 0;
            return 2;
        }
        gm_cli_error(cmd, "--moe-prestage takes ranked or keepers");
        return -1;
    }
    return 0;
}

bool gm_cli_parse_kv(const char *cmd, const char *flag, const char *value, gm_kv_type *kv)
{
    static const struct {
        const char *type, *bits;
        gm_kv_type kv;
    } k_kv[] = {{"f32", "32", GM_KV_F32}, {"f16", "16", GM_KV_F16}, {"q8_0", "8", GM_KV_Q8_0}};
    const bool bits = strcmp(flag, "--kv-bits") == 0;
    for (size_t i = 0; value && i < sizeof k_kv / sizeof k_kv[0]; i++)
        if (strcmp(value, bits ? k_kv[i].bits : k_kv[i].type) == 0) {
            *kv = k_kv[i].kv;
            return true;
        }
    gm_cli_error(cmd, bits ? "--kv-bits takes 32, 16 or 8" : "--kv-type takes f32, f16 or q8_0");
    return false;
}

bool gm_cli_parse_float(const char *cmd, const char *flag, const char *v, float lo, float hi, float *out)
{
    if (!v) {
        gm_cli_error(cmd, "%s needs a value", flag);
        return false;
    }
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        gm_cli_error(cmd, "%s %s: expected a number from %g to %g", flag, v, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

int gm_cli_load_flag(const char *cmd, const char *a, const char *v, gm_cli_load *l)
{
    bool ok;
    if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0)
        ok = gm_cli_parse_u32(cmd, a, v, 1, 1024, &l->threads);
    else if (strcmp(a, "-c") == 0 || strcmp(a, "--ctx-size") == 0)
        ok = gm_cli_parse_u32(cmd, a, v, 1, 1u << 24, &l->ctx);
    else if (strcmp(a, "--prefill-step-size") == 0)
        ok = gm_cli_parse_u32(cmd, a, v, 1, 65536, &l->step);
    else if (strcmp(a, "--kv-type") == 0 || strcmp(a, "--kv-bits") == 0)
        ok = gm_cli_parse_kv(cmd, a, v, &l->kv);
    else
        return 0;
    return ok ? 2 : -1;
}

void gm_cli_load_apply(const gm_cli_load *l, gm_model_opts *o)
{
    o->n_threads = (int)l->threads;
    o->n_ctx = l->ctx;
    o->prefill_step = l->step;
    o->kv_type = l->kv;
}

bool gm_cli_model_arg(const char *cmd, const char *a, const char **model)
{
    if (a[0] == '-' && a[1]) {
        gm_cli_error(cmd, "unknown option '%s' (see gmlx %s --help)", a, cmd);
        return false;
    }
    if (*model) {
        gm_cli_error(cmd, "one model file at a time ('%s' and '%s')", *model, a);
        return false;
    }
    *model = a;
    return true;
}

bool gm_cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

bool gm_cli_parse_u32(const char *cmd, const char *flag, const char *value, uint32_t lo,
                      uint32_t hi, uint32_t *out)
{
    if (!value) {
        gm_cli_error(cmd, "%s needs a value", flag);
        return false;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (errno || end == value || *end || value[0] == '-' || v < lo || v > hi) {
        gm_cli_error(cmd, "%s %s: expected an integer from %u to %u", flag, value, lo, hi);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

char *gm_cli_read_text(const char *cmd, const char *path, size_t *len)
{
    FILE *f = path ? fopen(path, "rb") : stdin;
    if (!f) {
        gm_cli_error(cmd, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap > ((size_t)1 << 30)) {
                gm_cli_error(cmd, "%s: more than 1 GiB of text", path ? path : "standard input");
                free(buf);
                buf = NULL;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {
                gm_cli_error(cmd, "%s: read failed", path ? path : "standard input");
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    if (path)
        fclose(f);
    if (!buf)
        return NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: gmlx <command> [options]\n\n"
               "Runs mixture-of-experts GGUF models larger than memory by streaming the routed\n"
               "experts from the SSD.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", k_cmds[i].name, k_cmds[i].summary);
    fprintf(f, "\n'gmlx <command> --help' describes a command. 'gmlx --version' prints the version.\n");
}

/* A command's exit status, made GM_EXIT_USAGE when its standard output could not be written
 * (a full disk, a closed pipe): what it printed is incomplete, so it must not report success. */
static int finish_stdout(int status)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "gmlx: writing the output failed: %s\n", strerror(errno ? errno : EIO));
        return status ? status : GM_EXIT_USAGE;
    }
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return GM_EXIT_USAGE;
    }
    if (gm_cli_is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
        if (argc > 2) {
            for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
                if (strcmp(argv[2], k_cmds[i].name) == 0) {
                    char *help_argv[] = {argv[2], "--help", NULL};
                    return finish_stdout(k_cmds[i].run(2, help_argv));
                }
            fprintf(stderr, "gmlx: unknown command '%s'\n\n", argv[2]);
            usage(stderr);
            return GM_EXIT_USAGE;
        }
        usage(stdout);
        return finish_stdout(GM_EXIT_OK);
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("gmlx %s\n", GMLX_VERSION);
        return finish_stdout(GM_EXIT_OK);
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (strcmp(argv[1], k_cmds[i].name) == 0)
            return finish_stdout(k_cmds[i].run(argc - 1, argv + 1));
    fprintf(stderr, "gmlx: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return GM_EXIT_USAGE;
}
