#include "gen.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "base/checked.h"
#include "blocks.h"
#include "gguf/gguf.h"
#include "gguf/types.h"
#include "ggufw.h"
#include "model.h"

#define POOL_MAX_BYTES ((size_t)4 << 20) /* per (type, std): a few MB of distinct blocks */
#define POOL_MIN_BYTES ((size_t)64 << 10)
#define MAX_POOLS 16
#define MAX_DIM (1u << 20)
#define MAX_EXPERTS 4096u
#define MAX_LAYERS 1024u
#define MIN_SYNTH_VOCAB 260u /* 256 byte tokens + specials */

/* ---- options ------------------------------------------------------------------------------- */

void gm_gen_opts_init(gm_gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_dense_lead = -1;
    o->n_expert_shared = -1;
    o->expert_type = -1;
    o->dense_type = -1;
    o->qsa_ratio = -1;
    o->seed = 1;
}

const char *gm_gen_usage(void)
{
    return "usage: gmlx-gen (--preset NAME | --arch ARCH) -o OUT.gguf [options]\n"
           "\n"
           "Writes a GGUF file of a real mixture-of-experts shape with random weights: the\n"
           "tensor names, shapes and metadata of llama.cpp's converter, zero-mean weights of\n"
           "std 1/sqrt(fan_in), distinct experts. For plan tests (--sparse: the tensor data is\n"
           "a hole, a 600 GB file costs nothing) and streaming benchmarks (files larger than RAM,\n"
           "written at disk speed in constant memory).\n"
           "\n"
           "model:\n"
           "  --preset NAME         a real model shape (--list-presets)\n"
           "  --arch ARCH           a tiny model of ARCH: qwen3moe, deepseek2, gpt-oss, glm4moe,\n"
           "                        llama (Mixtral), minimax-m2, qwen3next, qwen35moe, ernie4_5-moe,\n"
           "                        hy_v3, hunyuan-moe, glm-dsa, minimax-m3, hy_v4,\n"
           "                        kimi-k3, qwen4exp, deepseek4 (same as --preset tiny-ARCH)\n"
           "  --layers N            number of blocks (leading dense blocks are kept, at most N-1)\n"
           "  --experts N           routed experts per MoE block\n"
           "  --experts-used N      experts per token (top-k)\n"
           "  --shared-experts N    shared experts (deepseek2, glm-dsa, hy_v4, minimax-m3, glm4moe, qwen3next, qwen35moe,\n"
           "                        qwen4exp, ernie4_5-moe, hy_v3, hunyuan-moe)\n"
           "  --dense-layers N      leading blocks with a dense FFN\n"
           "  --hidden N            hidden size (embedding_length)\n"
           "  --ffn N               dense FFN size\n"
           "  --expert-ffn N        routed expert FFN size\n"
           "  --expert-latent N     kimi-k3: the routed experts' (latent) width\n"
           "  --yarn F[:M]          YaRN RoPE scaling by F over context/F positions, with\n"
           "                        rope.scaling.yarn_log_multiplier M when given\n"
           "  --heads N, --kv-heads N, --head-dim N\n"
           "  --q-lora N, --kv-lora N   MLA ranks (deepseek2, glm-dsa, hy_v4, kimi-k3; deepseek4:\n"
           "                        --q-lora only)\n"
           "  --vocab N             vocabulary size (synthetic tokenizer)\n"
           "  --context N           context_length\n"
           "  --ssm-in              qwen3next: write the Gated DeltaNet input projection as one\n"
           "                        ssm_in tensor grouped per key head (older converters), with\n"
           "                        the rows attn_qkv and attn_gate get from the same seed\n"
           "  --no-ple              qwen4exp: no n-gram hash embedding (no ple.* keys, no table)\n"
           "  --compress-ratio N    qwen4exp: block-sparse attention (QSA) over blocks of N\n"
           "                        positions in the full-attention blocks; 0: dense attention;\n"
           "                        deepseek4: N > 0 compresses the keys of blocks 2.. (4 and 128\n"
           "                        alternating), 0: every block raw\n"
           "\n"
           "weights:\n"
           "  --expert-type T       routed experts (and qwen4exp's n-gram table): Q4_K (default;\n"
           "                        MXFP4 for gpt-oss), Q2_K, Q5_K, Q6_K, Q8_0, Q4_0, MXFP4,\n"
           "                        IQ2_XXS, F16, BF16\n"
           "  --dense-type T        every-token matrices, embeddings, output: Q8_0 (default),\n"
           "                        F16, BF16, F32, Q4_K, Q6_K, ... (norms and routers are F32)\n"
           "  --skew S              router skew: expert rows scaled by a Zipf factor\n"
           "                        (rank+1)^-S so that some experts are popular (0: none;\n"
           "                        0.5 to 1 looks like trained models)\n"
           "  --embd-std X          std of the token embedding values (default sqrt(layers), so\n"
           "                        each token keeps its own routing in the deeper layers)\n"
           "  --seed N              seed (same options and seed: same file)\n"
           "  --tokenizer-from F    copy every tokenizer.* key of GGUF file F (vocab follows it);\n"
           "                        without it a small synthetic byte-level vocab is written\n"
           "\n"
           "output:\n"
           "  -o, --output PATH     file to write (written as PATH.tmp, renamed when complete)\n"
           "  --sparse              write the header only; the tensor data is a hole\n"
           "  --direct              write with O_DIRECT (default: buffered writes whose pages\n"
           "                        are dropped as they reach the disk; both leave the page\n"
           "                        cache as it was)\n"
           "  --dry-run             print the shape and sizes, write nothing\n"
           "  -q, --quiet           no progress on stderr\n"
           "  --list-presets        list the presets\n"
           "  -h, --help            this text\n";
}

static int parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out,
                     gm_err *err)
{
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        return gm_err_set(err, GM_EINVAL, "%s: expected a number, got '%s'", flag, s ? s : "");
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno == ERANGE)
        return gm_err_set(err, GM_EINVAL, "%s: expected a number, got '%s'", flag, s);
    if (v < lo || v > hi)
        return gm_err_set(err, GM_EINVAL, "%s: %llu is out of range %llu..%llu", flag, v,
                          (unsigned long long)lo, (unsigned long long)hi);
    *out = v;
    return 0;
}

static int parse_u32(const char *flag, const char *s, uint32_t lo, uint32_t hi, uint32_t *out,
                     gm_err *err)
{
    uint64_t v;
    int rc = parse_u64(flag, s, lo, hi, &v, err);
    if (!rc)
        *out = (uint32_t)v;
    return rc;
}

static int parse_type(const char *flag, const char *s, int32_t *out, gm_err *err)
{
    int t = gm_type_from_name(s);
    if (t < 0)
        return gm_err_set(err, GM_EINVAL, "%s: unknown tensor type '%s' (supported: %s)", flag, s,
                          gm_gen_supported_types());
    if (!gm_gen_type_supported((uint32_t)t))
        return gm_err_set(err, GM_EINVAL, "%s: the generator cannot write %s (supported: %s)",
                          flag, gm_type_name((uint32_t)t), gm_gen_supported_types());
    *out = t;
    return 0;
}

