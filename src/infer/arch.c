/* The families the forward pass runs and what differs between them. Each entry is what the
 * family's reference implementation does; see docs/ARCHITECTURE.md. */
#include <string.h>

#include "infer/internal.h"

/* Routing as the file states it (expert_gating_func, expert_weights_norm, expert_weights_scale),
 * the family's defaults where it does not. */
static void routing_from_file(const gm_hparams *hp, gm_gating dflt, bool norm_dflt, gm_arch_ops *ops)
{
    ops->gating = hp->expert_gating_func == 1   ? GM_GATING_SOFTMAX
                  : hp->expert_gating_func == 2 ? GM_GATING_SIGMOID
                                                : dflt;
    ops->norm_topk = hp->has_expert_weights_norm ? hp->expert_weights_norm : norm_dflt;
    ops->expert_scale = hp->expert_weights_scale > 0.0f ? hp->expert_weights_scale : 1.0f;
}

bool gm_arch_ops_for(const char *arch, const gm_hparams *hp, gm_arch_ops *ops)
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
    if (strcmp(arch, "glm4moe") == 0) {
        /* q/k/v biases, per-head q/k RMSNorm; NeoX RoPE on the first rope.dimension_count dims
         * of each head; sigmoid router whose selection adds exp_probs_b, the chosen scores
         * renormalised and scaled by expert_weights_scale; an ungated shared expert; leading
         * dense layers (all of which the shared layer loop reads from the file). */
        ops->rope = GM_ROPE_NEOX;
        routing_from_file(hp, GM_GATING_SIGMOID, true, ops);
        return true;
    }
    if (strcmp(arch, "deepseek2") == 0) {
        /* multi-head latent attention (mla.c) with adjacent-pair RoPE on its rotated part;
         * DeepSeek-V3 / Kimi-K2: sigmoid router with exp_probs_b for selection, groups, the
         * chosen scores renormalised and scaled; DeepSeek-V2: softmax, as the file states. A
         * shared expert and leading dense layers. */
        ops->rope = GM_ROPE_NORM;
        routing_from_file(hp, GM_GATING_SOFTMAX, false, ops);
        return true;
    }
    if (strcmp(arch, "gpt-oss") == 0) {
        /* biases everywhere, attention sinks, sliding-window attention on even layers, NeoX
         * RoPE with YaRN (ramp ends not rounded, as its reference configures it); softmax over
         * the top-k router logits (= renormalised top-k of the softmax); clamped SwiGLU. */
        ops->rope = GM_ROPE_NEOX;
        ops->gating = GM_GATING_SOFTMAX;
        ops->norm_topk = true;
        ops->swiglu_clamped = true;
        ops->yarn_no_truncate = true;
        return true;
    }
    if (strcmp(arch, "qwen3next") == 0 || strcmp(arch, "qwen35moe") == 0) {
        /* Qwen3-Next: Gated DeltaNet layers (delta.c) between full-attention ones whose query
         * projection carries a sigmoid output gate per head; per-head q/k RMSNorm (the
         * converter folded the reference's 1 + w into the weights), NeoX RoPE on the first
         * rope.dimension_count dims; softmax router, top-k renormalised; a shared expert scaled
         * by sigmoid(ffn_gate_inp_shexp . x). */
        ops->rope = GM_ROPE_NEOX;
        routing_from_file(hp, GM_GATING_SOFTMAX, true, ops);
        ops->shared_expert_gate = true;
        ops->attn_out_gate = true;
        /* Qwen3.5 MoE: the same blocks; its converter writes beta and alpha as two tensors and
         * the value heads in tiled order. Its multi-axis RoPE sections give every axis the
         * token's position for text, which is the NeoX rotation above. */
        ops->dn_tiled = strcmp(arch, "qwen35moe") == 0;
        return true;
    }
    if (strcmp(arch, "ernie4_5-moe") == 0) {
        /* adjacent-pair RoPE; softmax router whose selection adds exp_probs_b, the chosen
         * probabilities renormalised (its reference fixes both, whatever the file says);
         * ungated shared experts; leading dense blocks */
        ops->rope = GM_ROPE_NORM;
        ops->gating = GM_GATING_SOFTMAX;
        ops->norm_topk = true;
        return true;
    }
    if (strcmp(arch, "hunyuan-moe") == 0) {
        /* Hunyuan-A13B: per-head q/k RMSNorm on the rotated q/k (after NeoX RoPE); softmax
         * router, top-k renormalised; an ungated shared expert in every block */
        ops->rope = GM_ROPE_NEOX;
        ops->gating = GM_GATING_SOFTMAX;
        ops->norm_topk = true;
        ops->qk_norm_after_rope = true;
        return true;
    }
    if (strcmp(arch, "hy_v3") == 0) {
        /* Hy3: per-head q/k RMSNorm before NeoX RoPE, an optional output bias; sigmoid router
         * whose selection adds exp_probs_b, the chosen scores renormalised (expert_weights_norm)
         * and scaled (expert_weights_scale) as the file states; an ungated shared expert; dense
         * blocks where a block has no router; MTP blocks are not run */
        ops->rope = GM_ROPE_NEOX;
        routing_from_file(hp, GM_GATING_SIGMOID, false, ops);
        return true;
    }
    if (strcmp(arch, "minimax-m2") == 0) {
        /* q/k RMSNorm over all heads of a token jointly; NeoX RoPE on the first
         * rope.dimension_count dims; sigmoid router with exp_probs_b for selection, the chosen
         * scores renormalised. */
        ops->rope = GM_ROPE_NEOX;
        ops->qk_norm_joint = true;
        routing_from_file(hp, GM_GATING_SIGMOID, true, ops);
        return true;
    }
    return false;
}
