"""Data-parallel training is right on several devices, not only on one.

MirroredStrategy over 2 and 4 logical CPU devices, and MultiWorkerMirroredStrategy with two
worker processes on 127.0.0.1. What runs in those processes is tests/data_parallel_checks.py;
these tests assert on what it measured.
"""

import json
import os
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.training import best, distribute
from test_ema import numpy_ema

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_parallel_checks.py")


def _output(result):
  return result.stdout[-4000:] + result.stderr[-4000:]


@pytest.fixture(scope="module")
def run_mirrored(tmp_path_factory):
  """`run(n)`: what the checks measured with MirroredStrategy over n logical CPUs (a process
  each, run once), and the folder of its runs."""
  done = {}

  def run(n):
    if n not in done:
      out = tmp_path_factory.mktemp(f"mirrored{n}")
      result = subprocess.run([sys.executable, CHECKS, "mirrored", str(n), str(out)],
                              capture_output=True, text=True)  # no deadline: a slow machine is no failure
      assert result.returncode == 0, _output(result)
      with open(out / f"mirrored-{n}.json", encoding="utf-8") as f:
        done[n] = json.load(f), out / str(n)
    return done[n]
  return run


@pytest.fixture(params=[2, 4], ids=["2_devices", "4_devices"])
def mirrored(request, run_mirrored):
  return run_mirrored(request.param)


def test_make_strategy_reads_the_cluster_and_the_gpus(monkeypatch):
  """Which strategy `make_strategy` picks (the strategies themselves stand-ins: nothing is
  built): several tasks in TF_CONFIG, a chief and one worker included, are multi-worker; one
  task or none, all visible GPUs mirrored, or the first `worker_gpu` of them; 1 GPU, or none,
  one device; more GPUs asked for than visible, an error."""
  monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", lambda: "multi-worker")
  mirrored = []
  monkeypatch.setattr(tf.distribute, "MirroredStrategy",
                      lambda devices: mirrored.append(devices) or "mirrored")
  gpus = [SimpleNamespace(name=f"/job:localhost/replica:0/task:0/device:GPU:{i}") for i in range(3)]
  monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: gpus if kind == "GPU" else [])

  def cluster(**tasks):
    return json.dumps({"cluster": {kind: [f"host{i}:2222" for i in range(n)] for kind, n in tasks.items()},
                       "task": {"type": "worker", "index": 0}})
  for tf_config, expected in ((cluster(worker=2), "multi-worker"),
                              (cluster(chief=1, worker=1), "multi-worker"),
                              (cluster(worker=1), "mirrored"), ("", "mirrored")):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    assert distribute.make_strategy() == expected, tf_config
  assert mirrored[-1] == [g.name for g in gpus]
  monkeypatch.delenv("TF_CONFIG")
  assert distribute.make_strategy(worker_gpu=2) == "mirrored" and mirrored[-1] == [g.name for g in gpus[:2]]
  assert distribute.make_strategy(worker_gpu=1) is tf.distribute.get_strategy()
  with pytest.raises(ValueError, match="--worker_gpu=4 but only 3 GPU"):
    distribute.make_strategy(worker_gpu=4)
  monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [])
  assert distribute.make_strategy() is tf.distribute.get_strategy()


def test_is_chief_is_one_task_of_the_cluster():
  """The chief owns the output directory: the "chief" task where the cluster has one, else
  worker 0; one process (no resolver, or none with a task type) is its own chief. Worker 0 of
  a cluster with a chief is not (two chiefs would write the same checkpoints)."""
  def strategy(task_type, task_id, **cluster):
    spec = {kind: [f"host{i}:2222" for i in range(n)] for kind, n in cluster.items()}
    return SimpleNamespace(cluster_resolver=SimpleNamespace(
        task_type=task_type, task_id=task_id, cluster_spec=lambda: SimpleNamespace(as_dict=lambda: spec)))
  assert distribute.is_chief(tf.distribute.get_strategy())
  assert distribute.is_chief(strategy(None, None))
  assert distribute.is_chief(strategy("worker", 0, worker=2))
  assert distribute.is_chief(strategy("chief", 0, chief=1, worker=2))
  assert not distribute.is_chief(strategy("worker", 0, chief=1, worker=2))
  assert not distribute.is_chief(strategy("worker", 1, worker=2))
  assert not distribute.is_chief(strategy("evaluator", 0, worker=2, evaluator=1))