int gm_gen_parse_args(gm_gen_opts *o, int argc, char *const *argv, gm_err *err)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        /* Flags without a value. */
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return GM_GEN_ARGS_HELP;
        if (!strcmp(a, "--list-presets"))
            return GM_GEN_ARGS_LIST;
        if (!strcmp(a, "--sparse")) {
            o->sparse = true;
            continue;
        }
        if (!strcmp(a, "--ssm-in")) {
            o->ssm_in = true;
            continue;
        }
        if (!strcmp(a, "--no-ple")) {
            o->no_ple = true;
            continue;
        }
        if (!strcmp(a, "--direct")) {
            o->direct = true;
            continue;
        }
        if (!strcmp(a, "--dry-run")) {
            o->dry_run = true;
            continue;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o->quiet = true;
            continue;
        }
        /* Flags with a value. */
        static const char *const with_value[] = {
            "--preset", "--arch", "-o", "--output", "--layers", "--experts", "--experts-used",
            "--shared-experts", "--dense-layers", "--hidden", "--ffn", "--expert-ffn", "--expert-latent", "--yarn", "--heads",
            "--kv-heads", "--head-dim", "--q-lora", "--kv-lora", "--vocab", "--context",
            "--expert-type", "--dense-type", "--skew", "--embd-std", "--seed", "--tokenizer-from",
            "--compress-ratio", NULL};
        bool known = false;
        for (int k = 0; with_value[k]; k++)
            known |= strcmp(a, with_value[k]) == 0;
        if (!known) {
            if (a[0] == '-')
                return gm_err_set(err, GM_EINVAL, "unknown option '%s' (see --help)", a);
            return gm_err_set(err, GM_EINVAL, "unexpected argument '%s' (see --help)", a);
        }
        /* A missing value shows up as the next flag taken for it. */
        if (!v || (v[0] == '-' && (v[1] == '-' || ((v[1] == 'o' || v[1] == 'q' || v[1] == 'h') &&
                                                   v[2] == '\0'))))
            return gm_err_set(err, GM_EINVAL, "%s needs a value", a);
        i++;
        int rc = 0;
        uint32_t u = 0;
        if (!strcmp(a, "--preset")) {
            if (!gm_gen_preset_find(v))
                return gm_err_set(err, GM_EINVAL, "--preset: unknown preset '%s' (see --list-presets)",
                                  v);
            o->preset = v;
        } else if (!strcmp(a, "--arch")) {
            char name[64];
            snprintf(name, sizeof name, "tiny-%s", v);
            const gm_gen_hparams *p = strlen(v) < 40 ? gm_gen_preset_find(name) : NULL;
            if (!p)
                return gm_err_set(err, GM_EINVAL,
                                  "--arch: unknown architecture '%s' (qwen3moe, deepseek2, "
                                  "gpt-oss, glm4moe, llama, minimax-m2, qwen3next, qwen35moe, "
                                  "ernie4_5-moe, hy_v3, hunyuan-moe, glm-dsa, minimax-m3, hy_v4, kimi-k3, "
                                  "qwen4exp, deepseek4)", v);
            o->preset = p->preset; /* the preset table's own string */
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!*v)
                return gm_err_set(err, GM_EINVAL, "%s: empty path", a);
            o->output = v;
        } else if (!strcmp(a, "--layers")) {
            rc = parse_u32(a, v, 1, MAX_LAYERS, &o->n_layer, err);
        } else if (!strcmp(a, "--experts")) {
            rc = parse_u32(a, v, 1, MAX_EXPERTS, &o->n_expert, err);
        } else if (!strcmp(a, "--experts-used")) {
            rc = parse_u32(a, v, 1, MAX_EXPERTS, &o->n_expert_used, err);
        } else if (!strcmp(a, "--shared-experts")) {
            rc = parse_u32(a, v, 0, 64, &u, err);
            o->n_expert_shared = (int32_t)u;
        } else if (!strcmp(a, "--dense-layers")) {
            rc = parse_u32(a, v, 0, MAX_LAYERS, &u, err);
            o->n_dense_lead = (int32_t)u;
        } else if (!strcmp(a, "--hidden")) {
            rc = parse_u32(a, v, 32, MAX_DIM, &o->n_embd, err);
        } else if (!strcmp(a, "--ffn")) {
            rc = parse_u32(a, v, 32, MAX_DIM, &o->n_ff, err);
        } else if (!strcmp(a, "--expert-ffn")) {
            rc = parse_u32(a, v, 32, MAX_DIM, &o->n_ff_exp, err);
        } else if (!strcmp(a, "--expert-latent")) {
            rc = parse_u32(a, v, 32, MAX_DIM, &o->latent, err);
        } else if (!strcmp(a, "--yarn")) {
            char *end = NULL;
            o->yarn = strtod(v, &end);
            o->yarn_log_mul = end && *end == ':' ? strtod(end + 1, &end) : 0.0;
            if (!end || *end || !(o->yarn > 1.0 && o->yarn <= 1024.0) || !(o->yarn_log_mul >= 0.0 && o->yarn_log_mul < 10.0))
                rc = gm_err_set(err, GM_EINVAL, "--yarn: '%s' is not FACTOR[:LOG_MUL] (factor 1-1024)", v);
        } else if (!strcmp(a, "--heads")) {
            rc = parse_u32(a, v, 1, 4096, &o->n_head, err);
        } else if (!strcmp(a, "--kv-heads")) {
            rc = parse_u32(a, v, 1, 4096, &o->n_head_kv, err);
        } else if (!strcmp(a, "--head-dim")) {
            rc = parse_u32(a, v, 8, 4096, &o->head_dim, err);
        } else if (!strcmp(a, "--q-lora")) {
            rc = parse_u32(a, v, 32, MAX_DIM, &o->q_lora_rank, err);
        } else if (!strcmp(a, "--kv-lora")) {
            rc = parse_u32(a, v, 32, MAX_DIM, &o->kv_lora_rank, err);
        } else if (!strcmp(a, "--vocab")) {
            rc = parse_u32(a, v, MIN_SYNTH_VOCAB, 1u << 24, &o->n_vocab, err);
        } else if (!strcmp(a, "--context")) {
            rc = parse_u32(a, v, 16, 1u << 30, &o->n_ctx, err);
        } else if (!strcmp(a, "--compress-ratio")) {
            /* llama.cpp keeps a block's members in a 64-bit mask */
            rc = parse_u32(a, v, 0, 64, &u, err);
            o->qsa_ratio = (int32_t)u;
        } else if (!strcmp(a, "--expert-type")) {
            rc = parse_type(a, v, &o->expert_type, err);
        } else if (!strcmp(a, "--dense-type")) {
            rc = parse_type(a, v, &o->dense_type, err);
        } else if (!strcmp(a, "--skew")) {
            char *end;
            errno = 0;
            double s = strtod(v, &end);
            if (!*v || *end || errno || !(s >= 0.0 && s <= 8.0))
                return gm_err_set(err, GM_EINVAL, "--skew: expected a number in 0..8, got '%s'",
                                  v);
            o->skew = s;
        } else if (!strcmp(a, "--embd-std")) {
            char *end;
            errno = 0;
            double x = strtod(v, &end);
            if (!*v || *end || errno || !(x > 0.0 && x <= 100.0))
                return gm_err_set(err, GM_EINVAL, "--embd-std: expected a number in (0, 100], got '%s'", v);
            o->embd_std = x;
        } else if (!strcmp(a, "--seed")) {
            rc = parse_u64(a, v, 0, UINT64_MAX, &o->seed, err);
        } else if (!strcmp(a, "--tokenizer-from")) {
            if (!*v)
                return gm_err_set(err, GM_EINVAL, "%s: empty path", a);
            o->tokenizer_from = v;
        }
        if (rc)
            return rc;
    }
    if (!o->preset)
        return gm_err_set(err, GM_EINVAL, "no model given: use --preset NAME or --arch ARCH");
    if (!o->output && !o->dry_run)
        return gm_err_set(err, GM_EINVAL, "no output file given: use -o PATH");
    return GM_GEN_ARGS_RUN;
}

