"""Shared test setup: quiet TensorFlow, the data folder, and the backend_independent and slow markers.

Tests marked `backend_independent` use only keras.ops/numpy and run on both the TensorFlow and
the JAX backends (scripts/test.sh runs them twice).

Tests that train models, run commands or recipes end to end in subprocesses, or build the
package are marked `slow` here, from the lists SLOW_FILES and SLOW_TESTS (the test files stay
free of it): `pytest -m "not slow"` is the fast subset for development (docs/testing.md).

Real corpora are read from ../shared/data (or $T2T_LITE_SHARED_DATA); a clone without them
skips the tests that measure real text, and runs the plumbing tests that need only a parallel
corpus (`multi30k_folder`) on made-up caption pairs with Multi30k's file names.
"""

import fcntl
import json
import os
import pathlib
import shutil
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The commands tests start keep no XLA cache in the (shared, read-only) model folders they decode;
# tests/test_xla_cache.py gives its own folders.
os.environ.setdefault("T2T_LITE_XLA_CACHE_DIR", "none")

import pytest  # noqa: E402

from made_up_corpus import MULTI30K_FILES, write_made_up_captions  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = pathlib.Path(os.environ.get("T2T_LITE_SHARED_DATA", REPO.parent / "shared" / "data"))


# Whole files whose tests train a model (or share a trained fixture such as tiny_model_dir), or run
# commands, recipes, benchmarks or pip in subprocesses.
SLOW_FILES = {
    "test_attention_pictures.py", "test_benchmarks.py", "test_bench_model_dir.py", "test_data_parallel.py",
    "test_decoder.py",
    "test_end_to_end.py", "test_export.py", "test_import_marian.py", "test_packaging.py",
    "test_quiet_startup.py", "test_t2t_commands.py", "test_t2t_trainer.py", "test_tfds_offline.py",
    "test_trainer.py", "test_training_outcomes.py", "test_best_checkpoint.py", "test_ctranslate2_export.py",
    "test_ema.py", "test_keras_file.py", "test_keras_fit.py", "test_serve.py", "test_serve_browser.py",
    "test_warm_start.py",
}
# Single slow tests of otherwise fast files: "file.py::test_name" (every parametrization of it).
SLOW_TESTS = {
    "test_parsing.py::test_exporter_and_translator_use_the_problems_decode_defaults_and_constraint",
}


def pytest_configure(config):
  config.addinivalue_line("markers", "backend_independent: runs on the TensorFlow and JAX backends")
  config.addinivalue_line("markers", "slow: trains, or runs commands end to end; -m 'not slow' skips them "
                                     "(the lists are in tests/conftest.py)")
  # TEST_TF_THREADS=n: TensorFlow's intra-op threads in each pytest process (not in the processes
  # tests start), so that two workers on two cores need not share each core between their thread
  # pools; unset, TensorFlow's default (one per core).
  threads = int(os.environ.get("TEST_TF_THREADS") or 0)
  if threads and os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.config.threading.set_intra_op_parallelism_threads(threads)


