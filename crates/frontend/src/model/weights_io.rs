//! Saving and loading a model's weights: one `.npy` file per weight in a directory, named
//! after the weight (`dense_1.kernel.npy`), so NumPy reads them as they are.

use super::{Model, ModelError};
use crate::npy::{read_npy, write_npy};
use std::path::Path;

fn file_name(weight: &str) -> String {
    format!("{}.npy", weight.replace('/', "."))
}

impl Model {
    /// Writes every weight to `dir/<layer>.<weight>.npy` (the directory is created).
    pub fn save_weights(&self, dir: &Path) -> Result<(), ModelError> {
        std::fs::create_dir_all(dir).map_err(|e| ModelError::File {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        for w in &self.weights {
            let path = dir.join(file_name(&w.name));
            write_npy(&path, &w.value).map_err(|e| ModelError::File {
                path: path.clone(),
                message: e.to_string(),
            })?;
        }
        Ok(())
    }

    /// Reads every weight from `dir` as [`Self::save_weights`] wrote it; a missing file or
    /// a shape that differs from the model's is an error naming the weight.
    pub fn load_weights(&mut self, dir: &Path) -> Result<(), ModelError> {
        let mut values = Vec::with_capacity(self.weights.len());
        for w in &self.weights {
            let path = dir.join(file_name(&w.name));
            let v = read_npy(&path).map_err(|e| ModelError::File {
                path: path.clone(),
                message: e.to_string(),
            })?;
            if v.shape != w.value.shape {
                return Err(ModelError::File {
                    path,
                    message: format!(
                        "weight {} of model {} is {}, the file holds {}",
                        w.name, self.name, w.value.shape, v.shape
                    ),
                });
            }
            values.push(v);
        }
        self.set_weights(values)
    }
}
