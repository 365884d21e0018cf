/* gmlx public API: load a MoE GGUF model (streaming its routed experts from the SSD when they do
 * not fit in memory), run sessions on it, generate text, render chat templates.
 *
 * Used the way llama.h is used: opaque handles (gm_model, gm_vocab, gm_session, gm_detokenizer,
 * gm_template, gm_think, gm_file, gm_remote_model), options structs filled with defaults by a *_default function and then
 * changed field by field, and errors as values: a function that can fail returns 0 or a negative
 * GM_E* code and fills the gm_err passed last (the first error of an operation keeps its
 * context). The library never prints, never exits and never reads the environment: log lines go
 * to the sink set with gm_log_set_sink, and every setting the GMLX_* variables carry is a field of
 * gm_tuning, which the front end fills.
 *
 * Threads: any thread may call any function. A model serialises the work of its sessions: one
 * eval or generate call computes at a time (the others wait), so several threads may each drive
 * their own session of one model. gm_session_cancel may be called from any thread at any time,
 * also while another thread is inside a call of that session. A session itself is used by one
 * thread at a time. Log sinks and callbacks run on the thread of the call that produced them.
 */
#ifndef GMLX_H
#define GMLX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GMLX_VERSION "0.2.0"

/* ---- errors ---------------------------------------------------------------------------- */

enum {
    GM_OK = 0,
    GM_EIO = -1,         /* the operating system refused a read, open or map */
    GM_EFORMAT = -2,     /* the input is malformed (corrupt, truncated, hostile) */
    GM_ENOMEM = -3,      /* an allocation failed */
    GM_EINVAL = -4,      /* a caller's argument or option is invalid */
    GM_ENOTFOUND = -5,   /* a key, tensor or file is absent */
    GM_ETYPE = -6,       /* a value has another type than the one asked for */
    GM_EUNSUPPORTED = -7,/* valid input that this build cannot handle */
    GM_ERANGE = -8,      /* a number is out of the range it must lie in (a full context, a limit) */
    GM_ETEMPLATE = -9,   /* a chat template failed to render (raise_exception, a type error) */
    GM_ECANCELED = -10,  /* the caller canceled the operation (gm_session_cancel) */
    GM_ENOSPACE = -11,   /* the memory the model needs is not available ("cannot fit: ...") */
};

/* The first error of an operation, with its context. Filling an already-set error keeps the
 * first message: the root cause is what a user needs. */
typedef struct gm_err {
    int code;            /* 0 while no error was recorded, else a GM_E* code */
    char msg[512];       /* one line, no trailing newline: "FILE: what is wrong" */
} gm_err;

/* Name of a GM_E* code, e.g. "format error". */
const char *gm_strerror(int code);

/* ---- logging --------------------------------------------------------------------------- */

typedef enum gm_log_level {
    GM_LOG_QUIET = 0, /* as a threshold: nothing */
    GM_LOG_WARN = 1,  /* something the user should act on */
    GM_LOG_NOTE = 2,  /* what a load or a lever decided ("[stream] the experts stream because ...") */
    GM_LOG_INFO = 3,  /* details (-v): the plan's pieces, timings */
    GM_LOG_DEBUG = 4,
} gm_log_level;

/* One line, without its newline. */
typedef void (*gm_log_fn)(void *user, gm_log_level level, const char *line);

/* Lines at or below max_level go to fn (process-wide; NULL drops every line, the default).
 * Set it before loading a model. */
void gm_log_set_sink(gm_log_fn fn, void *user, gm_log_level max_level);

/* ---- model loading ----------------------------------------------------------------------- */

/* Where the weights live. */
typedef enum gm_placement {
    GM_PLACE_AUTO = 0,  /* stream the experts when the plan says they do not fit (default) */
    GM_PLACE_EXPERTS,   /* --stream-experts: every-token weights pinned, experts through the arena */
    GM_PLACE_CPU,       /* --stream-cpu: the whole model over mmap and the page cache */
} gm_placement;

/* --stream-fast-disk: AUTO tests the drive at load and reads ahead harder on a fast one. */
typedef enum gm_fast_disk { GM_FAST_DISK_AUTO = 0, GM_FAST_DISK_ON, GM_FAST_DISK_OFF } gm_fast_disk;

typedef enum gm_kv_type {
    GM_KV_F32 = 0,  /* float32 cache: the exact path */
    GM_KV_F16 = 1,  /* IEEE half (default) */
    GM_KV_Q8_0 = 2, /* blocks of 32 int8 with an f16 scale (--kv-bits 8) */
} gm_kv_type;

/* The lossy levers (docs/streaming.md "Lossy settings"); all off when zero. */
typedef struct gm_levers {
    uint32_t experts;  /* --moe-experts K (1 .. the expert count); 0: the trained top-k */
    float expert_mass; /* --moe-expert-mass P in (0, 1]; 0: off */
    bool probe;        /* --moe-expert-probe */
    float miss_shed;   /* --moe-miss-shed P in (0, 1]; 0: off */
    bool keepers;      /* --moe-prestage keepers (false: ranked, the default) */
    float layer_shed;  /* --moe-layer-shed P in (0, 1); 0: off */
} gm_levers;

/* The most experts a token may route to under --moe-experts. */
#define GM_LEVERS_MAX_EXPERTS 64

/* The levers' ranges and the rules between them (expert mass and the probe exclude each other;
 * keepers needs miss-shed). GM_EINVAL naming the flag. */
int gm_levers_check(const gm_levers *l, gm_err *err);

/* The settings the GMLX_* environment variables carry (docs/streaming.md lists each). A field
 * left at its default (gm_tuning_default: -1, 0 or NULL as said) keeps the engine's choice. */
