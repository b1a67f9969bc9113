"""Checks that what a command writes has the mode the umask gives new files and folders, as
`open` and `os.mkdir` would (0644 / 0755 under the usual 022), and not the private 0600 / 0700 of
a temporary file or folder renamed into place."""

import os
import stat


def umask() -> int:
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def modes_unlike_the_umasks(*roots) -> list[str]:
  """Every file and folder under `roots` (and each root) whose permission bits are not those the
  process's umask gives a new one; symbolic links are skipped."""
  mask = umask()
  found = []
  for root in roots:
    paths = [str(root)]
    if os.path.isdir(root):
      for folder, folders, files in os.walk(root):
        paths += [os.path.join(folder, name) for name in folders + files]
    for path in paths:
      info = os.lstat(path)
      if stat.S_ISLNK(info.st_mode):
        continue
      expected = (0o777 if stat.S_ISDIR(info.st_mode) else 0o666) & ~mask
      if stat.S_IMODE(info.st_mode) != expected:
        found.append(f"{path}: {oct(stat.S_IMODE(info.st_mode))}, not {oct(expected)}")
  return found
