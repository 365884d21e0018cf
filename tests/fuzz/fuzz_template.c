/* fuzz_template: libFuzzer target of the chat-template renderer (src/template). The input is a
 * template source (model files carry them, so they are hostile); when it parses, it is
 * rendered against a small fixed conversation with tight limits, so that loops, recursion and
 * blow-ups end in GM_ERANGE quickly. Any crash, leak or sanitizer report is a finding. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "template/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const ctx_json =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u6771\\u4eac \\ud83d\\ude00 \\\"q\\\"\"},"
    " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"think\","
    "  \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\","
    "   \"arguments\": {\"x\": 0.1, \"y\": [1, 2], \"z\": {\"k\": \"v\"}}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"{\\\"ok\\\": true}\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    "  \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": [\"number\", \"null\"]},"
    "   \"e\": {\"type\": \"string\", \"enum\": [\"a\", \"b\"]}}, \"required\": [\"x\"]}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"<s>\","
    " \"eos_token\": \"</s>\", \"n\": 7, \"f\": 2.5, \"s\": \"Hello, World\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *ctx;
    if (!ctx)
        ctx = json_loads(ctx_json, 0, NULL);
    gm_tmpl *t = NULL;
    gm_err err = {0};
    if (gm_tmpl_parse(&t, (const char *)data, size, &err) == 0) {
        gm_tmpl_render_opts o;
        gm_tmpl_render_opts_default(&o);
        o.limits.max_steps = 20000;
        o.limits.max_output_bytes = 1 << 16;
        o.limits.max_depth = 64;
        o.now_set = true;
        o.now_unix_s = 1773480413;
        char *out = NULL;
        size_t n = 0;
        gm_err rerr = {0};
        gm_tmpl_render(t, ctx, &o, &out, &n, &rerr);
        free(out);
        gm_tmpl_free(t);
    }
    return 0;
}