typedef struct gm_tuning {
    double ram_gb, avail_gb;     /* GMLX_RAM_GB, GMLX_AVAIL_GB: the machine as planned; < 0: probed */
    uint32_t plan_kv_ctx;        /* GMLX_STREAM_KV_CTX: KV room tokens of the plan; 0: 32768 */
    double arena_gb;             /* GMLX_DECODE_ARENA_GB: the decode arena; < 0: the plan's */
    bool overcommit;             /* GMLX_OVERCOMMIT=1: judge fits against RAM, not the ceiling */
    int pin_weights;             /* GMLX_PIN_WEIGHTS: 0 leaves the every-token weights cache-managed */
    double read_timeout_s;       /* GMLX_DECODE_READ_TIMEOUT; < 0: 5 s; 0: wait forever */
    const char *trace_path;      /* GMLX_LOG_ROUTED: routing trace file; NULL: none */
    int lookahead;               /* GMLX_DECODE_LOOKAHEAD 0/1; -1: on */
    int lookahead_probe;         /* GMLX_DECODE_LOOKAHEAD_PROBE 0/1; -1: off */
    int lookahead_k;             /* GMLX_DECODE_LOOKAHEAD_K 1-8; 0: 6 */
    double lookahead_min_p;      /* GMLX_DECODE_LOOKAHEAD_MIN_P; < 0: 0.5 */
    double lookahead_hard_p;     /* GMLX_DECODE_LOOKAHEAD_HARD_P; < 0: 0.9 */
    int lookahead_cancel;        /* GMLX_DECODE_LOOKAHEAD_CANCEL 0/1; -1: on */
    int pressure;                /* GMLX_DECODE_PRESSURE 0/1; -1: on */
    int arena_thp;               /* GMLX_DECODE_ARENA_THP 0/1; -1: on */
    int arena_warm;              /* GMLX_DECODE_ARENA_WARM 0/1; -1: on */
    int prefill_ring;            /* GMLX_FEEDER_PREFILL 0/1; -1: on */
    int ring_cover_pct;          /* GMLX_FEEDER_PREFILL_COVER 0-100; -1: 50 */
    int ring_sparse;             /* GMLX_FEEDER_PREFILL_SPARSE 0/1: below that share the ring reads
                                    only the routed experts (else the arena does); -1: on */
    int ring_seed;               /* GMLX_FEEDER_PREFILL_SEED 0/1; -1: on */
    int arena_token_split;       /* GMLX_ARENA_TOKEN_SPLIT: a prefill of up to this many tokens
                                    after decode goes through the decode arena; 0: off; -1: 256 */
    bool phase_stats;            /* GMLX_DECODE_PHASE_STATS: time the decode phases */
    int layer_profile;           /* GMLX_DECODE_LAYER_PROFILE: time each decode token's blocks;
                                    1 prints the split by kind of block, 2 each layer's too; 0: off */
    const char *kernels;         /* GMLX_KERNELS: kernel level (scalar, avx2, ...); NULL: the best */
    int gpu_attn;                /* GMLX_GPU_ATTN 0/1: under --gpu, a decode token's attention and
                                    output head on the device; -1: on */
    int gpu_decode;              /* GMLX_GPU_DECODE 0/1: under --gpu, a decode token through every
                                    layer on the device where the whole model runs there (else
                                    layer by layer through the host); -1: on */
    int gpu_graph;               /* GMLX_GPU_GRAPH 0/1: a whole decode token replayed as one CUDA
                                    graph after the session's first; -1: on */
    int gpu_prompt;              /* GMLX_GPU_PROMPT 0/1: under --gpu, a prompt's chunks through
                                    every layer on the device (matrix-matrix products) where its
                                    decode tokens run whole there; -1: on */
    int gpu_stage;               /* GMLX_GPU_STAGE: under --gpu, when not every expert fits in
                                    VRAM and they are in host memory, this many experts' room
                                    kept apart there, through which a prompt's chunk copies what
                                    it needs so that it runs whole on the device; 0: none (the
                                    chunks run layer by layer); -1: 32 */
    int gpu_pin_host;            /* GMLX_GPU_PIN_HOST 0/1: page-lock the experts in host memory for
                                    those copies (the RAM they take stays locked); -1: off */
    int gpu_bounce;              /* GMLX_GPU_BOUNCE 0/1: those copies through page-locked buffers
                                    that the threads fill (at the bus's speed; 256 MB of host
                                    memory), unless the experts are page-locked; -1: on */
    int gpu_uploads;             /* GMLX_GPU_UPLOADS: under --gpu, the most experts a decode token
                                    promotes into the VRAM tier (0-64; 0: none); -1: 8 */
    int gpu_split;               /* GMLX_GPU_SPLIT 0/1: under --gpu, when not every expert fits in
                                    VRAM and they are in host memory, a decode token through every
                                    layer on the device, the experts VRAM lacks computed on the
                                    CPU (one round trip a layer; else layer by layer through the
                                    host); -1: on */
} gm_tuning;

void gm_tuning_default(gm_tuning *t);

/* Load progress: done of total bytes of the step named by what ("reading the every-token
 * weights into pinned memory"). Called from the loading thread, often; throttle drawing. */
typedef void (*gm_progress_fn)(void *user, const char *what, uint64_t done, uint64_t total);

typedef struct gm_model_opts {
    gm_placement placement;
    gm_fast_disk fast_disk;
    int n_threads;            /* compute threads; 0: every CPU this process may use */
    uint32_t n_ctx;           /* tokens of context the load reserves room for (the KV room of
                                 the plan and the sessions' default); 0: 4096, at most the
                                 model's training context */
    gm_kv_type kv_type;       /* the sessions' default KV cache type */
    uint32_t prefill_step;    /* prompt tokens per forward call; 0: 512 in memory, up to 8192
                                 when the experts stream */
    gm_levers levers;
    gm_tuning tuning;
    int gpu;                  /* 1: the routed experts it holds in a VRAM tier, and a decode
                                 token's attention and output head, computed on the CUDA device
                                 (--gpu, GMLX_GPU=1; docs/cuda.md); 0: the CPU only (--no-gpu,
                                 GMLX_GPU=0); -1 (the default): on when the experts stream
                                 through the decode arena and a CUDA device is found (one that
                                 cannot take the model is left unused), else the CPU only */
    double vram_gb;           /* the most device memory the VRAM tier takes (--vram-gb,
                                 GMLX_VRAM_GB); <= 0: what the device has free, less 1.5 GB */
    gm_progress_fn progress;  /* NULL: none */
    void *progress_user;
} gm_model_opts;

/* Defaults: automatic placement, every CPU, 4096 tokens of f16 cache, no levers, gm_tuning_default. */
void gm_model_opts_default(gm_model_opts *o);

typedef struct gm_model gm_model;

/* Opens path, plans the memory and binds the weights. Refused with GM_ENOSPACE and a message
 * starting "cannot fit:" before anything is pinned when the plan says the model cannot run here
 * (its every-token weights and KV room exceed the ceiling, or with tuning.overcommit the RAM),
 * and when the memory available now cannot hold what must be pinned. GM_EUNSUPPORTED for a
 * family gmlx does not run, GM_EFORMAT for a corrupt file, GM_EINVAL for bad options. */
int gm_model_load(gm_model **out, const char *path, const gm_model_opts *opts, gm_err *err);
void gm_model_free(gm_model *m);

