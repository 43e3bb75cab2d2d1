#!/usr/bin/env bash
# One device call's GPU check (prepared by prepare.sh; see there):
#   run(command="bash scripts/gpu-session/run.sh", carry=[".gpu"], timeout_s=600)
#
# Correctness first (the wgpu unit tests and the conformance suite on the
# real GPU), then the choices that wait for timing on a GPU, each measured
# against its off switch in the same call, interleaved:
#   - reductions by subgroups (TESSERA_WGPU_SUBGROUPS=0 off: trees in
#     workgroup memory), merged products (TESSERA_WGPU_MERGE=0 off) and
#     gate/up with their GLU in one dispatch (TESSERA_WGPU_GLU_PRODUCTS=0
#     off), decoding tg128;
#   - a tied output matrix's copy on the GPU (Gemma 3 270M-shaped file;
#     --ngl 18 leaves the output on the CPU) and Gemma's joined norms
#     (TESSERA_WGPU_FUSE_SANDWICH=0, TESSERA_WGPU_FUSE_PAIR=0 off), decoding;
#   - a mixture-of-experts model's expert products by the integer kernel
#     (TESSERA_WGPU_MOE_Q8=0 off: one invocation per output), its prompts'
#     by tiles of each expert's tokens (TESSERA_WGPU_MOE_TILES=0 off),
#     decoding and prompts of a synthetic Qwen3 MoE file;
#   - the split long-context attention (TESSERA_WGPU_FA_SPLIT=0 off),
#     FLASH_ATTN_EXT at 4,096 keys; prompts' attention by blocks of
#     queries (TESSERA_WGPU_FA_TILES=0 off), pp512 with and without 4,096
#     tokens before;
#   - cooperative matrices for prompts (TESSERA_WGPU_COOPMAT=0 off: the
#     integer tiles; =big their 128 x 128 tile), the integer tiled products (TESSERA_WGPU_MMQ=0 off,
#     =big their 128 x 128 tile) and the float ones with the 128 x 128
#     tile (TESSERA_WGPU_MM=big), prompts pp512,
#     and the same op by op (n=512);
# then where a decoding step's and a prompt's GPU time goes (--profile,
# --profile-prompt), and, with
# .gpu/llama, llama.cpp's Vulkan backend live beside each.
# Everything goes to $OUT/run.log (one file: at most 8 come back).
#
# QUICK=1: a dry run on lavapipe (small counts, layers only on the GPU).
# PART=1 (tests, decoding) or PART=2 (prompts, ops, profiles): half the
# checks, each in a call of its own, so that both fit the device's time:
#   run(command="PART=1 bash scripts/gpu-session/run.sh", carry=[".gpu"], timeout_s=600)
#   run(command="PART=2 bash scripts/gpu-session/run.sh", carry=[".gpu"], timeout_s=...)
set -uo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
G=.gpu
OUT=${OUT:-/tmp/gpu-session-out}
mkdir -p "$OUT"
LOG=$OUT/run.log
: >"$LOG"
T=$G/bin/tessera
began=$(date +%s)

# The whole call must end within the device's 600 s: steps that would
# run past DEADLINE seconds are skipped (and say so).
DEADLINE=${DEADLINE:-560}
say() { echo "== $* ($(($(date +%s) - began)) s)" | tee -a "$LOG"; }
# Whether a step of `limit` seconds still fits before the deadline.
fits() {
    if [ $(($(date +%s) - began + $1)) -gt "$DEADLINE" ]; then
        echo "(skipped: $1 s would pass the ${DEADLINE} s deadline)" | tee -a "$LOG"
        return 1
    fi
}
# Whether this call runs part $1 (PART=1 or 2: the checks split over two
# device calls; unset: both, as far as the deadline allows).
in_part() { [ -z "${PART:-}" ] || [ "$PART" = "$1" ]; }
# Run a command with a time limit, its output into the log.
step() {
    local limit=$1
    shift
    fits "$limit" || return 0
    echo "\$ $*" >>"$LOG"
    timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || echo "(exit $rc)" >>"$LOG"
    return 0
}

