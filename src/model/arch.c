/* The table of MoE families gmlx knows: how each stores its KV cache and which layers attend.
 * A family's forward-pass code lives in its own arch_<name>.c (added with the engine). */
#include <stdio.h>
#include <string.h>

#include "model/model.h"

/* runnable: families the engine's forward pass runs (infer/arch.c); the others are described
 * and planned (a plan comes from the tensor table) but `gmlx run` refuses them, so the plan
 * judges a file runnable only when its family runs and every tensor type has a kernel. */
static const gm_arch_info k_archs[] = {
    {"qwen3moe", "Qwen3 MoE", false, false, false, true},
    {"qwen2moe", "Qwen2 MoE", false, false, false, true},
    {"deepseek2", "DeepSeek-V2/V3/R1, Kimi-K2", true, false, false, true},
    {"glm4moe", "GLM-4.5/4.6 MoE", false, false, false, true},
    {"gpt-oss", "gpt-oss", false, true, false, true},
    {"llama", "Llama / Mixtral", false, false, false, true},
    {"minimax-m2", "MiniMax-M2", false, false, false, true},
    {"hunyuan-moe", "Hunyuan MoE", false, false, false, true},
    {"ernie4_5-moe", "ERNIE 4.5 MoE", false, false, false, true},
    {"hy_v3", "Hy3 (Hunyuan 3) MoE", false, false, false, true},
    {"qwen3next", "Qwen3-Next", false, false, true, true},
    {"qwen35moe", "Qwen3.5 MoE", false, false, true, true},
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
