/* gmlx inspect: prints a GGUF file's metadata and tensor table, like a GGUF dump. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

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
    gm_file *g = NULL;
    if (gm_file_open(&g, path, &err) != 0) {
        gm_cli_error("inspect", "%s", err.msg);
        return GM_EXIT_USAGE;
    }
    const gm_file_info *in = gm_file_get_info(g);
    printf("# %s: GGUF v%u, %u part(s), %" PRIu64 " bytes, alignment %u\n", path, in->gguf_version, in->n_parts,
           in->file_bytes, in->alignment);
    printf("\n## metadata (%" PRIu64 " keys)\n", in->n_kv);
    for (uint64_t i = 0; i < in->n_kv; i++) {
        gm_file_kv kv;
        if (gm_file_kv_at(g, i, full ? GM_FILE_KV_FULL : 0, &kv, &err) != 0) {
            gm_cli_error("inspect", "%s", err.msg);
            gm_file_close(g);
            return GM_EXIT_USAGE;
        }
        printf("%s = %s  (%s)\n", kv.key, kv.value, kv.type);
        gm_file_kv_clear(&kv);
    }
    if (tensors) {
        printf("\n## tensors (%" PRIu64 "): name, type, dims innermost first, bytes, part:offset, class\n",
               in->n_tensors);
        for (uint64_t i = 0; i < in->n_tensors; i++) {
            gm_file_tensor t;
            if (gm_file_tensor_at(g, i, &t, &err) != 0)
                break;
            printf("%s\t%s\t[", t.name, t.type);
            for (uint32_t d = 0; d < t.n_dims; d++)
                printf("%s%" PRIu64, d ? ", " : "", t.ne[d]);
            printf("]\t%" PRIu64 "\t%u:%" PRIu64 "\t%s\n", t.n_bytes, t.part, t.file_offset, t.cls);
        }
        if (!in->described)
            fprintf(stderr, "gmlx inspect: %s\n", in->describe_error);
    }
    gm_file_close(g);
    return GM_EXIT_OK;
}
