"""The fast subset stays honest: every file and test that tests/conftest.py marks slow exists
(a renamed file would silently move its slow tests into `-m "not slow"`), and the marker is
applied to them and to nothing else."""

import pathlib
import re

import conftest

TESTS = pathlib.Path(__file__).resolve().parent


def test_slow_lists_name_existing_files_and_tests():
  for name in conftest.SLOW_FILES:
    assert (TESTS / name).is_file(), f"SLOW_FILES names a missing file: {name}"
  for test_id in conftest.SLOW_TESTS:
    file_name, test_name = test_id.split("::")
    text = (TESTS / file_name).read_text(encoding="utf-8")
    assert re.search(rf"^def {test_name}\(", text, re.M), f"SLOW_TESTS names a missing test: {test_id}"


def test_marker_follows_the_lists(request):
  session_items = request.session.items
  by_file = {}
  for item in session_items:
    by_file.setdefault(item.path.name, []).append(item.get_closest_marker("slow") is not None)
  assert not any(by_file.get("test_slow_marker.py", []))
  for name, marks in by_file.items():
    if name in conftest.SLOW_FILES:
      assert all(marks), name
