"""The t2t-lite-* commands: thin argument parsers over the library.

A console script imports its module from this package, so this runs before any command imports
TensorFlow: the commands start quietly (`quiet.install`, TensorFlow's start-up lines dropped
from stderr; `--verbose` or T2T_LITE_VERBOSE=1 shows them). Importing t2t_lite.bin from Python
changes nothing.
"""

import os
import sys

from t2t_lite.bin import quiet

if os.path.basename((getattr(sys, "argv", None) or [""])[0]).startswith("t2t-lite-"):
  quiet.install()
