// llama.cpp as an oracle for Tessera's model runner: tokenizes a prompt the
// way llama-tokenize does (add_special, parse_special), then decodes
// greedily and prints token ids, so that Tessera's tokens can be compared id
// for id (llama-completion prints text, which can lose bytes; ids cannot).
//
//   llama_ref MODEL.gguf N_PREDICT PROMPT [--logits K | --top K]
// prints
//   prompt: id id id ...
//   logits: v v v ...          (--logits: the first K logits after the prompt)
//   top: id:v id:v ...         (--top: the K largest logits after the prompt)
//   greedy: id id id ...
// LLAMA_REF_NO_FA=1 turns flash attention off.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"

static void quiet(enum ggml_log_level level, const char * text, void * data) {
    (void) level; (void) text; (void) data;
}

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL N_PREDICT PROMPT [--logits K]\n", argv[0]);
        return 2;
    }
    const char * path = argv[1];
    int n_predict = atoi(argv[2]);
    const char * prompt = argv[3];
    int n_logits = (argc >= 6 && strcmp(argv[4], "--logits") == 0) ? atoi(argv[5]) : 0;
    int n_top = (argc >= 6 && strcmp(argv[4], "--top") == 0) ? atoi(argv[5]) : 0;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", path); return 1; }
    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    int len = (int) strlen(prompt);
    int n = -llama_tokenize(vocab, prompt, len, NULL, 0, true, true);
    llama_token * toks = malloc(sizeof(llama_token) * (n + n_predict + 1));
    if (llama_tokenize(vocab, prompt, len, toks, n, true, true) != n) { fprintf(stderr, "tokenize\n"); return 1; }
    printf("prompt:");
    for (int i = 0; i < n; i++) printf(" %d", toks[i]);
    printf("\n");
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n + n_predict + 16;
    cp.n_batch = cp.n_ctx;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    const char * no_fa = getenv("LLAMA_REF_NO_FA");
    if (no_fa && strcmp(no_fa, "1") == 0) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create a context\n"); return 1; }
    int n_vocab = llama_vocab_n_tokens(vocab);
    if (llama_decode(ctx, llama_batch_get_one(toks, n))) { fprintf(stderr, "decode\n"); return 1; }
    if (n_logits > 0) {
        float * l = llama_get_logits_ith(ctx, -1);
        printf("logits:");
        for (int i = 0; i < n_logits && i < n_vocab; i++) printf(" %.6g", l[i]);
        printf("\n");
    }
    if (n_top > 0) {
        float * l = llama_get_logits_ith(ctx, -1);
        char * used = calloc(n_vocab, 1);
        printf("top:");
        for (int k = 0; k < n_top && k < n_vocab; k++) {
            int best = -1;
            for (int i = 0; i < n_vocab; i++) if (!used[i] && (best < 0 || l[i] > l[best])) best = i;
            used[best] = 1;
            printf(" %d:%.6g", best, l[best]);
        }
        printf("\n");
        free(used);
    }
    printf("greedy:");
    for (int s = 0; s < n_predict; s++) {
        float * l = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int i = 1; i < n_vocab; i++) if (l[i] > l[best]) best = i;
        printf(" %d", best);
        fflush(stdout);
        if (llama_vocab_is_eog(vocab, best)) break;
        llama_token t = best;
        if (llama_decode(ctx, llama_batch_get_one(&t, 1))) { fprintf(stderr, "decode\n"); return 1; }
    }
    printf("\n");
    llama_free(ctx);
    llama_model_free(model);
    free(toks);
    return 0;
}
