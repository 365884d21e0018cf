/* model/families: the registry of the model families gmlx runs, one line each.
 *
 * GM_FAMILY(arch, human name, mla, alternate_sliding, hybrid_recurrent, recipe):
 *   arch              general.architecture, as llama.cpp's converter writes it
 *   mla               multi-head latent attention: the KV cache holds the latent (DeepSeek)
 *   alternate_sliding sliding-window attention on even layers (gpt-oss)
 *   hybrid_recurrent  linear-attention layers except every full_attention_interval-th
 *   recipe            the C name of the family's forward pass, gm_recipe_<recipe>, defined in
 *                     src/infer/models/<arch>.c
 * The model description (model/arch.c) reads the first five columns to plan the file; the engine
 * (infer/registry.c) binds the recipe, so a line without its recipe does not link. Adding a
 * family: docs/ARCHITECTURE.md, "Adding a model family". */
GM_FAMILY("qwen3moe", "Qwen3 MoE", false, false, false, qwen3moe)
GM_FAMILY("qwen2moe", "Qwen2 MoE", false, false, false, qwen2moe)
GM_FAMILY("deepseek2", "DeepSeek-V2/V3/R1, Kimi-K2", true, false, false, deepseek2)
GM_FAMILY("glm4moe", "GLM-4.5/4.6 MoE", false, false, false, glm4moe)
GM_FAMILY("gpt-oss", "gpt-oss", false, true, false, gpt_oss)
GM_FAMILY("llama", "Llama / Mixtral", false, false, false, llama)
GM_FAMILY("minimax-m2", "MiniMax-M2", false, false, false, minimax_m2)
GM_FAMILY("hunyuan-moe", "Hunyuan MoE", false, false, false, hunyuan_moe)
GM_FAMILY("ernie4_5-moe", "ERNIE 4.5 MoE", false, false, false, ernie4_5_moe)
GM_FAMILY("hy_v3", "Hy3 (Hunyuan 3) MoE", false, false, false, hy_v3)
GM_FAMILY("qwen3next", "Qwen3-Next", false, false, true, qwen3next)
GM_FAMILY("qwen35moe", "Qwen3.5 MoE", false, false, true, qwen35moe)
GM_FAMILY("glm-dsa", "GLM-5.2 (DeepSeek sparse attention)", true, false, false, glm_dsa)
GM_FAMILY("minimax-m3", "MiniMax-M3 (MiniMax sparse attention)", false, false, false, minimax_m3)
GM_FAMILY("hy_v4", "Hy4 (Hunyuan 4) MoE", true, false, false, hy_v4)
GM_FAMILY("kimi-k3", "Kimi-K3 (KDA linear attention, latent MoE)", true, false, true, kimi_k3)
GM_FAMILY("qwen4exp", "qwen4exp (hybrid linear attention on low-rank hyper-connections)", false, false, true, qwen4exp)
GM_FAMILY("deepseek4", "DeepSeek-V4 (hyper-connections, compressed attention)", true, false, false, deepseek4)
