"""The persistent XLA cache (t2t_lite/decoding/xla_cache.py): the entries' check against protobuf's
own encoder, pruning, the flags set before TensorFlow loads, and in real processes: a second
decoder run loads the programs the first compiled (files written, then loaded: TensorFlow's own log
line, nothing rewritten) with identical outputs, and a damaged entry is deleted before it is read,
its shape compiled again and written whole."""

import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from t2t_lite.bin import common
from t2t_lite.decoding import xla_cache

BIN = pathlib.Path(sys.executable).parent


def _entry_class():
  """XlaSerializedCacheEntry (tensorflow/compiler/jit/xla_compilation_cache.proto) built by protobuf
  from a descriptor: the HLO module as bytes (the same wire format as an embedded message)."""
  fields = descriptor_pb2.FieldDescriptorProto
  proto = descriptor_pb2.FileDescriptorProto(name="xla_cache_test.proto", package="xla_cache_test",
                                             syntax="proto3")
  key = proto.message_type.add(name="XlaSerializedCacheKey")
  for number, name, kind in ((1, "signature_fingerprint", fields.TYPE_UINT64),
                             (2, "cluster_fingerprint", fields.TYPE_UINT64),
                             (3, "device_type", fields.TYPE_STRING), (4, "prefix", fields.TYPE_STRING),
                             (5, "compiled_using_pjrt", fields.TYPE_BOOL)):
    key.field.add(name=name, number=number, type=kind, label=fields.LABEL_OPTIONAL)
  entry = proto.message_type.add(name="XlaSerializedCacheEntry")
  entry.field.add(name="key", number=1, type=fields.TYPE_MESSAGE, label=fields.LABEL_OPTIONAL,
                  type_name=".xla_cache_test.XlaSerializedCacheKey")
  entry.field.add(name="hlo_module", number=2, type=fields.TYPE_BYTES, label=fields.LABEL_OPTIONAL)
  entry.field.add(name="executable", number=3, type=fields.TYPE_BYTES, label=fields.LABEL_OPTIONAL)
  pool = descriptor_pool.DescriptorPool()
  pool.Add(proto)
  return message_factory.GetMessageClass(pool.FindMessageTypeByName("xla_cache_test.XlaSerializedCacheEntry"))


Entry = _entry_class()


def _entry(prefix="xla_compile_cache", signature=2 ** 63 + 12345, cluster=987654321, device="XLA_CPU_JIT",
           pjrt=False, executable=b"\x7fELF" + bytes(range(256)) * 3):
  entry = Entry(hlo_module=b"\x0a\x05entry" + bytes(300), executable=executable)
  entry.key.signature_fingerprint, entry.key.cluster_fingerprint = signature, cluster
  entry.key.device_type, entry.key.prefix, entry.key.compiled_using_pjrt = device, prefix, pjrt
  name = "__".join(([prefix] if prefix else []) + [str(signature), str(cluster), device]
                   + (["pjrt"] if pjrt else [])) + ".pb"
  return name, entry.SerializeToString()


@pytest.mark.parametrize("fields", [{}, {"prefix": ""}, {"pjrt": True}, {"signature": 0}])
def test_whole_entries_pass_and_every_cut_or_renamed_one_is_caught(tmp_path, fields):
  name, data = _entry(**fields)
  path = tmp_path / name
  path.write_bytes(data)
  assert xla_cache.entry_problem(str(path)) is None
  for size in range(len(data)):   # every truncation: a write cut short, a full disk
    path.write_bytes(data[:size])
    assert xla_cache.entry_problem(str(path)), size
  path.write_bytes(data + b"\x00")
  assert xla_cache.entry_problem(str(path))
  other = tmp_path / name.replace("XLA_CPU_JIT", "XLA_GPU_JIT")
  other.write_bytes(data)
  assert "names another file" in xla_cache.entry_problem(str(other))


def test_entries_without_an_executable_or_with_garbage_are_caught(tmp_path):
  """No executable field, and one present but empty (field 3, length 0: proto3 never writes an
  empty bytes field, so `_entry(executable=b"")` alone would not reach that check)."""
  name, data = _entry(executable=b"")
  (tmp_path / name).write_bytes(data)
  assert "missing" in xla_cache.entry_problem(str(tmp_path / name))
  (tmp_path / name).write_bytes(data + b"\x1a\x00")     # field 3, wire type 2, length 0
  assert xla_cache.entry_problem(str(tmp_path / name)) == "the executable is empty"
  (tmp_path / name).write_bytes(os.urandom(4096))
  assert xla_cache.entry_problem(str(tmp_path / name))
  assert "unreadable" in xla_cache.entry_problem(str(tmp_path / "missing.pb"))


