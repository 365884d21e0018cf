/* gmlx pull: downloads a model from the hub or a URL (every part, resumable, checked), after
 * judging its header for this machine, and registers it in the configuration file. Also the
 * remote helpers validate uses (remote_cli.h). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "catalog.h"
#include "cli.h"
#include "discover.h"
#include "remote_cli.h"

/* ---- shared with validate ---- */

bool gm_cli_remote_opts(const char *cmd, gm_fetch_opts *o)
{
    static char endpoint[1024];
    gm_fetch_opts_default(o);
    const char *e = getenv("HF_ENDPOINT");
    if (e && *e) {
        snprintf(endpoint, sizeof endpoint, "%s", e);
        size_t n = strlen(endpoint);
        while (n > 0 && endpoint[n - 1] == '/')
            endpoint[--n] = '\0';
        o->endpoint = endpoint;
    }
    const char *t = getenv("HF_TOKEN");
    if (!t || !*t)
        t = getenv("HUGGING_FACE_HUB_TOKEN");
    o->token = t && *t ? t : NULL;
    const char *s = getenv("GMLX_HTTP_STALL_S");
    if (s && *s) {
        uint32_t v;
        if (!gm_cli_parse_u32(cmd, "GMLX_HTTP_STALL_S", s, 1, 86400, &v))
            return false;
        o->stall_s = v;
    }
    return true;
}

int gm_cli_remote_ref(const char *cmd, const char *arg)
{
    struct stat st;
    if (stat(arg, &st) == 0)
        return 0; /* a file of that name is on disk */
    gm_err err = {0};
    int k = gm_ref_is_remote(arg, &err);
    if (k < 0) {
        gm_cli_error(cmd, "%s", err.msg);
        return -1;
    }
    return k;
}

int gm_cli_remote_open(const char *cmd, const char *arg, const gm_fetch_opts *o, uint64_t max_bytes,
                       gm_remote_model **rm, gm_file **f)
{
    gm_err err = {0};
    *rm = NULL;
    *f = NULL;
    if (gm_remote_model_resolve(rm, arg, o, &err) != 0) {
        gm_cli_error(cmd, "%s", err.msg);
        return GM_EXIT_USAGE;
    }
    const char *resolved = gm_remote_model_get_info(*rm)->resolved_to;
    if (resolved[0])
        fprintf(stderr, "[resolved] %s -> %s\n", arg, resolved);
    if (gm_file_open_remote(f, *rm, max_bytes, &err) != 0) {
        gm_cli_error(cmd, "%s", err.msg);
        gm_remote_model_free(*rm);
        *rm = NULL;
        return GM_EXIT_USAGE;
    }
    return GM_EXIT_OK;
}

int gm_cli_max_mb_flag(const char *cmd, const char *arg, const char *value, uint64_t *max_bytes)
{
    if (strcmp(arg, "--max-mb") != 0)
        return 0;
    uint32_t mb;
    if (!gm_cli_parse_u32(cmd, arg, value, 1, 65536, &mb))
        return -1;
    *max_bytes = (uint64_t)mb << 20;
    return 2;
}

