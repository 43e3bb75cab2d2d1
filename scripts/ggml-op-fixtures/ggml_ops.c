// ggml_ops: a throw-away program that makes Tessera's op fixtures with ggml
// itself as the oracle. It is compiled by generate.sh in a temporary
// directory against the ggml of the llama-cpp-python sdist (never vendored
// here) and linked with ggml's own `ggml-base` and `ggml-cpu` libraries.
//
//   ggml_ops OUT.bin OUT_MANIFEST.txt
//
// For every case it builds a small ggml graph (one op, sometimes behind a
// PERMUTE/TRANSPOSE view of an input), fills the inputs with deterministic
// pseudo-random data, computes the graph on the CPU backend
// (`ggml_backend_cpu_init`, 1 thread) and records the inputs and the result.
//
// Inputs
// ------
// PRNG: splitmix64 seeded with the 64-bit FNV-1a hash of the case name, so a
// case's data does not depend on the cases before it. `uniform(lo, hi)` is
// `lo + (hi - lo) * ((u >> 40) / 2^24)` in double, rounded to f32. F16/BF16
// inputs are f32 values converted with `ggml_fp32_to_fp16_row` /
// `ggml_fp32_to_bf16_row`; quantized inputs with `ggml_quantize_chunk`
// (ggml's reference quantizers). The fixture stores the converted bytes, so
// the test never needs this PRNG.
//
// File format (all little-endian; `str` = u32 byte length + bytes, no NUL)
// -----------------------------------------------------------------------
//   magic    4 bytes  "TGOF"
//   version  u32      1
//   n_cases  u32
//   per case:
//     name      str   unique case name
//     op        str   which builder the test uses (see below)
//     params    str   space-separated key=value; floats as %.9g (round-trip
//                     exact for f32), lists comma-separated
//     n_tensors u32
//     per tensor (inputs first, in creation order, then the output):
//       role    u8    0 = input (a leaf), 1 = output (the op's result)
//       name    str
//       type    u32   ggml type id
//       ne      4 x i64
//       nbytes  u64
//       data    nbytes bytes, contiguous in ggml's layout
//
// `op` and the tensor names it uses (the output is always "out"):
//   add, mul, div      a, b                      ggml_add/mul/div(a, b)
//   scale              a       scale bias        ggml_scale_bias
//   unary              a       fn=SILU|...       ggml_unary
//   glu                a       fn swapped        ggml_glu(a, fn, swapped)
//   glu_split          a, b    fn                ggml_glu_split(a, b, fn)
//   rms_norm, norm     a       eps
//   soft_max           a[, mask][, sinks] scale max_bias
//                                             ggml_soft_max_ext (+ ggml_soft_max_add_sinks)
//   rope               a, pos[, ff] n_dims mode n_ctx_orig freq_base
//                      freq_scale ext_factor attn_factor beta_fast beta_slow
//                      [sections=s0,s1,s2,s3]  ggml_rope_ext, or ggml_rope_multi
//                                             with sections (modes 8, 24, 40)
//   mul_mat            a, b                      ggml_mul_mat(a, b)
//   get_rows           a, ids                    ggml_get_rows(a, ids)
//   set_rows           dst, src, ids             ggml_set_rows(dst, src, ids)
//   cpy                src, dst                  ggml_cpy(src, dst)
//   cont               a                         ggml_cont(a)
//   concat             a, b    dim               ggml_concat(a, b, dim)
//   argmax, sum_rows   a
//   flash_attn_ext     q, k, v[, mask][, sinks] scale max_bias softcap
//                                             (+ ggml_flash_attn_ext_add_sinks)
//   mul_mat_id         as, b, ids                ggml_mul_mat_id(as, b, ids)
//   add_id             a, b, ids                 ggml_add_id(a, b, ids)
//   swiglu_oai         a, b    alpha limit       ggml_swiglu_oai(a, b, alpha, limit)
// Any input X may carry `perm_X=a0,a1,a2,a3` (the op sees
// `ggml_permute(X, a0, a1, a2, a3)`) or `transpose_X=1` (`ggml_transpose(X)`).

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#define MAX_TENSORS 8

typedef struct ggml_tensor T;

// ---------------------------------------------------------------------------
// PRNG

static uint64_t rng_state;

static void rng_seed_name(const char * name) {
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a 64
    for (const char * p = name; *p; p++) {
        h ^= (unsigned char) *p;
        h *= 0x100000001b3ull;
    }
    rng_state = h;
}

static uint64_t rng_next(void) { // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(float lo, float hi) {
    const double u = (double) (rng_next() >> 40) / 16777216.0;
    return (float) ((double) lo + ((double) hi - (double) lo) * u);
}

static int64_t below(int64_t n) {
    return (int64_t) (rng_next() % (uint64_t) n);
}

// ---------------------------------------------------------------------------
// Output buffer

static unsigned char * out_buf;
static size_t out_len, out_cap;
static FILE * manifest;

static void put(const void * p, size_t n) {
    if (out_len + n > out_cap) {
        out_cap = (out_len + n) * 2 + 4096;
        out_buf = realloc(out_buf, out_cap);
        if (!out_buf) {
            fprintf(stderr, "out of memory\n");
            exit(3);
        }
    }
    memcpy(out_buf + out_len, p, n);
    out_len += n;
}
static void put_u8(uint8_t v) { put(&v, 1); }
static void put_u32(uint32_t v) { put(&v, 4); }
static void put_i64(int64_t v) { put(&v, 8); }
static void put_u64(uint64_t v) { put(&v, 8); }
static void put_str(const char * s) {
    put_u32((uint32_t) strlen(s));
    put(s, strlen(s));
}

// ---------------------------------------------------------------------------
// Cases

typedef struct {
    char name[96];
    char op[32];
    char params[1024];
    struct ggml_context * ctx;
    int n_in;
    T * in[MAX_TENSORS];
    void * in_data[MAX_TENSORS];
    T * out;
} fcase;

static int n_cases;

static void begin(fcase * c, const char * name, const char * op) {
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", name);
    snprintf(c->op, sizeof(c->op), "%s", op);
    struct ggml_init_params ip = {
        /*.mem_size   =*/ ggml_tensor_overhead() * 64 + ggml_graph_overhead(),
        /*.mem_buffer =*/ NULL,
        /*.no_alloc   =*/ true,
    };
    c->ctx = ggml_init(ip);
    rng_seed_name(name);
}

static void param(fcase * c, const char * fmt, ...) {
    char buf[256];
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, sizeof(buf), fmt, args);
    va_end(args);
    size_t len = strlen(c->params);
    snprintf(c->params + len, sizeof(c->params) - len, "%s%s", len ? " " : "", buf);
}

static void paramf(fcase * c, const char * key, float v) {
    param(c, "%s=%.9g", key, (double) v);
}

