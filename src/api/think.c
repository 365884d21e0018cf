/* The public reasoning splitter (gmlx.h "thinking"): a state machine over generated text that
 * drops the families' control markers and tags each span as reasoning or answer. A tail that may
 * be the start of a marker is held back until the next text decides it. */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/err.h"

/* <think>-style tags: each open marker's close is at the same index. */
static const char *const k_open[] = {"<think>", "<think:opensource>", "<mm:think>", "<|open|>think<|sep|>"};
static const char *const k_close[] = {"</think>", "</think:opensource>", "</mm:think>", "<|close|>think<|sep|>"};
/* Markers dropped without changing the state (Kimi-K3's answer block). */
static const char *const k_drop[] = {"<|open|>response<|sep|>", "<|close|>response<|sep|>"};
/* harmony's special tokens */
static const char *const k_harmony[] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                                        "<|return|>", "<|call|>", "<|constrain|>"};
#define N(a) (sizeof a / sizeof a[0])

typedef enum { H_BODY = 0, H_HEADER } harmony_state;

struct gm_think {
    gm_think_style style;
    bool reasoning;      /* the current span is reasoning */
    harmony_state hs;
    char channel[32];    /* harmony: the channel the header names */
    size_t channel_len;
    bool in_channel;     /* harmony: reading the channel name after <|channel|> */
    char *held;          /* a possible marker's start */
    size_t n_held, cap;
};

int gm_think_create(gm_think **out, gm_think_style style, bool inside, gm_err *err)
{
    *out = NULL;
    if ((unsigned)style > GM_THINK_HARMONY)
        return gm_err_set(err, GM_EINVAL, "unknown reasoning style %d", (int)style);
    gm_think *t = calloc(1, sizeof *t);
    if (!t)
        return gm_err_set(err, GM_ENOMEM, "out of memory");
    t->style = style;
    if (style == GM_THINK_TAGS)
        t->reasoning = inside;
    else if (style == GM_THINK_HARMONY)
        t->hs = inside ? H_HEADER : H_BODY;
    *out = t;
    return 0;
}

void gm_think_free(gm_think *t)
{
    if (!t)
        return;
    free(t->held);
    free(t);
}

/* Whether s[0..n) is a whole marker of the style (its index in *which), a proper prefix of one
 * (1), or neither (0); whole: 2. */
static int marker_at(const gm_think *t, const char *s, size_t n, int *kind, size_t *which, size_t *mlen)
{
    static const char *const *const lists[3] = {k_open, k_close, k_drop};
    static const size_t counts[3] = {N(k_open), N(k_close), N(k_drop)};
    int prefix = 0;
    const int n_lists = t->style == GM_THINK_HARMONY ? 1 : 3;
    for (int li = 0; li < n_lists; li++) {
        const char *const *list = t->style == GM_THINK_HARMONY ? k_harmony : lists[li];
        const size_t cnt = t->style == GM_THINK_HARMONY ? N(k_harmony) : counts[li];
        for (size_t i = 0; i < cnt; i++) {
            const size_t ml = strlen(list[i]);
            if (n >= ml && memcmp(s, list[i], ml) == 0) {
                *kind = li;
                *which = i;
                *mlen = ml;
                return 2;
            }
            if (n < ml && memcmp(s, list[i], n) == 0)
                prefix = 1;
        }
    }
    return prefix;
}

static void out_text(gm_think *t, const char *s, size_t n, gm_think_fn fn, void *user)
{
    if (!n)
        return;
    if (t->style == GM_THINK_HARMONY && t->hs == H_HEADER) {
        /* header text: the channel's name after <|channel|>, the rest (role, recipient) dropped */
        for (size_t i = 0; i < n && t->in_channel; i++) {
            if (s[i] == ' ' || s[i] == '<') {
                t->in_channel = false;
                break;
            }
            if (t->channel_len + 1 < sizeof t->channel)
                t->channel[t->channel_len++] = s[i];
        }
        return;
    }
    fn(user, t->reasoning, s, n);
}

