"""The training path chosen from the machine (`t2t_lite.fast_path`): hparams "auto" against
/proc/cpuinfo texts of real CPU kinds, an accelerator, oneDNN off; explicit values kept; the
trainer resolving "auto" at start-up, logging it and recording it in hparams.json."""

import json
import os

import keras
import pytest
import tensorflow as tf

from t2t_lite import cpu, fast_path, model_dir
from t2t_lite.hparams import AUTO, get_hparams
from t2t_lite.problems import get_problem
from t2t_lite.training import distribute, train_loop

MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0")


def cpuinfo(model, flags, processors=2):
  """A /proc/cpuinfo text: `processors` blocks as Linux writes them on x86."""
  return "\n".join(f"processor\t: {i}\nvendor_id\t: x\nmodel name\t: {model}\n"
                   f"flags\t\t: {flags}\nbogomips\t: 4890.82\n" for i in range(processors))


BASE = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
        "sse2 ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology cpuid pni "
        "pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand "
        "hypervisor lahf_lm abm 3dnowprefetch fsgsbase bmi1 avx2 smep bmi2 erms invpcid rdseed adx "
        "smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves")
AVX512 = "avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512vbmi avx512_vnni"
CPUS = {  # name: (cpuinfo, mixed_precision, xla_compile, reason)
    "AMD EPYC, AVX2 only (this project's machine)": (
        cpuinfo("AMD EPYC", BASE + " clzero wbnoinvd arat umip pku ospke vaes vpclmulqdq rdpid fsrm"),
        "float32", True, "AVX2 CPU without AVX512_BF16/AMX"),
    "Cooper Lake, AVX-512 with AVX512_BF16": (
        cpuinfo("Intel Xeon Platinum 8380H", f"{BASE} {AVX512} avx512_bf16"),
        "mixed_bfloat16", False, "CPU with AVX512_BF16"),
    "Sapphire Rapids, AMX": (
        cpuinfo("Intel Xeon Platinum 8480+", f"{BASE} {AVX512} avx512_bf16 amx_bf16 amx_tile amx_int8"),
        "mixed_bfloat16", False, "CPU with AVX512_BF16 and AMX"),
    "AMX without avx512_bf16 listed (a hypervisor may hide flags)": (
        cpuinfo("x", f"{BASE} {AVX512} amx_bf16 amx_tile"), "mixed_bfloat16", False, "CPU with AMX"),
    "Skylake-SP, AVX-512 without bfloat16": (
        cpuinfo("Intel Xeon Gold 6148", f"{BASE} {AVX512}"), "float32", True,
        "AVX-512 CPU without AVX512_BF16/AMX"),
    "Sandy Bridge, no AVX2": (cpuinfo("Intel Xeon E5-2670", "fpu sse sse2 ssse3 sse4_1 sse4_2 avx"),
                              "float32", False, "CPU without AVX2"),
    "Graviton 3 (Arm, bf16 but no x86 flags)": (
        "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 "
        "atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve "
        "asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng\n",
        "float32", False, "CPU without AVX2"),
    "no flags line (unreadable /proc/cpuinfo)": ("", "float32", False, "CPU flags unknown"),
}


@pytest.mark.parametrize("name", sorted(CPUS))
def test_auto_picks_the_measured_path_for_each_cpu_kind(name):
  text, precision, xla, reason = CPUS[name]
  path = fast_path.choose(fast_path.Machine.from_cpuinfo(text))
  assert (path.mixed_precision, path.xla_compile, path.reason) == (precision, xla, reason)
  assert str(path) == f"{precision}, {'XLA forward/backward' if xla else 'graph'} ({reason})"


