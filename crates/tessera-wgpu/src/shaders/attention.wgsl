// attention.wgsl: FLASH_ATTN_EXT, one workgroup of 256 per (head, query,
// ne3) with an online softmax over tiles of 64 keys. The workgroup is
// FA_SPLIT = 4 teams of 64: in round r, team s takes tile 4r + s, so four
// tiles are scored and summed side by side (decoding has one query per
// head: too few workgroups to fill a GPU otherwise), each team keeping its
// own maximum, sum and outputs, merged at the end. Within a team, thread l
// scores key t0 + l of its tile against the query (held in workgroup
// memory), then owns output columns l, l + 64, ... (head sizes up to 512).
// q: src0 (F32), k: src1, v: src2 (F16/F32, or Q8_0 when iu.y / iu.z = 1:
// a quantized cache, read by blocks), mask: src3 (F16) when iu.x = 1;
// sinks: src4 (F32, one per head, at byte iu2.x) when iu.w = 1, joining
// the maximum and the sum after the keys as ggml does. fp: scale,
// max_bias, logit_softcap. iu2.w = 1: the row written is also quantized
// into s5 (see the end of main).

const FA_SPLIT: u32 = 4u;
/// Query values kept in workgroup memory (longer rows read the query from
/// its buffer).
const FA_QMAX: u32 = 512u;

// An F16 value of a cache row at byte `p`, by the hardware's conversion
// (exact: every f16 is an f32).
fn fa_f16_k(p: u32) -> f32 {
    return unpack2x16float(s1_h(p)).x;
}

fn fa_f16_v(p: u32) -> f32 {
    return unpack2x16float(s2_h(p)).x;
}

// Value d of the K row at byte `row`.
fn k_val(row: u32, d: u32) -> f32 {
    if (P.iu.y == 1u) {
        return s1_dq(row + (d / 32u) * P.nb_1.x, d % 32u);
    }
    if (s1_T == T_F16) {
        return fa_f16_k(row + d * P.nb_1.x);
    }
    return s1_ld(row + d * P.nb_1.x);
}

// Value e of the V row at byte `row`.
fn v_val(row: u32, e: u32) -> f32 {
    if (P.iu.z == 1u) {
        return s2_dq(row + (e / 32u) * P.nb_2.x, e % 32u);
    }
    if (s2_T == T_F16) {
        return fa_f16_v(row + e * P.nb_2.x);
    }
    return s2_ld(row + e * P.nb_2.x);
}

var<workgroup> qv: array<f32, 512>; // FA_QMAX