# The files that take longest, longest first: the seconds of their tests among the 30 slowest of
# the last suite run (2026-11-25 09:57, two pytest-xdist workers on 2 cores, a machine about 1.5x
# slower than the run before; setup included), summed per file (a file's tests all run on one
# worker; its shorter tests are not counted). A setup that builds tiny_model_dir (export's, serve's)
# includes the wait for it. They run first and the rest after them in their usual order, so that
# the run ends on short files: scripts/test.sh gives each worker the next file when it is nearly
# done (`--dist loadfile --no-loadscope-reorder`), and a long file handed out last would keep one
# worker busy while the other has nothing left. Reorder when the times change a lot
# (`--durations=30` prints them). The last five are the JAX pass's longest (its own run's times).
# One exception to the order: test_data_parallel.py comes third, not second. Handed out first and
# second, it ran beside test_end_to_end.py on the other worker, and each file ends with two worker
# processes exchanging gradients at every update (the wmt14 multiworker dry run, the workers
# fixture): at the same time, four processes on two cores, each waiting in its all-reduce for a
# peer that is not running. Those two phases took 1.5-1.7x their previous times in the 23:50 run
# (multiworker dry run 72 -> 125 s, workers setup 62 -> 91 s). Third, it goes to the worker that
# asks first, the one running test_end_to_end.py (it asks after that file's first test, the other
# worker after most of test_export.py's), and runs after it.
LONGEST_FIRST = (
    "test_end_to_end.py",          # 353 s: wmt14 multiworker 137, multi30k 130, wmt14 setup 87
    "test_export.py",              # 215 s: export setup 94, without t2t_lite 79, failed export 42
    "test_data_parallel.py",       # 318 s: 2-device setup 156, workers setup 98, 4-device setup 64
    "test_parsing.py",             # 159 s: the exporter and translator's decode defaults
    "test_t2t_commands.py",        # 158 s: the decoder's T2T n-best 132, registry help 26
    "test_trainer.py",             # 151 s: SIGKILL and rerun 90, kill inside a save 61
    "test_benchmarks.py",          # 144 s: bench_decode 58, its cache phases 51, bench_train 34
                                   # (2026-11-28: 100 s; the --model_dir tests, 172 s, are now
                                   # test_bench_model_dir.py, which collection order hands out
                                   # early among the rest: the two workers' summed test times
                                   # came out within 1%, docs/testing.md)
    "test_serve.py",               # 127 s: setup 78, warm-up 25, SIGTERM 24
    "test_t2t_trainer.py",         # 117 s: walkthrough 60, checkpoints every n seconds 57
    "test_training_outcomes.py",   # 114 s: the copy task (one layer since 12-06: the file 40 s alone)
    "test_keras_fit.py",           # 103 s: setup
    "test_decoder.py",             # 101 s: line count and order 60, bucketed batches 41
    "test_xla_cache.py",           # 71 s: the decoder processes
    "test_import_marian.py",       # 61 s
    "test_quiet_startup.py",       # 54 s
    "test_best_checkpoint.py",     # 28 s
    "test_ctranslate2_export.py", "test_bleu.py", "test_serve_browser.py",  # none among the 30
    # The JAX pass (its 30 slowest, summed per file): constraints 59 s, transformer 39, layers 36,
    # beam search 28, cache phases 26.
    "test_constraints.py", "test_transformer.py", "test_layers.py", "test_beam_search.py",
    "test_cache_phases.py",
)


def pytest_collection_modifyitems(config, items):  # before -m selects by the marker
  for item in items:
    file_name = item.path.name
    test_id = f"{file_name}::{item.name.split('[')[0]}"
    if file_name in SLOW_FILES or test_id in SLOW_TESTS:
      item.add_marker(pytest.mark.slow)


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_longest_first(items):
  """After pytest's own reordering (by fixture, within each file): the files of LONGEST_FIRST
  first, in its order, then the rest in theirs (a stable sort keeps each file's order)."""
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))


def pytest_terminal_summary(terminalreporter):
  """One line saying how many tests were skipped, for which reasons (a green run that skipped
  the tests needing real corpora should say so)."""
  reasons = {}
  for report in terminalreporter.stats.get("skipped", []):
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    reasons[reason] = reasons.get(reason, 0) + 1
  if reasons:
    listed = "; ".join(f"{count} x {reason}" for reason, count in
                       sorted(reasons.items(), key=lambda item: -item[1]))
    terminalreporter.write_line(f"skipped {sum(reasons.values())} tests: {listed}", yellow=True)


