"""The weights' moving average under N replicas, in a process of its own (logical devices are
set before TensorFlow starts): `python tests/ema_checks.py N OUT` trains 3 updates with
weight_ema_decay on MirroredStrategy over N logical CPUs and writes OUT/ema-N.npz: the weights
before and after each update and every replica's copy of the average (tests/test_ema.py checks
them against a NumPy EMA)."""

import sys

import numpy as np
import tensorflow as tf

N, OUT = int(sys.argv[1]), sys.argv[2]
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * N)

from t2t_lite import model_dir  # noqa: E402
from t2t_lite.hparams import get_hparams  # noqa: E402
from t2t_lite.training import train_loop  # noqa: E402

MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0,learning_rate_warmup_steps=4,weight_ema_decay=0.7")


def main():
  strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(N)])
  trainer = train_loop.Trainer(get_hparams("transformer_tiny", MICRO), 32, f"{OUT}/run", strategy)
  names = sorted(trainer.ema)
  variables = model_dir.checkpointable(trainer.model)
  rng = np.random.default_rng(0)
  arrays = {f"w0/{n}": variables[n].numpy() for n in names}
  for update in range(1, 4):
    per_replica = [{"inputs": rng.integers(2, 30, (3, 7)).astype("int32"),
                    "targets": rng.integers(2, 30, (3, 9)).astype("int32")} for _ in range(N)]
    trainer.train_step(strategy.experimental_distribute_values_from_function(
        lambda ctx, b=per_replica: b[ctx.replica_id_in_sync_group]))
    for n in names:
      arrays[f"w{update}/{n}"] = variables[n].numpy()
  for n in names:
    for r, value in enumerate(strategy.experimental_local_results(trainer.ema[n])):
      arrays[f"ema{r}/{n}"] = value.numpy()
  np.savez(f"{OUT}/ema-{N}.npz", **arrays)


if __name__ == "__main__":
  main()
