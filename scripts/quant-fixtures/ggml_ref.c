// ggml_ref: a throw-away command-line wrapper around ggml's own reference
// (de)quantizers, used only by generate.py to make Tessera's test fixtures.
//
// It is compiled by generate.py in a temporary directory against the
// ggml-quants.c of the llama-cpp-python sdist (never vendored here):
//
//   ggml_ref quant   TYPE N   < N f32 values          > row bytes
//   ggml_ref dequant TYPE N   < row bytes of N values > N f32 values
//
// TYPE is one of f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q8_1 q2_K q3_K q4_K q5_K q6_K q8_K
// iq4_nl iq4_xs. Everything is
// little-endian raw binary on stdin/stdout. The output buffer of `quant` is
// zeroed first, so bytes ggml leaves unwritten (q8_K's bsums of an all-zero
// block) come out as zeros. quantize_row_iq4_nl_ref leaves the indices of a
// block whose largest magnitude is below GROUP_MAX_EPS as its stack scratch
// held them (the previous block's, or uninitialised for the first); that
// block's d is 0, and the tests ignore its indices. ggml has no dequantize_row_q8_1; `dequant q8_1`
// writes d * qs (the values the quants stand for; s is not a value).

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-quants.h"
#include "ggml-impl.h"

// ggml-quants.c references a few symbols from ggml.c, only on paths this
// helper never takes (validation, importance-matrix quantizers). Stub them so
// the helper links against ggml-quants.c alone.
void ggml_abort(const char * file, int line, const char * fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "ggml_abort at %s:%d: ", file, line);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fputc('\n', stderr);
    abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) {
    (void) type; (void) ne;
    fprintf(stderr, "ggml_ref: ggml_row_size is stubbed\n");
    abort();
}
const char * ggml_type_name(enum ggml_type type) {
    (void) type;
    return "?";
}
size_t ggml_type_size(enum ggml_type type) {
    (void) type;
    fprintf(stderr, "ggml_ref: ggml_type_size is stubbed\n");
    abort();
}

struct type_info {
    const char * name;
    int64_t block;    // elements per block
    size_t  bytes;    // bytes per block
};

static const struct type_info TYPES[] = {
    { "f16",  1,     sizeof(ggml_fp16_t) },
    { "bf16", 1,     sizeof(ggml_bf16_t) },
    { "q4_0", QK4_0, sizeof(block_q4_0) },
    { "q4_1", QK4_1, sizeof(block_q4_1) },
    { "q5_0", QK5_0, sizeof(block_q5_0) },
    { "q5_1", QK5_1, sizeof(block_q5_1) },
    { "q8_0", QK8_0, sizeof(block_q8_0) },
    { "q8_1", QK8_1, sizeof(block_q8_1) },
    { "q2_K", QK_K,  sizeof(block_q2_K) },
    { "q3_K", QK_K,  sizeof(block_q3_K) },
    { "q4_K", QK_K,  sizeof(block_q4_K) },
    { "q5_K", QK_K,  sizeof(block_q5_K) },
    { "q6_K", QK_K,  sizeof(block_q6_K) },
    { "q8_K", QK_K,  sizeof(block_q8_K) },
    { "iq4_nl", QK4_NL, sizeof(block_iq4_nl) },
    { "iq4_xs", QK_K,   sizeof(block_iq4_xs) },
};

static void read_all(void * buf, size_t n) {
    if (fread(buf, 1, n, stdin) != n) {
        fprintf(stderr, "ggml_ref: short read on stdin (wanted %zu bytes)\n", n);
        exit(2);
    }
}

static void write_all(const void * buf, size_t n) {
    if (fwrite(buf, 1, n, stdout) != n) {
        fprintf(stderr, "ggml_ref: short write on stdout\n");
        exit(2);
    }
}