static T * new_input(fcase * c, const char * name, enum ggml_type type,
                     int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    if (c->n_in == MAX_TENSORS) {
        fprintf(stderr, "%s: too many inputs\n", c->name);
        exit(2);
    }
    T * t = ggml_new_tensor_4d(c->ctx, type, ne0, ne1, ne2, ne3);
    ggml_set_name(t, name);
    ggml_set_input(t);
    c->in[c->n_in] = t;
    c->in_data[c->n_in] = calloc(1, ggml_nbytes(t));
    c->n_in++;
    return t;
}

static void * data_of(fcase * c, T * t) {
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i] == t) return c->in_data[i];
    }
    fprintf(stderr, "%s: not an input\n", c->name);
    exit(2);
}

// Fill `t` (any float or quantized type) from f32 values `v`.
static void fill_from_f32(fcase * c, T * t, const float * v) {
    void * d = data_of(c, t);
    const int64_t n = ggml_nelements(t);
    switch (t->type) {
        case GGML_TYPE_F32:  memcpy(d, v, n * sizeof(float)); break;
        case GGML_TYPE_F16:  ggml_fp32_to_fp16_row(v, d, n); break;
        case GGML_TYPE_BF16: ggml_fp32_to_bf16_row(v, d, n); break;
        default:
            ggml_quantize_chunk(t->type, v, d, 0, ggml_nrows(t), t->ne[0], NULL);
            break;
    }
}

// An input of `type` with values uniform in [lo, hi).
static T * input_u(fcase * c, const char * name, enum ggml_type type,
                   int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, float lo, float hi) {
    T * t = new_input(c, name, type, ne0, ne1, ne2, ne3);
    const int64_t n = ggml_nelements(t);
    float * v = malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = uniform(lo, hi);
    fill_from_f32(c, t, v);
    free(v);
    return t;
}

// An input of `type` with the given f32 values.
static T * input_v(fcase * c, const char * name, enum ggml_type type,
                   int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, const float * v) {
    T * t = new_input(c, name, type, ne0, ne1, ne2, ne3);
    fill_from_f32(c, t, v);
    return t;
}

static T * input_i32(fcase * c, const char * name, int64_t ne0, int64_t ne1, int64_t ne2,
                     const int32_t * v) {
    T * t = new_input(c, name, GGML_TYPE_I32, ne0, ne1, ne2, 1);
    memcpy(data_of(c, t), v, ggml_nbytes(t));
    return t;
}

static T * input_i64(fcase * c, const char * name, int64_t ne0, int64_t ne1, int64_t ne2,
                     const int64_t * v) {
    T * t = new_input(c, name, GGML_TYPE_I64, ne0, ne1, ne2, 1);
    memcpy(data_of(c, t), v, ggml_nbytes(t));
    return t;
}

static T * permute(fcase * c, T * t, int a0, int a1, int a2, int a3) {
    param(c, "perm_%s=%d,%d,%d,%d", ggml_get_name(t), a0, a1, a2, a3);
    return ggml_permute(c->ctx, t, a0, a1, a2, a3);
}

static T * transpose(fcase * c, T * t) {
    param(c, "transpose_%s=1", ggml_get_name(t));
    return ggml_transpose(c->ctx, t);
}

static void put_tensor(uint8_t role, const char * name, const T * t, const void * data) {
    put_u8(role);
    put_str(name);
    put_u32((uint32_t) t->type);
    for (int i = 0; i < 4; i++) put_i64(t->ne[i]);
    put_u64(ggml_nbytes(t));
    put(data, ggml_nbytes(t));
    fprintf(manifest, "    %-6s %-5s %-5s [%lld, %lld, %lld, %lld]\n", role ? "output" : "input", name,
            ggml_type_name(t->type), (long long) t->ne[0], (long long) t->ne[1],
            (long long) t->ne[2], (long long) t->ne[3]);
}

// Compute `out` on the CPU backend (1 thread) and append the case.
static void finish(fcase * c, T * out) {
    ggml_set_name(out, "out");
    ggml_set_output(out);
    if (!ggml_is_contiguous(out)) {
        fprintf(stderr, "%s: output is not contiguous\n", c->name);
        exit(2);
    }
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, 1);
    struct ggml_cgraph * gf = ggml_new_graph(c->ctx);
    ggml_build_forward_expand(gf, out);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(c->ctx, be);
    if (!buf) {
        fprintf(stderr, "%s: allocation failed\n", c->name);
        exit(2);
    }
    for (int i = 0; i < c->n_in; i++) {
        ggml_backend_tensor_set(c->in[i], c->in_data[i], 0, ggml_nbytes(c->in[i]));
    }
    if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "%s: compute failed\n", c->name);
        exit(2);
    }
    void * res = malloc(ggml_nbytes(out));
    ggml_backend_tensor_get(out, res, 0, ggml_nbytes(out));

    fprintf(manifest, "%s  op=%s%s%s\n", c->name, c->op, c->params[0] ? "  " : "", c->params);
    put_str(c->name);
    put_str(c->op);
    put_str(c->params);
    put_u32((uint32_t) c->n_in + 1);
    for (int i = 0; i < c->n_in; i++) {
        put_tensor(0, ggml_get_name(c->in[i]), c->in[i], c->in_data[i]);
        free(c->in_data[i]);
    }
    put_tensor(1, "out", out, res);
    free(res);
    ggml_backend_buffer_free(buf);
    ggml_backend_free(be);
    ggml_free(c->ctx);
    n_cases++;
}

// ---------------------------------------------------------------------------
// The cases

static void cases_binary(void) {
    fcase c;
    struct { const char * name; const char * op; enum ggml_type ta, tb;
             int64_t a[4], b[4]; float blo, bhi; } cs[] = {
        { "add_bcast_rows",  "add", GGML_TYPE_F32, GGML_TYPE_F32, {13, 6, 4, 3}, {13, 1, 1, 1}, -1, 1 },
        { "add_bcast_123",   "add", GGML_TYPE_F32, GGML_TYPE_F32, {13, 6, 4, 3}, {13, 3, 2, 1}, -1, 1 },
        { "add_bcast_0",     "add", GGML_TYPE_F32, GGML_TYPE_F32, {12, 5, 2, 1}, {4, 5, 1, 1},  -1, 1 },
        { "add_f16_f32",     "add", GGML_TYPE_F16, GGML_TYPE_F32, {13, 6, 2, 1}, {13, 1, 2, 1}, -1, 1 },
        { "mul_bcast_123",   "mul", GGML_TYPE_F32, GGML_TYPE_F32, {13, 6, 4, 3}, {13, 2, 4, 1}, -2, 2 },
        { "mul_f16",         "mul", GGML_TYPE_F16, GGML_TYPE_F16, {13, 6, 2, 1}, {13, 3, 1, 1}, -2, 2 },
        { "div_bcast_123",   "div", GGML_TYPE_F32, GGML_TYPE_F32, {13, 6, 4, 3}, {13, 1, 2, 3}, 0.5f, 2 },
    };
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
        begin(&c, cs[i].name, cs[i].op);
        T * a = input_u(&c, "a", cs[i].ta, cs[i].a[0], cs[i].a[1], cs[i].a[2], cs[i].a[3], -1, 1);
        T * b = input_u(&c, "b", cs[i].tb, cs[i].b[0], cs[i].b[1], cs[i].b[2], cs[i].b[3], cs[i].blo, cs[i].bhi);
        T * r = !strcmp(cs[i].op, "add") ? ggml_add(c.ctx, a, b)
              : !strcmp(cs[i].op, "mul") ? ggml_mul(c.ctx, a, b)
              : ggml_div(c.ctx, a, b);
        finish(&c, r);
    }
}

