"""Every graph the package traces goes through t2t_lite.graph_functions: no AutoGraph anywhere.

AutoGraph's rewriting took most of a search's first trace and converts nothing in the package's
code (docs/testing.md). A new bare `tf.function` would bring it back silently: the source scan
below catches it; the behaviour tests show the helpers really trace without it, against
TensorFlow's defaults that do convert.
"""

import ast
import pathlib

import pytest
import tensorflow as tf

from t2t_lite.graph_functions import batch_function, dataset_function, graph_function

REPO = pathlib.Path(__file__).resolve().parents[1]
LIBRARY = [REPO / "t2t_lite", REPO / "hparams", REPO / "problems"]
HELPERS = REPO / "t2t_lite" / "graph_functions.py"


def _python_if(x):
  if x > 0:  # Python control flow on a tensor: AutoGraph would turn it into tf.cond
    return x * 2
  return x - 1


def _attribute_path(node):
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  if isinstance(node, ast.Name):
    parts.append(node.id)
  return ".".join(reversed(parts))


def test_no_library_module_makes_a_graph_without_the_helpers():
  found = []
  for root in LIBRARY:
    for path in sorted(root.rglob("*.py")):
      if path == HELPERS:
        continue
      for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        name = _attribute_path(node) if isinstance(node, ast.Attribute) else ""
        if name.endswith(("tf.function", "tensorflow.function")) or ".autograph" in f".{name}":
          found.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorflow") and \
            any(alias.name in ("function", "autograph") for alias in node.names):
          found.append(f"{path.relative_to(REPO)}:{node.lineno} from {node.module} import ...")
  assert not found, ("use t2t_lite.graph_functions (graph_function / dataset_function) instead: "
                     f"{found}")


def test_the_scan_sees_a_bare_tf_function():
  """The scan's own check: the forms it must catch are found by `_attribute_path`."""
  tree = ast.parse("import tensorflow as tf\nf = tf.function(g)\n@tf.function\ndef h(): pass\n"
                   "k = tf.autograph.experimental.do_not_convert(g)\n")
  names = [_attribute_path(node) for node in ast.walk(tree) if isinstance(node, ast.Attribute)]
  assert names.count("tf.function") == 2 and "tf.autograph.experimental.do_not_convert" in names


def test_graph_function_traces_as_written():
  x = tf.constant(3.0)
  assert float(tf.function(_python_if)(x)) == 6.0  # the default converts the `if`
  with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
    graph_function(_python_if)(x)
  # Written with graph ops, the same function runs, and the keyword arguments reach tf.function.
  compiled = graph_function(lambda x: tf.where(x > 0, x * 2, x - 1), jit_compile=True,
                            input_signature=[tf.TensorSpec([], tf.float32)])
  assert float(compiled(x)) == 6.0 and float(compiled(tf.constant(-1.0))) == -2.0
  with pytest.raises(TypeError, match="TensorSpec"):  # the input signature was kept: not a vector
    compiled(tf.constant([1.0, 2.0]))


def test_graph_function_refuses_an_autograph_argument():
  with pytest.raises(TypeError, match="without AutoGraph"):
    graph_function(_python_if, autograph=True)


def test_dataset_function_traces_as_written():
  numbers = tf.data.Dataset.from_tensor_slices([1.0, -1.0])
  assert [float(x) for x in numbers.map(_python_if)] == [2.0, -2.0]  # converted by default
  with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
    numbers.map(dataset_function(_python_if))


def test_batch_function_traces_once_for_the_spec_and_twice_without():
  """Given a dataset's element_spec, one trace serves batches of every shape it admits and a batch
  of another dtype is refused; without one, the first shape is traced and then a relaxed one."""
  batches = tf.data.Dataset.from_generator(
      lambda: (tf.ones([n, n + 1], tf.int32) for n in (1, 2, 3)),
      output_signature=tf.TensorSpec([None, None], tf.int32))
  def counted(traces):
    return lambda batch: traces.append(batch.shape) or tf.reduce_sum(batch)

  for spec, expected_traces in ((batches.element_spec, 1), (None, 2)):
    traces = []
    fn = batch_function(counted(traces), spec)
    assert [int(fn(batch)) for batch in batches] == [2, 6, 12]
    assert len(traces) == expected_traces, traces
  fn = batch_function(tf.reduce_sum, batches.element_spec)
  with pytest.raises(TypeError):
    fn(tf.ones([2, 2], tf.float32))