def test_accelerators_and_onednn_off_override_the_cpu():
  bf16 = CPUS["Sapphire Rapids, AMX"][0]
  gpu = fast_path.choose(fast_path.Machine.from_cpuinfo(bf16, accelerator="GPU"))
  assert (gpu.mixed_precision, gpu.xla_compile) == ("float32", False)
  assert gpu.reason.startswith("GPU: T2T's float32 without XLA")
  tpu = fast_path.choose(fast_path.Machine.from_cpuinfo(bf16, accelerator="TPU"))
  assert (tpu.mixed_precision, tpu.xla_compile) == ("float32", True)
  # Without oneDNN, bfloat16 matmuls are not the fast ones: float32 under XLA.
  off = fast_path.choose(fast_path.Machine.from_cpuinfo(bf16, onednn=False))
  assert (off.mixed_precision, off.xla_compile) == ("float32", True)
  assert "oneDNN off (TF_ENABLE_ONEDNN_OPTS=0)" in off.reason


def test_explicit_values_are_kept_and_auto_decides_knowing_them():
  bf16 = fast_path.Machine.from_cpuinfo(CPUS["Cooper Lake, AVX-512 with AVX512_BF16"][0])
  avx2 = fast_path.Machine.from_cpuinfo(CPUS["AMD EPYC, AVX2 only (this project's machine)"][0])
  for hparams in (get_hparams("transformer_tiny"), get_hparams("tiny", "mixed_precision=mixed_bfloat16"),
                  get_hparams("tiny", "mixed_precision=mixed_float16,xla_compile=true")):
    for machine in (bf16, avx2):
      resolved, path = fast_path.resolve(hparams, machine=machine)
      assert resolved is hparams and path.reason == "as set in hparams"
      assert (path.mixed_precision, path.xla_compile) == (hparams.mixed_precision, hparams.xla_compile)
  # XLA asked for: bfloat16 would gain nothing under it, so float32.
  path = fast_path.choose(bf16, AUTO, True)
  assert (path.mixed_precision, path.xla_compile) == ("float32", True)
  assert path.reason == "CPU with AVX512_BF16; xla_compile as set in hparams"
  path = fast_path.choose(bf16, "float32", AUTO)  # float32 on any AVX2 CPU: XLA
  assert (path.mixed_precision, path.xla_compile) == ("float32", True)
  path = fast_path.choose(avx2, "mixed_bfloat16", AUTO)
  assert (path.mixed_precision, path.xla_compile) == ("mixed_bfloat16", False)
  assert path.reason == "AVX2 CPU without AVX512_BF16/AMX; mixed_precision as set in hparams"
  resolved, _ = fast_path.resolve(get_hparams("tiny", "xla_compile=auto"), machine=bf16)
  assert (resolved.mixed_precision, resolved.xla_compile) == ("float32", True)


def test_one_explicit_value_is_kept_on_an_accelerator_and_on_a_bfloat16_cpu():
  """`choose` with one field AUTO (resolve never reaches `choose` with both explicit): on a GPU
  or a TPU the explicit one is kept whatever the accelerator would pick, and only the AUTO one
  follows the accelerator; on a bfloat16 CPU with xla_compile=false set, AUTO precision is the
  graph's bfloat16 (only XLA makes it float32)."""
  bf16 = CPUS["Sapphire Rapids, AMX"][0]
  gpu = fast_path.Machine.from_cpuinfo(bf16, accelerator="GPU")
  tpu = fast_path.Machine.from_cpuinfo(bf16, accelerator="TPU")
  for machine, precision, xla, expected in (
      (gpu, "mixed_float16", AUTO, ("mixed_float16", False)),
      (gpu, AUTO, True, ("float32", True)),
      (tpu, "mixed_bfloat16", AUTO, ("mixed_bfloat16", True)),
      (tpu, AUTO, False, ("float32", False))):
    path = fast_path.choose(machine, precision, xla)
    assert (path.mixed_precision, path.xla_compile) == expected, (machine.accelerator, precision, xla)
    field = "mixed_precision" if precision != AUTO else "xla_compile"
    assert path.reason.endswith(f"; {field} as set in hparams"), path.reason
  path = fast_path.choose(fast_path.Machine.from_cpuinfo(bf16), AUTO, False)
  assert (path.mixed_precision, path.xla_compile) == ("mixed_bfloat16", False)
  assert path.reason == "CPU with AVX512_BF16 and AMX; xla_compile as set in hparams"


