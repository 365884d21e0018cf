/* gmlx serve: the OpenAI- and Anthropic-compatible server (src/server). This file turns the
 * command line and the configuration file into the server's options: one model (a file, or an
 * entry of the file) or every entry of the configuration file, each with the settings its entry
 * resolves to (the same flags run takes), and the server: keys. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"
#include "server.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx serve [MODEL | ID] [--config FILE] [--host H] [--port P] [--api-key K] [options]\n\n"
            "Serves models over HTTP with the OpenAI API (/v1/chat/completions, /v1/completions,\n"
            "/v1/models) and the Anthropic Messages API (/v1/messages, /v1/messages/count_tokens),\n"
            "plus /health and /metrics (Prometheus). MODEL is a GGUF file or an id of the\n"
            "configuration file; without one, every model of the configuration file is served, each\n"
            "loaded on its first request and unloaded when idle or when another needs the room\n"
            "(server.budget_gb). One request runs at a time per model; others wait in a bounded queue\n"
            "(503 with Retry-After when it is full). docs/server.md describes the routes.\n\n"
            "options:\n"
            "  --config FILE        the configuration file (default: the one gmlx finds)\n"
            "  --host H             address to bind (default 127.0.0.1, or server.host)\n"
            "  --port P             port (default 8080, or server.port; 0: any free one)\n"
            "  --api-key K          require Authorization: Bearer K (or x-api-key: K) on every route\n"
            "                       but /health (default: server.api_key, else GMLX_API_KEY)\n"
            "  --no-auth            allow a non-loopback --host without an API key\n"
            "  --queue N            requests that may wait per model behind the running one (16)\n"
            "  --budget-gb X        GiB the loaded models may hold together (server.budget_gb;\n"
            "                       default with several models: the plan's ceiling for this machine,\n"
            "                       RAM less the host floor and overhead; 0: no limit)\n"
            "  --idle-unload S      unload a model idle for S seconds (default 0: keep it)\n"
            "  --max-body-mb N      largest request body (8)\n"
            "  --keepalive S        SSE comment every S seconds while a stream is silent (15)\n"
            "  -c, --ctx-size N     context tokens per model (default 4096, at most the model's)\n"
            "  -t, --threads N      compute threads\n"
            "  -n, --max-tokens N   default max_tokens of a request that sets none (default: until\n"
            "                       the context is full)\n"
            "  --temp T, --top-k K, --top-p P, --min-p P, --seed S   default sampling\n"
            "  --no-think           turn the template's thinking off by default\n"
            "  --chat-template-file F   a chat template instead of the model's\n"
            "  --kv-bits 8          8-bit KV cache\n"
            "  --stream-experts, --stream-cpu, --stream-fast-disk, the lossy levers: as for gmlx run\n"
            "  -v, --verbose        the load's details\n"
            "  -h, --help           this help\n\n"
            "The server prints '[server] listening on http://HOST:PORT' when it is ready, one '[req]'\n"
            "line per request, and the streaming figures of each model it unloads. SIGINT or SIGTERM\n"
            "stops it.\n");
}

static volatile sig_atomic_t g_stop;
static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* Per-model settings: the flags run takes that matter to a server. */
typedef struct model_flags {
    gm_cli_stream sflags;
    gm_cli_load load;
    gm_sampling so;
    bool seed_set;
    uint32_t last_n;
    uint32_t max_tokens;
    int thinking;
    const char *tmpl;
} model_flags;

/* 2/1 when a[0] is a per-model flag (values taken), 0 when not, -1 after an error. */
static int model_flag(const char *a, const char *v, model_flags *f)
{
    int n;
    if ((n = gm_cli_stream_flag("serve", a, v, &f->sflags)) != 0)
        return n;
    if ((n = gm_cli_load_flag("serve", a, v, &f->load)) != 0)
        return n;
    if ((n = gm_cli_sampling_flag("serve", a, v, &f->so, &f->seed_set, &f->last_n)) != 0)
        return n;
    if (strcmp(a, "-n") == 0 || strcmp(a, "--max-tokens") == 0 || strcmp(a, "--n-predict") == 0)
        return gm_cli_parse_u32("serve", a, v, 0, 1u << 30, &f->max_tokens) ? 2 : -1;
    if (strcmp(a, "--no-think") == 0) {
        f->thinking = 0;
        return 1;
    }
    if (strcmp(a, "--think") == 0) {
        f->thinking = 1;
        return 1;
    }
    if (strcmp(a, "--chat-template-file") == 0) {
        if (!v) {
            gm_cli_error("serve", "%s needs a file", a);
            return -1;
        }
        f->tmpl = v;
        return 2;
    }
    return 0;
}

static void flags_default(model_flags *f)
{
    memset(f, 0, sizeof *f);
    gm_sampling_default(&f->so);
    f->last_n = 64;
    f->thinking = -1;
}

