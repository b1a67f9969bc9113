"""A persistent XLA compilation cache: the search programs compiled in one run are reused by the next.

XLA compiles the search once per (batch, width) bucket, seconds each on a CPU, and a process keeps
its programs in memory only, so every `t2t-lite-decoder` run and every `t2t-lite-serve` start pays
for them again. TensorFlow's XLA can persist them (TF_XLA_FLAGS
`--tf_xla_persistent_cache_directory=DIR`, read once, when TensorFlow first needs its XLA flags): a
compiled program is written to DIR as one `<prefix>__<signature>__<HLO fingerprint>__<device>.pb`
file (the HLO, the executable), through a temporary file renamed into place, and a later process
that compiles the same function on the same argument shapes loads it instead of compiling.
`configure` (the commands call it before importing TensorFlow) turns it on under a model's
`OUTPUT_DIR/xla_cache/`.

What TensorFlow checks, and what is added here:
- TensorFlow's key is the function's signature (its name and argument shapes) and a fingerprint of
  the HLO, and it compares the whole stored HLO with the new one before loading: another model
  (architecture, vocabulary, decode hparams: all in the HLO) never loads another's program. The
  weights are arguments of the program, not part of it: a retrained model reuses it, correctly.
- Not in TensorFlow's key: the TensorFlow/XLA version, the CPU (XLA compiles for the host's
  instruction set: a program built for AVX-512 would crash on an AVX2 CPU) and XLA_FLAGS. So the
  programs live in a subfolder named by those (`environment_key`), e.g.
  `xla_cache/tf2.21.0-x86_64-3f9a0c1b2d4e/`: a copied model directory, a TensorFlow upgrade or
  other XLA flags start an empty one.
- TensorFlow fails the call (it does not recompile) when a file it finds cannot be read or does not
  match. Files appear whole (written to a temporary name, renamed), but a file can still be
  truncated or malformed later (a full disk, a copy cut short): `configure` checks every entry's
  structure first (`entry_problem`) and deletes the bad ones, and temporary files that a killed
  process left behind (`STALE_SECONDS` old). (Damage inside a stored executable, with its
  structure whole, is not detected.)
- TensorFlow's key holds the traced function's name, numbered by a process-wide counter: the
  `Translator` traces each shape under `stable_names`, so a run finds the programs whatever order
  it meets the shapes in.
- A folder that cannot be written (a read-only model directory) is used read-only when it
  exists, else the cache is off: TensorFlow fails the call when it cannot save a program.

Processes may share a folder: two that compile the same program both write it, each through its
own temporary file, and the rename that wins leaves one whole file.
"""

import contextlib
import glob
import hashlib
import importlib.metadata
import itertools
import os
import platform
import sys
import tempfile
import threading
import time
import zlib

from t2t_lite import cpu

FOLDER = "xla_cache"            # under the model's output dir
ENV = "TF_XLA_FLAGS"
DIRECTORY_FLAG = "--tf_xla_persistent_cache_directory"
READ_ONLY_FLAG = "--tf_xla_persistent_cache_read_only"
STALE_SECONDS = 3600            # a temporary entry file this old was left by a killed process
_TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tensorflow-macos",
                     "tf-nightly", "tf-nightly-cpu")


def default_directory(output_dir: str) -> str:
  return os.path.join(output_dir, FOLDER)


def _tensorflow_version() -> str:
  for name in _TF_DISTRIBUTIONS:
    try:
      return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      continue
  return "unknown"


# The fields of /proc/cpuinfo's first processor that name the instruction sets XLA compiles for.
_CPU_FIELDS = ("vendor_id", "model name", "flags", "cpu family", "model", "features", "cpu implementer",
               "cpu architecture", "cpu variant", "cpu part")


def _cpu_description(cpuinfo: str | None = None) -> str:
  """The CPU's model and instruction-set flags (Linux's /proc/cpuinfo, first processor: `cpu`),
  as the key's hash has read them since the cache began (a changed string would orphan every
  existing cache folder). `cpuinfo`: the text (default: this machine's)."""
  fields = cpu.first_processor(cpu.read() if cpuinfo is None else cpuinfo, _CPU_FIELDS)
  if fields:
    return repr(sorted((name, " ".join(sorted(value.split())) if name in ("flags", "features") else value)
                       for name, value in fields.items()))
  return f"{platform.processor()} {platform.platform()}"


def environment_key(environ=None) -> str:
  """The subfolder programs compiled here are kept in: TensorFlow's version, the machine, and a
  hash of the CPU's model and instruction sets, XLA_FLAGS and the user's own TF_XLA_FLAGS
  (what TensorFlow's own key leaves out), e.g. `tf2.21.0-x86_64-3f9a0c1b2d4e`."""
  environ = os.environ if environ is None else environ
  described = "\n".join((_cpu_description(), environ.get("XLA_FLAGS", ""), environ.get(ENV, "")))
  digest = hashlib.sha256(described.encode("utf-8")).hexdigest()[:12]
  return f"tf{_tensorflow_version()}-{platform.machine() or 'cpu'}-{digest}"


