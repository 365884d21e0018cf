/* The public file API (gmlx.h "model files", "the streaming plan of a file"): a GGUF header
 * with its model description, its metadata and tensor table as text, and its streaming plan.
 * Nothing here prints: text is formatted into malloc'd buffers the caller frees. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/file.h"
#include "base/err.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "base/sysinfo.h"
#include "gguf/types.h"
#include "plan/plan.h"

_Static_assert(GM_FILE_MAX_DIMS == GM_GGUF_MAX_DIMS, "gmlx.h GM_FILE_MAX_DIMS follows the GGUF reader");
_Static_assert((int)GM_PLAN_STREAMS == (int)GM_VERDICT_STREAMS && (int)GM_PLAN_NO_ARENA == (int)GM_VERDICT_NO_ARENA &&
                   (int)GM_PLAN_CANNOT_STREAM == (int)GM_VERDICT_CANNOT_STREAM &&
                   (int)GM_PLAN_FITS == (int)GM_VERDICT_FITS &&
                   (int)GM_PLAN_EXPERTS_IN_MEMORY == (int)GM_VERDICT_EXPERTS_IN_MEMORY,
               "gmlx.h gm_plan_verdict follows plan.h gm_verdict");

int gm_file_wrap(gm_file **out, gm_gguf *g, gm_err *err)
{
    *out = NULL;
    gm_file *f = calloc(1, sizeof *f);
    if (!f) {
        gm_gguf_close(g);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    f->g = g;
    /* a description that fails leaves the header readable (inspect still lists it) */
    f->described = gm_model_describe(g, &f->desc, &f->desc_err) == 0;
    gm_file_info *in = &f->info;
    in->path = gm_gguf_path(g);
    in->gguf_version = gm_gguf_version(g);
    in->n_parts = gm_gguf_n_parts(g);
    in->alignment = gm_gguf_alignment(g);
    in->file_bytes = gm_gguf_total_size(g);
    in->n_kv = gm_gguf_n_kv(g);
    in->n_tensors = gm_gguf_n_tensors(g);
    in->described = f->described;
    in->describe_error = f->described ? "" : f->desc_err.msg;
    in->arch = "";
    in->not_runnable = "";
    if (f->described) {
        const gm_model_desc *d = &f->desc;
        in->arch = d->arch_name;
        in->family = d->arch ? d->arch->family : NULL;
        in->runnable = d->runnable;
        in->not_runnable = d->runnable ? "" : d->not_runnable;
        in->n_moe_layers = d->n_moe_layers;
        in->tensor_types = d->types_present;
    }
    *out = f;
    return 0;
}

int gm_file_open(gm_file **out, const char *path, gm_err *err)
{
    *out = NULL;
    if (!path)
        return gm_err_set(err, GM_EINVAL, "no file given");
    gm_gguf *g = NULL;
    int rc = gm_gguf_open(&g, path, err);
    if (rc)
        return rc;
    return gm_file_wrap(out, g, err);
}

int gm_file_open_prefix(gm_file **out, const char *name, const char *part_name, const void *bytes, size_t len,
                        uint64_t file_bytes, gm_err *err)
{
    *out = NULL;
    if (!name || !part_name || (!bytes && len))
        return gm_err_set(err, GM_EINVAL, "gm_file_open_prefix: no name or no bytes");
    gm_gguf_prefix pre = {part_name, bytes, len, file_bytes};
    gm_gguf *g = NULL;
    int rc = gm_gguf_open_prefixes(&g, name, &pre, 1, NULL, err);
    if (rc)
        return rc;
    return gm_file_wrap(out, g, err);
}

void gm_file_close(gm_file *f)
{
    if (!f)
        return;
    if (f->described)
        gm_model_desc_free(&f->desc);
    gm_gguf_close(f->g);
    free(f);
}

const gm_file_info *gm_file_get_info(const gm_file *f) { return &f->info; }

const char *gm_tensor_type_name(uint32_t type) { return gm_type_name(type); }

/* ---- metadata as text ---- */