/* ---- resolving the shape ------------------------------------------------------------------- */

int gm_gen_resolve(const gm_gen_opts *o, gm_gen_hparams *hp, gm_err *err)
{
    const gm_gen_hparams *base = o->preset ? gm_gen_preset_find(o->preset) : NULL;
    if (!base)
        return gm_err_set(err, GM_EINVAL, "unknown preset '%s'", o->preset ? o->preset : "(none)");
    *hp = *base;
    bool mla = gm_gen_mla(hp);

    if (o->n_layer) {
        hp->n_layer = o->n_layer;
        if (hp->n_dense_lead >= hp->n_layer)
            hp->n_dense_lead = hp->n_layer - 1;
    }
    if (o->n_dense_lead >= 0) {
        if (!mla && hp->arch != GM_GEN_GLM4MOE && hp->arch != GM_GEN_ERNIE45MOE &&
            hp->arch != GM_GEN_HYV3 && hp->arch != GM_GEN_MINIMAX_M3 && o->n_dense_lead > 0)
            return gm_err_set(err, GM_EINVAL, "--dense-layers: %s has no dense blocks",
                              gm_gen_arch_name(hp->arch));
        hp->n_dense_lead = (uint32_t)o->n_dense_lead;
    }
    if (hp->n_dense_lead >= hp->n_layer)
        return gm_err_set(err, GM_EINVAL,
                          "%u leading dense blocks leave no MoE block among %u blocks",
                          hp->n_dense_lead, hp->n_layer);
    if (hp->arch == GM_GEN_DEEPSEEK2 && hp->n_layer == 27)
        return gm_err_set(err, GM_EINVAL,
                          "--layers 27: llama.cpp takes a 27-block deepseek2 file for "
                          "DeepSeek-V2-Lite (no query LoRA) and would refuse this one; use "
                          "another count");
    if (o->n_expert) {
        hp->n_expert = o->n_expert;
        if (hp->n_expert_used > hp->n_expert)
            hp->n_expert_used = hp->n_expert;
    }
    if (o->n_expert_used)
        hp->n_expert_used = o->n_expert_used;
    if (hp->n_expert_used > hp->n_expert)
        return gm_err_set(err, GM_EINVAL, "--experts-used %u is more than the %u experts",
                          hp->n_expert_used, hp->n_expert);
    if (o->n_expert_shared >= 0) {
        if (!mla && hp->arch != GM_GEN_GLM4MOE &&
            hp->arch != GM_GEN_ERNIE45MOE && hp->arch != GM_GEN_HYV3 &&
            hp->arch != GM_GEN_HUNYUANMOE && hp->arch != GM_GEN_MINIMAX_M3 && hp->arch != GM_GEN_DEEPSEEK4 &&
            !gm_gen_hybrid(hp) &&
            o->n_expert_shared > 0)
            return gm_err_set(err, GM_EINVAL, "--shared-experts: %s has no shared experts",
                              gm_gen_arch_name(hp->arch));
        hp->n_expert_shared = (uint32_t)o->n_expert_shared;
    }
    /* Expert groups must split the experts evenly and hold the top-k. */
    if (hp->n_group > 1 && (hp->n_expert % hp->n_group != 0 ||
                            hp->n_expert_used > hp->n_group_used * (hp->n_expert / hp->n_group))) {
        hp->n_group = 1;
        hp->n_group_used = 1;
    }
    if (o->n_embd)
        hp->n_embd = o->n_embd;
    if (o->n_ff) {
        if (!hp->n_ff)
            return gm_err_set(err, GM_EINVAL, "--ffn: %s has no dense FFN (use --expert-ffn)",
                              gm_gen_arch_name(hp->arch));
        hp->n_ff = o->n_ff;
    }
    if (o->n_ff_exp)
        hp->n_ff_exp = o->n_ff_exp;
    if (o->yarn > 0) {
        hp->yarn_factor = (float)o->yarn;
        hp->yarn_log_mul = (float)o->yarn_log_mul;
        hp->yarn_orig_ctx = (uint32_t)(hp->n_ctx / o->yarn) > 16 ? (uint32_t)(hp->n_ctx / o->yarn) : 16;
    }
    if (o->latent) {
        if (hp->arch != GM_GEN_KIMI_K3)
            return gm_err_set(err, GM_EINVAL, "--expert-latent: %s has no latent experts", gm_gen_arch_name(hp->arch));
        hp->latent = o->latent;
    }
    if (o->n_head)
        hp->n_head = o->n_head;
    if (mla) {
        if (o->n_head_kv || o->head_dim)
            return gm_err_set(err, GM_EINVAL,
                              "--kv-heads/--head-dim do not apply to %s (MLA: use "
                              "--q-lora/--kv-lora)", gm_gen_arch_name(hp->arch));
        if (o->q_lora_rank)
            hp->q_lora_rank = o->q_lora_rank;
        if (o->kv_lora_rank)
            hp->kv_lora_rank = o->kv_lora_rank;
        /* MLA as the converter writes it: one latent KV "head" of kv_lora + rope dims. */
        hp->n_head_kv = 1;
        hp->head_dim_k = hp->kv_lora_rank + hp->qk_rope;
        hp->head_dim_v = hp->kv_lora_rank;
    } else {
        if (hp->arch == GM_GEN_DEEPSEEK4 && o->q_lora_rank && !o->kv_lora_rank) {
            hp->q_lora_rank = o->q_lora_rank;
        } else if (o->q_lora_rank || o->kv_lora_rank) {
            return gm_err_set(err, GM_EINVAL, "--q-lora/--kv-lora apply to the MLA families (deepseek2, glm-dsa, hy_v4, "
                              "kimi-k3; deepseek4 --q-lora) only");
        }
        if (o->n_head_kv)
            hp->n_head_kv = o->n_head_kv;
        if (o->head_dim) {
            hp->head_dim_k = hp->head_dim_v = o->head_dim;
            if (hp->rope_dim > o->head_dim)
                hp->rope_dim = o->head_dim;
            if (hp->arch == GM_GEN_LLAMA)
                hp->rope_dim = o->head_dim;
        }
        if (hp->n_head % hp->n_head_kv != 0)
            return gm_err_set(err, GM_EINVAL, "%u heads are not a multiple of %u KV heads",
                              hp->n_head, hp->n_head_kv);
        /* MiniMax sparse attention: an indexer head per kv head */
        if (hp->arch == GM_GEN_MINIMAX_M3)
            hp->idx_heads = hp->n_head_kv;
    }
    if (o->ssm_in && hp->arch != GM_GEN_QWEN3NEXT)
        return gm_err_set(err, GM_EINVAL, "--ssm-in applies to qwen3next only");
    hp->ssm_in_fused = o->ssm_in;
    if (o->n_vocab)
        hp->n_vocab = o->n_vocab;
    if (o->n_ctx)
        hp->n_ctx = o->n_ctx;
    if ((o->no_ple && hp->arch != GM_GEN_QWEN4EXP) ||
        (o->qsa_ratio >= 0 && hp->arch != GM_GEN_QWEN4EXP && hp->arch != GM_GEN_DEEPSEEK4))
        return gm_err_set(err, GM_EINVAL, "--no-ple and --compress-ratio apply to qwen4exp only (--compress-ratio "
                          "also to deepseek4)");
    if (hp->arch == GM_GEN_DEEPSEEK4) {
        if (o->qsa_ratio >= 0)
            hp->qsa_ratio = (uint32_t)o->qsa_ratio;
        /* what llama.cpp's loader requires: heads in whole output groups, the rotated dims within
         * a head, a shared expert (its tensors are not optional) */
        if (!hp->o_groups || hp->n_head % hp->o_groups != 0 || hp->rope_dim > hp->head_dim_k ||
            hp->n_expert_shared < 1 || hp->n_hash >= hp->n_layer || hp->n_head_kv != 1)
            return gm_err_set(err, GM_EINVAL,
                              "deepseek4: %u heads in %u output groups, %u rotated dims of %u, %u shared experts, "
                              "%u hash-routed of %u blocks and %u KV heads do not fit its layout",
                              hp->n_head, hp->o_groups, hp->rope_dim, hp->head_dim_k, hp->n_expert_shared,
                              hp->n_hash, hp->n_layer, hp->n_head_kv);
    }
    if (hp->arch == GM_GEN_QWEN4EXP) {
        if (o->no_ple)
            hp->ple_ngram = 0;
        if (o->qsa_ratio >= 0)
            hp->qsa_ratio = (uint32_t)o->qsa_ratio;
        /* what llama.cpp's loader requires */
        if (hp->n_expert_shared < 1)
            return gm_err_set(err, GM_EINVAL, "qwen4exp has a shared expert in every block");
        if (hp->idx_dim < hp->rope_dim)
            return gm_err_set(err, GM_EINVAL,
                              "qwen4exp: the indexer's keys (%u) take the attention's RoPE of %u "
                              "dims", hp->idx_dim, hp->rope_dim);
        const uint32_t heads = gm_gen_ple_heads(hp);
        if (heads) {
            if (hp->ple_layer >= hp->n_layer || gm_gen_full_attn(hp, hp->ple_layer))
                return gm_err_set(err, GM_EINVAL,
                                  "qwen4exp: the n-gram embedding's block %u is not a Gated "
                                  "DeltaNet block of %u (use --no-ple)", hp->ple_layer, hp->n_layer);
            if (hp->n_embd % heads != 0)
                return gm_err_set(err, GM_EINVAL,
                                  "qwen4exp: hidden %u is not a multiple of the n-gram "
                                  "embedding's %u heads", hp->n_embd, heads);
        }
        /* the synthetic tokenizer's EOS (gm_gen_run reads a copied tokenizer's) */
        hp->ple_eos = hp->n_vocab >= 3 ? hp->n_vocab - 3 : 0;
    }
    if (o->expert_type >= 0)
        hp->expert_type = (uint32_t)o->expert_type;
    if (o->dense_type >= 0)
        hp->dense_type = (uint32_t)o->dense_type;
    if (!gm_gen_type_supported(hp->expert_type) || !gm_gen_type_supported(hp->dense_type))
        return gm_err_set(err, GM_EINVAL, "unsupported tensor type (supported: %s)",
                          gm_gen_supported_types());
    if (o->skew < 0 || o->skew > 8 || o->skew != o->skew)
        return gm_err_set(err, GM_EINVAL, "skew %g out of range 0..8", o->skew);
    if (hp->n_embd % 32 != 0 || hp->n_ff_exp % 32 != 0 || (hp->n_ff && hp->n_ff % 32 != 0))
        return gm_err_set(err, GM_EINVAL,
                          "hidden %u, FFN %u and expert FFN %u must be multiples of 32", hp->n_embd,
                          hp->n_ff, hp->n_ff_exp);
    return 0;
}

