/* config/keys: the one table of configuration keys: section, key, type and range, the run/chat
 * flag each stands for and the option field that flag sets, and the feature a key waits for
 * when gmlx does not have it yet. The loader checks values by it, resolve turns values into
 * flags by it, docs/config.md lists it, and a test runs every flag through run and chat. */
#include <string.h>

#include "config/config.h"

#define SERVE "this gmlx serve setting"
#define MTP "speculative decoding (MTP)"

/* clang-format off */
const cfg_key gm_cfg_keys[] = {
    /* ---- a model entry's own keys ---- */
    {{"model", "stream", "--stream-experts", "--stream-experts --stream-cpu", "gm_model_opts.placement",
      "experts, cpu or false", NULL}, CT_STREAM, .flag_on = "--stream-experts", .flag_off = "--stream-cpu"},
    {{"model", "stream_fast_disk", "--stream-fast-disk", "--stream-fast-disk", "gm_model_opts.fast_disk",
      "auto, on or off", NULL}, CT_ENUM, .enums = "auto|on|off"},
    {{"model", "moe_experts", "--moe-experts", "--moe-experts", "gm_levers.experts",
      "a whole number of experts, at least 1", NULL}, CT_INT, 1, 65536},
    {{"model", "moe_expert_mass", "--moe-expert-mass", "--moe-expert-mass", "gm_levers.expert_mass",
      "a share above 0 and at most 1", NULL}, CT_NUM, 0, 1, .lo_open = true},
    {{"model", "moe_miss_shed", "--moe-miss-shed", "--moe-miss-shed", "gm_levers.miss_shed",
      "a share above 0 and at most 1", NULL}, CT_NUM, 0, 1, .lo_open = true},
    {{"model", "moe_layer_shed", "--moe-layer-shed", "--moe-layer-shed", "gm_levers.layer_shed",
      "a probability above 0 and below 1", NULL}, CT_NUM, 0, 1, .lo_open = true, .hi_open = true},
    {{"model", "moe_prestage", "--moe-prestage", "--moe-prestage", "gm_levers.keepers",
      "ranked or keepers", NULL}, CT_ENUM, .enums = "ranked|keepers"},
    {{"model", "prefill_feeder", "--prefill-feeder", "--prefill-feeder --no-prefill-feeder",
      "gm_tuning.prefill_ring", "true or false", NULL}, CT_BOOL, .nullable = true,
      .flag_on = "--prefill-feeder", .flag_off = "--no-prefill-feeder"},
    {{"model", "decode_feeder", "--decode-feeder", "--decode-feeder --no-decode-feeder",
      "gm_tuning.lookahead", "true or false", NULL}, CT_BOOL, .nullable = true,
      .flag_on = "--decode-feeder", .flag_off = "--no-decode-feeder"},
    {{"model", "gpu", "--gpu", "--gpu --no-gpu", "gm_model_opts.gpu", "true or false", NULL}, CT_BOOL,
      .nullable = true, .flag_on = "--gpu", .flag_off = "--no-gpu"},
    {{"model", "vram_gb", "--vram-gb", "--vram-gb", "gm_model_opts.vram_gb", "GB of device memory, from 0.01",
      NULL}, CT_NUM, 0.01, 1e6, .nullable = true},
    {{"model", "family", NULL, NULL, NULL, "a family name", "per-family sampling defaults"}, CT_STR},
    {{"model", "mmproj", NULL, NULL, NULL, "a path", "image input (mmproj)"}, CT_STR, .nullable = true},
    {{"model", "draft_gguf", NULL, NULL, NULL, "a path", MTP}, CT_STR, .nullable = true},
    {{"model", "adapter", NULL, NULL, NULL, "a path", "LoRA adapters"}, CT_STR, .nullable = true},
    {{"model", "speculative", NULL, NULL, NULL, "true or false", MTP}, CT_BOOL},
    {{"model", "speculative_width_cap", NULL, NULL, NULL, "a whole number, 0 or more", MTP}, CT_INT, 0,
      65536, .nullable = true},
    {{"model", "pin", NULL, NULL, NULL, "true or false", SERVE}, CT_BOOL},
    {{"model", "ttl_s", NULL, NULL, NULL, "seconds, 0 or more", SERVE}, CT_NUM, 0, 1e9, .nullable = true},

    /* ---- a profile's (or overrides') scalar settings ---- */
    {{"settings", "system", "--system", "--system --system-prompt", "the system message",
      "a string", NULL}, CT_STR, .nullable = true},
    {{"settings", "chat_template", "--chat-template-file", "--chat-template-file", "the chat template",
      "a path to a .jinja or .txt file", NULL}, CT_STR, .nullable = true},
    {{"settings", "thinking", "--no-think", "--no-think", "the template's thinking switch",
      "on, off or adaptive", NULL}, CT_THINK, .nullable = true, .flag_off = "--no-think"},
    {{"settings", "reasoning_effort", NULL, NULL, NULL, "a string",
      "reasoning_effort on the command line"}, CT_STR, .nullable = true},
    {{"settings", "chat_template_kwargs", NULL, NULL, NULL, "a mapping",
      "extra template variables on the command line"}, CT_MAP, .nullable = true},
    {{"settings", "cache", NULL, NULL, NULL, "a mapping", "the prompt cache"}, CT_MAP, .nullable = true},

    /* ---- sampling: ---- */
    {{"sampling", "temperature", "--temp", "--temp", "gm_sampling.temp", "a number from 0 to 100", NULL},
      CT_NUM, 0, 100, .alias = "temp", .nullable = true},
    {{"sampling", "top_p", "--top-p", "--top-p", "gm_sampling.top_p", "a number from 0 to 1", NULL},
      CT_NUM, 0, 1, .nullable = true},
    {{"sampling", "top_k", "--top-k", "--top-k", "gm_sampling.top_k", "a whole number, 0 or more", NULL},
      CT_INT, 0, 1 << 24, .nullable = true},
    {{"sampling", "min_p", "--min-p", "--min-p", "gm_sampling.min_p", "a number from 0 to 1", NULL},
      CT_NUM, 0, 1, .nullable = true},
    {{"sampling", "max_tokens", "-n", "-n --n-predict --max-tokens", "tokens per answer",
      "a whole number, 0 or more", NULL}, CT_INT, 0, 1 << 24, .nullable = true},
    {{"sampling", "seed", "--seed", "--seed", "gm_sampling.seed", "a whole number (-1: from the clock)",
      NULL}, CT_INT, -1, 4294967295.0, .nullable = true},
    {{"sampling", "repetition_penalty", "--repeat-penalty", "--repeat-penalty", "gm_sampling.repeat_penalty",
      "a number from 0.01 to 100", NULL}, CT_NUM, 0.01, 100, .nullable = true},
    {{"sampling", "repetition_context_size", "--repeat-last-n", "--repeat-last-n",
      "gm_sampling.repeat_last_n", "a whole number (-1: the whole context)", NULL}, CT_INT, -1, 1 << 20,
      .nullable = true},
    {{"sampling", "enable_thinking", "--no-think", "--no-think", "the template's thinking switch",
      "true or false", NULL}, CT_BOOL, .nullable = true, .flag_off = "--no-think"},
    {{"sampling", "presence_penalty", NULL, NULL, NULL, "a number", "presence and frequency penalties"},
      CT_NUM, -100, 100, .nullable = true},
    {{"sampling", "frequency_penalty", NULL, NULL, NULL, "a number", "presence and frequency penalties"},
      CT_NUM, -100, 100, .nullable = true},
    {{"sampling", "stop", NULL, NULL, NULL, "a string or a list of strings", "stop strings on the command line"},
      CT_STRS, .nullable = true},
    {{"sampling", "thinking_budget", NULL, NULL, NULL, "a whole number of tokens", "a thinking budget"},
      CT_INT, 0, 1 << 24, .nullable = true},
    {{"sampling", "thinking_start_token", NULL, NULL, NULL, "a string", "a thinking budget"}, CT_STR,
      .nullable = true},
    {{"sampling", "thinking_end_token", NULL, NULL, NULL, "a string", "a thinking budget"}, CT_STR,
      .nullable = true},
    {{"sampling", "xtc_probability", NULL, NULL, NULL, "a number from 0 to 1", "XTC sampling"}, CT_NUM, 0,
      1, .nullable = true},
    {{"sampling", "xtc_threshold", NULL, NULL, NULL, "a number from 0 to 1", "XTC sampling"}, CT_NUM, 0, 1,
      .nullable = true},

    /* ---- load: ---- */
    {{"load", "kv_bits", "--kv-bits", "--kv-bits --kv-type", "gm_model_opts.kv_type", "8, 16 or 32", NULL},
      CT_ENUM, .enums = "8|16|32", .nullable = true},
    {{"load", "kv_type", "--kv-type", "--kv-type --kv-bits", "gm_model_opts.kv_type", "f16, f32 or q8_0",
      NULL}, CT_ENUM, .enums = "f16|f32|q8_0", .nullable = true},
    {{"load", "max_kv_size", "-c", "-c --ctx-size", "gm_model_opts.n_ctx", "a whole number of tokens", NULL},
      CT_INT, 1, 1 << 24, .nullable = true},
    {{"load", "threads", "-t", "-t --threads", "gm_model_opts.n_threads", "a whole number from 1 to 1024",
      NULL}, CT_INT, 1, 1024, .nullable = true},
    {{"load", "prefill_step_size", "--prefill-step-size", "--prefill-step-size", "gm_model_opts.prefill_step",
      "a whole number of tokens from 1 to 65536", NULL}, CT_INT, 1, 65536, .nullable = true},
    {{"load", "kv_group_size", NULL, NULL, NULL, "a whole number", "grouped KV quantization"}, CT_INT, 1,
      1 << 20, .nullable = true},
    {{"load", "kv_quant_scheme", NULL, NULL, NULL, "a string", "grouped KV quantization"}, CT_STR,
      .nullable = true},
    {{"load", "quantized_kv_start", NULL, NULL, NULL, "a whole number", "grouped KV quantization"}, CT_INT, 0,
      1 << 24, .nullable = true},

    /* ---- server: (scalars; model_dirs, defaults, cache and assistants are read apart) ---- */
    {{"server", "host", NULL, NULL, NULL, "an address", NULL}, CT_STR},
    {{"server", "port", NULL, NULL, NULL, "a port from 1 to 65535", NULL}, CT_INT, 1, 65535},
    {{"server", "api_key", NULL, NULL, NULL, "a string", NULL}, CT_STR, .nullable = true},
    {{"server", "no_auth", NULL, NULL, NULL, "true or false", NULL}, CT_BOOL},
    {{"server", "budget_gb", NULL, NULL, NULL, "GiB above 0", NULL}, CT_NUM, 0, 1 << 24, .lo_open = true,
      .nullable = true},
    {{"server", "max_models", NULL, NULL, NULL, "a whole number, at least 1", SERVE}, CT_INT, 1, 1 << 16,
      .nullable = true},
    {{"server", "hf_cache", NULL, NULL, NULL, "true or false", "the local Hugging Face cache"}, CT_BOOL},
    {{"server", "token_queue_timeout_s", NULL, NULL, NULL, "seconds", SERVE}, CT_NUM, -1e9, 1e9,
      .nullable = true},
    {{"server", "prefill_step_size", NULL, NULL, NULL, "a whole number of tokens", SERVE}, CT_INT, 1, 65536,
      .nullable = true},
    {{"server", "dtype", NULL, NULL, NULL, "auto, bfloat16, bf16, float16 or fp16", SERVE}, CT_ENUM,
      .enums = "auto|bfloat16|bf16|float16|fp16", .nullable = true},
    {{"server", "decode_prefill_ratio", NULL, NULL, NULL, "a number or auto", SERVE}, CT_ANY},
    {{"server", "prefill_tick_ms", NULL, NULL, NULL, "milliseconds", SERVE}, CT_NUM, 0, 1e9, .nullable = true},
    {{"server", "cache_limit_gb", NULL, NULL, NULL, "GiB", SERVE}, CT_NUM, -1e9, 1 << 24, .nullable = true},
    {{"server", "family_defaults", NULL, NULL, NULL, "true or false", "per-family sampling defaults"}, CT_BOOL},
    {{"server", "stochastic_mtp", NULL, NULL, NULL, "true or false", MTP}, CT_BOOL},
    {{"server", "gpu_keepwarm", NULL, NULL, NULL, "true or false", "GPU keep-warm"}, CT_BOOL},
    {{"server", "menubar", NULL, NULL, NULL, "true or false", "a menu bar app (macOS)"}, CT_BOOL},
    {{"server", "stt", NULL, NULL, NULL, "a model or true", "speech to text"}, CT_ANY},
    {{"server", "tts", NULL, NULL, NULL, "a model or true", "text to speech"}, CT_ANY},
    {{"server", "embeddings", NULL, NULL, NULL, "a model or true", "embeddings"}, CT_ANY},
    {{"server", "rerank", NULL, NULL, NULL, "a model or true", "reranking"}, CT_ANY},
    {{"server", "assistants", NULL, NULL, NULL, "a mapping", "the tool-loop assistant"}, CT_ANY},
    {{"server", "assistant_allow_remote", NULL, NULL, NULL, "true or false", "the tool-loop assistant"},
      CT_BOOL},
};
/* clang-format on */
const size_t gm_cfg_n_keys = sizeof gm_cfg_keys / sizeof gm_cfg_keys[0];

