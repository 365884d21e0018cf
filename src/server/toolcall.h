/* server/toolcall: tool calls in a model's generated text, in the format of its family.
 *
 * Owns: detecting a family's tool-call format from the chat template's source (the markers the
 * template renders calls with), splitting generated text into the content outside the call
 * markup and the calls (name plus arguments as JSON object text), and, while streaming, how much
 * of the text so far cannot be the start of a call and so can be shown at once.
 *
 * Invariants: the parsers read only the len bytes given (text need not be NUL-terminated) and
 * never fail on what a model wrote: markup that does not parse stays in the content as it was.
 * Only an allocation failure is an error. The arguments of every call returned are a JSON object
 * text that jansson parses; where the model wrote JSON, its exact bytes are kept (numbers are not
 * reformatted).
 *
 * Threads: any; no state outside the arguments.
 */
#ifndef GM_SERVER_TOOLCALL_H
#define GM_SERVER_TOOLCALL_H

#include <stddef.h>

#include "gmlx.h"

typedef enum gm_tc_format {
    GM_TC_NONE = 0,
    /* Qwen2.5/Qwen3/QwQ/Hermes/Granite 4: <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, a block
     * per call ("arguments" may also be a JSON string holding the object, "parameters" stands for it) */
    GM_TC_HERMES,
    /* Qwen3-Coder, Qwen3.5, Nemotron 3, Step 3.5:
     * <tool_call>\n<function=N>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call> */
    GM_TC_QWEN3_CODER,
    /* gpt-oss: [<|start|>assistant]<|channel|>commentary to=functions.N [<|constrain|>]json<|message|>{...}<|call|>,
     * or in the template's order <|start|>assistant to=functions.N<|channel|>commentary json<|message|>... */
    GM_TC_HARMONY,
    /* DeepSeek V3.1: <｜tool▁calls▁begin｜>(<｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>)+<｜tool▁calls▁end｜>;
     * V3, R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜> */
    GM_TC_DEEPSEEK,
    /* GLM-4.5/4.6/4.7 (also Ling, Laguna, Spark):
     * <tool_call>N\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...</tool_call> */
    GM_TC_GLM,
    /* Kimi-K2: <|tool_calls_section_begin|>(<|tool_call_begin|>functions.N:IDX<|tool_call_argument_begin|>{...}
     * <|tool_call_end|>)+<|tool_calls_section_end|> */
    GM_TC_KIMI,
    /* MiniMax-M2: <minimax:tool_call>\n(<invoke name="N">\n<parameter name="K">V</parameter>\n</invoke>\n)+
     * </minimax:tool_call> */
    GM_TC_MINIMAX,
} gm_tc_format;

/* The format a chat template renders tool calls in, from the markers its source contains (the
 * most specific first: MiniMax, Kimi, DeepSeek, harmony, GLM's <arg_key>, Qwen3-Coder's
 * <function= with <tool_call>, then plain <tool_call>). Templates of formats not listed above
 * (MiniMax-M3, DeepSeek V3.2's DSML, Llama 3, Mistral) give GM_TC_NONE. Only when the source is
 * NULL or has no marker at all does arch (general.architecture, may be NULL) decide. */
gm_tc_format gm_tc_detect(const char *template_src, const char *arch);

/* "none", "hermes", "qwen3-coder", "harmony", "deepseek", "glm", "kimi", "minimax". */
const char *gm_tc_format_name(gm_tc_format f);

typedef struct gm_tool_call {
    char *id;        /* "call_" + 16 hex digits derived from the text (Kimi: its own "functions.N:IDX") */
    char *name;
    char *arguments; /* a JSON object text */
} gm_tool_call;

/* Splits text[0..len) into the content outside tool-call markup and the calls, in order.
 * No call found: *n_calls 0, *calls NULL and *content a copy of the text. Calls found: *content
 * is the text outside them less trailing whitespace (so what gm_tc_safe_prefix let through while
 * streaming is a prefix of it, or whitespace past its end). A block (a DeepSeek, Kimi or MiniMax
 * section is taken whole) that does not parse stays in the content. Parameters written as text
 * (Qwen3-Coder, GLM, MiniMax) become JSON values: a value that parses as JSON (number,
 * true/false/null, string, object, array) is taken as that, else it is a string; but when
 * tools_json (the request's OpenAI tools array, or Anthropic's [{name, input_schema}]; may be
 * NULL, or invalid and then ignored) declares the parameter's type as string it is always a
 * string, and a declared boolean or null also takes Python's True/False/None. *content is
 * malloc'd and NUL-terminated; free the calls with gm_tc_free. Returns 0, or GM_ENOMEM (then
 * nothing is left to free; GM_EINVAL when an output pointer is NULL). */
int gm_tc_parse(gm_tc_format f, const char *text, size_t len, const char *tools_json, char **content,
                gm_tool_call **calls, size_t *n_calls, gm_err *err);

void gm_tc_free(gm_tool_call *calls, size_t n);

/* While streaming: the length of the prefix of text[0..len) that can be shown as content now:
 * up to the first complete start marker of format f, less a tail that is the beginning of one
 * (so a server holds back only a possible marker). Harmony holds back every message header
 * until its <|message|> shows it has no "to=functions." recipient. GM_TC_NONE: len. */
size_t gm_tc_safe_prefix(gm_tc_format f, const char *text, size_t len);

#endif
