/* gmlx tokenize: the token ids of a text, space-separated on one line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx tokenize MODEL.gguf [--text TEXT | -f FILE] [--bos] [--no-special]\n\n"
            "Prints the token ids of the text, space-separated, on one line. Special-token text\n"
            "(such as <|im_start|>) is parsed as the special token unless --no-special is given.\n"
            "BOS is not added unless --bos is given.\n\n"
            "options:\n"
            "  --text TEXT   the text (default: standard input)\n"
            "  -f FILE       read the text from FILE\n"
            "  --bos         add BOS (and EOS) where the vocabulary asks for them\n"
            "  --no-special  treat special-token text as plain text\n"
            "  -h, --help    this help\n");
}

int gm_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL;
    bool bos = false, special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (gm_cli_is_help(a)) {
            help(stdout);
            return GM_EXIT_OK;
        } else if (strcmp(a, "--text") == 0 || strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) {
            if (!v) {
                gm_cli_error("tokenize", "%s needs a value", a);
                return GM_EXIT_USAGE;
            }
            text = v, i++;
        } else if (strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) {
            if (!v) {
                gm_cli_error("tokenize", "%s needs a file", a);
                return GM_EXIT_USAGE;
            }
            file = v, i++;
        } else if (strcmp(a, "--bos") == 0) {
            bos = true;
        } else if (strcmp(a, "--no-special") == 0) {
            special = false;
        } else if (a[0] == '-' && a[1]) {
            gm_cli_error("tokenize", "unknown option '%s' (see gmlx tokenize --help)", a);
            return GM_EXIT_USAGE;
        } else if (!model) {
            model = a;
        } else {
            gm_cli_error("tokenize", "one model file at a time");
            return GM_EXIT_USAGE;
        }
    }
    if (!model) {
        gm_cli_error("tokenize", "no model file given (see gmlx tokenize --help)");
        return GM_EXIT_USAGE;
    }
    if (text && file) {
        gm_cli_error("tokenize", "give --text or -f, not both");
        return GM_EXIT_USAGE;
    }
    size_t len = 0;
    char *owned = NULL;
    if (!text) {
        owned = gm_cli_read_text("tokenize", file, &len);
        if (!owned)
            return GM_EXIT_USAGE;
        text = owned;
    } else {
        len = strlen(text);
    }
    gm_err err = {0};
    gm_vocab *v = NULL;
    int32_t *ids = NULL;
    int status = GM_EXIT_USAGE;
    unsigned flags = (bos ? GM_TOKENIZE_ADD_SPECIAL : 0) | (special ? GM_TOKENIZE_PARSE_SPECIAL : 0);
    size_t n = 0;
    if (gm_vocab_open(&v, model, &err) != 0 || gm_tokenize(v, text, len, flags, &ids, &n, &err) != 0) {
        gm_cli_error("tokenize", "%s", err.msg);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    status = GM_EXIT_OK;
done:
    free(ids);
    free(owned);
    gm_vocab_free(v);
    return status;
}