# --- the entries' structure (protobuf wire format, tensorflow/compiler/jit/xla_compilation_cache.proto):
# XlaSerializedCacheEntry {key = 1 (XlaSerializedCacheKey); hlo_module = 2; executable = 3 (bytes)}
# XlaSerializedCacheKey {signature_fingerprint = 1; cluster_fingerprint = 2 (uint64);
#                        device_type = 3; prefix = 4 (string); compiled_using_pjrt = 5 (bool)}

def _varint(read):
  value, shift = 0, 0
  while True:
    byte = read(1)
    if not byte:
      raise ValueError("cut short")
    value |= (byte[0] & 0x7F) << shift
    if byte[0] < 0x80:
      return value
    shift += 7
    if shift > 63:
      raise ValueError("a malformed number")


def _fields(f, end):
  """(field number, wire type, value or payload offset, payload length) of a message's fields
  from f's position to `end`; payloads of length-delimited fields are skipped (seeked over)."""
  while f.tell() < end:
    tag = _varint(f.read)
    number, wire = tag >> 3, tag & 7
    if wire == 0:
      yield number, wire, _varint(f.read), 0
    elif wire == 2:
      length = _varint(f.read)
      start = f.tell()
      if start + length > end:
        raise ValueError(f"field {number} runs past the end")
      yield number, wire, start, length
      f.seek(start + length)
    elif wire in (1, 5):
      f.seek(f.tell() + (8 if wire == 1 else 4))
    else:
      raise ValueError(f"wire type {wire}")
  if f.tell() != end:
    raise ValueError("cut short")


def entry_problem(path: str) -> str | None:
  """What is wrong with a cache entry file, or None: a whole XlaSerializedCacheEntry (key, HLO and
  a non-empty executable) whose key names this very file. Reads the key only (seeks over the rest)."""
  try:
    with open(path, "rb") as f:
      end = os.fstat(f.fileno()).st_size
      top = {number: (wire, value, length) for number, wire, value, length in _fields(f, end)}
      if any(top.get(number, (None,))[0] != 2 for number in (1, 2, 3)):
        return "the key, HLO or executable is missing"
      if top[3][2] == 0:
        return "the executable is empty"
      _, start, length = top[1]
      f.seek(start)
      key = {number: (value, length) for number, wire, value, length in _fields(f, start + length)}
      strings = {}
      for number in (3, 4):
        if number in key:
          f.seek(key[number][0])
          strings[number] = f.read(key[number][1]).decode("utf-8")
  except (OSError, ValueError, UnicodeDecodeError) as e:
    return f"unreadable ({e})"
  prefix = strings.get(4, "")
  expected = "__".join(([prefix] if prefix else []) + [
      str(key.get(1, (0,))[0]), str(key.get(2, (0,))[0]), strings.get(3, "")]
      + (["pjrt"] if key.get(5, (0,))[0] else [])) + ".pb"
  if os.path.basename(path) != expected:
    return f"its key names another file ({expected})"
  return None


def prune(directory: str, now: float | None = None, warn=None) -> list[str]:
  """Deletes the entries of `directory` that TensorFlow could not load (`entry_problem`) and the
  temporary files killed processes left (older than STALE_SECONDS); returns the paths deleted."""
  now = time.time() if now is None else now
  removed = []
  for path in sorted(glob.glob(os.path.join(directory, "*"))):
    if path.endswith(".pb"):
      problem = entry_problem(path)
    elif path.endswith(".tmp"):
      try:
        problem = "a temporary file left behind" if now - os.path.getmtime(path) > STALE_SECONDS else None
      except OSError:
        problem = None
    else:
      continue
    if problem:
      try:
        os.remove(path)
      except FileNotFoundError:
        pass
      except OSError as e:
        if warn:
          warn(f"warning: XLA cache: cannot delete {path} ({problem}): {e}")
        continue
      removed.append(path)
      if warn:
        warn(f"warning: XLA cache: deleted {path}: {problem}")
  return removed


def _writable(directory: str) -> bool:
  try:
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryFile(dir=directory):
      return True
  except OSError:
    return False


def user_directory(environ=None) -> str | None:
  """The cache folder the user's own TF_XLA_FLAGS names, if any (then it is left as it is)."""
  environ = os.environ if environ is None else environ
  for flag in environ.get(ENV, "").split():
    if flag.startswith(DIRECTORY_FLAG + "="):
      return flag.split("=", 1)[1]
  return None