typedef struct gm_model_info {
    const char *path;
    const char *arch;            /* general.architecture ("qwen3moe") */
    const char *name;            /* general.name, or "" */
    uint32_t n_layer, n_embd, n_expert, n_expert_used;
    uint32_t n_ctx_train;        /* the context the model was trained for (0: not stated) */
    uint32_t n_ctx;              /* the context the load reserved (the sessions' default) */
    gm_kv_type kv_type;          /* the sessions' default cache type */
    uint64_t file_bytes, every_token_bytes, expert_bytes;
    bool streams;                /* the experts stream through the decode arena */
    bool page_cache;             /* the whole model runs from the page cache (--stream-cpu) */
    bool recurrent;              /* has Gated DeltaNet layers (a session keeps snapshots to rewind) */
    bool sliding_window;         /* has sliding-window attention layers (their cache is a ring) */
    uint32_t max_chunk;          /* prompt tokens one forward call takes */
    int n_threads;
    const char *kernels;         /* the kernel level in use ("avx512") */
} gm_model_info;

/* Valid until gm_model_free. */
const gm_model_info *gm_model_get_info(const gm_model *m);

/* What a load of path with opts would hold in memory, from the header and the streaming plan
 * alone (nothing is loaded): a server accounts its models with it before it loads one. */
typedef struct gm_model_footprint {
    bool runnable;               /* the family runs and the plan does not say "cannot stream" */
    bool streams;                /* the experts would stream through the decode arena */
    bool page_cache;             /* the whole model would run from the page cache */
    uint64_t file_bytes, every_token_bytes, expert_bytes;
    uint64_t arena_bytes, ring_bytes, kv_room_bytes;
    uint64_t resident_bytes;     /* streamed: every-token weights + arena + KV room (+ the ring
                                    where it does not fit in the arena); else the whole file + KV */
    uint32_t n_ctx;              /* the context the load would reserve */
    uint64_t ceiling_bytes;      /* what the plan lets all loads of this machine hold (RAM less the
                                    host floor and overhead) */
    char verdict[512];           /* the plan's "=>" line, or why the model cannot run */
} gm_model_footprint;
int gm_model_footprint_of(const char *path, const gm_model_opts *opts, gm_model_footprint *out, gm_err *err);

/* The streaming plan of the load as validate prints it (malloc'd, one line per "\n"), or NULL
 * when out of memory. */
char *gm_model_plan_text(const gm_model *m);

/* ---- text ------------------------------------------------------------------------------ */

/* A model file's vocabulary and chat template, read from its header alone (gm_vocab_open: before
 * a load, e.g. to count a prompt's tokens), or a loaded model's (gm_model_vocab). */
typedef struct gm_vocab gm_vocab;

int gm_vocab_open(gm_vocab **out, const char *path, gm_err *err);
void gm_vocab_free(gm_vocab *v);
/* The loaded model's vocabulary (owned by the model). */
const gm_vocab *gm_model_vocab(const gm_model *m);

typedef struct gm_vocab_info {
    const char *arch;            /* general.architecture */
    uint32_t n_vocab;
    uint32_t n_ctx_train;        /* the training context (0: not stated) */
    int32_t bos, eos, eot;       /* special token ids, -1 when the vocabulary has none */
    const char *bos_text, *eos_text; /* their text ("" when none): the templates' bos_token, eos_token */
    bool add_bos;                /* the vocabulary asks for BOS before a text */
    const char *chat_template;   /* tokenizer.chat_template, or NULL when the file has none */
} gm_vocab_info;

const gm_vocab_info *gm_vocab_get_info(const gm_vocab *v);

enum gm_tokenize_flag {
    GM_TOKENIZE_ADD_SPECIAL = 1u << 0,   /* BOS/EOS where the vocabulary asks for them */
    GM_TOKENIZE_PARSE_SPECIAL = 1u << 1, /* special-token text (<|im_start|>) -> that token */
};

/* Token ids of text[0..len) into *ids (malloc'd; free()), their count in *n. */
int gm_tokenize(const gm_vocab *v, const char *text, size_t len, unsigned flags, int32_t **ids, size_t *n,
                gm_err *err);

/* The text of ids (malloc'd, NUL-terminated, valid UTF-8); render_special: control tokens give
 * their text, else nothing. */
int gm_detokenize(const gm_vocab *v, const int32_t *ids, size_t n, bool render_special, char **out,
                  size_t *len, gm_err *err);

/* True when id ends generation (EOS, EOT, <|im_end|>, ...). */
bool gm_token_is_eog(const gm_vocab *v, int32_t id);

/* The id of the token whose vocabulary text is exactly text, or -1. */
int32_t gm_token_find(const gm_vocab *v, const char *text);

/* Streaming detokenisation of one generated sequence: each push gives only complete UTF-8 (an
 * incomplete sequence at the end of a token waits for the next one). */
typedef struct gm_detokenizer gm_detokenizer;
int gm_detokenizer_create(gm_detokenizer **out, const gm_vocab *v, bool render_special, gm_err *err);
void gm_detokenizer_free(gm_detokenizer *d);
/* Adds id; *text (valid until the next call) and *len get the bytes that became complete. */
int gm_detokenizer_push(gm_detokenizer *d, int32_t id, const char **text, size_t *len, gm_err *err);
/* Ends the sequence (a held incomplete sequence becomes U+FFFD) and starts a new one. */
int gm_detokenizer_flush(gm_detokenizer *d, const char **text, size_t *len, gm_err *err);

/* ---- sessions -------------------------------------------------------------------------- */

typedef struct gm_session gm_session;

typedef struct gm_session_opts {
    uint32_t n_ctx;       /* context tokens; 0: the model's load context */
    int kv_type;          /* a gm_kv_type; -1: the model's default */
    uint32_t n_snapshots; /* recurrent or sliding-window state copies kept for rewinding;
                             0: 4 (unused by models with plain attention only) */
} gm_session_opts;

void gm_session_opts_default(gm_session_opts *o);

int gm_session_create(gm_session **out, gm_model *m, const gm_session_opts *opts, gm_err *err);
void gm_session_free(gm_session *s);

/* Forgets every token. */
void gm_session_reset(gm_session *s);
/* Tokens in the cache (the next token's position). */
uint32_t gm_session_pos(const gm_session *s);
uint32_t gm_session_n_ctx(const gm_session *s);
/* The tokens in the cache, in order (valid until the next call that changes the session). */
const int32_t *gm_session_tokens(const gm_session *s, uint32_t *n);

/* Goes back to position pos (<= gm_session_pos): the cache then holds exactly the first pos
 * tokens, as if only they had been evaluated. Attention caches are cut in place; a
 * sliding-window ring or a recurrent state that has moved past pos is restored from the nearest
 * snapshot at or before pos and the tokens between are evaluated again (GM_ECANCELED when
 * canceled meanwhile: the session is then at the snapshot's position). */
int gm_session_rewind(gm_session *s, uint32_t pos, gm_err *err);

