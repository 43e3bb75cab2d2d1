//! The catalogue of op cases (Tessera's `make_test_cases_eval`).
//!
//! A [`Case`] is a name in test-backend-ops style
//! (`MUL_MAT(type_a=q4_0,type_b=f32,m=7,n=3,k=64,bs=[2,3],per=[0,2,1,3])`),
//! the op it tests, and a closure that builds a [`Built`]: the graph, the
//! nodes to compare with the reference (each with its [`Tolerance`]) and how
//! to initialise each leaf ([`Init`]; uniform in [-1, 1] unless stated).
//! Non-contiguous and permuted operands are built inside the graph with
//! `permute`/`transpose`/`view`, exactly as a model would.
//!
//! Shapes are small (a row of 1, 3, 7, 33 or 129 elements where the types
//! allow) so the whole catalogue runs in seconds on two cores; each family
//! lives in its own module. [`catalogue`] returns every case, as data that
//! other crates (the CLI, GPU tests) can filter and iterate.

mod attention;
mod attention_ext;
mod copy;
mod elementwise;
mod index;
mod init;
mod matmul;
mod moe;
mod more;
mod norm;

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use tessera::{DType, Graph, Result, TensorId};

use crate::tolerance::{Tolerance, default_tolerance};

pub use init::{Init, default_init, leaf_bytes};

/// A node to compare with the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Check {
    /// The node.
    pub id: TensorId,
    /// How close it must be.
    pub tolerance: Tolerance,
}

/// A built case: the graph, what to compare and how to fill the leaves.
#[derive(Clone, Debug)]
pub struct Built {
    /// The graph.
    pub graph: Graph,
    /// Nodes compared with the reference.
    pub checks: Vec<Check>,
    /// Leaf initialisations; leaves not listed use [`default_init`].
    pub inits: Vec<(TensorId, Init)>,
}

impl Built {
    /// How leaf `id` is initialised.
    pub fn init_of(&self, id: TensorId) -> Result<Init> {
        match self.inits.iter().find(|(l, _)| *l == id) {
            Some((_, init)) => Ok(init.clone()),
            None => Ok(default_init(self.graph.node(id)?.layout.dtype)),
        }
    }
}

/// The closure that builds a case.
pub type BuildFn = dyn Fn() -> Result<Built> + Send + Sync;

/// One op case of the catalogue.
#[derive(Clone)]
pub struct Case {
    /// Full name, e.g. `ADD(type=f32,ne=[7,3,1,1],nr=[1,2,1,1])`.
    pub name: String,
    /// The op under test (`MUL_MAT`, `SILU`, `SWIGLU`, ...), for filtering.
    pub op: &'static str,
    build: Arc<BuildFn>,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case").field("name", &self.name).finish()
    }
}

impl Case {
    /// A case named `name` testing `op`, built by `build`.
    pub fn new(
        op: &'static str,
        name: String,
        build: impl Fn() -> Result<Built> + Send + Sync + 'static,
    ) -> Self {
        Case {
            name,
            op,
            build: Arc::new(build),
        }
    }

    /// Build the graph.
    pub fn build(&self) -> Result<Built> {
        (self.build)()
    }

    /// `filter` is empty, or a substring of the name (`MUL_MAT`,
    /// `GET_ROWS(type=q4_0`), or equals the op.
    pub fn matches(&self, filter: Option<&str>) -> bool {
        filter.is_none_or(|f| f.is_empty() || self.op == f || self.name.contains(f))
    }
}

/// A graph under construction for a case, with its checks and leaf inits.
/// Dereferences to the [`Graph`], so the op builders are called on it.
#[derive(Debug, Default)]
pub struct CaseGraph {
    graph: Graph,
    checks: Vec<Check>,
    inits: Vec<(TensorId, Init)>,
}

impl Deref for CaseGraph {
    type Target = Graph;
    fn deref(&self) -> &Graph {
        &self.graph
    }
}

impl DerefMut for CaseGraph {
    fn deref_mut(&mut self) -> &mut Graph {
        &mut self.graph
    }
}

impl CaseGraph {
    /// An empty case graph.
    pub fn new() -> Self {
        CaseGraph::default()
    }

    /// A named contiguous leaf with the default initialisation.
    pub fn leaf(&mut self, name: &str, dtype: DType, ne: &[usize]) -> Result<TensorId> {
        let id = self.graph.new_tensor(dtype, ne)?;
        self.graph.set_name(id, name)?;
        Ok(id)
    }

    /// A named contiguous leaf initialised by `init`.
    pub fn leaf_init(
        &mut self,
        name: &str,
        dtype: DType,
        ne: &[usize],
        init: Init,
    ) -> Result<TensorId> {
        let id = self.leaf(name, dtype, ne)?;
        self.inits.push((id, init));
        Ok(id)
    }

    /// Compare `id` with the reference at its default tolerance.
    pub fn check(&mut self, id: TensorId) -> Result<TensorId> {
        let tolerance = default_tolerance(&self.graph, id)?;
        self.check_with(id, tolerance)
    }

    /// Compare `id` with the reference at `tolerance`.
    pub fn check_with(&mut self, id: TensorId, tolerance: Tolerance) -> Result<TensorId> {
        self.graph.node(id)?;
        self.graph.set_output(id)?;
        self.checks.push(Check { id, tolerance });
        Ok(id)
    }

    /// The finished case.
    pub fn finish(self) -> Built {
        Built {
            graph: self.graph,
            checks: self.checks,
            inits: self.inits,
        }
    }
}

/// A leaf that appears with extents `ne` after `permute(axes)` (contiguous
/// when `axes` is `None`): it is stored with extents `ne[axes[i]]`.
pub fn permuted_leaf(
    g: &mut CaseGraph,
    name: &str,
    dtype: DType,
    ne: [usize; 4],
    axes: Option<[usize; 4]>,
    init: Option<Init>,
) -> Result<TensorId> {
    let stored = axes.map_or(ne, |p| [ne[p[0]], ne[p[1]], ne[p[2]], ne[p[3]]]);
    let leaf = match init {
        Some(i) => g.leaf_init(name, dtype, &stored, i)?,
        None => g.leaf(name, dtype, &stored)?,
    };
    match axes {
        Some(p) => g.permute(leaf, p),
        None => Ok(leaf),
    }
}

/// `,name=[..]` for an optional permutation in a case name.
pub fn fmt_perm(name: &str, axes: Option<[usize; 4]>) -> String {
    axes.map_or_else(String::new, |p| format!(",{name}={}", fmt_ne(&p)))
}

/// `[a,b,c,d]` as test-backend-ops prints extents.
pub fn fmt_ne(ne: &[usize]) -> String {
    let parts: Vec<String> = ne.iter().map(usize::to_string).collect();
    format!("[{}]", parts.join(","))
}

/// Every case of the catalogue, in a stable order.
pub fn catalogue() -> Vec<Case> {
    let mut v = Vec::new();
    copy::cases(&mut v);
    index::cases(&mut v);
    elementwise::cases(&mut v);
    norm::cases(&mut v);
    more::cases(&mut v);
    matmul::cases(&mut v);
    moe::cases(&mut v);
    attention::cases(&mut v);
    attention_ext::cases(&mut v);
    v
}

/// The distinct op names of the catalogue, in order of first appearance.
pub fn catalogue_ops() -> Vec<&'static str> {
    let mut ops: Vec<&'static str> = Vec::new();
    for c in catalogue() {
        if !ops.contains(&c.op) {
            ops.push(c.op);
        }
    }
    ops
}