static void cases_scale(void) {
    fcase c;
    begin(&c, "scale", "scale");
    T * a = input_u(&c, "a", GGML_TYPE_F32, 17, 5, 3, 1, -3, 3);
    paramf(&c, "scale", 0.37f);
    paramf(&c, "bias", 0.0f);
    finish(&c, ggml_scale(c.ctx, a, 0.37f));

    begin(&c, "scale_bias", "scale");
    a = input_u(&c, "a", GGML_TYPE_F32, 17, 5, 3, 1, -3, 3);
    paramf(&c, "scale", -1.25f);
    paramf(&c, "bias", 0.5f);
    finish(&c, ggml_scale_bias(c.ctx, a, -1.25f, 0.5f));
}

static void cases_unary(void) {
    fcase c;
    struct { const char * fn; enum ggml_unary_op op; float lo, hi; } us[] = {
        { "SILU",     GGML_UNARY_OP_SILU,     -8, 8 },
        { "GELU",     GGML_UNARY_OP_GELU,     -12, 12 },
        { "GELU_ERF", GGML_UNARY_OP_GELU_ERF, -8, 8 },
        { "SIGMOID",  GGML_UNARY_OP_SIGMOID,  -8, 8 },
        { "RELU",     GGML_UNARY_OP_RELU,     -4, 4 },
        { "TANH",     GGML_UNARY_OP_TANH,     -4, 4 },
        { "EXP",      GGML_UNARY_OP_EXP,      -6, 6 },
    };
    char name[64];
    for (size_t i = 0; i < sizeof(us) / sizeof(us[0]); i++) {
        snprintf(name, sizeof(name), "unary_%s", us[i].fn);
        for (char * p = name; *p; p++) *p = (char) (*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        begin(&c, name, "unary");
        T * a = input_u(&c, "a", GGML_TYPE_F32, 33, 7, 2, 1, us[i].lo, us[i].hi);
        param(&c, "fn=%s", us[i].fn);
        finish(&c, ggml_unary(c.ctx, a, us[i].op));
    }
    // F16 inputs: ggml converts to f32, applies the function, rounds back
    // (GELU: an f16 table lookup).
    const int f16_ops[] = { 0, 1, 6 };
    for (size_t j = 0; j < sizeof(f16_ops) / sizeof(f16_ops[0]); j++) {
        const int i = f16_ops[j];
        snprintf(name, sizeof(name), "unary_%s_f16", us[i].fn);
        for (char * p = name; *p; p++) *p = (char) (*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        begin(&c, name, "unary");
        T * a = input_u(&c, "a", GGML_TYPE_F16, 33, 7, 2, 1, us[i].lo, us[i].hi);
        param(&c, "fn=%s", us[i].fn);
        finish(&c, ggml_unary(c.ctx, a, us[i].op));
    }
}

static void cases_glu(void) {
    fcase c;
    struct { const char * fn; enum ggml_glu_op op; } gs[] = {
        { "SWIGLU",    GGML_GLU_OP_SWIGLU },
        { "GEGLU",     GGML_GLU_OP_GEGLU },
        { "REGLU",     GGML_GLU_OP_REGLU },
        { "GEGLU_ERF", GGML_GLU_OP_GEGLU_ERF },
    };
    char name[64];
    for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++) {
        for (int swapped = 0; swapped < 2; swapped++) {
            snprintf(name, sizeof(name), "glu_%s%s", gs[i].fn, swapped ? "_swapped" : "");
            for (char * p = name; *p; p++) *p = (char) (*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
            begin(&c, name, "glu");
            // Halves of different ranges, so mixing them up cannot pass.
            const int64_t nc = 19, nr = 5, n2 = 2;
            float * v = malloc(2 * nc * nr * n2 * sizeof(float));
            for (int64_t r = 0; r < nr * n2; r++) {
                for (int64_t k = 0; k < 2 * nc; k++) {
                    v[r * 2 * nc + k] = k < nc ? uniform(-5, 5) : uniform(0.5f, 2);
                }
            }
            T * a = input_v(&c, "a", GGML_TYPE_F32, 2 * nc, nr, n2, 1, v);
            free(v);
            param(&c, "fn=%s swapped=%d", gs[i].fn, swapped);
            finish(&c, ggml_glu(c.ctx, a, gs[i].op, swapped != 0));
        }
        snprintf(name, sizeof(name), "glu_%s_split", gs[i].fn);
        for (char * p = name; *p; p++) *p = (char) (*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        begin(&c, name, "glu_split");
        T * a = input_u(&c, "a", GGML_TYPE_F32, 19, 5, 2, 1, -5, 5);
        T * b = input_u(&c, "b", GGML_TYPE_F32, 19, 5, 2, 1, 0.5f, 2);
        param(&c, "fn=%s", gs[i].fn);
        finish(&c, ggml_glu_split(c.ctx, a, b, gs[i].op));
    }
}

static void cases_norm(void) {
    fcase c;
    begin(&c, "rms_norm", "rms_norm");
    T * a = input_u(&c, "a", GGML_TYPE_F32, 45, 6, 2, 1, -2, 2);
    paramf(&c, "eps", 1e-6f);
    finish(&c, ggml_rms_norm(c.ctx, a, 1e-6f));

    begin(&c, "norm", "norm");
    a = input_u(&c, "a", GGML_TYPE_F32, 45, 6, 2, 1, -1, 3);
    paramf(&c, "eps", 1e-5f);
    finish(&c, ggml_norm(c.ctx, a, 1e-5f));
}

// A mask [n_kv, n_rows, n2, n3]: causal-like -inf pattern plus random -inf
// entries and small random finite biases; every row keeps a finite entry.
static float * make_mask(int64_t n_kv, int64_t n_rows, int64_t n2, int64_t n3) {
    float * m = malloc(n_kv * n_rows * n2 * n3 * sizeof(float));
    for (int64_t r = 0; r < n_rows * n2 * n3; r++) {
        const int64_t i1 = r % n_rows;
        for (int64_t k = 0; k < n_kv; k++) {
            float v = uniform(-1, 0);
            if (k > n_kv - n_rows + i1 || below(7) == 0) v = -INFINITY;
            if (k == 0) v = uniform(-1, 0); // keep one finite entry
            m[r * n_kv + k] = v;
        }
    }
    return m;
}

// sinks: 0 none, 1 in [-2, 2], 2 in [4, 8] (above every logit: the sink is the maximum)
static void soft_max_sinks_case(const char * name, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                                enum ggml_type mask_type, int64_t m1, int64_t m2, int64_t m3,
                                float scale, float max_bias, int sinks) {
    fcase c;
    begin(&c, name, "soft_max");
    T * a = input_u(&c, "a", GGML_TYPE_F32, ne0, ne1, ne2, ne3, -4, 4);
    T * mask = NULL;
    if (m1 > 0) {
        float * m = make_mask(ne0, m1, m2, m3);
        mask = input_v(&c, "mask", mask_type, ne0, m1, m2, m3, m);
        free(m);
    }
    T * sk = NULL;
    if (sinks) sk = input_u(&c, "sinks", GGML_TYPE_F32, ne2, 1, 1, 1, sinks == 1 ? -2 : 4, sinks == 1 ? 2 : 8);
    paramf(&c, "scale", scale);
    paramf(&c, "max_bias", max_bias);
    T * out = ggml_soft_max_ext(c.ctx, a, mask, scale, max_bias);
    if (sk) ggml_soft_max_add_sinks(out, sk);
    finish(&c, out);
}

static void soft_max_case(const char * name, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                          enum ggml_type mask_type, int64_t m1, int64_t m2, int64_t m3,
                          float scale, float max_bias) {
    soft_max_sinks_case(name, ne0, ne1, ne2, ne3, mask_type, m1, m2, m3, scale, max_bias, 0);
}

static void cases_soft_max(void) {
    soft_max_case("soft_max_plain", 23, 7, 3, 2, GGML_TYPE_F32, 0, 0, 0, 1.0f, 0.0f);
    soft_max_case("soft_max_scale", 23, 7, 3, 1, GGML_TYPE_F32, 0, 0, 0, 0.3f, 0.0f);
    // mask with one spare row (ne1 > a's ne1)
    soft_max_case("soft_max_mask_f32", 23, 7, 3, 1, GGML_TYPE_F32, 8, 1, 1, 0.125f, 0.0f);
    soft_max_case("soft_max_mask_f16", 23, 7, 3, 1, GGML_TYPE_F16, 7, 1, 1, 0.125f, 0.0f);
    // ALiBi: 8 heads (power of two: only m0) and 6 heads (m1 for heads 4, 5)
    soft_max_case("soft_max_alibi_8h", 23, 5, 8, 1, GGML_TYPE_F16, 5, 1, 1, 0.3f, 8.0f);
    soft_max_case("soft_max_alibi_6h_f32", 23, 5, 6, 1, GGML_TYPE_F32, 5, 1, 1, 0.3f, 8.0f);
    // per-head mask broadcast over dims 2-3: mask ne2 = 3 over 6 heads, ne3 1 over 2
    soft_max_case("soft_max_mask_heads", 23, 5, 6, 2, GGML_TYPE_F16, 6, 3, 1, 0.5f, 0.0f);
    soft_max_case("soft_max_mask_heads_alibi", 23, 5, 6, 2, GGML_TYPE_F32, 5, 3, 1, 0.5f, 8.0f);
    // attention sinks (one per head = dim 2)
    soft_max_sinks_case("soft_max_sinks_plain", 23, 7, 4, 1, GGML_TYPE_F32, 0, 0, 0, 1.0f, 0.0f, 1);
    soft_max_sinks_case("soft_max_sinks_large", 23, 5, 4, 2, GGML_TYPE_F32, 0, 0, 0, 0.5f, 0.0f, 2);
    soft_max_sinks_case("soft_max_sinks_mask_f16", 23, 5, 8, 1, GGML_TYPE_F16, 6, 2, 1, 0.125f, 0.0f, 1);
    soft_max_sinks_case("soft_max_sinks_mask_f32_large", 23, 5, 8, 1, GGML_TYPE_F32, 5, 1, 1, 0.3f, 0.0f, 2);
    soft_max_sinks_case("soft_max_sinks_alibi", 23, 5, 6, 1, GGML_TYPE_F16, 5, 1, 1, 0.3f, 8.0f, 1);
}

typedef struct {
    const char * name;
    enum ggml_type type;
    int64_t ne0, ne1, ne3;
    int n_dims, mode, n_ctx_orig;
    float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    int with_ff;
} rope_case;

static void cases_rope(void) {
    static const int32_t pos[] = { 0, 1, 5, 17, 100, 999, -3 };
    const int64_t n_tok = sizeof(pos) / sizeof(pos[0]);
    const rope_case rs[] = {
        // name                        type           ne0 ne1 ne3 nd mode nctx base    fscale ext  attn  bf   bs  ff
        { "rope_normal_f32",           GGML_TYPE_F32, 16, 3, 1, 16, 0, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0 },
        { "rope_neox_f32",             GGML_TYPE_F32, 16, 3, 1, 16, 2, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0 },
        { "rope_normal_f16",           GGML_TYPE_F16, 16, 3, 1, 16, 0, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0 },
        { "rope_neox_f16",             GGML_TYPE_F16, 16, 3, 1, 16, 2, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0 },
        { "rope_normal_partial",       GGML_TYPE_F32, 20, 2, 2, 12, 0, 0,   500,   0.25f, 0.0f, 1.0f, 32, 1, 0 },
        { "rope_neox_partial_f16",     GGML_TYPE_F16, 20, 2, 2, 8,  2, 0,   10000, 0.5f,  0.0f, 1.0f, 32, 1, 0 },
        { "rope_normal_yarn",          GGML_TYPE_F32, 24, 2, 1, 24, 0, 64,  10000, 0.25f, 1.0f, 1.0f, 32, 1, 0 },
        { "rope_neox_yarn",            GGML_TYPE_F32, 24, 2, 1, 24, 2, 64,  10000, 0.25f, 1.0f, 1.0f, 32, 1, 0 },
        { "rope_neox_yarn_partial_f16",GGML_TYPE_F16, 24, 2, 1, 16, 2, 128, 1e6f,  0.125f,0.5f, 0.9f, 16, 2, 0 },
        { "rope_normal_yarn_attn",     GGML_TYPE_F32, 24, 2, 1, 20, 0, 256, 10000, 0.5f,  1.0f, 1.3f, 32, 1, 0 },
        { "rope_neox_ff",              GGML_TYPE_F32, 16, 3, 1, 16, 2, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 1 },
        { "rope_normal_ff_partial",    GGML_TYPE_F32, 20, 2, 1, 12, 0, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 1 },
        { "rope_neox_ff_yarn_f16",     GGML_TYPE_F16, 16, 2, 1, 16, 2, 64,  10000, 0.25f, 1.0f, 1.0f, 32, 1, 1 },
    };
    fcase c;
    for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++) {
        const rope_case * r = &rs[i];
        begin(&c, r->name, "rope");
        T * a = input_u(&c, "a", r->type, r->ne0, r->ne1, n_tok, r->ne3, -1, 1);
        T * p = input_i32(&c, "pos", n_tok, 1, 1, pos);
        T * ff = NULL;
        if (r->with_ff) ff = input_u(&c, "ff", GGML_TYPE_F32, r->n_dims / 2, 1, 1, 1, 1, 4);
        param(&c, "n_dims=%d mode=%d n_ctx_orig=%d", r->n_dims, r->mode, r->n_ctx_orig);
        paramf(&c, "freq_base", r->freq_base);
        paramf(&c, "freq_scale", r->freq_scale);
        paramf(&c, "ext_factor", r->ext_factor);
        paramf(&c, "attn_factor", r->attn_factor);
        paramf(&c, "beta_fast", r->beta_fast);
        paramf(&c, "beta_slow", r->beta_slow);
        finish(&c, ggml_rope_ext(c.ctx, a, p, ff, r->n_dims, r->mode, r->n_ctx_orig, r->freq_base,
                                 r->freq_scale, r->ext_factor, r->attn_factor, r->beta_fast,
                                 r->beta_slow));
    }
}

typedef struct {
    const char * name;
    enum ggml_type type;
    int64_t ne0, ne1, ne3;
    int n_dims, mode, n_ctx_orig;
    float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    int with_ff;
    int sections[4];
} rope_multi_case;

// ggml_rope_multi: positions are 4 streams (t, h, w, e) of n_tok each.
static void cases_rope_multi(void) {
    enum { n_tok = 5 };
    static const int32_t pos[4 * n_tok] = {
        0, 1, 5, 17, 100,        // t
        3, 0, 9, 2, 1000,        // h
        40, 38, 7, 0, 250,       // w
        2000, 1, 0, 64, 33,      // e
    };
    const rope_multi_case rs[] = {
        // name                          type           ne0  ne1 ne3 nd  mode nctx base    fscale ext   attn  bf  bs ff sections
        { "rope_mrope_f32",              GGML_TYPE_F32, 128, 3, 1, 128, 8,  0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0, {16, 24, 24, 0} },
        { "rope_mrope_f16",              GGML_TYPE_F16, 64,  2, 1, 64,  8,  0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0, {8, 12, 12, 0} },
        { "rope_mrope_partial_wrap",     GGML_TYPE_F32, 48,  2, 2, 32,  8,  0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0, {3, 2, 2, 1} },
        { "rope_mrope_yarn_ff",          GGML_TYPE_F32, 64,  2, 1, 64,  8,  512, 1e6f,  0.25f, 1.0f, 1.5f, 32, 1, 1, {10, 11, 11, 0} },
        { "rope_imrope_f32",             GGML_TYPE_F32, 128, 3, 1, 128, 40, 0,   5e6f,  1.0f,  0.0f, 1.0f, 32, 1, 0, {24, 20, 20, 0} },
        { "rope_imrope_partial_f16",     GGML_TYPE_F16, 64,  3, 1, 48,  40, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0, {4, 4, 4, 2} },
        { "rope_imrope_yarn",            GGML_TYPE_F32, 64,  2, 1, 64,  40, 512, 10000, 0.25f, 1.0f, 1.5f, 32, 1, 0, {11, 10, 11, 0} },
        { "rope_vision_f32",             GGML_TYPE_F32, 64,  4, 1, 32,  24, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0, {8, 8, 0, 0} },
        { "rope_vision_f16_4sect",       GGML_TYPE_F16, 40,  2, 1, 20,  24, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0, {5, 3, 2, 0} },
        { "rope_vision_zero_t",          GGML_TYPE_F32, 32,  2, 1, 16,  24, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 0, {0, 4, 4, 0} },
        { "rope_vision_ff",              GGML_TYPE_F32, 32,  2, 1, 16,  24, 0,   10000, 1.0f,  0.0f, 1.0f, 32, 1, 1, {4, 4, 0, 0} },
    };
    fcase c;
    for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++) {
        const rope_multi_case * r = &rs[i];
        int sections[4] = { r->sections[0], r->sections[1], r->sections[2], r->sections[3] };
        begin(&c, r->name, "rope");
        T * a = input_u(&c, "a", r->type, r->ne0, r->ne1, n_tok, r->ne3, -1, 1);
        T * p = input_i32(&c, "pos", 4 * n_tok, 1, 1, pos);
        T * ff = NULL;
        // vision reads one factor per rotated pair: n_dims of them (ne0 / 2)
        const int64_t n_ff = r->mode == GGML_ROPE_TYPE_VISION ? r->n_dims : r->n_dims / 2;
        if (r->with_ff) ff = input_u(&c, "ff", GGML_TYPE_F32, n_ff, 1, 1, 1, 1, 4);
        param(&c, "n_dims=%d mode=%d n_ctx_orig=%d", r->n_dims, r->mode, r->n_ctx_orig);
        paramf(&c, "freq_base", r->freq_base);
        paramf(&c, "freq_scale", r->freq_scale);
        paramf(&c, "ext_factor", r->ext_factor);
        paramf(&c, "attn_factor", r->attn_factor);
        paramf(&c, "beta_fast", r->beta_fast);
        paramf(&c, "beta_slow", r->beta_slow);
        param(&c, "sections=%d,%d,%d,%d", sections[0], sections[1], sections[2], sections[3]);
        finish(&c, ggml_rope_multi(c.ctx, a, p, ff, r->n_dims, sections, r->mode, r->n_ctx_orig,
                                   r->freq_base, r->freq_scale, r->ext_factor, r->attn_factor,
                                   r->beta_fast, r->beta_slow));
    }
}

static void cases_mul_mat(void) {
    const struct { const char * tn; enum ggml_type t; int permuted; } ws[] = {
        { "f32", GGML_TYPE_F32, 1 },  { "f16", GGML_TYPE_F16, 1 },   { "bf16", GGML_TYPE_BF16, 0 },
        { "q8_0", GGML_TYPE_Q8_0, 1 }, { "q4_0", GGML_TYPE_Q4_0, 0 }, { "q4_K", GGML_TYPE_Q4_K, 1 },
        { "q6_K", GGML_TYPE_Q6_K, 0 },
    };
    const int64_t k = 256;
    char name[64];
    fcase c;
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
        // n = 1 (a matrix-vector product)
        snprintf(name, sizeof(name), "mul_mat_%s_n1", ws[i].tn);
        begin(&c, name, "mul_mat");
        T * a = input_u(&c, "a", ws[i].t, k, 7, 1, 1, -1, 1);
        T * b = input_u(&c, "b", GGML_TYPE_F32, k, 1, 1, 1, -1, 1);
        finish(&c, ggml_mul_mat(c.ctx, a, b));

        // n > 1, a broadcast over dims 2 (x2) and 3 (x2)
        snprintf(name, sizeof(name), "mul_mat_%s_bcast", ws[i].tn);
        begin(&c, name, "mul_mat");
        a = input_u(&c, "a", ws[i].t, k, 7, 2, 1, -1, 1);
        b = input_u(&c, "b", GGML_TYPE_F32, k, 3, 4, 2, -1, 1);
        finish(&c, ggml_mul_mat(c.ctx, a, b));

        if (ws[i].permuted) {
            // b stored [k, 4, 5] and seen as [k, 5, 4] (permute 0,2,1,3)
            snprintf(name, sizeof(name), "mul_mat_%s_permuted_b", ws[i].tn);
            begin(&c, name, "mul_mat");
            a = input_u(&c, "a", ws[i].t, k, 7, 2, 1, -1, 1);
            b = input_u(&c, "b", GGML_TYPE_F32, k, 4, 5, 1, -1, 1);
            finish(&c, ggml_mul_mat(c.ctx, a, permute(&c, b, 0, 2, 1, 3)));
        }
    }
}