/* ---- pull ---- */

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx pull REF [REF...] [--dir DIR] [--config FILE] [--no-register] [--force]\n"
            "                    [--max-mb N]\n"
            "       gmlx pull --list [--json]\n\n"
            "Downloads a model: reads its header first (range requests) and prints what the\n"
            "streaming plan says of it on this machine, refuses a file gmlx cannot run (unless\n"
            "--force), checks the free disk space, then fetches every part of a split set into\n"
            "FILE.part (an interrupted pull resumes from it), checks the size and the sha256 the\n"
            "hub gives, renames it into place, and adds an entry to the configuration file (with\n"
            "stream: experts when its experts do not fit in memory here).\n\n"
            "REF:\n"
            "  hf://ORG/REPO/FILE.gguf[@REV]   a file of a hub repo (any part of a split set)\n"
            "  ORG/REPO:QUANT                  the repo's one model whose name has QUANT in it\n"
            "  https://...                     a file on any server\n"
            "  NAME                            a model of gmlx pull --list\n\n"
            "options:\n"
            "  --dir DIR       where the files go (default: the first server.model_dirs folder\n"
            "                  of the configuration file, under ORG__REPO/ for a hub file)\n"
            "  --config FILE   the configuration file to register the model in\n"
            "  --no-register   do not touch the configuration file\n"
            "  --force         download a model gmlx cannot run, or without room on the disk\n"
            "  --max-mb N      read at most N MB of each header (default 128)\n"
            "  --list          the curated models, grouped by what the plan says of each on this\n"
            "                  machine (fits in RAM, streams from the SSD, cannot run here)\n"
            "  --json          with --list: the same as JSON\n"
            "  -h, --help      this help\n\n"
            "environment:\n"
            "  HF_ENDPOINT         the hub's address (default https://huggingface.co)\n"
            "  HF_TOKEN            a hub token for gated or private repos (sent to the hub only)\n"
            "  GMLX_HTTP_STALL_S   give a transfer up after this many seconds without data (30)\n"
            "  GMLX_RAM_GB, GMLX_AVAIL_GB   plan for another machine (see gmlx validate --help)\n\n"
            "exit status: 0 every model downloaded (or already there), 1 a download failed or a\n"
            "model was refused, 2 bad usage or a ref that cannot be resolved.\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fmt_rate(double bytes_per_s, char *buf, size_t len)
{
    if (bytes_per_s >= 1e9)
        snprintf(buf, len, "%.2f GB/s", bytes_per_s / 1e9);
    else
        snprintf(buf, len, "%.1f MB/s", bytes_per_s / 1e6);
}

static void fmt_clock(double s, char *buf, size_t len)
{
    if (s < 0 || s > 359999)
        snprintf(buf, len, "--:--");
    else if (s >= 3600)
        snprintf(buf, len, "%d:%02d:%02d", (int)s / 3600, ((int)s / 60) % 60, (int)s % 60);
    else
        snprintf(buf, len, "%02d:%02d", (int)s / 60, (int)s % 60);
}

typedef struct progress {
    const char *file;
    double t0, t_drawn;
    uint64_t start_bytes;
    bool tty;
    bool drawn;
} progress;

/* "  FILE: 1.23 GB / 4.56 GB (27%) [00:12<00:34, 95.2 MB/s]": on a terminal redrawn in place
 * twice a second, else a line every 5 s. */
static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    progress *p = ctx;
    double t = now_s();
    if (t - p->t_drawn < (p->tty ? 0.5 : 5.0) && !(p->tty && total && done >= total))
        return;
    p->t_drawn = t;
    double el = t - p->t0;
    double rate = el > 0 ? (double)(done - p->start_bytes) / el : 0;
    char r[32], a[16], b[16];
    fmt_rate(rate, r, sizeof r);
    fmt_clock(el, a, sizeof a);
    fmt_clock(rate > 0 && total > done ? (double)(total - done) / rate : total ? 0 : -1, b, sizeof b);
    if (total)
        fprintf(stderr, "%s  %s: %.2f GB / %.2f GB (%.0f%%) [%s<%s, %s]%s", p->tty ? "\r\033[K" : "", p->file,
                (double)done / 1e9, (double)total / 1e9, 100.0 * (double)done / (double)total, a, b, r,
                p->tty ? "" : "\n");
    else
        fprintf(stderr, "%s  %s: %.2f GB [%s, %s]%s", p->tty ? "\r\033[K" : "", p->file, (double)done / 1e9, a, r,
                p->tty ? "" : "\n");
    p->drawn = p->tty;
}

static bool make_dirs(const char *dir)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return false;
    for (char *s = tmp + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return false;
            *s = '/';
        }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST;
}

static uint64_t file_size(const char *p, bool *exists)
{
    struct stat st;
    *exists = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    return *exists ? (uint64_t)st.st_size : 0;
}