// The query (in `qv`) dotted with the F16 K row of `dk` values (a multiple
// of 8) at word `w`: four words a step, loaded together, four partial sums.
fn k_dot_f16(w: u32, dk: u32) -> f32 {
    var s = vec4<f32>(0.0);
    for (var d = 0u; d < dk; d = d + 8u) {
        let at = w + d / 2u;
        let a = unpack2x16float(s1_w(at));
        let b = unpack2x16float(s1_w(at + 1u));
        let c = unpack2x16float(s1_w(at + 2u));
        let e = unpack2x16float(s1_w(at + 3u));
        s = s + vec4<f32>(qv[d] * a.x + qv[d + 1u] * a.y, qv[d + 2u] * b.x + qv[d + 3u] * b.y,
            qv[d + 4u] * c.x + qv[d + 5u] * c.y, qv[d + 6u] * e.x + qv[d + 7u] * e.y);
    }
    return (s.x + s.y) + (s.z + s.w);
}
var<workgroup> score: array<f32, 256>; // FA_SPLIT * 64: a team's scores, then weights
var<workgroup> keep: array<u32, 256>;
var<workgroup> team_m: array<f32, 4>;
var<workgroup> team_sum: array<f32, 4>;
var<workgroup> team_seen: array<u32, 4>;
var<workgroup> team_acc: array<f32, 2048>; // FA_SPLIT * 512

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lidv: vec3<u32>) {
    let g = group_index(wid, nwg);
    let n_head = P.ne_0.z;
    let n_q = P.ne_0.y;
    if (g >= n_head * n_q * P.ne_0.w) {
        return;
    }
    let lid = lidv.x;
    let team = lid / 64u;
    let l = lid % 64u;
    let ts = team * 64u;
    let ih = g % n_head;
    let iq = (g / n_head) % n_q;
    let i3 = g / (n_head * n_q);
    let dk = P.ne_0.x;
    let dv = P.ne_2.x;
    let n_kv = P.ne_1.y;
    let ik2 = ih / (n_head / P.ne_1.z);
    let q = P.off.y + iq * P.nb_0.y + ih * P.nb_0.z + i3 * P.nb_0.w;
    let kb = P.off.z + ik2 * P.nb_1.z + i3 * P.nb_1.w;
    let vb = P.off.w + ik2 * P.nb_2.z + i3 * P.nb_2.w;
    let mb = P.off2.x + iq * P.nb_3.y + (ih % P.ne_3.z) * P.nb_3.z + (i3 % P.ne_3.w) * P.nb_3.w;
    let slope = alibi_slope(P.fp.y, n_head, ih);
    let cap = P.fp.z;
    let q_shared = dk <= FA_QMAX;
    // F16 K rows of contiguous values, whole groups of 8: read by words.
    let k_words = q_shared && s1_T == T_F16 && P.iu.y != 1u && P.nb_1.x == 2u && (dk & 7u) == 0u;
    for (var d = lid; q_shared && d < dk; d = d + 256u) {
        qv[d] = s0_ld(q + d * P.nb_0.x);
    }
    workgroupBarrier();
    var acc: array<f32, 8>;
    var m = 0.0;
    var sum = 0.0;
    var seen = false;
    let rounds = (n_kv + 64u * FA_SPLIT - 1u) / (64u * FA_SPLIT);
    for (var r = 0u; r < rounds; r = r + 1u) {
        let t0 = (r * FA_SPLIT + team) * 64u;
        let j = t0 + l;
        var s = 0.0;
        var kept = 0u;
        if (j < n_kv) {
            var mv = 0.0;
            kept = 1u;
            if (P.iu.x == 1u) {
                let mk = s3_ld(mb + j * P.nb_3.x);
                if (is_neg_inf(mk)) {
                    kept = 0u;
                } else {
                    mv = slope * mk;
                }
            }
            if (kept == 1u) {
                var dot = 0.0;
                let krow = kb + j * P.nb_1.y;
                if (k_words && (krow & 3u) == 0u) {
                    dot = k_dot_f16(krow >> 2u, dk);
                } else {
                    for (var d = 0u; d < dk; d = d + 1u) {
                        var qd: f32;
                        if (q_shared) {
                            qd = qv[d];
                        } else {
                            qd = s0_ld(q + d * P.nb_0.x);
                        }
                        dot = dot + qd * k_val(krow, d);
                    }
                }
                var x = dot * P.fp.x;
                if (cap != 0.0) {
                    x = cap * act_tanh(x / cap);
                }
                s = x + mv;
            }
        }
        score[ts + l] = s;
        keep[ts + l] = kept;
        workgroupBarrier();
        // The team's new maximum (every thread of the team alike).
        var tmax = m;
        var tany = seen;
        for (var u = 0u; u < 64u; u = u + 1u) {
            if (keep[ts + u] == 1u) {
                tmax = select(score[ts + u], max(tmax, score[ts + u]), tany);
                tany = true;
            }
        }
        workgroupBarrier();
        // Each thread turns its own score into a weight, once.
        score[ts + l] = select(0.0, exp(s - tmax), kept == 1u);
        workgroupBarrier();
        if (tany) {
            let corr = select(0.0, exp(m - tmax), seen);
            sum = sum * corr;
            for (var c = 0u; c < 8u; c = c + 1u) {
                acc[c] = acc[c] * corr;
            }
            // Eight keys at a time: their V values are loaded together (one
            // wait for eight loads, not eight waits); a masked key's row is
            // read but never added, and groups of masked keys are skipped.
            for (var u0 = 0u; u0 < 64u; u0 = u0 + 8u) {
                var w8: array<f32, 8>;
                var k8: array<bool, 8>;
                var rows: array<u32, 8>;
                var any = false;
                for (var i = 0u; i < 8u; i = i + 1u) {
                    let u = u0 + i;
                    k8[i] = keep[ts + u] == 1u;
                    any = any || k8[i];
                    w8[i] = score[ts + u];
                    if (k8[i]) {
                        sum = sum + w8[i];
                    }
                    rows[i] = vb + min(t0 + u, n_kv - 1u) * P.nb_2.y;
                }
                if (!any) {
                    continue;
                }
                for (var c = 0u; c < 8u; c = c + 1u) {
                    let e = l + 64u * c;
                    if (e < dv) {
                        var v8: array<f32, 8>;
                        for (var i = 0u; i < 8u; i = i + 1u) {
                            v8[i] = v_val(rows[i], e);
                        }
                        for (var i = 0u; i < 8u; i = i + 1u) {
                            if (k8[i]) {
                                acc[c] = acc[c] + w8[i] * v8[i];
                            }
                        }
                    }
                }
            }
            m = tmax;
            seen = true;
        }
        workgroupBarrier();
    }
    // Merge the teams: maximum M over the teams that saw a key, then their
    // sums and outputs scaled by exp(m - M).
    if (l == 0u) {
        team_m[team] = m;
        team_sum[team] = sum;
        team_seen[team] = u32(seen);
    }
    for (var c = 0u; c < 8u; c = c + 1u) {
        let e = l + 64u * c;
        if (e < dv) {
            team_acc[team * 512u + e] = acc[c];
        }
    }
    workgroupBarrier();
    let o = P.off.x + ih * P.nb_d.y + iq * P.nb_d.z + i3 * P.nb_d.w;
    if (team == 0u) {
        fa_merge(l, ih, dv, o);
    }
    if (P.iu2.w == 1u) {
        // Quantize the row just written (contiguous, whole blocks of 32
        // values) for the integer products, as quant_act.wgsl
        // would: block j of the destination's bytes at byte iu2.y + 32 j,
        // its pair at iu2.z + 8 j, in s5 (the stream's scratch).
        storageBarrier();
        if (lid < dv / 32u) {
            let j = (o - P.off.x) / 128u + lid;
            var x: array<f32, 32>;
            for (var e = 0u; e < 32u; e = e + 1u) {
                x[e] = d_ld(o + 4u * (32u * lid + e));
            }
            s5_q8((P.iu2.y >> 2u) + 8u * j, (P.iu2.z >> 2u) + 2u * j, q8_block(x));
        }
    }
}

