//! The harness on the reference device: the whole catalogue passes (checking
//! the harness's plumbing end to end), and every kind of deliberate breakage
//! of the device is reported as a failure with the right reason.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tessera::{Device, Graph, Placement, Result, TensorId};
use tessera_testkit::refdev::ComputeHook;
use tessera_testkit::{Outcome, ReferenceDevice, run_all, support_listing};

#[test]
fn every_case_passes_on_the_reference_device() {
    let dev = ReferenceDevice::new();
    let report = run_all(dev.as_ref(), None);
    println!("{}", report.summary());
    assert!(
        report.cases.len() > 200,
        "only {} cases",
        report.cases.len()
    );
    assert_eq!(report.unsupported(), 0);
    let real: Vec<String> = report
        .failures()
        .map(|c| format!("{}: {:?}", c.name, c.outcome))
        .collect();
    assert!(
        real.is_empty(),
        "{} failures:\n{}",
        real.len(),
        real.join("\n")
    );
}

/// The id of the last node (the checked output of single-op cases).
fn last(graph: &Graph) -> TensorId {
    TensorId::from_index(graph.len() as u32 - 1)
}

/// Run the cases matching `filter` on a reference device broken by `hook`
/// and return their outcomes.
fn run_broken(
    filter: &str,
    hook: impl Fn(&Graph, &Placement) -> Result<()> + Send + Sync + 'static,
) -> Vec<Outcome> {
    let hook: ComputeHook = Arc::new(hook);
    let dev = ReferenceDevice::with_hook(Some(hook), Vec::new());
    let report = run_all(dev.as_ref(), Some(filter));
    assert!(!report.cases.is_empty(), "no case matches {filter}");
    report.cases.into_iter().map(|c| c.outcome).collect()
}

