//! A model's weights on its devices: each GGUF tensor bound where its layer
//! runs. On a host buffer type the tensors are views of the file's bytes
//! (zero copy: with [`GgufFile::open_mapped`](tessera_gguf::GgufFile) the
//! memory map itself); on other devices they are uploaded once, into one
//! weights buffer per device.

use std::collections::HashMap;
use std::sync::Arc;

use tessera::alloc::{PlanningType, alloc_tensors};
use tessera::{BufferType, BufferUsage, Error, Layout, Result, Tensor};
use tessera_gguf::GgufFile;

/// Which buffer type holds each weight, by its GGUF name.
pub trait WeightPlacement {
    /// The buffer type for tensor `name` (`blk.N.*` belongs to layer N):
    /// its device's, which also holds the layer's cache.
    fn buffer_type(&self, name: &str) -> Arc<dyn BufferType>;

    /// The buffer type that stores tensor `name` of `layout`: where
    /// [`WeightPlacement::buffer_type`] says (default), or one of that
    /// device's extra buffer types ([`Repacked`]).
    fn buffer_type_for(&self, name: &str, layout: &Layout) -> Arc<dyn BufferType> {
        let _ = layout;
        self.buffer_type(name)
    }
}

/// A placement whose matrix weights go to their device's repacking buffer
/// type where it has one that stores them repacked (ggml's CPU_REPACK,
/// [`BufferType::repacks`]; llama.cpp does this by default, `--no-repack`
/// turns it off): the `*.weight` matrices of the layers and the output
/// matrix, which only MUL_MAT reads. Token embeddings (read by GET_ROWS,
/// and by MUL_MAT too when the output is tied to them), other `*embd*`
/// tensors and tensors of more than two dimensions (experts, read by
/// MUL_MAT_ID) keep the file's layout. Repacked weights are copies, not
/// views of the file.
#[derive(Debug, Clone)]
pub struct Repacked<P>(pub P);

impl<P: WeightPlacement> WeightPlacement for Repacked<P> {
    fn buffer_type(&self, name: &str) -> Arc<dyn BufferType> {
        self.0.buffer_type(name)
    }

    fn buffer_type_for(&self, name: &str, layout: &Layout) -> Arc<dyn BufferType> {
        let home = self.0.buffer_type_for(name, layout);
        let matrix = (layer_of(name).is_some() || name == "output.weight")
            && name.ends_with(".weight")
            && !name.contains("embd")
            && layout.ne[2] == 1
            && layout.ne[3] == 1;
        let Some(device) = home.device().filter(|_| matrix) else {
            return home;
        };
        // Only instead of the device's own memory (not of a meta device's
        // or a planning type).
        if !tessera::same_buffer_type(home.as_ref(), device.buffer_type().as_ref()) {
            return home;
        }
        device
            .extra_buffer_types()
            .into_iter()
            .find(|b| b.repacks(layout))
            .unwrap_or(home)
    }
}

/// Every weight in one buffer type.
impl WeightPlacement for Arc<dyn BufferType> {
    fn buffer_type(&self, _name: &str) -> Arc<dyn BufferType> {
        self.clone()
    }
}

/// A tensor to bind: the name it is bound as, and the file's tensor whose
/// data it holds.
type Bound<'f> = (String, &'f tessera_gguf::TensorInfo);

/// The token embeddings, where the output matrix is tied to them (the file
/// has no `output.weight`) and the output layer's device is not theirs: a
/// copy of them is bound as `output.weight` there, so that the output
/// product (a decoding step's largest: n_vocab rows) runs on the output
/// layer's device instead of where the embeddings are (the host, for
/// GET_ROWS), as llama.cpp's `TENSOR_DUPLICATED` does (where the copy
/// fits in one of that device's buffers). A meta device's copy is made by
/// its own path.
fn tied_output_copy<'f>(
    file: &'f GgufFile,
    place: &dyn WeightPlacement,
) -> Option<&'f tessera_gguf::TensorInfo> {
    if file.tensor_info("output.weight").is_ok() {
        return None;
    }
    let info = file.tensor_info("token_embd.weight").ok()?;
    let layout = Layout::contiguous(info.dtype().ok()?, &info.ne).ok()?;
    let out = place.buffer_type_for("output.weight", &layout);
    let (home, embd) = (
        place.buffer_type("output.weight"),
        place.buffer_type("token_embd.weight"),
    );
    // Another device (not another buffer type of the same one, such as
    // the CPU's repacking type).
    let device = |b: &Arc<dyn BufferType>| b.device().map(|d| d.name().to_string());
    let elsewhere = match (device(&home), device(&embd)) {
        (Some(a), Some(b)) => a != b,
        _ => !Arc::ptr_eq(&home, &embd) && home.name() != embd.name(),
    };
    // One tensor must fit one buffer (lavapipe's are 128 MiB: Gemma 3's
    // 168 MB embeddings do not), else the output stays with them.
    let fits = out.alloc_size(&layout) <= out.max_size();
    (elsewhere && fits && crate::tensor_split::meta_device(&out).is_none()).then_some(info)
}

