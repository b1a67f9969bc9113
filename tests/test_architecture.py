"""Imports run one way: no module imports from a layer above its own.

Every import statement of the library counts, at module level or inside a function (a
function-level import hides a cycle; it does not remove it). Within one layer anything goes.
A new package or top-level module must be given a layer here.
"""

import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]

# Lowest first. A module may import its own layer and the ones before it.
LAYERS = (
    ("t2t_lite", "t2t_lite.registry", "t2t_lite.token_ids",  # names and ids everything shares
     "t2t_lite.cpu",               # /proc/cpuinfo, read without TensorFlow (the XLA cache's key)
     "t2t_lite.graph_functions"),  # tf.function without AutoGraph: every graph the package traces
    ("t2t_lite.hparams",),         # HParams, ModelConfig, DecodeHParams, the sets
    ("t2t_lite.data",),            # vocabulary, text files, the tf.data pipeline, token shards
    ("t2t_lite.parsing",),         # trees of the parsing problem
    ("t2t_lite.problems",),        # datasets: use data's vocabulary and pipeline tools
    ("t2t_lite.layers",),
    ("t2t_lite.models",),
    ("t2t_lite.fast_path",),       # the training path for this machine (hparams "auto")
    ("t2t_lite.model_dir",),       # builds, restores and describes a trained model's folder
    ("t2t_lite.training", "t2t_lite.importers"),  # importers write a model dir at step 0
    ("t2t_lite.decoding",),
    ("t2t_lite.export",),
    ("t2t_lite.serving",),         # t2t-lite-serve's server: batching, backends, the web page
    ("t2t_lite.bin",),             # the commands
)
# Folders installed under another name (setup.py's package_dir).
SOURCE_ROOTS = {"t2t_lite": REPO / "t2t_lite", "t2t_lite.hparams": REPO / "hparams",
                "t2t_lite.problems": REPO / "problems"}


def layer_of(module):
  """Index in LAYERS of the longest prefix naming `module` (None outside t2t_lite, and for a
  module of t2t_lite that LAYERS does not place: the package "t2t_lite" is only itself, its
  `__init__`, not a prefix, or every new module would be in the lowest layer unseen)."""
  best, rank = "", None
  for index, names in enumerate(LAYERS):
    for name in names:
      if name == "t2t_lite" and module != name:
        continue
      if (module == name or module.startswith(name + ".")) and len(name) > len(best):
        best, rank = name, index
  return rank


def library_modules():
  """{module name: path} of every library source file."""
  modules = {}
  for package, root in SOURCE_ROOTS.items():
    for path in root.rglob("*.py"):
      parts = list(path.relative_to(root).with_suffix("").parts)
      if parts[-1] == "__init__":
        parts.pop()
      name = ".".join([package] + parts)
      if package == "t2t_lite" and name.split(".")[:2] in (["t2t_lite", "hparams"],
                                                            ["t2t_lite", "problems"]):
        continue
      modules[name] = path
  return modules


def imported_modules(module, path):
  """(line, imported module) of every import in the file, nested ones included."""
  package = module if path.name == "__init__.py" else module.rpartition(".")[0]
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: resolve against this module's package
        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
      for alias in node.names:  # `from t2t_lite import registry` imports t2t_lite.registry
        yield node.lineno, f"{base}.{alias.name}" if base == "t2t_lite" else base


def test_every_library_module_has_a_layer():
  unplaced = sorted(name for name in library_modules() if layer_of(name) is None)
  assert not unplaced, f"give these modules a layer in LAYERS: {unplaced}"


def test_no_module_imports_from_a_higher_layer():
  violations = []
  for module, path in sorted(library_modules().items()):
    own = layer_of(module)
    if own is None:  # unplaced: test_every_library_module_has_a_layer names it
      continue
    for line, imported in imported_modules(module, path):
      target = layer_of(imported)
      if target is not None and target > own:
        violations.append(f"{path.relative_to(REPO)}:{line}: {module} ({LAYERS[own][0]}) imports "
                          f"{imported} ({LAYERS[target][0]}, a higher layer)")
  assert not violations, "imports must run one way (see LAYERS):\n" + "\n".join(violations)


def test_the_checker_sees_nested_and_relative_imports(tmp_path):
  source = tmp_path / "module.py"
  source.write_text("import os\n"
                    "from t2t_lite import registry\n"
                    "def f():\n"
                    "  from t2t_lite.decoding import translator\n"
                    "  from .. import model_dir\n", encoding="utf-8")
  found = [name for _, name in imported_modules("t2t_lite.training.module", source)]
  assert found == ["os", "t2t_lite.registry", "t2t_lite.decoding", "t2t_lite.model_dir"]
  assert [layer_of(name) for name in found] == [None, 0, 10, 8]
  assert layer_of("t2t_lite.training.train_loop") == 9 and layer_of("t2t_lite") == 0


def test_a_module_without_a_layer_is_named():
  """A new top-level module or package is unplaced (not the lowest layer by the prefix
  "t2t_lite"), so test_every_library_module_has_a_layer names it; the placed ones keep theirs."""
  assert layer_of("t2t_lite.newly_added") is None and layer_of("t2t_lite.new_package.module") is None
  assert layer_of("t2t_lite.registry") == layer_of("t2t_lite.cpu") == 0
  assert layer_of("t2t_lite.graph_functions") == 0 and layer_of("t2t_lite.hparams.base") == 1