def _assert_masks_are_per_replica(masks, references):
  masks, references = np.array(masks), np.array(references)
  for i in range(len(masks)):
    np.testing.assert_array_equal(masks[i], references[i])  # the hash with replica i folded in
    for j in range(i):
      assert not np.array_equal(masks[i], masks[j]), (i, j)
      # Independent draws at keep rate 0.5 agree on about half of the 240 elements.
      assert 0.35 < np.mean(masks[i] == masks[j]) < 0.65, (i, j)


def test_each_replica_draws_its_own_dropout_mask_and_a_rerun_the_same(mirrored):
  results, _ = mirrored
  assert len(results["masks"]) == results["replicas"]
  _assert_masks_are_per_replica(results["masks"], results["reference"])
  assert results["rerun_same"]


def _assert_symbols_dropped_per_replica(dropped, replicas):
  """dropped [replica][6][40]: SymbolDropout(0.5)'s PAD positions on each replica."""
  dropped = np.array(dropped, bool)
  assert dropped.shape == (replicas, 6, 40)
  assert 0.4 < dropped.mean() < 0.6
  for i in range(replicas):
    for j in range(i):
      assert 0.35 < np.mean(dropped[i] == dropped[j]) < 0.65, (i, j)


def test_each_replica_drops_its_own_symbols(mirrored):
  results, _ = mirrored
  _assert_symbols_dropped_per_replica(results["symbol_masks"], results["replicas"])


def _assert_trainer_masks_differ(masks, replicas):
  """masks [replica][step]: the model's embedding dropout (rate 0.5) in the Trainer's own
  training step, every replica given the same batch: each replica, and each step, draws its own."""
  masks = np.array(masks, bool)
  assert masks.shape == (replicas, 2, 3, 8, 32)
  assert 0.4 < masks.mean() < 0.6
  for replica in range(replicas):
    assert 0.35 < np.mean(masks[replica, 0] == masks[replica, 1]) < 0.65, replica  # a new step
  for step in range(2):
    for i in range(replicas):
      for j in range(i):
        assert 0.35 < np.mean(masks[i, step] == masks[j, step]) < 0.65, (step, i, j)


def test_trainers_step_draws_a_mask_per_replica_and_per_step(run_mirrored):
  """On 2 devices (the 4-device process checks the layers' masks, which the step's come from;
  the workers' test checks the step across processes)."""
  results, _ = run_mirrored(2)
  _assert_trainer_masks_differ(results["trainer_masks"], results["replicas"])


def test_each_replica_takes_whole_batches_of_the_training_input(run_mirrored):
  """train_and_evaluate on 2 devices, its input batch k holding 4 (k + 1) target tokens: each
  update holds 2 whole batches, one per replica (batch_size is per replica): 4 + 8, then 12 + 16
  tokens, not one batch split across the replicas (4, 8) nor one batch twice (8, 16)."""
  assert run_mirrored(2)[0]["update_tokens"] == [12.0, 28.0]


def _assert_clipped_accumulated_update_equals_one_device(clipping):
  assert len({n for micro in clipping["tokens"] for n in micro}) > 4  # unequal token counts
  assert clipping["steps"] == [2, 2]
  np.testing.assert_allclose(clipping["losses"]["many"], clipping["losses"]["one"], rtol=1e-5)
  # Measured: 1e-6 to 2e-5 (float rounding); the previous trainer's per-replica clipping
  # ended 0.36 apart (and its accumulation did not run on several replicas at all).
  assert clipping["apart_over_moved"] < 1e-3
  assert clipping["unclipped_apart_over_moved"] > 1e-2


def test_clipped_accumulated_update_on_replicas_equals_one_device(run_mirrored):
  """Clipping and weight_decay active (the unclipped run ends elsewhere), 2 micro-batches per
  update with different token counts on every replica: 4 replicas end where one device does.
  (2 replicas: the same accumulation compiled with XLA, the test below.)"""
  _assert_clipped_accumulated_update_equals_one_device(run_mirrored(4)[0]["clipping"]["accumulated"])


