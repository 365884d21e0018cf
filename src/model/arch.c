/* The table of MoE families gmlx knows (the registry, model/families.h): how each stores its KV
 * cache and which layers attend. A family's forward pass is its recipe, src/infer/models/. */
#include <stdio.h>
#include <string.h>

#include "model/model.h"

/* The registry (model/families.h). Every family in it runs: the engine links a recipe for each
 * line. An architecture outside it still gets a description and a plan from its tensor table,
 * and is judged not runnable. */
static const gm_arch_info k_archs[] = {
#define GM_FAMILY(arch, human, mla, alt_sliding, hybrid, recipe) {arch, human, mla, alt_sliding, hybrid, true},
#include "model/families.h"
#undef GM_FAMILY
};

const gm_arch_info *gm_arch_find(const char *name)
{
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (strcmp(k_archs[i].name, name) == 0)
            return &k_archs[i];
    return NULL;
}

int gm_arch_count(void) { return (int)(sizeof k_archs / sizeof k_archs[0]); }

const gm_arch_info *gm_arch_at(int i)
{
    return i >= 0 && i < gm_arch_count() ? &k_archs[i] : NULL;
}

void gm_arch_runnable_list(char *buf, size_t len)
{
    size_t at = 0;
    int n = 0, total = 0;
    for (int i = 0; i < gm_arch_count(); i++)
        total += k_archs[i].runnable;
    if (len)
        buf[0] = '\0';
    for (int i = 0; i < gm_arch_count() && at < len; i++) {
        if (!k_archs[i].runnable)
            continue;
        n++;
        const char *sep = n == 1 ? "" : n == total ? " and " : ", ";
        int w = snprintf(buf + at, len - at, "%s%s", sep, k_archs[i].name);
        at = w < 0 ? len : at + (size_t)w;
    }
}
