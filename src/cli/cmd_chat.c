/* gmlx chat: a conversation in turns with a model, through its chat template. On a terminal a
 * REPL (libedit: line editing and history), the answer streamed as it is generated, thinking
 * shown apart; from a pipe each input line is one user turn and stdout carries only the answers,
 * each followed by one line break. Each turn renders the whole conversation and evaluates only
 * what follows the longest prefix the session's cache already holds (the cache is rewound to
 * where the rendering differs, e.g. where a template dropped earlier reasoning). Uses only the
 * public API. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <editline/readline.h>

#include "chatfmt.h"
#include "cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: gmlx chat [MODEL.gguf] [-n N] [--temp T ...] [--system TEXT] [--no-think]\n"
            "                 [--reasoning show|hide|raw] [-c N] [streaming flags] [-v]\n\n"
            "Talks to a model in turns through its chat template (tokenizer.chat_template, or\n"
            "--chat-template-file). Without a model it runs the bundled one (%s).\n\n"
            "On a terminal: a prompt with line editing and history; the answer streams as it is\n"
            "generated, the model's thinking dimmed apart from it; Ctrl-C stops the answer (the\n"
            "chat goes on), Ctrl-D or /quit leaves. From a pipe: each input line is one user turn\n"
            "and stdout carries only the answers, each followed by one line break (thinking and\n"
            "notes go to stderr), so chat is scriptable. A line starting with / is a command\n"
            "(start it with // to send a text that starts with /):\n"
            "  /help  /clear  /retry  /undo  /system [TEXT|off]  /set NAME VALUE  /stats\n"
            "  /save FILE  /quit\n\n"
            "Each turn renders the whole conversation and evaluates only the tokens after the\n"
            "longest prefix the cache already holds, so a turn costs its own tokens.\n\n"
            "options:\n"
            "  -n, --n-predict N        tokens per answer at most (default 0: until the model stops\n"
            "                           or the context is full)\n"
            "  --system TEXT            the system message\n"
            "  --chat-template-file F   use the Jinja template in F instead of the model's\n"
            "  --no-think               turn thinking off where the template has a switch\n"
            "  --reasoning MODE         show (default: thinking shown apart from the answer), hide,\n"
            "                           or raw (the generated text as it is, markers included)\n"
            "  --temp T, --top-k N, --top-p P, --min-p P, --repeat-penalty R, --repeat-last-n N,\n"
            "  --seed S                 sampling, as for run (default temp 0.8, top-k 40, top-p\n"
            "                           0.95, min-p 0.05; seed from the clock)\n"
            "  -c, --ctx-size N         context in tokens (default 4096, at most the model's)\n"
            "  --kv-type f16|f32|q8_0, --kv-bits 16|32|8, --prefill-step-size N, -t N\n"
            "  --stream-experts, --stream-cpu, --stream-fast-disk M, and the lossy levers: as for\n"
            "                           run (gmlx run --help)\n"
            "  --ignore-eos             answers go on past end-of-generation tokens (until -n or\n"
            "                           the context is full)\n"
            "  --no-history             do not read or write the prompt history\n"
            "                           ($XDG_CACHE_HOME/gmlx/chat_history)\n"
            "  -v, --verbose            load details, and the streaming figures after each answer\n"
            "  -h, --help               this help\n",
            gm_cli_default_model());
    fprintf(f, "\n%s\n%s", gm_cli_lever_help, gm_cli_config_help);
}

typedef enum { R_SHOW = 0, R_HIDE, R_RAW } reasoning_mode;

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static bool buf_add(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

typedef struct chat {
    const char *model_path;
    gm_model *m;
    gm_session *s;
    const gm_vocab *voc;
    gm_cli_tmpl tmpl;
    json_t *msgs;        /* the conversation after the system message */
    char *system;        /* NULL: none */
    json_t *extra;       /* extra template variables (the thinking switch) */
    gm_sampling so;
    uint32_t max_tokens;
    gm_think_style style;
    reasoning_mode reasoning;
    bool tty_in, tty_out, verbose, ignore_eos;
    /* one answer */
    gm_think *think;
    buf raw, answer, thought;
    bool shown_thought, in_thought, out_failed;
    /* the session's totals */
    uint64_t turns, prompt_tokens, reused_tokens, gen_tokens;
    double prefill_s, decode_s;
} chat;

