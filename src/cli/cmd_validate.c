/* gmlx validate: reads only the GGUF header and prints the streaming plan and a verdict. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "remote_cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx validate MODEL [--json] [--kv-bits 8|16] [--prefill-step-size N]\n"
            "                     [--gpu | --vram-gb N] [--max-mb N]\n\n"
            "Reads only the GGUF header (the tensor data is never read) and prints the streaming\n"
            "plan for this machine: every-token weights by group, routed experts, KV room, decode\n"
            "arena, the bytes a cold token reads, and one '=>' verdict. For a file in several\n"
            "parts, name the first part (NAME-00001-of-0000N.gguf).\n\n"
            "MODEL is a file, or a remote one read by HTTP range requests (the header of every\n"
            "part, nothing else), which gets the same plan and verdict:\n"
            "  hf://ORG/REPO/FILE.gguf[@REV]   a file of a hub repo (any part of a split set)\n"
            "  ORG/REPO:QUANT                  the repo's one model whose name has QUANT in it\n"
            "  https://...                     a file on any server\n\n"
            "options:\n"
            "  --json                 print the same numbers as JSON (under \"stream\")\n"
            "  --kv-bits 8|16         KV cache element width (8 halves the KV cache)\n"
            "  --prefill-step-size N  prefill chunk in tokens (default 8192)\n"
            "  --vram-gb N            plan a VRAM tier of N GB of experts (gmlx run --gpu --vram-gb N):\n"
            "                         how many it holds, and each tier's share (VRAM, RAM, SSD)\n"
            "  --gpu                  the same for this machine's GPU: its free memory less 1.5 GB\n"
            "  --max-mb N             remote: read at most N MB of each header (default 128)\n"
            "  -h, --help             this help\n\n"
            "environment:\n"
            "  GMLX_RAM_GB            plan for a machine with this much RAM (GiB)\n"
            "  GMLX_AVAIL_GB          memory free now (GiB), for the 'memory free now' line\n"
            "  GMLX_STREAM_KV_CTX     tokens of KV room (default 32768)\n"
            "  GMLX_DECODE_ARENA_GB   decode arena size in GiB instead of the plan's\n"
            "  HF_ENDPOINT, HF_TOKEN  the hub's address and a token (see gmlx pull --help)\n\n"
            "exit status: 0 the model can run, 1 it cannot (unsupported architecture or type,\n"
            "or it cannot stream), 2 the file is unreadable or the usage is wrong.\n");
}

static json_t *plan_json(const gm_file_plan *p)
{
    json_t *groups = json_object();
    json_object_set_new(groups, "attention", json_integer((json_int_t)p->attention_bytes));
    json_object_set_new(groups, "shared_experts", json_integer((json_int_t)p->shared_experts_bytes));
    json_object_set_new(groups, "dense_ffn_and_routers", json_integer((json_int_t)p->dense_ffn_and_routers_bytes));
    json_object_set_new(groups, "embeddings", json_integer((json_int_t)p->embeddings_bytes));
    json_object_set_new(groups, "output_head", json_integer((json_int_t)p->output_head_bytes));
    json_object_set_new(groups, "other", json_integer((json_int_t)p->other_bytes));
    json_t *s = json_object();
    json_object_set_new(s, "every_token_bytes", json_integer((json_int_t)p->every_token_bytes));
    json_object_set_new(s, "every_token_by_group", groups);
    json_object_set_new(s, "expert_bytes", json_integer((json_int_t)p->expert_bytes));
    json_object_set_new(s, "lookup_table_bytes", json_integer((json_int_t)p->lookup_table_bytes));
    json_object_set_new(s, "mtp_bytes", json_integer((json_int_t)p->mtp_bytes));
    json_object_set_new(s, "moe_layers", json_integer(p->n_moe_layers));
    json_object_set_new(s, "experts", json_integer(p->n_experts));
    json_object_set_new(s, "experts_per_token", json_integer(p->n_experts_used));
    json_object_set_new(s, "prefill_ring_bytes", json_integer((json_int_t)p->prefill_ring_bytes));
    json_object_set_new(s, "ram_bytes", json_integer((json_int_t)p->ram_bytes));
    json_object_set_new(s, "available_bytes", p->avail_known ? json_integer((json_int_t)p->avail_bytes) : json_null());
    json_object_set_new(s, "ceiling_bytes", json_integer((json_int_t)p->ceiling_bytes));
    json_object_set_new(s, "host_floor_bytes", json_integer((json_int_t)p->host_floor_bytes));
    json_object_set_new(s, "host_overhead_bytes", json_integer((json_int_t)p->host_overhead_bytes));
    json_object_set_new(s, "kv_room_bytes", json_integer((json_int_t)p->kv_room_bytes));
    json_object_set_new(s, "kv_ctx", json_integer(p->kv_ctx));
    json_object_set_new(s, "kv_bits", json_integer(p->kv_bits));
    json_object_set_new(s, "kv_cache_bytes", json_integer((json_int_t)p->kv_cache_bytes));
    json_object_set_new(s, "prefill_chunk_tokens", json_integer(p->prefill_chunk_tokens));
    json_object_set_new(s, "prefill_chunk_bytes", json_integer((json_int_t)p->prefill_chunk_bytes));
    json_object_set_new(s, "prefill_pool_bytes", json_integer((json_int_t)p->prefill_pool_bytes));
    json_object_set_new(s, "decode_arena_bytes", json_integer((json_int_t)p->arena_bytes));
    json_object_set_new(s, "decode_arena_share", json_real(p->arena_share));
    json_object_set_new(s, "decode_arena_overridden", json_boolean(p->arena_overridden));
    json_object_set_new(s, "decode_arena_min_slots_per_layer", json_integer(p->arena_min_slots));
    json_object_set_new(s, "cold_token_bytes", json_integer((json_int_t)p->cold_token_bytes));
    json_object_set_new(s, "prefill_ring_fits_arena", json_boolean(p->ring_fits_arena));
    if (p->vram_bytes) {
        json_t *t = json_object();
        json_object_set_new(t, "vram_bytes", json_integer((json_int_t)p->vram_bytes));
        json_object_set_new(t, "vram_slot_bytes", json_integer((json_int_t)p->vram_slot_bytes));
        json_object_set_new(t, "vram_attention_layers", json_integer(p->vram_attn_layers));
        json_object_set_new(t, "vram_attention_bytes", json_integer((json_int_t)p->vram_attn_bytes));
        json_object_set_new(t, "vram_kv_bytes", json_integer((json_int_t)p->vram_kv_bytes));
        json_object_set_new(t, "vram_experts", json_integer(p->vram_experts));
        json_object_set_new(t, "vram_stage_slots", json_integer(p->vram_stage_slots));
        json_object_set_new(t, "routed_experts", json_integer(p->n_routed_experts));
        json_object_set_new(t, "vram_share", json_real(p->vram_share));
        json_object_set_new(t, "ram_share", json_real(p->ram_share));
        json_object_set_new(t, "ssd_share", json_real(p->ssd_share));
        json_object_set_new(s, "tiers", t);
    }
    json_object_set_new(s, "verdict", json_string(gm_plan_verdict_name(p->verdict)));
    json_object_set_new(s, "verdict_line", json_string(p->verdict_line));
    json_object_set_new(s, "now_line", p->now_line[0] ? json_string(p->now_line) : json_null());
    json_object_set_new(s, "experts_in_memory_now", json_boolean(p->experts_in_memory_now));
    json_object_set_new(s, "auto_mtp_off_now", json_boolean(p->auto_mtp_off_now));
    json_object_set_new(s, "tables_from_file_now", json_boolean(p->tables_from_file_now));
    return s;
}

int gm_cmd_validate(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false, gpu = false;
    gm_err err = {0};
    gm_file_plan_opts opts;
    gm_file_plan_opts_default(&opts);
    if (!gm_cli_tuning("validate", &opts.tuning))
        return GM_EXIT_USAGE;
    opts.text_indent = "  ";
    uint64_t max_bytes = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int k;
        if (gm_cli_is_help(a)) {
            help(stdout);
            return GM_EXIT_OK;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--kv-bits") == 0) {
            uint32_t v;
            if (!gm_cli_parse_u32("validate", a, i + 1 < argc ? argv[++i] : NULL, 8, 16, &v))
                return GM_EXIT_USAGE;
            if (v != 8 && v != 16) {
                gm_cli_error("validate", "--kv-bits %u: use 8 or 16", v);
                return GM_EXIT_USAGE;
            }
            opts.kv_bits = v;
        } else if (strcmp(a, "--gpu") == 0) {
            gpu = true;
        } else if (strcmp(a, "--vram-gb") == 0) {
            float v;
            if (!gm_cli_parse_float("validate", a, i + 1 < argc ? argv[++i] : NULL, 0.01f, 1e6f, &v))
                return GM_EXIT_USAGE;
            opts.vram_gb = v;
        } else if (strcmp(a, "--prefill-step-size") == 0) {
            if (!gm_cli_parse_u32("validate", a, i + 1 < argc ? argv[++i] : NULL, 1, 1u << 20,
                                  &opts.prefill_step))
                return GM_EXIT_USAGE;
        } else if ((k = gm_cli_max_mb_flag("validate", a, i + 1 < argc ? argv[i + 1] : NULL, &max_bytes)) != 0) {
            if (k < 0)
                return GM_EXIT_USAGE;
            i++;
        } else if (a[0] == '-' && a[1] != '\0') {
            gm_cli_error("validate", "unknown option '%s' (see gmlx validate --help)", a);
            return GM_EXIT_USAGE;
        } else if (!path) {
            path = a;
        } else {
            gm_cli_error("validate", "one model file at a time ('%s' and '%s')", path, a);
            return GM_EXIT_USAGE;
        }
    }
    if (!path) {
        gm_cli_error("validate", "no model file given (see gmlx validate --help)");
        return GM_EXIT_USAGE;
    }
    if (gpu && opts.vram_gb <= 0) { /* the device's free memory, less what a load keeps back */
        gm_gpu_device gd;
        if (gm_machine_gpu(&gd, &err) != 0) {
            gm_cli_error("validate", "--gpu: %s", err.msg);
            return GM_EXIT_USAGE;
        }
        opts.vram_gb = gd.free_bytes > GM_GPU_RESERVE_BYTES
                           ? (double)(gd.free_bytes - GM_GPU_RESERVE_BYTES) / 1e9
                           : 0.001;
    }

    gm_file *g = NULL;
    int remote = gm_cli_remote_ref("validate", path);
    if (remote < 0)
        return GM_EXIT_USAGE;
    if (remote) {
        gm_fetch_opts ro;
        gm_remote_model *rm = NULL;
        if (!gm_cli_remote_opts("validate", &ro))
            return GM_EXIT_USAGE;
        int rrc = gm_cli_remote_open("validate", path, &ro, max_bytes, &rm, &g);
        if (rrc)
            return rrc;
        gm_remote_model_free(rm);
    } else if (gm_file_open(&g, path, &err) != 0) {
        gm_cli_error("validate", "%s", err.msg);
        return GM_EXIT_USAGE;
    }
    const gm_file_info *m = gm_file_get_info(g);
    if (!m->described) {
        gm_cli_error("validate", "%s", m->describe_error);
        gm_file_close(g);
        return GM_EXIT_USAGE;
    }
    gm_file_plan p;
    char *plan_text = NULL;
    if (gm_file_plan_compute(g, &opts, &p, json ? NULL : &plan_text, &err) != 0) {
        gm_cli_error("validate", "%s", err.msg);
        gm_file_close(g);
        return GM_EXIT_USAGE;
    }
    bool can_run = m->runnable && p.verdict != GM_PLAN_CANNOT_STREAM;

    char size[32];
    gm_format_bytes(m->file_bytes, size, sizeof size);
    if (json) {
        json_t *o = json_object();
        char shown[4096];
        snprintf(shown, sizeof shown, "%s", path);
        gm_text_printable(shown); /* a path need not be UTF-8; JSON strings must be */
        json_object_set_new(o, "file", json_string(shown));
        json_object_set_new(o, "n_parts", json_integer(m->n_parts));
        json_object_set_new(o, "size_bytes", json_integer((json_int_t)m->file_bytes));
        json_object_set_new(o, "gguf_version", json_integer(m->gguf_version));
        json_object_set_new(o, "n_tensors", json_integer((json_int_t)m->n_tensors));
        json_object_set_new(o, "arch", m->arch[0] ? json_stringn(m->arch, strlen(m->arch)) : json_null());
        json_object_set_new(o, "arch_supported", json_boolean(m->family != NULL));
        json_object_set_new(o, "runnable", json_boolean(m->runnable));
        json_object_set_new(o, "not_runnable_reason", m->runnable ? json_null() : json_string(m->not_runnable));
        json_object_set_new(o, "usable", json_boolean(can_run));
        json_t *types = json_array();
        for (uint32_t t = 0; t < 64; t++)
            if (m->tensor_types & (1ull << t))
                json_array_append_new(types, json_string(gm_tensor_type_name(t)));
        json_object_set_new(o, "tensor_types", types);
        json_object_set_new(o, "stream", plan_json(&p));
        char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (txt) {
            printf("%s\n", txt);
            free(txt);
        }
        json_decref(o);
    } else {
        char types[256];
        int pos = 0;
        types[0] = '\0';
        for (uint32_t t = 0; t < 64 && pos < (int)sizeof types - 16; t++)
            if (m->tensor_types & (1ull << t))
                pos += snprintf(types + pos, sizeof types - (size_t)pos, "%s%s", pos ? " " : "",
                                gm_tensor_type_name(t));
        printf("%s: %s%s%s, GGUF v%u, %u part%s, %s, %llu tensors (%s)\n", path,
               m->arch[0] ? m->arch : "no architecture", m->family ? " - " : "", m->family ? m->family : "",
               m->gguf_version, m->n_parts, m->n_parts == 1 ? "" : "s", size, (unsigned long long)m->n_tensors,
               types);
        if (!m->runnable)
            printf("  not runnable: %s\n", m->not_runnable);
        fputs(plan_text, stdout);
    }
    free(plan_text);
    gm_file_close(g);
    return can_run ? GM_EXIT_OK : GM_EXIT_NO;
}