// Mixture of experts: 8 experts, 2 used per token, 5 tokens; b per expert
// used or broadcast (one row per token); distinct ids per token, every
// expert used at least once and some several times.
static void cases_moe(void) {
    const struct { const char * tn; enum ggml_type t; } ws[] = {
        { "f32", GGML_TYPE_F32 },   { "f16", GGML_TYPE_F16 },   { "q8_0", GGML_TYPE_Q8_0 },
        { "q4_0", GGML_TYPE_Q4_0 }, { "q4_K", GGML_TYPE_Q4_K }, { "q6_K", GGML_TYPE_Q6_K },
    };
    static const int32_t ids[] = { 3, 0,   7, 3,   1, 2,   5, 6,   4, 3 };
    const int64_t k = 256;
    char name[64];
    fcase c;
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
        for (int bcast = 0; bcast < 2; bcast++) {
            snprintf(name, sizeof(name), "mul_mat_id_%s_%s", ws[i].tn, bcast ? "bcast" : "per_expert");
            begin(&c, name, "mul_mat_id");
            T * as = input_u(&c, "as", ws[i].t, k, 7, 8, 1, -1, 1);
            T * b = input_u(&c, "b", GGML_TYPE_F32, k, bcast ? 1 : 2, 5, 1, -1, 1);
            T * x = input_i32(&c, "ids", 2, 5, 1, ids);
            finish(&c, ggml_mul_mat_id(c.ctx, as, b, x));
        }
    }
    begin(&c, "add_id_f32", "add_id");
    T * a = input_u(&c, "a", GGML_TYPE_F32, 19, 2, 5, 1, -1, 1);
    T * b = input_u(&c, "b", GGML_TYPE_F32, 19, 8, 1, 1, -1, 1);
    T * x = input_i32(&c, "ids", 2, 5, 1, ids);
    finish(&c, ggml_add_id(c.ctx, a, b, x));

    // gpt-oss's constants over values crossing the limit, and a tight limit.
    const float sw[][3] = { { 1.702f, 7.0f, 10.0f }, { 1.0f, 0.5f, 1.0f } };
    for (size_t i = 0; i < 2; i++) {
        snprintf(name, sizeof(name), "swiglu_oai_%zu", i);
        begin(&c, name, "swiglu_oai");
        T * x0 = input_u(&c, "a", GGML_TYPE_F32, 33, 4, 3, 1, -sw[i][2], sw[i][2]);
        T * g0 = input_u(&c, "b", GGML_TYPE_F32, 33, 4, 3, 1, -sw[i][2], sw[i][2]);
        paramf(&c, "alpha", sw[i][0]);
        paramf(&c, "limit", sw[i][1]);
        finish(&c, ggml_swiglu_oai(c.ctx, x0, g0, sw[i][0], sw[i][1]));
    }
}

