// A ggml-rpc client built from llama.cpp's own ggml (protocol 7.0.0):
// computes a small graph (Q8_0 MUL_MAT, RMS_NORM, RESHAPE, NeoX ROPE,
// SOFT_MAX, GET_ROWS, ADD) on the RPC backend at ENDPOINT and on ggml's
// local CPU backend, prints both and exits 0 if they agree within 1e-4.
//
// Usage: ggml-rpc-client HOST:PORT
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-rpc.h"

#include <cmath>
#include <cstdio>
#include <vector>

static std::vector<float> ramp(int n, float k) {
    std::vector<float> v(n);
    for (int i = 0; i < n; i++) v[i] = (float)((i * 7) % 13 - 6) * k;
    return v;
}

static std::vector<float> run(ggml_backend_t be) {
    ggml_init_params ip = { ggml_tensor_overhead() * 64 + ggml_graph_overhead(), nullptr, true };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * w   = ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, 64, 32);
    ggml_tensor * x   = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 5);
    ggml_tensor * pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 5);
    ggml_tensor * ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 3);
    ggml_tensor * y   = ggml_mul_mat(ctx, w, x);
    ggml_tensor * z   = ggml_rms_norm(ctx, y, 1e-5f);
    ggml_tensor * z3  = ggml_reshape_3d(ctx, z, 8, 4, 5);
    ggml_tensor * r   = ggml_rope_ext(ctx, z3, pos, nullptr, 8, GGML_ROPE_TYPE_NEOX, 0,
                                      10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    ggml_tensor * s   = ggml_soft_max(ctx, r);
    ggml_tensor * s2  = ggml_reshape_2d(ctx, s, 32, 5);
    ggml_tensor * g   = ggml_get_rows(ctx, s2, ids);
    ggml_tensor * out = ggml_add(ctx, g, g);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);

    std::vector<float> wf = ramp(64 * 32, 0.02f);
    std::vector<uint8_t> wq(ggml_nbytes(w));
    ggml_quantize_chunk(GGML_TYPE_Q8_0, wf.data(), wq.data(), 0, 32, 64, nullptr);
    ggml_backend_tensor_set(w, wq.data(), 0, wq.size());
    std::vector<float> xf = ramp(64 * 5, 0.1f);
    ggml_backend_tensor_set(x, xf.data(), 0, xf.size() * 4);
    int32_t pv[5] = {0, 1, 2, 3, 4};
    ggml_backend_tensor_set(pos, pv, 0, sizeof(pv));
    int32_t iv[3] = {4, 0, 2};
    ggml_backend_tensor_set(ids, iv, 0, sizeof(iv));

    // Twice: the second run of the same graph goes as GRAPH_RECOMPUTE.
    for (int k = 0; k < 2; k++) {
        if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "compute failed\n");
            return {};
        }
    }
    std::vector<float> o(ggml_nelements(out));
    ggml_backend_tensor_get(out, o.data(), 0, o.size() * 4);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return o;
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s HOST:PORT\n", argv[0]);
        return 2;
    }
    ggml_backend_t rpc = ggml_backend_rpc_init(argv[1], 0);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    std::vector<float> a = run(rpc);
    std::vector<float> b = run(cpu);
    if (a.empty() || a.size() != b.size()) return 1;
    double maxd = 0;
    for (size_t i = 0; i < a.size(); i++) maxd = std::fmax(maxd, std::fabs(a[i] - b[i]));
    printf("remote[0..4] = %g %g %g %g\n", a[0], a[1], a[2], a[3]);
    printf("local [0..4] = %g %g %g %g\n", b[0], b[1], b[2], b[3]);
    printf("%zu values, max |remote - local| = %g\n", a.size(), maxd);
    ggml_backend_free(rpc);
    ggml_backend_free(cpu);
    return maxd <= 1e-4 ? 0 : 1;
}
