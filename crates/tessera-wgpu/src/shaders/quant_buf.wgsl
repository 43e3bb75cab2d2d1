// quant_buf.wgsl: the values of one block to quantize (up to 256), filled
// by CPY and SET_ROWS before they call `store_block` from one of the
// store_*.wgsl files (chosen by the destination type, so a kernel compiles
// only the quantizer it uses).

var<private> qbuf: array<f32, 256>;
