"""The layers' call contract: argument checks (each ValueError says how to fix the call) and the
shape of return values. `keras.ops` only, so it runs on the TensorFlow and JAX backends.
"""

import keras
from keras import ops


def dim(x, axis):
  """The size of `x` along `axis`: a Python int where the shape says it (always on JAX), else a
  scalar tensor (`ops.shape`). In a traced graph a known size is a constant, where `ops.shape`
  adds a `Shape` and a `StridedSlice` with their constants at every call (on TensorFlow): a beam
  search's trace is mostly such small operations, and each costs time to create."""
  size = x.shape[axis]
  return size if size is not None else ops.shape(x)[axis]


def check_rate(name, value):
  """Raises a ValueError unless `value` is a dropout rate in [0, 1)."""
  if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
    raise ValueError(f"`{name}` must be a dropout rate in [0, 1), e.g. {name}=0.1; got {value!r}.")


def check_positive_int(name, value):
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise ValueError(f"`{name}` must be a positive int, e.g. {name}=8; got {value!r}.")


def check_rank(name, tensor, ranks, shape_hint):
  """Raises a ValueError unless `tensor` has one of the ranks in `ranks`."""
  if len(tensor.shape) not in ranks:
    raise ValueError(f"`{name}` must have shape {shape_hint}; got shape {tuple(tensor.shape)}.")


def check_int_ids(name, ids, ranks, shape_hint):
  """Token ids must be an integer tensor with one of the given ranks."""
  ids = ops.convert_to_tensor(ids)
  if "int" not in keras.backend.standardize_dtype(ids.dtype):
    raise ValueError(f"`{name}` must hold integer token ids (cast with "
                     f"`keras.ops.cast({name}, 'int32')`); got dtype {ids.dtype}.")
  check_rank(name, ids, ranks, shape_hint)
  return ids


def check_bool_mask(name, mask, ranks, shape_hint):
  """Masks are boolean (True = may attend / is a real token) with one of the given ranks."""
  if mask is None:
    return None
  mask = ops.convert_to_tensor(mask)
  if keras.backend.standardize_dtype(mask.dtype) != "bool":
    raise ValueError(f"`{name}` must be a boolean tensor (True = may attend); got dtype "
                     f"{mask.dtype}. Convert it first, e.g. `keras.ops.not_equal(ids, 0)`.")
  check_rank(name, mask, ranks, shape_hint)
  return mask


def check_step(step, batch_size=None):
  """Explains a decoding `step` that is neither an int scalar nor an int vector [batch]."""
  shape = tuple(getattr(step, "shape", ()))
  if len(shape) > 1 or (len(shape) == 1 and None not in (shape[0], batch_size)
                        and shape[0] != batch_size):
    raise ValueError(f"`step` must be an int scalar (every row at one position) or an int vector "
                     f"[batch] (one position per row, batch {batch_size}); got shape {shape}.")


def call_results(output, scores=None, cache=None):
  """A layer's return value: `output` alone, or the tuple `(output, scores, cache)` without the
  parts that are None (the attention scores when asked for, the cache when one was passed)."""
  results = (output,) + tuple(part for part in (scores, cache) if part is not None)
  return results[0] if len(results) == 1 else results