static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* The folder a ref's files go to. NULL after printing an error. */
static char *dest_dir(const char *dir_flag, const gm_config *cfg, const gm_remote_model_info *set)
{
    if (dir_flag)
        return strdup(dir_flag);
    if (!cfg || gm_config_n_model_dirs(cfg) == 0) {
        gm_cli_error("pull", "no folder to download into: pass --dir DIR, or give the configuration file a "
                             "server.model_dirs folder (gmlx init DIR writes one)");
        return NULL;
    }
    const char *root = gm_config_model_dir(cfg, 0);
    size_t len = strlen(root) + (set->repo ? strlen(set->repo) : 0) + 8;
    char *d = malloc(len);
    if (!d)
        return NULL;
    if (set->repo) {
        const char *sl = strchr(set->repo, '/');
        snprintf(d, len, "%s/%.*s__%s", root, (int)(sl - set->repo), set->repo, sl + 1);
    } else {
        snprintf(d, len, "%s", root);
    }
    return d;
}

typedef struct pull_opts {
    const char *dir, *config;
    bool no_register, force;
    uint64_t max_bytes;
} pull_opts;

/* Pulls one ref; appends the first part's path of what landed to files. */
static int pull_one(const char *arg, const pull_opts *po, const gm_config *cfg, const gm_fetch_opts *ro,
                    char ***files, size_t *n_files)
{
    char listed[512];
    int k = gm_cli_remote_ref("pull", arg);
    if (k < 0)
        return GM_EXIT_USAGE;
    if (k == 0 && !strchr(arg, '/') && gm_catalog_ref(arg, listed, sizeof listed)) {
        /* a name of gmlx pull --list */
        fprintf(stderr, "[resolved] %s -> %s (gmlx pull --list)\n", arg, listed);
        arg = listed;
        if ((k = gm_cli_remote_ref("pull", arg)) < 0)
            return GM_EXIT_USAGE;
    }
    if (k == 0) {
        struct stat st;
        if (stat(arg, &st) == 0) {
            fprintf(stderr, "note: '%s' is already on disk - skipping\n", arg);
            return GM_EXIT_OK;
        }
        gm_cli_error("pull", "'%s' is not a model ref: use hf://ORG/REPO/FILE.gguf, ORG/REPO:QUANT, an "
                             "http(s):// URL or a name of gmlx pull --list", arg);
        return GM_EXIT_USAGE;
    }
    gm_remote_model *rm = NULL;
    gm_file *g = NULL;
    int rc = gm_cli_remote_open("pull", arg, ro, po->max_bytes, &rm, &g);
    if (rc)
        return rc;
    gm_found f = {0};
    gm_discover_judge_file(g, &f);
    gm_file_close(g);
    const gm_remote_model_info set = *gm_remote_model_get_info(rm);
    char size[32];
    gm_format_bytes(f.bytes, size, sizeof size);
    printf("%s: %s, %u part%s, %s\n", set.name, f.arch[0] ? f.arch : "no architecture", set.n_parts,
           set.n_parts == 1 ? "" : "s", size);
    if (f.verdict[0])
        printf("  %s\n", f.verdict);
    char *dir = NULL;
    char *first_path = NULL;
    if (!f.readable || !f.runnable || f.cannot_stream) {
        const char *why = !f.readable ? f.why : !f.runnable ? f.why : "it cannot run on this machine";
        if (!po->force) {
            fprintf(stderr, "gmlx pull: refusing to download %s: %s (pass --force to download it anyway)\n",
                    set.name, why);
            rc = GM_EXIT_NO;
            goto out;
        }
        fprintf(stderr, "note: %s: %s - downloading anyway (--force)\n", set.name, why);
    } else if (f.streams) {
        printf("  its experts do not fit in memory here: it will stream them from the SSD (stream: experts)\n");
    }
    if (!(dir = dest_dir(po->dir, cfg, &set))) {
        rc = GM_EXIT_USAGE;
        goto out;
    }
    if (!make_dirs(dir)) {
        gm_cli_error("pull", "%s: cannot create the folder: %s", dir, strerror(errno));
        rc = GM_EXIT_USAGE;
        goto out;
    }
    /* room on the disk for what is not there yet */
    uint64_t need = 0;
    for (uint32_t i = 0; i < set.n_parts; i++) {
        char p[PATH_MAX], pp[PATH_MAX + 8];
        bool have, have_part;
        gm_remote_part_info part;
        gm_err perr = {0};
        if (gm_remote_model_part(rm, i, &part, &perr) != 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, part.name);
        snprintf(pp, sizeof pp, "%s.part", p);
        uint64_t fs = file_size(p, &have);
        uint64_t ps = file_size(pp, &have_part);
        if (have && fs == part.size)
            continue;
        need += part.size > ps ? part.size - ps : 0;
    }
    struct statvfs vfs;
    if (need && statvfs(dir, &vfs) == 0) {
        uint64_t free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        if (free_bytes < need) {
            char a[32], b[32];
            gm_format_bytes(need, a, sizeof a);
            gm_format_bytes(free_bytes, b, sizeof b);
            if (!po->force) {
                gm_cli_error("pull", "not enough disk space for %s: it needs %s, %s is free at %s (free some space, "
                                     "pass --dir DIR on another disk, or --force)", set.name, a, b, dir);
                rc = GM_EXIT_NO;
                goto out;
            }
            fprintf(stderr, "note: %s needs %s and %s is free at %s - downloading anyway (--force)\n", set.name,
                    a, b, dir);
        }
    }
    for (uint32_t i = 0; i < set.n_parts && rc == GM_EXIT_OK; i++) {
        gm_remote_part_info pinfo;
        gm_err perr = {0};
        if (gm_remote_model_part(rm, i, &pinfo, &perr) != 0) {
            gm_cli_error("pull", "%s", perr.msg);
            rc = GM_EXIT_NO;
            break;
        }
        const gm_remote_part_info *part = &pinfo;
        char p[PATH_MAX], pp[PATH_MAX + 8];
        bool have, have_part;
        snprintf(p, sizeof p, "%s/%s", dir, part->name);
        snprintf(pp, sizeof pp, "%s.part", p);
        if (file_size(p, &have) == part->size && have) {
            fprintf(stderr, "  %s: already there - skipping\n", p);
        } else {
            uint64_t ps = file_size(pp, &have_part);
            if (have_part && ps > 0) {
                char a[32], b[32];
                gm_format_bytes(ps, a, sizeof a);
                gm_format_bytes(part->size, b, sizeof b);
                fprintf(stderr, "  resuming %s from %s / %s\n", part->name, a, b);
            }
            progress pr = {.file = part->name, .t0 = now_s(), .start_bytes = ps, .tty = isatty(STDERR_FILENO)};
            pr.t_drawn = pr.t0; /* the first line after a while, not at once */
            gm_download_result info;
            gm_err err = {0};
            int drc = gm_remote_model_download(rm, i, pp, on_progress, &pr, &info, &err);
            if (pr.drawn)
                fputc('\n', stderr);
            if (drc != 0) {
                gm_cli_error("pull", "%s", err.msg);
                rc = GM_EXIT_NO;
                break;
            }
            if (info.restarted && ps > 0)
                fprintf(stderr, "  %s: the server sent the whole file; the download started again\n", part->name);
            if (rename(pp, p) != 0) {
                gm_cli_error("pull", "%s: cannot rename into place: %s", pp, strerror(errno));
                rc = GM_EXIT_NO;
                break;
            }
            sync_dir(dir);
            double el = now_s() - pr.t0;
            char r[32];
            fmt_rate(el > 0 ? (double)(info.total - info.resumed_from) / el : 0, r, sizeof r);
            fprintf(stderr, "  %s: done, %.2f GB in %.1f s (%s)%s\n", part->name, (double)info.total / 1e9, el, r,
                    info.hash_checked ? ", sha256 checked" : "");
        }
        if (i == 0)
            first_path = strdup(p);
    }
    if (rc == GM_EXIT_OK && first_path) {
        char **nf = realloc(*files, (*n_files + 1) * sizeof *nf);
        if (nf) {
            *files = nf;
            nf[(*n_files)++] = first_path;
            first_path = NULL;
        }
    }
out:
    free(first_path);
    free(dir);
    gm_remote_model_free(rm);
    return rc;
}