int gm_cfg_key_find(const char *section, const char *name)
{
    for (size_t i = 0; i < gm_cfg_n_keys; i++) {
        const cfg_key *k = &gm_cfg_keys[i];
        if (strcmp(k->pub.section, section) == 0 &&
            (strcmp(k->pub.name, name) == 0 || (k->alias && strcmp(k->alias, name) == 0)))
            return (int)i;
    }
    return -1;
}

size_t gm_config_n_keys(void) { return gm_cfg_n_keys; }

const gm_config_key *gm_config_key_at(size_t i) { return i < gm_cfg_n_keys ? &gm_cfg_keys[i].pub : NULL; }

bool gm_config_flag_typed(const gm_config_key *key, int argc, char **argv)
{
    if (!key || !key->spellings)
        return false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        size_t n = strlen(a);
        if (!n || a[0] != '-')
            continue;
        for (const char *p = key->spellings; *p;) {
            size_t w = strcspn(p, " ");
            if (w == n && memcmp(p, a, n) == 0)
                return true;
            p += w;
            while (*p == ' ')
                p++;
        }
    }
    return false;
}

const char *gm_config_server_value(const gm_config *c, const char *key)
{
    int k = gm_cfg_key_find("server", key);
    return c && k >= 0 && c->server.v ? c->server.v[k] : NULL;
}