static void quant(const char * t, const float * x, void * y, int64_t n) {
    if (!strcmp(t, "f16")) {
        ggml_fp16_t * h = y;
        for (int64_t i = 0; i < n; i++) h[i] = GGML_FP32_TO_FP16(x[i]);
    } else if (!strcmp(t, "bf16")) {
        ggml_bf16_t * h = y;
        for (int64_t i = 0; i < n; i++) h[i] = GGML_FP32_TO_BF16(x[i]);
    } else if (!strcmp(t, "q4_0")) {
        quantize_row_q4_0_ref(x, y, n);
    } else if (!strcmp(t, "q4_1")) {
        quantize_row_q4_1_ref(x, y, n);
    } else if (!strcmp(t, "q5_0")) {
        quantize_row_q5_0_ref(x, y, n);
    } else if (!strcmp(t, "q5_1")) {
        quantize_row_q5_1_ref(x, y, n);
    } else if (!strcmp(t, "q8_0")) {
        quantize_row_q8_0_ref(x, y, n);
    } else if (!strcmp(t, "q8_1")) {
        quantize_row_q8_1_ref(x, y, n);
    } else if (!strcmp(t, "q2_K")) {
        quantize_row_q2_K_ref(x, y, n);
    } else if (!strcmp(t, "q3_K")) {
        quantize_row_q3_K_ref(x, y, n);
    } else if (!strcmp(t, "q4_K")) {
        quantize_row_q4_K_ref(x, y, n);
    } else if (!strcmp(t, "q5_K")) {
        quantize_row_q5_K_ref(x, y, n);
    } else if (!strcmp(t, "q6_K")) {
        quantize_row_q6_K_ref(x, y, n);
    } else if (!strcmp(t, "q8_K")) {
        quantize_row_q8_K_ref(x, y, n);
    } else if (!strcmp(t, "iq4_nl")) {
        quantize_row_iq4_nl_ref(x, y, n);
    } else if (!strcmp(t, "iq4_xs")) {
        quantize_row_iq4_xs_ref(x, y, n);
    }
}

static void dequant(const char * t, const void * x, float * y, int64_t n) {
    if (!strcmp(t, "f16")) {
        const ggml_fp16_t * h = x;
        for (int64_t i = 0; i < n; i++) y[i] = GGML_FP16_TO_FP32(h[i]);
    } else if (!strcmp(t, "bf16")) {
        const ggml_bf16_t * h = x;
        for (int64_t i = 0; i < n; i++) y[i] = GGML_BF16_TO_FP32(h[i]);
    } else if (!strcmp(t, "q4_0")) {
        dequantize_row_q4_0(x, y, n);
    } else if (!strcmp(t, "q4_1")) {
        dequantize_row_q4_1(x, y, n);
    } else if (!strcmp(t, "q5_0")) {
        dequantize_row_q5_0(x, y, n);
    } else if (!strcmp(t, "q5_1")) {
        dequantize_row_q5_1(x, y, n);
    } else if (!strcmp(t, "q8_0")) {
        dequantize_row_q8_0(x, y, n);
    } else if (!strcmp(t, "q8_1")) {
        const block_q8_1 * b = x;
        for (int64_t i = 0; i < n; i++) {
            y[i] = GGML_FP16_TO_FP32(b[i / QK8_1].d) * b[i / QK8_1].qs[i % QK8_1];
        }
    } else if (!strcmp(t, "q2_K")) {
        dequantize_row_q2_K(x, y, n);
    } else if (!strcmp(t, "q3_K")) {
        dequantize_row_q3_K(x, y, n);
    } else if (!strcmp(t, "q4_K")) {
        dequantize_row_q4_K(x, y, n);
    } else if (!strcmp(t, "q5_K")) {
        dequantize_row_q5_K(x, y, n);
    } else if (!strcmp(t, "q6_K")) {
        dequantize_row_q6_K(x, y, n);
    } else if (!strcmp(t, "q8_K")) {
        dequantize_row_q8_K(x, y, n);
    } else if (!strcmp(t, "iq4_nl")) {
        dequantize_row_iq4_nl(x, y, n);
    } else if (!strcmp(t, "iq4_xs")) {
        dequantize_row_iq4_xs(x, y, n);
    }
}

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s quant|dequant TYPE N\n", argv[0]);
        return 2;
    }
    const char * op = argv[1];
    const char * t = argv[2];
    const int64_t n = atoll(argv[3]);
    const struct type_info * info = NULL;
    for (size_t i = 0; i < sizeof(TYPES) / sizeof(TYPES[0]); i++) {
        if (!strcmp(TYPES[i].name, t)) info = &TYPES[i];
    }
    if (!info || n <= 0 || n % info->block != 0) {
        fprintf(stderr, "ggml_ref: bad type '%s' or count %lld\n", t, (long long) n);
        return 2;
    }
    const size_t nbytes = (size_t) (n / info->block) * info->bytes;
    float * f = calloc((size_t) n, sizeof(float));
    unsigned char * q = calloc(nbytes, 1);
    if (!f || !q) return 3;
    if (!strcmp(op, "quant")) {
        read_all(f, (size_t) n * sizeof(float));
        quant(t, f, q, n);
        write_all(q, nbytes);
    } else if (!strcmp(op, "dequant")) {
        read_all(q, nbytes);
        dequant(t, q, f, n);
        write_all(f, (size_t) n * sizeof(float));
    } else {
        fprintf(stderr, "ggml_ref: unknown op '%s'\n", op);
        return 2;
    }
    free(f);
    free(q);
    return 0;
}
