/* gmlx-replay: replays a routing trace (GMLX_LOG_ROUTED) against LRU, the engine's decayed LFU,
 * Belady's optimal policy and the static hindsight set at equal slots per layer, and prints
 * their hit rates.
 * Exit status: 0 done, 2 bad usage or bad input (the message names the line), 1 anything else. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

#define MAX_SWEEP 64

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gmlx-replay TRACE (--slots N | --sweep N1,N2,... | --slots-per-layer-from FILE)\n"
            "                   [--halve-every N] [--varying-k]\n"
            "Replays a routing trace (GMLX_LOG_ROUTED=PATH: lines 'TOKEN LAYER E1 ... EK') against\n"
            "four arena policies with the same slots per MoE layer, and prints their hit rates:\n"
            "  LRU     evict the expert used longest ago\n"
            "  LFU     the engine's decayed LFU (src/stream/policy.c)\n"
            "  Belady  optimal offline: evict the expert whose next use is farthest away\n"
            "  Static  hindsight: keep the N experts each layer routes most over the trace (loaded\n"
            "          at first use); when routing has no temporal locality, no online policy\n"
            "          beats it on average, so LFU - Static is the policy's own shortfall\n"
            "Options:\n"
            "  --slots N                   N slots in every layer\n"
            "  --sweep N1,N2,...           one row group per slot count\n"
            "  --slots-per-layer-from FILE lines 'LAYER SLOTS'; layers the file omits take --slots\n"
            "  --halve-every N             LFU halves a layer's counters every N calls to it\n"
            "                              (default %u; 0 = never)\n"
            "  --varying-k                 accept lines with different numbers of experts\n"
            "Exit status: 0 done, 2 bad usage or input, 1 other failure.\n",
            GM_POLICY_HALVE_DEFAULT);
}

static int bad_usage(const char *msg, const char *arg)
{
    fprintf(stderr, "gmlx-replay: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    fprintf(stderr, "Try 'gmlx-replay --help'.\n");
    return 2;
}

/* A decimal count in [lo, UINT32_MAX]; 0 on success. */
static int parse_u32(const char *s, uint32_t lo, uint32_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > UINT32_MAX || v < lo)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static void print_row(const char *slots, const char *name, const gm_replay_result *r)
{
    double pct = r->lookups ? 100.0 * (double)r->hits / (double)r->lookups : 0.0;
    char hits[64];
    snprintf(hits, sizeof hits, "%llu of %llu", (unsigned long long)r->hits,
             (unsigned long long)r->lookups);
    printf("%11s  %-7s %7.2f%%  %-24s %6.1f%% / %5.1f%% / %5.1f%%   L%u\n", slots, name, pct, hits,
           r->spread.min_pct, r->spread.median_pct, r->spread.max_pct, r->spread.min_layer);
}

static double rate(const gm_replay_result *r)
{
    return r->lookups ? 100.0 * (double)r->hits / (double)r->lookups : 0.0;
}