static void cases_get_rows(void) {
    const struct { const char * tn; enum ggml_type t; int64_t ne0; } ts[] = {
        { "f32", GGML_TYPE_F32, 19 },   { "f16", GGML_TYPE_F16, 19 },   { "q8_0", GGML_TYPE_Q8_0, 64 },
        { "q4_0", GGML_TYPE_Q4_0, 64 }, { "q4_K", GGML_TYPE_Q4_K, 256 }, { "q6_K", GGML_TYPE_Q6_K, 256 },
    };
    // [n = 6, ne2 = 2]: repeated indices, the last row, out of order
    static const int32_t ids[] = { 3, 0, 3, 9, 9, 1,   7, 7, 2, 0, 9, 3 };
    char name[64];
    fcase c;
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        snprintf(name, sizeof(name), "get_rows_%s", ts[i].tn);
        begin(&c, name, "get_rows");
        T * a = input_u(&c, "a", ts[i].t, ts[i].ne0, 10, 2, 1, -2, 2);
        T * x = input_i32(&c, "ids", 6, 2, 1, ids);
        finish(&c, ggml_get_rows(c.ctx, a, x));
    }
}

// Q8_0 rounding ties: per 32-block a power-of-two step s, one value +-127 s
// (the block maximum, so d = s exactly) and the others (k + 0.5) s, so that
// x / d is exactly half-way between two integers; every fourth value is a
// plain random one. ggml's reference quantizer rounds these half away from
// zero (roundf); the x86 AVX2 `quantize_row_q8_0` of the CPU backend, which
// CPY and SET_ROWS use as `from_float`, rounds half to even.
static void q8_0_tie_values(float * v, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t blk = i / 32, j = i % 32;
        const float s = ldexpf(1.0f, -(int) (blk % 4));
        if (j == blk % 32) {
            v[i] = (blk % 2 ? -127.0f : 127.0f) * s;
        } else if (j % 4 == 3) {
            v[i] = uniform(-120.0f, 120.0f) * s;
        } else {
            v[i] = ((float) (below(250) - 125) + 0.5f) * s;
        }
    }
}