/* Prepares to evaluate the prompt tokens[0..n) from position 0: rewinds to the longest common
 * prefix of tokens and the cache, kept at most n - 1 (the last prompt token is evaluated again,
 * for its logits). *n_keep gets the tokens kept; evaluate tokens + *n_keep next. */
int gm_session_reuse(gm_session *s, const int32_t *tokens, uint32_t n, uint32_t *n_keep, gm_err *err);

/* Records the state at the current position as a snapshot, for later rewinds (the oldest goes
 * when n_snapshots are kept). Generation does this itself after each prompt and at its end. */
int gm_session_snapshot(gm_session *s, gm_err *err);

/* Evaluates n tokens at the next positions, in chunks of the model's max chunk. logits (NULL:
 * none) receives the last token's n_vocab floats (all_logits: every token's, n x n_vocab).
 * GM_ERANGE when the context cannot hold them, GM_ECANCELED when canceled (the position is then
 * that of the last whole chunk). */
int gm_session_eval(gm_session *s, const int32_t *tokens, uint32_t n, float *logits, bool all_logits,
                    gm_err *err);
/* Width of a logits row: the output head's rows (at least the vocabulary). */
uint32_t gm_session_n_logits(const gm_session *s);

/* Asks the call running on s (or the next one, when none runs) to stop: at the next token, or
 * within a layer of a prefill chunk. Any thread; async-signal-safe. */
void gm_session_cancel(gm_session *s);

/* ---- generation ------------------------------------------------------------------------ */

typedef struct gm_sampling {
    float temp;             /* 0: greedy (argmax, ties to the lowest id) */
    int32_t top_k;          /* 0: off */
    float top_p;            /* 1: off */
    float min_p;            /* 0: off */
    float repeat_penalty;   /* 1: off */
    int32_t penalty_last_n; /* tokens of the context the penalty looks back over */
    uint64_t seed;
} gm_sampling;

/* temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1, last_n 64, seed 0. */
void gm_sampling_default(gm_sampling *s);

typedef enum gm_stop_reason {
    GM_STOP_NONE = 0,
    GM_STOP_EOG,       /* an end-of-generation token of the vocabulary */
    GM_STOP_TOKEN,     /* one of opts.stop_tokens */
    GM_STOP_STRING,    /* one of opts.stop (left out of the text) */
    GM_STOP_LENGTH,    /* opts.max_tokens generated */
    GM_STOP_CONTEXT,   /* the context is full */
    GM_STOP_CANCEL,    /* gm_session_cancel */
    GM_STOP_CALLBACK,  /* on_token returned false */
} gm_stop_reason;

/* "eog", "stop token", "stop string", "length", "context full", "canceled", "callback". */
const char *gm_stop_reason_name(gm_stop_reason r);

/* One generated token and the text it completed (may be empty: part of a UTF-8 sequence, or
 * text held back while it may be the start of a stop string). Return false to stop. */
typedef bool (*gm_token_fn)(void *user, int32_t token, const char *text, size_t len);

typedef struct gm_generate_opts {
    gm_sampling sampling;
    uint32_t max_tokens;              /* 0: until a stop or the context is full */
    const char *const *stop;          /* stop strings */
    size_t n_stop;
    const int32_t *stop_tokens;       /* stop tokens besides the vocabulary's end tokens */
    size_t n_stop_tokens;
    bool ignore_eog;                  /* do not stop at end-of-generation tokens */
    bool render_special;              /* control tokens' text goes into the text (chat: thinking
                                         markers such as <|channel|>) */
    gm_token_fn on_token;
    void *user;
} gm_generate_opts;

void gm_generate_opts_default(gm_generate_opts *o);

typedef struct gm_generate_result {
    gm_stop_reason stop;
    int32_t stop_token;      /* the token that stopped it (EOG or a stop token), else -1 */
    int stop_string;         /* index into opts.stop, else -1 */
    uint32_t n_prompt;       /* prompt tokens evaluated */
    uint32_t n_generated;    /* tokens generated (the stop token not counted) */
    double prefill_s;        /* time evaluating the prompt */
    double ttft_s;           /* call start to the first generated token */
    double decode_s;         /* first to last generated token */
} gm_generate_result;

/* Evaluates the prompt tokens at the next positions, then samples up to max_tokens tokens,
 * evaluating each but the last (so the cache ends with the last token that was fed). The
 * sampler's repetition history is the session's last penalty_last_n tokens. Snapshots the state
 * after the prompt and at the end. A cancel ends it with GM_STOP_CANCEL, not an error. */
int gm_session_generate(gm_session *s, const int32_t *prompt, uint32_t n_prompt, const gm_generate_opts *opts,
                        gm_generate_result *res, gm_err *err);

/* ---- statistics ------------------------------------------------------------------------ */

/* The streaming figures since the load (a model whose experts do not stream has zeros). */
typedef struct gm_stats {
    bool streams;
    uint64_t decode_tokens;
    uint64_t lookups, hits;          /* decode expert lookups in the arena, and hits */
    uint64_t prefill_lookups, prefill_hits;
    uint64_t bytes_read, reads;      /* expert bytes read from the file (ring excluded) */
    double stall_s;                  /* time compute waited for expert reads */
    uint64_t prestaged, prestage_adopted; /* lookahead reads, and those routing then used */
    uint64_t ring_layers, ring_read_bytes; /* prefill layers read whole through the ring */
    double ring_wait_s;
    uint64_t seeded, seeded_bytes;   /* experts the ring copied into the arena */
    uint64_t split_calls, split_tokens; /* short prefills after decode through the arena */
    uint64_t arena_bytes, arena_sized_bytes;
    uint32_t covered_layers;
    uint64_t wedged, pressure_shrinks, pressure_regrows;
} gm_stats;

void gm_model_get_stats(gm_model *m, gm_stats *out);

enum gm_stats_what {
    GM_STATS_STREAM = 1u << 0, /* the [stream] exit lines (hit rate, reads, stalls, ring, lookahead) */
    GM_STATS_LEVERS = 1u << 1, /* the lossy levers' counters and the probe's table */
    GM_STATS_PHASES = 1u << 2, /* the [phase] decode split (needs tuning.phase_stats) */
    GM_STATS_PROFILE = 1u << 3, /* the [profile] per-layer decode split (needs tuning.layer_profile) */
    GM_STATS_GPU = 1u << 4,     /* the [gpu] line of the VRAM tier (gm_model_opts.gpu) */
};
/* The lines run -v and bench print at exit (malloc'd; "" when there is nothing to say), or NULL
 * when out of memory. */
char *gm_model_stats_text(gm_model *m, unsigned what);

