/* gmlx template: a chat template rendered for a conversation, printed exactly (nothing added),
 * the way run, chat and the server render it. Uses only the public API. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatfmt.h"
#include "cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx template MODEL.gguf|--chat-template-file F --messages F.json [--tools F.json]\n"
            "                     [--add-generation-prompt] [--var NAME=JSON]... [--now SECONDS]\n\n"
            "Prints a chat template rendered for a conversation, byte for byte, with nothing added:\n"
            "what run, chat and serve send the model. The template is the model's\n"
            "(tokenizer.chat_template) or the Jinja file given; it renders as Hugging Face\n"
            "transformers renders apply_chat_template. bos_token and eos_token are the model's\n"
            "(empty with only a template file); --var sets them or any other variable.\n\n"
            "options:\n"
            "  --chat-template-file F   the template to render (instead of the model's)\n"
            "  --messages F.json        the conversation: a list of messages ({\"role\", \"content\",\n"
            "                           \"reasoning_content\", \"tool_calls\", ...}), or an object with\n"
            "                           a \"messages\" list (and \"tools\"), such as a request body or\n"
            "                           what chat's /save writes; - reads standard input\n"
            "  --tools F.json           tool definitions (a list), passed as tools\n"
            "  --add-generation-prompt  end with the assistant's turn opened (as run and chat do)\n"
            "  --var NAME=JSON          a template variable, e.g. --var enable_thinking=false or\n"
            "                           --var 'bos_token=\"<s>\"' (repeatable)\n"
            "  --now SECONDS            strftime_now's time, in seconds since 1970 UTC (default: now)\n"
            "  -h, --help               this help\n\n"
            "Exit status: 0 printed; 1 the template refused the conversation (raise_exception) or\n"
            "failed to render; 2 bad usage or unreadable input.\n");
}

static json_t *load_json(const char *what, const char *path)
{
    size_t len = 0;
    char *text = gm_cli_read_text("template", strcmp(path, "-") == 0 ? NULL : path, &len);
    if (!text)
        return NULL;
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!j)
        gm_cli_error("template", "%s %s: not JSON: line %d column %d: %s", what, path, je.line, je.column, je.text);
    return j;
}

int gm_cmd_template(int argc, char **argv)
{
    const char *model = NULL, *tmpl_file = NULL, *msgs_file = NULL, *tools_file = NULL;
    bool add_gen = false;
    long long now = -1;
    json_t *extra = json_object();
    int status = GM_EXIT_USAGE;
    gm_vocab *voc = NULL;
    gm_cli_tmpl tmpl = {0};
    json_t *msgs = NULL, *tools = NULL, *vars = NULL;
    char *out = NULL;
    if (!extra) {
        gm_cli_error("template", "out of memory");
        return GM_EXIT_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **opt = strcmp(a, "--chat-template-file") == 0 ? &tmpl_file
                           : strcmp(a, "--messages") == 0         ? &msgs_file
                           : strcmp(a, "--tools") == 0            ? &tools_file
                                                                  : NULL;
        if (gm_cli_is_help(a)) {
            help(stdout);
            status = GM_EXIT_OK;
            goto done;
        } else if (opt) {
            if (!v) {
                gm_cli_error("template", "%s needs a file", a);
                goto done;
            }
            *opt = v, i++;
        } else if (strcmp(a, "--add-generation-prompt") == 0) {
            add_gen = true;
        } else if (strcmp(a, "--var") == 0) {
            const char *eq = v ? strchr(v, '=') : NULL;
            if (!eq || eq == v) {
                gm_cli_error("template", "--var takes NAME=JSON, e.g. --var enable_thinking=false");
                goto done;
            }
            json_error_t je;
            json_t *val = json_loads(eq + 1, JSON_DECODE_ANY, &je);
            if (!val) {
                gm_cli_error("template", "--var %s: the value is not JSON (%s); a string needs quotes: "
                             "--var '%.*s=\"text\"'", v, je.text, (int)(eq - v), v);
                goto done;
            }
            json_object_setn_new(extra, v, (size_t)(eq - v), val);
            i++;
        } else if (strcmp(a, "--now") == 0) {
            uint32_t s = 0;
            if (!gm_cli_parse_u32("template", a, v, 0, UINT32_MAX, &s))
                goto done;
            now = s, i++;
        } else if (a[0] == '-' && a[1]) {
            gm_cli_error("template", "unknown option '%s' (see gmlx template --help)", a);
            goto done;
        } else if (!model) {
            model = a;
        } else {
            gm_cli_error("template", "one model file at a time ('%s' and '%s')", model, a);
            goto done;
        }
    }
    if (!model && !tmpl_file) {
        gm_cli_error("template", "give a model file or --chat-template-file (see gmlx template --help)");
        goto done;
    }
    if (!msgs_file) {
        gm_cli_error("template", "--messages F.json is needed (see gmlx template --help)");
        goto done;
    }
    gm_err err = {0};
    if (model && gm_vocab_open(&voc, model, &err) != 0) {
        gm_cli_error("template", "%s", err.msg);
        goto done;
    }
    int have = gm_cli_tmpl_load("template", voc, tmpl_file, &tmpl);
    if (have < 0)
        goto done;
    if (have == 0) {
        gm_cli_error("template", "%s carries no chat template (--chat-template-file gives one)", model);
        status = GM_EXIT_NO;
        goto done;
    }
    json_t *doc = load_json("--messages", msgs_file);
    if (!doc)
        goto done;
    if (json_is_object(doc)) {
        msgs = json_incref(json_object_get(doc, "messages"));
        tools = json_incref(json_object_get(doc, "tools"));
        json_decref(doc);
    } else {
        msgs = doc;
    }
    if (!json_is_array(msgs)) {
        gm_cli_error("template", "--messages %s: a list of messages (or an object with one under \"messages\") "
                     "is needed", msgs_file);
        goto done;
    }
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *mi = json_array_get(msgs, i);
        if (!json_is_object(mi) || !json_is_string(json_object_get(mi, "role"))) {
            gm_cli_error("template", "--messages %s: message %zu is not an object with a \"role\" string",
                         msgs_file, i + 1);
            goto done;
        }
    }
    if (tools_file) {
        json_decref(tools);
        if (!(tools = load_json("--tools", tools_file)))
            goto done;
        if (!json_is_array(tools)) {
            gm_cli_error("template", "--tools %s: a list of tool definitions is needed", tools_file);
            goto done;
        }
    }
    vars = gm_cli_vars(voc, msgs, add_gen, NULL);
    if (!voc) {
        json_object_set_new(vars, "bos_token", json_string(""));
        json_object_set_new(vars, "eos_token", json_string(""));
    }
    if (tools)
        json_object_set(vars, "tools", tools);
    json_object_update(vars, extra);
    char *js = json_dumps(vars, JSON_COMPACT);
    if (!js) {
        gm_cli_error("template", "out of memory");
        goto done;
    }
    gm_template_opts to = {.now_set = now >= 0, .now_unix_s = now};
    size_t len = 0;
    int rc = gm_template_render(tmpl.t, js, strlen(js), &to, &out, &len, &err);
    free(js);
    if (rc != 0) {
        gm_cli_error("template", "%s: %s", tmpl.origin, err.msg);
        status = rc == GM_ENOMEM ? GM_EXIT_USAGE : GM_EXIT_NO;
        goto done;
    }
    if (fwrite(out, 1, len, stdout) != len)
        goto done; /* main reports the write error */
    status = GM_EXIT_OK;
done:
    free(out);
    json_decref(vars);
    json_decref(msgs);
    json_decref(tools);
    json_decref(extra);
    gm_cli_tmpl_free(&tmpl);
    gm_vocab_free(voc);
    return status;
}
