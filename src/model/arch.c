/* The table of MoE families gmlx knows: how each stores its KV cache and which layers attend.
 * A family's forward-pass code lives in its own arch_<name>.c (added with the engine). */
#include <string.h>

#include "model/model.h"

/* runnable: families the engine is built to run. The plan judges a file runnable when its
 * family is here and every tensor type has a kernel. */
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
    {"qwen3next", "Qwen3-Next", false, false, true, true},
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