def configure(root: str, environ=None, warn=None) -> str | None:
  """Turns TensorFlow's persistent XLA cache on under `root` (e.g. OUTPUT_DIR/xla_cache), in the
  subfolder `environment_key` names, by adding its flags to TF_XLA_FLAGS in `environ` (default:
  os.environ). Must run before TensorFlow is imported: TensorFlow reads its XLA flags once.

  Returns the folder used, or None, when nothing was set: TensorFlow is already imported (an
  in-process caller: its flags may be read already, and other work in the process must not start
  caching), the user's TF_XLA_FLAGS name a cache folder of their own (theirs is used, untouched),
  or the folder can neither be written nor read. An unwritable existing folder is used read-only.
  Bad entries and stale temporary files are deleted first (`prune`)."""
  environ = os.environ if environ is None else environ
  warn = warn or (lambda message: print(message, file=sys.stderr, flush=True))
  if "tensorflow" in sys.modules or user_directory(environ) is not None:
    return None
  directory = os.path.abspath(os.path.join(root, environment_key(environ)))
  flags = [f"{DIRECTORY_FLAG}={directory}"]
  if _writable(directory):
    prune(directory, warn=warn)
  elif os.path.isdir(directory) and os.access(directory, os.R_OK | os.X_OK):
    bad = [path for path in sorted(glob.glob(os.path.join(directory, "*.pb"))) if entry_problem(path)]
    if bad:
      warn(f"warning: XLA cache off: {directory} is read-only and {len(bad)} of its entries cannot "
           f"be loaded ({bad[0]}: {entry_problem(bad[0])})")
      return None
    flags.append(f"{READ_ONLY_FLAG}=true")
  else:
    warn(f"warning: XLA cache off: cannot create or write {directory}")
    return None
  if any(" " in flag or "\t" in flag for flag in flags):  # TF_XLA_FLAGS splits on whitespace
    warn(f"warning: XLA cache off: its folder {directory} has a space in its name; give "
         "--xla_cache_dir another folder")
    return None
  environ[ENV] = " ".join([environ.get(ENV, "").strip()] + flags).strip()
  return directory


# --- stable names -----------------------------------------------------------------------------
# TensorFlow names a traced function, and the while-loop and cond bodies inside it, with numbers
# from one process-wide counter (`ops.uid()`: `__inference_search_13649`), and both the name and
# the HLO (which holds the body names) are in the persistent cache's key. The same search traced
# after other functions (another bucket first, another input file) would get other numbers and
# never find its program. Inside `stable_names(key)`, this thread's uid() numbers come from a
# block of numbers far above TensorFlow's counter, chosen by `key` (the first free block from
# its hash), so a trace gets the same names in every process that traces it under that key.
# The block is taken at the first number drawn: a function found in tf.function's cache (a shape
# traced before) draws none, so looking it up under `stable_names` on every call takes no block.
_BLOCK = 1 << 20               # numbers per block (a search trace takes a few hundred)
_FIRST = 1 << 40               # far above what TensorFlow's own counter reaches
_state = threading.local()
_lock = threading.Lock()
_used_blocks: set[int] = set()
_installed = {"count": 0, "original": None}


class _Numbers:
  """The uid() numbers of one `stable_names` entry: its block is taken at the first one drawn and
  kept for the process (the names given stay in use); `draw` gives None once it is used up."""

  def __init__(self, key: str):
    self.key, self.numbers, self.end = key, None, 0

  def draw(self) -> int | None:
    if self.numbers is None:
      with _lock:
        block = zlib.crc32(self.key.encode("utf-8")) % _BLOCK
        while block in _used_blocks:
          block = (block + 1) % _BLOCK
        _used_blocks.add(block)
      start = _FIRST + block * _BLOCK
      self.numbers, self.end = itertools.count(start), start + _BLOCK
    number = next(self.numbers)
    return number if number < self.end else None  # used up: unique numbers from TensorFlow's counter


def _stable_uid():
  numbers = getattr(_state, "numbers", None)
  number = numbers.draw() if numbers is not None else None
  return _installed["original"]() if number is None else number


@contextlib.contextmanager
def stable_names(key: str):
  """Traces inside (this thread's) get the same function names in every process for the same
  `key` (unique within the process: a key that traces again gets the next free block)."""
  from tensorflow.python.framework import ops  # pylint: disable=import-outside-toplevel
  with _lock:
    if _installed["count"] == 0:
      _installed["original"] = ops.uid
      ops.uid = _stable_uid
    _installed["count"] += 1
  outer = getattr(_state, "numbers", None)
  _state.numbers = _Numbers(key)
  try:
    yield
  finally:
    _state.numbers = outer
    with _lock:
      _installed["count"] -= 1
      if _installed["count"] == 0:
        ops.uid = _installed["original"]