def test_xla_compile_under_mirrored_strategy_equals_one_device(run_mirrored):
  """xla_compile=true compiles each replica's forward and backward pass inside strategy.run
  (measured on 2 devices: an XLA compilation per replica): the step traced and called a
  function marked for XLA compilation, which the run without xla_compile (the 4-device
  process's) has none of. 2 replicas accumulating 2 micro-batches so end where one device does."""
  assert run_mirrored(2)[0]["clipping"]["xla"]["xla_compiled_functions"] >= 1
  assert run_mirrored(4)[0]["clipping"]["accumulated"]["xla_compiled_functions"] == 0
  _assert_clipped_accumulated_update_equals_one_device(run_mirrored(2)[0]["clipping"]["xla"])


def test_replicas_without_accumulation_equal_one_device(run_mirrored):
  """No accumulation, clipping active: each of 2 replicas given its share of the update's whole
  batch (rows with different amounts of padding) ends where one device on the whole batch does;
  the global token count, not each replica's, weighs the loss."""
  clipping = run_mirrored(2)[0]["clipping"]["no_accumulation"]
  _assert_clipped_accumulated_update_equals_one_device(clipping)


def test_rdrop_on_replicas_accumulating_equals_one_device(run_mirrored):
  """R-Drop on 2 replicas accumulating 2 micro-batches, each replica doubling its own rows: with
  no dropout both copies agree (the KL term is 0), so the update is plain training's and ends
  where one device without R-Drop does, clipping active; the loss each update reports too. Each
  micro-batch's call reports the data's target tokens over both replicas, counted once (the
  trainer's tokens/s), though the model saw each row twice."""
  rdrop = run_mirrored(2)[0]["clipping"]["rdrop"]
  _assert_clipped_accumulated_update_equals_one_device(rdrop)
  assert rdrop["reported_tokens"] == [float(sum(micro)) for micro in rdrop["tokens"]]


def test_ema_equals_numpy_on_every_replica_of_2_devices(run_mirrored):
  """The weights' moving average (weight_ema_decay=0.7), each of 2 replicas given its own rows
  (the clipping check's run without accumulation, 2 updates): every replica's copy equals
  tests/test_ema.py's NumPy EMA of the weights as built and after each update."""
  _, out = run_mirrored(2)
  arrays = np.load(out.parent / "ema-2.npz")
  names = sorted({k.split("/", 1)[1] for k in arrays.files})
  weights = [{n: arrays[f"w{k}/{n}"] for n in names} for k in range(3)]
  assert not [k for k in arrays.files if k.startswith("w3/")]
  expected = numpy_ema(weights, 0.7)  # data_parallel_checks.py's EMA_DECAY
  for replica in (0, 1):
    for name in names:
      np.testing.assert_allclose(arrays[f"ema{replica}/{name}"], expected[name], rtol=1e-5,
                                 atol=1e-7, err_msg=f"replica {replica}: {name}")
  assert not np.allclose(weights[2]["shared_embedding/embeddings"], weights[0]["shared_embedding/embeddings"])
  assert not np.allclose(expected["shared_embedding/embeddings"], weights[2]["shared_embedding/embeddings"])


def _model_tensors(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return [reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith("model/") and name.endswith("VARIABLE_VALUE")]


def _assert_stopped_before_saving(error, folder, step):
  """Raised before `step`; the last checkpoint is the one before it and holds finite weights.
  (Poisoned from a checkpoint step: the previous trainer saved the NaN weights there.)"""
  assert error and f"before step {step}" in error, error
  saved = step - 1 - (step - 1) % 2  # checkpoints every 2 updates
  assert tf.train.latest_checkpoint(str(folder)).endswith(f"ckpt-{saved}")
  assert not [n for n in os.listdir(folder) if n.startswith("ckpt-") and
              int(n.split("-")[1].split(".")[0]) > saved]
  assert all(np.isfinite(t).all() for t in _model_tensors(tf.train.latest_checkpoint(str(folder))))


def test_nonfinite_gradient_on_one_replica_stops_before_saving(run_mirrored):
  """Replica 1's gradient (of 2) turns +inf from its 4th call; the loss stays finite. (A NaN:
  the workers' test below; each poisoned run costs a trace of its own.)"""
  results, out = run_mirrored(2)
  _assert_stopped_before_saving(results["poisoned"]["raised"], out / "poisoned", 4)


@pytest.fixture(scope="module")
def workers(tmp_path_factory, worker_envs):
  out = tmp_path_factory.mktemp("workers")
  logs = [out / f"worker-{index}.log" for index in range(2)]
  with open(logs[0], "w") as log_0, open(logs[1], "w") as log_1:
    procs = [subprocess.Popen([sys.executable, CHECKS, "worker", str(index), str(out)], env=env,
                              stdout=log, stderr=subprocess.STDOUT)
             for index, (env, log) in enumerate(zip(worker_envs(2), (log_0, log_1)))]
    # No deadline: wait for both; a worker that fails ends the other (which would wait for it).
    try:
      while any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs):
          for p in procs:
            p.kill()
        time.sleep(0.2)
    finally:
      for p in procs:
        if p.poll() is None:
          p.kill()
  outputs = [log.read_text() for log in logs]
  assert all(p.returncode == 0 for p in procs), "\n\n".join(o[-4000:] for o in outputs)
  results = []
  for index in range(2):
    with open(out / f"worker-{index}.json", encoding="utf-8") as f:
      results.append(json.load(f))
  return results, out


