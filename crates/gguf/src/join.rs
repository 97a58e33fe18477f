//! Joining a split GGUF into one file. `llama-gguf-split` cuts a large model into shards
//! named `NAME-00001-of-00003.gguf`, each a whole GGUF holding some of the tensors, with
//! `split.no`, `split.count` and `split.tensors.count` in its metadata and the model's
//! metadata in the first. The loader reads one file, so shards are joined once, after a
//! download: the first shard's metadata without the `split.*` keys, then every shard's
//! tensors in order, their bytes streamed from the memory-mapped shards.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::writer::{write_gguf, TensorOut};
use crate::{GgufError, GgufFile, Value};

/// Joins `shards` (in order) into `out`. Refuses shards that do not say they are this split's
/// parts, in this order, with every tensor.
pub fn join_split(shards: &[PathBuf], out: &Path) -> Result<(), GgufError> {
    let files = shards
        .iter()
        .map(GgufFile::open)
        .collect::<Result<Vec<_>, _>>()?;
    let first = files
        .first()
        .ok_or_else(|| GgufError::BadSplit("no shards".into()))?;
    let count = first.get_u64("split.count")?;
    if count != files.len() as u64 {
        return Err(GgufError::BadSplit(format!(
            "split.count is {count}, {} shards given",
            files.len()
        )));
    }
    for (i, f) in files.iter().enumerate() {
        let no = f.get_u64("split.no")?;
        if no != i as u64 {
            return Err(GgufError::BadSplit(format!(
                "shard {i} says it is split.no {no}"
            )));
        }
    }
    let tensors: Vec<TensorOut<'_>> = files
        .iter()
        .flat_map(|f| {
            f.tensors().iter().map(move |t| TensorOut {
                name: &t.name,
                dims: &t.dims,
                ty: t.ty,
                data: f.tensor_data(t),
            })
        })
        .collect();
    let expected = first.get_u64("split.tensors.count")?;
    if expected != tensors.len() as u64 {
        return Err(GgufError::BadSplit(format!(
            "split.tensors.count is {expected}, the shards hold {}",
            tensors.len()
        )));
    }
    let metadata: Vec<(String, Value)> = first
        .metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with("split."))
        .cloned()
        .collect();
    let mut w = BufWriter::new(File::create(out)?);
    write_gguf(&mut w, &metadata, first.alignment(), &tensors)?;
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GgmlType, GgufWriter};

    /// A shard `no` of `count` holding `tensors` (name, first value).
    fn shard(dir: &Path, no: u16, count: u16, total: u64, tensors: &[(&str, f32)]) -> PathBuf {
        let mut w = GgufWriter::new();
        if no == 0 {
            w.add_metadata("general.architecture", Value::String("llama".into()));
        }
        w.add_metadata("split.no", Value::U16(no))
            .add_metadata("split.count", Value::U16(count))
            .add_metadata("split.tensors.count", Value::I32(total as i32));
        for (name, v) in tensors {
            let data: Vec<u8> = [*v, v + 1.0].iter().flat_map(|x| x.to_le_bytes()).collect();
            w.add_tensor(name, &[2], GgmlType::F32, data);
        }
        let path = dir.join(format!("m-{:05}-of-{:05}.gguf", no + 1, count));
        w.write_to(&path).unwrap();
        path
    }

    #[test]
    fn shards_join_into_the_file_they_were_cut_from() {
        let dir = std::env::temp_dir().join(format!("ferrox-join-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let shards = vec![
            shard(&dir, 0, 2, 3, &[("a", 1.0), ("b", 3.0)]),
            shard(&dir, 1, 2, 3, &[("c", 5.0)]),
        ];
        let out = dir.join("m.gguf");
        join_split(&shards, &out).unwrap();
        let f = GgufFile::open(&out).unwrap();
        assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
        assert!(f.metadata().iter().all(|(k, _)| !k.starts_with("split.")));
        let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let c = f.tensor_data(f.tensor("c").unwrap());
        assert_eq!(
            c,
            [5.0f32, 6.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>()
        );
        // Out of order, or a shard missing: refused.
        let swapped = vec![shards[1].clone(), shards[0].clone()];
        assert!(join_split(&swapped, &out).is_err());
        assert!(join_split(&shards[..1], &out).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