/* The session the Ctrl-C handler cancels while an answer is generated. */
static gm_session *volatile g_generating;

static void on_sigint(int sig)
{
    (void)sig;
    gm_session *s = g_generating;
    if (s)
        gm_session_cancel(s);
}

static void out(chat *c, const char *s, size_t n)
{
    if (n && fwrite(s, 1, n, stdout) != n)
        c->out_failed = true;
}

static void dim(chat *c, bool on)
{
    if (c->tty_out)
        out(c, on ? "\033[2m" : "\033[0m", on ? 4 : 4);
}

/* A span of the answer: reasoning or answer text, shown as the mode says. */
static void on_span(void *user, bool reasoning, const char *text, size_t len)
{
    chat *c = user;
    if (c->reasoning == R_RAW) { /* shown as it came (on_token); kept apart for the history */
        buf_add(reasoning ? &c->thought : &c->answer, text, len);
        return;
    }
    if (reasoning) {
        buf_add(&c->thought, text, len);
        if (c->reasoning == R_HIDE)
            return;
        if (!c->tty_in) { /* a pipe: stdout carries the answers only */
            fwrite(text, 1, len, stderr);
            c->shown_thought = true;
            return;
        }
        if (!c->in_thought) {
            dim(c, true);
            c->in_thought = true;
        }
        out(c, text, len);
        c->shown_thought = true;
        return;
    }
    buf_add(&c->answer, text, len);
    if (c->in_thought) {
        dim(c, false);
        c->in_thought = false;
    }
    if (c->shown_thought) {
        /* the answer starts on its own line after the thinking */
        size_t skip = 0;
        while (skip < len && (text[skip] == '\n' || text[skip] == ' '))
            skip++;
        if (skip == len)
            return;
        if (!c->tty_in)
            fputc('\n', stderr);
        else
            out(c, "\n\n", 2);
        c->shown_thought = false;
        text += skip, len -= skip;
    }
    out(c, text, len);
}