int main(int argc, char **argv)
{
    const char *trace_path = NULL, *slots_file = NULL, *sweep_arg = NULL;
    uint32_t slots_n = 0, halve = GM_POLICY_HALVE_DEFAULT;
    bool have_slots = false, varying = false;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--slots")) {
            if (parse_u32(v, 1, &slots_n))
                return bad_usage("--slots needs a count of at least 1", v);
            have_slots = true;
            i++;
        } else if (!strcmp(a, "--sweep")) {
            if (!v)
                return bad_usage("--sweep needs a list of slot counts", NULL);
            sweep_arg = v;
            i++;
        } else if (!strcmp(a, "--slots-per-layer-from")) {
            if (!v)
                return bad_usage("--slots-per-layer-from needs a file", NULL);
            slots_file = v;
            i++;
        } else if (!strcmp(a, "--halve-every")) {
            if (parse_u32(v, 0, &halve))
                return bad_usage("--halve-every needs a count (0 = never)", v);
            i++;
        } else if (!strcmp(a, "--varying-k")) {
            varying = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            return bad_usage("unknown option", a);
        } else if (!trace_path) {
            trace_path = a;
        } else {
            return bad_usage("more than one trace file", a);
        }
    }
    if (!trace_path)
        return bad_usage("no trace file", NULL);
    if (sweep_arg && (have_slots || slots_file))
        return bad_usage("--sweep replaces --slots and --slots-per-layer-from", NULL);
    if (!sweep_arg && !have_slots && !slots_file)
        return bad_usage("give --slots N, --sweep N1,N2,... or --slots-per-layer-from FILE", NULL);

    uint32_t sweep[MAX_SWEEP], n_sweep = 0;
    if (sweep_arg) {
        char buf[1024];
        if (strlen(sweep_arg) >= sizeof buf)
            return bad_usage("--sweep list too long", NULL);
        strcpy(buf, sweep_arg);
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (n_sweep == MAX_SWEEP)
                return bad_usage("--sweep takes at most 64 counts", NULL);
            if (parse_u32(tok, 1, &sweep[n_sweep++]))
                return bad_usage("--sweep needs counts of at least 1", tok);
        }
        if (n_sweep == 0)
            return bad_usage("--sweep needs a list of slot counts", sweep_arg);
    } else {
        sweep[n_sweep++] = slots_n;
    }

    gm_err err = {0};
    gm_trace t;
    int rc = gm_trace_load(trace_path, varying, &t, &err);
    if (rc) {
        fprintf(stderr, "gmlx-replay: %s\n", err.msg);
        return rc == GM_EFORMAT || rc == GM_EIO ? 2 : 1;
    }
    uint32_t first = 0;
    while (first < t.n_layers && t.n_experts[first] == 0)
        first++;
    uint32_t max_e = 0;
    for (uint32_t l = 0; l < t.n_layers; l++)
        if (t.n_experts[l] > max_e)
            max_e = t.n_experts[l];
    printf("trace %s: %u tokens, %u MoE layers (L%u..L%u), %llu calls, ", trace_path, t.n_tokens,
           t.n_present, first, t.n_layers - 1, (unsigned long long)t.n_lines);
    if (t.k_min == t.k_max)
        printf("%u experts per call", t.k_max);
    else
        printf("%u..%u experts per call", t.k_min, t.k_max);
    printf(", expert ids up to %u\n", max_e - 1);
    if (halve)
        printf("LFU halves a layer's counters every %u calls to it\n", halve);
    else
        printf("LFU never halves its counters\n");

    uint32_t *slots = malloc((t.n_layers ? t.n_layers : 1) * sizeof *slots);
    if (!slots) {
        fprintf(stderr, "gmlx-replay: out of memory\n");
        gm_trace_free(&t);
        return 1;
    }
    int status = 0;
    for (uint32_t si = 0; si < n_sweep && status == 0; si++) {
        char label[32];
        for (uint32_t l = 0; l < t.n_layers; l++)
            slots[l] = have_slots || sweep_arg ? sweep[si] : UINT32_MAX;
        if (slots_file) {
            if ((rc = gm_replay_load_slots(slots_file, slots, t.n_layers, &err))) {
                fprintf(stderr, "gmlx-replay: %s\n", err.msg);
                status = 2;
                break;
            }
            for (uint32_t l = 0; l < t.n_layers; l++)
                if (t.n_experts[l] > 0 && slots[l] == UINT32_MAX) {
                    fprintf(stderr, "gmlx-replay: %s names no slots for layer %u, and no --slots "
                            "gives a default\n", slots_file, l);
                    status = 2;
                    break;
                }
            if (status)
                break;
            snprintf(label, sizeof label, "from file");
        } else {
            snprintf(label, sizeof label, "%u", sweep[si]);
        }
        gm_replay_result r[GM_REPLAY_KINDS];
        memset(r, 0, sizeof r);
        for (int kind = 0; kind < GM_REPLAY_KINDS && status == 0; kind++) {
            if ((rc = gm_replay_run(&t, (gm_replay_kind)kind, slots, halve, &r[kind], &err))) {
                fprintf(stderr, "gmlx-replay: %s\n", err.msg);
                status = rc == GM_ERANGE ? 2 : 1;
            }
        }
        if (status == 0) {
            if (si == 0)
                printf("\n%11s  %-7s %8s  %-24s %s\n", "slots/layer", "policy", "hit rate",
                       "hits of lookups", "per layer min / median / max   coldest");
            for (int kind = 0; kind < GM_REPLAY_KINDS; kind++)
                print_row(label, gm_replay_kind_name((gm_replay_kind)kind), &r[kind]);
            double lfu = rate(&r[GM_REPLAY_LFU]), lru = rate(&r[GM_REPLAY_LRU]),
                   opt = rate(&r[GM_REPLAY_BELADY]), fix = rate(&r[GM_REPLAY_STATIC]);
            printf("%11s  LFU - Belady %+.2f points, LRU - Belady %+.2f, LFU - LRU %+.2f, LFU - Static %+.2f\n",
                   label, lfu - opt, lru - opt, lfu - lru, lfu - fix);
        }
        for (int kind = 0; kind < GM_REPLAY_KINDS; kind++)
            gm_replay_result_free(&r[kind]);
    }
    free(slots);
    gm_trace_free(&t);
    return status;
}
