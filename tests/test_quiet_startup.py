"""The commands start quietly: TensorFlow's start-up lines are dropped from stderr by default
(t2t_lite/bin/quiet.py), shown with --verbose or T2T_LITE_VERBOSE=1, and nothing else is hidden:
the commands' own messages, their errors, Python tracebacks and what a crashing process wrote
last still reach stderr."""

import os
import pathlib
import subprocess
import sys
import threading

from t2t_lite.bin import quiet

BIN = pathlib.Path(sys.executable).parent
# What TensorFlow 2.21 prints at start-up on a CPU machine (seen here without the filter).
MARKERS = ("oneDNN custom operations", "cudart_stub", "cpu_feature_guard", "cuInit",
           "All log messages before absl::InitializeLog()")
NOISE = (b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
         b"I0000 00:00:1795557098.372229   12446 cudart_stub.cc:31] Could not find cuda drivers on your "
         b"machine, GPU will not be used.\n"
         b"I0000 00:00:1795557098.616033   12446 cpu_feature_guard.cc:227] This TensorFlow binary is "
         b"optimized to use available CPU instructions in performance-critical operations.\n"
         b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with "
         b"the appropriate compiler flags.\n"
         b"I0000 00:00:1795557098.371734   12446 port.cc:153] oneDNN custom operations are on. You may see "
         b"slightly different numerical results.\n"
         b"E0000 00:00:1795557129.254369   12446 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
         b"error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
         b"normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use identity normalization.\n"
         # at each program loaded from the persistent XLA cache (tests/test_xla_cache.py)
         b"E0000 00:00:1795595600.363670   28614 text_format.cc:378] Error parsing text-format "
         b"tensorflow.XlaSerializedCacheEntry: 2:1: Expected identifier, got: 4\n"
         # and on a Zen 4, which LLVM tunes with prefer-no-gather/scatter (TensorFlow 2.21)
         b"E0000 00:00:1795828010.604370    5574 cpu_aot_loader.cc:220] Loading XLA:CPU AOT result. "
         b"Target machine feature +prefer-no-scatter is not  supported on the host machine. Machine "
         b"type used for XLA:CPU compilation doesn't match the machine type for execution. Compile "
         b"machine features: [+64bit,+avx512f,+prefer-no-scatter,+prefer-no-gather,-amx-bf16] vs host "
         b"machine features: [avx512f,64bit]. This could lead to execution errors such as SIGILL.\n"
         # at the exit of a training that stopped within its first epoch (problems/base.py's cache)
         b"W0000 00:00:1796654372.366844   25644 cache_dataset_ops.cc:912] The calling iterator did "
         b"not fully read the dataset being cached. In order to avoid unexpected truncation of the "
         b"dataset, the partially cached contents of the dataset  will be discarded. This can happen "
         b"if you have an input pipeline similar to `dataset.cache().take(k).repeat()`. You should "
         b"use `dataset.take(k).cache().repeat()` instead.\n")
REAL = (b"E0000 00:00:1795557138.550291   12627 op_kernel.cc:1830] OP_REQUIRES failed: bad shape\n"
        b"error: --output_dir runs/x has no hparams.json\n"
        b"Traceback (most recent call last):\n"
        b"W0000 00:00:1795557138.550291   12627 util.cc:131] something else about oneDNN\n"
        b"W0000 00:00:1795557138.550291   12627 cache_dataset_ops.cc:900] something else cached\n"
        b"E0000 00:00:1795557138.550291   12627 text_format.cc:378] Error parsing text-format "
        b"tensorflow.SomeOtherProto: 1:1: Expected identifier\n"
        b"E0000 00:00:1795828010.604370    5574 cpu_aot_loader.cc:220] Loading XLA:CPU AOT result. "
        b"Target machine feature +avx512f is not  supported on the host machine. Machine type used for "
        b"XLA:CPU compilation doesn't match the machine type for execution. Compile machine features: "
        b"[+64bit,+avx512f,+prefer-no-scatter] vs host machine features: [64bit]. This could lead to "
        b"execution errors such as SIGILL.\n")


def _env(**extra):
  env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", quiet.ENV)}
  return dict(env, **extra)


def _filtered(chunks):
  """What filter_stream passes of `chunks`, written one by one into a pipe."""
  read_fd, write_fd = os.pipe()
  out_read, out_write = os.pipe()
  result = []
  reader = threading.Thread(target=lambda: result.append(_read_all(out_read)))
  reader.start()
  writer = threading.Thread(target=lambda: [os.write(write_fd, c) for c in chunks] and os.close(write_fd))
  writer.start()
  quiet.filter_stream(read_fd, out_write)
  writer.join()
  os.close(out_write)
  reader.join()
  os.close(read_fd)
  os.close(out_read)
  return result[0]


def _read_all(fd):
  data = b""
  while chunk := os.read(fd, 65536):
    data += chunk
  return data


def test_filter_drops_start_up_lines_only():
  assert _filtered([NOISE + REAL + NOISE]) == REAL
  # C++ streams write a line in pieces; a prompt with no newline passes at once.
  pieces = [b"normalizer.cc", b"(51) ", b"LOG(INFO) ", b"precompiled_charsmap is empty.", b"\n",
            b"decoding 3 records\n", b"> "]
  assert _filtered(pieces) == b"decoding 3 records\n> "
  assert _filtered([NOISE[:30], NOISE[30:], b"step 10\r", b"step 20\r\n"]) == b"step 10\rstep 20\r\n"