// Team 0 after the teams' results are in workgroup memory: merge them
// and write the row (head ih) at byte `o`.
fn fa_merge(l: u32, ih: u32, dv: u32, o: u32) {
    var found = false;
    var mm = 0.0;
    for (var t = 0u; t < FA_SPLIT; t = t + 1u) {
        if (team_seen[t] == 1u) {
            mm = select(team_m[t], max(mm, team_m[t]), found);
            found = true;
        }
    }
    var total = 0.0;
    var out: array<f32, 8>;
    for (var t = 0u; t < FA_SPLIT; t = t + 1u) {
        if (team_seen[t] == 1u) {
            let f = exp(team_m[t] - mm);
            total = total + team_sum[t] * f;
            for (var c = 0u; c < 8u; c = c + 1u) {
                let e = l + 64u * c;
                if (e < dv) {
                    out[c] = out[c] + team_acc[t * 512u + e] * f;
                }
            }
        }
    }
    if (P.iu.w == 1u) {
        let f = fa_sink(s4_ld(P.iu2.x + ih * 4u), mm, found, total);
        for (var c = 0u; c < 8u; c = c + 1u) {
            out[c] = out[c] * f.x;
        }
        total = f.y;
    }
    let inv = select(0.0, 1.0 / total, total != 0.0);
    for (var c = 0u; c < 8u; c = c + 1u) {
        let e = l + 64u * c;
        if (e < dv) {
            d_st(o + e * P.nb_d.x, out[c] * inv);
        }
    }
}