/* ---- tokenizer ----------------------------------------------------------------------------- */

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the others for
 * U+0100 onwards. Writes the UTF-8 of byte b's symbol; returns its length. */
static int byte_symbol(int b, char *out)
{
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static const char k_chat_template[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

/* A self-contained byte-level BPE vocabulary of n tokens: the 256 byte symbols, filler tokens
 * "t<id>" (decodable, never produced by the encoder: there are no merges) and three control
 * tokens at the end. */
static int write_synth_tokenizer(gm_ggufw *w, uint32_t n, gm_err *err)
{
    int rc = GM_ENOMEM;
    char *text = malloc((size_t)n * 24);
    const char **toks = malloc((size_t)n * sizeof *toks);
    uint64_t *lens = malloc((size_t)n * sizeof *lens);
    int32_t *types = malloc((size_t)n * sizeof *types);
    if (!text || !toks || !lens || !types) {
        gm_err_set(err, GM_ENOMEM, "out of memory");
        goto out;
    }
    static const char *const specials[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (uint32_t i = 0; i < n; i++) {
        char *t = text + (size_t)i * 24;
        toks[i] = t;
        if (i < 256) {
            lens[i] = (uint64_t)byte_symbol((int)i, t);
            types[i] = 1; /* normal */
        } else if (i >= n - 3) {
            const char *s = specials[i - (n - 3)];
            lens[i] = strlen(s);
            memcpy(t, s, lens[i]);
            types[i] = 3; /* control */
        } else {
            lens[i] = (uint64_t)snprintf(t, 24, "t%u", i);
            types[i] = 1;
        }
    }
    rc = gm_ggufw_set_str(w, "tokenizer.ggml.model", "gpt2", err);
    if (!rc)
        rc = gm_ggufw_set_str(w, "tokenizer.ggml.pre", "default", err);
    if (!rc)
        rc = gm_ggufw_set_arr_str(w, "tokenizer.ggml.tokens", toks, lens, n, err);
    if (!rc)
        rc = gm_ggufw_set_arr(w, "tokenizer.ggml.token_type", GM_GGUF_I32, types, n, err);
    if (!rc)
        rc = gm_ggufw_set_arr_str(w, "tokenizer.ggml.merges", NULL, NULL, 0, err);
    if (!rc)
        rc = gm_ggufw_set_u32(w, "tokenizer.ggml.eos_token_id", n - 3, err);
    if (!rc)
        rc = gm_ggufw_set_u32(w, "tokenizer.ggml.padding_token_id", n - 3, err);
    if (!rc)
        rc = gm_ggufw_set_u32(w, "tokenizer.ggml.bos_token_id", n - 3, err);
    if (!rc)
        rc = gm_ggufw_set_bool(w, "tokenizer.ggml.add_bos_token", false, err);
    if (!rc)
        rc = gm_ggufw_set_bool(w, "tokenizer.ggml.add_eos_token", false, err);
    if (!rc)
        rc = gm_ggufw_set_str(w, "tokenizer.chat_template", k_chat_template, err);
out:
    free(text);
    free(toks);
    free(lens);
    free(types);
    return rc;
}

/* Serialises an array value read from another file, as GGUF stores it after the type field. */
typedef struct ser {
    uint8_t *p;
    size_t len, cap;
} ser;

static int ser_put(ser *s, const void *d, size_t n)
{
    if (s->cap - s->len < n) {
        size_t cap = s->cap ? s->cap : 1 << 16;
        while (cap - s->len < n) {
            if (cap > SIZE_MAX / 2)
                return GM_ENOMEM;
            cap *= 2;
        }
        uint8_t *p = realloc(s->p, cap);
        if (!p)
            return GM_ENOMEM;
        s->p = p;
        s->cap = cap;
    }
    memcpy(s->p + s->len, d, n);
    s->len += n;
    return 0;
}

static size_t vtype_size(gm_gguf_vtype t)
{
    switch (t) {
    case GM_GGUF_U8: case GM_GGUF_I8: case GM_GGUF_BOOL: return 1;
    case GM_GGUF_U16: case GM_GGUF_I16: return 2;
    case GM_GGUF_U32: case GM_GGUF_I32: case GM_GGUF_F32: return 4;
    case GM_GGUF_U64: case GM_GGUF_I64: case GM_GGUF_F64: return 8;
    default: return 0;
    }
}

static int ser_arr(ser *s, const gm_gguf_arr *a, int depth)
{
    if (depth > 8)
        return GM_EFORMAT;
    uint32_t et = (uint32_t)a->elem_type;
    if (ser_put(s, &et, 4) || ser_put(s, &a->n, 8))
        return GM_ENOMEM;
    if (a->elem_type == GM_GGUF_STRING) {
        for (uint64_t i = 0; i < a->n; i++) {
            gm_gguf_str str;
            if (gm_gguf_arr_str(a, i, &str) != 0)
                return GM_EFORMAT;
            if (ser_put(s, &str.len, 8) || ser_put(s, str.ptr, (size_t)str.len))
                return GM_ENOMEM;
        }
    } else if (a->elem_type == GM_GGUF_ARRAY) {
        for (uint64_t i = 0; i < a->n; i++) {
            gm_gguf_arr sub;
            if (gm_gguf_arr_sub(a, i, &sub) != 0)
                return GM_EFORMAT;
            int rc = ser_arr(s, &sub, depth + 1);
            if (rc)
                return rc;
        }
    } else {
        size_t es = vtype_size(a->elem_type);
        if (es == 0 || a->n > SIZE_MAX / es)
            return GM_EFORMAT;
        if (ser_put(s, a->data, (size_t)a->n * es))
            return GM_ENOMEM;
    }
    return 0;
}

/* The length of tokenizer.ggml.tokens of path, and its EOS (kept when the file has none). */
static int tokenizer_vocab(const char *path, uint32_t *n_vocab, uint32_t *eos, gm_err *err)
{
    gm_gguf *g = NULL;
    int rc = gm_gguf_open(&g, path, err);
    if (rc)
        return rc;
    gm_gguf_arr toks;
    if (gm_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, NULL) != 0 ||
        toks.elem_type != GM_GGUF_STRING || toks.n < 1 || toks.n > (1u << 24))
        rc = gm_err_set(err, GM_EFORMAT, "%s: no usable tokenizer.ggml.tokens array", path);
    else
        *n_vocab = (uint32_t)toks.n;
    uint64_t id;
    if (!rc && gm_gguf_get_u64(g, "tokenizer.ggml.eos_token_id", &id, NULL) == 0 && id < toks.n)
        *eos = (uint32_t)id;
    gm_gguf_close(g);
    return rc;
}

/* Copies every tokenizer.* key of path, in its order. */
static int copy_tokenizer(gm_ggufw *w, const char *path, gm_err *err)
{
    gm_gguf *g = NULL;
    int rc = gm_gguf_open(&g, path, err);
    if (rc)
        return rc;
    ser s = {0};
    for (uint64_t i = 0; !rc && i < gm_gguf_n_kv(g); i++) {
        gm_gguf_str key = gm_gguf_kv_key(g, i);
        if (key.len < 10 || memcmp(key.ptr, "tokenizer.", 10) != 0 || key.len > 255)
            continue;
        char kbuf[256];
        memcpy(kbuf, key.ptr, (size_t)key.len);
        kbuf[key.len] = '\0';
        gm_gguf_vtype vt = gm_gguf_kv_type(g, i);
        s.len = 0;
        int src = 0;
        if (vt == GM_GGUF_STRING) {
            gm_gguf_str v;
            src = gm_gguf_kv_str(g, i, &v);
            if (!src && (ser_put(&s, &v.len, 8) || ser_put(&s, v.ptr, (size_t)v.len)))
                src = GM_ENOMEM;
        } else if (vt == GM_GGUF_ARRAY) {
            gm_gguf_arr a;
            src = gm_gguf_kv_arr(g, i, &a);
            if (!src)
                src = ser_arr(&s, &a, 0);
        } else {
            /* Scalars: the reader converts; read as the widest type and narrow exactly. */
            size_t es = vtype_size(vt);
            uint8_t raw[8] = {0};
            if (vt == GM_GGUF_F32 || vt == GM_GGUF_F64) {
                double d;
                src = gm_gguf_kv_f64(g, i, &d);
                float f = (float)d;
                memcpy(raw, vt == GM_GGUF_F32 ? (void *)&f : (void *)&d, es);
            } else if (vt == GM_GGUF_BOOL) {
                bool b;
                src = gm_gguf_kv_bool(g, i, &b);
                raw[0] = b ? 1 : 0;
            } else if (vt == GM_GGUF_I8 || vt == GM_GGUF_I16 || vt == GM_GGUF_I32 ||
                       vt == GM_GGUF_I64) {
                int64_t x;
                src = gm_gguf_kv_i64(g, i, &x);
                memcpy(raw, &x, es); /* little-endian: the low bytes */
            } else {
                uint64_t x;
                src = gm_gguf_kv_u64(g, i, &x);
                memcpy(raw, &x, es);
            }
            if (!src && (es == 0 || ser_put(&s, raw, es)))
                src = GM_EFORMAT;
        }
        if (src)
            rc = gm_err_set(err, src == GM_ENOMEM ? GM_ENOMEM : GM_EFORMAT,
                            "%s: cannot copy %s", path, kbuf);
        else
            rc = gm_ggufw_set_raw(w, kbuf, vt, s.p, s.len, err);
    }
    free(s.p);
    gm_gguf_close(g);
    return rc;
}

/* ---- writing ------------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct pool_slot {
    uint32_t type;
    float sigma;
    size_t bytes;
    gm_gen_pool *pool;
    uint64_t last_use;
} pool_slot;

typedef struct writer {
    const gm_gen_opts *o;
    const gm_gen_hparams *hp;
    gm_ggufw *w;
    pool_slot pools[MAX_POOLS];
    uint64_t use_clock;
    float *fbuf;             /* F32 staging for the small tensors */
    size_t fbuf_n;
    uint64_t total, done;
    double t0, next_report;
    float embd_sigma;       /* std of the token embedding values */
} writer;

static void emit(const writer *wr, gm_gen_event_kind kind, const char *msg)
{
    if (!wr->o->on_event || (wr->o->quiet && kind == GM_GEN_EV_PROGRESS))
        return;
    gm_gen_event ev = {kind, msg, wr->done, wr->total, now_s() - wr->t0};
    wr->o->on_event(wr->o->event_ctx, &ev);
}

/* The token embedding is a lookup, not a matrix product, so 1/sqrt(fan-in) does not apply to
 * it: its rows carry each token's identity into the residual stream, and rows as small as
 * 1/sqrt(hidden) are swamped by the layers' outputs after a few layers, so every token's hidden
 * state (and routing) becomes the same in the deeper layers. */
static float sigma_of(const writer *wr, const gen_tensor *t)
{
    if (t->kind == GEN_EMBD)
        return wr->embd_sigma;
    if (t->kind == GEN_PLE_EMBD) /* gathered as the n-gram's features, normalised downstream */
        return 1.0f;
    if (t->kind == GEN_HC_MIX) /* qwen4exp divides what these give by the stream count: so that
                                * the read gates and the output's weights per stream vary and the
                                * streams part ways (docs/generator.md) */
        return (float)wr->hp->hc_count / sqrtf((float)t->ne[0]);
    return 1.0f / sqrtf((float)t->ne[0]);
}

/* Bytes of all the plan's tensors that share a pool key. */
static size_t pool_size_for(const writer *wr, const gen_plan *plan, uint32_t type, float sigma)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const gen_tensor *t = &plan->t[i];
        if ((t->kind == GEN_EXPERT || t->kind == GEN_MATRIX || t->kind == GEN_EMBD ||
             t->kind == GEN_OUTPUT || t->kind == GEN_PLE_EMBD || t->kind == GEN_HC_MIX) &&
            t->type == type && sigma_of(wr, t) == sigma)
            sum += t->n_bytes;
    }
    if (sum > POOL_MAX_BYTES)
        return POOL_MAX_BYTES;
    return sum < POOL_MIN_BYTES ? POOL_MIN_BYTES : (size_t)sum;
}

