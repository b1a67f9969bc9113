"""Shared test setup: quiet TensorFlow, the data folder, and the backend_independent marker.

Tests marked `backend_independent` use only keras.ops/numpy and run on both the TensorFlow and
the JAX backends (scripts/test.sh runs them twice).
"""

import json
import os
import pathlib
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_configure(config):
  config.addinivalue_line("markers", "backend_independent: runs on the TensorFlow and JAX backends")


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
    pytest.skip(f"real corpora not found at {SHARED_DATA} (see README, 'Data')")
  return SHARED_DATA


@pytest.fixture(scope="session")
def multi30k_slice(shared_data, tmp_path_factory):
  """A raw_data_dir with the first 2,000 / 100 / 100 Multi30k pairs (same file names)."""
  folder = tmp_path_factory.mktemp("multi30k_slice")
  for prefix, count in (("train", 2000), ("val", 100), ("test_2016_flickr", 100)):
    for lang in ("en", "de"):
      lines = (shared_data / "multi30k" / f"{prefix}.{lang}").read_text(encoding="utf-8").split("\n")
      (folder / f"{prefix}.{lang}").write_text("\n".join(lines[:count]) + "\n", encoding="utf-8")
  return folder


TINY_TEST_HPARAMS = ("hidden_size=64,filter_size=128,num_heads=4,num_hidden_layers=2,batch_size=1024,"
                     "max_length=64,learning_rate_warmup_steps=50,eval_bleu_examples=0")


@pytest.fixture(scope="session")
def tiny_model_dir(multi30k_slice, tmp_path_factory):
  """A small EN-DE model trained for a few steps on the Multi30k slice: (model_dir, data_dir).

  Its translations are poor; tests use it to check plumbing that must hold for any weights.
  """
  from t2t_lite.hparams import get_hparams
  from t2t_lite.problems import get_problem
  from t2t_lite.training import train_loop
  root = tmp_path_factory.mktemp("tiny_model")
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(multi30k_slice))
  train_loop.train_and_evaluate(problem, get_hparams("transformer_tiny", TINY_TEST_HPARAMS),
                                str(root / "model"), str(root / "data"), train_steps=30,
                                eval_steps=0, save_checkpoints_steps=10, log_every=10)
  return root / "model", root / "data"
