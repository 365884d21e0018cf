/* Memory-pressure shrink and regrow of the decode arena (see pressure.h). */
#include <stdio.h>
#include <string.h>

#include "stream/pressure.h"

#include "base/sysinfo.h"

/* Reads at most cap - 1 bytes of a small /proc file; false when it cannot. */
static bool slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

/* "avg10=X" on the line starting with key ("some" / "full"). */
static bool psi_avg10(const char *text, const char *key, double *out)
{
    size_t kl = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, kl) != 0 || line[kl] != ' ')
            continue;
        const char *a = strstr(line, "avg10=");
        const char *nl = strchr(line, '\n');
        if (!a || (nl && a > nl))
            return false;
        double v;
        if (sscanf(a + 6, "%lf", &v) != 1 || !(v >= 0 && v <= 100))
            return false;
        *out = v;
        return true;
    }
    return false;
}

static void read_psi(const char *path, gm_pressure_sample *out)
{
    char buf[4096];
    if (slurp(path, buf, sizeof buf)) {
        double some = 0, full = 0;
        bool has_some = psi_avg10(buf, "some", &some);
        bool has_full = psi_avg10(buf, "full", &full);
        if (has_some) {
            out->psi_known = true;
            out->some_avg10 = some;
            out->full_avg10 = has_full ? full : 0;
        }
    }
}

void gm_pressure_read_at(const char *root, gm_pressure_sample *out)
{
    memset(out, 0, sizeof *out);
    /* the stalls of this process's own cgroup where it has one (in a container the system file
     * counts every tenant's stalls, most of them under their own limits), else the system's */
    char psi[2048], cg[768];
    if (gm_sysinfo_cgroup_v2_path(root, cg, sizeof cg) == 0 && strcmp(cg, "/") != 0) {
        snprintf(psi, sizeof psi, "%s/sys/fs/cgroup%s/memory.pressure", root, cg);
        read_psi(psi, out);
        out->psi_cgroup = out->psi_known;
    }
    if (!out->psi_known) {
        snprintf(psi, sizeof psi, "%s/proc/pressure/memory", root);
        read_psi(psi, out);
    }
    gm_sysinfo si;
    gm_err ignore = {0};
    if (gm_sysinfo_probe_at(&si, root, NULL, NULL, &ignore) == 0 && si.avail_known) {
        out->avail_known = true;
        out->avail_bytes = si.avail_bytes;
    }
}

void gm_pressure_read(const char *psi_path, const char *meminfo_path, gm_pressure_sample *out)
{
    if (!psi_path && !meminfo_path) {
        gm_pressure_read_at("", out);
        return;
    }
    memset(out, 0, sizeof *out);
    read_psi(psi_path ? psi_path : "/proc/pressure/memory", out);
    char buf[4096];
    if (slurp(meminfo_path ? meminfo_path : "/proc/meminfo", buf, sizeof buf)) {
        const char *m = strstr(buf, "MemAvailable:");
        unsigned long long kib;
        if (m && sscanf(m + 13, "%llu", &kib) == 1 && kib < (1ull << 44)) {
            out->avail_known = true;
            out->avail_bytes = (uint64_t)kib * 1024;
        }
    }
}

gm_pressure_level gm_pressure_level_of(const gm_pressure_sample *s, uint64_t floor_bytes)
{
    if ((s->psi_known && s->full_avg10 >= 10.0) || (s->avail_known && s->avail_bytes < floor_bytes / 2))
        return GM_PRESSURE_CRITICAL;
    if ((s->psi_known && s->some_avg10 >= 10.0) || (s->avail_known && s->avail_bytes < floor_bytes))
        return GM_PRESSURE_WARNING;
    return GM_PRESSURE_NORMAL;
}

void gm_pressure_init(gm_pressure *p, uint64_t floor_bytes)
{
    memset(p, 0, sizeof *p);
    p->floor_bytes = floor_bytes;
    p->since_step = GM_PRESSURE_STEP_GAP; /* the first warning acts at once */
}

int gm_pressure_poll(gm_pressure *p, gm_pressure_level level, const gm_pressure_sample *s,
                     uint64_t arena_now_bytes, uint64_t arena_back_bytes)
{
    if (p->since_step < UINT32_MAX)
        p->since_step++;
    if (level != GM_PRESSURE_NORMAL) {
        p->normal_streak = 0;
        if (p->steps >= GM_PRESSURE_MAX_STEPS || p->since_step < GM_PRESSURE_STEP_GAP)
            return 0;
        p->steps += level == GM_PRESSURE_CRITICAL ? 2 : 1;
        if (p->steps > GM_PRESSURE_MAX_STEPS)
            p->steps = GM_PRESSURE_MAX_STEPS;
        p->since_step = 0;
        p->shrinks++;
        return 1;
    }
    if (p->normal_streak < UINT32_MAX)
        p->normal_streak++;
    if (p->steps == 0 || p->normal_streak < GM_PRESSURE_REGROW_STREAK)
        return 0;
    uint64_t need = (arena_back_bytes > arena_now_bytes ? arena_back_bytes - arena_now_bytes : 0) + p->floor_bytes;
    if (!s->avail_known || s->avail_bytes < need)
        return 0;
    p->steps--;
    p->normal_streak = 0;
    p->regrows++;
    return -1;
}

uint32_t gm_pressure_slots(uint32_t orig, uint32_t min_slots, uint32_t steps)
{
    if (steps > GM_PRESSURE_MAX_STEPS)
        steps = GM_PRESSURE_MAX_STEPS;
    uint32_t n = (uint32_t)((uint64_t)orig * (4 - steps) / 4);
    if (n < min_slots)
        n = min_slots;
    if (n < 1)
        n = 1;
    return n > orig ? orig : n;
}
