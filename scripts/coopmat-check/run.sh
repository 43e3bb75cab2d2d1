#!/usr/bin/env bash
# The cooperative-matrix kernel (crates/tessera-wgpu/src/coopmat.rs) on
# lavapipe from Mesa 26, which has VK_KHR_cooperative_matrix (8 x 8 f16
# matrices summed in f32); Debian 12's Mesa 22 (CI's) has none, so there
# the kernel's tests skip. Needs root (debootstrap, chroot, mounts) and
# Debian's mirrors.
#
# 1. A Debian 13 root ($ROOT, default /tmp/trixie-root) with Mesa from
#    trixie-backports (made once; about 3 minutes).
# 2. The tessera-wgpu test binaries built here (Debian 12's toolchain),
#    run inside that root with TESSERA_WGPU_COOPMAT=1 (lavapipe is a
#    software adapter, which takes them only when asked), and
#    TESSERA_REQUIRE_GPU=1 and TESSERA_REQUIRE_COOPMAT=1 (a device without
#    cooperative matrices fails the kernel's tests instead of skipping),
#    and TESSERA_COOPMAT_UNREPORTED=1: the kernel's 16 x 16 variant too
#    (NVIDIA's), which lavapipe computes though it reports 8 x 8 only.
#
#   bash scripts/coopmat-check/run.sh            # every tessera-wgpu test
#   bash scripts/coopmat-check/run.sh coopmat    # a filter for each binary
set -euo pipefail
ROOT=${ROOT:-/tmp/trixie-root}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -e "$ROOT/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so" ]; then
    command -v debootstrap >/dev/null || apt-get install -y debootstrap
    [ -e "$ROOT/etc/debian_version" ] ||
        debootstrap --variant=minbase trixie "$ROOT" http://deb.debian.org/debian
    echo "deb http://deb.debian.org/debian trixie-backports main" >"$ROOT/etc/apt/sources.list.d/bpo.list"
    cp /etc/resolv.conf "$ROOT/etc/"
    chroot "$ROOT" bash -c "apt-get update -q && apt-get install -y -q -t trixie-backports mesa-vulkan-drivers"
fi
mkdir -p "$ROOT/proc" "$ROOT/dev" "$ROOT$REPO"
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
mountpoint -q "$ROOT$REPO" || mount --bind "$REPO" "$ROOT$REPO"
cd "$REPO"
mapfile -t bins < <(cargo test -j2 -p tessera-wgpu --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')
status=0
for b in "${bins[@]}"; do
    echo "== ${b#"$REPO"/}"
    chroot "$ROOT" env XDG_RUNTIME_DIR=/tmp TESSERA_REQUIRE_GPU=1 TESSERA_REQUIRE_COOPMAT=1 TESSERA_WGPU_COOPMAT=1 \
        TESSERA_COOPMAT_UNREPORTED=1 bash -c "cd '$REPO' && '$b' ${1:-}" || status=1
done
exit $status
