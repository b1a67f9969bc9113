"""The training path this machine runs fastest: what hparams `mixed_precision=auto` and
`xla_compile=auto` become, decided here and nowhere else.

    >>> hparams, path = resolve(get_hparams("multi30k"))
    >>> str(path)   # on an AVX2 CPU without AVX512_BF16/AMX
    'float32, XLA forward/backward (AVX2 CPU without AVX512_BF16/AMX)'

What was measured (docs/performance.md, docs/training.md) and so what `auto` picks:
- An x86 CPU with AVX512_BF16 or AMX (and oneDNN on, t2t_lite's default): `mixed_bfloat16` in a
  plain graph. oneDNN runs bfloat16 matmuls at about twice the float32 rate there, the graph
  step was the fastest of every configuration, and `transformer_multi30k` followed float32's dev
  loss within 0.2% over 300 steps. XLA's CPU dots do not use bfloat16's speed, so with
  `xla_compile=true` set, `auto` precision is float32.
- Any other CPU with AVX2: float32 with `xla_compile`, the faster float32 path for tiny on the
  AVX2 EPYC and on the AVX-512 CPU. What XLA compiles then is each replica's forward pass, loss
  and backward pass, one program per micro-batch shape (`Trainer.gradients`); the all-reduce,
  accumulation, clipping, the NaN check and the moving average stay in the step's graph, and
  Adam's update is its own small XLA kernel per variable, with or without `xla_compile`
  (`t2t_lite.training.adam`). bfloat16 is only emulated there (slower than float32).
- No AVX2, or flags that cannot be read (not Linux): T2T's float32 graph; nothing measured.
- A visible GPU: T2T's float32 without XLA (nothing measured on GPUs here); under TPUStrategy:
  float32 with XLA, which TPUs need (with static_batch_shapes=true, `distribute` says so).

An explicit value is never changed; `auto` in one of the two fields is decided knowing the other.
Each worker of a multi-worker run decides from its own machine: the path changes how a replica
computes its gradients, not the variables, the all-reduce or the update, so workers on
different CPUs still hold the same weights.
"""

import dataclasses
import logging
import os

import tensorflow as tf

from t2t_lite import cpu
from t2t_lite.hparams import AUTO, HParams

logger = logging.getLogger(__name__)

BFLOAT16_FLAGS = {"avx512_bf16": "AVX512_BF16", "amx_bf16": "AMX"}  # /proc/cpuinfo -> name
TPU_STRATEGIES = (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy)


@dataclasses.dataclass(frozen=True)
class Machine:
  """What the choice depends on: an accelerator ("GPU", "TPU" or None), the CPU's flags (None:
  unknown) and whether oneDNN is on (TF_ENABLE_ONEDNN_OPTS)."""
  accelerator: str | None = None
  flags: frozenset[str] | None = None
  onednn: bool = True

  @classmethod
  def from_cpuinfo(cls, cpuinfo: str, accelerator: str | None = None, onednn: bool = True):
    """From a /proc/cpuinfo text (its first processor's flags, `t2t_lite.cpu`)."""
    return cls(accelerator, cpu.flags(cpuinfo), onednn)

  @property
  def bfloat16(self) -> list[str]:
    """The names of the CPU's native bfloat16 matmul features (empty: none)."""
    return [name for flag, name in BFLOAT16_FLAGS.items() if flag in (self.flags or ())]

  def describe(self) -> str:
    """The CPU as the choice sees it, e.g. "AVX2 CPU without AVX512_BF16/AMX"."""
    if self.flags is None:
      return "CPU flags unknown"
    if self.bfloat16:
      return "CPU with " + " and ".join(self.bfloat16) + (
          "" if self.onednn else " but oneDNN off (TF_ENABLE_ONEDNN_OPTS=0)")
    if "avx512f" in self.flags:
      return "AVX-512 CPU without AVX512_BF16/AMX"
    return "AVX2 CPU without AVX512_BF16/AMX" if "avx2" in self.flags else "CPU without AVX2"


@dataclasses.dataclass(frozen=True)
class TrainingPath:
  """How a run trains: its precision, whether XLA compiles the step, and why."""
  mixed_precision: str
  xla_compile: bool
  reason: str

  @property
  def summary(self) -> str:
    """E.g. "float32, XLA forward/backward" (`xla_compile`) or "mixed_bfloat16, graph"."""
    return f"{self.mixed_precision}, {'XLA forward/backward' if self.xla_compile else 'graph'}"

  def __str__(self):
    return f"{self.summary} ({self.reason})"

  def record(self) -> dict:
    """What the model directory's hparams.json keeps as `training_path`."""
    return {"mixed_precision": self.mixed_precision, "xla_compile": self.xla_compile,
            "reason": self.reason, "summary": self.summary}


def choose(machine: Machine, mixed_precision=AUTO, xla_compile=AUTO) -> TrainingPath:
  """The path for `machine`: each of `mixed_precision` and `xla_compile` that is AUTO is
  decided (knowing the other), the other kept (see the module's doc for why)."""
  if machine.accelerator is not None:
    precision = "float32" if mixed_precision == AUTO else mixed_precision
    xla = machine.accelerator == "TPU" if xla_compile == AUTO else xla_compile
    why = ("TPU: every step compiled with XLA" if machine.accelerator == "TPU"
           else "GPU: T2T's float32 without XLA, nothing measured on GPUs here")
  else:
    x86 = machine.flags is not None and "avx2" in machine.flags
    bfloat16 = bool(machine.bfloat16) and machine.onednn
    precision = mixed_precision
    if precision == AUTO:  # XLA's CPU dots gain nothing from bfloat16: float32 under XLA
      precision = "mixed_bfloat16" if bfloat16 and xla_compile is not True else "float32"
    xla = xla_compile if xla_compile != AUTO else (x86 and precision == "float32")
    why = machine.describe()
  explicit = [name for name, value in (("mixed_precision", mixed_precision),
                                       ("xla_compile", xla_compile)) if value != AUTO]
  if len(explicit) == 2:
    why = "as set in hparams"
  elif explicit:
    why += f"; {explicit[0]} as set in hparams"
  return TrainingPath(precision, xla, why)


def this_machine(strategy: tf.distribute.Strategy | None = None) -> Machine:
  """This process's machine: TPU under a TPUStrategy, GPU when one is visible (TensorFlow
  places a single-device run there too), else the CPU's flags from /proc/cpuinfo."""
  accelerator = None
  if isinstance(strategy, TPU_STRATEGIES):
    accelerator = "TPU"
  elif tf.config.list_physical_devices("GPU"):  # physical: leaves logical devices configurable
    accelerator = "GPU"
  onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")
  return Machine.from_cpuinfo(cpu.read(), accelerator, onednn)


def resolve(hparams: HParams, strategy: tf.distribute.Strategy | None = None,
            machine: Machine | None = None) -> tuple[HParams, TrainingPath]:
  """(`hparams` with AUTO decided, the path they train on). Without AUTO, `hparams` itself and
  a path "as set in hparams"; the machine is looked at only when something is AUTO."""
  if AUTO not in (hparams.mixed_precision, hparams.xla_compile):
    return hparams, TrainingPath(hparams.mixed_precision, hparams.xla_compile, "as set in hparams")
  path = choose(machine or this_machine(strategy), hparams.mixed_precision, hparams.xla_compile)
  logger.info("training path: %s", path)
  return hparams.replace(mixed_precision=path.mixed_precision, xla_compile=path.xla_compile), path
