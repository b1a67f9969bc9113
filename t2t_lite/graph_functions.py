"""The package's one way to turn Python into a TensorFlow graph: traced as written, without AutoGraph.

The searches, steps, kernels and input functions of t2t_lite use `keras.ops` / TensorFlow ops and
explicit loops (`tf.while_loop`, `keras.ops.while_loop`; the searches run under `jax.jit` too),
never Python control flow on tensors. AutoGraph's source rewriting, `tf.function`'s default,
finds nothing to convert in them, yet it took most of a first trace (it rewrote the search, the
model's layers and Keras' own code: docs/testing.md). So every graph function of the package is
made here:

    step = graph_function(train_step, jit_compile=True, reduce_retracing=True)
    step = batch_function(eval_step, dataset.element_spec)   # one trace for every batch shape
    dataset.map(dataset_function(lambda chunk: ...))   # what tf.data traces

A Python `if` on a tensor inside them is an error at trace time (`OperatorNotAllowedInGraphError`),
not a silently converted branch: write `tf.cond` / `keras.ops.cond`, or `tf.where`.
"""

import tensorflow as tf


def graph_function(fn, **kwargs):
  """`tf.function(fn, autograph=False, **kwargs)`."""
  if "autograph" in kwargs:
    raise TypeError("graph_function traces without AutoGraph by design: drop the autograph argument "
                    "(write control flow on tensors with tf.cond / tf.while_loop)")
  return tf.function(fn, autograph=False, **kwargs)


def dataset_function(fn):
  """`fn` marked for tf.data (`Dataset.map`, `group_by_window`, ...) to trace as written."""
  return tf.autograph.experimental.do_not_convert(fn)


def batch_function(fn, batch_spec=None):
  """`fn(batch)` as a graph function traced for the batches' type spec (a dataset's or a
  distributed iterator's `element_spec`): once for every batch shape the spec admits, and an
  error for a batch of another structure or dtype. Without a spec: traced for the first batch's
  shape and once more, relaxed (`reduce_retracing`), when another shape comes."""
  if batch_spec is None:
    return graph_function(fn, reduce_retracing=True)
  return graph_function(fn, input_signature=[batch_spec])