static bool on_token(void *user, int32_t token, const char *text, size_t len)
{
    chat *c = user;
    (void)token;
    buf_add(&c->raw, text, len);
    if (c->reasoning == R_RAW)
        out(c, text, len);
    gm_think_push(c->think, text, len, on_span, c);
    if (fflush(stdout) != 0)
        c->out_failed = true;
    return !c->out_failed;
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("[chat] ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* 1234 -> "1234", 12345 -> "12.3k" */
static const char *count_str(uint64_t n, char *b, size_t cap)
{
    if (n >= 10000)
        snprintf(b, cap, "%.1fk", (double)n / 1000);
    else
        snprintf(b, cap, "%llu", (unsigned long long)n);
    return b;
}

/* The conversation as the template sees it: the system message first. */
static json_t *all_messages(const chat *c)
{
    json_t *all = json_array();
    if (!all)
        return NULL;
    if (c->system) {
        json_t *s = json_object();
        json_object_set_new(s, "role", json_string("system"));
        json_object_set_new(s, "content", json_string(c->system));
        json_array_append_new(all, s);
    }
    json_array_extend(all, c->msgs);
    return all;
}

/* The answer as the conversation keeps it: the generated text as it is (templates find <think>
 * blocks in it themselves), or for harmony the final channel as content and the analysis as
 * thinking, the fields the gpt-oss template reads. */
static json_t *answer_message(const chat *c)
{
    if (c->style != GM_THINK_HARMONY)
        return gm_cli_message("assistant", c->raw.p ? c->raw.p : "", c->raw.len);
    json_t *m = gm_cli_message("assistant", c->answer.p ? c->answer.p : "", c->answer.len);
    if (m && c->thought.len)
        json_object_set_new(m, "thinking", json_stringn(c->thought.p, c->thought.len));
    return m;
}

/* Generates the answer to the conversation as it stands (its last message is the user's).
 * Returns 0 when an answer was added, -1 when the turn failed (said why; the conversation is as
 * before), -2 when stdout failed. */
static int turn(chat *c)
{
    json_t *msgs = all_messages(c);
    json_t *vars = msgs ? gm_cli_vars(c->voc, msgs, true, c->extra) : NULL;
    json_decref(msgs);
    if (!vars) {
        note("out of memory");
        return -1;
    }
    size_t len = 0;
    char *text = gm_cli_render("chat", &c->tmpl, vars, &len);
    json_decref(vars);
    if (!text)
        return -1;
    gm_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    if (gm_tokenize(c->voc, text, len, GM_TOKENIZE_PARSE_SPECIAL, &ids, &n, &err) != 0) {
        note("%s", err.msg);
        free(text);
        return -1;
    }
    const uint32_t n_ctx = gm_session_n_ctx(c->s);
    if (n == 0 || n >= n_ctx) {
        note("that turn does not fit: the conversation comes to %zu tokens and the context holds %u "
             "(/clear starts over; -c sets a larger context)", n, n_ctx);
        free(text);
        free(ids);
        return -1;
    }
    const bool inside = gm_think_prompt_open(c->style, text, len);
    free(text);
    uint32_t keep = 0;
    if (gm_session_reuse(c->s, ids, (uint32_t)n, &keep, &err) != 0) {
        note("%s", err.msg);
        free(ids);
        return -1;
    }
    c->raw.len = c->answer.len = c->thought.len = 0;
    c->shown_thought = c->in_thought = false;
    gm_think_free(c->think);
    c->think = NULL;
    if (gm_think_create(&c->think, c->style, inside, &err) != 0) {
        note("%s", err.msg);
        free(ids);
        return -1;
    }
    gm_generate_opts go;
    gm_generate_opts_default(&go);
    go.sampling = c->so;
    go.max_tokens = c->max_tokens;
    go.ignore_eog = c->ignore_eos;
    go.render_special = c->style != GM_THINK_NONE || c->reasoning == R_RAW;
    go.on_token = on_token;
    go.user = c;
    gm_generate_result res;
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    g_generating = c->s;
    int rc = gm_session_generate(c->s, ids + keep, (uint32_t)(n - keep), &go, &res, &err);
    g_generating = NULL;
    sigaction(SIGINT, &old, NULL);
    free(ids);
    if (rc != 0) {
        if (c->in_thought)
            dim(c, false);
        out(c, "\n", 1);
        note("%s", err.msg);
        return -1;
    }
    gm_think_flush(c->think, on_span, c);
    if (c->in_thought)
        dim(c, false);
    out(c, "\n", 1);
    if (fflush(stdout) != 0 || c->out_failed)
        return -2;
    json_t *a = answer_message(c);
    if (!a) {
        note("the answer is not valid UTF-8 text; it is left out of the conversation");
        return -1;
    }
    json_array_append_new(c->msgs, a);
    c->turns++;
    c->prompt_tokens += res.n_prompt;
    c->reused_tokens += keep;
    c->gen_tokens += res.n_generated;
    c->prefill_s += res.prefill_s;
    c->decode_s += res.decode_s;
    char b1[32], b2[32], b3[32];
    const uint32_t dec = res.n_generated > 1 ? res.n_generated - 1 : 0;
    note("prompt %s tok (%s reused) @ %.1f tok/s · ttft %.2fs · gen %s tok @ %.1f tok/s · ctx %u/%u",
         count_str(res.n_prompt, b1, sizeof b1), count_str(keep, b2, sizeof b2),
         res.prefill_s > 0 ? res.n_prompt / res.prefill_s : 0.0, res.ttft_s,
         count_str(res.n_generated, b3, sizeof b3), res.decode_s > 0 && dec ? dec / res.decode_s : 0.0,
         gm_session_pos(c->s), n_ctx);
    if (res.stop == GM_STOP_CANCEL)
        note("reply canceled - /retry regenerates it");
    else if (res.stop == GM_STOP_LENGTH)
        note("the answer stopped at the -n cap (%u tokens) - /set max 0 lets it run until the model stops",
             c->max_tokens);
    else if (res.stop == GM_STOP_CONTEXT)
        note("the context is full (%u tokens) - /clear starts over; -c sets a larger context", n_ctx);
    if (c->verbose) {
        char *st = gm_model_stats_text(c->m, GM_STATS_STREAM);
        if (st)
            fputs(st, stderr);
        free(st);
    }
    return 0;
}

/* Removes the last message when it has role. */
static bool pop_role(chat *c, const char *role)
{
    size_t n = json_array_size(c->msgs);
    if (!n)
        return false;
    const char *r = json_string_value(json_object_get(json_array_get(c->msgs, n - 1), "role"));
    if (!r || strcmp(r, role) != 0)
        return false;
    json_array_remove(c->msgs, n - 1);
    return true;
}

static bool save(const chat *c, const char *path)
{
    json_t *doc = json_object(), *msgs = all_messages(c);
    if (!doc || !msgs) {
        json_decref(doc);
        json_decref(msgs);
        note("out of memory");
        return false;
    }
    json_object_set_new(doc, "model", json_string(c->model_path));
    json_object_set_new(doc, "messages", msgs);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    int rc = json_dump_file(doc, tmp, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    json_decref(doc);
    if (rc != 0 || rename(tmp, path) != 0) {
        note("/save %s: cannot write: %s", path, strerror(errno));
        remove(tmp);
        return false;
    }
    note("conversation saved to %s (%zu messages)", path, json_array_size(c->msgs) + (c->system ? 1 : 0));
    return true;
}

static void cmd_help(void)
{
    note("commands:\n"
         "  /help                 this list\n"
         "  /clear                start the conversation over (the system message stays)\n"
         "  /retry                generate the last answer again\n"
         "  /undo                 remove the last exchange (your message and the answer)\n"
         "  /system [TEXT|off]    show, set or remove the system message (the conversation restarts)\n"
         "  /set NAME VALUE       temp, top_p, top_k, min_p, repeat_penalty, seed, max (0: no cap)\n"
         "  /set                  show the sampling settings\n"
         "  /stats                this session's totals and the streaming figures\n"
         "  /save FILE            write the conversation as JSON (gmlx template --messages reads it)\n"
         "  /quit, /exit          leave (also Ctrl-D)\n"
         "  //text                send text that starts with /");
}

static void show_set(const chat *c)
{
    note("sampling: temp=%g top_p=%g top_k=%d min_p=%g repeat_penalty=%g seed=%llu max=%u", c->so.temp,
         c->so.top_p, c->so.top_k, c->so.min_p, c->so.repeat_penalty, (unsigned long long)c->so.seed,
         c->max_tokens);
}

static void cmd_set(chat *c, const char *args)
{
    char name[32] = "", value[64] = "";
    if (sscanf(args, "%31s %63s", name, value) < 1) {
        show_set(c);
        return;
    }
    char *end = NULL;
    errno = 0;
    double x = strtod(value, &end);
    const bool num = value[0] && !errno && end && !*end;
    bool ok = num;
    if (!num)
        ;
    else if (strcmp(name, "temp") == 0 && x >= 0 && x <= 100)
        c->so.temp = (float)x;
    else if (strcmp(name, "top_p") == 0 && x >= 0 && x <= 1)
        c->so.top_p = (float)x;
    else if (strcmp(name, "min_p") == 0 && x >= 0 && x <= 1)
        c->so.min_p = (float)x;
    else if (strcmp(name, "top_k") == 0 && x >= 0 && x <= (1 << 24) && x == (int)x)
        c->so.top_k = (int32_t)x;
    else if (strcmp(name, "repeat_penalty") == 0 && x >= 0.01 && x <= 100)
        c->so.repeat_penalty = (float)x;
    else if (strcmp(name, "seed") == 0 && x >= 0 && x <= 4294967295.0 && x == (double)(uint64_t)x)
        c->so.seed = (uint64_t)x;
    else if (strcmp(name, "max") == 0 && x >= 0 && x <= (1 << 24) && x == (uint32_t)x)
        c->max_tokens = (uint32_t)x;
    else
        ok = false;
    if (!ok) {
        note("/set %s %s: give one of temp, top_p, top_k, min_p, repeat_penalty, seed, max and a value in "
             "its range (/help)", name, value);
        return;
    }
    show_set(c);
}

static void cmd_stats(chat *c)
{
    note("%llu answers; prompt %llu tokens evaluated (%llu reused from the cache) in %.2f s; %llu tokens "
         "generated in %.2f s; context %u/%u", (unsigned long long)c->turns,
         (unsigned long long)c->prompt_tokens, (unsigned long long)c->reused_tokens, c->prefill_s,
         (unsigned long long)c->gen_tokens, c->decode_s, gm_session_pos(c->s), gm_session_n_ctx(c->s));
    gm_stats st;
    gm_model_get_stats(c->m, &st);
    if (!st.streams)
        return;
    char *text = gm_model_stats_text(c->m, GM_STATS_STREAM | GM_STATS_LEVERS | GM_STATS_PROFILE | GM_STATS_GPU);
    if (text)
        fputs(text, stderr);
    free(text);
}

/* A line that starts with '/': 1 to leave, 0 to go on. */
static int command(chat *c, const char *line)
{
    char word[32] = "";
    size_t wl = strcspn(line + 1, " \t");
    snprintf(word, sizeof word, "%.*s", (int)(wl < 31 ? wl : 31), line + 1);
    const char *args = line + 1 + wl;
    while (*args == ' ' || *args == '\t')
        args++;
    if (strcmp(word, "quit") == 0 || strcmp(word, "exit") == 0)
        return 1;
    if (strcmp(word, "clear") == 0 || strcmp(word, "reset") == 0) {
        json_array_clear(c->msgs);
        if (c->tty_in && c->tty_out)
            out(c, "\033[H\033[2J", 7);
        note("conversation cleared");
    } else if (strcmp(word, "retry") == 0) {
        const bool had = pop_role(c, "assistant");
        size_t n = json_array_size(c->msgs);
        const char *r = n ? json_string_value(json_object_get(json_array_get(c->msgs, n - 1), "role")) : NULL;
        if (!r || strcmp(r, "user") != 0) {
            note("nothing to retry: no message of yours to answer");
            return 0;
        }
        (void)had;
        if (turn(c) == -2)
            return 1;
    } else if (strcmp(word, "undo") == 0) {
        const bool a = pop_role(c, "assistant"), u = pop_role(c, "user");
        if (a || u)
            note("removed the last exchange (%zu messages left)", json_array_size(c->msgs));
        else
            note("nothing to undo");
    } else if (strcmp(word, "system") == 0) {
        if (!*args) {
            note("system message: %s", c->system ? c->system : "(none)");
        } else {
            free(c->system);
            c->system = strcmp(args, "off") == 0 ? NULL : strdup(args);
            json_array_clear(c->msgs);
            note(c->system ? "system message set (conversation restarted)" : "system message removed "
                 "(conversation restarted)");
        }
    } else if (strcmp(word, "set") == 0) {
        cmd_set(c, args);
    } else if (strcmp(word, "stats") == 0) {
        cmd_stats(c);
    } else if (strcmp(word, "save") == 0) {
        if (!*args)
            note("/save needs a file name");
        else
            save(c, args);
    } else {
        if (strcmp(word, "help") != 0)
            note("unknown command /%s", word);
        cmd_help();
    }
    return 0;
}

/* One input line: a command, or a user turn. 1 to leave. */
static int input(chat *c, const char *line)
{
    if (line[0] == '/' && line[1] != '/')
        return command(c, line);
    if (line[0] == '/')
        line++; /* "//text" sends "/text" */
    if (!*line)
        return 0;
    json_t *u = gm_cli_message("user", line, strlen(line));
    if (!u) {
        note("that line is not valid UTF-8 text; it was not sent");
        return 0;
    }
    json_array_append_new(c->msgs, u);
    int rc = turn(c);
    if (rc == -1)
        pop_role(c, "user"); /* the conversation is as it was */
    return rc == -2;
}

/* $XDG_CACHE_HOME/gmlx/chat_history (default ~/.cache), its folder made; NULL when no home. */
static const char *history_path(char *p, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(p, cap, "%s/gmlx", xdg);
    else if (home && *home)
        snprintf(p, cap, "%s/.cache/gmlx", home);
    else
        return NULL;
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", p);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = '\0';
        mkdir(parent, 0700);
    }
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
        return NULL;
    size_t n = strlen(p);
    snprintf(p + n, cap - n, "/chat_history");
    return p;
}

static int repl(chat *c, bool history)
{
    char hp_buf[4096];
    const char *hp = history ? history_path(hp_buf, sizeof hp_buf) : NULL;
    if (c->tty_in) {
        using_history();
        stifle_history(1000);
        if (hp)
            read_history(hp);
    }
    int status = GM_EXIT_OK;
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        char *l;
        if (c->tty_in) {
            l = readline(">> ");
            if (!l) {
                fputc('\n', stderr);
                break;
            }
            if (*l)
                add_history(l);
        } else {
            ssize_t n = getline(&line, &cap, stdin);
            if (n < 0)
                break;
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                line[--n] = '\0';
            l = line;
        }
        int leave = input(c, l);
        if (c->tty_in)
            free(l);
        if (c->out_failed) {
            status = GM_EXIT_USAGE; /* main reports the write error */
            break;
        }
        if (leave)
            break;
    }
    free(line);
    if (c->tty_in && hp)
        write_history(hp);
    return status;
}

int gm_cmd_chat(int argc, char **argv)
{
    const char *model = NULL, *tmpl_file = NULL, *system = NULL, *config = NULL;
    uint32_t n_predict = 0, last_n = 64;
    gm_cli_load load = {.kv = GM_KV_F16};
    bool seed_set = false, verbose = false, no_think = false, history = true, ignore_eos = false;
    reasoning_mode rmode = R_SHOW;
    gm_sampling so;
    gm_sampling_default(&so);
    gm_cli_stream sflags = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int sf = gm_cli_stream_flag("chat", a, v, &sflags);
        if (sf == 0)
            sf = gm_cli_sampling_flag("chat", a, v, &so, &seed_set, &last_n);
        if (sf == 0)
            sf = gm_cli_load_flag("chat", a, v, &load);
        if (sf < 0)
            return GM_EXIT_USAGE;
        if (sf > 0) {
            i += sf - 1;
            continue;
        }
        bool ok = true;
        if (gm_cli_is_help(a)) {
            help(stdout);
            return GM_EXIT_OK;
        } else if (strcmp(a, "--system") == 0 || strcmp(a, "--system-prompt") == 0 ||
                   strcmp(a, "--chat-template-file") == 0) {
            if (!v) {
                gm_cli_error("chat", "%s needs a value", a);
                return GM_EXIT_USAGE;
            }
            *(a[2] == 's' ? &system : &tmpl_file) = v, i++;
        } else if (strcmp(a, "--reasoning") == 0) {
            if (v && strcmp(v, "show") == 0)
                rmode = R_SHOW;
            else if (v && strcmp(v, "hide") == 0)
                rmode = R_HIDE;
            else if (v && strcmp(v, "raw") == 0)
                rmode = R_RAW;
            else {
                gm_cli_error("chat", "--reasoning takes show, hide or raw");
                return GM_EXIT_USAGE;
            }
            i++;
        } else if (strcmp(a, "--no-think") == 0 || strcmp(a, "--think") == 0) {
            no_think = a[2] == 'n';
        } else if (strcmp(a, "--config") == 0) {
            if (!v) {
                gm_cli_error("chat", "--config needs a file");
                return GM_EXIT_USAGE;
            }
            config = v, i++;
        } else if (strcmp(a, "--no-history") == 0) {
            history = false;
        } else if (strcmp(a, "--ignore-eos") == 0) {
            ignore_eos = true;
        } else if (strcmp(a, "--speculative") == 0 || strcmp(a, "--mtp") == 0) {
            gm_cli_error("chat", "%s: speculative decoding is not built yet (a model's MTP drafter layers are "
                         "loaded but not used); run without it", a);
            return GM_EXIT_USAGE;
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-predict") == 0 || strcmp(a, "--max-tokens") == 0) {
            ok = gm_cli_parse_u32("chat", a, v, 0, 1u << 24, &n_predict), i++;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbose = true;
        } else {
            ok = gm_cli_model_arg("chat", a, &model);
        }
        if (!ok)
            return GM_EXIT_USAGE;
    }
    int crc = gm_cli_config_rerun("chat", argc, argv, model, config, gm_cmd_chat);
    if (crc >= 0)
        return crc;
    if (!gm_cli_stream_check("chat", &sflags))
        return GM_EXIT_USAGE;
    if (!model)
        model = gm_cli_default_model();
    so.seed = seed_set ? so.seed : (uint64_t)time(NULL);
    gm_cli_log_setup(verbose);

    chat c = {.model_path = model, .so = so, .max_tokens = n_predict, .reasoning = rmode, .verbose = verbose,
              .ignore_eos = ignore_eos};
    c.tty_in = isatty(STDIN_FILENO) != 0;
    c.tty_out = c.tty_in && isatty(STDOUT_FILENO) != 0;
    int status = GM_EXIT_USAGE;
    gm_err err = {0};
    c.msgs = json_array();
    c.extra = json_object();
    if (!c.msgs || !c.extra || (system && !(c.system = strdup(system)))) {
        gm_cli_error("chat", "out of memory");
        goto done;
    }
    gm_model_opts mo;
    if (!gm_cli_model_opts("chat", &sflags, &mo))
        goto done;
    gm_cli_load_apply(&load, &mo);
    if (gm_model_load(&c.m, model, &mo, &err) != 0) {
        gm_cli_progress_done();
        gm_cli_error("chat", "%s", err.msg);
        goto done;
    }
    c.voc = gm_model_vocab(c.m);
    int have = gm_cli_tmpl_load("chat", c.voc, tmpl_file, &c.tmpl);
    if (have < 0)
        goto done;
    if (have == 0) {
        gm_cli_error("chat", "%s carries no chat template (a base model?): pass one with --chat-template-file, "
                     "or use gmlx run --raw", model);
        goto done;
    }
    if (no_think && !gm_cli_thinking_var(c.tmpl.src, false, c.extra))
        note("%s has no thinking switch; --no-think changes nothing", c.tmpl.origin);
    c.style = gm_vocab_think_style(c.voc);
    gm_session_opts sopt;
    gm_session_opts_default(&sopt);
    if (gm_session_create(&c.s, c.m, &sopt, &err) != 0) {
        gm_cli_error("chat", "%s", err.msg);
        goto done;
    }
    c.so.penalty_last_n = (int32_t)(last_n == UINT32_MAX ? gm_session_n_ctx(c.s) : last_n);
    const gm_model_info *in = gm_model_get_info(c.m);
    if (c.tty_in)
        note("%s: %s, context %u%s - '/help' lists commands - '/quit' or Ctrl-D leaves - Ctrl-C stops an "
             "answer - editor: libedit", model, in->arch, gm_session_n_ctx(c.s),
             in->streams ? ", experts streamed" : "");
    status = repl(&c, history);
done:
    gm_think_free(c.think);
    free(c.raw.p);
    free(c.answer.p);
    free(c.thought.p);
    free(c.system);
    json_decref(c.msgs);
    json_decref(c.extra);
    gm_cli_tmpl_free(&c.tmpl);
    gm_session_free(c.s);
    gm_model_free(c.m);
    return status;
}
