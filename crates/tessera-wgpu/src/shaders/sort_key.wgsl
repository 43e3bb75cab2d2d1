// sort_key.wgsl: the comparison of sort.wgsl (ARGSORT, TOP_K) and of
// rows.wgsl's SOFT_MAX with its ARGSORT (fuse_router.rs).

// An order-preserving integer key of `x`.
fn sort_key(x: f32) -> u32 {
    var b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;
    }
    if (b == 0x80000000u) {
        b = 0u;
    }
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// Whether element m (key km) goes before element j (key kj) in the order
// (descending when `desc`), equal keys in index order.
fn sort_before(km: u32, kj: u32, m: u32, j: u32, desc: bool) -> bool {
    let less = (km < kj);
    let more = (km > kj);
    return select(less, more, desc) || (km == kj && m < j);
}