def test_prune_deletes_bad_entries_and_stale_temporary_files_only(tmp_path):
  good, data = _entry()
  bad, bad_data = _entry(cluster=5)
  (tmp_path / good).write_bytes(data)
  (tmp_path / bad).write_bytes(bad_data[:-10])
  stale, fresh = tmp_path / f"{good}.1_2.tmp", tmp_path / f"{bad}.3_4.tmp"
  stale.write_bytes(data[:10])
  fresh.write_bytes(data[:10])
  (tmp_path / "notes.txt").write_text("kept")
  now = time.time()
  os.utime(stale, (now - xla_cache.STALE_SECONDS - 60,) * 2)
  warnings = []
  removed = xla_cache.prune(str(tmp_path), now=now, warn=warnings.append)
  assert sorted(removed) == sorted([str(tmp_path / bad), str(stale)])
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted([good, fresh.name, "notes.txt"])
  assert len(warnings) == 2 and all("deleted" in w for w in warnings)


@pytest.fixture
def tensorflow_not_loaded(monkeypatch):
  """configure() acts only before TensorFlow is imported (as in a command's process)."""
  monkeypatch.delitem(sys.modules, "tensorflow", raising=False)


def test_configure_sets_the_flags_under_a_keyed_folder(tmp_path, tensorflow_not_loaded):
  environ = {"TF_XLA_FLAGS": "--tf_xla_enable_lazy_compilation=true"}
  folder = xla_cache.configure(str(tmp_path / "xla_cache"), environ)
  assert folder == str(tmp_path / "xla_cache" / xla_cache.environment_key(
      {"TF_XLA_FLAGS": "--tf_xla_enable_lazy_compilation=true"}))
  assert os.path.isdir(folder)
  assert environ["TF_XLA_FLAGS"].split() == ["--tf_xla_enable_lazy_compilation=true",
                                             f"--tf_xla_persistent_cache_directory={folder}"]
  key = xla_cache.environment_key({})
  assert re.fullmatch(r"tf[\w.+-]+-\w+-[0-9a-f]{12}", key)
  assert xla_cache.environment_key({"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"}) != key
  assert xla_cache.environment_key({"TF_XLA_FLAGS": "--tf_xla_enable_lazy_compilation=true"}) != key
  assert xla_cache.environment_key({}) == key


def test_configure_leaves_a_users_cache_and_an_imported_tensorflow_alone(tmp_path, monkeypatch):
  environ = {"TF_XLA_FLAGS": "--tf_xla_persistent_cache_directory=/somewhere"}
  monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
  assert xla_cache.configure(str(tmp_path), environ) is None
  assert environ == {"TF_XLA_FLAGS": "--tf_xla_persistent_cache_directory=/somewhere"}
  monkeypatch.setitem(sys.modules, "tensorflow", object())
  environ = {}
  assert xla_cache.configure(str(tmp_path / "c"), environ) is None
  assert environ == {} and not (tmp_path / "c").exists()


def test_an_unwritable_folder_is_read_only_or_off(tmp_path, tensorflow_not_loaded, monkeypatch):
  root = tmp_path / "xla_cache"
  folder = pathlib.Path(xla_cache.configure(str(root), {}))
  name, data = _entry()
  (folder / name).write_bytes(data)
  monkeypatch.setattr(xla_cache, "_writable", lambda directory: False)   # a read-only mount
  environ, warnings = {}, []
  assert xla_cache.configure(str(root), environ, warnings.append) == str(folder)
  assert "--tf_xla_persistent_cache_read_only=true" in environ["TF_XLA_FLAGS"].split()
  (folder / name).write_bytes(data[:-1])    # a bad entry that cannot be deleted: no cache
  environ = {}
  assert xla_cache.configure(str(root), environ, warnings.append) is None and environ == {}
  assert "read-only" in warnings[-1] and (folder / name).exists()
  environ = {}
  assert xla_cache.configure(str(tmp_path / "elsewhere"), environ, warnings.append) is None
  assert "cannot create or write" in warnings[-1] and environ == {}


def test_writable_sees_a_folder_it_cannot_make_or_write(tmp_path, monkeypatch):
  """Runs as root too (as here and in CI), which writes into read-only folders: a folder beneath
  a regular file cannot be made by anyone, and a folder whose temporary file is refused stands
  for one root cannot write into (a read-only mount)."""
  assert xla_cache._writable(str(tmp_path / "a" / "b"))
  (tmp_path / "f").write_text("a file, not a folder")
  assert not xla_cache._writable(str(tmp_path / "f" / "x"))
  assert not (tmp_path / "f" / "x").exists() and (tmp_path / "f").is_file()

  def refused(*args, **kwargs):
    raise PermissionError(13, "Permission denied", kwargs.get("dir"))

  monkeypatch.setattr(xla_cache.tempfile, "TemporaryFile", refused)
  assert not xla_cache._writable(str(tmp_path / "a" / "b"))    # the folder is there, not writable


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_writable_sees_a_read_only_folder(tmp_path):
  assert xla_cache._writable(str(tmp_path / "a" / "b"))
  (tmp_path / "a").chmod(0o555)
  try:
    assert not xla_cache._writable(str(tmp_path / "a" / "c"))
    assert not xla_cache._writable(str(tmp_path / "a" / "b"))
  finally:
    (tmp_path / "a").chmod(0o755)


