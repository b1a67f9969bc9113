"""Quiet commands: TensorFlow's start-up lines, and a few known lines of noise it prints later, are
dropped from stderr.

TensorFlow and the libraries it loads print a dozen lines at start-up (oneDNN, CUDA probing --
"failed call to cuInit" reads as an error on a machine with no GPU --, CPU features, absl's
"All log messages before absl::InitializeLog()"). Some are written while the libraries load,
before TF_CPP_MIN_LOG_LEVEL is read, so no setting hides them all. The commands therefore run
with stderr (file descriptor 2) through a filter process that drops exactly those lines (by
their source file and text, `is_startup_noise`; also the XLA cache's text-proto attempt at every
program it loads and tf.data's partial-cache warning at the exit of a run shorter than an epoch,
both printed after start-up) and passes everything else through unchanged:
Python exceptions, the commands' own messages and errors, and every other TensorFlow message.
The filter is a forked process, so what a crashing command wrote last still comes out.

`--verbose` on any command, or T2T_LITE_VERBOSE=1 in the environment, turns the filter off.
`install()` must run before TensorFlow is imported: `t2t_lite/bin/__init__.py` calls it when
the program is a `t2t-lite-*` console script.
"""

import atexit
import contextlib
import os
import re
import signal
import sys
import time

ENV = "T2T_LITE_VERBOSE"
# absl's C++ log line: severity+date time thread file:line] message
_ABSL = re.compile(rb"^[IWEF]\d{4} [\d:.]+ +\d+ ([\w.]+):\d+\] (.*)")
_NOISY_SOURCES = {
    b"cudart_stub.cc", b"cpu_feature_guard.cc", b"cuda_platform.cc", b"cuda_executor.cc",
    b"cuda_diagnostics.cc", b"cuda_dnn.cc", b"cuda_fft.cc", b"cuda_blas.cc", b"computation_placer.cc",
    b"dso_loader.cc",
}
# Sources that print start-up lines among real ones: only these messages are dropped.
_NOISY_MESSAGES = {
    b"port.cc": b"oneDNN custom operations are on",
    b"util.cc": b"oneDNN supports DT_",
    b"py_utils.cc": b"TF-TRT Warning",
    # The persistent XLA cache (t2t_lite/decoding/xla_cache.py) reads each entry as a text proto
    # first, logging this error, then as the binary one it is: at every program it loads.
    b"text_format.cc": b"Error parsing text-format tensorflow.XlaSerializedCacheEntry",
    # ... and on a CPU whose LLVM tuning adds `prefer-*` features (Zen 4: +prefer-no-gather,
    # +prefer-no-scatter), TensorFlow's check of a loaded program against the host counts those
    # code-generation preferences as missing instructions and warns of SIGILL, twice a program.
    # Only a missing `prefer-*` is dropped: a real instruction missing (a cache folder copied from
    # another CPU) still shows.
    b"cpu_aot_loader.cc": b"Target machine feature +prefer-",
    # A training keeps its tokenized pairs in memory after the first epoch (Problem.dataset's
    # cache); one that stops within that epoch drops the partial copy, as intended, and tf.data
    # warns at exit, naming a misuse the pipeline does not make.
    b"cache_dataset_ops.cc": b"The calling iterator did not fully read the dataset being cached",
}
_NOISY_LINES = (
    re.compile(rb"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"),
    # cpu_feature_guard's second line
    re.compile(rb"^To enable the following instructions: .* rebuild TensorFlow"),
    re.compile(rb"^[\w.]+\.cc\(\d+\) LOG\(INFO\) "),  # SentencePiece's C++ INFO lines
)


def is_startup_noise(line: bytes) -> bool:
  """Whether one stderr line (bytes, with or without its newline) is one of the lines dropped: a
  start-up line, or one of the known later ones (the module's docstring)."""
  match = _ABSL.match(line)
  if match:
    source, message = match.groups()
    return source in _NOISY_SOURCES or (source in _NOISY_MESSAGES and _NOISY_MESSAGES[source] in message)
  return any(pattern.match(line) for pattern in _NOISY_LINES)


_PREFIXES = (b"WARNING: All log messages before absl::InitializeLog()",
             b"To enable the following instructions: ")
_PARTIAL = re.compile(rb"[IWEF](\d{0,4}( .*)?)?|[\w.]+(\.cc\(.*)?", re.S)


def _could_be_noise(partial: bytes) -> bool:
  """Whether a line start (no newline yet) may still become a start-up line: then it is held
  until its newline. Anything else (a prompt such as "> ", a progress bar redrawn with \\r)
  passes at once. C++ streams write a line in pieces ("normalizer.cc", "(51) ", ...)."""
  if b"\r" in partial:
    return False
  return (any(p.startswith(partial) or partial.startswith(p) for p in _PREFIXES)
          or _PARTIAL.fullmatch(partial) is not None)


def filter_stream(read_fd: int, write_fd: int):
  """Copies read_fd to write_fd until end of file, dropping start-up lines."""
  pending, passing = b"", False   # a held line start; whether the current line already passed
  while True:
    try:
      data = os.read(read_fd, 65536)
    except InterruptedError:
      continue
    except OSError:
      break
    if not data:
      break
    buffer, pending, out = pending + data, b"", []
    while buffer:
      end = buffer.find(b"\n")
      if end < 0:
        if passing or not _could_be_noise(buffer):
          out.append(buffer)
          passing = True
        else:
          pending = buffer
        break
      line, buffer = buffer[:end + 1], buffer[end + 1:]
      if passing or not is_startup_noise(line):
        out.append(line)
      passing = False
    _write_all(write_fd, b"".join(out))
  _write_all(write_fd, pending)


def _write_all(fd, data):
  while data:
    try:
      data = data[os.write(fd, data):]
    except InterruptedError:
      continue
    except OSError:
      return


def verbose_requested(argv) -> bool:
  if os.environ.get(ENV, "").strip().lower() not in ("", "0", "false", "no"):
    return True
  return any(arg == "--verbose" or (arg.startswith("--verbose=") and
                                    arg.split("=", 1)[1].lower() not in ("0", "false", "no"))
             for arg in argv)


def install(argv=None):
  """Routes this process's stderr through the start-up filter, unless verbose output was asked
  for (then TensorFlow's lines show as TensorFlow prints them). Returns whether it did."""
  argv = sys.argv[1:] if argv is None else argv
  if verbose_requested(argv):
    os.environ[ENV] = "1"
    return False
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")   # TensorFlow's C++ INFO lines
  if not hasattr(os, "fork"):
    return False
  try:
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    original = os.dup(2)
    pid = os.fork()
  except OSError:
    return False
  if pid == 0:  # the filter: survives the command's crash, ignores Ctrl-C (the command handles it)
    try:
      signal.signal(signal.SIGINT, signal.SIG_IGN)
      os.close(write_fd)
      os.close(2)
      filter_stream(read_fd, original)
    finally:
      os._exit(0)
  os.close(read_fd)
  os.dup2(write_fd, 2)
  os.close(write_fd)
  os.set_inheritable(original, False)

  def finish():
    """At exit: give stderr back and let the filter write what it holds (bounded: a child
    process of the command may still hold the pipe)."""
    with contextlib.suppress(OSError, ValueError):
      sys.stderr.flush()
    os.dup2(original, 2)
    for _ in range(200):
      if os.waitpid(pid, os.WNOHANG)[0]:
        return
      time.sleep(0.01)
  atexit.register(finish)
  return True