static int get_pool(writer *wr, const gen_plan *plan, uint32_t type, float sigma,
                    gm_gen_pool **out, gm_err *err)
{
    pool_slot *victim = &wr->pools[0];
    for (int i = 0; i < MAX_POOLS; i++) {
        pool_slot *s = &wr->pools[i];
        if (s->pool && s->type == type && s->sigma == sigma) {
            s->last_use = ++wr->use_clock;
            *out = s->pool;
            return 0;
        }
        if (!s->pool || (victim->pool && s->last_use < victim->last_use))
            victim = s;
    }
    gm_gen_pool_destroy(victim->pool);
    victim->pool = NULL;
    size_t bytes = pool_size_for(wr, plan, type, sigma);
    int rc = gm_gen_pool_create(&victim->pool, type, sigma, wr->o->seed, bytes, err);
    if (rc)
        return rc;
    victim->type = type;
    victim->sigma = sigma;
    victim->bytes = bytes;
    victim->last_use = ++wr->use_clock;
    *out = victim->pool;
    return 0;
}

static void progress(writer *wr)
{
    double t = now_s();
    if (t >= wr->next_report) {
        wr->next_report = t + 0.5;
        emit(wr, GM_GEN_EV_PROGRESS, NULL);
    }
}

/* Streams n bytes of slice key from pool into the file. */
static int stream_range(writer *wr, const gm_gen_pool *pool, uint64_t key, uint64_t pos,
                        uint64_t n, gm_err *err)
{
    n += pos;
    while (pos < n) {
        size_t avail;
        uint8_t *dst = gm_ggufw_buf(wr->w, &avail, err);
        if (!dst)
            return err && err->code ? err->code : GM_EIO;
        if (avail == 0)
            return gm_err_set(err, GM_EINVAL, "internal: no room for tensor data");
        size_t k = n - pos < avail ? (size_t)(n - pos) : avail;
        gm_gen_pool_fill(pool, key, pos, dst, k);
        int rc = gm_ggufw_commit(wr->w, k, err);
        if (rc)
            return rc;
        pos += k;
        wr->done += k;
        progress(wr);
    }
    return 0;
}