/* ---- model files: what a header says ----------------------------------------------------- */

/* A GGUF file read from its header alone (the tensor data is never read): its metadata, its
 * tensor table, the model description the plan works from (the family, whether gmlx runs it,
 * the class of every tensor) and the streaming plan for a machine. What validate, inspect,
 * doctor, init and pull show. Opened from a local path (the first part of a split set), from a
 * remote model's header (gm_file_open_remote) or from header bytes in memory
 * (gm_file_open_prefix). Immutable once open: any thread may read it. */
typedef struct gm_file gm_file;

/* Opens path (and, for a split name, every part). GM_EIO when it cannot be read, GM_EFORMAT
 * for a file that is no GGUF or is corrupt. A file whose model cannot be described still
 * opens: gm_file_info.described says so. */
int gm_file_open(gm_file **out, const char *path, gm_err *err);
/* The same from the first len bytes of a one-part file of file_bytes bytes (a stored header):
 * name is the file's name (gm_file_info.path), part_name names the bytes in messages. */
int gm_file_open_prefix(gm_file **out, const char *name, const char *part_name, const void *bytes, size_t len,
                        uint64_t file_bytes, gm_err *err);
void gm_file_close(gm_file *f);

typedef struct gm_file_info {
    const char *path;            /* as opened (a remote file: its hf:// name or URL) */
    uint32_t gguf_version;
    uint32_t n_parts;
    uint32_t alignment;          /* of the tensor data, bytes */
    uint64_t file_bytes;         /* every part, headers included */
    uint64_t n_kv;               /* metadata entries */
    uint64_t n_tensors;
    bool described;              /* the model description was made; when false, the fields
                                    below are empty and describe_error says why */
    const char *describe_error;  /* "" when described */
    const char *arch;            /* general.architecture as the file spells it (not checked for
                                    UTF-8: gm_text_printable), "" when absent */
    const char *family;          /* the family's name ("Qwen3 MoE"), NULL for an architecture
                                    gmlx does not know */
    bool runnable;               /* a family gmlx runs, every tensor type supported */
    const char *not_runnable;    /* why not, "" when runnable */
    uint32_t n_moe_layers;       /* layers with routed experts (0: a dense model) */
    uint64_t tensor_types;       /* bit t set when some tensor has type t (gm_tensor_type_name) */
} gm_file_info;

/* Valid until gm_file_close. */
const gm_file_info *gm_file_get_info(const gm_file *f);

/* The name of tensor type t ("q4_K", "bf16", "f32"). */
const char *gm_tensor_type_name(uint32_t type);

/* One metadata entry, as inspect prints it. */
typedef struct gm_file_kv {
    char *key;                   /* malloc'd: the key as the file spells it (up to a NUL byte) */
    const char *type;            /* the value's type ("string", "u32", "array", ...) */
    char *value;                 /* malloc'd: the value as text: a string quoted, with \n, \',
                                    \\ and \xNN escapes, cut at 256 bytes ("...(N bytes)");
                                    an array "[TYPE x N] [e0, e1, ...]" with its first 8
                                    elements (strings in it cut at 64 bytes) */
} gm_file_kv;

enum gm_file_kv_flag {
    GM_FILE_KV_FULL = 1u << 0,   /* every element of arrays and the whole of strings */
};

/* Entry i (< gm_file_info.n_kv) into *out; GM_ERANGE past the end, GM_ENOMEM. Free with
 * gm_file_kv_clear. */
int gm_file_kv_at(const gm_file *f, uint64_t i, unsigned flags, gm_file_kv *out, gm_err *err);
void gm_file_kv_clear(gm_file_kv *kv);

#define GM_FILE_MAX_DIMS 4

/* One tensor of the table (its strings valid until gm_file_close). */
typedef struct gm_file_tensor {
    const char *name;
    const char *type;            /* gm_tensor_type_name of its type */
    uint32_t n_dims;             /* 1 .. GM_FILE_MAX_DIMS */
    uint64_t ne[GM_FILE_MAX_DIMS]; /* dims, innermost first; unused ones are 1 */
    uint64_t n_bytes;
    uint32_t part;               /* the part file holding its data (0-based) */
    uint64_t file_offset;        /* where its data starts in that part */
    const char *cls;             /* what the plan makes of it: the every-token group
                                    ("attention", "shared experts", ...), or "expert",
                                    "lookup", "mtp"; "" when the file is not described */
} gm_file_tensor;

/* Tensor i (< gm_file_info.n_tensors) into *out; GM_ERANGE past the end. */
int gm_file_tensor_at(const gm_file *f, uint64_t i, gm_file_tensor *out, gm_err *err);

/* ---- the streaming plan of a file (docs/streaming.md) ------------------------------------ */

/* The plan's verdict: what a load of the file does on the machine. */
typedef enum gm_plan_verdict {
    GM_PLAN_STREAMS = 0,         /* => streams with --stream-experts */
    GM_PLAN_NO_ARENA,            /* => streams, but with no decode arena */
    GM_PLAN_CANNOT_STREAM,       /* => cannot stream: it cannot run here */
    GM_PLAN_FITS,                /* => the whole file fits in RAM */
    GM_PLAN_EXPERTS_IN_MEMORY,   /* => loads with its experts in memory */
} gm_plan_verdict;

/* "streams", "no-arena", "cannot-stream", "fits", "experts-in-memory". */
const char *gm_plan_verdict_name(gm_plan_verdict v);

typedef struct gm_file_plan_opts {
    gm_tuning tuning;            /* the machine as planned (ram_gb, avail_gb), the KV room
                                    (plan_kv_ctx) and the decode arena (arena_gb) */
    uint32_t kv_bits;            /* KV cache element width: 16 (default), 8 or 32 */
    uint32_t prefill_step;       /* prefill chunk tokens; 0: 8192 */
    const char *text_indent;     /* put before each line of the plan's text; NULL: nothing */
    double vram_gb;              /* plan a VRAM tier of experts of this size (--vram-gb, as
                                    gm_model_opts.vram_gb); <= 0: none */
} gm_file_plan_opts;

/* Defaults: gm_tuning_default, a 16-bit cache, the default chunk, no indent. */
void gm_file_plan_opts_default(gm_file_plan_opts *o);