static void cases_set_rows(void) {
    const struct { const char * name; enum ggml_type t; int i64; } ts[] = {
        { "set_rows_f32", GGML_TYPE_F32, 1 },
        { "set_rows_f16", GGML_TYPE_F16, 1 },
        { "set_rows_q8_0", GGML_TYPE_Q8_0, 1 },
        { "set_rows_f16_i32", GGML_TYPE_F16, 0 },
    };
    // ids [3, 2, 1]: broadcast over dst's ne2 = 4 (row i of src plane j goes
    // to ids[i, j % 2])
    static const int64_t ids64[] = { 8, 0, 4,   2, 5, 7 };
    static const int32_t ids32[] = { 8, 0, 4,   2, 5, 7 };
    fcase c;
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        begin(&c, ts[i].name, "set_rows");
        T * dst = input_u(&c, "dst", ts[i].t, 64, 9, 4, 1, -1, 1);
        T * src = input_u(&c, "src", GGML_TYPE_F32, 64, 3, 4, 1, -3, 3);
        T * x = ts[i].i64 ? input_i64(&c, "ids", 3, 2, 1, ids64) : input_i32(&c, "ids", 3, 2, 1, ids32);
        finish(&c, ggml_set_rows(c.ctx, dst, src, x));
    }

    begin(&c, "set_rows_q8_0_ties", "set_rows");
    T * dst = input_u(&c, "dst", GGML_TYPE_Q8_0, 64, 9, 4, 1, -1, 1);
    float * v = malloc(64 * 3 * 4 * sizeof(float));
    q8_0_tie_values(v, 64 * 3 * 4);
    T * src = input_v(&c, "src", GGML_TYPE_F32, 64, 3, 4, 1, v);
    free(v);
    T * x = input_i64(&c, "ids", 3, 2, 1, ids64);
    finish(&c, ggml_set_rows(c.ctx, dst, src, x));
}

