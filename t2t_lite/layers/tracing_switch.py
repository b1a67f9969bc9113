"""An implementation choice of the layers, on by default, that a benchmark (or a user on other
hardware) turns off for the functions traced inside a `with` block:

    with projection.transposed_gradients(False):
      step = tf.function(train_step)
      step(batch)                    # traced here: the choice is fixed into this graph
"""

import contextlib


class TracingSwitch:
  """`switch.enabled` is read by a layer when its call is traced; `with switch(False):` scopes a
  change (restored on exit, also on error)."""

  def __init__(self, what: str):
    self.what = what
    self.enabled = True

  @contextlib.contextmanager
  def __call__(self, enabled: bool):
    previous, self.enabled = self.enabled, bool(enabled)
    try:
      yield
    finally:
      self.enabled = previous

  def __repr__(self):
    return f"<TracingSwitch {self.what}: {'on' if self.enabled else 'off'}>"