export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
if ! ldconfig -p | grep libvulkan.so.1 >/dev/null; then
    for f in "$G"/gl/*.deb; do
        [ -e "$f" ] && dpkg -x "$f" /
    done
    ldconfig
fi
if [ -d /usr/local/nvidia/share/vulkan/icd.d ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
if [ -d "$G/llama" ]; then
    export LD_LIBRARY_PATH="$PWD/$G/llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if [ "${QUICK:-0}" = 1 ]; then
    PP=64 TG=8 REPS=1 NGL="--ngl 16" SECS=0.2 DEPTH=64 DTG=4
else
    PP=512 TG=128 REPS=3 NGL="" SECS=1 DEPTH=4096 DTG=32
fi
VS_OPS=()
VS_MODEL=()
if [ -x "$G/llama/test-backend-ops" ]; then
    VS_OPS=(--ggml "$G/llama/test-backend-ops" --ggml-backend Vulkan0)
    VS_MODEL=(--llama-bench "$G/llama/llama-bench")
fi

say "machine"
step 20 nvidia-smi -L
step 60 "$T" devices

if in_part 1; then
say "wgpu unit tests on the GPU"
TESSERA_REQUIRE_GPU=1 step 150 "$G/bin/wgpu-unit" --test-threads 4
fi

if in_part 1; then
say "conformance on wgpu0"
step 180 "$T" test --device wgpu0
fi

say "benchmark files"
M=/tmp/gpu-session-models
mkdir -p "$M"
for t in q4_0 q4_K; do
    step 120 "$G/bin/synth" llama "$t" "$G/vocab.gguf" "$M/1b-$t.gguf" llama-3.2-1b
done
step 60 "$G/bin/synth" gemma3 q4_0 "$G/vocab.gguf" "$M/g270-q4_0.gguf" gemma-3-270m
step 60 "$G/bin/synth" qwen3moe q4_K "$G/vocab.gguf" "$M/moe-q4_K.gguf" moe-1024

if in_part 1; then
say "greedy tokens: default, products one by one, gate/up and GLU apart, no fusion at all (same bits: same md5)"
for opts in "" TESSERA_WGPU_MERGE=0 TESSERA_WGPU_GLU_PRODUCTS=0 TESSERA_WGPU_FUSE=0; do
    fits 120 || break
    out=$(env $opts timeout -k 5 120 "$T" run -m "$M/1b-q4_0.gguf" --device wgpu0 $NGL \
        --temp 0 -n 24 -p "The quick brown fox" 2>"$OUT/run-stderr.txt")
    rc=$?
    if [ $rc -ne 0 ] || [ -z "$out" ]; then
        echo "[${opts:-default}] FAILED (exit $rc, ${#out} bytes):" | tee -a "$LOG"
        tail -5 "$OUT/run-stderr.txt" >>"$LOG"
    else
        echo "[${opts:-default}] $(printf '%s' "$out" | md5sum)" | tee -a "$LOG"
    fi
done
rm -f "$OUT/run-stderr.txt"
fi

if in_part 1; then
say "decoding: default, reductions by trees, products one by one, gate/up and GLU apart; interleaved (Q4_0 twice, then Q4_K)"
for run in "q4_0 1" "q4_0 2" "q4_K 1"; do
    set -- $run
    f=$1
    for opts in "" TESSERA_WGPU_SUBGROUPS=0 TESSERA_WGPU_MERGE=0 TESSERA_WGPU_GLU_PRODUCTS=0; do
        # Q4_K: the default and the trees only.
        case "$f $opts" in q4_K\ *MERGE* | q4_K\ *GLU*) continue ;; esac
        echo "-- $f round $2 [${opts:-default}]" >>"$LOG"
        fits 60 || continue
        env $opts timeout -k 5 60 "$T" bench model -m "$M/1b-$f.gguf" --device wgpu0 $NGL \
            -p 0 -n "$TG" -r "$REPS" "${VS_MODEL[@]}" >>"$LOG" 2>&1 || echo "(exit $?)" >>"$LOG"
    done
done
fi

if in_part 1; then
say "Gemma 3 270M-shaped, output tied to the embeddings: default / the output on the CPU (--ngl 18) / norms not joined (TESSERA_WGPU_FUSE_SANDWICH=0 TESSERA_WGPU_FUSE_PAIR=0)"
for opts in "" "--ngl 18" "TESSERA_WGPU_FUSE_SANDWICH=0 TESSERA_WGPU_FUSE_PAIR=0"; do
    echo "-- ${opts:-default}" >>"$LOG"
    ngl=""
    envs=""
    case "$opts" in --ngl*) ngl=$opts ;; *) envs=$opts ;; esac
    # shellcheck disable=SC2086 # empty or several words
    ([ -z "$envs" ] || export $envs; step 45 "$T" bench model -m "$M/g270-q4_0.gguf" --device wgpu0 $ngl \
        -p 0 -n "$TG" -r "$REPS" "${VS_MODEL[@]}")
done
fi

if in_part 1; then
say "mixture of experts (synthetic Qwen3 MoE, 32 experts of 256 x 1,024, 4 used): integer expert products with the weighted sum joined and prompts by each expert's tiles (default) / prompts by the matrix-vector kernel (TESSERA_WGPU_MOE_TILES=0) / sum apart (TESSERA_WGPU_FUSE_MOE=0) / matmul_id.wgsl (TESSERA_WGPU_MOE_Q8=0); interleaved; then greedy md5s after a 217-token prompt, default, sum apart and no tiles (same tokens)"
for round in 1 2; do
    for opts in TESSERA_WGPU_MOE_Q8=1 TESSERA_WGPU_MOE_TILES=0 TESSERA_WGPU_FUSE_MOE=0 TESSERA_WGPU_MOE_Q8=0; do
        echo "-- round $round $opts" >>"$LOG"
        # shellcheck disable=SC2086 # one assignment
        (export $opts; step 45 "$T" bench model -m "$M/moe-q4_K.gguf" --device wgpu0 $NGL \
            -p "$PP" -n "$TG" -r "$REPS" "${VS_MODEL[@]}")
    done
done
say "MoE prompts of 64 and 128 tokens (8 and 16 pairs an expert on average): tiles from 12 pairs (default) / tiles always (TESSERA_WGPU_MOE_TILES=always) / none (TESSERA_WGPU_MOE_TILES=0): where a GPU's crossing lies"
for pp in 64 128; do
    for opts in TESSERA_WGPU_MOE_TILES=1 TESSERA_WGPU_MOE_TILES=always TESSERA_WGPU_MOE_TILES=0; do
        echo "-- pp$pp $opts" >>"$LOG"
        # shellcheck disable=SC2086 # one assignment
        (export $opts; step 45 "$T" bench model -m "$M/moe-q4_K.gguf" --device wgpu0 $NGL \
            -p "$pp" -n 0 -r "$REPS")
    done
done
LONG=$(for _ in $(seq 12); do printf 'The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. '; done)
for opts in TESSERA_WGPU_MOE_Q8=1 TESSERA_WGPU_FUSE_MOE=0 TESSERA_WGPU_MOE_TILES=0; do
    fits 60 || break
    echo "[$opts] $(env $opts timeout -k 5 60 "$T" run -m "$M/moe-q4_K.gguf" --device wgpu0 $NGL \
        --temp 0 -n 24 -p "$LONG" 2>/dev/null | tail -c 400 | md5sum)" | tee -a "$LOG"
done
fi

if in_part 2; then
say "prompts: cooperative matrices where the GPU has them (default; 128 tiles: TESSERA_WGPU_COOPMAT=big), integer 64 tiles (TESSERA_WGPU_COOPMAT=0), integer 128 tiles (+ TESSERA_WGPU_MMQ=big), float 64 tiles (TESSERA_WGPU_MMQ=0), float 128 tiles (+ TESSERA_WGPU_MM=big)"
"$T" devices 2>&1 | grep -i "features" >>"$LOG"
for f in q4_0 q4_K; do
    for round in 1 2; do
        for opts in TESSERA_WGPU_MMQ=1 TESSERA_WGPU_COOPMAT=big TESSERA_WGPU_COOPMAT=0 "TESSERA_WGPU_COOPMAT=0 TESSERA_WGPU_MMQ=big" TESSERA_WGPU_MMQ=0 "TESSERA_WGPU_MMQ=0 TESSERA_WGPU_MM=big"; do
            # The float 128 tile once (q4_0, first round): an older candidate.
            case "$f $round $opts" in *2\ *MM=big | q4_K*MM=big) continue ;; esac
            echo "-- $f round $round $opts" >>"$LOG"
            # shellcheck disable=SC2086 # one or two assignments
            (export $opts; step 45 "$T" bench model -m "$M/1b-$f.gguf" --device wgpu0 $NGL \
                -p "$PP" -n 0 -r "$REPS" "${VS_MODEL[@]}")
        done
    done
done
fi

if in_part 2; then
say "products of 512 columns: cooperative matrices (default, where the GPU has them) / their 128 tiles (TESSERA_WGPU_COOPMAT=big) / integer tiles (TESSERA_WGPU_COOPMAT=0) / integer 128 tiles (+ TESSERA_WGPU_MMQ=big) / float tiles (TESSERA_WGPU_MMQ=0)"
for opts in TESSERA_WGPU_MMQ=1 TESSERA_WGPU_COOPMAT=big TESSERA_WGPU_COOPMAT=0 "TESSERA_WGPU_COOPMAT=0 TESSERA_WGPU_MMQ=big" TESSERA_WGPU_MMQ=0; do
    echo "-- $opts" >>"$LOG"
    # shellcheck disable=SC2086 # one or two assignments
    (export $opts; step 60 "$T" bench ops --device wgpu0 --op "n=512," --seconds "$SECS" "${VS_OPS[@]}")
done
fi

if in_part 2; then
say "greedy text after a prompt of ~40 tokens: default (cooperative matrices where the GPU has them) / integer tiles (TESSERA_WGPU_COOPMAT=0) / float tiles (TESSERA_WGPU_MMQ=0); may part at a near tie"
for opts in TESSERA_WGPU_MMQ=1 TESSERA_WGPU_COOPMAT=0 TESSERA_WGPU_MMQ=0; do
    # shellcheck disable=SC2086 # one assignment
    (export $opts; step 45 "$T" run -m "$M/1b-q4_0.gguf" --device wgpu0 $NGL --temp 0 -n 24 \
        -p "$(printf 'The quick brown fox jumps over the lazy dog. %.0s' 1 2 3)Once upon a time")
done
fi

if in_part 2; then
say "attention at 4,096 keys: split / one workgroup a row (TESSERA_WGPU_FA_SPLIT=0)"
for round in 1 2; do
    for split in 1 0; do
        echo "-- round $round TESSERA_WGPU_FA_SPLIT=$split" >>"$LOG"
        TESSERA_WGPU_FA_SPLIT=$split step 60 "$T" bench ops --device wgpu0 \
            --op "FLASH_ATTN_EXT(hsk=128" --seconds "$SECS" "${VS_OPS[@]}"
    done
done
fi

if in_part 2; then
say "a long context: decoding after 4,096 tokens (tg32 @ d4096; QUICK: tg4 @ d64), split attention / one workgroup a row (TESSERA_WGPU_FA_SPLIT=0), each beside llama.cpp"
for split in 1 0; do
    echo "-- TESSERA_WGPU_FA_SPLIT=$split" >>"$LOG"
    TESSERA_WGPU_FA_SPLIT=$split step 90 "$T" bench model -m "$M/1b-q4_0.gguf" --device wgpu0 $NGL \
        -p 0 -n "$DTG" -d "$DEPTH" -r 2 "${VS_MODEL[@]}"
done
fi

if in_part 2; then
say "prompt attention: blocks of queries a workgroup (default) / one workgroup a query row (TESSERA_WGPU_FA_TILES=0); Gemma-shaped pp$PP, then 1B pp$PP after $DEPTH tokens; interleaved"
for round in 1 2; do
    for tiles in 1 0; do
        echo "-- round $round TESSERA_WGPU_FA_TILES=$tiles" >>"$LOG"
        TESSERA_WGPU_FA_TILES=$tiles step 45 "$T" bench model -m "$M/g270-q4_0.gguf" --device wgpu0 \
            -p "$PP" -n 0 -r "$REPS"
    done
done
for tiles in 1 0; do
    echo "-- TESSERA_WGPU_FA_TILES=$tiles" >>"$LOG"
    TESSERA_WGPU_FA_TILES=$tiles step 90 "$T" bench model -m "$M/1b-q4_0.gguf" --device wgpu0 $NGL \
        -p "$PP" -n 0 -d "$DEPTH" -r 2
done
fi

if in_part 2; then
say "one-column and 8-column products"
step 150 "$T" bench ops --device wgpu0 --op "n=1," --seconds "$SECS" "${VS_OPS[@]}"
fi

if in_part 2; then
say "where a decoding step goes"
step 90 "$T" bench model -m "$M/1b-q4_0.gguf" --device wgpu0 $NGL -p 0 -n 8 -r 1 --profile 4
fi

if in_part 2; then
say "where a prompt goes (integer tiles)"
step 60 "$T" bench model -m "$M/1b-q4_0.gguf" --device wgpu0 $NGL -p "$PP" -n 0 -r 1 --profile-prompt "$PP"
fi

say "done"