/* The plan's figures (the fields of validate --json "stream"). */
typedef struct gm_file_plan {
    /* the model */
    uint64_t file_bytes, every_token_bytes, expert_bytes, lookup_table_bytes, mtp_bytes;
    uint64_t attention_bytes, shared_experts_bytes, dense_ffn_and_routers_bytes, embeddings_bytes,
        output_head_bytes, other_bytes; /* the every-token weights by group */
    uint32_t n_moe_layers, n_experts, n_experts_used;
    bool is_moe;
    /* the machine */
    uint64_t ram_bytes, avail_bytes;
    bool avail_known;
    uint64_t host_floor_bytes, host_overhead_bytes, ceiling_bytes;
    /* the KV room */
    uint32_t kv_ctx, kv_bits, prefill_chunk_tokens;
    uint64_t kv_cache_bytes, prefill_chunk_bytes, prefill_pool_bytes, kv_room_bytes;
    /* the decode arena and the prefill ring */
    uint64_t arena_bytes;
    bool arena_overridden;       /* tuning.arena_gb set it */
    double arena_share;          /* arena / expert bytes */
    uint32_t arena_min_slots;    /* the fewest slots a MoE layer gets */
    uint64_t prefill_ring_bytes;
    bool ring_fits_arena;
    uint64_t cold_token_bytes;   /* expert bytes a token reads when the arena holds none of them */
    /* the tiers with a GPU (opts.vram_gb > 0): the VRAM tier's bytes and slot, the routed
     * experts it holds of all of them, and each tier's share of the experts */
    uint64_t vram_bytes, vram_slot_bytes;
    uint32_t vram_experts, n_routed_experts;
    double vram_share, ram_share, ssd_share;
    /* what the attention and output head on the device take first (vram_bytes is what they
     * leave the experts): the attention's layers (0: it stays on the CPU), their weights with the
     * head's, and their cache of kv_ctx positions */
    uint32_t vram_attn_layers;
    uint64_t vram_attn_bytes, vram_kv_bytes;
    /* the slots kept apart as staging for a prompt's experts (not in vram_experts); 0: none */
    uint32_t vram_stage_slots;
    /* the verdicts */
    gm_plan_verdict verdict;
    bool streams;                /* a MoE model whose experts stream here (verdict streams or
                                    no-arena) */
    bool experts_in_memory_now, auto_mtp_off_now, tables_from_file_now;
    char verdict_line[512];      /* the "=>" line */
    char now_line[512];          /* the "memory free now" line, "" when there is none */
} gm_file_plan;

/* The plan of the file for this machine (probed; tuning.ram_gb and avail_gb replace what the
 * probe finds). text, when not NULL, gets the plan's lines as validate prints them (malloc'd,
 * each line ended by "\n"). The file's description error when it is not described; GM_EINVAL
 * for bad options or a bad tuning value; GM_ENOMEM. */
int gm_file_plan_compute(const gm_file *f, const gm_file_plan_opts *opts, gm_file_plan *out, char **text,
                         gm_err *err);

/* ---- this machine ------------------------------------------------------------------------ */

typedef struct gm_machine {
    uint64_t ram_bytes;          /* min(MemTotal, the cgroup's memory limit), or tuning.ram_gb */
    uint64_t mem_total_bytes;    /* MemTotal (0 when unknown) */
    uint64_t cgroup_limit_bytes; /* 0 when no limit applies */
    uint64_t avail_bytes;        /* memory a load could take now (0 when unknown) */
    bool avail_known;
    uint64_t memlock_limit_bytes;/* RLIMIT_MEMLOCK; UINT64_MAX when unlimited */
    bool ram_overridden;         /* tuning.ram_gb was set */
    int n_cpus;                  /* CPUs this process may run on */
    char cpu_features[256];      /* names of the CPU's features the kernels use ("avx2 fma ..."),
                                    "" for the baseline */
    const char *kernel_level;    /* the best kernel level this CPU runs ("avx512") */
} gm_machine;

/* Probes the machine; t (may be NULL) gives ram_gb and avail_gb. GM_EINVAL for a bad one. */
int gm_machine_probe(gm_machine *out, const gm_tuning *t, gm_err *err);
/* 0 when io_uring can be used here, else why not (GM_EUNSUPPORTED, GM_EIO). */
int gm_machine_io_uring(gm_err *err);

/* Device memory --gpu leaves free by default (the CUDA context and the tier's scratch): its tier
 * takes what the device has free less this, unless --vram-gb says. */
#define GM_GPU_RESERVE_BYTES 1500000000ull

/* The CUDA device --gpu would use (device 0). */
typedef struct gm_gpu_device {
    char name[256];
    int cc_major, cc_minor, n_sms;      /* compute capability, multiprocessors */
    uint64_t total_bytes, free_bytes;   /* device memory */
    int driver_version, runtime_version; /* 1000 * major + 10 * minor */
    int n_devices;
} gm_gpu_device;
/* GM_EUNSUPPORTED, saying why, when there is none: a build without the CUDA backend, no driver,
 * no device. */
int gm_machine_gpu(gm_gpu_device *out, gm_err *err);
/* Whether the filesystem of path takes O_DIRECT reads (*direct); GM_EIO when path cannot be
 * opened. */
int gm_machine_direct_io(const char *path, bool *direct, gm_err *err);

/* The read speed of the drive under a local file: 64 MiB of one routed expert stack read with
 * O_DIRECT, in GB/s (*gb_s), -1 when its stacks are too small to measure. GM_EIO when a read
 * fails, GM_EUNSUPPORTED for a remote or stored header. */
int gm_file_drive_test(const gm_file *f, double *gb_s, gm_err *err);
/* The drive speed from which --stream-fast-disk auto reads ahead harder (GB/s). */
double gm_fast_disk_gb_s(void);

/* ---- remote model files ------------------------------------------------------------------- */

/* Where and how remote files are fetched. */
typedef struct gm_fetch_opts {
    const char *endpoint;        /* the hub's address (HF_ENDPOINT); NULL: https://huggingface.co */
    const char *token;           /* a hub token (HF_TOKEN), sent to the hub's host only; NULL: none */
    uint32_t stall_s;            /* give a transfer up after this many seconds without data; 0: 30 */
} gm_fetch_opts;

void gm_fetch_opts_default(gm_fetch_opts *o);

/* Whether s names a remote model: 1 for hf://ORG/REPO/FILE.gguf[@REV], ORG/REPO:QUANT or an
 * http(s):// URL, 0 for anything else (a path), GM_EINVAL with the reason for a remote form with
 * a fault. Looks at the text alone (the caller checks for a file of that name first). */
int gm_ref_is_remote(const char *s, gm_err *err);

/* A remote model resolved to its files (every part of a split set). */
typedef struct gm_remote_model gm_remote_model;

/* Resolves ref (a form gm_ref_is_remote accepts): a hub ref is checked against the repo's
 * listing (sizes and sha256 kept); a QUANT ref picks the one model that matches (GM_ENOTFOUND
 * when none does, GM_EINVAL listing them when several do). */