/// The layer of a `blk.N.*` tensor name.
pub fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// Called while weights are uploaded: bytes done, bytes in all.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// The weights of a model, by GGUF name.
#[derive(Debug)]
pub struct Weights {
    tensors: HashMap<String, Tensor>,
    /// Bytes of the tensors bound per buffer type name.
    sizes: Vec<(String, usize)>,
    /// For meta buffer types: the bytes of each device's pieces.
    parts: Vec<(String, Vec<usize>)>,
    /// Tensors stored in another buffer type than their device's (repacked
    /// weights): the device's.
    homes: HashMap<String, Arc<dyn BufferType>>,
}

impl Weights {
    /// Bind every tensor of `file` whose type Tessera knows, where `place`
    /// says. Tensors of an unknown type are refused only when a model asks
    /// for them ([`Weights::get`]).
    pub fn load(
        file: &GgufFile,
        place: &dyn WeightPlacement,
        progress: Progress,
    ) -> Result<Weights> {
        Weights::bind(file, place, Some(progress))
    }

    /// The tensors [`Weights::load`] would bind, at the same offsets, in
    /// planning buffers ([`PlanningType`]): no device memory is taken and
    /// nothing is copied, but graphs over them can be planned and
    /// [`Weights::bytes_by_buffer_type`] is what loading would take.
    pub fn plan(file: &GgufFile, place: &dyn WeightPlacement) -> Result<Weights> {
        Weights::bind(file, place, None)
    }

