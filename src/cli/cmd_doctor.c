/* gmlx doctor: checks the configuration file and this machine for what streaming needs, one
 * PASS / WARN / FAIL / SKIP line per check, and exits 1 when a check FAILs. Reads headers only
 * (and, for the drive test, 64 MiB of one model's expert data); makes no network calls. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include <jansson.h>

#include "cli.h"
#include "discover.h"

typedef enum { ST_PASS, ST_WARN, ST_FAIL, ST_SKIP } status;
static const char *const k_status[] = {"PASS", "WARN", "FAIL", "SKIP"};

typedef struct row {
    status st;
    char name[32];
    char detail[1024];
} row;

typedef struct rows {
    row v[32];
    size_t n;
} rows;

static void add(rows *r, status st, const char *name, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add(rows *r, status st, const char *name, const char *fmt, ...)
{
    if (r->n >= sizeof r->v / sizeof r->v[0])
        return;
    row *x = &r->v[r->n++];
    x->st = st;
    snprintf(x->name, sizeof x->name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->detail, sizeof x->detail, fmt, ap);
    va_end(ap);
}

static void help(FILE *f)
{
    fprintf(f, "usage: gmlx doctor [--config FILE] [--json] [--no-drive-test]\n\n"
               "Checks the configuration file and this machine, one line per check:\n"
               "  config     the file parses (its warnings counted)\n"
               "  models     each entry's file exists and is a GGUF of a family gmlx runs\n"
               "  stream     a stream: experts entry that cannot stream here (the plan's verdict),\n"
               "             and an entry without it whose experts would stream\n"
               "  memlock    the locked-memory limit against the pinned weights and the arena\n"
               "  io         io_uring, and O_DIRECT on each model's filesystem\n"
               "  thp        transparent huge pages (the decode arena asks for them)\n"
               "  drive      the read speed of the drive under the first streamed model\n"
               "  disk       free space where models live\n"
               "  psi        memory pressure stall information (the arena's pressure lever)\n"
               "  kernels    the CPU kernel level this machine gets\n"
               "  cgroup     the memory limit of this process's cgroup\n"
               "  gpu        the CUDA device --gpu would use (SKIP without one)\n\n"
               "options:\n"
               "  --config FILE    the file (default: the one gmlx finds, see gmlx run --help)\n"
               "  --json           {\"version\", \"checks\": [{name, status, detail}], \"ok\"}\n"
               "  --no-drive-test  skip the drive read test\n"
               "  -h, --help       this help\n\n"
               "exit status: 0 nothing failed (warnings are fine), 1 a check failed, 2 bad usage.\n");
}

typedef struct warn_count {
    int n;
    char first[512];
} warn_count;

static void count_warn(void *user, const char *line)
{
    warn_count *w = user;
    if (!w->n++)
        snprintf(w->first, sizeof w->first, "%s", line);
}

static void gb(uint64_t b, char *out, size_t n) { gm_format_bytes(b, out, n); }

/* One configured entry's facts. */
typedef struct entry_facts {
    const gm_config_model *m;
    char *path;
    bool exists, readable, runnable;
    char why[512];
    gm_file_plan plan;
    bool planned, moe;
} entry_facts;

static void judge(entry_facts *e, const gm_tuning *tune)
{
    gm_err err = {0};
    gm_file *g = NULL;
    if (gm_file_open(&g, e->path, &err) != 0) {
        snprintf(e->why, sizeof e->why, "%s", err.msg);
        return;
    }
    const gm_file_info *d = gm_file_get_info(g);
    if (!d->described) {
        snprintf(e->why, sizeof e->why, "%s", d->describe_error);
        gm_file_close(g);
        return;
    }
    e->readable = true;
    e->runnable = d->runnable;
    if (!d->runnable)
        snprintf(e->why, sizeof e->why, "%s", d->not_runnable);
    e->moe = d->n_moe_layers > 0;
    gm_file_plan_opts po;
    gm_file_plan_opts_default(&po);
    po.tuning = *tune;
    /* the machine was probed with this tuning before: the plan cannot fail on it */
    e->planned = gm_file_plan_compute(g, &po, &e->plan, NULL, &err) == 0;
    gm_file_close(g);
}

