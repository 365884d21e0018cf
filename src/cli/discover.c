/* cli/discover: see discover.h. */
#include "discover.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"

static bool ends_with_ci(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcasecmp(s + n - m, suf) == 0;
}

/* "-00002-of-00004.gguf": a later part (the first part stands for the set). */
static bool shard_suffix(const char *name, size_t *stem_len, bool *first)
{
    size_t n = strlen(name);
    /* -NNNNN-of-MMMMM.gguf is 20 characters */
    if (n < 20)
        return false;
    const char *s = name + n - 20;
    if (s[0] != '-' || strncasecmp(s + 6, "-of-", 4) != 0)
        return false;
    for (int i = 1; i <= 5; i++)
        if (!isdigit((unsigned char)s[i]) || !isdigit((unsigned char)s[i + 9]))
            return false;
    *stem_len = n - 20;
    *first = strncmp(s + 1, "00001", 5) == 0;
    return true;
}

void gm_discover_judge_file(const gm_file *file, gm_found *f)
{
    const gm_file_info *in = gm_file_get_info(file);
    f->readable = false;
    if (!in->described) {
        snprintf(f->why, sizeof f->why, "%s", in->describe_error);
        return;
    }
    f->readable = true;
    snprintf(f->arch, sizeof f->arch, "%s", in->arch);
    f->runnable = in->runnable;
    if (!in->runnable)
        snprintf(f->why, sizeof f->why, "%s", in->not_runnable);
    f->moe = in->n_moe_layers > 0;
    f->bytes = in->file_bytes;
    gm_file_plan_opts po;
    gm_file_plan_opts_default(&po);
    gm_err err = {0};
    gm_file_plan p;
    if (gm_cli_tuning("discover", &po.tuning) && gm_file_plan_compute(file, &po, &p, NULL, &err) == 0) {
        f->streams = p.streams;
        f->cannot_stream = p.verdict == GM_PLAN_CANNOT_STREAM;
        snprintf(f->verdict, sizeof f->verdict, "%s", p.verdict_line);
    }
}

void gm_discover_judge(const char *path, gm_found *f)
{
    gm_err err = {0};
    gm_file *file = NULL;
    f->readable = false;
    if (gm_file_open(&file, path, &err) != 0) {
        snprintf(f->why, sizeof f->why, "%s", err.msg);
        return;
    }
    gm_discover_judge_file(file, f);
    gm_file_close(file);
}

static int cmp_found(const void *a, const void *b)
{
    return strcmp(((const gm_found *)a)->path, ((const gm_found *)b)->path);
}

static bool push(gm_found_list *l, const char *root, const char *rel)
{
    gm_found *v = realloc(l->v, (l->n + 1) * sizeof *v);
    if (!v)
        return false;
    l->v = v;
    gm_found *f = &v[l->n];
    memset(f, 0, sizeof *f);
    size_t n = strlen(root) + strlen(rel) + 2;
    f->path = malloc(n);
    f->rel = strdup(rel);
    if (!f->path || !f->rel) {
        free(f->path);
        free(f->rel);
        return false;
    }
    snprintf(f->path, n, "%s%s%s", root, root[strlen(root) - 1] == '/' ? "" : "/", rel);
    l->n++;
    return true;
}