    /// Bind (uploading with `progress`), or plan (`None`).
    fn bind(
        file: &GgufFile,
        place: &dyn WeightPlacement,
        mut progress: Option<Progress>,
    ) -> Result<Weights> {
        let mut tensors = HashMap::new();
        // Group the tensors by buffer type (by name; the same type object
        // comes back for the same device), each as (name bound, the file's
        // tensor whose data it holds).
        let mut groups: Vec<(Arc<dyn BufferType>, Vec<Bound<'_>>)> = Vec::new();
        let mut homes = HashMap::new();
        let mut bound: Vec<Bound<'_>> = file
            .tensors()
            .iter()
            .filter(|t| t.dtype.is_some())
            .map(|t| (t.name.clone(), t))
            .collect();
        if let Some(info) = tied_output_copy(file, place) {
            bound.push(("output.weight".into(), info));
        }
        for (name, info) in bound {
            let layout = Layout::contiguous(info.dtype()?, &info.ne)?;
            let buft = place.buffer_type_for(&name, &layout);
            let home = place.buffer_type(&name);
            if !Arc::ptr_eq(&home, &buft) {
                homes.insert(name.clone(), home);
            }
            match groups
                .iter_mut()
                .find(|(b, _)| Arc::ptr_eq(b, &buft) || b.name() == buft.name())
            {
                Some((_, list)) => list.push((name, info)),
                None => groups.push((buft, vec![(name, info)])),
            }
        }
        let total: u64 = groups
            .iter()
            .filter(|(b, _)| !b.is_host())
            .flat_map(|(_, l)| l.iter())
            .map(|(_, t)| t.nbytes.unwrap_or(0) as u64)
            .sum();
        let mut done = 0u64;
        let mut sizes = Vec::new();
        let mut parts = Vec::new();
        for (buft, infos) in groups {
            if let Some(meta) = crate::tensor_split::meta_device(&buft) {
                // Planning takes a planning meta device (no memory), loading
                // a real one.
                if progress.is_none() != meta.is_planning() {
                    return Err(Error::unsupported(
                        "tessera-llm",
                        format!(
                            "{} weights on {}: plan on a planning meta device, load on a real one",
                            if progress.is_none() {
                                "planning"
                            } else {
                                "loading"
                            },
                            tessera::Device::name(meta.as_ref())
                        ),
                    ));
                }
                let params = crate::params::Params::from_gguf(file)?;
                // (name bound, name of the data): a tied output matrix gets
                // a split copy of the token embeddings of its own.
                let mut names: Vec<(String, String)> = infos
                    .iter()
                    .map(|(b, t)| (b.clone(), t.name.clone()))
                    .collect();
                let tied = file.tensor_info("output.weight").is_err()
                    && crate::tensor_split::meta_device(&place.buffer_type("output.weight"))
                        .is_some();
                if tied {
                    names.push(("output.weight".into(), "token_embd.weight".into()));
                }
                let layouts = names
                    .iter()
                    .map(|(_, d)| {
                        let t = file.tensor_info(d)?;
                        Layout::contiguous(t.dtype()?, &t.ne)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let bound: Vec<&str> = names.iter().map(|(b, _)| b.as_str()).collect();
                let (set, bytes, per_part) = crate::tensor_split::bind_weights(
                    &meta, file, &names, &bound, &layouts, &params,
                )?;
                for ((b, d), (t, copied)) in names.iter().zip(set) {
                    if let (true, Some(progress)) = (copied, progress.as_mut()) {
                        let data = file.tensor_data(d)?;
                        t.write(0, data)?;
                        done += data.len() as u64;
                        progress(done, total);
                    }
                    tensors.insert(b.clone(), t);
                }
                sizes.push((buft.name().to_string(), bytes));
                parts.push((buft.name().to_string(), per_part));
                continue;
            }
            if buft.is_host() {
                // Views of the file: its bytes, mapped, not allocated.
                let bytes = infos
                    .iter()
                    .map(|(_, t)| t.nbytes.unwrap_or(0))
                    .sum::<usize>();
                sizes.push((buft.name().to_string(), bytes));
                let data = file.data_buffer(buft);
                // Weights: the scheduler runs the ops that read them where
                // they are (ggml's rule), unless op offload moves them.
                data.set_usage(BufferUsage::Weights);
                for (name, info) in infos {
                    tensors.insert(name, file.tensor_in(&data, &info.name)?);
                }
                continue;
            }
            let layouts = infos
                .iter()
                .map(|(_, t)| Layout::contiguous(t.dtype()?, &t.ne))
                .collect::<Result<Vec<_>>>()?;
            let Some(progress) = progress.as_mut() else {
                let set = alloc_tensors(
                    &PlanningType::wrap(buft.clone()),
                    &layouts,
                    BufferUsage::Weights,
                )?;
                sizes.push((buft.name().to_string(), set.buffer.size()));
                for ((name, _), t) in infos.iter().zip(&set.tensors) {
                    tensors.insert(name.clone(), t.clone());
                }
                continue;
            };
            let set = alloc_tensors(&buft, &layouts, BufferUsage::Weights)?;
            // What was allocated (alignment and padding included).
            sizes.push((buft.name().to_string(), set.buffer.size()));
            for ((name, info), t) in infos.iter().zip(&set.tensors) {
                t.write(0, file.tensor_data(&info.name)?)?;
                // Copied: the mapped pages need not stay resident (unless
                // this is a copy of a tensor bound elsewhere too).
                if *name == info.name {
                    file.release_tensor(&info.name);
                }
                done += info.nbytes.unwrap_or(0) as u64;
                progress(done, total);
                tensors.insert(name.clone(), t.clone());
            }
        }
        Ok(Weights {
            tensors,
            sizes,
            parts,
            homes,
        })
    }

    /// The buffer type of the device tensor `name` is on (the one its
    /// placement gave, even when it is stored repacked).
    pub fn home_buffer_type(&self, file: &GgufFile, name: &str) -> Result<Arc<dyn BufferType>> {
        match self.homes.get(name) {
            Some(b) => Ok(b.clone()),
            None => Ok(self.get(file, name)?.buffer().buffer_type()),
        }
    }

    /// Tensor `name`, or an error naming it (and the type it has when
    /// Tessera does not know that type).
    pub fn get(&self, file: &GgufFile, name: &str) -> Result<&Tensor> {
        match self.tensors.get(name) {
            Some(t) => Ok(t),
            None => match file.tensor_info(name) {
                Ok(info) => Err(Error::unsupported(
                    "tessera-llm",
                    format!(
                        "tensor '{name}' has type {}, which Tessera does not know",
                        info.type_name()
                    ),
                )),
                Err(_) => Err(Error::NotFound(format!(
                    "tensor '{name}' (the model needs it)"
                ))),
            },
        }
    }

    /// Tensor `name` if the file has it.
    pub fn find(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    /// Bytes of the weights in each buffer type (by name): on a host buffer
    /// type the bytes of the tensors (views of the mapped file, not
    /// copies), elsewhere the bytes allocated (alignment included).
    pub fn bytes_by_buffer_type(&self) -> Vec<(String, usize)> {
        self.sizes.clone()
    }

    /// For the meta buffer type named `name`: the bytes of each of its
    /// devices' pieces (views of the mapped file on host devices, as for
    /// [`Weights::bytes_by_buffer_type`], allocations elsewhere); `None`
    /// when no weights are there.
    pub fn bytes_per_part(&self, name: &str) -> Option<Vec<usize>> {
        self.parts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.clone())
    }
}