static void cases_copy(void) {
    fcase c;
    const struct { const char * name; enum ggml_type t; } ts[] = {
        { "cpy_f32_f16", GGML_TYPE_F16 },   { "cpy_f32_bf16", GGML_TYPE_BF16 },
        { "cpy_f32_q8_0", GGML_TYPE_Q8_0 }, { "cpy_f32_q4_0", GGML_TYPE_Q4_0 },
        { "cpy_f32_f32", GGML_TYPE_F32 },
    };
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        begin(&c, ts[i].name, "cpy");
        T * src = input_u(&c, "src", GGML_TYPE_F32, 64, 5, 3, 1, -3, 3);
        T * dst = new_input(&c, "dst", ts[i].t, 64, 5, 3, 1); // zeros, fully overwritten
        finish(&c, ggml_cpy(c.ctx, src, dst));
    }

    begin(&c, "cpy_f32_q8_0_ties", "cpy");
    {
        float * v = malloc(64 * 5 * 3 * sizeof(float));
        q8_0_tie_values(v, 64 * 5 * 3);
        T * s8 = input_v(&c, "src", GGML_TYPE_F32, 64, 5, 3, 1, v);
        free(v);
        T * d8 = new_input(&c, "dst", GGML_TYPE_Q8_0, 64, 5, 3, 1);
        finish(&c, ggml_cpy(c.ctx, s8, d8));
    }

    begin(&c, "cpy_q4_0_f32", "cpy");
    T * src = input_u(&c, "src", GGML_TYPE_Q4_0, 64, 5, 3, 1, -3, 3);
    T * dst = new_input(&c, "dst", GGML_TYPE_F32, 64, 5, 3, 1);
    finish(&c, ggml_cpy(c.ctx, src, dst));

    // transposed F32 source [13, 7] seen as [7, 13]
    begin(&c, "cpy_transposed_f32", "cpy");
    src = input_u(&c, "src", GGML_TYPE_F32, 13, 7, 1, 1, -3, 3);
    dst = new_input(&c, "dst", GGML_TYPE_F32, 7, 13, 1, 1);
    finish(&c, ggml_cpy(c.ctx, transpose(&c, src), dst));

    // permuted F32 source into F16
    begin(&c, "cpy_permuted_f32_f16", "cpy");
    src = input_u(&c, "src", GGML_TYPE_F32, 6, 5, 4, 3, -3, 3);
    dst = new_input(&c, "dst", GGML_TYPE_F16, 4, 6, 3, 5);
    finish(&c, ggml_cpy(c.ctx, permute(&c, src, 1, 3, 0, 2), dst));

    // same element count, different shape: logical row-major order
    begin(&c, "cpy_reshaped_f32", "cpy");
    src = input_u(&c, "src", GGML_TYPE_F32, 12, 5, 2, 1, -3, 3);
    dst = new_input(&c, "dst", GGML_TYPE_F32, 20, 3, 1, 2);
    finish(&c, ggml_cpy(c.ctx, src, dst));

    begin(&c, "cont_permuted_f32", "cont");
    T * a = input_u(&c, "a", GGML_TYPE_F32, 7, 5, 3, 2, -3, 3);
    finish(&c, ggml_cont(c.ctx, permute(&c, a, 2, 0, 1, 3)));

    begin(&c, "cont_transposed_f16", "cont");
    a = input_u(&c, "a", GGML_TYPE_F16, 9, 6, 2, 1, -3, 3);
    finish(&c, ggml_cont(c.ctx, transpose(&c, a)));

    const int64_t base[4] = { 5, 4, 3, 2 };
    const int64_t extra[4] = { 3, 2, 1, 3 };
    char name[64];
    for (int dim = 0; dim < 4; dim++) {
        snprintf(name, sizeof(name), "concat_dim%d", dim);
        begin(&c, name, "concat");
        int64_t nb[4] = { base[0], base[1], base[2], base[3] };
        nb[dim] = extra[dim];
        a = input_u(&c, "a", GGML_TYPE_F32, base[0], base[1], base[2], base[3], -3, 3);
        T * b = input_u(&c, "b", GGML_TYPE_F32, nb[0], nb[1], nb[2], nb[3], -3, 3);
        param(&c, "dim=%d", dim);
        finish(&c, ggml_concat(c.ctx, a, b, dim));
    }
}

static void cases_reduce(void) {
    fcase c;
    begin(&c, "argmax", "argmax");
    const int64_t n = 17, rows = 6;
    float v[17 * 6];
    for (int64_t i = 0; i < n * rows; i++) v[i] = uniform(-5, 5);
    // row 2: a tie between positions 3 and 11
    v[2 * n + 3] = 7.5f;
    v[2 * n + 11] = 7.5f;
    // row 4: all equal
    for (int64_t i = 0; i < n; i++) v[4 * n + i] = 0.25f;
    // row 5: all negative, the maximum last
    for (int64_t i = 0; i < n; i++) v[5 * n + i] = -10.0f - (float) i;
    v[5 * n + 16] = -1.0f;
    T * a = input_v(&c, "a", GGML_TYPE_F32, n, rows, 1, 1, v);
    finish(&c, ggml_argmax(c.ctx, a));

    begin(&c, "sum_rows", "sum_rows");
    a = input_u(&c, "a", GGML_TYPE_F32, 33, 5, 3, 2, -3, 3);
    finish(&c, ggml_sum_rows(c.ctx, a));
}