def test_this_machine_reads_cpuinfo_gpus_and_onednn(monkeypatch, tmp_path):
  path = tmp_path / "cpuinfo"
  path.write_text(CPUS["Sapphire Rapids, AMX"][0])
  monkeypatch.setattr(cpu, "CPUINFO", str(path))
  monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
  monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
  machine = fast_path.this_machine()
  assert machine == fast_path.Machine(None, machine.flags, True) and "amx_bf16" in machine.flags
  monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "False")
  assert fast_path.this_machine().onednn is False
  tpu = object.__new__(tf.distribute.TPUStrategy)  # only its type is looked at
  assert fast_path.this_machine(tpu).accelerator == "TPU"
  monkeypatch.setattr(tf.config, "list_physical_devices",
                      lambda kind=None: ["GPU:0"] if kind == "GPU" else [])
  assert fast_path.this_machine().accelerator == "GPU"
  path.unlink()
  assert fast_path.this_machine().flags is None


def test_tpu_rule_holds_after_resolution():
  """Under TPUStrategy "auto" is XLA, which the TPU rule accepts with static shapes only."""
  tpu = object.__new__(tf.distribute.TPUStrategy)  # only its type is looked at
  distribute.check_supported(tpu, get_hparams("tiny", "xla_compile=auto,static_batch_shapes=true"))
  hparams, path = fast_path.resolve(get_hparams("tiny", "xla_compile=auto,mixed_precision=auto"), tpu)
  assert (hparams.xla_compile, hparams.mixed_precision, path.reason) == (
      True, "float32", "TPU: every step compiled with XLA")
  with pytest.raises(ValueError, match="xla_compile=true,static_batch_shapes=true"):
    distribute.check_supported(tpu, get_hparams("tiny", "xla_compile=auto"))
  with pytest.raises(ValueError, match="xla_compile=true,static_batch_shapes=true"):
    distribute.check_supported(tpu, get_hparams("tiny", "xla_compile=false,static_batch_shapes=true"))


@pytest.fixture
def avx2_machine(monkeypatch):
  """This process seen as the AVX2 EPYC, whatever CPU runs the test; returns the list of the
  times it was looked at (`fast_path.resolve` of "auto" hparams)."""
  machine = fast_path.Machine.from_cpuinfo(CPUS["AMD EPYC, AVX2 only (this project's machine)"][0])
  looked_at = []
  monkeypatch.setattr(fast_path, "this_machine", lambda strategy=None: looked_at.append(strategy) or machine)
  return looked_at


