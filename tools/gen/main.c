/* tools/gen/main: the gmlx-gen command (see gen.h and docs/generator.md). Prints progress and
 * errors; exit status 0 on success, 1 when writing failed, 2 for bad arguments. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gen.h"
#include "gguf/types.h"

static void on_event(void *ctx, const gm_gen_event *ev)
{
    (void)ctx;
    static int tty = -1;
    static double last_line = 0;
    if (tty < 0)
        tty = isatty(STDERR_FILENO);
    if (ev->kind == GM_GEN_EV_NOTE) {
        fprintf(stderr, "%sgmlx-gen: note: %s\n", tty ? "\r\033[K" : "", ev->msg);
        return;
    }
    double gb = (double)ev->done_bytes / 1e9, total = (double)ev->total_bytes / 1e9;
    double rate = ev->elapsed_s > 0 ? gb / ev->elapsed_s : 0;
    if (ev->kind == GM_GEN_EV_PROGRESS) {
        double eta = rate > 0 ? (total - gb) / rate : 0;
        if (tty) {
            fprintf(stderr, "\r\033[K%8.2f / %.2f GB  %5.2f GB/s  ETA %4.0f s", gb, total, rate,
                    eta);
        } else if (ev->elapsed_s - last_line >= 10) {
            last_line = ev->elapsed_s;
            fprintf(stderr, "gmlx-gen: %.2f / %.2f GB  %.2f GB/s  ETA %.0f s\n", gb, total, rate,
                    eta);
        }
    } else if (tty) {
        fprintf(stderr, "\r\033[K");
    }
    fflush(stderr);
}

/* The file being written (OUT.tmp), removed when a signal ends the run: a killed run of a
 * 500 GB file would otherwise leave 500 GB of reserved disk behind. */
static char g_tmp_path[4200];

static void on_signal(int sig)
{
    unlink(g_tmp_path); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void print_shape(const gm_gen_result *r)
{
    const gm_gen_hparams *h = &r->hp;
    printf("preset %s: %s, %u blocks (%u dense), hidden %u, %u experts top-%u", h->preset,
           gm_gen_arch_name(h->arch), h->n_layer, h->n_dense_lead, h->n_embd, h->n_expert,
           h->n_expert_used);
    if (h->n_expert_shared)
        printf(" + %u shared", h->n_expert_shared);
    printf(" of FFN %u, vocab %u\n", h->n_ff_exp, h->n_vocab);
    printf("types: experts %s, dense %s; %llu tensors\n", gm_type_name(h->expert_type),
           gm_type_name(h->dense_type), (unsigned long long)r->n_tensors);
    printf("sizes: data %.3f GB, routed experts %.3f GB, one expert (gate+up+down) %.2f MB\n",
           (double)r->data_bytes / 1e9, (double)r->expert_bytes / 1e9,
           (double)r->expert_slice_bytes / 1e6);
}

int main(int argc, char **argv)
{
    gm_gen_opts o;
    gm_gen_opts_init(&o);
    o.on_event = on_event;
    gm_err err = {0};
    int rc = gm_gen_parse_args(&o, argc - 1, argv + 1, &err);
    if (rc < 0) {
        fprintf(stderr, "gmlx-gen: error: %s\n", err.msg);
        return 2;
    }
    if (rc == GM_GEN_ARGS_HELP) {
        fputs(gm_gen_usage(), stdout);
        return 0;
    }
    if (rc == GM_GEN_ARGS_LIST) {
        for (int i = 0; i < gm_gen_n_presets(); i++)
            printf("%-18s %s\n", gm_gen_preset_name(i), gm_gen_preset_desc(i));
        return 0;
    }
    if (!o.dry_run && o.output) {
        snprintf(g_tmp_path, sizeof g_tmp_path, "%s.tmp", o.output);
        static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
            signal(sigs[i], on_signal);
        /* past RLIMIT_FSIZE a write fails with EFBIG (an error the writer reports and cleans
         * up after) instead of killing the process */
        signal(SIGXFSZ, SIG_IGN);
    }
    gm_gen_result res;
    rc = gm_gen_run(&o, &res, &err);
    if (rc < 0) {
        fprintf(stderr, "gmlx-gen: error: %s\n", err.msg);
        return rc == GM_EINVAL ? 2 : 1;
    }
    if (o.dry_run) {
        print_shape(&res);
        return 0;
    }
    if (!o.quiet)
        print_shape(&res);
    if (o.sparse)
        printf("wrote %s: %.3f GB (sparse: tensor data not written)\n", o.output,
               (double)res.file_bytes / 1e9);
    else
        printf("wrote %s: %.3f GB in %.2f s, %.2f GB/s%s\n", o.output,
               (double)res.file_bytes / 1e9, res.seconds,
               res.seconds > 0 ? (double)res.data_bytes / 1e9 / res.seconds : 0.0,
               res.direct_io ? " (O_DIRECT)" : "");
    return 0;
}