static void put_str(gm_strbuf *o, gm_gguf_str s, uint64_t max)
{
    gm_strbuf_putc(o, '\'');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '\n')
            gm_strbuf_puts(o, "\\n");
        else if (c == '\'' || c == '\\')
            gm_strbuf_putf(o, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            gm_strbuf_putf(o, "\\x%02x", c);
        else
            gm_strbuf_putc(o, (char)c);
    }
    if (s.len > max)
        gm_strbuf_putf(o, "...(%" PRIu64 " bytes)", s.len);
    gm_strbuf_putc(o, '\'');
}

static void put_arr(gm_strbuf *o, const gm_gguf_arr *a, bool full, int depth)
{
    uint64_t shown = full ? a->n : (a->n < 8 ? a->n : 8);
    gm_strbuf_putf(o, "[%s x %" PRIu64 "] [", gm_gguf_vtype_name(a->elem_type), a->n);
    for (uint64_t i = 0; i < shown; i++) {
        if (i)
            gm_strbuf_puts(o, ", ");
        uint64_t u;
        int64_t s;
        double d;
        gm_gguf_str str;
        gm_gguf_arr sub;
        switch (a->elem_type) {
        case GM_GGUF_STRING:
            if (gm_gguf_arr_str(a, i, &str) == 0)
                put_str(o, str, full ? UINT64_MAX : 64);
            break;
        case GM_GGUF_ARRAY:
            if (depth < 4 && gm_gguf_arr_sub(a, i, &sub) == 0)
                put_arr(o, &sub, full, depth + 1);
            break;
        case GM_GGUF_F32:
        case GM_GGUF_F64:
            if (gm_gguf_arr_f64(a, i, &d) == 0)
                gm_strbuf_putf(o, "%g", d);
            break;
        case GM_GGUF_BOOL:
            gm_strbuf_puts(o, a->data[i] ? "true" : "false");
            break;
        case GM_GGUF_I8:
        case GM_GGUF_I16:
        case GM_GGUF_I32:
        case GM_GGUF_I64:
            if (gm_gguf_arr_i64(a, i, &s) == 0)
                gm_strbuf_putf(o, "%" PRId64, s);
            break;
        default:
            if (gm_gguf_arr_u64(a, i, &u) == 0)
                gm_strbuf_putf(o, "%" PRIu64, u);
            break;
        }
    }
    if (shown < a->n)
        gm_strbuf_puts(o, ", ...");
    gm_strbuf_putc(o, ']');
}

static void put_value(gm_strbuf *o, const gm_gguf *g, uint64_t i, bool full)
{
    uint64_t u;
    int64_t s;
    double d;
    bool b;
    gm_gguf_str str;
    gm_gguf_arr arr;
    switch (gm_gguf_kv_type(g, i)) {
    case GM_GGUF_STRING:
        if (gm_gguf_kv_str(g, i, &str) == 0)
            put_str(o, str, full ? UINT64_MAX : 256);
        break;
    case GM_GGUF_ARRAY:
        if (gm_gguf_kv_arr(g, i, &arr) == 0)
            put_arr(o, &arr, full, 0);
        break;
    case GM_GGUF_BOOL:
        if (gm_gguf_kv_bool(g, i, &b) == 0)
            gm_strbuf_puts(o, b ? "true" : "false");
        break;
    case GM_GGUF_F32:
    case GM_GGUF_F64:
        if (gm_gguf_kv_f64(g, i, &d) == 0)
            gm_strbuf_putf(o, "%.9g", d);
        break;
    case GM_GGUF_I8:
    case GM_GGUF_I16:
    case GM_GGUF_I32:
    case GM_GGUF_I64:
        if (gm_gguf_kv_i64(g, i, &s) == 0)
            gm_strbuf_putf(o, "%" PRId64, s);
        break;
    default:
        if (gm_gguf_kv_u64(g, i, &u) == 0)
            gm_strbuf_putf(o, "%" PRIu64, u);
        break;
    }
}

void gm_file_kv_clear(gm_file_kv *kv)
{
    if (!kv)
        return;
    free(kv->key);
    free(kv->value);
    memset(kv, 0, sizeof *kv);
}