def test_workers_end_with_identical_weights_equal_to_the_chiefs_checkpoint(workers):
  results, out = workers
  assert [r["replicas"] for r in results] == [2, 2] and [r["step"] for r in results] == [4, 4]
  weights = [list(np.load(out / f"weights-{i}.npz").values()) for i in range(2)]
  _, chief, path = model_dir.restore_model(str(out / "run"))
  assert path.endswith("ckpt-4")
  assert len(weights[0]) == len(weights[1]) == len(chief.get_weights())
  for mine, theirs, saved in zip(*weights, chief.get_weights()):
    np.testing.assert_array_equal(mine, theirs)
    np.testing.assert_array_equal(mine, saved)
  # Each worker's replica draws its own mask: a fresh layer, and the Trainer's own step.
  _assert_masks_are_per_replica([r["masks"][0] for r in results], [r["reference"][0] for r in results])
  _assert_trainer_masks_differ([r["trainer_masks"][0] for r in results], 2)
  _assert_symbols_dropped_per_replica([r["symbol_masks"][0] for r in results], 2)


def _checkpoint_steps(folder):
  return sorted(int(p.name[5:-6]) for p in folder.glob("ckpt-*.index"))


def test_workers_follow_the_chiefs_clock_and_early_stopping_and_only_the_chief_keeps_best(workers):
  """Every decision is the chief's, shared: worker 1's clock runs 10x as fast as the chief's, yet it
  saves at the chief's updates (2, and the last) and does not end at its own time budget (update
  1); only the chief evaluates (a dev BLEU only it computes), and both stop early at update 4 with
  its patience. best/ is the chief's alone (the other worker writes none), update 3's
  evaluation, between checkpoints, saved alone."""
  results, out = workers
  assert [(r["step"], r["stopped_early"]) for r in results] == [(4, 4), (4, 4)]
  assert _checkpoint_steps(out / "run") == _checkpoint_steps(out / "run" / ".worker_1") == [2, 4]
  logs = [(out / f"worker-{index}.log").read_text() for index in range(2)]
  assert "eval at step 3:" in logs[0] and "eval at step 4:" in logs[0] and "eval at" not in logs[1]
  assert "early stopping at step 4 (the chief's decision)" in logs[1]
  assert [re.findall(r"time budget of 35s used at step (\d+)", log) for log in logs] == [["4"], ["4"]]
  assert (results[0]["best_step"], results[0]["best_bleu"]) == (3, 10.0)
  assert results[1]["best_step"] is None   # the other worker keeps no best
  record = best.read_best(str(out / "run"))
  assert (record["metric"], record["step"], record["value"]) == ("bleu", 3, 10.0)
  assert record["patience_from"]["step"] == 3
  kept = sorted(str(path.relative_to(out / "run")) for path in (out / "run").rglob("*best*"))
  assert kept == [".best-3", ".best-3/best.json", "best"], kept   # nothing in .worker_1
  assert model_dir.restore_model(str(out / "run" / "best"))[2].endswith("ckpt-3")


def test_nonfinite_gradient_on_one_worker_stops_every_worker_before_saving(workers):
  """Worker 1's gradient turns NaN from its 4th call: both workers stop; neither saves."""
  results, out = workers
  for index, result in enumerate(results):
    folder = out / "poisoned" if index == 0 else out / "poisoned" / f".worker_{index}"
    _assert_stopped_before_saving(result["poisoned"]["raised"], folder, 4)
