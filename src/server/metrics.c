/* server/metrics: counters and histograms in the Prometheus text format (GET /metrics). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

#define N_ROUTES 8
#define N_TTFT 12
#define N_RATE 10
static const double k_ttft[N_TTFT] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
static const double k_rate[N_RATE] = {0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500};

typedef struct route_count {
    char route[40];
    int status;
    uint64_t n;
} route_count;

static struct {
    pthread_mutex_t mu;
    route_count counts[64];
    size_t n_counts;
    uint64_t prompt_tokens, gen_tokens, generations, failed, canceled;
    uint64_t ttft_b[N_TTFT + 1], rate_b[N_RATE + 1];
    double ttft_sum, rate_sum;
    uint64_t ttft_n, rate_n;
} g_m = {.mu = PTHREAD_MUTEX_INITIALIZER};

void srv_metrics_request(const char *route, int status)
{
    pthread_mutex_lock(&g_m.mu);
    size_t i = 0;
    while (i < g_m.n_counts && !(g_m.counts[i].status == status && strcmp(g_m.counts[i].route, route) == 0))
        i++;
    if (i == g_m.n_counts && i < sizeof g_m.counts / sizeof g_m.counts[0]) {
        snprintf(g_m.counts[i].route, sizeof g_m.counts[i].route, "%s", route);
        g_m.counts[i].status = status;
        g_m.n_counts++;
    }
    if (i < g_m.n_counts)
        g_m.counts[i].n++;
    pthread_mutex_unlock(&g_m.mu);
}

static void observe(uint64_t *b, const double *bounds, int n, double v)
{
    int i = 0;
    while (i < n && v > bounds[i])
        i++;
    b[i]++;
}

void srv_metrics_generation(const srv_job *j)
{
    pthread_mutex_lock(&g_m.mu);
    if (j->status) {
        g_m.failed++;
    } else if (j->started) {
        g_m.generations++;
        g_m.prompt_tokens += j->n_prompt;
        g_m.gen_tokens += j->res.n_generated;
        if (j->res.n_generated) {
            observe(g_m.ttft_b, k_ttft, N_TTFT, j->res.ttft_s);
            g_m.ttft_sum += j->res.ttft_s;
            g_m.ttft_n++;
        }
        if (j->res.n_generated > 1 && j->res.decode_s > 0) {
            double rate = (double)(j->res.n_generated - 1) / j->res.decode_s;
            observe(g_m.rate_b, k_rate, N_RATE, rate);
            g_m.rate_sum += rate;
            g_m.rate_n++;
        }
    }
    pthread_mutex_unlock(&g_m.mu);
}

void srv_metrics_canceled(void)
{
    pthread_mutex_lock(&g_m.mu);
    g_m.canceled++;
    pthread_mutex_unlock(&g_m.mu);
}

static void histogram(sbuf *b, const char *name, const char *help, const uint64_t *bk, const double *bounds, int n,
                      double sum, uint64_t count)
{
    sbuf_addf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < n; i++) {
        cum += bk[i];
        sbuf_addf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    cum += bk[n];
    sbuf_addf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %g\n%s_count %llu\n", name, (unsigned long long)cum, name, sum,
              name, (unsigned long long)count);
}

char *srv_metrics_text(srv_pool *p)
{
    sbuf b = {0};
    pthread_mutex_lock(&g_m.mu);
    sbuf_adds(&b, "# HELP gmlx_requests_total HTTP requests answered, by route and status.\n"
                  "# TYPE gmlx_requests_total counter\n");
    for (size_t i = 0; i < g_m.n_counts; i++)
        sbuf_addf(&b, "gmlx_requests_total{route=\"%s\",code=\"%d\"} %llu\n", g_m.counts[i].route,
                  g_m.counts[i].status, (unsigned long long)g_m.counts[i].n);
    sbuf_addf(&b, "# HELP gmlx_generations_total Generations finished.\n# TYPE gmlx_generations_total counter\n"
                  "gmlx_generations_total %llu\n"
                  "# HELP gmlx_generations_failed_total Generations that ended in an error.\n"
                  "# TYPE gmlx_generations_failed_total counter\ngmlx_generations_failed_total %llu\n"
                  "# HELP gmlx_generations_canceled_total Generations whose client went away.\n"
                  "# TYPE gmlx_generations_canceled_total counter\ngmlx_generations_canceled_total %llu\n"
                  "# HELP gmlx_prompt_tokens_total Prompt tokens of finished generations.\n"
                  "# TYPE gmlx_prompt_tokens_total counter\ngmlx_prompt_tokens_total %llu\n"
                  "# HELP gmlx_tokens_generated_total Tokens generated.\n"
                  "# TYPE gmlx_tokens_generated_total counter\ngmlx_tokens_generated_total %llu\n",
              (unsigned long long)g_m.generations, (unsigned long long)g_m.failed, (unsigned long long)g_m.canceled,
              (unsigned long long)g_m.prompt_tokens, (unsigned long long)g_m.gen_tokens);
    histogram(&b, "gmlx_ttft_seconds", "Time from a generation's start to its first token.", g_m.ttft_b, k_ttft,
              N_TTFT, g_m.ttft_sum, g_m.ttft_n);
    histogram(&b, "gmlx_decode_tokens_per_second", "Decode speed of each generation.", g_m.rate_b, k_rate, N_RATE,
              g_m.rate_sum, g_m.rate_n);
    pthread_mutex_unlock(&g_m.mu);

    sbuf_adds(&b, "# HELP gmlx_queue_depth Requests waiting for a model (the running one not counted).\n"
                  "# TYPE gmlx_queue_depth gauge\n");
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->n; i++)
        sbuf_addf(&b, "gmlx_queue_depth{model=\"%s\"} %zu\n", p->models[i].id, p->models[i].queued);
    sbuf_adds(&b, "# HELP gmlx_model_resident Whether the model is loaded.\n# TYPE gmlx_model_resident gauge\n");
    for (size_t i = 0; i < p->n; i++)
        sbuf_addf(&b, "gmlx_model_resident{model=\"%s\"} %d\n", p->models[i].id, p->models[i].m != NULL);
    sbuf_adds(&b, "# HELP gmlx_model_resident_bytes Memory a loaded model holds (its plan's footprint).\n"
                  "# TYPE gmlx_model_resident_bytes gauge\n");
    for (size_t i = 0; i < p->n; i++)
        sbuf_addf(&b, "gmlx_model_resident_bytes{model=\"%s\"} %llu\n", p->models[i].id,
                  p->models[i].m ? (unsigned long long)p->models[i].fp.resident_bytes : 0ull);
    sbuf_addf(&b, "# HELP gmlx_budget_bytes The memory budget of the resident models (0: none).\n"
                  "# TYPE gmlx_budget_bytes gauge\ngmlx_budget_bytes %llu\n",
              (unsigned long long)p->opts->budget_bytes);
    gm_stats *st = calloc(p->n ? p->n : 1, sizeof *st);
    for (size_t i = 0; st && i < p->n; i++)
        if (p->models[i].m)
            st[i] = p->models[i].stats; /* as of the model's last request (the model is its worker's) */
    pthread_mutex_unlock(&p->lock);
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"gmlx_arena_lookups_total", "counter", "Decode expert lookups in the decode arena."},
        {"gmlx_arena_hits_total", "counter", "Decode expert lookups the arena held."},
        {"gmlx_arena_hit_ratio", "gauge", "Arena hits over lookups since the load."},
        {"gmlx_expert_bytes_read_total", "counter", "Expert bytes read from the SSD."},
        {"gmlx_expert_stall_seconds_total", "counter", "Time compute waited for expert reads."},
    };
    for (size_t f = 0; st && f < sizeof fam / sizeof fam[0]; f++) {
        sbuf_addf(&b, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name, fam[f].type);
        for (size_t i = 0; i < p->n; i++) {
            if (!st[i].streams)
                continue;
            const gm_stats *x = &st[i];
            double v = f == 0 ? (double)x->lookups : f == 1 ? (double)x->hits
                     : f == 2 ? (x->lookups ? (double)x->hits / (double)x->lookups : 0.0)
                     : f == 3 ? (double)x->bytes_read : x->stall_s;
            sbuf_addf(&b, "%s{model=\"%s\"} %.17g\n", fam[f].name, p->models[i].id, v);
        }
    }
    free(st);
    if (b.oom) {
        sbuf_free(&b);
        return NULL;
    }
    return b.p;
}
