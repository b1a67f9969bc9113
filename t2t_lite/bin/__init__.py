"""The t2t-lite-* commands: thin argument parsers over the library.

A console script imports its module from this package, so this runs before any command imports
TensorFlow: the commands start quietly (`quiet.install`, TensorFlow's start-up lines dropped
from stderr; `--verbose` or T2T_LITE_VERBOSE=1 shows them), and they end without the second
that Python's last garbage collections spend walking TensorFlow's objects (`gc.freeze` at exit,
after every other exit handler: what a command writes it closes or flushes itself, and the
interpreter still tears down its modules; only cyclic garbage is left to the operating system).
Importing t2t_lite.bin from Python changes nothing.
"""

import atexit
import gc
import os
import sys

from t2t_lite.bin import quiet

if os.path.basename((getattr(sys, "argv", None) or [""])[0]).startswith("t2t-lite-"):
  atexit.register(gc.freeze)  # registered first, so it runs last
  quiet.install()