static bool read_first_line(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(out, (int)n, f) != NULL;
    fclose(f);
    if (ok)
        out[strcspn(out, "\n")] = '\0';
    return ok;
}

/* CAP_IPC_LOCK in the effective set: mlock is not bound by RLIMIT_MEMLOCK (root has it). */
static bool can_lock_any(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return false;
    char line[256];
    unsigned long long caps = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "CapEff: %llx", &caps) == 1;
    fclose(f);
    return found && (caps >> 14 & 1);
}

int gm_cmd_doctor(int argc, char **argv)
{
    const char *config = NULL;
    bool json = false, drive = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (gm_cli_is_help(a)) {
            help(stdout);
            return GM_EXIT_OK;
        } else if (strcmp(a, "--config") == 0 && i + 1 < argc) {
            config = argv[++i];
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--no-drive-test") == 0) {
            drive = false;
        } else {
            gm_cli_error("doctor", "unknown argument '%s' (see gmlx doctor --help)", a);
            return GM_EXIT_USAGE;
        }
    }
    rows r = {0};
    gm_tuning tune;
    if (!gm_cli_tuning("doctor", &tune))
        return GM_EXIT_USAGE;
    gm_machine sys;
    gm_err err = {0};
    if (gm_machine_probe(&sys, &tune, &err) != 0) {
        gm_cli_error("doctor", "%s", err.msg);
        return GM_EXIT_USAGE;
    }
    char b1[32], b2[32], b3[32];

    /* config */
    bool searched;
    char *path = gm_cli_config_path(config, &searched);
    gm_config *c = NULL;
    warn_count wc = {0};
    if (!path) {
        add(&r, ST_WARN, "config", "no configuration file (gmlx init DIR writes one); searched ./gmlx.yaml, "
                                   "~/.config/gmlx/gmlx.yaml (or $XDG_CONFIG_HOME/gmlx), ~/.gmlx.yaml");
    } else {
        gm_config_opts o = gm_cli_config_opts();
        o.warn = count_warn;
        o.warn_user = &wc;
        if (gm_config_load(&c, path, &o, &err) != 0) {
            if (err.code == GM_ENOTFOUND && config) {
                gm_cli_error("doctor", "no configuration file at %s", config);
                free(path);
                return GM_EXIT_USAGE;
            }
            add(&r, ST_FAIL, "config", "%s", err.msg);
        } else if (wc.n) {
            add(&r, ST_WARN, "config", "loaded %s with %d warning(s): %s", path, wc.n, wc.first);
        } else {
            add(&r, ST_PASS, "config", "%s", path);
        }
    }

    /* models */
    size_t n = c ? gm_config_n_models(c) : 0;
    entry_facts *ef = calloc(n ? n : 1, sizeof *ef);
    if (!ef) {
        gm_cli_error("doctor", "out of memory");
        gm_config_free(c);
        free(path);
        return GM_EXIT_USAGE;
    }
    if (!c) {
        add(&r, ST_SKIP, "models", "no configuration file");
    } else if (!n) {
        add(&r, ST_WARN, "models", "no models: add entries under models: (gmlx sync-models DIR)");
    } else {
        char misses[1024] = "";
        size_t pos = 0, n_bad = 0;
        for (size_t i = 0; i < n; i++) {
            entry_facts *e = &ef[i];
            e->m = gm_config_model_at(c, i);
            gm_err perr = {0};
            e->exists = gm_config_model_path(c, e->m, &e->path, &perr) == 0;
            if (e->exists)
                judge(e, &tune);
            const char *what = !e->exists ? perr.msg : !e->readable || !e->runnable ? e->why : NULL;
            if (what) {
                if (n_bad < 3 && pos < sizeof misses)
                    pos += (size_t)snprintf(misses + pos, sizeof misses - pos, "%s%s: %s", n_bad ? "; " : "",
                                            e->m->id, what);
                n_bad++;
            }
        }
        if (n_bad)
            add(&r, ST_FAIL, "models", "%s%s (gmlx sync-models drops entries whose files are gone)", misses,
                n_bad > 3 ? " (+more)" : "");
        else
            add(&r, ST_PASS, "models", "%zu model(s), every file present and runnable", n);
    }

    /* stream verdicts */
    if (!n) {
        add(&r, ST_SKIP, "stream", "no models configured");
    } else {
        char fail[1024] = "", warn[1024] = "";
        size_t fp = 0, wp = 0;
        for (size_t i = 0; i < n; i++) {
            entry_facts *e = &ef[i];
            if (!e->planned || !e->runnable)
                continue;
            char line[256];
            snprintf(line, sizeof line, "%s", e->plan.verdict_line);
            bool streams = e->plan.streams;
            if (e->plan.verdict == GM_PLAN_CANNOT_STREAM && fp < sizeof fail)
                fp += (size_t)snprintf(fail + fp, sizeof fail - fp, "%s%s%s cannot run on this machine (%s)",
                                       fp ? "; " : "", e->m->id,
                                       e->m->stream == GM_CONFIG_STREAM_EXPERTS ? " (stream: experts)" : "", line);
            else if (streams && e->m->stream == GM_CONFIG_STREAM_UNSET && wp < sizeof warn)
                wp += (size_t)snprintf(warn + wp, sizeof warn - wp,
                                       "%s%s: its experts stream here (set stream: experts, or gmlx sync-models)",
                                       wp ? "; " : "", e->m->id);
            else if (!streams && e->m->stream == GM_CONFIG_STREAM_EXPERTS && wp < sizeof warn)
                wp += (size_t)snprintf(warn + wp, sizeof warn - wp,
                                       "%s%s: stream: experts, but its experts fit in memory here (gmlx "
                                       "sync-models drops the key; it decodes faster without it)",
                                       wp ? "; " : "", e->m->id);
        }
        if (fp)
            add(&r, ST_FAIL, "stream", "%s", fail);
        else if (wp)
            add(&r, ST_WARN, "stream", "%s", warn);
        else
            add(&r, ST_PASS, "stream", "every entry's placement matches the plan for this machine");
    }

    /* memlock: what a load pins (every-token weights) and wires (the arena) */
    uint64_t need = 0;
    const entry_facts *biggest = NULL;
    for (size_t i = 0; i < n; i++)
        if (ef[i].planned && ef[i].runnable) {
            uint64_t b = ef[i].plan.every_token_bytes + ef[i].plan.arena_bytes;
            if (b > need)
                need = b, biggest = &ef[i];
        }
    if (sys.memlock_limit_bytes == UINT64_MAX) {
        add(&r, ST_PASS, "memlock", "unlimited");
    } else if (can_lock_any()) {
        gb(sys.memlock_limit_bytes, b1, sizeof b1);
        add(&r, ST_PASS, "memlock", "limit %s, but this process may lock any amount (CAP_IPC_LOCK)", b1);
    } else if (!biggest) {
        gb(sys.memlock_limit_bytes, b1, sizeof b1);
        add(&r, ST_SKIP, "memlock", "limit %s; no model to compare with", b1);
    } else {
        gb(sys.memlock_limit_bytes, b1, sizeof b1);
        gb(need, b2, sizeof b2);
        if (sys.memlock_limit_bytes < need)
            add(&r, ST_WARN, "memlock", "limit %s is below the %s %s pins and wires: they stay in memory unlocked, "
                                        "where the kernel may reclaim them (raise it: ulimit -l unlimited, or "
                                        "LimitMEMLOCK=infinity in systemd)",
                b1, b2, biggest->m->id);
        else
            add(&r, ST_PASS, "memlock", "limit %s holds the %s %s pins and wires", b1, b2, biggest->m->id);
    }

    /* io: io_uring, and O_DIRECT on each model's filesystem */
    {
        gm_err ierr = {0};
        bool uring = gm_machine_io_uring(&ierr) == 0;
        char no_direct[512] = "";
        size_t pos = 0, n_checked = 0;
        for (size_t i = 0; i < n; i++) {
            if (!ef[i].exists)
                continue;
            bool direct = false;
            gm_err derr = {0};
            if (gm_machine_direct_io(ef[i].path, &direct, &derr) == 0) {
                n_checked++;
                if (!direct && pos < sizeof no_direct)
                    pos += (size_t)snprintf(no_direct + pos, sizeof no_direct - pos, "%s%s", pos ? ", " : "",
                                            ef[i].m->id);
            }
        }
        if (!uring)
            add(&r, ST_WARN, "io", "io_uring unavailable (%s): reads go through a thread pool (slower on fast "
                                   "drives)%s%s", ierr.msg, pos ? "; no O_DIRECT for " : "", no_direct);
        else if (pos)
            add(&r, ST_WARN, "io", "io_uring ok; the filesystem of %s refuses O_DIRECT: reads go through the page "
                                   "cache", no_direct);
        else
            add(&r, ST_PASS, "io", "io_uring ok%s", n_checked ? "; O_DIRECT on every model's filesystem" : "");
    }

    /* transparent huge pages */
    {
        char thp[256];
        if (!read_first_line("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp))
            add(&r, ST_SKIP, "thp", "/sys/kernel/mm/transparent_hugepage/enabled is not readable");
        else if (strstr(thp, "[never]"))
            add(&r, ST_WARN, "thp", "%s: the decode arena gets 4 KiB pages (echo madvise > "
                                    "/sys/kernel/mm/transparent_hugepage/enabled)", thp);
        else
            add(&r, ST_PASS, "thp", "%s", thp);
    }

    /* the CUDA device --gpu would use */
    {
        gm_gpu_device gd;
        gm_err gerr = {0};
        char tot[32], fre[32];
        if (gm_machine_gpu(&gd, &gerr) != 0) {
            add(&r, ST_SKIP, "gpu", "no GPU for --gpu: %s", gerr.msg);
        } else {
            gb(gd.total_bytes, tot, sizeof tot);
            gb(gd.free_bytes, fre, sizeof fre);
            add(&r, ST_PASS, "gpu", "%s (compute %d.%d, %d SMs), %s of %s free, driver %d.%d, runtime %d.%d%s: --gpu "
                "can use it", gd.name, gd.cc_major, gd.cc_minor, gd.n_sms, fre, tot, gd.driver_version / 1000,
                gd.driver_version % 1000 / 10, gd.runtime_version / 1000, gd.runtime_version % 1000 / 10,
                gd.n_devices > 1 ? " (device 0 of several)" : "");
        }
    }

    /* the drive test, under the first model that streams (or any MoE) */
    if (!drive) {
        add(&r, ST_SKIP, "drive", "--no-drive-test");
    } else {
        const entry_facts *t = NULL;
        for (size_t i = 0; i < n && !t; i++)
            if (ef[i].planned && ef[i].runnable && ef[i].moe)
                t = &ef[i];
        if (!t) {
            add(&r, ST_SKIP, "drive", "no MoE model configured to read from");
        } else {
            gm_file *g = NULL;
            double gbs = -1;
            gm_err derr = {0};
            if (gm_file_open(&g, t->path, &derr) == 0) {
                int drc = gm_file_drive_test(g, &gbs, &derr); /* a description error fails here */
                if (drc != 0)
                    add(&r, ST_FAIL, "drive", "%s: %s", t->m->id, derr.msg);
                else if (gbs < 0)
                    add(&r, ST_SKIP, "drive", "%s: its expert stacks are too small to measure", t->m->id);
                else
                    add(&r, gbs < 0.5 ? ST_WARN : ST_PASS, "drive", "%.2f GB/s under %s%s", gbs, t->m->id,
                        gbs >= gm_fast_disk_gb_s() ? " (fast: --stream-fast-disk auto reads ahead harder)"
                        : gbs < 0.5                ? " (slow: streamed decoding waits on this drive)"
                                                   : "");
            } else {
                add(&r, ST_FAIL, "drive", "%s: %s", t->m->id, derr.msg);
            }
            gm_file_close(g);
        }
    }

    /* free disk where models live */
    {
        const char *where = c && gm_config_n_model_dirs(c) ? gm_config_model_dir(c, 0) : getenv("HOME");
        struct statvfs vs;
        if (!where || statvfs(where, &vs) != 0) {
            add(&r, ST_SKIP, "disk", "%s: %s", where ? where : "(no HOME)", where ? strerror(errno) : "");
        } else {
            uint64_t free_b = (uint64_t)vs.f_bavail * vs.f_frsize;
            gb(free_b, b1, sizeof b1);
            add(&r, free_b < (10ull << 30) ? ST_WARN : ST_PASS, "disk", "%s free at %s", b1, where);
        }
    }

    /* PSI */
    {
        char psi[256];
        if (read_first_line("/proc/pressure/memory", psi, sizeof psi))
            add(&r, ST_PASS, "psi", "/proc/pressure/memory: %s", psi);
        else
            add(&r, ST_WARN, "psi", "/proc/pressure/memory is not readable (a kernel without CONFIG_PSI, or "
                                    "psi=0): the arena cannot yield to memory pressure");
    }

    /* kernels */
    add(&r, ST_PASS, "kernels", "%s (CPU: %s)", sys.kernel_level, sys.cpu_features[0] ? sys.cpu_features : "baseline");

    /* cgroup */
    {
        gb(sys.ram_bytes, b1, sizeof b1);
        if (!sys.cgroup_limit_bytes) {
            add(&r, ST_PASS, "cgroup", "no memory limit (RAM %s)", b1);
        } else {
            gb(sys.cgroup_limit_bytes, b2, sizeof b2);
            gb(sys.avail_bytes, b3, sizeof b3);
            add(&r, sys.cgroup_limit_bytes < sys.ram_bytes / 2 ? ST_WARN : ST_PASS, "cgroup",
                "memory limit %s of RAM %s (%s available now): the plans above are judged against it", b2, b1, b3);
        }
    }

    /* output */
    size_t n_fail = 0, n_warn = 0;
    for (size_t i = 0; i < r.n; i++)
        n_fail += r.v[i].st == ST_FAIL, n_warn += r.v[i].st == ST_WARN;
    if (json) {
        json_t *o = json_object(), *checks = json_array();
        json_object_set_new(o, "version", json_string(GMLX_VERSION));
        for (size_t i = 0; i < r.n; i++) {
            json_t *x = json_object();
            gm_text_printable(r.v[i].detail);
            json_object_set_new(x, "name", json_string(r.v[i].name));
            json_object_set_new(x, "status", json_string(k_status[r.v[i].st]));
            json_object_set_new(x, "detail", json_string(r.v[i].detail));
            json_array_append_new(checks, x);
        }
        json_object_set_new(o, "checks", checks);
        json_object_set_new(o, "ok", json_boolean(n_fail == 0));
        char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (txt)
            printf("%s\n", txt);
        free(txt);
        json_decref(o);
    } else {
        printf("gmlx %s doctor\n", GMLX_VERSION);
        for (size_t i = 0; i < r.n; i++)
            printf("  %-4s  %-7s  %s\n", k_status[r.v[i].st], r.v[i].name, r.v[i].detail);
        if (n_fail)
            printf("\n%zu check(s) failed.\n", n_fail);
        else if (n_warn)
            printf("\nchecks complete: %zu warning(s).\n", n_warn);
        else
            printf("\nall checks passed.\n");
    }
    for (size_t i = 0; i < n; i++)
        free(ef[i].path);
    free(ef);
    gm_config_free(c);
    free(path);
    return n_fail ? GM_EXIT_NO : GM_EXIT_OK;
}
