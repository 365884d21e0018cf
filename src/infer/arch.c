/* The families the forward pass runs and what differs between them. Each entry is what the
 * family's reference implementation does; see docs/ARCHITECTURE.md. */
#include <string.h>

#include "infer/internal.h"

bool gm_arch_ops_for(const char *arch, gm_arch_ops *ops)
{
    memset(ops, 0, sizeof *ops);
    ops->name = arch;
    ops->expert_scale = 1.0f;
    if (strcmp(arch, "qwen3moe") == 0) {
        /* q/k RMSNorm per head before RoPE; NeoX RoPE; softmax router, top-k renormalised. */
        ops->rope = GM_ROPE_NEOX;
        ops->gating = GM_GATING_SOFTMAX;
        ops->norm_topk = true;
        return true;
    }
    if (strcmp(arch, "qwen2moe") == 0) {
        /* q/k/v biases; NeoX RoPE; softmax top-k without renormalisation; a shared expert
         * scaled by sigmoid(ffn_gate_inp_shexp . x). */
        ops->rope = GM_ROPE_NEOX;
        ops->gating = GM_GATING_SOFTMAX;
        ops->norm_topk = false;
        ops->shared_expert_gate = true;
        return true;
    }
    if (strcmp(arch, "llama") == 0) {
        /* Mixtral: the converter permuted Q/K so that adjacent-pair RoPE reproduces the
         * reference; softmax over the top-k logits (= renormalised top-k). */
        ops->rope = GM_ROPE_NORM;
        ops->gating = GM_GATING_SOFTMAX;
        ops->norm_topk = true;
        return true;
    }
    return false;
}