@pytest.fixture(scope="session")
def worker_envs():
  """`envs(n)`: the environments of n worker processes on 127.0.0.1 (free ports, TF_CONFIG)."""
  def envs(n, **extra):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
      s.bind(("127.0.0.1", 0))
    cluster = {"worker": [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]}
    for s in sockets:
      s.close()
    return [dict(os.environ, **extra, TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": index}})) for index in range(n)]
  return envs


@pytest.fixture(scope="session")
def shared_data():
  if not SHARED_DATA.is_dir():
    pytest.skip(f"real corpora not found at {SHARED_DATA} (see docs/data.md)")
  return SHARED_DATA


@pytest.fixture(scope="session")
def multi30k_folder(tmp_path_factory):
  """Multi30k's raw files (train, val, test_2016_flickr .en/.de): ../shared/data/multi30k, or
  made-up captions with the same names and the dev/test line counts when it is missing."""
  if (SHARED_DATA / "multi30k").is_dir():
    return SHARED_DATA / "multi30k"
  folder = tmp_path_factory.mktemp("made_up_multi30k")
  write_made_up_captions(folder, {**MULTI30K_FILES, "train": 2000})
  return folder


def built_once(tmp_path_factory, name, build):
  """A folder that `build(folder)` filled, once per test run: under pytest-xdist the workers share
  it (in the run's base folder; the first builds it under a lock, the others wait for it and
  reuse it), so a session fixture that trains is not trained on each worker. Read-only to tests."""
  if not os.environ.get("PYTEST_XDIST_WORKER"):
    folder = tmp_path_factory.mktemp(name)
    build(folder)
    return folder
  shared = tmp_path_factory.getbasetemp().parent   # the run's, above each worker's popen-gwN
  folder, done = shared / name, shared / f"{name}.done"
  with open(shared / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)                 # released when the file is closed
    if not done.exists():
      shutil.rmtree(folder, ignore_errors=True)      # what a failed build left
      folder.mkdir()
      build(folder)
      done.touch()
  return folder


@pytest.fixture(scope="session")
def multi30k_slice(multi30k_folder, tmp_path_factory):
  """A raw_data_dir with the first 2,000 / 100 / 100 Multi30k pairs (same file names)."""
  def build(folder):
    for prefix, count in (("train", 2000), ("val", 100), ("test_2016_flickr", 100)):
      for lang in ("en", "de"):
        lines = (multi30k_folder / f"{prefix}.{lang}").read_text(encoding="utf-8").split("\n")
        (folder / f"{prefix}.{lang}").write_text("\n".join(lines[:count]) + "\n", encoding="utf-8")
  return built_once(tmp_path_factory, "multi30k_slice", build)


TINY_TEST_HPARAMS = ("hidden_size=64,filter_size=128,num_heads=4,num_hidden_layers=2,batch_size=1024,"
                     "max_length=64,learning_rate_warmup_steps=50,eval_bleu_examples=0")


@pytest.fixture(scope="session")
def tiny_model_dir(multi30k_slice, tmp_path_factory):
  """A small EN-DE model trained for a few steps on the Multi30k slice: (model_dir, data_dir).

  Its translations are poor; tests use it to check plumbing that must hold for any weights.
  Trained once per run (`built_once`): tests read it, and copy it to change it.
  """
  def build(root):
    from t2t_lite.hparams import get_hparams
    from t2t_lite.problems import get_problem
    from t2t_lite.training import train_loop
    problem = get_problem("translate_ende_multi30k", raw_data_dir=str(multi30k_slice))
    train_loop.train_and_evaluate(problem, get_hparams("transformer_tiny", TINY_TEST_HPARAMS),
                                  str(root / "model"), str(root / "data"), train_steps=30,
                                  eval_steps=0, save_checkpoints_steps=10, log_every=10)
  root = built_once(tmp_path_factory, "tiny_model", build)
  return root / "model", root / "data"


@pytest.fixture(scope="session")
def short_lines(multi30k_slice, tmp_path_factory):
  """The 24 shortest of the slice's 100 test lines (at most 9 words, under 16 subwords): every
  search, the decoder's and each export's, runs in the narrowest width bucket only, so each
  compiles one program per batch shape instead of one per width, and an export or a server warm-up
  limited to 16 source subwords truncates none of them (tests/test_bench_model_dir.py,
  tests/test_bench_serve.py)."""
  lines = (multi30k_slice / "test_2016_flickr.en").read_text(encoding="utf-8").split("\n")[:100]
  path = tmp_path_factory.mktemp("short_lines") / "short.en"
  path.write_text("\n".join(sorted(lines, key=lambda line: len(line.split()))[:24]) + "\n",
                  encoding="utf-8")
  return path


# The decode hparams of `tiny_export`; tests/test_export.py and tests/test_serve.py compare it with
# the model directory decoded alike.
TINY_EXPORT_DECODE = "beam_size=2,extra_length=20"


@pytest.fixture(scope="session")
def tiny_export(tiny_model_dir, tmp_path_factory):
  """`tiny_model_dir` exported by t2t-lite-exporter with TINY_EXPORT_DECODE (the default source
  limit, so every width bucket) as version 7: the export folder, with only "7" in it. Exported once
  per run (`built_once`), for tests/test_export.py and tests/test_serve.py; read-only."""
  def build(folder):
    from t2t_lite.bin import exporter  # pylint: disable=import-outside-toplevel
    assert exporter.main([f"--output_dir={tiny_model_dir[0]}", f"--export_dir={folder}",
                          f"--decode_hparams={TINY_EXPORT_DECODE}", "--version=7"]) == 0
  return built_once(tmp_path_factory, "tiny_export", build)


# One layer at d 32 (its beam-21 search, traced by an export, costs less than the tiny model's),
# with T2T parsing_base's separate softmax weights.
TINY_PARSING_HPARAMS = (TINY_TEST_HPARAMS + ",max_length=512,hidden_size=32,filter_size=64,num_heads=2,"
                        "num_hidden_layers=1,shared_embedding_and_softmax_weights=false")


@pytest.fixture(scope="session")
def tiny_parsing_model_dir(shared_data, tmp_path_factory):
  """An untrained parsing model (parsing_english_ptb8k_tags on the PTB sample, its vocabulary
  built from it; TINY_PARSING_HPARAMS) in a model directory as the trainer writes it (record,
  vocabulary, checkpoint): (model_dir, problem). Its trees are poor, yet well-formed over the
  input (the problem's decoding constraint): what tests check of it holds for any weights, so
  nothing is trained (2 training steps added only the treebank pipeline and a step's trace).
  Written once per run (`built_once`), for tests/test_parsing.py and tests/test_serve_browser.py;
  read-only."""
  from t2t_lite import model_dir  # pylint: disable=import-outside-toplevel
  from t2t_lite.hparams import get_hparams  # pylint: disable=import-outside-toplevel
  from t2t_lite.problems import get_problem  # pylint: disable=import-outside-toplevel
  ptb = str(shared_data / "ptb_sample")
  problem = get_problem("parsing_english_ptb8k_tags", raw_data_dir=ptb)

  def build(root):
    from t2t_lite.training.train_loop import Trainer  # pylint: disable=import-outside-toplevel
    hparams = get_hparams("transformer_tiny", TINY_PARSING_HPARAMS)
    vocab = problem.get_vocab(str(root / "data"))
    model_dir.write_model_dir(str(root / "model"), hparams, problem.name, {"raw_data_dir": ptb},
                              vocab.vocab_size)
    model_dir.write_vocab(str(root / "model"), vocab)
    Trainer(hparams, vocab.vocab_size, str(root / "model")).save()
  return built_once(tmp_path_factory, "tiny_parsing_model", build) / "model", problem


@pytest.fixture(scope="session")
def tiny_decode_defaults(tiny_model_dir):
  """The decode hparams every command starts from for `tiny_model_dir`: its problem's defaults
  (translate_ende_multi30k: beam 4, alpha 1.2), which `--decode_hparams` then overrides."""
  from t2t_lite import model_dir  # pylint: disable=import-outside-toplevel
  return model_dir.model_decode_defaults(str(tiny_model_dir[0]))


@pytest.fixture
def train_clock(monkeypatch):
  """A fake clock for t2t_lite.training.train_loop: each update takes 0.25 s of it (4 updates/s).
  Returns the clock, [seconds]: a test adds to it for other work (an evaluation's time)."""
  import types  # pylint: disable=import-outside-toplevel
  from t2t_lite.training import train_loop  # pylint: disable=import-outside-toplevel
  now = [1000.0]
  real_step = train_loop.Trainer.train_step

  def timed_step(self, batch):
    now[0] += 0.25
    return real_step(self, batch)

  monkeypatch.setattr(train_loop, "time", types.SimpleNamespace(time=lambda: now[0]))
  monkeypatch.setattr(train_loop.Trainer, "train_step", timed_step)
  return now