static void on_marker(gm_think *t, int kind, size_t which)
{
    if (t->style == GM_THINK_TAGS) {
        if (kind == 0)
            t->reasoning = true;
        else if (kind == 1)
            t->reasoning = false;
        return;
    }
    const char *m = k_harmony[which];
    if (strcmp(m, "<|start|>") == 0 || strcmp(m, "<|channel|>") == 0) {
        if (t->hs == H_BODY) { /* a new message header */
            t->hs = H_HEADER;
            t->channel_len = 0;
        }
        if (strcmp(m, "<|channel|>") == 0) {
            t->in_channel = true;
            t->channel_len = 0;
        }
    } else if (strcmp(m, "<|message|>") == 0) {
        t->hs = H_BODY;
        t->in_channel = false;
        t->channel[t->channel_len] = '\0';
        /* final is the answer; analysis, commentary and any other channel are reasoning */
        t->reasoning = !(t->channel_len == 5 && memcmp(t->channel, "final", 5) == 0) && t->channel_len > 0;
    } else if (strcmp(m, "<|end|>") == 0 || strcmp(m, "<|return|>") == 0 || strcmp(m, "<|call|>") == 0) {
        t->hs = H_HEADER; /* until the next <|start|>: dropped */
        t->channel_len = 0;
    } else if (strcmp(m, "<|constrain|>") == 0) {
        t->in_channel = false;
    }
}

/* Scans buf[0..n): whole markers act, text goes out, a tail that may begin a marker is kept. */
static size_t scan(gm_think *t, const char *buf, size_t n, bool final, gm_think_fn fn, void *user)
{
    size_t i = 0, start = 0;
    while (i < n) {
        if (t->style == GM_THINK_NONE || buf[i] != '<') {
            i++;
            continue;
        }
        int kind = 0;
        size_t which = 0, ml = 0;
        const int m = marker_at(t, buf + i, n - i, &kind, &which, &ml);
        if (m == 2) {
            out_text(t, buf + start, i - start, fn, user);
            on_marker(t, kind, which);
            i += ml;
            start = i;
        } else if (m == 1 && !final) {
            break; /* wait for more text */
        } else {
            i++;
        }
    }
    out_text(t, buf + start, i - start, fn, user);
    return i;
}

void gm_think_push(gm_think *t, const char *text, size_t len, gm_think_fn fn, void *user)
{
    if (len == 0)
        return;
    if (t->n_held + len > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->n_held + len)
            cap *= 2;
        char *h = realloc(t->held, cap);
        if (!h) { /* no room to hold: what is held and the text go out as they are */
            out_text(t, t->held, t->n_held, fn, user);
            t->n_held = 0;
            out_text(t, text, len, fn, user);
            return;
        }
        t->held = h;
        t->cap = cap;
    }
    memcpy(t->held + t->n_held, text, len);
    t->n_held += len;
    const size_t used = scan(t, t->held, t->n_held, false, fn, user);
    memmove(t->held, t->held + used, t->n_held - used);
    t->n_held -= used;
}

void gm_think_flush(gm_think *t, gm_think_fn fn, void *user)
{
    if (t->n_held == 0)
        return;
    scan(t, t->held, t->n_held, true, fn, user);
    t->n_held = 0;
}

static const char *last_of(const char *p, size_t len, const char *needle)
{
    const size_t nl = strlen(needle);
    for (size_t i = len >= nl ? len - nl + 1 : 0; i-- > 0;)
        if (memcmp(p + i, needle, nl) == 0)
            return p + i;
    return NULL;
}

bool gm_think_prompt_open(gm_think_style style, const char *prompt, size_t len)
{
    if (style == GM_THINK_HARMONY) {
        const char *st = last_of(prompt, len, "<|start|>");
        return st && !last_of(st, (size_t)(prompt + len - st), "<|message|>");
    }
    if (style != GM_THINK_TAGS)
        return false;
    const char *open = NULL, *close = NULL;
    for (size_t i = 0; i < N(k_open); i++) {
        const char *o = last_of(prompt, len, k_open[i]), *c = last_of(prompt, len, k_close[i]);
        if (o && (!open || o > open))
            open = o;
        if (c && (!close || c > close))
            close = c;
    }
    return open && (!close || close < open);
}

gm_think_style gm_vocab_think_style(const gm_vocab *v)
{
    if (strcmp(v->arch, "gpt-oss") == 0 || gm_tokenizer_find(v->tok, "<|channel|>", 11) >= 0)
        return GM_THINK_HARMONY;
    for (size_t i = 0; i < N(k_open); i++)
        if (gm_tokenizer_find(v->tok, k_open[i], strlen(k_open[i])) >= 0 ||
            (v->chat_template && strstr(v->chat_template, k_open[i])))
            return GM_THINK_TAGS;
    if (v->chat_template && (strstr(v->chat_template, "<think{}>") || strstr(v->chat_template, "'think'")))
        return GM_THINK_TAGS;
    return GM_THINK_NONE;
}