static void fa_sinks_case(const char * name, enum ggml_type kv_type, int64_t dk, int64_t dv, int64_t n_q,
                          int64_t n_kv, int64_t n_head, int64_t n_head_kv, int64_t ne3,
                          int64_t mask_ne1, int64_t mask_ne2, float scale, float max_bias, float softcap,
                          int sinks) {
    fcase c;
    begin(&c, name, "flash_attn_ext");
    T * q = input_u(&c, "q", GGML_TYPE_F32, dk, n_q, n_head, ne3, -1, 1);
    T * k = input_u(&c, "k", kv_type, dk, n_kv, n_head_kv, ne3, -1, 1);
    T * v = input_u(&c, "v", kv_type, dv, n_kv, n_head_kv, ne3, -1, 1);
    T * mask = NULL;
    if (mask_ne1 > 0) {
        float * m = make_mask(n_kv, mask_ne1, mask_ne2, 1);
        mask = input_v(&c, "mask", GGML_TYPE_F16, n_kv, mask_ne1, mask_ne2, 1, m);
        free(m);
    }
    paramf(&c, "scale", scale);
    paramf(&c, "max_bias", max_bias);
    T * sk = NULL;
    if (sinks) sk = input_u(&c, "sinks", GGML_TYPE_F32, n_head, 1, 1, 1, sinks == 1 ? -2 : 4, sinks == 1 ? 2 : 8);
    paramf(&c, "softcap", softcap);
    T * out = ggml_flash_attn_ext(c.ctx, q, k, v, mask, scale, max_bias, softcap);
    if (sk) ggml_flash_attn_ext_add_sinks(out, sk);
    finish(&c, out);
}

static void fa_case(const char * name, enum ggml_type kv_type, int64_t dk, int64_t dv, int64_t n_q,
                    int64_t n_kv, int64_t n_head, int64_t n_head_kv, int64_t ne3,
                    int64_t mask_ne1, int64_t mask_ne2, float scale, float max_bias, float softcap) {
    fa_sinks_case(name, kv_type, dk, dv, n_q, n_kv, n_head, n_head_kv, ne3, mask_ne1, mask_ne2,
                  scale, max_bias, softcap, 0);
}

static void cases_flash_attn(void) {
    const float s32 = 1.0f / sqrtf(32.0f);
    // GQA 4:1, mask with exactly n_q rows
    fa_case("fa_gqa_mask", GGML_TYPE_F16, 32, 32, 5, 37, 8, 2, 1, 5, 1, s32, 0.0f, 0.0f);
    // mask with spare rows (ne1 > n_q), no GGML_KQ_MASK_PAD in this ggml
    fa_case("fa_mask_padded", GGML_TYPE_F16, 32, 32, 5, 37, 8, 2, 1, 8, 1, s32, 0.0f, 0.0f);
    fa_case("fa_no_mask", GGML_TYPE_F16, 32, 32, 3, 29, 4, 1, 1, 0, 0, s32, 0.0f, 0.0f);
    fa_case("fa_softcap", GGML_TYPE_F16, 32, 32, 5, 37, 8, 2, 1, 5, 1, 2.0f, 0.0f, 3.0f);
    // ALiBi with 12 heads (not a power of two: m1 for heads 8..11), GQA 4:1
    fa_case("fa_alibi", GGML_TYPE_F16, 32, 32, 4, 37, 12, 3, 1, 4, 1, s32, 8.0f, 0.0f);
    // per-head mask (ne2 = 2 over 8 heads) and ne3 = 2
    fa_case("fa_mask_heads_ne3", GGML_TYPE_F16, 32, 32, 3, 21, 8, 2, 2, 3, 2, s32, 0.0f, 0.0f);
    fa_case("fa_dv_ne_dk", GGML_TYPE_F16, 32, 24, 4, 25, 8, 2, 1, 4, 1, s32, 0.0f, 0.0f);
    fa_case("fa_f32_kv", GGML_TYPE_F32, 32, 32, 5, 37, 8, 2, 1, 5, 1, s32, 0.0f, 1.5f);
    // n_q >= GGML_FA_TILE_Q (64): ggml's tiled path
    fa_case("fa_tiled", GGML_TYPE_F16, 32, 32, 64, 70, 4, 1, 1, 64, 1, s32, 0.0f, 0.0f);
    // attention sinks (one per query head), GQA shapes
    fa_sinks_case("fa_sinks_gqa", GGML_TYPE_F16, 32, 32, 5, 37, 8, 2, 1, 5, 1, s32, 0.0f, 0.0f, 1);
    fa_sinks_case("fa_sinks_large", GGML_TYPE_F16, 32, 32, 3, 29, 8, 1, 1, 3, 1, s32, 0.0f, 0.0f, 2);
    fa_sinks_case("fa_sinks_no_mask", GGML_TYPE_F16, 32, 32, 1, 33, 4, 4, 1, 0, 0, s32, 0.0f, 0.0f, 1);
    fa_sinks_case("fa_sinks_f32_softcap", GGML_TYPE_F32, 32, 32, 4, 25, 6, 3, 1, 4, 1, 2.0f, 0.0f, 3.0f, 2);
    fa_sinks_case("fa_sinks_alibi", GGML_TYPE_F16, 32, 32, 4, 37, 12, 3, 1, 4, 1, s32, 8.0f, 0.0f, 1);
    fa_sinks_case("fa_sinks_tiled", GGML_TYPE_F16, 32, 32, 64, 70, 4, 2, 1, 64, 1, s32, 0.0f, 0.0f, 1);
}

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s OUT.bin MANIFEST.txt\n", argv[0]);
        return 2;
    }
    manifest = fopen(argv[2], "w");
    if (!manifest) {
        perror(argv[2]);
        return 2;
    }
    fprintf(manifest, "# ggml op fixtures: generated by scripts/ggml-op-fixtures/generate.sh; do not edit.\n");
    fprintf(manifest, "# ggml %s, CPU backend, 1 thread. name  op=...  params, then tensors.\n",
            ggml_version());
    put("TGOF", 4);
    put_u32(1);
    const size_t n_cases_at = out_len;
    put_u32(0);

    cases_binary();
    cases_scale();
    cases_unary();
    cases_glu();
    cases_norm();
    cases_soft_max();
    cases_rope();
    cases_rope_multi();
    cases_mul_mat();
    cases_get_rows();
    cases_set_rows();
    cases_copy();
    cases_reduce();
    cases_flash_attn();
    cases_moe();

    const uint32_t nc = (uint32_t) n_cases;
    memcpy(out_buf + n_cases_at, &nc, 4);
    FILE * f = fopen(argv[1], "wb");
    if (!f || fwrite(out_buf, 1, out_len, f) != out_len || fclose(f) != 0) {
        perror(argv[1]);
        return 2;
    }
    fclose(manifest);
    fprintf(stderr, "ggml_ops: %d cases, %zu bytes\n", n_cases, out_len);
    return 0;
}
