/* cli/catalog: see catalog.h. */
#include "catalog.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "discover.h"

#ifndef GMLX_CATALOG_DIR
#define GMLX_CATALOG_DIR "data/catalog"
#endif

enum { GROUP_FITS, GROUP_STREAMS, GROUP_CANNOT, GROUP_COUNT };
static const char *const k_heading[GROUP_COUNT] = {"fits in RAM", "streams from the SSD on this machine",
                                                   "cannot run here"};
static const char *const k_group[GROUP_COUNT] = {"fits", "streams", "cannot-run"};

typedef struct item {
    char name[128], ref[512], source[128];
    unsigned long long size;
    gm_found f;
    int group;
} item;

/* Judges one entry from its stored header. false (f.why says why) when the header is unreadable. */
static bool judge(const char *dir, const char *hdr, unsigned long long size, item *it)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, hdr);
    size_t len = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(it->f.why, sizeof it->f.why, "%.400s: cannot open: %s", path, strerror(errno));
        return false;
    }
    fclose(fp);
    char *bytes = gm_cli_read_text("pull", path, &len);
    if (!bytes) {
        snprintf(it->f.why, sizeof it->f.why, "%.400s: cannot read", path);
        return false;
    }
    gm_file *g = NULL;
    gm_err err = {0};
    int rc = gm_file_open_prefix(&g, it->name, path, bytes, len, size, &err);
    free(bytes);
    if (rc) {
        snprintf(it->f.why, sizeof it->f.why, "%s", err.msg);
        return false;
    }
    gm_discover_judge_file(g, &it->f);
    gm_file_close(g);
    return it->f.readable;
}

static const char *catalog_dir(void)
{
    const char *env = getenv("GMLX_CATALOG");
    return env && *env ? env : GMLX_CATALOG_DIR;
}

bool gm_catalog_ref(const char *name, char *ref, size_t len)
{
    char path[4096], line[4096];
    snprintf(path, sizeof path, "%s/catalog.tsv", catalog_dir());
    FILE *fp = fopen(path, "r");
    bool found = false;
    while (fp && !found && fgets(line, sizeof line, fp)) {
        char *tab = strchr(line, '\t');
        if (line[0] == '#' || !tab)
            continue;
        *tab = '\0';
        if (strcmp(line, name) != 0)
            continue;
        char *r = tab + 1;
        r[strcspn(r, "\t\r\n")] = '\0';
        snprintf(ref, len, "%s", r);
        found = *r != '\0';
    }
    if (fp)
        fclose(fp);
    return found;
}

int gm_catalog_list(const char *cmd, bool json)
{
    const char *dir = catalog_dir();
    char path[4096];
    snprintf(path, sizeof path, "%s/catalog.tsv", dir);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        gm_cli_error(cmd, "%s: cannot open the model list: %s", path, strerror(errno));
        return GM_EXIT_USAGE;
    }
    item *items = NULL;
    size_t n = 0, cap = 0;
    char line[4096];
    unsigned lineno = 0;
    int rc = GM_EXIT_OK;
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0] || line[0] == '#')
            continue;
        char *fields[5] = {0};
        char *s = line;
        int nf = 0;
        for (; nf < 5 && s; nf++) {
            fields[nf] = s;
            char *tab = strchr(s, '\t');
            if (tab)
                *tab++ = '\0';
            s = tab;
        }
        char *end = NULL;
        unsigned long long size = nf >= 3 ? strtoull(fields[2], &end, 10) : 0;
        if (nf < 5 || !end || *end || !size) {
            gm_cli_error(cmd, "%s:%u: expected NAME, REF, SIZE_BYTES, HEADER_FILE and SOURCE separated by tabs", path,
                         lineno);
            rc = GM_EXIT_USAGE;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            item *ni = realloc(items, cap * sizeof *ni);
            if (!ni) {
                rc = GM_EXIT_USAGE;
                break;
            }
            items = ni;
        }
        item *it = &items[n++];
        memset(it, 0, sizeof *it);
        snprintf(it->name, sizeof it->name, "%.127s", fields[0]);
        snprintf(it->ref, sizeof it->ref, "%.511s", fields[1]);
        snprintf(it->source, sizeof it->source, "%.127s", fields[4]);
        it->size = size;
        if (!judge(dir, fields[3], size, it)) {
            gm_cli_error(cmd, "%s:%u: %s", path, lineno, it->f.why);
            rc = GM_EXIT_USAGE;
            break;
        }
        it->group = !it->f.runnable || it->f.cannot_stream ? GROUP_CANNOT : it->f.streams ? GROUP_STREAMS : GROUP_FITS;
    }
    fclose(fp);
    if (rc == GM_EXIT_OK && json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) {
            item *it = &items[i];
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(it->name));
            json_object_set_new(o, "ref", json_string(it->ref));
            json_object_set_new(o, "size_bytes", json_integer((json_int_t)it->size));
            json_object_set_new(o, "arch", json_string(it->f.arch));
            json_object_set_new(o, "group", json_string(k_group[it->group]));
            json_object_set_new(o, "runnable", json_boolean(it->f.runnable));
            json_object_set_new(o, "why", it->f.runnable ? json_null() : json_string(it->f.why));
            json_object_set_new(o, "verdict_line", json_string(it->f.verdict));
            json_object_set_new(o, "header_source", json_string(it->source));
            json_array_append_new(arr, o);
        }
        char *txt = json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (txt)
            printf("%s\n", txt);
        free(txt);
        json_decref(arr);
    } else if (rc == GM_EXIT_OK) {
        printf("models gmlx knows, judged by the streaming plan for this machine\n"
               "(gmlx pull NAME downloads one; gmlx validate REF prints its whole plan):\n");
        for (int g = 0; g < GROUP_COUNT; g++) {
            printf("\n%s:\n", k_heading[g]);
            size_t shown = 0;
            for (size_t i = 0; i < n; i++) {
                item *it = &items[i];
                if (it->group != g)
                    continue;
                char size[32];
                gm_format_bytes(it->size, size, sizeof size);
                printf("  %-22s %-56s %9s\n", it->name, it->ref, size);
                if (g == GROUP_CANNOT)
                    printf("  %-22s   %s\n", "", it->f.runnable ? it->f.verdict : it->f.why);
                shown++;
            }
            if (!shown)
                printf("  (none)\n");
        }
    }
    free(items);
    return rc;
}