int gm_cmd_pull(int argc, char **argv)
{
    pull_opts po = {0};
    bool list = false, json = false;
    const char **refs = calloc((size_t)argc + 1, sizeof *refs);
    size_t n_refs = 0;
    if (!refs)
        return GM_EXIT_USAGE;
    int rc = GM_EXIT_OK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int k;
        if (gm_cli_is_help(a)) {
            help(stdout);
            free(refs);
            return GM_EXIT_OK;
        } else if (strcmp(a, "--dir") == 0 || strcmp(a, "--to") == 0 || strcmp(a, "--config") == 0) {
            if (i + 1 >= argc) {
                gm_cli_error("pull", "%s needs a value", a);
                free(refs);
                return GM_EXIT_USAGE;
            }
            if (strcmp(a, "--config") == 0)
                po.config = argv[++i];
            else
                po.dir = argv[++i];
        } else if (strcmp(a, "--no-register") == 0) {
            po.no_register = true;
        } else if (strcmp(a, "--force") == 0) {
            po.force = true;
        } else if (strcmp(a, "--list") == 0) {
            list = true;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if ((k = gm_cli_max_mb_flag("pull", a, i + 1 < argc ? argv[i + 1] : NULL, &po.max_bytes)) != 0) {
            if (k < 0) {
                free(refs);
                return GM_EXIT_USAGE;
            }
            i++;
        } else if (a[0] == '-' && a[1]) {
            gm_cli_error("pull", "unknown option '%s' (see gmlx pull --help)", a);
            free(refs);
            return GM_EXIT_USAGE;
        } else {
            refs[n_refs++] = a;
        }
    }
    if (list) {
        free(refs);
        if (n_refs) {
            gm_cli_error("pull", "--list takes no model refs");
            return GM_EXIT_USAGE;
        }
        return gm_catalog_list("pull", json);
    }
    if (json) {
        gm_cli_error("pull", "--json goes with --list");
        free(refs);
        return GM_EXIT_USAGE;
    }
    if (!n_refs) {
        gm_cli_error("pull", "no model given (see gmlx pull --help)");
        free(refs);
        return GM_EXIT_USAGE;
    }
    gm_fetch_opts ro;
    if (!gm_cli_remote_opts("pull", &ro)) {
        free(refs);
        return GM_EXIT_USAGE;
    }
    /* the configuration file: where to download and where to register */
    int crc = 0;
    gm_config *cfg = gm_cli_config_open("pull", po.config, false, &crc);
    if (crc) {
        free(refs);
        return crc;
    }
    bool searched = false;
    char *cfg_path = cfg ? gm_cli_config_path(po.config, &searched) : NULL;
    char **files = NULL;
    size_t n_files = 0;
    for (size_t i = 0; i < n_refs; i++) {
        int r = pull_one(refs[i], &po, cfg, &ro, &files, &n_files);
        if (r > rc)
            rc = r;
    }
    if (n_files) {
        printf("\ndownloaded %zu model(s):\n", n_files);
        for (size_t i = 0; i < n_files; i++)
            printf("  %s\n", files[i]);
        if (po.no_register) {
            /* as asked */
        } else if (!cfg_path) {
            printf("\nno configuration file to register in: gmlx init DIR writes one, or gmlx run PATH runs the "
                   "file as it is\n");
        } else {
            int r = gm_discover_register("pull", cfg_path, files, n_files);
            if (r) {
                fprintf(stderr, "warning: the download(s) could not be registered in %s; run gmlx sync-models\n",
                        cfg_path);
                if (r > rc)
                    rc = r;
            }
        }
    }
    for (size_t i = 0; i < n_files; i++)
        free(files[i]);
    free(files);
    free(cfg_path);
    gm_config_free(cfg);
    free(refs);
    return rc;
}
