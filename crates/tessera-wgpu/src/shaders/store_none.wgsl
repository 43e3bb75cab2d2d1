// store_none.wgsl: `store_block` for kernels whose destination is not
// quantized (never called).

fn store_block(blk: u32) {
}