def test_trainer_resolves_auto_logs_and_records_it(tmp_path, monkeypatch, capsys, avx2_machine):
  trainers = []
  real = train_loop.Trainer

  class Recorded(real):
    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      trainers.append(self)

  monkeypatch.setattr(train_loop, "Trainer", Recorded)
  out = str(tmp_path / "run")
  hparams = get_hparams("transformer_tiny", MICRO + ",mixed_precision=auto,xla_compile=auto")
  results = train_loop.train_and_evaluate(get_problem("algorithmic_copy"), hparams, out,
                                          str(tmp_path / "data"), train_steps=2, eval_steps=0,
                                          save_checkpoints_steps=2)
  assert results["step"] == 2
  printed = capsys.readouterr().out
  assert "training path: float32, XLA forward/backward (AVX2 CPU without AVX512_BF16/AMX)\n" in printed
  assert printed.count("training path") == 1 and len(avx2_machine) == 1   # decided once, for both
  trainer = trainers[0]
  assert (trainer.hparams.mixed_precision, trainer.hparams.xla_compile) == ("float32", True)
  assert str(trainer.training_path) == "float32, XLA forward/backward (AVX2 CPU without AVX512_BF16/AMX)"
  # What XLA compiles: the forward and backward pass (every trace of it); the step around it, with
  # the all-reduce, clipping and the update, is a plain graph.
  traced = trainer.gradients_fn._list_all_concrete_functions()  # pylint: disable=protected-access
  assert traced and all(f.function_def.attr["_XlaMustCompile"].b for f in traced)  # steps ran XLA
  steps = trainer._step_fns["update"]._list_all_concrete_functions()  # pylint: disable=protected-access
  assert steps and not any(f.function_def.attr["_XlaMustCompile"].b for f in steps)
  with open(os.path.join(out, model_dir.HPARAMS_FILE), encoding="utf-8") as f:
    record = json.load(f)
  assert record["hparams"]["mixed_precision"] == AUTO and record["hparams"]["xla_compile"] == AUTO
  assert record["training_path"] == {"mixed_precision": "float32", "xla_compile": True,
                                     "reason": "AVX2 CPU without AVX512_BF16/AMX",
                                     "summary": "float32, XLA forward/backward"}
  # Rerunning with "auto" resumes: the record compares the hparams as given. (To the same
  # train_steps: the restore is what is checked; an update more cost a pipeline and an XLA
  # compilation.)
  assert train_loop.train_and_evaluate(get_problem("algorithmic_copy"), hparams, out, str(tmp_path / "data"),
                                       train_steps=2, eval_steps=0, save_checkpoints_steps=2) == {"step": 2}
  assert "resumed from" in capsys.readouterr().out
  # A directory trained with "auto" and continued with explicit values says how to continue it.
  with pytest.raises(model_dir.ModelDirError, match="add mixed_precision=auto,xla_compile=auto to"):
    train_loop.train_and_evaluate(get_problem("algorithmic_copy"), get_hparams("transformer_tiny", MICRO),
                                  out, str(tmp_path / "data"), train_steps=4, eval_steps=0)
  # A path handed to the Trainer must be the one its hparams were resolved to.
  with pytest.raises(ValueError, match="give the hparams fast_path.resolve returned with it"):
    train_loop.Trainer(hparams, 32, str(tmp_path / "unresolved"), training_path=trainer.training_path)


def test_trainer_keeps_explicit_values_and_builds_bfloat16_for_auto(tmp_path, monkeypatch):
  bf16 = fast_path.Machine.from_cpuinfo(CPUS["Cooper Lake, AVX-512 with AVX512_BF16"][0])
  monkeypatch.setattr(fast_path, "this_machine", lambda strategy=None: bf16)
  try:
    trainer = train_loop.Trainer(get_hparams("transformer_tiny", MICRO + ",mixed_precision=auto,"
                                             "xla_compile=auto"), 32, str(tmp_path / "auto"))
    assert str(trainer.training_path) == "mixed_bfloat16, graph (CPU with AVX512_BF16)"
    assert trainer.model.dtype_policy.name == "mixed_bfloat16"
    assert trainer.gradients_fn == trainer.gradients   # no XLA
    explicit = train_loop.Trainer(get_hparams("transformer_tiny", MICRO), 32, str(tmp_path / "set"))
    assert (explicit.hparams.mixed_precision, explicit.hparams.xla_compile) == ("float32", False)
    assert explicit.model.dtype_policy.name == "float32"
    assert explicit.training_path.reason == "as set in hparams"
    # Building a model from "auto" hparams (Keras' fit, keras_fit.py) takes the same precision.
    model = model_dir.build_model(get_hparams("transformer_tiny", MICRO + ",mixed_precision=auto"), 32)
    assert model.dtype_policy.name == "mixed_bfloat16"
  finally:
    keras.mixed_precision.set_global_policy("float32")