static int stream_slice(writer *wr, const gm_gen_pool *pool, uint64_t key, uint64_t n, gm_err *err)
{
    return stream_range(wr, pool, key, 0, n, err);
}

/* qwen3next's fused ssm_in of block "blk.N.": per key head g its q, k, v and z rows, taken from
 * the rows that attn_qkv ([q of all | k of all | v of all]) and attn_gate get with this seed. */
static int stream_ssm_in(writer *wr, const gm_gen_pool *pool, const gen_tensor *t, gm_err *err)
{
    const gm_gen_hparams *hp = wr->hp;
    const uint64_t row = t->n_bytes / t->ne[1], nk = hp->ssm_nk, dk = hp->ssm_dk;
    const uint64_t rv = (uint64_t)(hp->ssm_nv / hp->ssm_nk) * hp->ssm_dv;
    char qkv[80], gate[80];
    snprintf(qkv, sizeof qkv, "blk.%u.attn_qkv.weight", t->layer);
    snprintf(gate, sizeof gate, "blk.%u.attn_gate.weight", t->layer);
    const uint64_t kq = gm_gen_hash_str(wr->o->seed, qkv), kz = gm_gen_hash_str(wr->o->seed, gate);
    int rc = 0;
    for (uint64_t g = 0; !rc && g < nk; g++) {
        rc = stream_range(wr, pool, kq, g * dk * row, dk * row, err);
        if (!rc)
            rc = stream_range(wr, pool, kq, (nk * dk + g * dk) * row, dk * row, err);
        if (!rc)
            rc = stream_range(wr, pool, kq, (2 * nk * dk + g * rv) * row, rv * row, err);
        if (!rc)
            rc = stream_range(wr, pool, kz, g * rv * row, rv * row, err);
    }
    return rc;
}

/* Zipf-like popularity factor of each expert of one router: (1 + rank)^-skew, ranks a seeded
 * permutation of the experts, normalised to mean square 1. */
