/* gmlx inspect: prints a GGUF file's metadata and tensor table, like a GGUF dump. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "model/model.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx inspect MODEL.gguf [--no-tensors] [--full]\n\n"
            "Prints the metadata and the tensor table of a GGUF file (all parts of a split file):\n"
            "each tensor's name, type, dims (innermost first), bytes, offset and the class the\n"
            "streaming plan gives it (every-token group, expert, lookup or mtp).\n\n"
            "options:\n"
            "  --no-tensors  print the metadata only\n"
            "  --full        print every element of long arrays (default: the first 8)\n"
            "  -h, --help    this help\n");
}

static void print_str(gm_gguf_str s, uint64_t max)
{
    putchar('\'');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\'' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    if (s.len > max)
        printf("...(%" PRIu64 " bytes)", s.len);
    putchar('\'');
}

static void print_arr(const gm_gguf_arr *a, bool full, int depth)
{
    uint64_t shown = full ? a->n : (a->n < 8 ? a->n : 8);
    printf("[%s x %" PRIu64 "] [", gm_gguf_vtype_name(a->elem_type), a->n);
    for (uint64_t i = 0; i < shown; i++) {
        if (i)
            fputs(", ", stdout);
        uint64_t u;
        int64_t s;
        double d;
        gm_gguf_str str;
        gm_gguf_arr sub;
        switch (a->elem_type) {
        case GM_GGUF_STRING:
            if (gm_gguf_arr_str(a, i, &str) == 0)
                print_str(str, full ? UINT64_MAX : 64);
            break;
        case GM_GGUF_ARRAY:
            if (depth < 4 && gm_gguf_arr_sub(a, i, &sub) == 0)
                print_arr(&sub, full, depth + 1);
            break;
        case GM_GGUF_F32:
        case GM_GGUF_F64:
            if (gm_gguf_arr_f64(a, i, &d) == 0)
                printf("%g", d);
            break;
        case GM_GGUF_BOOL:
            printf("%s", a->data[i] ? "true" : "false");
            break;
        case GM_GGUF_I8:
        case GM_GGUF_I16:
        case GM_GGUF_I32:
        case GM_GGUF_I64:
            if (gm_gguf_arr_i64(a, i, &s) == 0)
                printf("%" PRId64, s);
            break;
        default:
            if (gm_gguf_arr_u64(a, i, &u) == 0)
                printf("%" PRIu64, u);
            break;
        }
    }
    if (shown < a->n)
        fputs(", ...", stdout);
    putchar(']');
}

int gm_cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool tensors = true, full = false;
    for (int i = 1; i < argc; i++) {
        if (gm_cli_is_help(argv[i])) {
            help(stdout);
            return GM_EXIT_OK;
        } else if (strcmp(argv[i], "--no-tensors") == 0) {
            tensors = false;
        } else if (strcmp(argv[i], "--full") == 0) {
            full = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            gm_cli_error("inspect", "unknown option '%s' (see gmlx inspect --help)", argv[i]);
            return GM_EXIT_USAGE;
        } else if (!path) {
            path = argv[i];
        } else {
            gm_cli_error("inspect", "one model file at a time");
            return GM_EXIT_USAGE;
        }
    }
    if (!path) {
        gm_cli_error("inspect", "no model file given (see gmlx inspect --help)");
        return GM_EXIT_USAGE;
    }
    gm_err err = {0};
    gm_gguf *g = NULL;
    if (gm_gguf_open(&g, path, &err) != 0) {
        gm_cli_error("inspect", "%s", err.msg);
        return GM_EXIT_USAGE;
    }
    printf("# %s: GGUF v%u, %u part(s), %" PRIu64 " bytes, alignment %u\n", path, gm_gguf_version(g),
           gm_gguf_n_parts(g), gm_gguf_total_size(g), gm_gguf_alignment(g));
    printf("\n## metadata (%" PRIu64 " keys)\n", gm_gguf_n_kv(g));
    for (uint64_t i = 0; i < gm_gguf_n_kv(g); i++) {
        gm_gguf_str k = gm_gguf_kv_key(g, i);
        gm_gguf_vtype t = gm_gguf_kv_type(g, i);
        printf("%.*s = ", (int)k.len, k.ptr);
        uint64_t u;
        int64_t s;
        double d;
        bool b;
        gm_gguf_str str;
        gm_gguf_arr arr;
        switch (t) {
        case GM_GGUF_STRING:
            if (gm_gguf_kv_str(g, i, &str) == 0)
                print_str(str, full ? UINT64_MAX : 256);
            break;
        case GM_GGUF_ARRAY:
            if (gm_gguf_kv_arr(g, i, &arr) == 0)
                print_arr(&arr, full, 0);
            break;
        case GM_GGUF_BOOL:
            if (gm_gguf_kv_bool(g, i, &b) == 0)
                printf("%s", b ? "true" : "false");
            break;
        case GM_GGUF_F32:
        case GM_GGUF_F64:
            if (gm_gguf_kv_f64(g, i, &d) == 0)
                printf("%.9g", d);
            break;
        case GM_GGUF_I8:
        case GM_GGUF_I16:
        case GM_GGUF_I32:
        case GM_GGUF_I64:
            if (gm_gguf_kv_i64(g, i, &s) == 0)
                printf("%" PRId64, s);
            break;
        default:
            if (gm_gguf_kv_u64(g, i, &u) == 0)
                printf("%" PRIu64, u);
            break;
        }
        printf("  (%s)\n", gm_gguf_vtype_name(t));
    }
    if (tensors) {
        gm_model_desc m;
        bool have_desc = gm_model_describe(g, &m, &err) == 0;
        printf("\n## tensors (%" PRIu64 "): name, type, dims innermost first, bytes, part:offset, class\n",
               gm_gguf_n_tensors(g));
        for (uint64_t i = 0; i < gm_gguf_n_tensors(g); i++) {
            const gm_gguf_tensor *t = gm_gguf_tensor_at(g, i);
            printf("%s\t%s\t[", t->name, gm_type_name(t->type));
            for (uint32_t d = 0; d < t->n_dims; d++)
                printf("%s%" PRIu64, d ? ", " : "", t->ne[d]);
            printf("]\t%" PRIu64 "\t%u:%" PRIu64 "\t", t->n_bytes, t->part, t->file_offset);
            if (have_desc) {
                const gm_tensor_desc *td = &m.tensors[i];
                printf("%s", td->cls == GM_TC_EVERY_TOKEN ? gm_tensor_group_name(td->group)
                                                          : gm_tensor_class_name(td->cls));
            }
            putchar('\n');
        }
        if (have_desc)
            gm_model_desc_free(&m);
        else
            fprintf(stderr, "gmlx inspect: %s\n", err.msg);
    }
    gm_gguf_close(g);
    return GM_EXIT_OK;
}
