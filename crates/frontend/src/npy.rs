//! `.npy` files as literals: reading inputs and writing outputs (via `npyz`).
//!
//! Supported dtypes are NumPy's bool, int8..int64, uint8..uint64, float16, float32 and
//! float64, in C or Fortran order and either byte order. bf16 has no NumPy dtype, so a
//! bf16 value cannot be written.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType};

/// A `.npy` file that could not be read or written, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct NpyError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

fn error(path: &Path, message: impl Into<String>) -> NpyError {
    NpyError {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The NumPy name of an element type (`float32`), as printed for users.
pub fn numpy_name(t: ElementType) -> &'static str {
    match t {
        ElementType::Pred => "bool",
        ElementType::S8 => "int8",
        ElementType::S16 => "int16",
        ElementType::S32 => "int32",
        ElementType::S64 => "int64",
        ElementType::U8 => "uint8",
        ElementType::U16 => "uint16",
        ElementType::U32 => "uint32",
        ElementType::U64 => "uint64",
        ElementType::F16 => "float16",
        ElementType::Bf16 => "bfloat16",
        ElementType::F32 => "float32",
        ElementType::F64 => "float64",
        ElementType::C64 => "complex64",
        ElementType::C128 => "complex128",
        ElementType::S2 => "int2",
        ElementType::S4 => "int4",
        ElementType::U2 => "uint2",
        ElementType::U4 => "uint4",
        ElementType::F4e2m1fn => "float4_e2m1fn",
        ElementType::F8e3m4 => "float8_e3m4",
        ElementType::F8e4m3 => "float8_e4m3",
        ElementType::F8e4m3fn => "float8_e4m3fn",
        ElementType::F8e4m3fnuz => "float8_e4m3fnuz",
        ElementType::F8e4m3b11fnuz => "float8_e4m3b11fnuz",
        ElementType::F8e5m2 => "float8_e5m2",
        ElementType::F8e5m2fnuz => "float8_e5m2fnuz",
        ElementType::F8e8m0fnu => "float8_e8m0fnu",
    }
}

/// Reads a `.npy` file into an array literal (logical row-major order).
pub fn read_npy(path: &Path) -> Result<ArrayLiteral, NpyError> {
    let file = File::open(path).map_err(|e| error(path, format!("cannot open: {e}")))?;
    let npy = npyz::NpyFile::new(BufReader::new(file))
        .map_err(|e| error(path, format!("not a valid .npy file: {e}")))?;
    let dims: Vec<i64> = npy.shape().iter().map(|&d| d as i64).collect();
    let fortran = npy.order() == npyz::Order::Fortran;
    let element_type = match npy.dtype() {
        npyz::DType::Plain(ts) => {
            use npyz::TypeChar::*;
            match (ts.type_char(), ts.num_bytes()) {
                (Bool, Some(1)) => ElementType::Pred,
                (Int, Some(1)) => ElementType::S8,
                (Int, Some(2)) => ElementType::S16,
                (Int, Some(4)) => ElementType::S32,
                (Int, Some(8)) => ElementType::S64,
                (Uint, Some(1)) => ElementType::U8,
                (Uint, Some(2)) => ElementType::U16,
                (Uint, Some(4)) => ElementType::U32,
                (Uint, Some(8)) => ElementType::U64,
                (Float, Some(2)) => ElementType::F16,
                (Float, Some(4)) => ElementType::F32,
                (Float, Some(8)) => ElementType::F64,
                _ => {
                    return Err(error(
                        path,
                        format!("dtype {ts} is not supported (use bool, intN, uintN or floatN)"),
                    ));
                }
            }
        }
        other => {
            return Err(error(
                path,
                format!("structured dtype {} is not supported", other.descr()),
            ));
        }
    };
    let read_err = |e: std::io::Error| error(path, format!("cannot read the data: {e}"));
    let data = match element_type {
        ElementType::Pred => ArrayData::Pred(npy.into_vec().map_err(read_err)?),
        ElementType::S8 => ArrayData::S8(npy.into_vec().map_err(read_err)?),
        ElementType::S16 => ArrayData::S16(npy.into_vec().map_err(read_err)?),
        ElementType::S32 => ArrayData::S32(npy.into_vec().map_err(read_err)?),
        ElementType::S64 => ArrayData::S64(npy.into_vec().map_err(read_err)?),
        ElementType::U8 => ArrayData::U8(npy.into_vec().map_err(read_err)?),
        ElementType::U16 => ArrayData::U16(npy.into_vec().map_err(read_err)?),
        ElementType::U32 => ArrayData::U32(npy.into_vec().map_err(read_err)?),
        ElementType::U64 => ArrayData::U64(npy.into_vec().map_err(read_err)?),
        ElementType::F16 => ArrayData::F16(npy.into_vec().map_err(read_err)?),
        ElementType::F32 => ArrayData::F32(npy.into_vec().map_err(read_err)?),
        ElementType::F64 => ArrayData::F64(npy.into_vec().map_err(read_err)?),
        other => unreachable!("no NumPy dtype read above maps to {other}"),
    };
    let shape = ArrayShape::new(element_type, &dims);
    let literal = ArrayLiteral::new(shape, data).map_err(|m| error(path, m))?;
    Ok(if fortran {
        fortran_to_c(literal)
    } else {
        literal
    })
}

/// Reorders column-major data into row-major order.
fn fortran_to_c(literal: ArrayLiteral) -> ArrayLiteral {
    let dims = &literal.shape.dims;
    // Fortran strides: dimension 0 varies fastest.
    let mut fortran_strides = vec![1usize; dims.len()];
    for d in 1..dims.len() {
        fortran_strides[d] = fortran_strides[d - 1] * dims[d - 1] as usize;
    }
    let mut order = Vec::with_capacity(literal.data.len());
    let mut index = vec![0i64; dims.len()];
    for _ in 0..literal.data.len() {
        order.push(
            index
                .iter()
                .zip(&fortran_strides)
                .map(|(&i, &s)| i as usize * s)
                .sum(),
        );
        // Advance the row-major multi-index.
        for d in (0..dims.len()).rev() {
            index[d] += 1;
            if index[d] < dims[d] {
                break;
            }
            index[d] = 0;
        }
    }
    ArrayLiteral {
        data: literal.data.take(&order),
        shape: literal.shape,
    }
}

/// Writes an array literal as a `.npy` file in C order.
pub fn write_npy(path: &Path, literal: &ArrayLiteral) -> Result<(), NpyError> {
    let file = File::create(path).map_err(|e| error(path, format!("cannot create: {e}")))?;
    let shape: Vec<u64> = literal.shape.dims.iter().map(|&d| d as u64).collect();
    let result = match &literal.data {
        ArrayData::Pred(v) => write_all(file, &shape, v),
        ArrayData::S8(v) => write_all(file, &shape, v),
        ArrayData::S16(v) => write_all(file, &shape, v),
        ArrayData::S32(v) => write_all(file, &shape, v),
        ArrayData::S64(v) => write_all(file, &shape, v),
        ArrayData::U8(v) => write_all(file, &shape, v),
        ArrayData::U16(v) => write_all(file, &shape, v),
        ArrayData::U32(v) => write_all(file, &shape, v),
        ArrayData::U64(v) => write_all(file, &shape, v),
        ArrayData::F16(v) => write_all(file, &shape, v),
        ArrayData::F32(v) => write_all(file, &shape, v),
        ArrayData::F64(v) => write_all(file, &shape, v),
        ArrayData::Bf16(_) => {
            return Err(error(
                path,
                "bf16 has no .npy dtype; convert it to f32 in the module",
            ));
        }
        other => {
            return Err(error(
                path,
                format!(
                    "{} values are not computed by ipuxla and have no .npy writer",
                    other.element_type()
                ),
            ));
        }
    };
    result.map_err(|e| error(path, format!("cannot write: {e}")))
}

fn write_all<T: npyz::AutoSerialize + Copy>(
    file: File,
    shape: &[u64],
    values: &[T],
) -> std::io::Result<()> {
    use npyz::WriterBuilder;
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(BufWriter::new(file))
        .begin_nd()?;
    writer.extend(values.iter().copied())?;
    writer.finish()
}
