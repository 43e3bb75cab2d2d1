// gather_ids.wgsl: a MUL_MAT_ID workgroup's gathering of the pairs
// (slot e, token t), p = e + used t, whose expert id (src2 [used, t] at
// P.off.w, clamped into 0..experts) is its expert x, in order of p, GMAX
// at a time, for the tiled kernels of each expert's tokens
// (matmul_q8_id.wgsl, matmul_coop_id.wgsl; the host prepends GT, the
// workgroup's invocations, and GMAX, the tile's columns). Each invocation
// counts the pairs of its share of the ids; the counts' prefix sums give
// each pair its place.

// The pairs of the current chunk, and how many there are.
var<workgroup> id_pairs: array<u32, GMAX>;
var<workgroup> id_prefix: array<u32, GT>;
var<workgroup> id_total: u32;
var<private> id_count: u32;
// This invocation's share of the pairs (first, end) and the place of its
// first pair of expert x.
var<private> id_share: vec3<u32>;

// The expert of pair p, clamped.
fn id_of(p: u32) -> u32 {
    let used = P.ne_2.x;
    let id = s2_ldi(P.off.w + (p % used) * P.nb_2.x + (p / used) * P.nb_2.y);
    return u32(clamp(id, 0, i32(max(P.ne_0.z, 1u)) - 1));
}

// The number of pairs of expert x (the same in every invocation). All GT
// invocations call it, in uniform control flow.
fn ids_count(x: u32, t: u32) -> u32 {
    let pairs = P.ne_2.x * P.ne_2.y;
    let share = (pairs + GT - 1u) / GT;
    let first = min(t * share, pairs);
    let end = min(first + share, pairs);
    var mine = 0u;
    for (var p = first; p < end; p = p + 1u) {
        mine = mine + u32(id_of(p) == x);
    }
    // Inclusive prefix sums of the counts (Hillis-Steele).
    id_prefix[t] = mine;
    workgroupBarrier();
    for (var d = 1u; d < GT; d = d * 2u) {
        var v = id_prefix[t];
        if (t >= d) {
            v = v + id_prefix[t - d];
        }
        workgroupBarrier();
        id_prefix[t] = v;
        workgroupBarrier();
    }
    if (t == GT - 1u) {
        id_total = id_prefix[GT - 1u];
    }
    id_share = vec3<u32>(first, end, id_prefix[t] - mine);
    return workgroupUniformLoad(&id_total);
}

// The pairs of places q0..q0 + GMAX into id_pairs, and their count into
// id_count (of `total`); ends with a barrier. All GT invocations call it,
// in uniform control flow.
fn ids_gather(x: u32, q0: u32, total: u32) {
    var place = id_share.z;
    for (var p = id_share.x; p < id_share.y && place < q0 + GMAX; p = p + 1u) {
        if (id_of(p) == x) {
            if (place >= q0) {
                id_pairs[place - q0] = p;
            }
            place = place + 1u;
        }
    }
    id_count = min(GMAX, total - q0);
    workgroupBarrier();
}

// The quantized column of the chunk's pair i (Q8_NONE: none): its slot's
// activations (slot % ne11, P.iu.z = ne11) of its token.
fn ids_col(i: u32) -> u32 {
    if (i >= id_count) {
        return Q8_NONE;
    }
    let p = id_pairs[i];
    let used = P.ne_2.x;
    return (p % used) % P.iu.z + P.iu.z * (p / used);
}

// The byte of dst where the chunk's pair i's column starts (Q8_NONE:
// none).
fn ids_dst(i: u32) -> u32 {
    if (i >= id_count) {
        return Q8_NONE;
    }
    let p = id_pairs[i];
    let used = P.ne_2.x;
    return P.off.x + (p % used) * P.nb_d.y + (p / used) * P.nb_d.z;
}