def test_decoder_help_and_a_decode_print_no_start_up_line(tiny_model_dir):
  model_dir, _ = tiny_model_dir
  help_run = subprocess.run([str(BIN / "t2t-lite-decoder"), "--help"], capture_output=True, text=True,
                            env=_env(), timeout=300)
  assert help_run.returncode == 0 and "--verbose" in help_run.stdout
  assert help_run.stderr == ""
  # stdin to stdout (the decoder's own test of it, tests/test_decoder.py, uses this run): a line
  # per input line, the empty line empty, with return_beams each line's 3 beams.
  decode = subprocess.run([str(BIN / "t2t-lite-decoder"), f"--output_dir={model_dir}",
                           "--decode_hparams=beam_size=3,return_beams=true"],
                          input="A man is riding a bike .\n\nA woman .\n",
                          capture_output=True, text=True, env=_env(), timeout=600)
  assert decode.returncode == 0, decode.stderr
  rows = decode.stdout.split("\n")[:-1]
  assert len(rows) == 3 and rows[1] == ""
  assert len(rows[0].split("\t")) == len(rows[2].split("\t")) == 3
  assert "decoding 3 records" in decode.stderr   # the command's own message
  assert not [m for m in MARKERS if m in decode.stderr], decode.stderr
  # --verbose shows TensorFlow's lines again (on this CPU machine TensorFlow prints some of them,
  # at its import: the search runs as a plain graph, no second XLA compile needed).
  verbose = subprocess.run([str(BIN / "t2t-lite-decoder"), f"--output_dir={model_dir}", "--verbose",
                            "--decode_hparams=beam_size=2,xla=false"], input="A man .\n",
                           capture_output=True, text=True, env=_env(), timeout=600)
  assert verbose.returncode == 0, verbose.stderr
  assert [m for m in MARKERS if m in verbose.stderr], verbose.stderr


def test_errors_still_reach_stderr(tmp_path):
  """A command's usage error; and, in a process that starts as a t2t-lite command, TensorFlow's
  other lines, a Python traceback, and what it wrote just before it crashed."""
  bad = subprocess.run([str(BIN / "t2t-lite-decoder"), f"--output_dir={tmp_path / 'none'}"],
                       input="x\n", capture_output=True, text=True, env=_env(), timeout=300)
  assert bad.returncode == 2 and "error:" in bad.stderr
  code = ("import os, sys; sys.argv = ['t2t-lite-fake']; import t2t_lite.bin; "
          f"os.write(2, {NOISE + REAL!r}); sys.stderr.write('own line\\n'); sys.stderr.flush(); "
          "{}")
  traceback = subprocess.run([sys.executable, "-c", code.format("raise RuntimeError('boom')")],
                             capture_output=True, env=_env(), timeout=120)
  assert traceback.returncode == 1
  assert traceback.stderr.startswith(REAL + b"own line\n")
  assert b"RuntimeError: boom" in traceback.stderr
  crash = subprocess.run([sys.executable, "-c", code.format("os.abort()")], capture_output=True,
                         env=_env(), timeout=120)
  assert crash.returncode != 0 and crash.stderr == REAL + b"own line\n"
  verbose = subprocess.run([sys.executable, "-c", code.format("")], capture_output=True,
                           env=_env(T2T_LITE_VERBOSE="1"), timeout=120)
  assert verbose.stderr == NOISE + REAL + b"own line\n"


def test_importing_the_commands_from_python_changes_nothing():
  code = "import os, t2t_lite.bin.decoder; print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))"
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(),
                          timeout=120)
  assert result.stdout.strip() == "None"


def test_verbose_is_asked_for_only_by_a_true_flag_or_variable(monkeypatch):
  """The filter's switch (`verbose_requested`, read before the parser runs) in the forms the
  commands' boolean flags and the variable take: "0", "false", "no" and --verbose=false /
  --noverbose keep the filter on, like no flag at all. (The subprocess tests above only give
  --verbose and T2T_LITE_VERBOSE=1, so a switch that any value turned on passed them.)"""
  monkeypatch.delenv(quiet.ENV, raising=False)
  assert not quiet.verbose_requested(["t2t-lite-decoder", "--output_dir=x"])
  for argv in (["--verbose"], ["--verbose=true"], ["--verbose=1"], ["--output_dir=x", "--verbose=True"]):
    assert quiet.verbose_requested(["t2t-lite-decoder", *argv]), argv
  for argv in (["--verbose=false"], ["--verbose=0"], ["--verbose=No"], ["--noverbose"], ["--verbosity=1"]):
    assert not quiet.verbose_requested(["t2t-lite-decoder", *argv]), argv
  for value, verbose in (("1", True), ("yes", True), ("true", True), ("", False), ("0", False),
                         (" false ", False), ("No", False)):
    monkeypatch.setenv(quiet.ENV, value)
    assert quiet.verbose_requested(["t2t-lite-decoder"]) is verbose, value