static void skew_factors(float *f, uint32_t n, double skew, uint64_t seed)
{
    uint32_t *perm = (uint32_t *)(void *)(f + n); /* caller gives 2n floats */
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    gm_gen_rng r;
    gm_gen_rng_seed(&r, seed);
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)(gm_gen_rng_next(&r) % i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    double ms = 0;
    for (uint32_t rank = 0; rank < n; rank++) {
        double v = pow(1.0 + rank, -skew);
        f[perm[rank]] = (float)v;
        ms += v * v;
    }
    float norm = (float)(1.0 / sqrt(ms / n));
    for (uint32_t i = 0; i < n; i++)
        f[i] *= norm;
}

/* The small F32 tensors, drawn element by element. */
static int write_f32_tensor(writer *wr, const gen_tensor *t, uint64_t seed, gm_err *err)
{
    gm_gen_rng r;
    gm_gen_rng_seed(&r, seed);
    uint64_t n = t->n_bytes / 4;
    float *fac = NULL;
    uint64_t row = t->ne[0];
    if (t->kind == GEN_ROUTER) {
        uint32_t E = (uint32_t)t->ne[1];
        fac = malloc((size_t)E * 2 * sizeof *fac);
        if (!fac)
            return gm_err_set(err, GM_ENOMEM, "out of memory");
        skew_factors(fac, E, wr->o->skew, seed ^ 0x5eedull);
    }
    float sd_router = 1.0f / sqrtf((float)row);
    /* the selection bias against the scores it shifts: sigmoid scores (0..1) take a small one;
     * ERNIE's softmax probabilities, a few hundredths apart among 8-64 experts, one that moves
     * some choices, as the trained models' correction biases do */
    const float sd_probs_b =
        wr->hp->arch == GM_GEN_ERNIE45MOE || wr->hp->arch == GM_GEN_HYV3 ? 0.05f : 0.01f;
    uint64_t i = 0;
    int rc = 0;
    while (!rc && i < n) {
        uint64_t k = n - i < wr->fbuf_n ? n - i : wr->fbuf_n;
        for (uint64_t j = 0; j < k; j++, i++) {
            float g = gm_gen_rng_gauss(&r), v;
            switch (t->kind) {
            case GEN_NORM: v = 1.0f + 0.02f * g; break;
            case GEN_ROUTER: v = fac[i / row] * sd_router * g; break;
            case GEN_SINKS: v = g; break;
            case GEN_PROBS_B: v = sd_probs_b * g; break;
            case GEN_CONV:
            case GEN_HC_FN: v = g / sqrtf((float)row); break;
            case GEN_SSM_A: v = -(1.0f + 15.0f * gm_gen_rng_unit(&r)); break;
            default: v = 0.02f * g; break; /* biases */
            }
            wr->fbuf[j] = v;
        }
        rc = gm_ggufw_write(wr->w, wr->fbuf, (size_t)k * 4, err);
        wr->done += k * 4;
    }
    free(fac);
    progress(wr);
    return rc;
}

/* A hash-routing table: for each token, k distinct expert ids drawn uniformly. */
static int write_hash_tensor(writer *wr, const gen_tensor *t, uint64_t seed, gm_err *err)
{
    gm_gen_rng r;
    gm_gen_rng_seed(&r, seed);
    const uint64_t k = t->ne[0], rows = t->ne[1], n_expert = wr->hp->n_expert;
    int32_t row[64];
    if (k > 64 || k > n_expert)
        return gm_err_set(err, GM_EINVAL, "%s: %llu experts a token of %llu", t->name, (unsigned long long)k,
                          (unsigned long long)n_expert);
    int rc = 0;
    for (uint64_t v = 0; !rc && v < rows; v++) {
        for (uint64_t j = 0; j < k; j++) {
            bool taken;
            do { /* rejection: k is small against the experts */
                row[j] = (int32_t)(gm_gen_rng_next(&r) % n_expert);
                taken = false;
                for (uint64_t q = 0; q < j; q++)
                    taken |= row[q] == row[j];
            } while (taken);
        }
        rc = gm_ggufw_write(wr->w, row, (size_t)k * sizeof row[0], err);
        wr->done += k * sizeof row[0];
    }
    progress(wr);
    return rc;
}

static int write_tensor(writer *wr, const gen_plan *plan, const gen_tensor *t, gm_err *err)
{
    uint64_t seed = gm_gen_hash_str(wr->o->seed, t->name);
    if (t->kind == GEN_HASH)
        return write_hash_tensor(wr, t, seed, err);
    if (t->type == GM_TYPE_F32 && t->kind != GEN_EXPERT && t->kind != GEN_MATRIX &&
        t->kind != GEN_EMBD && t->kind != GEN_OUTPUT && t->kind != GEN_PLE_EMBD &&
        t->kind != GEN_HC_MIX)
        return write_f32_tensor(wr, t, seed, err);
    gm_gen_pool *pool;
    int rc = get_pool(wr, plan, t->type, sigma_of(wr, t), &pool, err);
    if (rc)
        return rc;
    if (t->kind == GEN_EXPERT) {
        /* One distinct slice per expert: experts are the outermost dim. */
        uint64_t E = t->ne[2], slice = t->n_bytes / E;
        for (uint64_t e = 0; !rc && e < E; e++)
            rc = stream_slice(wr, pool, gm_gen_mix64(seed + e + 1), slice, err);
        return rc;
    }
    const size_t nl = strlen(t->name);
    if (nl > 14 && strcmp(t->name + nl - 14, ".ssm_in.weight") == 0)
        return stream_ssm_in(wr, pool, t, err);
    return stream_slice(wr, pool, seed, t->n_bytes, err);
}

static void note_fallbacks(writer *wr, const gen_plan *plan)
{
    for (size_t i = 0; i < plan->n; i++) {
        const gen_tensor *t = &plan->t[i];
        if (t->type == t->want_type)
            continue;
        bool seen = false; /* one note per (kind, row, types) */
        for (size_t j = 0; j < i && !seen; j++) {
            const gen_tensor *u = &plan->t[j];
            seen = u->want_type == t->want_type && u->type == t->type && u->ne[0] == t->ne[0] &&
                   u->kind == t->kind;
        }
        if (seen)
            continue;
        char msg[256];
        snprintf(msg, sizeof msg,
                 "rows of %llu are not whole %s blocks: %s and the like are written as %s",
                 (unsigned long long)t->ne[0], gm_type_name(t->want_type), t->name,
                 gm_type_name(t->type));
        emit(wr, GM_GEN_EV_NOTE, msg);
    }
}