static bool flags_to_cfg(const model_flags *f, gm_srv_model_cfg *c)
{
    if (!gm_cli_stream_check("serve", &f->sflags) || !gm_cli_model_opts("serve", &f->sflags, &c->mopts))
        return false;
    c->mopts.progress = NULL; /* a server's log is no terminal */
    gm_cli_load_apply(&f->load, &c->mopts);
    c->sampling = f->so;
    c->sampling.penalty_last_n = (int32_t)(f->last_n == UINT32_MAX ? 1u << 20 : f->last_n);
    c->max_tokens = f->max_tokens;
    c->thinking = f->thinking;
    c->template_file = f->tmpl;
    return true;
}

/* The file name without its folders, .gguf and a split suffix: a model's id. */
static char *id_of(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && strcasecmp(b + n - 5, ".gguf") == 0)
        n -= 5;
    if (n > 15 && strncmp(b + n - 15, "-00001-of-", 10) == 0)
        n -= 15;
    return strndup(b, n);
}

static bool loopback(const char *host)
{
    return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 ||
           strncmp(host, "127.", 4) == 0;
}

int gm_cmd_serve(int argc, char **argv)
{
    gm_srv_opts o;
    gm_srv_opts_default(&o);
    const char *model = NULL, *config = NULL, *host = NULL, *key = NULL;
    int port = -1;
    bool no_auth = false, verbose = false;
    double budget_gb = -1;
    model_flags cmdline;
    flags_default(&cmdline);
    /* which per-model flags were typed: they override every entry's */
    char **typed = calloc((size_t)argc + 1, sizeof *typed);
    int n_typed = 0;
    if (!typed)
        return GM_EXIT_USAGE;
    typed[n_typed++] = argv[0];
    int status = GM_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t u;
        int n;
        if (gm_cli_is_help(a)) {
            help(stdout);
            free(typed);
            return GM_EXIT_OK;
        } else if (strcmp(a, "--config") == 0 || strcmp(a, "--host") == 0 || strcmp(a, "--api-key") == 0) {
            if (!v) {
                gm_cli_error("serve", "%s needs a value", a);
                goto out;
            }
            *(strcmp(a, "--config") == 0 ? &config : strcmp(a, "--host") == 0 ? &host : &key) = v;
            i++;
        } else if (strcmp(a, "--port") == 0) {
            if (!gm_cli_parse_u32("serve", a, v, 0, 65535, &u))
                goto out;
            port = (int)u, i++;
        } else if (strcmp(a, "--queue") == 0) {
            if (!gm_cli_parse_u32("serve", a, v, 0, 100000, &o.queue_cap))
                goto out;
            i++;
        } else if (strcmp(a, "--max-body-mb") == 0) {
            if (!gm_cli_parse_u32("serve", a, v, 1, 4096, &u))
                goto out;
            o.max_body_bytes = (uint64_t)u << 20, i++;
        } else if (strcmp(a, "--budget-gb") == 0 || strcmp(a, "--idle-unload") == 0 || strcmp(a, "--keepalive") == 0) {
            float x;
            if (!gm_cli_parse_float("serve", a, v, 0, 1e7f, &x))
                goto out;
            if (a[2] == 'b')
                budget_gb = x;
            else if (a[2] == 'i')
                o.idle_unload_s = x;
            else
                o.keepalive_s = x;
            i++;
        } else if (strcmp(a, "--no-auth") == 0) {
            no_auth = true;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbose = true;
        } else if ((n = model_flag(a, v, &cmdline)) != 0) {
            if (n < 0)
                goto out;
            for (int k = 0; k < n; k++)
                typed[n_typed++] = argv[i + k];
            i += n - 1;
        } else if (!gm_cli_model_arg("serve", a, &model)) {
            goto out;
        }
    }
    gm_cli_log_setup(verbose);

    /* the configuration file: needed to resolve an id, or to serve its models */
    struct stat st;
    const bool model_is_file = model && stat(model, &st) == 0;
    if (model && !model_is_file) {
        size_t ml = strlen(model);
        if (strstr(model, "://") || strncmp(model, "hf:", 3) == 0) {
            gm_cli_error("serve", "%s: serve takes a local file or an id of the configuration file; gmlx pull "
                                  "downloads a remote model first", model);
            goto out;
        }
        if (strchr(model, '/') || (ml > 5 && strcasecmp(model + ml - 5, ".gguf") == 0)) {
            gm_cli_error("serve", "%s: no such file", model);
            goto out;
        }
    }
    int crc = 0;
    gm_config *cfg = gm_cli_config_open("serve", config, config != NULL || (model && !model_is_file), &crc);
    if (crc)
        goto out;
    gm_srv_model_cfg *models = NULL;
    size_t n_models = 0;
    char **owned = NULL; /* strings to free */
    size_t n_owned = 0;
    size_t n_entries = model ? 1 : cfg ? gm_config_n_models(cfg) : 0;
    if (!n_entries) {
        gm_cli_error("serve", "no model to serve: name a GGUF file or an id, or give the configuration file models "
                              "(gmlx init DIR writes one)");
        gm_config_free(cfg);
        goto out;
    }
    models = calloc(n_entries, sizeof *models);
    owned = calloc(n_entries * 4 + 4, sizeof *owned);
    if (!models || !owned)
        goto fail;
    for (size_t e = 0; e < n_entries; e++) {
        model_flags f;
        flags_default(&f);
        gm_srv_model_cfg *c = &models[n_models];
        char *path = NULL;
        const char *name = model ? model : gm_config_model_at(cfg, e)->id;
        gm_config_resolved r = {0};
        bool resolved = false;
        if (model_is_file) {
            path = strdup(model);
            c->id = owned[n_owned++] = id_of(model);
        } else {
            gm_err err = {0};
            if (gm_config_resolve(cfg, name, &r, &err) != 0) {
                gm_cli_error("serve", "%s: %s", name, err.msg);
                goto fail;
            }
            resolved = true;
            if (gm_config_model_path(cfg, r.model, &path, &err) != 0) {
                if (model) {
                    gm_cli_error("serve", "%s", err.msg);
                    free(path);
                    gm_config_resolved_free(&r);
                    goto fail;
                }
                fprintf(stderr, "warning: %s: %s - not served (gmlx sync-models reconciles the file)\n", r.model->id,
                        err.msg);
                free(path);
                gm_config_resolved_free(&r);
                continue;
            }
            c->id = owned[n_owned++] = strdup(r.model->id);
            /* the entry's settings, then the flags typed here */
            for (size_t k = 0; k < r.n_args;) {
                int n = model_flag(r.args[k], k + 1 < r.n_args ? r.args[k + 1] : NULL, &f);
                if (n < 0) {
                    gm_config_resolved_free(&r);
                    free(path);
                    goto fail;
                }
                k += n ? (size_t)n : 1; /* a flag a server has no use for (--system) is passed over */
            }
        }
        for (int k = 1; k < n_typed;) {
            int n = model_flag(typed[k], k + 1 < n_typed ? typed[k + 1] : NULL, &f);
            k += n > 0 ? n : 1;
        }
        if (resolved)
            gm_config_resolved_free(&r);
        owned[n_owned++] = path;
        c->path = path;
        if (!flags_to_cfg(&f, c))
            goto fail;
        n_models++;
    }
    o.models = models;
    o.n_models = n_models;
    /* the server: flags, then the file's server: keys, then the defaults */
    const char *cfg_host = NULL, *cfg_key = NULL;
    double cfg_port = -1, cfg_budget = -1;
    if (cfg) {
        const char *v;
        cfg_host = gm_config_server_value(cfg, "host");
        cfg_key = gm_config_server_value(cfg, "api_key");
        if ((v = gm_config_server_value(cfg, "port")))
            cfg_port = atof(v);
        if ((v = gm_config_server_value(cfg, "budget_gb")))
            cfg_budget = atof(v);
        if ((v = gm_config_server_value(cfg, "no_auth")))
            no_auth |= strcmp(v, "true") == 0;
    }
    o.host = host ? host : cfg_host ? cfg_host : o.host;
    o.port = (uint16_t)(port >= 0 ? port : cfg_port >= 0 ? cfg_port : o.port);
    o.api_key = key ? key : cfg_key ? cfg_key : getenv("GMLX_API_KEY");
    if (budget_gb < 0)
        budget_gb = cfg_budget;
    o.budget_bytes = budget_gb > 0 ? (uint64_t)(budget_gb * (double)(1ull << 30)) : 0;
    if (budget_gb < 0 && n_models > 1) {
        /* several models: together they hold at most what the plan lets this machine's loads
         * hold, so one's arena is never squeezed by another's load */
        gm_model_footprint fp;
        gm_err ferr = {0};
        if (gm_model_footprint_of(models[0].path, &models[0].mopts, &fp, &ferr) == 0)
            o.budget_bytes = fp.ceiling_bytes;
    }
    if (!loopback(o.host) && !(o.api_key && *o.api_key) && !no_auth) {
        gm_cli_error("serve", "binding %s exposes this server beyond this machine: set an API key (--api-key, "
                              "server.api_key or GMLX_API_KEY), or pass --no-auth when something in front "
                              "authenticates", o.host);
        goto fail;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    gm_err err = {0};
    if (gm_srv_run(&o, &g_stop, &err) != 0)
        gm_cli_error("serve", "%s", err.msg);
    else
        status = GM_EXIT_OK;
fail:
    for (size_t k = 0; k < n_owned; k++)
        free(owned[k]);
    free(owned);
    free(models);
    gm_config_free(cfg);
out:
    free(typed);
    return status;
}
