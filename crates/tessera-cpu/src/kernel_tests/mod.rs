//! Unit tests of the kernels, inside the crate because the kernels (raw
//! pointers to tensor memory) are private to it: each is compared with a
//! portable or f64 reference on the same bytes.

mod attention;
mod attention_prompt;
mod dot_kernels;
mod matmul;
mod simd_kernels;
