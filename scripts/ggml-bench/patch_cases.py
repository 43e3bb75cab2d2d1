"""Insert Tessera's bench cases and a thread-count variable into
test-backend-ops.cpp (a throw-away copy; see build.sh). The case list mirrors
crates/tessera-cli/src/bench/cases.rs: keep the two in step."""
import sys

path = sys.argv[1]
src = open(path).read()

threads_old = "ggml_backend_set_n_threads_fn(backend.get(), std::max<int>(1, N_THREADS/2));"
threads_new = ("ggml_backend_set_n_threads_fn(backend.get(), getenv(\"GGML_N_THREADS\") ? "
               "atoi(getenv(\"GGML_N_THREADS\")) : std::max<int>(1, N_THREADS/2));")
assert threads_old in src, "thread-count line not found: upstream changed"
src = src.replace(threads_old, threads_new)

cases = []
for n in (1, 8, 512):
    for t in ("F32", "F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "IQ4_NL", "IQ4_XS"):
        cases.append(f"new test_mul_mat(GGML_TYPE_{t}, GGML_TYPE_F32, 4096, {n}, 14336, {{1, 1}}, {{1, 1}})")
for n in (1, 32, 512):
    for t in ("Q8_0", "Q4_0", "Q4_K", "Q6_K"):
        cases.append(f"new test_mul_mat_id(GGML_TYPE_{t}, GGML_TYPE_F32, 128, 8, false, 768, {n}, 2048)")
for op, ne, nr in (("add", "4096, 512, 1, 1", "1, 1, 1, 1"), ("add", "4096, 1, 1, 1", "1, 512, 1, 1"),
                   ("add", "4096, 4096, 1, 1", "1, 1, 1, 1"), ("mul", "4096, 512, 1, 1", "1, 1, 1, 1"),
                   ("mul", "4096, 1, 1, 1", "1, 512, 1, 1")):
    cases.append(f"new test_bin_bcast(ggml_{op}, GGML_TYPE_F32, {{{ne}}}, {{{nr}}})")
for ne in ("4096, 512, 1, 1", "4096, 4096, 1, 1"):
    cases.append(f"new test_rms_norm(GGML_TYPE_F32, {{{ne}}}, false, 1e-6f)")
cases.append("new test_soft_max(GGML_TYPE_F32, {4096, 4096, 5, 1}, false, false, GGML_TYPE_F32, {1, 1}, 1.0f, 0.0f)")
for t, ne, nd, mode in (("F32", "128, 32, 512, 1", 128, "NORMAL"), ("F32", "64, 8, 512, 1", 64, "NEOX"),
                        ("F16", "128, 32, 512, 1", 128, "NORMAL")):
    cases.append(f"new test_rope(GGML_TYPE_{t}, {{{ne}}}, {nd}, GGML_ROPE_TYPE_{mode}, 512, 1.0f, 0.0f, 1.0f, false, 0, true)")
for s, d, ne in (("F32", "F16", "512, 3072, 1, 1"), ("F32", "Q8_0", "8192, 512, 2, 1"),
                 ("F32", "Q4_0", "8192, 512, 2, 1"), ("Q4_0", "F32", "8192, 512, 2, 1")):
    cases.append(f"new test_cpy(GGML_TYPE_{s}, GGML_TYPE_{d}, {{{ne}}})")
for hs, nh, kv, nb in ((128, 8, 4096, 1), (64, 8, 512, 512), (256, 1, 512, 512)):
    cases.append(f"new test_flash_attn_ext({hs}, {hs}, {nh}, {{4, 1}}, {kv}, {nb}, true, false, 0, 0, GGML_PREC_F32, "
                 "GGML_TYPE_F16, GGML_TYPE_F16)")
for t in ("F32", "F16", "Q8_0", "Q4_0"):
    for r in (1, 512):
        cases.append(f"new test_get_rows(GGML_TYPE_{t}, 4096, 32000, {r}, 1, 1, false)")

block = "\n".join(f"        test_cases.emplace_back({c});" for c in cases)
marker = "static std::vector<std::unique_ptr<test_case>> make_test_cases_perf() {\n    std::vector<std::unique_ptr<test_case>> test_cases;\n"
assert marker in src, "make_test_cases_perf not found: upstream changed"
src = src.replace(marker, marker + "    if (getenv(\"TESSERA_CASES\")) {\n" + block + "\n        return test_cases;\n    }\n")
open(path, "w").write(src)
print(f"patched {path}: {len(cases)} Tessera cases")