int gm_file_kv_at(const gm_file *f, uint64_t i, unsigned flags, gm_file_kv *out, gm_err *err)
{
    memset(out, 0, sizeof *out);
    if (i >= f->info.n_kv)
        return gm_err_set(err, GM_ERANGE, "%s: metadata entry %" PRIu64 " of %" PRIu64, f->info.path, i,
                          f->info.n_kv);
    gm_gguf_str k = gm_gguf_kv_key(f->g, i);
    size_t klen = strnlen(k.ptr, (size_t)k.len); /* a key holding a NUL byte ends there */
    out->key = malloc(klen + 1);
    if (!out->key)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    memcpy(out->key, k.ptr, klen);
    out->key[klen] = '\0';
    out->type = gm_gguf_vtype_name(gm_gguf_kv_type(f->g, i));
    gm_strbuf o = GM_STRBUF_INIT;
    put_value(&o, f->g, i, (flags & GM_FILE_KV_FULL) != 0);
    out->value = gm_strbuf_take(&o);
    if (!out->value) {
        gm_file_kv_clear(out);
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    }
    return 0;
}

int gm_file_tensor_at(const gm_file *f, uint64_t i, gm_file_tensor *out, gm_err *err)
{
    memset(out, 0, sizeof *out);
    if (i >= f->info.n_tensors)
        return gm_err_set(err, GM_ERANGE, "%s: tensor %" PRIu64 " of %" PRIu64, f->info.path, i, f->info.n_tensors);
    const gm_gguf_tensor *t = gm_gguf_tensor_at(f->g, i);
    out->name = t->name;
    out->type = gm_type_name(t->type);
    out->n_dims = t->n_dims;
    for (uint32_t d = 0; d < GM_FILE_MAX_DIMS; d++)
        out->ne[d] = t->ne[d];
    out->n_bytes = t->n_bytes;
    out->part = t->part;
    out->file_offset = t->file_offset;
    out->cls = "";
    if (f->described && i < f->desc.n_tensors) {
        const gm_tensor_desc *td = &f->desc.tensors[i];
        out->cls = td->cls == GM_TC_EVERY_TOKEN ? gm_tensor_group_name(td->group) : gm_tensor_class_name(td->cls);
    }
    return 0;
}

/* ---- the plan ---- */

const char *gm_plan_verdict_name(gm_plan_verdict v) { return gm_verdict_name((gm_verdict)v); }

void gm_file_plan_opts_default(gm_file_plan_opts *o)
{
    memset(o, 0, sizeof *o);
    gm_tuning_default(&o->tuning);
    o->kv_bits = 16;
}

