//! Rust types that are the elements of a plain (non-quantized) [`DType`].
//!
//! [`Element`] ties a Rust type to the one tensor type whose elements it
//! *is*: `f32` to [`DType::F32`], `i32` to [`DType::I32`], and so on. Typed
//! tensor access ([`crate::Tensor::write_slice`], [`crate::Tensor::read_vec`])
//! requires `T::DTYPE` to equal the tensor's type, so `f32` values never land
//! in an `I32` tensor just because both are 4 bytes wide. Untyped access is
//! explicitly bytes ([`crate::Tensor::write`], [`crate::Tensor::read`],
//! [`crate::Tensor::to_bytes`]).
//!
//! The trait is sealed: the mapping is fixed here and cannot be extended (or
//! contradicted) outside this crate.

use crate::DType;

mod sealed {
    pub trait Sealed {}
}

/// A plain value type that is exactly the element of one [`DType`].
pub trait Element: bytemuck::Pod + sealed::Sealed {
    /// The tensor type whose elements are `Self`.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(
            impl sealed::Sealed for $t {}
            impl Element for $t {
                const DTYPE: DType = DType::$d;
            }
        )*
    };
}

element! {
    f32 => F32,
    half::f16 => F16,
    half::bf16 => BF16,
    i32 => I32,
    i64 => I64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_element_matches_its_dtype_size() {
        fn size_ok<T: Element>() -> bool {
            !T::DTYPE.is_quantized() && T::DTYPE.type_size() == std::mem::size_of::<T>()
        }
        assert!(size_ok::<f32>());
        assert!(size_ok::<half::f16>());
        assert!(size_ok::<half::bf16>());
        assert!(size_ok::<i32>());
        assert!(size_ok::<i64>());
        assert_eq!(<half::bf16 as Element>::DTYPE, DType::BF16);
        assert_eq!(<i64 as Element>::DTYPE, DType::I64);
    }
}
