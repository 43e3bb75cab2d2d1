//! Where each layer's weights live: a [`WeightPlacement`] by layer, as
//! llama.cpp's `-ngl` and `--fit` place them. The token embeddings stay in
//! the input memory (the CPU's, as llama.cpp's input layer: GET_ROWS reads a
//! few rows, and the matrix can exceed a GPU's largest buffer); `blk.N.*`
//! tensors go where layer N is; the output layer (`output*`) where the
//! map says.

use std::sync::Arc;

use tessera::{BufferType, Error, Result};

use crate::weights::{WeightPlacement, layer_of};

/// The buffer type of every layer, of the output layer and of the inputs.
#[derive(Clone, Debug)]
pub struct LayerMap {
    layers: Vec<Arc<dyn BufferType>>,
    output: Arc<dyn BufferType>,
    input: Arc<dyn BufferType>,
}

impl LayerMap {
    /// Every one of `n_layer` layers, the output and the inputs in `buft`.
    pub fn uniform(buft: Arc<dyn BufferType>, n_layer: usize) -> LayerMap {
        LayerMap {
            layers: vec![buft.clone(); n_layer],
            output: buft.clone(),
            input: buft,
        }
    }

    /// `-ngl n`: the last `n` layers in `gpu` (and the output too when `n`
    /// exceeds the layer count), the rest and the inputs in `cpu`.
    pub fn last_layers(
        cpu: Arc<dyn BufferType>,
        gpu: Arc<dyn BufferType>,
        n_layer: usize,
        n: usize,
    ) -> LayerMap {
        let mut m = LayerMap::uniform(cpu, n_layer);
        let first = n_layer.saturating_sub(n);
        m.set_layers(first..n_layer, &gpu);
        if n > n_layer {
            m.output = gpu;
        }
        m
    }

    /// Put layers `range` in `buft` (layers past the end are ignored).
    pub fn set_layers(&mut self, range: std::ops::Range<usize>, buft: &Arc<dyn BufferType>) {
        for l in self.layers.iter_mut().take(range.end).skip(range.start) {
            *l = buft.clone();
        }
    }

    /// Keep the inputs (token embeddings) in `buft`.
    pub fn set_input(&mut self, buft: Arc<dyn BufferType>) {
        self.input = buft;
    }

    /// Put the output layer in `buft`.
    pub fn set_output(&mut self, buft: Arc<dyn BufferType>) {
        self.output = buft;
    }

    /// Layers.
    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    /// The buffer type of layer `il`.
    pub fn layer(&self, il: usize) -> Result<&Arc<dyn BufferType>> {
        self.layers
            .get(il)
            .ok_or_else(|| Error::OutOfBounds(format!("layer {il} of {}", self.layers.len())))
    }

    /// The output layer's buffer type.
    pub fn output(&self) -> &Arc<dyn BufferType> {
        &self.output
    }

    /// Layers whose buffer type is named `name`.
    pub fn layers_in(&self, name: &str) -> usize {
        self.layers.iter().filter(|b| b.name() == name).count()
    }
}

impl WeightPlacement for LayerMap {
    fn buffer_type(&self, name: &str) -> Arc<dyn BufferType> {
        if let Some(il) = layer_of(name)
            && let Some(b) = self.layers.get(il)
        {
            return b.clone();
        }
        if name.starts_with("output") {
            return self.output.clone();
        }
        self.input.clone()
    }
}
