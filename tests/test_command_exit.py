"""The commands end without Python's last garbage collections over TensorFlow's objects
(t2t_lite/bin/__init__.py: `gc.freeze` among the exit handlers of a `t2t-lite-*` program, after
those registered once `t2t_lite.bin` is imported), and a program that only imports t2t_lite.bin
is left as it was."""

import subprocess
import sys

# Runs as a program named argv[0]: registers an exit handler before importing t2t_lite.bin (so it
# runs after the handlers registered by that import), leaves cyclic garbage with a finalizer
# behind, and prints, at its exit, how many objects are frozen (0 when nothing froze them).
PROBE = """
import atexit, gc, sys
sys.argv[0] = {argv0!r}
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count(), flush=True))
import t2t_lite.bin

class Cycle:
  def __del__(self):
    print("finalized", flush=True)

a, b = Cycle(), Cycle()
a.other, b.other = b, a
del a, b
print("done", flush=True)
"""


def _run(argv0):
  result = subprocess.run([sys.executable, "-c", PROBE.format(argv0=argv0)], capture_output=True,
                          text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout.splitlines()


def test_a_command_freezes_the_heap_at_exit():
  lines = _run("/usr/local/bin/t2t-lite-probe")
  assert lines[0] == "done", lines
  frozen = [line for line in lines if line.startswith("frozen at exit:")]
  assert len(frozen) == 1 and int(frozen[0].split(":")[1]) > 0, lines


def test_importing_the_commands_package_from_python_changes_nothing():
  lines = _run("/usr/local/bin/python-probe")
  assert "frozen at exit: 0" in lines, lines
  # The cycle is still collected at exit, as in any Python program.
  assert "finalized" in lines, lines
