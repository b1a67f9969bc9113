"""Reading weight files without unpickling anything: safetensors and numpy `.npz`.

A pickle can run code when it is loaded, so a folder whose only weights are a pickle
(`pytorch_model.bin`, `*.pt`, `*.ckpt`) is refused with the command that converts it.

    >>> arrays = read_safetensors("opus-mt-en-de/model.safetensors")   # {name: float32 array}
    >>> arrays["model.shared.weight"].shape
    (58101, 512)
"""

import json
import os
import struct

import ml_dtypes
import numpy as np

# safetensors' dtype names (github.com/huggingface/safetensors, format.md).
SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                      "BF16": ml_dtypes.bfloat16, "I64": np.int64, "I32": np.int32,
                      "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json")


class WeightFileError(ValueError):
  """A weight file that is missing, unsafe to read, or not what it says it is."""


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """{name: array} of a `.safetensors` file (or of every shard of a `.safetensors.index.json`);
  floating-point arrays come back as float32.

  The format: 8 bytes little-endian header length, a JSON header {name: {dtype, shape,
  data_offsets}}, then the raw little-endian data.
  """
  if path.endswith(".index.json"):
    with open(path, encoding="utf-8") as f:
      shards = sorted(set(json.load(f)["weight_map"].values()))
    arrays = {}
    for shard in shards:
      arrays.update(read_safetensors(os.path.join(os.path.dirname(path), shard)))
    return arrays
  with open(path, "rb") as f:
    data = f.read()
  if len(data) < 8:
    raise WeightFileError(f"{path} is too short to be a safetensors file")
  (header_length,) = struct.unpack("<Q", data[:8])
  try:
    header = json.loads(data[8:8 + header_length])
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise WeightFileError(f"{path} is not a safetensors file (bad header: {e})") from None
  body = memoryview(data)[8 + header_length:]
  arrays = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    if info["dtype"] not in SAFETENSORS_DTYPES:
      raise WeightFileError(f"{path}: tensor {name} has dtype {info['dtype']}, which t2t_lite cannot "
                            f"read (known: {', '.join(SAFETENSORS_DTYPES)})")
    start, end = info["data_offsets"]
    array = np.frombuffer(body[start:end], SAFETENSORS_DTYPES[info["dtype"]]).reshape(info["shape"])
    arrays[name] = array.astype(np.float32) if array.dtype.kind in "fV" else array.copy()
  return arrays


def read_npz(path: str) -> dict[str, np.ndarray]:
  """{name: array} of a numpy `.npz` archive, read with `allow_pickle=False`."""
  try:
    with np.load(path, allow_pickle=False) as archive:
      return {name: archive[name] for name in archive.files}
  except ValueError as e:
    raise WeightFileError(f"{path} holds pickled objects, which t2t_lite does not load: {e}") from None


def refuse_pickles(folder: str, how_to_convert: str) -> None:
  """Raises WeightFileError naming the conversion when `folder` holds only pickled weights."""
  found = [name for name in PICKLED if os.path.exists(os.path.join(folder, name))]
  if found:
    raise WeightFileError(
        f"{folder} has its weights only in {found[0]}, a pickle: loading one can run arbitrary code, "
        f"so t2t_lite does not. Convert it to safetensors first, where you trust the file: "
        f"{how_to_convert}")