int gm_remote_model_resolve(gm_remote_model **out, const char *ref, const gm_fetch_opts *opts, gm_err *err);
void gm_remote_model_free(gm_remote_model *r);

typedef struct gm_remote_model_info {
    const char *name;            /* hf://ORG/REPO/FILE (with @REV unless main), or the URL */
    const char *repo;            /* ORG/REPO of a hub file, else NULL */
    const char *resolved_to;     /* a QUANT ref: the hf:// name it picked, else "" */
    uint32_t n_parts;
} gm_remote_model_info;

/* Valid until gm_remote_model_free. */
const gm_remote_model_info *gm_remote_model_get_info(const gm_remote_model *r);

typedef struct gm_remote_part_info {
    const char *name;            /* the part's file name */
    const char *url;
    uint64_t size;               /* bytes; 0 while unknown (a plain URL before its header is read) */
    const char *sha256;          /* lowercase hex, "" when unknown */
} gm_remote_part_info;

/* Part i (< n_parts) into *out (its strings valid until gm_remote_model_free); GM_ERANGE past
 * the end. */
int gm_remote_model_part(const gm_remote_model *r, uint32_t i, gm_remote_part_info *out, gm_err *err);

/* Opens r's header by HTTP range reads of every part (at most max_header_bytes of each; 0: 128
 * MiB), which also learns the parts' sizes. The file is header-only: no drive test. */
int gm_file_open_remote(gm_file **out, gm_remote_model *r, uint64_t max_header_bytes, gm_err *err);

/* Download progress: done of total bytes (total 0: unknown). */
typedef void (*gm_download_fn)(void *user, uint64_t done, uint64_t total);

typedef struct gm_download_result {
    uint64_t resumed_from;       /* bytes the .part held that the server continued from */
    uint64_t total;              /* the file's size */
    bool restarted;              /* the server ignored the range: the .part started again */
    bool hash_checked;           /* a sha256 was known and matched */
} gm_download_result;

/* Downloads part i into part_path, resuming from what part_path holds, and checks its size and
 * sha256 (a mismatch is GM_EFORMAT and removes part_path; a short body GM_EIO, which keeps it
 * to resume). part_path is fsynced before success; the caller renames it into place. fn may be
 * NULL. */
int gm_remote_model_download(const gm_remote_model *r, uint32_t i, const char *part_path, gm_download_fn fn,
                             void *user, gm_download_result *res, gm_err *err);

/* ---- formatting ---------------------------------------------------------------------------- */

/* bytes as the plan prints them, in decimal units: "62.2 GB", "12.3 MB", "0.5 kB". */
void gm_format_bytes(uint64_t bytes, char *buf, size_t len);

/* Makes text from a file printable in place: control characters and bytes that are no part of
 * valid UTF-8 become '?' (for a terminal or a JSON encoder). */
void gm_text_printable(char *s);

/* ---- chat templates -------------------------------------------------------------------- */

typedef struct gm_template gm_template;

/* Parses Jinja2 source (GM_EFORMAT "line N: ..." for a syntax error, GM_EUNSUPPORTED naming a
 * construct the renderer does not implement). */
int gm_template_parse(gm_template **out, const char *src, size_t len, gm_err *err);
void gm_template_free(gm_template *t);

typedef struct gm_template_opts {
    bool now_set;               /* strftime_now formats now_unix_s in UTC ... */
    int64_t now_unix_s;         /* ... else the current local time */
    uint64_t max_output_bytes;  /* 0: 16 MiB */
} gm_template_opts;

/* Renders t with the variables of a JSON object (messages, tools, add_generation_prompt,
 * bos_token, eos_token, enable_thinking, ...) as Hugging Face transformers renders
 * apply_chat_template. *out is malloc'd and NUL-terminated. GM_ETEMPLATE when the template
 * raises (raise_exception) or fails; GM_EFORMAT when vars is not a JSON object. */
int gm_template_render(const gm_template *t, const char *vars_json, size_t vars_len, const gm_template_opts *opts,
                       char **out, size_t *out_len, gm_err *err);

/* ---- thinking ---------------------------------------------------------------------------- */

/* Splits generated text into reasoning and answer for the families' markers: <think>...</think>
 * (also <think:opensource>, <mm:think>), Kimi-K3's <|open|>think<|sep|>, gpt-oss's harmony
 * channels (analysis and commentary are reasoning, final the answer; <|start|>, <|message|>,
 * <|end|>, <|channel|>... dropped). Markers are dropped from both outputs. */
typedef struct gm_think gm_think;

typedef enum gm_think_style {
    GM_THINK_NONE = 0,    /* no markers: everything is answer */
    GM_THINK_TAGS,        /* <think>-style tags */
    GM_THINK_HARMONY,     /* gpt-oss channels */
} gm_think_style;

/* The style of a model (its architecture and vocabulary). */
gm_think_style gm_vocab_think_style(const gm_vocab *v);

/* inside: the prompt left a reasoning block open (gm_think_prompt_open tells). */
int gm_think_create(gm_think **out, gm_think_style style, bool inside, gm_err *err);
void gm_think_free(gm_think *t);

/* A span of text: reasoning or answer. */
typedef void (*gm_think_fn)(void *user, bool reasoning, const char *text, size_t len);
/* Feeds generated text; complete spans go to fn (a possible marker's start is held back). */
void gm_think_push(gm_think *t, const char *text, size_t len, gm_think_fn fn, void *user);
/* Ends the text: what was held back goes out. */
void gm_think_flush(gm_think *t, gm_think_fn fn, void *user);

/* True when a rendered prompt ends inside an open reasoning block of the style (the template
 * opened <think> for the model), so generation starts in reasoning. */
bool gm_think_prompt_open(gm_think_style style, const char *prompt, size_t len);

/* ---- the configuration file (gmlx.yaml) ------------------------------------------------ */

/* A parsed configuration file: models: entries (id -> file and settings), profiles:, rules:,
 * aliases:, server:. Every key, its type, its range and the command-line flag it stands for are
 * in one table (gm_config_key_at), so the file and the flags cannot drift. Errors name the place:
 * "FILE:LINE:COL: what is wrong". Immutable after loading: any thread may read it. */
typedef struct gm_config gm_config;

/* A warning line ("FILE:LINE:COL: warning: ..."): a key for a feature gmlx does not have yet, a
 * legacy spelling, a setting that does not apply where it stands. */
typedef void (*gm_config_warn_fn)(void *user, const char *line);

typedef struct gm_config_opts {
    gm_config_warn_fn warn;            /* NULL: warnings are dropped */
    void *warn_user;
    /* Expands ~ and $VAR in model_dirs and paths: the front end passes getenv (the library
     * never reads the environment). NULL: no expansion. */
    const char *(*lookup_env)(const char *name);
} gm_config_opts;

