"""`xla_cache.stable_names` (t2t_lite/decoding/xla_cache.py): a trace inside takes its function
names from its key's block, whatever the process traced before, and a function found in
tf.function's cache takes no block, so the Translator looks every batch's shape up under it (no
set of traced shapes of its own). Across processes: tests/test_xla_cache.py."""

import zlib

import tensorflow as tf
from tensorflow.python.framework import ops

from t2t_lite import model_dir as model_dir_lib
from t2t_lite.decoding import xla_cache
from t2t_lite.decoding.translator import Translator
from t2t_lite.hparams import DecodeHParams
from t2t_lite.token_ids import EOS_ID


def _numbers(concrete):
  """The uid() numbers ending the names of a traced function and of the functions inside it
  (`__inference_count_down_<n>`, `while_body_<n>`, ...)."""
  names = [concrete.function_def.signature.name]
  names += [f.signature.name for f in concrete.graph.as_graph_def().library.function]
  return [int(name.rsplit("_", 1)[1]) for name in names]


def _used():
  return set(xla_cache._used_blocks)  # pylint: disable=protected-access


def test_a_new_trace_takes_its_keys_block_and_a_traced_shape_takes_none():
  fn = tf.function(lambda x: tf.while_loop(lambda i: i > 0, lambda i: i - 1, [x])[0])
  tf.function(lambda x: x + 1).get_concrete_function(tf.TensorSpec((), tf.int32))  # the counter moves
  key, spec = "test_stable_names count_down", tf.TensorSpec((), tf.int32)
  used = _used()
  with xla_cache.stable_names(key):
    traced = fn.get_concrete_function(spec)
  block = zlib.crc32(key.encode("utf-8")) % xla_cache._BLOCK  # pylint: disable=protected-access
  while block in used:
    block = (block + 1) % xla_cache._BLOCK  # pylint: disable=protected-access
  assert _used() == used | {block}
  start = xla_cache._FIRST + block * xla_cache._BLOCK  # pylint: disable=protected-access
  numbers = _numbers(traced)
  assert len(numbers) >= 3 and all(start <= n < start + 1000 for n in numbers), numbers
  for _ in range(3):   # looked up again (a cache hit): the same function, no block taken
    with xla_cache.stable_names(key):
      assert fn.get_concrete_function(spec).name == traced.name
  assert _used() == used | {block}
  with xla_cache.stable_names(key):  # a new shape under a key already used: the next free block
    fn.get_concrete_function(tf.TensorSpec((), tf.int64))
  assert len(_used() - used) == 2
  assert int(fn(tf.constant(3))) == 0
  assert ops.uid is not xla_cache._stable_uid  # pylint: disable=protected-access  (TensorFlow's again)


def test_the_translator_traces_each_width_once_and_takes_a_block_per_trace(tiny_model_dir):
  """One trace (and one block of names) per padded width: another batch size at a width
  already traced is found in tf.function's cache and only compiled (one XLA program per shape),
  with the results it gives in the larger batch. A batch that shrinks plans from its static size,
  and the plain graph (xla=false) ran slower with the batch unknown: one trace per (batch,
  width) for both."""
  model_dir, _ = tiny_model_dir
  _, model, _ = model_dir_lib.restore_model(str(model_dir))
  vocab = model_dir_lib.load_vocab(str(model_dir))
  translator = Translator(model, vocab, DecodeHParams(beam_size=1, batch_size=4, extra_length=2))
  sources = [[5, 6, EOS_ID], [7, EOS_ID], [8, 9, 10, 11, EOS_ID]]   # one batch: 4 x 16
  used = _used()
  first = translator.translate_ids(sources)
  assert translator.tracing_count == 1 and len(_used() - used) == 1
  for _ in range(2):
    assert translator.translate_ids(sources) == first
  assert translator.tracing_count == 1 and len(_used() - used) == 1
  assert translator.translate_ids(sources[:1]) == first[:1]          # another batch: 1 x 16
  assert translator.tracing_count == 1 and len(_used() - used) == 1
  translator.translate_ids([[5] * 20 + [EOS_ID]])                    # another width: 1 x 32
  assert translator.tracing_count == 2 and len(_used() - used) == 2
  shrinking = Translator(model, vocab, DecodeHParams(beam_size=2, batch_size=4, extra_length=2,
                                                      shrink_batch=1))
  shrinking.translate_ids(sources)
  shrinking.translate_ids(sources[:1])
  assert shrinking.tracing_count == 2 and len(_used() - used) == 4
  graph = Translator(model, vocab, DecodeHParams(beam_size=1, batch_size=4, extra_length=2,
                                                 xla=False))
  batched, alone = graph.translate_ids(sources)[0], graph.translate_ids(sources[:1])[0]
  assert [ids for ids, _ in batched] == [ids for ids, _ in alone]
  assert graph.tracing_count == 2 and len(_used() - used) == 6