static void plan_out(const gm_plan *p, gm_file_plan *o)
{
    memset(o, 0, sizeof *o);
    o->file_bytes = p->file_bytes;
    o->every_token_bytes = p->every_token_bytes;
    o->expert_bytes = p->expert_bytes;
    o->lookup_table_bytes = p->lookup_bytes;
    o->mtp_bytes = p->mtp_bytes;
    o->attention_bytes = p->group_bytes[GM_TG_ATTENTION];
    o->shared_experts_bytes = p->group_bytes[GM_TG_SHARED_EXPERTS];
    o->dense_ffn_and_routers_bytes = p->group_bytes[GM_TG_DENSE_FFN_ROUTERS];
    o->embeddings_bytes = p->group_bytes[GM_TG_EMBEDDINGS];
    o->output_head_bytes = p->group_bytes[GM_TG_OUTPUT];
    o->other_bytes = p->group_bytes[GM_TG_OTHER];
    o->n_moe_layers = p->n_moe_layers;
    o->n_experts = p->n_experts;
    o->n_experts_used = p->n_experts_used;
    o->is_moe = p->is_moe;
    o->ram_bytes = p->ram_bytes;
    o->avail_bytes = p->avail_bytes;
    o->avail_known = p->avail_known;
    o->host_floor_bytes = p->host_floor_bytes;
    o->host_overhead_bytes = p->host_overhead_bytes;
    o->ceiling_bytes = p->ceiling_bytes;
    o->kv_ctx = p->kv_ctx;
    o->kv_bits = p->kv_bits;
    o->prefill_chunk_tokens = p->prefill_chunk_tokens;
    o->kv_cache_bytes = p->kv_cache_bytes;
    o->prefill_chunk_bytes = p->prefill_chunk_bytes;
    o->prefill_pool_bytes = p->prefill_pool_bytes;
    o->kv_room_bytes = p->kv_room_bytes;
    o->arena_bytes = p->arena_bytes;
    o->arena_overridden = p->arena_overridden;
    o->arena_share = p->arena_share;
    o->arena_min_slots = p->arena_min_slots;
    o->prefill_ring_bytes = p->prefill_ring_bytes;
    o->ring_fits_arena = p->ring_fits_arena;
    o->cold_token_bytes = p->cold_token_bytes;
    o->vram_bytes = p->vram_bytes;
    o->vram_slot_bytes = p->vram_slot_bytes;
    o->vram_experts = p->vram_experts;
    o->n_routed_experts = p->n_routed_experts;
    o->vram_share = p->vram_share;
    o->ram_share = p->ram_share;
    o->ssd_share = p->ssd_share;
    o->vram_attn_layers = p->vram_attn_layers;
    o->vram_stage_slots = p->vram_stage_slots;
    o->vram_attn_bytes = p->vram_attn_bytes;
    o->vram_kv_bytes = p->vram_kv_bytes;
    o->verdict = (gm_plan_verdict)p->verdict;
    o->experts_in_memory_now = p->experts_in_memory_now;
    o->auto_mtp_off_now = p->auto_mtp_off_now;
    o->tables_from_file_now = p->tables_from_file_now;
    gm_plan_verdict_line(p, o->verdict_line, sizeof o->verdict_line);
    gm_plan_now_line(p, o->now_line, sizeof o->now_line);
}

int gm_file_plan_compute(const gm_file *f, const gm_file_plan_opts *opts, gm_file_plan *out, char **text,
                         gm_err *err)
{
    memset(out, 0, sizeof *out);
    if (text)
        *text = NULL;
    gm_file_plan_opts def;
    if (!opts) {
        gm_file_plan_opts_default(&def);
        opts = &def;
    }
    if (!f->described)
        return gm_err_set(err, f->desc_err.code ? f->desc_err.code : GM_EFORMAT, "%s", f->desc_err.msg);
    if (opts->kv_bits != 8 && opts->kv_bits != 16 && opts->kv_bits != 32)
        return gm_err_set(err, GM_EINVAL, "KV cache width %u bits: use 8, 16 or 32", opts->kv_bits);
    gm_sysinfo sys;
    int rc = gm_sysinfo_probe(&sys, opts->tuning.ram_gb, opts->tuning.avail_gb, err);
    if (rc)
        return rc;
    gm_plan_opts po;
    gm_plan_opts_default(&po);
    gm_plan_opts_tune(&po, &opts->tuning);
    po.kv_bits = opts->kv_bits;
    if (opts->prefill_step)
        po.prefill_step = opts->prefill_step;
    if (!(opts->vram_gb >= 0 && opts->vram_gb < 1e7))
        return gm_err_set(err, GM_EINVAL, "a VRAM tier of %g GB", opts->vram_gb);
    po.vram_bytes = (uint64_t)(opts->vram_gb * 1e9 + 0.5);
    gm_plan p;
    gm_plan_compute(&f->desc, &sys, &po, &p);
    plan_out(&p, out);
    out->streams = f->desc.n_moe_layers > 0 && (p.verdict == GM_VERDICT_STREAMS || p.verdict == GM_VERDICT_NO_ARENA);
    if (text && !(*text = gm_plan_text(&p, opts->text_indent ? opts->text_indent : "")))
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    return 0;
}

/* ---- formatting ---- */

void gm_format_bytes(uint64_t bytes, char *buf, size_t len)
{
    if (buf && len)
        gm_fmt_bytes(bytes, buf, len);
}

void gm_text_printable(char *s)
{
    if (s)
        gm_printable(s);
}
