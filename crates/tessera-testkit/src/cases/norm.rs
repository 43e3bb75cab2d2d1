//! Row normalisation cases: RMS_NORM and NORM over odd row lengths, a
//! single-element row, batches and a permuted input.

use tessera::DType;

use super::{Case, CaseGraph, fmt_ne, fmt_perm, permuted_leaf};

pub(super) fn cases(v: &mut Vec<Case>) {
    let shapes: [([usize; 4], f32, Option<[usize; 4]>); 6] = [
        ([7, 3, 1, 1], 1e-6, None),
        ([129, 2, 3, 1], 1e-5, None),
        ([1, 4, 1, 1], 1e-6, None),
        ([64, 3, 2, 2], 0.0, None),
        ([33, 4, 3, 1], 1e-6, Some([0, 2, 1, 3])),
        ([4096, 3, 1, 1], 1e-5, None),
    ];
    for op in ["RMS_NORM", "NORM"] {
        for (ne, eps, axes) in shapes {
            let name = format!(
                "{op}(type=f32,ne={},eps={eps:e}{})",
                fmt_ne(&ne),
                fmt_perm("permute", axes)
            );
            v.push(Case::new(op, name, move || {
                let mut g = CaseGraph::new();
                let a = permuted_leaf(&mut g, "a", DType::F32, ne, axes, None)?;
                let out = if op == "NORM" {
                    g.norm(a, eps)?
                } else {
                    g.rms_norm(a, eps)?
                };
                g.check(out)?;
                Ok(g.finish())
            }));
        }
    }
}