def test_the_commands_flag_and_environment_variable(tmp_path, tensorflow_not_loaded, monkeypatch):
  class Args:
    xla_cache_dir = None
  monkeypatch.delenv(common.XLA_CACHE_ENV, raising=False)
  monkeypatch.setenv("TF_XLA_FLAGS", "")   # restored at the end: configure sets os.environ's
  assert common.configure_xla_cache(Args, str(tmp_path / "no_such_model")) is None
  assert not (tmp_path / "no_such_model").exists()          # a typo makes no folder
  folder = common.configure_xla_cache(Args, str(tmp_path))
  assert folder.startswith(str(tmp_path / "xla_cache") + os.sep)
  assert os.environ["TF_XLA_FLAGS"] == f"--tf_xla_persistent_cache_directory={folder}"
  monkeypatch.setenv("TF_XLA_FLAGS", "")
  monkeypatch.setenv(common.XLA_CACHE_ENV, "none")
  assert common.configure_xla_cache(Args, str(tmp_path)) is None
  Args.xla_cache_dir = str(tmp_path / "elsewhere")            # the flag over the variable
  assert common.configure_xla_cache(Args, None).startswith(str(tmp_path / "elsewhere") + os.sep)
  monkeypatch.setenv("TF_XLA_FLAGS", "")
  Args.xla_cache_dir = "none"
  monkeypatch.setenv(common.XLA_CACHE_ENV, str(tmp_path / "v"))
  assert common.configure_xla_cache(Args, str(tmp_path)) is None and os.environ["TF_XLA_FLAGS"] == ""


# --- real processes -------------------------------------------------------------------------

# Two shapes, batches of one: (1, 16) and (1, 32) (the tiny model's subwords, test_decoder.py).
SHORT = "A dog ."
LONG = "A man in a blue shirt and a woman in a red dress are walking their two dogs in the park ."
LOADED = "Loading cached entry for"   # TensorFlow's VLOG(1) line when it loads a program


def _decode(model_dir, tmp_path, cache, lines, name, interactive=False):
  """t2t-lite-decoder in its own process (beam 2, one line a batch), TensorFlow's log lines shown
  (the persistor's VLOG(1) included): a file's lines (sorted by length, so shortest first), or
  with `interactive` stdin's, one at a time in their order. Returns (outputs, stderr)."""
  source, out = tmp_path / f"{name}.en", tmp_path / f"{name}.de"
  source.write_text("\n".join(lines) + "\n", encoding="utf-8")
  env = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", common.XLA_CACHE_ENV)}
  env.update(T2T_LITE_VERBOSE="1", TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="device_executable_persistor=1")
  mode = (["--decode_interactive"] if interactive
          else [f"--decode_from_file={source}", f"--decode_to_file={out}"])
  with open(source, encoding="utf-8") as stdin:
    run = subprocess.run([str(BIN / "t2t-lite-decoder"), f"--output_dir={model_dir}", *mode,
                          "--decode_hparams=beam_size=2,batch_size=1", f"--xla_cache_dir={cache}"],
                         stdin=stdin, capture_output=True, text=True, env=env, timeout=900)
  assert run.returncode == 0, run.stderr[-3000:]
  outputs = run.stdout if interactive else out.read_text(encoding="utf-8")
  return outputs.split("\n")[:-1], run.stderr


def _entries(cache):
  """{entry path: modification time} in the order they were written."""
  return dict(sorted(((p, p.stat().st_mtime_ns) for p in pathlib.Path(cache).rglob("*.pb")),
                     key=lambda item: item[1]))


def test_a_later_decoder_process_loads_a_program_in_another_order_and_prunes_a_damaged_one(
    tiny_model_dir, tmp_path):
  model_dir, _ = tiny_model_dir
  cache = tmp_path / "cache"
  # 1. Compiles two shapes (the short line's, then the long one's), writing one entry each, whole,
  # in one folder of this TensorFlow, CPU and XLA flags.
  (short, long), log = _decode(model_dir, tmp_path, cache, [SHORT, LONG], "first")
  assert LOADED not in log
  written = _entries(cache)
  (folder,) = cache.iterdir()
  assert folder.name == xla_cache.environment_key({}) and len(written) == 2
  assert all(xla_cache.entry_problem(str(path)) is None for path in written)
  # 2. The short shape's entry cut short (a full disk, a copy cut short), then the long line and
  # the short one, in that order: the damaged entry is deleted at start (before TensorFlow could
  # read it); the long shape, now traced first (other uid numbers without `stable_names`), is
  # loaded, not compiled, nor rewritten; the short one is compiled again and written whole under
  # the same name. The same translations.
  damaged, kept = written
  damaged.write_bytes(damaged.read_bytes()[:damaged.stat().st_size // 2])
  again, log = _decode(model_dir, tmp_path, cache, [LONG, SHORT], "again", interactive=True)
  assert again == [long, short]
  assert f"deleted {damaged}" in log and log.count(LOADED) == 1, log[-3000:]
  entries = _entries(cache)
  assert list(entries) == [kept, damaged] and entries[kept] == written[kept]   # the kept one untouched
  assert xla_cache.entry_problem(str(damaged)) is None
