#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "blocks.h"
#include "gguf/types.h"

/* ---- presets ------------------------------------------------------------------------------- */

/* Hyper-parameters of the published models (their config.json) in the form the converter writes
 * them. The tiny-* presets mirror tests/fixtures (hidden 256, 3 blocks, 8 experts). */
static const gm_gen_hparams k_presets[] = {
    {.arch = GM_GEN_QWEN3MOE, .preset = "qwen3-235b-a22b", .name = "Qwen3 235B A22B",
     .n_layer = 94, .n_embd = 4096, .n_ff = 12288, .n_ff_exp = 1536, .n_expert = 128,
     .n_expert_used = 8, .n_head = 64, .n_head_kv = 4, .head_dim_k = 128, .head_dim_v = 128,
     .n_vocab = 151936, .n_ctx = 40960, .rope_base = 1e6f, .eps = 1e-6f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_QWEN3MOE, .preset = "qwen3-30b-a3b", .name = "Qwen3 30B A3B",
     .n_layer = 48, .n_embd = 2048, .n_ff = 6144, .n_ff_exp = 768, .n_expert = 128,
     .n_expert_used = 8, .n_head = 32, .n_head_kv = 4, .head_dim_k = 128, .head_dim_v = 128,
     .n_vocab = 151936, .n_ctx = 40960, .rope_base = 1e6f, .eps = 1e-6f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_DEEPSEEK2, .preset = "kimi-k2", .name = "Kimi K2",
     .n_layer = 61, .n_dense_lead = 1, .n_embd = 7168, .n_ff = 18432, .n_ff_exp = 2048,
     .n_expert = 384, .n_expert_used = 8, .n_expert_shared = 1, .n_head = 64,
     .q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope = 128, .qk_rope = 64, .v_head_mla = 128,
     .n_vocab = 163840, .n_ctx = 131072, .rope_base = 50000.0f, .eps = 1e-6f,
     .gating_func = 2, .n_group = 1, .n_group_used = 1, .weights_scale = 2.827f,
     .weights_norm = true, .yarn_factor = 32.0f, .yarn_orig_ctx = 4096, .yarn_log_mul = 0.1f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_DEEPSEEK2, .preset = "deepseek-v3", .name = "DeepSeek V3",
     .n_layer = 61, .n_dense_lead = 3, .n_embd = 7168, .n_ff = 18432, .n_ff_exp = 2048,
     .n_expert = 256, .n_expert_used = 8, .n_expert_shared = 1, .n_head = 128,
     .q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope = 128, .qk_rope = 64, .v_head_mla = 128,
     .n_vocab = 129280, .n_ctx = 163840, .rope_base = 10000.0f, .eps = 1e-6f,
     .gating_func = 2, .n_group = 8, .n_group_used = 4, .weights_scale = 2.5f,
     .weights_norm = true, .yarn_factor = 40.0f, .yarn_orig_ctx = 4096, .yarn_log_mul = 0.1f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_GPTOSS, .preset = "gpt-oss-120b", .name = "gpt-oss 120b",
     .n_layer = 36, .n_embd = 2880, .n_ff_exp = 2880, .n_expert = 128, .n_expert_used = 4,
     .n_head = 64, .n_head_kv = 8, .head_dim_k = 64, .head_dim_v = 64, .n_vocab = 201088,
     .n_ctx = 131072, .rope_base = 150000.0f, .eps = 1e-5f, .yarn_factor = 32.0f,
     .yarn_orig_ctx = 4096, .yarn_beta_fast = 32.0f, .yarn_beta_slow = 1.0f,
     .sliding_window = 128, .expert_type = GM_TYPE_MXFP4, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_GPTOSS, .preset = "gpt-oss-20b", .name = "gpt-oss 20b",
     .n_layer = 24, .n_embd = 2880, .n_ff_exp = 2880, .n_expert = 32, .n_expert_used = 4,
     .n_head = 64, .n_head_kv = 8, .head_dim_k = 64, .head_dim_v = 64, .n_vocab = 201088,
     .n_ctx = 131072, .rope_base = 150000.0f, .eps = 1e-5f, .yarn_factor = 32.0f,
     .yarn_orig_ctx = 4096, .yarn_beta_fast = 32.0f, .yarn_beta_slow = 1.0f,
     .sliding_window = 128, .expert_type = GM_TYPE_MXFP4, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_GLM4MOE, .preset = "glm-4.5-air", .name = "GLM 4.5 Air",
     .n_layer = 46, .n_dense_lead = 1, .n_embd = 4096, .n_ff = 10944, .n_ff_exp = 1408,
     .n_expert = 128, .n_expert_used = 8, .n_expert_shared = 1, .n_head = 96, .n_head_kv = 8,
     .head_dim_k = 128, .head_dim_v = 128, .rope_dim = 64, .qkv_bias = true,
     .n_vocab = 151552, .n_ctx = 131072, .rope_base = 1e6f, .eps = 1e-5f, .gating_func = 2,
     .n_group = 1, .n_group_used = 1, .weights_scale = 1.0f, .weights_norm = true,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_GLM4MOE, .preset = "glm-4.5", .name = "GLM 4.5",
     .n_layer = 92, .n_dense_lead = 3, .n_embd = 5120, .n_ff = 12288, .n_ff_exp = 1536,
     .n_expert = 160, .n_expert_used = 8, .n_expert_shared = 1, .n_head = 96, .n_head_kv = 8,
     .head_dim_k = 128, .head_dim_v = 128, .rope_dim = 64, .qk_norm = true, .qkv_bias = true,
     .n_vocab = 151552, .n_ctx = 131072, .rope_base = 1e6f, .eps = 1e-5f, .gating_func = 2,
     .n_group = 1, .n_group_used = 1, .weights_scale = 2.5f, .weights_norm = true,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_MINIMAX_M2, .preset = "minimax-m2", .name = "MiniMax M2",
     .n_layer = 62, .n_embd = 3072, .n_ff_exp = 1536, .n_expert = 256, .n_expert_used = 8,
     .n_head = 48, .n_head_kv = 8, .head_dim_k = 128, .head_dim_v = 128, .rope_dim = 64,
     .qk_norm = true, .n_vocab = 200064, .n_ctx = 196608, .rope_base = 5e6f, .eps = 1e-6f,
     .gating_func = 2, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_LLAMA, .preset = "mixtral-8x7b", .name = "Mixtral 8x7B",
     .n_layer = 32, .n_embd = 4096, .n_ff_exp = 14336, .n_expert = 8, .n_expert_used = 2,
     .n_head = 32, .n_head_kv = 8, .head_dim_k = 128, .head_dim_v = 128, .rope_dim = 128,
     .n_vocab = 32000, .n_ctx = 32768, .rope_base = 1e6f, .eps = 1e-5f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_QWEN3NEXT, .preset = "qwen3-next-80b-a3b", .name = "Qwen3 Next 80B A3B",
     .n_layer = 48, .n_embd = 2048, .n_ff = 5120, .n_ff_exp = 512, .n_expert = 512,
     .n_expert_used = 10, .n_expert_shared = 1, .n_head = 16, .n_head_kv = 2, .head_dim_k = 256,
     .head_dim_v = 256, .rope_dim = 64, .n_vocab = 151936, .n_ctx = 262144, .rope_base = 1e7f,
     .eps = 1e-6f, .full_attn_interval = 4, .ssm_nk = 16, .ssm_dk = 128, .ssm_nv = 32,
     .ssm_dv = 128, .ssm_conv = 4, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    /* Tiny shapes of each architecture, as in tests/fixtures (--arch NAME picks these). */
    {.arch = GM_GEN_QWEN3MOE, .preset = "tiny-qwen3moe", .name = "Qwen3Moe tiny",
     .n_layer = 3, .n_embd = 256, .n_ff = 512, .n_ff_exp = 256, .n_expert = 8,
     .n_expert_used = 2, .n_head = 4, .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64,
     .n_vocab = 2000, .n_ctx = 4096, .rope_base = 1e6f, .eps = 1e-6f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_DEEPSEEK2, .preset = "tiny-deepseek2", .name = "Deepseek tiny",
     .n_layer = 3, .n_dense_lead = 1, .n_embd = 256, .n_ff = 512, .n_ff_exp = 256,
     .n_expert = 8, .n_expert_used = 4, .n_expert_shared = 1, .n_head = 4, .q_lora_rank = 256,
     .kv_lora_rank = 256, .qk_nope = 128, .qk_rope = 64, .v_head_mla = 64, .n_vocab = 2000,
     .n_ctx = 4096, .rope_base = 10000.0f, .eps = 1e-6f, .gating_func = 2, .n_group = 4,
     .n_group_used = 3, .weights_scale = 2.5f, .weights_norm = true,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_GPTOSS, .preset = "tiny-gpt-oss", .name = "Gpt Oss tiny",
     .n_layer = 3, .n_embd = 256, .n_ff_exp = 256, .n_expert = 8, .n_expert_used = 2,
     .n_head = 4, .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64, .n_vocab = 2000,
     .n_ctx = 131072, .rope_base = 150000.0f, .eps = 1e-5f, .yarn_factor = 32.0f,
     .yarn_orig_ctx = 4096, .yarn_beta_fast = 32.0f, .yarn_beta_slow = 1.0f,
     .sliding_window = 16, .expert_type = GM_TYPE_MXFP4, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_GLM4MOE, .preset = "tiny-glm4moe", .name = "Glm4Moe tiny",
     .n_layer = 3, .n_dense_lead = 1, .n_embd = 256, .n_ff = 512, .n_ff_exp = 256,
     .n_expert = 8, .n_expert_used = 2, .n_expert_shared = 1, .n_head = 4, .n_head_kv = 2,
     .head_dim_k = 64, .head_dim_v = 64, .rope_dim = 32, .qk_norm = true, .qkv_bias = true,
     .n_vocab = 2000, .n_ctx = 4096, .rope_base = 1e6f, .eps = 1e-5f, .gating_func = 2,
     .n_group = 1, .n_group_used = 1, .weights_scale = 2.5f, .weights_norm = true,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_LLAMA, .preset = "tiny-llama", .name = "Mixtral tiny",
     .n_layer = 3, .n_embd = 256, .n_ff_exp = 256, .n_expert = 8, .n_expert_used = 2,
     .n_head = 4, .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64, .rope_dim = 64,
     .n_vocab = 2000, .n_ctx = 4096, .rope_base = 1e6f, .eps = 1e-5f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_MINIMAX_M2, .preset = "tiny-minimax-m2", .name = "Minimax M2 tiny",
     .n_layer = 3, .n_embd = 256, .n_ff_exp = 256, .n_expert = 8, .n_expert_used = 2,
     .n_head = 4, .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64, .rope_dim = 32,
     .qk_norm = true, .n_vocab = 2000, .n_ctx = 4096, .rope_base = 5e6f, .eps = 1e-6f,
     .gating_func = 2, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_QWEN3NEXT, .preset = "tiny-qwen3next", .name = "Qwen3 Next tiny",
     .n_layer = 3, .n_embd = 256, .n_ff = 512, .n_ff_exp = 256, .n_expert = 8,
     .n_expert_used = 2, .n_expert_shared = 1, .n_head = 4, .n_head_kv = 2, .head_dim_k = 64,
     .head_dim_v = 64, .rope_dim = 16, .n_vocab = 2000, .n_ctx = 4096, .rope_base = 1e7f,
     .eps = 1e-6f, .full_attn_interval = 3, .ssm_nk = 2, .ssm_dk = 64, .ssm_nv = 4, .ssm_dv = 64,
     .ssm_conv = 4, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_QWEN35MOE, .preset = "qwen3.5-397b-a17b", .name = "Qwen3.5 397B A17B",
     .n_layer = 60, .n_embd = 4096, .n_ff_exp = 1024, .n_expert = 512, .n_expert_used = 10,
     .n_expert_shared = 1, .n_head = 32, .n_head_kv = 2, .head_dim_k = 256, .head_dim_v = 256,
     .rope_dim = 64, .n_vocab = 248320, .n_ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f,
     .full_attn_interval = 4, .ssm_nk = 16, .ssm_dk = 128, .ssm_nv = 64, .ssm_dv = 128,
     .ssm_conv = 4, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_QWEN35MOE, .preset = "tiny-qwen35moe", .name = "Qwen3.5 MoE tiny",
     .n_layer = 4, .n_embd = 128, .n_ff_exp = 64, .n_expert = 8, .n_expert_used = 2,
     .n_expert_shared = 1, .n_head = 4, .n_head_kv = 2, .head_dim_k = 32, .head_dim_v = 32,
     .rope_dim = 16, .n_vocab = 512, .n_ctx = 4096, .rope_base = 1e7f, .eps = 1e-6f,
     .full_attn_interval = 4, .ssm_nk = 2, .ssm_dk = 32, .ssm_nv = 4, .ssm_dv = 32,
     .ssm_conv = 4, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_ERNIE45MOE, .preset = "ernie-4.5-300b-a47b", .name = "ERNIE 4.5 300B A47B",
     .n_layer = 54, .n_dense_lead = 3, .n_embd = 8192, .n_ff = 28672, .n_ff_exp = 3584,
     .n_expert = 64, .n_expert_used = 8, .n_head = 64, .n_head_kv = 8, .head_dim_k = 128,
     .head_dim_v = 128, .n_vocab = 103424, .n_ctx = 131072, .rope_base = 500000.0f, .eps = 1e-5f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_ERNIE45MOE, .preset = "tiny-ernie4_5-moe", .name = "ERNIE 4.5 MoE tiny",
     .n_layer = 3, .n_dense_lead = 1, .n_embd = 256, .n_ff = 512, .n_ff_exp = 128, .n_expert = 8,
     .n_expert_used = 2, .n_expert_shared = 1, .n_head = 4, .n_head_kv = 2, .head_dim_k = 64,
     .head_dim_v = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_base = 500000.0f, .eps = 1e-5f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_HYV3, .preset = "tiny-hy_v3", .name = "Hy3 tiny",
     .n_layer = 3, .n_dense_lead = 1, .n_embd = 256, .n_ff = 512, .n_ff_exp = 128, .n_expert = 8,
     .n_expert_used = 2, .n_expert_shared = 1, .n_head = 4, .n_head_kv = 2, .head_dim_k = 64,
     .head_dim_v = 64, .qk_norm = true, .n_vocab = 2000, .n_ctx = 4096, .rope_base = 1e6f,
     .eps = 1e-5f, .gating_func = 2, .weights_scale = 2.5f, .weights_norm = true,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_HUNYUANMOE, .preset = "hunyuan-a13b", .name = "Hunyuan A13B",
     .n_layer = 32, .n_embd = 4096, .n_ff_exp = 3072, .n_expert = 64, .n_expert_used = 8,
     .n_expert_shared = 1, .n_head = 32, .n_head_kv = 8, .head_dim_k = 128, .head_dim_v = 128,
     .qk_norm = true, .n_vocab = 128167, .n_ctx = 262144, .rope_base = 11158840.0f, .eps = 1e-5f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_HUNYUANMOE, .preset = "tiny-hunyuan-moe", .name = "Hunyuan MoE tiny",
     .n_layer = 3, .n_embd = 256, .n_ff_exp = 128, .n_expert = 8, .n_expert_used = 2,
     .n_expert_shared = 1, .n_head = 4, .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64,
     .qk_norm = true, .n_vocab = 2000, .n_ctx = 4096, .rope_base = 1e6f, .eps = 1e-5f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_GLM_DSA, .preset = "glm-5.2", .name = "GLM 5.2",
     .n_layer = 78, .n_dense_lead = 3, .n_embd = 6144, .n_ff = 12288, .n_ff_exp = 2048,
     .n_expert = 256, .n_expert_used = 8, .n_expert_shared = 1, .n_head = 64,
     .q_lora_rank = 2048, .kv_lora_rank = 512, .qk_nope = 192, .qk_rope = 64, .v_head_mla = 256,
     .n_vocab = 154880, .n_ctx = 1048576, .rope_base = 1e6f, .eps = 1e-5f,
     .gating_func = 2, .n_group = 1, .n_group_used = 1, .weights_scale = 2.5f,
     .weights_norm = true, .idx_heads = 32, .idx_dim = 128, .idx_topk = 2048,
     .idx_shared_every = 4, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_GLM_DSA, .preset = "tiny-glm-dsa", .name = "GLM DSA tiny",
     .n_layer = 4, .n_dense_lead = 1, .n_embd = 256, .n_ff = 512, .n_ff_exp = 256,
     .n_expert = 8, .n_expert_used = 2, .n_expert_shared = 1, .n_head = 4, .q_lora_rank = 128,
     .kv_lora_rank = 128, .qk_nope = 64, .qk_rope = 32, .v_head_mla = 64, .n_vocab = 2000,
     .n_ctx = 4096, .rope_base = 1e6f, .eps = 1e-5f, .gating_func = 2, .n_group = 1,
     .n_group_used = 1, .weights_scale = 2.5f, .weights_norm = true, .idx_heads = 16,
     .idx_dim = 64, .idx_topk = 16, .idx_shared_every = 2,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_HYV4, .preset = "tiny-hy_v4", .name = "Hy4 tiny",
     .n_layer = 4, .n_dense_lead = 1, .n_embd = 256, .n_ff = 512, .n_ff_exp = 256,
     .n_expert = 8, .n_expert_used = 2, .n_expert_shared = 1, .n_head = 4, .q_lora_rank = 128,
     .kv_lora_rank = 128, .qk_nope = 64, .qk_rope = 16, .v_head_mla = 64, .n_vocab = 2000,
     .n_ctx = 4096, .rope_base = 1e6f, .eps = 1e-5f, .gating_func = 2, .weights_scale = 2.5f,
     .weights_norm = true, .idx_heads = 16, .idx_dim = 32, .idx_topk = 16, .idx_shared_every = 2,
     .hc_count = 4, .hc_eps = 1e-6f, .hc_magnitude = 2.0f, .swiglu_limit = 1.0f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_KIMI_K3, .preset = "tiny-kimi-k3", .name = "Kimi K3 tiny",
     .n_layer = 4, .n_dense_lead = 1, .n_embd = 256, .n_ff = 512, .n_ff_exp = 128,
     .n_expert = 8, .n_expert_used = 2, .n_expert_shared = 1, .n_head = 4, .q_lora_rank = 128,
     .kv_lora_rank = 128, .qk_nope = 64, .qk_rope = 32, .v_head_mla = 64, .n_vocab = 2000,
     .n_ctx = 4096, .rope_base = 5e4f, .eps = 1e-5f, .gating_func = 2, .weights_scale = 2.5f,
     .weights_norm = true, .kda_head_dim = 32, .kda_every = 2, .kda_lb = -5.0f, .latent = 128,
     .res_block = 2, .situ_beta = 4.0f, .situ_linear_beta = 8.0f, .ssm_conv = 4,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_MINIMAX_M3, .preset = "tiny-minimax-m3", .name = "MiniMax M3 tiny",
     .n_layer = 4, .n_dense_lead = 1, .n_embd = 256, .n_ff = 512, .n_ff_exp = 256, .n_expert = 8,
     .n_expert_used = 2, .n_expert_shared = 1, .n_head = 4, .n_head_kv = 2, .head_dim_k = 64,
     .head_dim_v = 64, .rope_dim = 32, .qk_norm = true, .n_vocab = 2000, .n_ctx = 4096,
     .rope_base = 5e6f, .eps = 1e-6f, .gating_func = 2, .weights_scale = 2.0f, .weights_norm = true,
     .idx_heads = 2, .idx_dim = 64, .idx_topk = 3, .idx_block = 4, .idx_local = 1,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    /* Qwen3.8-Flash-Next's config.json (model_type qwen4_exp): 36 Gated DeltaNet and 12 full
     * blocks, hc_count 4, hc_lowrank 320, indexer 4 heads of 128, budget 2048 in blocks of 4,
     * ple_layer_ids [2] (1-based), ngram_size 3, heads_per_ngram 8, ple_conv_kernel_size 4,
     * ngram_vocab_size_base 2e7 (a 320001536 x 160 table) */
    {.arch = GM_GEN_QWEN4EXP, .preset = "qwen4exp", .name = "Qwen3.8 Flash Next",
     .n_layer = 48, .n_embd = 2560, .n_ff_exp = 640, .n_expert = 512, .n_expert_used = 10,
     .n_expert_shared = 1, .n_head = 24, .n_head_kv = 2, .head_dim_k = 256, .head_dim_v = 256,
     .rope_dim = 64, .n_vocab = 248320, .n_ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f,
     .full_attn_interval = 4, .ssm_nk = 16, .ssm_dk = 128, .ssm_nv = 48, .ssm_dv = 128,
     .ssm_conv = 4, .hc_count = 4, .hc_rank = 320, .idx_heads = 4, .idx_dim = 128,
     .idx_topk = 2048, .qsa_ratio = 4, .ple_layer = 1, .ple_ngram = 3, .ple_per_ngram = 8,
     .ple_conv = 4, .ple_base = 20000000, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_QWEN4EXP, .preset = "tiny-qwen4exp", .name = "Qwen4Exp tiny",
     .n_layer = 4, .n_embd = 128, .n_ff_exp = 64, .n_expert = 8, .n_expert_used = 2,
     .n_expert_shared = 1, .n_head = 4, .n_head_kv = 2, .head_dim_k = 32, .head_dim_v = 32,
     .rope_dim = 16, .n_vocab = 512, .n_ctx = 4096, .rope_base = 1e7f, .eps = 1e-6f,
     .full_attn_interval = 2, .ssm_nk = 2, .ssm_dk = 32, .ssm_nv = 4, .ssm_dv = 32,
     .ssm_conv = 4, .hc_count = 4, .hc_rank = 8, .idx_heads = 4, .idx_dim = 32, .idx_topk = 8,
     .qsa_ratio = 4, .ple_layer = 0, .ple_ngram = 3, .ple_per_ngram = 2, .ple_conv = 4,
     .ple_base = 1000, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    /* DeepSeek-V4-Flash: 43 blocks of hidden 4096, 64 heads of 512 (64 rotated), q latent 1024,
     * output in 8 groups of rank 1024, 256 experts top-6 of FFN 2048 and a shared one, sliding
     * window 128, an indexer of 64 heads of 128 choosing 512, 4 streams mixed by 20 Sinkhorn
     * iterations, 3 hash-routed blocks. The checkpoint's compress_ratios were not at hand: blocks
     * 0-1 raw, then CSA (4) and HCA (128) alternating is this preset's assumption. */
    {.arch = GM_GEN_DEEPSEEK4, .preset = "deepseek4", .name = "DeepSeek V4 Flash",
     .n_layer = 43, .n_embd = 4096, .n_ff_exp = 2048, .n_expert = 256, .n_expert_used = 6,
     .n_expert_shared = 1, .n_head = 64, .n_head_kv = 1, .head_dim_k = 512, .head_dim_v = 512,
     .rope_dim = 64, .q_lora_rank = 1024, .n_vocab = 129280, .n_ctx = 1048576, .rope_base = 10000.0f,
     .eps = 1e-6f, .gating_func = 4, .weights_scale = 1.5f, .weights_norm = true, .sliding_window = 128,
     .idx_heads = 64, .idx_dim = 128, .idx_topk = 512, .hc_count = 4, .hc_eps = 1e-6f, .hc_sinkhorn = 20,
     .n_hash = 3, .o_groups = 8, .o_lora = 1024, .swiglu_limit = 10.0f, .compress_rope_base = 160000.0f,
     .qsa_ratio = 1, .yarn_factor = 16.0f, .yarn_orig_ctx = 65536, .yarn_beta_fast = 32.0f, .yarn_beta_slow = 1.0f,
     .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
    {.arch = GM_GEN_DEEPSEEK4, .preset = "tiny-deepseek4", .name = "DeepSeek V4 tiny",
     .n_layer = 4, .n_embd = 256, .n_ff_exp = 128, .n_expert = 8, .n_expert_used = 2, .n_expert_shared = 1,
     .n_head = 4, .n_head_kv = 1, .head_dim_k = 128, .head_dim_v = 128, .rope_dim = 32, .q_lora_rank = 64,
     .n_vocab = 2000, .n_ctx = 4096, .rope_base = 10000.0f, .eps = 1e-6f, .gating_func = 4, .weights_scale = 1.5f,
     .weights_norm = true, .sliding_window = 8, .idx_heads = 16, .idx_dim = 64, .idx_topk = 8, .hc_count = 4,
     .hc_eps = 1e-6f, .hc_sinkhorn = 20, .n_hash = 1, .o_groups = 2, .o_lora = 32, .swiglu_limit = 1.0f,
     .compress_rope_base = 160000.0f, .expert_type = GM_TYPE_Q4_K, .dense_type = GM_TYPE_Q8_0},
};

#define N_PRESETS ((int)(sizeof k_presets / sizeof k_presets[0]))

static const char *const k_desc[N_PRESETS] = {
    "qwen3moe: 94 blocks, hidden 4096, 128 experts top-8 of FFN 1536, vocab 151936",
    "qwen3moe: 48 blocks, hidden 2048, 128 experts top-8 of FFN 768",
    "deepseek2 (MLA): 61 blocks (1 dense), hidden 7168, 384 experts top-8 + 1 shared",
    "deepseek2 (MLA): 61 blocks (3 dense), hidden 7168, 256 experts top-8 + 1 shared",
    "gpt-oss: 36 blocks, hidden 2880, 128 experts top-4 (MXFP4), sliding window 128",
    "gpt-oss: 24 blocks, hidden 2880, 32 experts top-4 (MXFP4)",
    "glm4moe: 46 blocks (1 dense), hidden 4096, 128 experts top-8 of FFN 1408 + 1 shared",
    "glm4moe: 92 blocks (3 dense), hidden 5120, 160 experts top-8 of FFN 1536 + 1 shared",
    "minimax-m2: 62 blocks, hidden 3072, 256 experts top-8 of FFN 1536",
    "llama (Mixtral): 32 blocks, hidden 4096, 8 experts top-2 of FFN 14336",
    "qwen3next: 48 blocks (3 of 4 Gated DeltaNet), hidden 2048, 512 experts top-10 + 1 shared",
    "tiny qwen3moe (hidden 256, 3 blocks, 8 experts top-2), as tests/fixtures/qwen3moe",
    "tiny deepseek2 (MLA, 1 dense block, 8 experts top-4, 1 shared)",
    "tiny gpt-oss (hidden 256, 8 experts top-2, MXFP4)",
    "tiny glm4moe (1 dense block, 8 experts top-2, 1 shared)",
    "tiny llama / Mixtral (8 experts top-2)",
    "tiny minimax-m2 (8 experts top-2, sigmoid routing)",
    "tiny qwen3next (2 Gated DeltaNet blocks, 1 full-attention block), as tests/fixtures/qwen3next",
    "qwen35moe: 60 blocks (3 of 4 Gated DeltaNet), hidden 4096, 512 experts top-10 + 1 shared",
    "tiny qwen35moe (3 Gated DeltaNet blocks, 1 full-attention block, hidden 128)",
    "ernie4_5-moe: 54 blocks (3 dense), hidden 8192, 64 experts top-8 of FFN 3584",
    "tiny ernie4_5-moe (1 dense block, 8 experts top-2, 1 shared)",
    "tiny hy_v3 (1 dense block, 8 experts top-2, 1 shared, sigmoid routing)",
    "hunyuan-moe: 32 blocks, hidden 4096, 64 experts top-8 of FFN 3072 + 1 shared",
    "tiny hunyuan-moe (8 experts top-2, 1 shared, q/k norms after RoPE)",
    "glm-dsa (MLA, lightning indexer): 78 blocks (3 dense), hidden 6144, 256 experts top-8 + 1 shared",
    "tiny glm-dsa (1 dense block, 8 experts top-2, 1 shared, indexer top-16, block 3 shares block 2's choice)",
    "tiny hy_v4 (4 residual streams, 1 dense block, 8 experts top-2, 1 shared, indexer top-16)",
    "tiny kimi-k3 (KDA blocks 0 and 2, latent attention 1 and 3; 8 latent experts top-2, 1 shared)",
    "tiny minimax-m3 (1 dense block, 8 experts top-2, 1 shared, sparse attention: 3 blocks of 4 positions)",
    "qwen4exp (Qwen3.8-Flash-Next): 48 blocks (3 of 4 Gated DeltaNet), hidden 2560 x 4 streams, 512 experts top-10 + 1 shared, an n-gram table of 51.2B values",
    "tiny qwen4exp (Gated DeltaNet 0 and 2 with the n-gram embedding in 0, block-sparse attention 1 and 3; 4 streams)",
    "deepseek4 (DeepSeek-V4-Flash's shape as llama.cpp reads it; the compress-ratio pattern assumed): 43 blocks, "
    "hidden 4096 x 4 streams, 256 experts top-6 + 1 shared",
    "tiny deepseek4 (4 streams, sliding-window attention of 8, block 0 hash-routed, 8 experts top-2, 1 shared; "
    "--compress-ratio 1: CSA in block 2, HCA in 3)",
};

int gm_gen_n_presets(void) { return N_PRESETS; }
const char *gm_gen_preset_name(int i) { return i >= 0 && i < N_PRESETS ? k_presets[i].preset : NULL; }
const char *gm_gen_preset_desc(int i) { return i >= 0 && i < N_PRESETS ? k_desc[i] : NULL; }

const gm_gen_hparams *gm_gen_preset_find(const char *name)
{
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(k_presets[i].preset, name) == 0)
            return &k_presets[i];
    return NULL;
}

bool gm_gen_mla(const gm_gen_hparams *hp)
{
    return hp->arch == GM_GEN_DEEPSEEK2 || hp->arch == GM_GEN_GLM_DSA || hp->arch == GM_GEN_HYV4 ||
           hp->arch == GM_GEN_KIMI_K3;
}

bool gm_gen_kda(const gm_gen_hparams *hp, uint32_t il)
{
    return hp->arch == GM_GEN_KIMI_K3 && hp->kda_every && il % hp->kda_every != hp->kda_every - 1;
}

bool gm_gen_indexer_full(const gm_gen_hparams *hp, uint32_t il)
{
    if (hp->arch != GM_GEN_GLM_DSA && !(hp->arch == GM_GEN_HYV4 && hp->idx_topk))
        return false;
    return !hp->idx_shared_every || il < 2 || (il - 2) % hp->idx_shared_every == 0;
}

bool gm_gen_hybrid(const gm_gen_hparams *hp)
{
    return hp->arch == GM_GEN_QWEN3NEXT || hp->arch == GM_GEN_QWEN35MOE ||
           hp->arch == GM_GEN_QWEN4EXP;
}

bool gm_gen_full_attn(const gm_gen_hparams *hp, uint32_t il)
{
    return gm_gen_hybrid(hp) && hp->full_attn_interval && (il + 1) % hp->full_attn_interval == 0;
}

uint32_t gm_gen_ple_heads(const gm_gen_hparams *hp)
{
    if (hp->arch != GM_GEN_QWEN4EXP || hp->ple_ngram < 2)
        return 0;
    return (hp->ple_ngram - 1) * hp->ple_per_ngram;
}

static bool is_prime(uint64_t v)
{
    if (v < 2)
        return false;
    if (v % 2 == 0)
        return v == 2;
    for (uint64_t d = 3; d * d <= v; d += 2)
        if (v % d == 0)
            return false;
    return true;
}

uint64_t gm_gen_ple_rows(const gm_gen_hparams *hp, uint64_t *sizes, uint64_t *offsets)
{
    const uint32_t n = gm_gen_ple_heads(hp);
    uint64_t p = hp->ple_base ? hp->ple_base - 1 : 0, total = 0;
    for (uint32_t h = 0; h < n && h < GM_GEN_PLE_MAX_HEADS; h++) {
        do /* the next prime: head h's vocabulary is the (h+1)-th prime from ple_base on */
            p++;
        while (!is_prime(p));
        if (sizes)
            sizes[h] = p;
        if (offsets)
            offsets[h] = total;
        total += p;
    }
    return (total + 127) / 128 * 128;
}

void gm_gen_ple_multipliers(const gm_gen_hparams *hp, uint64_t *out)
{
    /* the reference's _build_layer_multipliers(vocab, ngram_size, ple_layer_index 0, seed 1234):
     * 2 * (splitmix64(seed + gamma * (j + 1)) % half) + 1 with half = ((2^63 - 1) / vocab) / 2,
     * so that a token times its multiplier fits an int64 (Qwen3.8-Flash-Next's are 23703573157769,
     * 20109073645365 and 8052911324071) */
    const uint64_t gamma = 0x9e3779b97f4a7c15ull;
    uint64_t half = (INT64_MAX / (hp->n_vocab ? hp->n_vocab : 1)) / 2;
    if (half < 1)
        half = 1;
    for (uint32_t j = 0; j < hp->ple_ngram; j++)
        out[j] = 2 * (gm_gen_mix64(1234 + gamma * (j + 1)) % half) + 1;
}

const char *gm_gen_arch_name(gm_gen_arch arch)
{
    switch (arch) {
    case GM_GEN_QWEN3MOE: return "qwen3moe";
    case GM_GEN_DEEPSEEK2: return "deepseek2";
    case GM_GEN_GPTOSS: return "gpt-oss";
    case GM_GEN_GLM4MOE: return "glm4moe";
    case GM_GEN_LLAMA: return "llama";
    case GM_GEN_MINIMAX_M2: return "minimax-m2";
    case GM_GEN_QWEN3NEXT: return "qwen3next";
    case GM_GEN_QWEN35MOE: return "qwen35moe";
    case GM_GEN_ERNIE45MOE: return "ernie4_5-moe";
    case GM_GEN_HYV3: return "hy_v3";
    case GM_GEN_HUNYUANMOE: return "hunyuan-moe";
    case GM_GEN_GLM_DSA: return "glm-dsa";
    case GM_GEN_HYV4: return "hy_v4";
    case GM_GEN_KIMI_K3: return "kimi-k3";
    case GM_GEN_MINIMAX_M3: return "minimax-m3";
    case GM_GEN_QWEN4EXP: return "qwen4exp";
    case GM_GEN_DEEPSEEK4: return "deepseek4";
    default: return "unknown";
    }
}

/* ---- types --------------------------------------------------------------------------------- */

uint32_t gm_gen_fit_type(uint32_t want, uint64_t ne0)
{
    const gm_type_info *ti = gm_type_get(want);
    if (ti && ne0 % ti->block_elems == 0)
        return want;
    uint32_t alt;
    switch (want) {
    case GM_TYPE_Q2_K:
    case GM_TYPE_Q4_K:
    case GM_TYPE_IQ2_XXS: alt = GM_TYPE_Q4_0; break;
    default: alt = GM_TYPE_Q8_0; break;
    }
    if (ne0 % 32 == 0)
        return alt;
    return GM_TYPE_F16;
}

uint32_t gm_gen_file_type(uint32_t t)
{
    switch (t) {
    case GM_TYPE_F32: return 0;
    case GM_TYPE_F16: return 1;
    case GM_TYPE_Q4_0: return 2;
    case GM_TYPE_Q8_0: return 7;
    case GM_TYPE_Q2_K: return 10;
    case GM_TYPE_Q4_K: return 15;  /* Q4_K_M */
    case GM_TYPE_Q5_K: return 17;  /* Q5_K_M */
    case GM_TYPE_Q6_K: return 18;
    case GM_TYPE_IQ2_XXS: return 19;
    case GM_TYPE_BF16: return 32;
    case GM_TYPE_MXFP4: return 38; /* MXFP4_MOE */
    default: return 1;
    }
}

/* ---- plan ---------------------------------------------------------------------------------- */

static int add(gen_plan *p, const gm_gen_hparams *hp, gen_kind kind, uint32_t layer,
               const char *suffix, uint32_t n_dims, uint64_t ne0, uint64_t ne1, uint64_t ne2,
               gm_err *err)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        gen_tensor *t = realloc(p->t, cap * sizeof *t);
        if (!t)
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        p->t = t;
        p->cap = cap;
    }
    gen_tensor *t = &p->t[p->n];
    memset(t, 0, sizeof *t);
    if (layer == UINT32_MAX)
        snprintf(t->name, sizeof t->name, "%s", suffix);
    else
        snprintf(t->name, sizeof t->name, "blk.%u.%s", layer, suffix);
    t->kind = kind;
    t->layer = layer;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    switch (kind) {
    case GEN_EXPERT:
    case GEN_PLE_EMBD: t->want_type = hp->expert_type; break;
    case GEN_HASH: t->want_type = GM_TYPE_I32; break;
    case GEN_MATRIX:
    case GEN_HC_MIX:
    case GEN_EMBD:
    case GEN_OUTPUT: t->want_type = hp->dense_type; break;
    default: t->want_type = GM_TYPE_F32; break;
    }
    t->type = kind == GEN_HASH ? GM_TYPE_I32 : gm_gen_fit_type(t->want_type, ne0);
    uint64_t row_bytes, rows = ne1 * ne2;
    gm_err sub = {0};
    if (gm_type_row_bytes(t->type, ne0, &row_bytes, &sub) != 0 ||
        !gm_mul_u64(row_bytes, rows, &t->n_bytes))
        return gm_err_set(err, GM_ERANGE, "%s: size does not fit", t->name);
    p->n++;
    return 0;
}

#define ADD1(kind, sfx, a) add(p, hp, kind, il, sfx, 1, a, 1, 1, err)
#define ADD2(kind, sfx, a, b) add(p, hp, kind, il, sfx, 2, a, b, 1, err)
#define ADD3(kind, sfx, a, b, c) add(p, hp, kind, il, sfx, 3, a, b, c, err)
#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* qwen4exp's hyper-connection mixer PREFIX (hc_attn, hc_ffn, output_hc) of block il: the
 * streams' RMSNorm gammas, the low-rank read gate, and (inject) the output's weights per stream. */
static int plan_hc(gen_plan *p, const gm_gen_hparams *hp, uint32_t il, const char *prefix,
                   bool inject, gm_err *err)
{
    const uint64_t W = (uint64_t)hp->hc_count * hp->n_embd, R = hp->hc_rank;
    char name[48];
    snprintf(name, sizeof name, "%s_norm.weight", prefix);
    TRY(ADD1(GEN_NORM, name, W));
    snprintf(name, sizeof name, "%s_down.weight", prefix);
    TRY(ADD2(GEN_HC_MIX, name, W, R));
    snprintf(name, sizeof name, "%s_up.weight", prefix);
    TRY(ADD2(GEN_MATRIX, name, R, W));
    if (inject) {
        snprintf(name, sizeof name, "%s_inject.weight", prefix);
        TRY(ADD2(GEN_HC_MIX, name, W, hp->hc_count));
    }
    return 0;
}

uint32_t gm_gen_dsv4_ratio(const gm_gen_hparams *hp, uint32_t il)
{
    if (hp->arch != GM_GEN_DEEPSEEK4 || !hp->qsa_ratio || il < 2)
        return 0;
    return il % 2 == 0 ? 4 : 128;
}

/* DeepSeek-V4's attention and stream mixing of block il (the converter's names). */
static int plan_dsv4_attn(gen_plan *p, const gm_gen_hparams *hp, uint32_t il, gm_err *err)
{
    const uint64_t H = hp->n_embd, nh = hp->n_head, hd = hp->head_dim_k, G = hp->o_groups, R = hp->o_lora;
    const uint64_t W = (uint64_t)hp->hc_count * H, M = (2ull + hp->hc_count) * hp->hc_count;
    TRY(ADD1(GEN_SINKS, "attn_sinks.weight", nh));
    TRY(ADD2(GEN_MATRIX, "attn_q_a.weight", H, hp->q_lora_rank));
    TRY(ADD1(GEN_NORM, "attn_q_a_norm.weight", hp->q_lora_rank));
    TRY(ADD2(GEN_MATRIX, "attn_q_b.weight", hp->q_lora_rank, nh * hd));
    TRY(ADD2(GEN_MATRIX, "attn_kv.weight", H, hd));
    TRY(ADD1(GEN_NORM, "attn_kv_a_norm.weight", hd));
    TRY(ADD2(GEN_MATRIX, "attn_output_a.weight", nh * hd / G, G * R));
    TRY(ADD2(GEN_MATRIX, "attn_output_b.weight", G * R, H));
    TRY(ADD2(GEN_HC_FN, "hc_attn_fn.weight", W, M));
    TRY(ADD1(GEN_BIAS, "hc_attn_base.weight", M));
    TRY(ADD1(GEN_NORM, "hc_attn_scale.weight", 3));
    TRY(ADD2(GEN_HC_FN, "hc_ffn_fn.weight", W, M));
    TRY(ADD1(GEN_BIAS, "hc_ffn_base.weight", M));
    TRY(ADD1(GEN_NORM, "hc_ffn_scale.weight", 3));
    const uint32_t ratio = gm_gen_dsv4_ratio(hp, il);
    if (ratio) { /* the compressor of the layer's keys (overlapping windows for CSA) */
        const uint64_t c = ratio == 4 ? 2 : 1, D = hp->idx_dim;
        TRY(ADD2(GEN_MATRIX, "attn_compressor_kv.weight", H, c * hd));
        TRY(ADD2(GEN_MATRIX, "attn_compressor_gate.weight", H, c * hd));
        TRY(ADD2(GEN_BIAS, "attn_compressor_ape.weight", c * hd, ratio));
        TRY(ADD1(GEN_NORM, "attn_compressor_norm.weight", hd));
        if (ratio == 4) { /* CSA's lightning indexer over its own compressed keys */
            TRY(ADD2(GEN_MATRIX, "indexer.proj.weight", H, hp->idx_heads));
            TRY(ADD2(GEN_MATRIX, "indexer.attn_q_b.weight", hp->q_lora_rank, (uint64_t)hp->idx_heads * D));
            TRY(ADD2(GEN_MATRIX, "indexer_compressor_kv.weight", H, 2 * D));
            TRY(ADD2(GEN_MATRIX, "indexer_compressor_gate.weight", H, 2 * D));
            TRY(ADD2(GEN_BIAS, "indexer_compressor_ape.weight", 2 * D, ratio));
            TRY(ADD1(GEN_NORM, "indexer_compressor_norm.weight", D));
        }
    }
    return 0;
}

/* Attention tensors of block il. */
static int plan_attn(gen_plan *p, const gm_gen_hparams *hp, uint32_t il, gm_err *err)
{
    uint64_t H = hp->n_embd, nh = hp->n_head, nkv = hp->n_head_kv;
    uint64_t dk = hp->head_dim_k, dv = hp->head_dim_v;
    if (hp->arch == GM_GEN_DEEPSEEK4)
        return plan_dsv4_attn(p, hp, il, err);
    if (hp->arch == GM_GEN_KIMI_K3 && hp->res_block) {
        TRY(ADD1(GEN_HC_FN, "attn_res_score.weight", H));
        TRY(ADD1(GEN_HC_FN, "ffn_res_score.weight", H));
    }
    if (hp->arch == GM_GEN_QWEN4EXP) {
        /* the mixer of the streams into the block's input, which carries its RMSNorm (a gamma
         * per stream, 1-D as the converter writes it) and the block output's weights back */
        TRY(plan_hc(p, hp, il, "hc_attn", true, err));
        if (gm_gen_ple_heads(hp) && il == hp->ple_layer) {
            /* the n-gram hash embedding: a table of rows of n_embd / heads values (named without
             * the block, read by this block only), the keys and value of its gate, the
             * per-stream norms and a causal convolution over the streams' channels */
            const uint64_t W = (uint64_t)hp->hc_count * H;
            TRY(add(p, hp, GEN_PLE_EMBD, UINT32_MAX, "per_layer_token_embd.weight", 2,
                    H / gm_gen_ple_heads(hp), gm_gen_ple_rows(hp, NULL, NULL), 1, err));
            TRY(ADD2(GEN_MATRIX, "ple_key.weight", H, W));
            TRY(ADD2(GEN_MATRIX, "ple_value.weight", H, H));
            TRY(ADD1(GEN_NORM, "ple_norm_key.weight", W));
            TRY(ADD1(GEN_NORM, "ple_norm_query.weight", W));
            TRY(ADD1(GEN_NORM, "ple_norm_conv.weight", W));
            TRY(ADD2(GEN_MATRIX, "ple_conv1d.weight", hp->ple_conv, W));
        }
    }
    if (gm_gen_kda(hp, il)) {
        /* KDA: q, k, v each with a causal convolution, the decay's low-rank projections and
         * bias, beta, the output gate and per-head norm */
        const uint64_t hd = hp->kda_head_dim, Z = nh * hd;
        TRY(ADD2(GEN_MATRIX, "attn_q.weight", H, Z));
        TRY(ADD2(GEN_MATRIX, "attn_k.weight", H, Z));
        TRY(ADD2(GEN_MATRIX, "attn_v.weight", H, Z));
        TRY(ADD3(GEN_CONV, "ssm_conv1d_q.weight", hp->ssm_conv, 1, Z));
        TRY(ADD3(GEN_CONV, "ssm_conv1d_k.weight", hp->ssm_conv, 1, Z));
        TRY(ADD3(GEN_CONV, "ssm_conv1d_v.weight", hp->ssm_conv, 1, Z));
        TRY(ADD2(GEN_MATRIX, "ssm_f_a.weight", H, hd));
        TRY(ADD2(GEN_MATRIX, "ssm_f_b.weight", hd, Z));
        TRY(ADD2(GEN_MATRIX, "ssm_beta.weight", H, nh));
        TRY(ADD1(GEN_SSM_A, "ssm_a", nh));
        TRY(ADD1(GEN_BIAS, "ssm_dt.bias", Z));
        TRY(ADD2(GEN_MATRIX, "ssm_g.weight", H, Z));
        TRY(ADD1(GEN_NORM, "ssm_norm.weight", hd));
        TRY(ADD2(GEN_MATRIX, "attn_output.weight", Z, H));
        return 0;
    }
    if (gm_gen_mla(hp)) {
        uint64_t qk = hp->qk_nope + hp->qk_rope;
        if (hp->q_lora_rank) {
            TRY(ADD2(GEN_MATRIX, "attn_q_a.weight", H, hp->q_lora_rank));
            TRY(ADD1(GEN_NORM, "attn_q_a_norm.weight", hp->q_lora_rank));
            TRY(ADD2(GEN_MATRIX, "attn_q_b.weight", hp->q_lora_rank, nh * qk));
        } else {
            TRY(ADD2(GEN_MATRIX, "attn_q.weight", H, nh * qk));
        }
        TRY(ADD2(GEN_MATRIX, "attn_kv_a_mqa.weight", H, hp->kv_lora_rank + hp->qk_rope));
        TRY(ADD1(GEN_NORM, "attn_kv_a_norm.weight", hp->kv_lora_rank));
        TRY(ADD3(GEN_MATRIX, "attn_k_b.weight", hp->qk_nope, hp->kv_lora_rank, nh));
        TRY(ADD3(GEN_MATRIX, "attn_v_b.weight", hp->kv_lora_rank, hp->v_head_mla, nh));
        TRY(ADD2(GEN_MATRIX, "attn_output.weight", nh * hp->v_head_mla, H));
        if (hp->arch == GM_GEN_KIMI_K3)
            TRY(ADD2(GEN_MATRIX, "attn_gate.weight", H, nh * hp->v_head_mla));
        if (hp->arch == GM_GEN_HYV4) {
            /* a sink logit per head, the sigmoid gate of the heads' values; the residual
             * streams' mixing around the attention and the FFN (float32, as the converter
             * keeps them) */
            const uint64_t W = (uint64_t)hp->hc_count * H, M = 2ull * hp->hc_count;
            TRY(ADD1(GEN_SINKS, "attn_sinks.weight", nh));
            TRY(ADD2(GEN_MATRIX, "attn_gate.weight", H, nh * hp->v_head_mla));
            TRY(ADD2(GEN_HC_FN, "hc_attn_fn.weight", W, M));
            TRY(ADD1(GEN_BIAS, "hc_attn_base.weight", M));
            TRY(ADD1(GEN_NORM, "hc_attn_scale.weight", 2));
            TRY(ADD2(GEN_HC_FN, "hc_ffn_fn.weight", W, M));
            TRY(ADD1(GEN_BIAS, "hc_ffn_base.weight", M));
            TRY(ADD1(GEN_NORM, "hc_ffn_scale.weight", 2));
        }
        if (gm_gen_indexer_full(hp, il)) {
            /* the lightning indexer: a LayerNorm'd key, per-head queries from the q latent,
             * per-head weights */
            TRY(ADD1(GEN_NORM, "indexer.k_norm.weight", hp->idx_dim));
            TRY(ADD1(GEN_BIAS, "indexer.k_norm.bias", hp->idx_dim));
            TRY(ADD2(GEN_MATRIX, "indexer.proj.weight", H, hp->idx_heads));
            TRY(ADD2(GEN_MATRIX, "indexer.attn_k.weight", H, hp->idx_dim));
            TRY(ADD2(GEN_MATRIX, "indexer.attn_q_b.weight", hp->q_lora_rank, (uint64_t)hp->idx_heads * hp->idx_dim));
        }
        return 0;
    }
    if (gm_gen_hybrid(hp) && !gm_gen_full_attn(hp, il)) {
        /* Gated DeltaNet: channels [q | k | v], gates z, per key head [beta | alpha] */
        const uint64_t C = 2ull * hp->ssm_nk * hp->ssm_dk + (uint64_t)hp->ssm_nv * hp->ssm_dv;
        const uint64_t Z = (uint64_t)hp->ssm_nv * hp->ssm_dv;
        if (hp->ssm_in_fused) {
            TRY(ADD2(GEN_MATRIX, "ssm_in.weight", H, C + Z));
        } else {
            TRY(ADD2(GEN_MATRIX, "attn_qkv.weight", H, C));
            TRY(ADD2(GEN_MATRIX, "attn_gate.weight", H, Z));
        }
        if (hp->arch == GM_GEN_QWEN35MOE || hp->arch == GM_GEN_QWEN4EXP) {
            TRY(ADD2(GEN_MATRIX, "ssm_beta.weight", H, hp->ssm_nv));
            TRY(ADD2(GEN_MATRIX, "ssm_alpha.weight", H, hp->ssm_nv));
        } else {
            TRY(ADD2(GEN_MATRIX, "ssm_ba.weight", H, 2ull * hp->ssm_nv));
        }
        TRY(ADD2(GEN_CONV, "ssm_conv1d.weight", hp->ssm_conv, C));
        TRY(ADD1(GEN_SSM_A, "ssm_a", hp->ssm_nv));
        TRY(ADD1(GEN_BIAS, "ssm_dt.bias", hp->ssm_nv));
        TRY(ADD1(GEN_NORM, "ssm_norm.weight", hp->ssm_dv));
        TRY(ADD2(GEN_MATRIX, "ssm_out.weight", Z, H));
        return 0;
    }
    bool bias = hp->arch == GM_GEN_GPTOSS || hp->qkv_bias;
    /* qwen3next: per head [query | gate] */
    TRY(ADD2(GEN_MATRIX, "attn_q.weight", H, nh * dk * (gm_gen_hybrid(hp) ? 2 : 1)));
    if (bias)
        TRY(ADD1(GEN_BIAS, "attn_q.bias", nh * dk));
    TRY(ADD2(GEN_MATRIX, "attn_k.weight", H, nkv * dk));
    if (bias)
        TRY(ADD1(GEN_BIAS, "attn_k.bias", nkv * dk));
    TRY(ADD2(GEN_MATRIX, "attn_v.weight", H, nkv * dv));
    if (bias)
        TRY(ADD1(GEN_BIAS, "attn_v.bias", nkv * dv));
    TRY(ADD2(GEN_MATRIX, "attn_output.weight", nh * dv, H));
    if (hp->arch == GM_GEN_GPTOSS) {
        TRY(ADD1(GEN_BIAS, "attn_output.bias", H));
        TRY(ADD1(GEN_SINKS, "attn_sinks.weight", nh));
    }
    if (hp->arch == GM_GEN_QWEN3MOE || gm_gen_hybrid(hp) || hp->arch == GM_GEN_HYV3 ||
        hp->arch == GM_GEN_HUNYUANMOE || hp->arch == GM_GEN_MINIMAX_M3 ||
        (hp->arch == GM_GEN_GLM4MOE && hp->qk_norm)) {
        TRY(ADD1(GEN_NORM, "attn_q_norm.weight", dk));
        TRY(ADD1(GEN_NORM, "attn_k_norm.weight", dk));
    } else if (hp->arch == GM_GEN_MINIMAX_M2 && hp->qk_norm) {
        TRY(ADD1(GEN_NORM, "attn_q_norm.weight", nh * dk));
        TRY(ADD1(GEN_NORM, "attn_k_norm.weight", nkv * dk));
    }
    if ((hp->arch == GM_GEN_MINIMAX_M3 && il >= hp->n_dense_lead) || hp->arch == GM_GEN_QWEN4EXP) {
        /* the sparse attention's indexer: queries (minimax-m3: one per kv head), one key, their
         * RMSNorm weights (qwen4exp: in every full-attention block, dense ones included) */
        TRY(ADD2(GEN_MATRIX, "indexer.q_proj.weight", H, (uint64_t)hp->idx_heads * hp->idx_dim));
        TRY(ADD2(GEN_MATRIX, "indexer.k_proj.weight", H, hp->idx_dim));
        TRY(ADD1(GEN_NORM, "indexer.q_norm.weight", hp->idx_dim));
        TRY(ADD1(GEN_NORM, "indexer.k_norm.weight", hp->idx_dim));
    }
    return 0;
}

/* FFN tensors of block il (dense or MoE). */
static int plan_ffn(gen_plan *p, const gm_gen_hparams *hp, uint32_t il, gm_err *err)
{
    uint64_t H = hp->n_embd, E = hp->n_expert, F = hp->n_ff_exp;
    const uint64_t X = hp->latent ? hp->latent : H; /* the routed experts' width */
    /* gpt-oss and glm4moe name the pre-FFN norm post_attention_norm. */
    const char *norm = (hp->arch == GM_GEN_GPTOSS || hp->arch == GM_GEN_GLM4MOE ||
                        gm_gen_hybrid(hp))
                           ? "post_attention_norm.weight"
                           : "ffn_norm.weight";
    if (hp->arch == GM_GEN_QWEN4EXP) /* the mixer carries the norm */
        TRY(plan_hc(p, hp, il, "hc_ffn", true, err));
    else
        TRY(ADD1(GEN_NORM, norm, H));
    if (il < hp->n_dense_lead) {
        TRY(ADD2(GEN_MATRIX, "ffn_gate.weight", H, hp->n_ff));
        TRY(ADD2(GEN_MATRIX, "ffn_up.weight", H, hp->n_ff));
        TRY(ADD2(GEN_MATRIX, "ffn_down.weight", hp->n_ff, H));
        return 0;
    }
    TRY(ADD2(GEN_ROUTER, "ffn_gate_inp.weight", H, E));
    if (hp->arch == GM_GEN_GPTOSS)
        TRY(ADD1(GEN_BIAS, "ffn_gate_inp.bias", E));
    if (hp->arch == GM_GEN_DEEPSEEK4 && il < hp->n_hash) /* routed by the token's id */
        TRY(ADD2(GEN_HASH, "ffn_gate_tid2eid.weight", hp->n_expert_used, hp->n_vocab));
    else if (gm_gen_mla(hp) || hp->arch == GM_GEN_GLM4MOE || hp->arch == GM_GEN_DEEPSEEK4 ||
             hp->arch == GM_GEN_MINIMAX_M2 || hp->arch == GM_GEN_MINIMAX_M3 || hp->arch == GM_GEN_ERNIE45MOE)
        TRY(ADD1(GEN_PROBS_B, "exp_probs_b.bias", E));
    else if (hp->arch == GM_GEN_HYV3)
        TRY(ADD1(GEN_PROBS_B, "exp_probs_b", E));
    TRY(ADD3(GEN_EXPERT, "ffn_gate_exps.weight", X, F, E));
    TRY(ADD3(GEN_EXPERT, "ffn_up_exps.weight", X, F, E));
    TRY(ADD3(GEN_EXPERT, "ffn_down_exps.weight", F, X, E));
    if (hp->latent) { /* Kimi-K3's latent MoE: into and out of the experts' width */
        TRY(ADD2(GEN_MATRIX, "ffn_routed_down.weight", H, X));
        TRY(ADD2(GEN_MATRIX, "ffn_routed_up.weight", X, H));
        TRY(ADD1(GEN_NORM, "ffn_routed_norm.weight", X));
    }
    if (hp->arch == GM_GEN_GPTOSS) {
        TRY(ADD2(GEN_BIAS, "ffn_gate_exps.bias", F, E));
        TRY(ADD2(GEN_BIAS, "ffn_up_exps.bias", F, E));
        TRY(ADD2(GEN_BIAS, "ffn_down_exps.bias", H, E));
    }
    if (hp->n_expert_shared) {
        uint64_t Fs = F * hp->n_expert_shared;
        TRY(ADD2(GEN_MATRIX, "ffn_gate_shexp.weight", H, Fs));
        TRY(ADD2(GEN_MATRIX, "ffn_up_shexp.weight", H, Fs));
        TRY(ADD2(GEN_MATRIX, "ffn_down_shexp.weight", Fs, H));
        /* the shared expert's sigmoid gate: [H, 1] as qwen3next's converter writes it, a vector
         * as Qwen3.5's does */
        if (hp->arch == GM_GEN_QWEN3NEXT)
            TRY(ADD2(GEN_ROUTER, "ffn_gate_inp_shexp.weight", H, 1));
        else if (hp->arch == GM_GEN_QWEN35MOE || hp->arch == GM_GEN_QWEN4EXP)
            TRY(ADD1(GEN_ROUTER, "ffn_gate_inp_shexp.weight", H));
    }
    return 0;
}

int gm_gen_plan_build(const gm_gen_hparams *hp, gen_plan *p, gm_err *err)
{
    memset(p, 0, sizeof *p);
    uint32_t il = UINT32_MAX;
    int rc = ADD2(GEN_EMBD, "token_embd.weight", hp->n_embd, hp->n_vocab);
    for (il = 0; !rc && il < hp->n_layer; il++) {
        if (hp->arch != GM_GEN_QWEN4EXP) /* whose mixers carry the norms */
            rc = ADD1(GEN_NORM, "attn_norm.weight", hp->n_embd);
        if (!rc)
            rc = plan_attn(p, hp, il, err);
        if (!rc)
            rc = plan_ffn(p, hp, il, err);
    }
    il = UINT32_MAX;
    if (!rc && hp->arch == GM_GEN_QWEN4EXP) /* the streams' last mixer is the output norm */
        rc = plan_hc(p, hp, il, "output_hc", false, err);
    else if (!rc)
        rc = ADD1(GEN_NORM, "output_norm.weight", hp->n_embd);
    if (!rc)
        rc = ADD2(GEN_OUTPUT, "output.weight", hp->n_embd, hp->n_vocab);
    if (!rc && hp->arch == GM_GEN_KIMI_K3 && hp->res_block)
        rc = ADD1(GEN_HC_FN, "output_res_score.weight", hp->n_embd);
    if (!rc && (hp->arch == GM_GEN_HYV4 || hp->arch == GM_GEN_DEEPSEEK4)) { /* the output head's mixing of the streams */
        rc = ADD2(GEN_HC_FN, "output_hc_fn.weight", (uint64_t)hp->hc_count * hp->n_embd, hp->hc_count);
        if (!rc)
            rc = ADD1(GEN_BIAS, "output_hc_base.weight", hp->hc_count);
        if (!rc)
            rc = ADD1(GEN_NORM, "output_hc_scale.weight", 1);
    }
    if (rc)
        gm_gen_plan_free(p);
    return rc;
}

void gm_gen_plan_free(gen_plan *p)
{
    free(p->t);
    memset(p, 0, sizeof *p);
}

/* ---- metadata ------------------------------------------------------------------------------ */

typedef struct kvw {
    gm_ggufw *w;
    const char *arch;
    gm_err *err;
    int rc;
} kvw;

static const char *akey(const kvw *k, const char *suffix, char *buf, size_t n)
{
    snprintf(buf, n, "%s.%s", k->arch, suffix);
    return buf;
}

static void kv_u32(kvw *k, const char *suffix, uint32_t v)
{
    char key[128];
    if (!k->rc)
        k->rc = gm_ggufw_set_u32(k->w, akey(k, suffix, key, sizeof key), v, k->err);
}

static void kv_f32(kvw *k, const char *suffix, float v)
{
    char key[128];
    if (!k->rc)
        k->rc = gm_ggufw_set_f32(k->w, akey(k, suffix, key, sizeof key), v, k->err);
}

static void kv_bool(kvw *k, const char *suffix, bool v)
{
    char key[128];
    if (!k->rc)
        k->rc = gm_ggufw_set_bool(k->w, akey(k, suffix, key, sizeof key), v, k->err);
}

static void kv_str(kvw *k, const char *suffix, const char *v)
{
    char key[128];
    if (!k->rc)
        k->rc = gm_ggufw_set_str(k->w, akey(k, suffix, key, sizeof key), v, k->err);
}

static void kv_i32s(kvw *k, const char *suffix, const int32_t *v, uint64_t n)
{
    char key[128];
    if (!k->rc)
        k->rc = gm_ggufw_set_arr(k->w, akey(k, suffix, key, sizeof key), GM_GGUF_I32, v, n, k->err);
}

static void kv_arr(kvw *k, const char *suffix, gm_gguf_vtype type, const void *v, uint64_t n)
{
    char key[128];
    if (!k->rc)
        k->rc = gm_ggufw_set_arr(k->w, akey(k, suffix, key, sizeof key), type, v, n, k->err);
}

/* qwen4exp's own keys, as its converter writes them: the blocks' kinds (a bool per block,
 * from the config's layer_types), the streams, the indexer, the QSA block size per block (0 in
 * the Gated DeltaNet blocks: an int32 array), and the n-gram hash's group (ple.layers an int32
 * array; the multipliers, offsets and vocabularies uint64 arrays, which llama.cpp requires) */
static void write_qwen4exp_kv(kvw *k, const gm_gen_hparams *hp)
{
    uint8_t recr[1024];
    int32_t ratios[1024];
    const uint32_t n = hp->n_layer < 1024 ? hp->n_layer : 1024;
    for (uint32_t l = 0; l < n; l++) {
        recr[l] = !gm_gen_full_attn(hp, l);
        ratios[l] = recr[l] ? 0 : (int32_t)hp->qsa_ratio;
    }
    kv_arr(k, "attention.recurrent_layers", GM_GGUF_BOOL, recr, n);
    kv_u32(k, "hyper_connection.count", hp->hc_count);
    kv_u32(k, "hyper_connection.low_rank", hp->hc_rank);
    kv_u32(k, "attention.indexer.head_count", hp->idx_heads);
    kv_u32(k, "attention.indexer.key_length", hp->idx_dim);
    kv_u32(k, "attention.indexer.top_k", hp->idx_topk);
    kv_arr(k, "attention.compress_ratios", GM_GGUF_I32, ratios, n);
    const uint32_t heads = gm_gen_ple_heads(hp);
    if (!heads)
        return;
    const int32_t layer = (int32_t)hp->ple_layer;
    uint64_t mult[16], sizes[GM_GEN_PLE_MAX_HEADS], offsets[GM_GEN_PLE_MAX_HEADS];
    gm_gen_ple_multipliers(hp, mult);
    gm_gen_ple_rows(hp, sizes, offsets);
    kv_arr(k, "ple.layers", GM_GGUF_I32, &layer, 1);
    kv_u32(k, "ple.ngram_size", hp->ple_ngram);
    kv_u32(k, "ple.heads_per_ngram", hp->ple_per_ngram);
    kv_u32(k, "ple.conv_kernel", hp->ple_conv);
    kv_u32(k, "ple.eos_token_id", hp->ple_eos);
    kv_u32(k, "embedding_length_per_layer_input", hp->n_embd / heads);
    kv_arr(k, "ple.layer_multipliers", GM_GGUF_U64, mult, hp->ple_ngram);
    kv_arr(k, "ple.head_offsets", GM_GGUF_U64, offsets, heads);
    kv_arr(k, "ple.head_vocab_sizes", GM_GGUF_U64, sizes, heads);
}

/* DeepSeek-V4's own keys, as its converter writes them (conversion/deepseek.py): the SwiGLU clamps
 * per block, the indexer, the grouped output, the compress ratios (an int32 per block), the
 * streams and the hash-routed blocks. */
static void write_dsv4_kv(kvw *k, const gm_gen_hparams *hp)
{
    float lim[1024];
    int32_t ratios[1024];
    const uint32_t n = hp->n_layer < 1024 ? hp->n_layer : 1024;
    for (uint32_t l = 0; l < n; l++) {
        lim[l] = hp->swiglu_limit;
        ratios[l] = (int32_t)gm_gen_dsv4_ratio(hp, l);
    }
    kv_u32(k, "attention.q_lora_rank", hp->q_lora_rank);
    kv_arr(k, "swiglu_clamp_exp", GM_GGUF_F32, lim, n);
    kv_arr(k, "swiglu_clamp_shexp", GM_GGUF_F32, lim, n);
    kv_u32(k, "attention.indexer.head_count", hp->idx_heads);
    kv_u32(k, "attention.indexer.key_length", hp->idx_dim);
    kv_u32(k, "attention.indexer.top_k", hp->idx_topk);
    kv_u32(k, "attention.output_group_count", hp->o_groups);
    kv_u32(k, "attention.output_lora_rank", hp->o_lora);
    kv_arr(k, "attention.compress_ratios", GM_GGUF_I32, ratios, n);
    kv_f32(k, "attention.compress_rope_freq_base", hp->compress_rope_base);
    kv_u32(k, "hyper_connection.count", hp->hc_count);
    kv_u32(k, "hyper_connection.sinkhorn_iterations", hp->hc_sinkhorn);
    kv_f32(k, "hyper_connection.epsilon", hp->hc_eps);
    kv_u32(k, "hash_layer_count", hp->n_hash);
    kv_u32(k, "embedding_length_out", hp->n_embd * hp->hc_count);
}

/* The keys in the order the converter writes them (see tests/fixtures/<arch>/gguf-dump.txt). */
int gm_gen_write_arch_kv(gm_ggufw *w, const gm_gen_hparams *hp, gm_err *err)
{
    kvw k = {w, gm_gen_arch_name(hp->arch), err, 0};
    bool mla = gm_gen_mla(hp);
    /* feed_forward_length: the dense FFN where the model has one, else the expert FFN. */
    uint32_t ff = hp->n_ff ? hp->n_ff : hp->n_ff_exp;
    kv_u32(&k, "block_count", hp->n_layer);
    kv_u32(&k, "context_length", hp->n_ctx);
    kv_u32(&k, "embedding_length", hp->n_embd);
    kv_u32(&k, "feed_forward_length", ff);
    kv_u32(&k, "attention.head_count", hp->n_head);
    if (hp->arch == GM_GEN_KIMI_K3) { /* 0 marks a KDA block */
        uint32_t kv[512];
        for (uint32_t l = 0; l < hp->n_layer && l < 512; l++)
            kv[l] = gm_gen_kda(hp, l) ? 0 : hp->n_head_kv;
        char key[128];
        if (!k.rc)
            k.rc = gm_ggufw_set_arr(k.w, akey(&k, "attention.head_count_kv", key, sizeof key), GM_GGUF_U32, kv,
                                    hp->n_layer < 512 ? hp->n_layer : 512, k.err);
    } else {
        kv_u32(&k, "attention.head_count_kv", hp->n_head_kv);
    }
    if (hp->yarn_factor > 0) {
        kv_str(&k, "rope.scaling.type", "yarn");
        kv_f32(&k, "rope.scaling.factor", hp->yarn_factor);
        kv_u32(&k, "rope.scaling.original_context_length", hp->yarn_orig_ctx);
        if (hp->yarn_log_mul > 0)
            kv_f32(&k, "rope.scaling.yarn_log_multiplier", hp->yarn_log_mul);
        if (hp->yarn_beta_fast > 0) {
            kv_f32(&k, "rope.scaling.yarn_beta_fast", hp->yarn_beta_fast);
            kv_f32(&k, "rope.scaling.yarn_beta_slow", hp->yarn_beta_slow);
        }
    }
    kv_f32(&k, "rope.freq_base", hp->rope_base);
    kv_f32(&k, "attention.layer_norm_rms_epsilon", hp->eps);
    kv_u32(&k, "expert_count", hp->n_expert);
    kv_u32(&k, "expert_used_count", hp->n_expert_used);
    if (hp->n_group) {
        kv_u32(&k, "expert_group_count", hp->n_group);
        kv_u32(&k, "expert_group_used_count", hp->n_group_used);
    }
    if (hp->gating_func && hp->arch != GM_GEN_GLM4MOE)
        kv_u32(&k, "expert_gating_func", hp->gating_func);
    kv_u32(&k, "attention.key_length", hp->head_dim_k);
    kv_u32(&k, "attention.value_length", hp->head_dim_v);
    if (hp->sliding_window)
        kv_u32(&k, "attention.sliding_window", hp->sliding_window);
    if (mla) {
        kv_u32(&k, "leading_dense_block_count", hp->n_dense_lead);
        kv_u32(&k, "vocab_size", hp->n_vocab);
        if (hp->q_lora_rank)
            kv_u32(&k, "attention.q_lora_rank", hp->q_lora_rank);
        kv_u32(&k, "attention.kv_lora_rank", hp->kv_lora_rank);
        kv_u32(&k, "attention.key_length_mla", hp->qk_nope + hp->qk_rope);
        kv_u32(&k, "attention.value_length_mla", hp->v_head_mla);
    }
    if (hp->arch == GM_GEN_LLAMA)
        kv_u32(&k, "vocab_size", hp->n_vocab);
    if (hp->rope_dim && hp->arch == GM_GEN_GLM4MOE)
        kv_u32(&k, "rope.dimension_count", hp->rope_dim);
    if (hp->arch != GM_GEN_LLAMA)
        kv_u32(&k, "expert_feed_forward_length", hp->n_ff_exp);
    if ((hp->n_expert_shared || mla || hp->arch == GM_GEN_GLM4MOE) && !gm_gen_hybrid(hp) &&
        hp->arch != GM_GEN_ERNIE45MOE && hp->arch != GM_GEN_HYV3 && hp->arch != GM_GEN_HUNYUANMOE)
        kv_u32(&k, "expert_shared_count", hp->n_expert_shared);
    if (gm_gen_hybrid(hp)) {
        kv_u32(&k, "expert_shared_feed_forward_length", hp->n_ff_exp * hp->n_expert_shared);
        kv_u32(&k, "ssm.conv_kernel", hp->ssm_conv);
        kv_u32(&k, "ssm.state_size", hp->ssm_dk);
        kv_u32(&k, "ssm.group_count", hp->ssm_nk);
        kv_u32(&k, "ssm.time_step_rank", hp->ssm_nv);
        kv_u32(&k, "ssm.inner_size", hp->ssm_nv * hp->ssm_dv);
        kv_u32(&k, "full_attention_interval", hp->full_attn_interval);
    }
    if (hp->arch == GM_GEN_GLM4MOE) {
        kv_u32(&k, "leading_dense_block_count", hp->n_dense_lead);
        kv_u32(&k, "expert_gating_func", hp->gating_func);
    }
    if ((hp->arch == GM_GEN_HYV3 || hp->arch == GM_GEN_HUNYUANMOE) && hp->n_expert_shared)
        kv_u32(&k, "expert_shared_feed_forward_length", hp->n_ff_exp * hp->n_expert_shared);
    if (hp->arch == GM_GEN_ERNIE45MOE) {
        /* every block from the first MoE one on is MoE (the converter's moe_layer_interval 1) */
        kv_u32(&k, "interleave_moe_layer_step", 1);
        kv_u32(&k, "leading_dense_block_count", hp->n_dense_lead);
        if (hp->n_expert_shared)
            kv_u32(&k, "expert_shared_feed_forward_length", hp->n_ff_exp * hp->n_expert_shared);
    }
    if (hp->weights_scale > 0)
        kv_f32(&k, "expert_weights_scale", hp->weights_scale);
    if (hp->arch == GM_GEN_MINIMAX_M3) {
        kv_u32(&k, "leading_dense_block_count", hp->n_dense_lead);
        kv_u32(&k, "attention.indexer.head_count", hp->idx_heads);
        kv_u32(&k, "attention.indexer.key_length", hp->idx_dim);
        kv_u32(&k, "attention.indexer.top_k", hp->idx_topk);
        kv_u32(&k, "attention.indexer.block_size", hp->idx_block);
        kv_u32(&k, "attention.indexer.local_blocks", hp->idx_local);
    }
    if (hp->gating_func && hp->arch != GM_GEN_MINIMAX_M2)
        kv_bool(&k, "expert_weights_norm", hp->weights_norm);
    if (hp->arch == GM_GEN_GLM4MOE)
        kv_u32(&k, "nextn_predict_layers", 0);
    if (mla)
        kv_u32(&k, "rope.dimension_count", hp->qk_rope);
    else if (hp->rope_dim && hp->arch != GM_GEN_GLM4MOE)
        kv_u32(&k, "rope.dimension_count", hp->rope_dim);
    if (hp->arch == GM_GEN_QWEN35MOE || hp->arch == GM_GEN_QWEN4EXP) {
        /* multi-axis RoPE: the rotated pairs' split among time, height and width, in the
         * proportions of Qwen3.5's [11, 11, 10] of 32 (text gives every axis the position) */
        int32_t pairs = (int32_t)(hp->rope_dim / 2), a = (pairs * 11 + 31) / 32;
        const int32_t sec[4] = {a, a, pairs - 2 * a, 0};
        kv_i32s(&k, "rope.dimension_sections", sec, 4);
    }
    if (hp->arch == GM_GEN_QWEN4EXP)
        write_qwen4exp_kv(&k, hp);
    if (hp->arch == GM_GEN_KIMI_K3) {
        kv_u32(&k, "ssm.conv_kernel", hp->ssm_conv);
        kv_u32(&k, "kda.head_dim", hp->kda_head_dim);
        kv_f32(&k, "kda.gate_lower_bound", hp->kda_lb);
        if (hp->latent)
            kv_u32(&k, "expert_latent_length", hp->latent);
        kv_f32(&k, "activation.situ_beta", hp->situ_beta);
        kv_f32(&k, "activation.situ_linear_beta", hp->situ_linear_beta);
        kv_u32(&k, "attn_res.block_size", hp->res_block);
    }
    if (hp->arch == GM_GEN_HYV4) {
        if (hp->swiglu_limit > 0) {
            float lim[512];
            for (uint32_t l = 0; l < hp->n_layer && l < 512; l++)
                lim[l] = hp->swiglu_limit;
            char key[128];
            if (!k.rc)
                k.rc = gm_ggufw_set_arr(k.w, akey(&k, "swiglu_clamp_exp", key, sizeof key), GM_GGUF_F32, lim,
                                        hp->n_layer < 512 ? hp->n_layer : 512, k.err);
        }
        kv_u32(&k, "hyper_connection.count", hp->hc_count);
        kv_f32(&k, "hyper_connection.epsilon", hp->hc_eps);
        kv_f32(&k, "hyper_connection.magnitude", hp->hc_magnitude);
    }
    if (hp->arch == GM_GEN_DEEPSEEK4)
        write_dsv4_kv(&k, hp);
    if (hp->arch == GM_GEN_GLM_DSA || (hp->arch == GM_GEN_HYV4 && hp->idx_topk)) {
        kv_u32(&k, "attention.indexer.head_count", hp->idx_heads);
        kv_u32(&k, "attention.indexer.key_length", hp->idx_dim);
        kv_u32(&k, "attention.indexer.top_k", hp->idx_topk);
        if (hp->idx_shared_every) {
            uint8_t types[512];
            for (uint32_t l = 0; l < hp->n_layer && l < 512; l++)
                types[l] = gm_gen_indexer_full(hp, l);
            char key[128];
            if (!k.rc)
                k.rc = gm_ggufw_set_arr(k.w, akey(&k, "attention.indexer.types", key, sizeof key), GM_GGUF_BOOL,
                                        types, hp->n_layer, k.err);
        }
    }
    return k.rc;
}
