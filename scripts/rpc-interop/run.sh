#!/usr/bin/env bash
# Interoperability of Tessera's ggml-rpc with llama.cpp's (protocol 7.0.0),
# both directions, on loopback only:
#  1. llama.cpp's client (ggml-rpc-client, linked with llama.cpp's ggml)
#     against Tessera's server (example rpc_server over the CPU): the graph
#     must equal ggml's local CPU result within 1e-4.
#  2. Tessera's client against llama.cpp's ggml-rpc-server: the ignored
#     tests `interop` (graphs, a 2-layer transformer through the
#     scheduler with GRAPH_RECOMPUTE, and the synthetic Llama with every
#     layer on llama.cpp's server, flash attention included, fed Tessera's
#     greedy tokens) compare with Tessera's local CPU
#     (llama.cpp's server serves one client at a time: one test at a time),
#     and large weights through the tensor cache of a server started with -c.
#
# Usage: scripts/rpc-interop/build.sh [WORKDIR] && scripts/rpc-interop/run.sh [WORKDIR]
set -euo pipefail
WORK=${1:-/tmp/rpc-interop}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
P1=${PORT1:-$((40000 + RANDOM % 10000))}
P2=${PORT2:-$((50000 + RANDOM % 10000))}
P3=${PORT3:-$((30000 + RANDOM % 10000))}
cd "$ROOT"
cargo build -q -p tessera-rpc --example rpc_server
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/examples/rpc_server"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

"$BIN" "127.0.0.1:$P1" 2 &
pids+=($!)
"$WORK/build/bin/ggml-rpc-server" -H 127.0.0.1 -p "$P2" -t 2 >"$WORK/llama-server.log" 2>&1 &
pids+=($!)
# A second llama.cpp server with its tensor cache (-c) in $WORK/llama-cache/rpc.
mkdir -p "$WORK/llama-cache/rpc"
LLAMA_CACHE="$WORK/llama-cache" "$WORK/build/bin/ggml-rpc-server" -H 127.0.0.1 -p "$P3" -t 2 -c \
  >"$WORK/llama-server-cached.log" 2>&1 &
pids+=($!)
sleep 1

echo "== llama.cpp client -> Tessera server (127.0.0.1:$P1)"
timeout 60 "$WORK/ggml-rpc-client" "127.0.0.1:$P1"

echo "== Tessera client -> llama.cpp server (127.0.0.1:$P2)"
TESSERA_RPC_INTEROP_ENDPOINT="127.0.0.1:$P2" \
TESSERA_RPC_INTEROP_CACHED_ENDPOINT="127.0.0.1:$P3" \
TESSERA_RPC_INTEROP_CACHE_DIR="$WORK/llama-cache/rpc" timeout 300 \
  cargo test -q -p tessera-rpc --test interop -- --ignored --nocapture --test-threads=1
echo "interop: both directions OK"