fn failed_with(outcomes: &[Outcome], needles: &[&str]) {
    for o in outcomes {
        match o {
            Outcome::Failed(why) => {
                for n in needles {
                    assert!(why.contains(n), "reason {why:?} lacks {n:?}");
                }
            }
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}

/// The f32 values of a contiguous F32 tensor (raw bytes: no quantizer involved).
fn read_f32(t: &tessera::Tensor) -> Result<Vec<f32>> {
    Ok(t.to_bytes()?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn write_f32(t: &tessera::Tensor, v: &[f32]) -> Result<()> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    t.write(0, &bytes)
}

const ADD: &str = "ADD(type=f32,ne_a=[7,3,1,1],ne_b=[7,3,1,1])";

#[test]
fn a_wrong_element_fails_with_its_index_and_values() {
    let out = run_broken(ADD, |g, p| {
        let t = p.tensor(g, last(g))?;
        // Element [4, 1] (flat 11) is off by 0.5.
        let mut v = read_f32(&t)?;
        v[11] += 0.5;
        write_f32(&t, &v)
    });
    failed_with(&out, &["NMSE", "[4, 1, 0, 0]", "1 of 21 elements differ"]);
}

#[test]
fn a_write_past_the_end_of_an_output_is_caught_by_the_guard() {
    let out = run_broken(ADD, |g, p| {
        let id = last(g);
        let place = p.get(id).unwrap();
        let n = g.node(id).unwrap().layout.nbytes();
        place.buffer.write(place.offset + n + 3, &[0x00])
    });
    failed_with(
        &out,
        &[
            "out-of-bounds",
            "3 bytes past the end of",
            "ADD f32[7,3,1,1]",
        ],
    );
}

#[test]
fn a_write_before_an_output_is_caught_by_the_guard() {
    let out = run_broken(ADD, |g, p| {
        let place = p.get(last(g)).unwrap();
        place.buffer.write(place.offset - 1, &[0x00])
    });
    failed_with(
        &out,
        &["out-of-bounds", "1 bytes before the start of", "ADD"],
    );
}

#[test]
fn an_unwritten_output_is_caught_as_nan() {
    let out = run_broken(ADD, |g, p| {
        let t = p.tensor(g, last(g))?;
        t.fill(0, t.nbytes(), 0xFF)
    });
    failed_with(&out, &["is NaN", "[0, 0, 0, 0]"]);
}

#[test]
fn a_modified_input_is_caught() {
    let out = run_broken(ADD, |g, p| {
        let a = g.find("a").unwrap();
        let t = p.tensor(g, a)?;
        let mut b = [0u8; 1];
        t.read(5, &mut b)?;
        t.write(5, &[b[0] ^ 1])
    });
    failed_with(&out, &["input a", "modified at byte 5"]);
}

#[test]
fn writes_outside_a_cpy_destination_view_are_caught_and_inside_are_not() {
    let filter = "CPY(type_src=f32,type_dst=f32,ne=[16,3,1,1],dst=view_rows_2_5_of_8)";
    // Row 7 of the cache lies outside the CPY's view (rows 2..5).
    let out = run_broken(filter, |g, p| {
        let t = p.tensor(g, g.find("cache").unwrap())?;
        t.write(7 * 64, &[1, 2, 3, 4])
    });
    failed_with(&out, &["input cache", "modified at byte 448"]);
    // The reference device itself writes rows 2..5 and passes.
    let dev = ReferenceDevice::new();
    let report = run_all(dev.as_ref(), Some(filter));
    assert_eq!(report.passed(), 1, "{report}");
}

#[test]
fn one_ulp_off_fails_an_exact_op() {
    let out = run_broken("GET_ROWS(type=f32,ne=[7,10,1,1],n=5)", |g, p| {
        let t = p.tensor(g, last(g))?;
        let mut v = read_f32(&t)?;
        v[3] = f32::from_bits(v[3].to_bits() + 1);
        write_f32(&t, &v)
    });
    failed_with(&out, &["exact", "1 of 35 elements differ", "[3, 0, 0, 0]"]);
}

#[test]
fn an_infinity_of_the_wrong_sign_fails() {
    let out = run_broken("SOFT_MAX(type=f32,ne=[7,3,1,1]", |g, p| {
        let t = p.tensor(g, last(g))?;
        let mut v = read_f32(&t)?;
        v[0] = f32::INFINITY;
        write_f32(&t, &v)
    });
    failed_with(&out, &["infinities do not match"]);
}

#[test]
fn unsupported_ops_are_reported_not_failed() {
    let dev = ReferenceDevice::with_hook(None, vec!["MUL_MAT", "SILU"]);
    let report = run_all(dev.as_ref(), Some("MUL_MAT"));
    // The filter also matches MUL_MAT_ID's cases, another op, which runs.
    let mm: Vec<_> = report.cases.iter().filter(|c| c.op == "MUL_MAT").collect();
    assert!(mm.len() >= 7 * 5);
    assert!(
        mm.iter()
            .all(|c| matches!(c.outcome, Outcome::Unsupported(_)))
    );
    assert_eq!(report.unsupported(), mm.len());
    let silu = run_all(dev.as_ref(), Some("SILU"));
    assert!(
        silu.cases
            .iter()
            .all(|c| matches!(&c.outcome, Outcome::Unsupported(w) if w.contains("SILU")))
    );
    let devices: Vec<Arc<dyn Device>> = vec![dev, ReferenceDevice::new()];
    let listing = support_listing(&devices);
    let line = listing
        .lines()
        .find(|l| l.starts_with("SILU(type=f32,ne=[7,3,1,1])"))
        .unwrap();
    assert!(
        line.contains("NOT SUPPORTED") && line.contains("[REF - Tessera f64 reference (testkit)]"),
        "{line}"
    );
    let n = tessera_testkit::catalogue().len();
    assert_eq!(
        listing
            .lines()
            .filter(|l| l.contains("NOT SUPPORTED") || l.contains(": SUPPORTED"))
            .count(),
        2 * n
    );
}

#[test]
fn quantized_outputs_are_compared_after_dequantization() {
    // A CPY into Q8_0 whose first block's scale is zeroed: all its values become 0.
    let out = run_broken("CPY(type_src=f32,type_dst=q8_0,ne=[64,3,2,1])", |g, p| {
        let t = p.tensor(g, last(g))?;
        t.write(0, &[0, 0])
    });
    failed_with(&out, &["NMSE"]);
}
