//! The meta device: tensor parallelism over any mix of Tessera devices
//! (ggml's `ggml-backend-meta`).
//!
//! A [`MetaDevice`] wraps N devices (CPUs with threads of their own, GPUs,
//! remote devices — any [`tessera::Device`]) and is one device to the
//! scheduler and to users. Weights and caches are held split
//! ([`SplitState`]): cut along an axis with each device holding its share,
//! or mirrored. What each tensor is to the split is data — a [`Role`] the
//! model names — and the shares come from a [`SplitPolicy`] (ratios the user
//! sets). A graph on the meta device runs as one graph per device, with the
//! split state of every result derived op by op (see `rules`), and the
//! collectives between them: partial sums of row-parallel products are
//! all-reduced, split tensors an op needs whole are all-gathered.
//!
//! Unlike upstream's, nothing here aborts: an op whose operands are split
//! in a way no rule takes is computed on gathered operands (slower, never
//! wrong), and what cannot be done at all (writing into a split
//! destination that the source cannot match) is an error naming the node.
#![forbid(unsafe_code)]

mod arena;
pub mod buffer;
mod collective;
mod convert;
pub mod device;
mod lower;
mod partial;
pub mod policy;
mod rebuild;
mod rules;
pub mod state;
pub mod stream;
mod views;
mod workers;

pub use buffer::{MetaBuffer, MetaBufferType};
pub use device::{AllReduce, MetaDevice, MetaOptions};
pub use policy::{Role, SplitPolicy};
pub use state::{Split, SplitState};
pub use stream::{MetaStats, MetaStream};