static bool walk_dir(const char *root, const char *rel, bool recursive, gm_found_list *out, int depth)
{
    char dir[8192];
    snprintf(dir, sizeof dir, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d) {
        if (depth == 0)
            fprintf(stderr, "[discover] not a readable folder: %s\n", root);
        return true;
    }
    struct dirent *e;
    bool ok = true;
    while (ok && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue; /* ., .., and hidden files (a download tool's temporaries) */
        char sub[4096], full[8192 + 4096 + 2];
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat st;
        if (stat(full, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (recursive && depth < 16)
                ok = walk_dir(root, sub, recursive, out, depth + 1);
            continue;
        }
        if (!S_ISREG(st.st_mode) || !ends_with_ci(e->d_name, ".gguf"))
            continue; /* .gguf.part and other files */
        size_t stem;
        bool first;
        if (shard_suffix(e->d_name, &stem, &first) && !first)
            continue;
        ok = push(out, root, sub);
    }
    closedir(d);
    return ok;
}

bool gm_discover_scan(const char *root, bool recursive, gm_found_list *out)
{
    size_t before = out->n;
    fprintf(stderr, "[discover] scanning %s ...\n", root);
    if (!walk_dir(root, "", recursive, out, 0)) {
        fprintf(stderr, "gmlx: out of memory\n");
        return false;
    }
    size_t n = out->n - before;
    if (n)
        qsort(out->v + before, n, sizeof *out->v, cmp_found);
    if (n)
        fprintf(stderr, "[discover] %zu GGUF file(s) to inspect\n", n);
    for (size_t i = before; i < out->n; i++) {
        gm_found *f = &out->v[i];
        const char *base = strrchr(f->path, '/');
        fprintf(stderr, "[discover]   (%zu/%zu) %s\n", i - before + 1, n, base ? base + 1 : f->path);
        gm_discover_judge(f->path, f);
        if (!f->readable)
            fprintf(stderr, "[discover] skipping %s: %s\n", f->path, f->why);
        else if (!f->runnable)
            fprintf(stderr, "[discover] skip (%s): %s\n", f->why, f->path);
        else if (f->streams)
            fprintf(stderr, "[discover] the experts do not fit in memory here (%.0f GB file): stream: experts: %s\n",
                    (double)f->bytes / 1e9, f->path);
        else if (f->cannot_stream)
            fprintf(stderr, "[discover] cannot run on this machine (%s): %s\n", f->verdict, f->path);
    }
    return true;
}

/* The quant tag at the end of a stem: [-._](UD[-_])?(IQn..|Qn..|BF16|FP16|F16|FP32|F32|MXFP4|NVFP4). */
static size_t quant_tag(const char *s, size_t n, size_t *tag_at)
{
    for (size_t i = n; i-- > 0;) {
        if (s[i] != '-' && s[i] != '.' && s[i] != '_')
            continue;
        const char *t = s + i + 1;
        size_t m = n - i - 1;
        size_t off = 0;
        if (m > 3 && strncasecmp(t, "ud", 2) == 0 && (t[2] == '-' || t[2] == '_'))
            off = 3;
        const char *q = t + off;
        size_t qm = m - off;
        static const char *const fixed[] = {"bf16", "fp16", "f16", "fp32", "f32", "mxfp4", "nvfp4", NULL};
        bool ok = false;
        for (const char *const *f = fixed; *f && !ok; f++)
            ok = qm == strlen(*f) && strncasecmp(q, *f, qm) == 0;
        if (!ok && qm >= 2) {
            size_t j = (tolower((unsigned char)q[0]) == 'i' && tolower((unsigned char)q[1]) == 'q') ? 2
                       : tolower((unsigned char)q[0]) == 'q'                                         ? 1
                                                                                                      : 0;
            ok = j && j < qm && isdigit((unsigned char)q[j]);
            for (size_t k = j; ok && k < qm; k++)
                ok = isalnum((unsigned char)q[k]) || q[k] == '_';
        }
        if (ok) {
            *tag_at = i + 1;
            return m;
        }
        if (n - i > 24)
            break;
    }
    return 0;
}

char *gm_discover_id(const char *file_name, bool full_codec)
{
    const char *base = strrchr(file_name, '/');
    base = base ? base + 1 : file_name;
    size_t n = strlen(base), stem;
    bool first;
    if (shard_suffix(base, &stem, &first))
        n = stem;
    else if (ends_with_ci(base, ".gguf"))
        n -= 5;
    size_t tag_at = 0, tag_len = quant_tag(base, n, &tag_at);
    char codec[64] = "";
    if (tag_len && tag_len < sizeof codec) {
        const char *t = base + tag_at;
        size_t o = 0;
        for (size_t i = 0; i < tag_len && o + 1 < sizeof codec; i++) {
            char ch = (char)tolower((unsigned char)t[i]);
            if (!full_codec && i > 0 && ch == '_' && !(o == 2 && strncmp(codec, "ud", 2) == 0))
                break; /* compact: q4_k_m -> q4, ud-q4_k_xl -> ud-q4 */
            codec[o++] = ch == '_' ? '-' : ch;
        }
        codec[o] = '\0';
        n = tag_at - 1;
    }
    char *id = malloc(n + strlen(codec) + 3);
    if (!id)
        return NULL;
    size_t o = 0;
    bool dash = false;
    for (size_t i = 0; i < n; i++) {
        char ch = (char)tolower((unsigned char)base[i]);
        if (isalnum((unsigned char)ch) || ch == '.') {
            if (dash && o)
                id[o++] = '-';
            id[o++] = ch;
            dash = false;
        } else {
            dash = true;
        }
    }
    if (codec[0]) {
        if (o)
            id[o++] = '-';
        for (const char *c = codec; *c; c++)
            id[o++] = *c == '_' ? '-' : *c;
    }
    if (!o)
        id[o++] = 'm';
    id[o] = '\0';
    return id;
}

static bool taken_by(const char *id, const char *const *taken, size_t n_taken, const gm_found_list *l, size_t upto)
{
    for (size_t i = 0; i < n_taken; i++)
        if (strcmp(taken[i], id) == 0)
            return true;
    for (size_t i = 0; i < upto; i++)
        if (l->v[i].id && strcmp(l->v[i].id, id) == 0)
            return true;
    return false;
}

bool gm_discover_assign_ids(gm_found_list *l, const char *const *taken, size_t n_taken)
{
    for (size_t i = 0; i < l->n; i++) {
        char *id = gm_discover_id(l->v[i].rel, false);
        if (!id)
            return false;
        /* siblings that meet on the compact codec get the full one (q4-k-s, q4-k-m) */
        bool clash = taken_by(id, taken, n_taken, l, i);
        for (size_t j = 0; j < l->n && !clash; j++) {
            if (j == i)
                continue;
            char *other = gm_discover_id(l->v[j].rel, false);
            clash = other && strcmp(other, id) == 0;
            free(other);
        }
        if (clash) {
            free(id);
            if (!(id = gm_discover_id(l->v[i].rel, true)))
                return false;
        }
        for (int k = 2; taken_by(id, taken, n_taken, l, i) && k < 10000; k++) {
            char *nid = malloc(strlen(id) + 8);
            if (!nid) {
                free(id);
                return false;
            }
            char *stem = id;
            snprintf(nid, strlen(id) + 8, "%s-%d", stem, k);
            if (!taken_by(nid, taken, n_taken, l, i)) {
                free(id);
                id = nid;
                break;
            }
            free(nid);
        }
        l->v[i].id = id;
    }
    return true;
}

void gm_found_list_free(gm_found_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].path);
        free(l->v[i].rel);
        free(l->v[i].id);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}
