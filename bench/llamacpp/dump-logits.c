/* llama.cpp's logits for a list of token ids, as the committed llamacpp-* fixtures were made: one
 * llama_decode of all the ids (at most 512) on 2 threads, f16 KV cache, flash attention on
 * (the last argument 0 turns it off), every position's logits written as rows of n_vocab
 * float32. Built against the llama.cpp of bench/llamacpp/build-llamacpp.sh:
 *   L=/var/tmp/gmlx-llamacpp
 *   cc -O2 bench/llamacpp/dump-logits.c -I$L/src/include -I$L/src/ggml/include \
 *      -L$L/build-norepack/bin -lllama -lggml -lggml-base -Wl,-rpath,$L/build-norepack/bin \
 *      -o /tmp/dump-logits
 *   /tmp/dump-logits MODEL.gguf PROMPT.ids OUT.f32 [1|0]
 * Not part of gmlx's build: llama.cpp is not a dependency, only a reference. */
#include <stdio.h>
#include <stdlib.h>
#include "llama.h"
int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: dump-logits MODEL.gguf IDS OUT.f32 [flash-attention 1|0]\n");
        return 2;
    }
    int fa = argc > 4 ? atoi(argv[4]) : 1;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "load failed\n"); return 1; }
    int ids[512], n = 0;
    FILE *f = fopen(argv[2], "r");
    if (!f) { fprintf(stderr, "cannot read %s\n", argv[2]); return 1; }
    while (n < 512 && fscanf(f, "%d", &ids[n]) == 1) n++;
    fclose(f);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = 2; cp.n_threads_batch = 2;
    cp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) { b.token[i] = ids[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1; }
    b.n_tokens = n;
    if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed\n"); return 1; }
    int V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    FILE *o = fopen(argv[3], "wb");
    if (!o) { fprintf(stderr, "cannot write %s\n", argv[3]); return 1; }
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), V, o);
    fclose(o);
    fprintf(stderr, "wrote %d x %d logits\n", n, V);
    return 0;
}