/* The files searched, in order, when neither --config nor GMLX_CONFIG names one: ./gmlx.yaml,
 * CONFIG_HOME/gmlx/gmlx.yaml (CONFIG_HOME: xdg_config_home when set and absolute, else
 * HOME/.config), HOME/.gmlx.yaml. Fills out[] with malloc'd paths (the caller frees them) and
 * returns how many (2 without a home). */
size_t gm_config_search_paths(const char *home, const char *xdg_config_home, char *out[3]);

/* Reads and checks path. GM_ENOTFOUND when it does not exist, GM_EIO when unreadable,
 * GM_EFORMAT (with FILE:LINE:COL) for malformed YAML, an unknown key, a wrong type, a duplicate
 * key, a value out of range or an unknown reference. */
int gm_config_load(gm_config **out, const char *path, const gm_config_opts *opts, gm_err *err);
/* The same from text in memory; name is used in messages (and as the file's path). */
int gm_config_parse(gm_config **out, const char *name, const char *text, size_t len,
                    const gm_config_opts *opts, gm_err *err);
void gm_config_free(gm_config *c);
const char *gm_config_file(const gm_config *c);

typedef enum gm_config_stream {
    GM_CONFIG_STREAM_UNSET = 0, /* no stream: key (the plan decides) */
    GM_CONFIG_STREAM_EXPERTS,   /* stream: experts */
    GM_CONFIG_STREAM_CPU,       /* stream: cpu */
    GM_CONFIG_STREAM_OFF,       /* stream: false (no placement asked for) */
} gm_config_stream;

typedef struct gm_config_model {
    const char *id;
    const char *path;           /* as written (see gm_config_model_path) */
    gm_config_stream stream;
    uint32_t line;              /* where the entry starts (1-based) */
} gm_config_model;

size_t gm_config_n_models(const gm_config *c);
const gm_config_model *gm_config_model_at(const gm_config *c, size_t i);
/* NULL when no entry has that id. */
const gm_config_model *gm_config_find_model(const gm_config *c, const char *id);
/* server.model_dirs, ~ and $VAR expanded. */
size_t gm_config_n_model_dirs(const gm_config *c);
const char *gm_config_model_dir(const gm_config *c, size_t i);

/* The file an entry names (malloc'd into *out): an absolute path as it is; a relative one under
 * the first model_dirs root where it exists, else next to the configuration file. GM_ENOTFOUND
 * (with *out still set to the first candidate) when the file is not there. */
int gm_config_model_path(const gm_config *c, const gm_config_model *m, char **out, gm_err *err);

/* A name resolved to a model entry and the settings the layers give it, as command-line flags:
 * defaults < server.defaults.profile < the first matching rule's profile < the entry's profile
 * (or NAME@PROFILE, or an alias's) < the entry's profiles.<that profile> < the entry's own keys
 * < its overrides. The front end puts the flags the user typed after these, so a typed flag wins
 * (gm_config_flag_typed tells which to leave out). */
typedef struct gm_config_resolved {
    const gm_config_model *model;
    const char *profile;        /* the profile applied, or NULL */
    char **args;                /* flag, value, flag, ... (NULL-terminated) */
    size_t n_args;
    const uint32_t *arg_key;    /* per element of args: the index of its key (gm_config_key_at) */
} gm_config_resolved;

/* The value of a scalar server: key ("host", "port", "api_key", "budget_gb", ...) as its canonical
 * text ("true", "8080", "24"), or NULL when the file does not set it. */
const char *gm_config_server_value(const gm_config *c, const char *key);

/* GM_ENOTFOUND when name is no model id or alias; GM_EINVAL for an unknown @profile. */
int gm_config_resolve(const gm_config *c, const char *name, gm_config_resolved *out, gm_err *err);
void gm_config_resolved_free(gm_config_resolved *r);

/* The key table: one row per configuration key that stands for a command-line flag or an
 * option. */
typedef struct gm_config_key {
    const char *section;   /* "model" (an entry's own key), "sampling", "load", "settings" (a
                              profile's scalar), "server" */
    const char *name;      /* the key */
    const char *flag;      /* the run/chat flag it becomes ("--temp"), NULL: none */
    const char *spellings; /* every spelling of that flag, space separated ("-n --n-predict") */
    const char *field;     /* the option it sets ("gm_sampling.temp") */
    const char *values;    /* what it takes, for docs and errors ("a number from 0 to 100") */
    const char *missing;   /* non-NULL: the feature gmlx does not have yet (a warning names it) */
} gm_config_key;
size_t gm_config_n_keys(void);
const gm_config_key *gm_config_key_at(size_t i);
/* True when the user typed a spelling of key's flag among argv[0..argc). */
bool gm_config_flag_typed(const gm_config_key *key, int argc, char **argv);

/* Editing the file's text in place, so comments, order and formatting survive. Opening takes a
 * lock (a second writer waits), reads and parses the file (create: a missing file starts
 * empty); every change re-parses; commit writes FILE.tmp, fsyncs it and renames it over FILE. */
typedef struct gm_config_edit gm_config_edit;
int gm_config_edit_open(gm_config_edit **out, const char *path, bool create, const gm_config_opts *opts,
                        gm_err *err);
/* The file as it stands with the changes so far (valid until the next change). */
const gm_config *gm_config_edit_config(const gm_config_edit *e);
/* Adds an entry at the top of models: (creating the section): "ID:", "path: PATH", and
 * "stream: experts" when stream_experts, after the comment line when comment is non-NULL.
 * GM_EINVAL when the id exists or is not a plain key. */
int gm_config_edit_add_model(gm_config_edit *e, const char *id, const char *path, bool stream_experts,
                             const char *comment, gm_err *err);
int gm_config_edit_remove_model(gm_config_edit *e, const char *id, gm_err *err);
/* Adds "stream: experts" to the entry, or drops its stream: line (experts false). */
int gm_config_edit_set_stream_experts(gm_config_edit *e, const char *id, bool experts, gm_err *err);
/* Appends dir to server.model_dirs (creating the keys). */
int gm_config_edit_add_model_dir(gm_config_edit *e, const char *dir, gm_err *err);
/* Replaces the whole text (a new file); it must parse. */
int gm_config_edit_set_text(gm_config_edit *e, const char *text, size_t len, gm_err *err);
const char *gm_config_edit_text(const gm_config_edit *e, size_t *len);
int gm_config_edit_commit(gm_config_edit *e, gm_err *err);
/* Releases the lock; changes not committed are dropped. */
void gm_config_edit_close(gm_config_edit *e);

#ifdef __cplusplus
}
#endif
#endif
