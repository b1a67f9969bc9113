"""One small registry for problems, hparams sets and models (tensor2tensor's idea, not its sprawl).

    >>> from t2t_lite import registry
    >>> @registry.hparams_sets.register
    ... def my_set():
    ...     ...
    >>> registry.hparams_sets.get("my_set")

A duplicate name is an error; an unknown name is an error that lists what exists and suggests
the closest match.
"""

import difflib
import re


def snake_case(name):
  """`TranslateEndeWmt32k` -> `translate_ende_wmt32k` (T2T's naming of registered classes)."""
  name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
  return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


class RegistryError(KeyError):
  """An unknown or duplicate name. `str()` gives the whole message (KeyError would quote it)."""

  def __str__(self):
    return self.args[0] if self.args else ""


class Registry:
  """A name -> object map with helpful errors.

  Args:
    kind: what is registered ("problem", "hparams set", "model"), used in messages.
  """

  def __init__(self, kind):
    self.kind = kind
    self._entries = {}
    self._aliases = {}

  def register(self, obj=None, *, name=None, aliases=()):
    """Registers `obj` under `name` (default: snake_case of its `__name__`). Usable as decorator."""

    def _register(obj):
      key = name or snake_case(obj.__name__)
      for k in (key, *aliases):
        if k in self._entries or k in self._aliases:
          raise RegistryError(
              f"{self.kind} {k!r} is already registered; pick another name "
              f"(registered: {', '.join(self.names())}).")
      self._entries[key] = obj
      for alias in aliases:
        self._aliases[alias] = key
      return obj

    return _register(obj) if obj is not None else _register

  def canonical(self, name):
    """The registered name that `name` (an alias or a name) stands for."""
    if name in self._entries:
      return name
    if name in self._aliases:
      return self._aliases[name]
    raise RegistryError(self.unknown_message(name))

  def get(self, name):
    return self._entries[self.canonical(name)]

  def __contains__(self, name):
    return name in self._entries or name in self._aliases

  def names(self):
    return sorted(self._entries)

  def aliases(self):
    return dict(self._aliases)

  def unknown_message(self, name):
    candidates = list(self._entries) + list(self._aliases)
    close = difflib.get_close_matches(str(name), candidates, n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (f"unknown {self.kind} {name!r}.{hint} Registered {self.kind}s: "
            f"{', '.join(self.names())}" +
            (f" (aliases: {', '.join(f'{a}={t}' for a, t in sorted(self._aliases.items()))})"
             if self._aliases else "") + ".")


problems = Registry("problem")
hparams_sets = Registry("hparams set")
models = Registry("model")