static int write_metadata(gm_ggufw *w, const gm_gen_opts *o, const gm_gen_hparams *hp,
                          gm_err *err)
{
    char buf[256];
    int rc = gm_ggufw_set_str(w, "general.architecture", gm_gen_arch_name(hp->arch), err);
    if (!rc)
        rc = gm_ggufw_set_str(w, "general.type", "model", err);
    snprintf(buf, sizeof buf, "%s (random weights)", hp->name);
    if (!rc)
        rc = gm_ggufw_set_str(w, "general.name", buf, err);
    snprintf(buf, sizeof buf,
             "Random weights written by gmlx-gen (preset %s, seed %llu, skew %g): the shape of "
             "a real model, not a trained one.",
             hp->preset, (unsigned long long)o->seed, o->skew);
    if (!rc)
        rc = gm_ggufw_set_str(w, "general.description", buf, err);
    if (!rc)
        rc = gm_gen_write_arch_kv(w, hp, err);
    if (!rc)
        rc = gm_ggufw_set_u32(w, "general.file_type", gm_gen_file_type(hp->expert_type), err);
    if (!rc)
        rc = gm_ggufw_set_u32(w, "general.quantization_version", 2, err);
    if (!rc)
        rc = gm_ggufw_set_str(w, "gmlx.gen.preset", hp->preset, err);
    if (!rc)
        rc = gm_ggufw_set_u64(w, "gmlx.gen.seed", o->seed, err);
    if (!rc)
        rc = gm_ggufw_set_f32(w, "gmlx.gen.skew", (float)o->skew, err);
    return rc;
}

static void fill_result(gm_gen_result *res, const gm_gen_hparams *hp, const gen_plan *plan)
{
    memset(res, 0, sizeof *res);
    res->hp = *hp;
    res->n_tensors = plan->n;
    for (size_t i = 0; i < plan->n; i++) {
        const gen_tensor *t = &plan->t[i];
        if (t->kind == GEN_EXPERT) {
            res->expert_bytes += t->n_bytes;
            if (t->layer == hp->n_dense_lead)
                res->expert_slice_bytes += t->n_bytes / t->ne[2];
        }
    }
}

int gm_gen_run(const gm_gen_opts *o, gm_gen_result *res, gm_err *err)
{
    gm_gen_result dummy;
    if (!res)
        res = &dummy;
    memset(res, 0, sizeof *res);
    gm_gen_hparams hp;
    int rc = gm_gen_resolve(o, &hp, err);
    if (rc)
        return rc;
    if (!o->dry_run && (!o->output || !o->output[0]))
        return gm_err_set(err, GM_EINVAL, "no output path given");

    writer wr = {.o = o, .hp = &hp, .t0 = now_s()};
    /* sqrt(layers): the residual stream sums one output per layer, each of about unit size, so
     * embeddings of this size keep each token's identity (and its own routing) in every layer */
    wr.embd_sigma = (float)(o->embd_std > 0 ? o->embd_std : sqrt(hp.n_layer > 1 ? (double)hp.n_layer : 1.0));
    gen_plan plan = {0};

    /* The tokenizer decides the vocabulary, hence the embedding shape and vocab_size: read its
     * size before the metadata is written. */
    if (o->tokenizer_from) {
        rc = tokenizer_vocab(o->tokenizer_from, &hp.n_vocab, &hp.ple_eos, err);
        if (rc)
            return rc;
        if (hp.ple_eos >= hp.n_vocab)
            hp.ple_eos = 0;
    } else if (hp.n_vocab < MIN_SYNTH_VOCAB) {
        return gm_err_set(err, GM_EINVAL, "vocab %u is below the %u of the synthetic tokenizer",
                          hp.n_vocab, MIN_SYNTH_VOCAB);
    }
    if (!o->dry_run) {
        rc = gm_ggufw_create(&wr.w, o->output, o->direct ? GM_GGUFW_DIRECT : 0, err);
        if (rc)
            return rc;
        rc = write_metadata(wr.w, o, &hp, err);
        if (!rc && o->tokenizer_from)
            rc = copy_tokenizer(wr.w, o->tokenizer_from, err);
        else if (!rc)
            rc = write_synth_tokenizer(wr.w, hp.n_vocab, err);
    }
    if (!rc)
        rc = gm_gen_plan_build(&hp, &plan, err);
    if (rc)
        goto out;
    fill_result(res, &hp, &plan);
    note_fallbacks(&wr, &plan);

    uint64_t data = 0;
    for (size_t i = 0; i < plan.n; i++) {
        uint64_t a;
        if (!gm_align_up_u64(plan.t[i].n_bytes, GM_GGUF_DEFAULT_ALIGNMENT, &a) ||
            !gm_add_u64(data, a, &data)) {
            rc = gm_err_set(err, GM_EINVAL, "the tensor data does not fit in 64 bits");
            goto out;
        }
    }
    res->data_bytes = data;
    wr.total = data;
    if (o->dry_run) {
        res->file_bytes = data; /* plus a header of a few MB at most */
        goto out;
    }

    for (size_t i = 0; !rc && i < plan.n; i++) {
        const gen_tensor *t = &plan.t[i];
        rc = gm_ggufw_add_tensor(wr.w, t->name, t->type, t->n_dims, t->ne, err);
    }
    if (rc)
        goto out;
    if (!o->sparse) {
        /* Fail before writing anything when the disk cannot hold the file. */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", o->output);
        char *slash = strrchr(dir, '/');
        if (slash)
            slash[slash == dir ? 1 : 0] = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        struct statvfs sv;
        if (statvfs(dir, &sv) == 0) {
            uint64_t free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
            /* a margin for the header and the filesystem: 64 MB, less for small files */
            const uint64_t margin = data / 4 < (64u << 20) ? data / 4 + (1u << 20) : (64u << 20);
            if (free_b < data + margin) {
                rc = gm_err_set(err, GM_EIO,
                                "%s: needs %.3f GB (and %.0f MB of margin) but %s has %.3f GB free "
                                "(use --sparse for a file that costs no disk)",
                                o->output, (double)data / GM_GB, (double)margin / 1e6, dir,
                                (double)free_b / GM_GB);
                goto out;
            }
        }
    }
    rc = gm_ggufw_begin_data(wr.w, o->sparse, err);
    if (rc)
        goto out;
    res->file_bytes = gm_ggufw_file_size(wr.w);
    res->data_bytes = res->file_bytes - gm_ggufw_data_offset(wr.w);
    wr.total = res->data_bytes;

    if (!o->sparse) {
        wr.fbuf_n = 1 << 16;
        wr.fbuf = malloc(wr.fbuf_n * sizeof *wr.fbuf);
        if (!wr.fbuf) {
            rc = gm_err_set(err, GM_ENOMEM, "out of memory");
            goto out;
        }
        double t_start = now_s();
        wr.t0 = t_start;
        wr.next_report = t_start + 0.5;
        for (size_t i = 0; !rc && i < plan.n; i++)
            rc = write_tensor(&wr, &plan, &plan.t[i], err);
        if (rc)
            goto out;
        wr.done = wr.total;
        res->direct_io = gm_ggufw_is_direct(wr.w);
        rc = gm_ggufw_finish(wr.w, err);
        res->seconds = now_s() - t_start;
    } else {
        rc = gm_ggufw_finish(wr.w, err);
        wr.done = wr.total;
        res->sparse = true;
    }
    if (!rc)
        emit(&wr, GM_GEN_EV_DONE, NULL);

out:
    for (int i = 0; i < MAX_POOLS; i++)
        gm_gen_pool_destroy(wr.pools[i].pool);
    free(wr.fbuf);
    gm_ggufw_destroy(wr.w); /* removes OUT.tmp when not finished */
    gm_gen_plan_free(&plan);
    return rc;
}
