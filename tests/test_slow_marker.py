"""The fast subset stays honest: every file and test that tests/conftest.py marks slow exists
(a renamed file would silently move its slow tests into `-m "not slow"`), and the marker is
applied to them and to nothing else. The files conftest.py runs first (LONGEST_FIRST) exist and
come first."""

import pathlib
import re

import conftest

TESTS = pathlib.Path(__file__).resolve().parent


class Item:  # what conftest's hooks read of a test
  def __init__(self, file_name, name):
    self.path, self.name, self.marks = TESTS / file_name, name, []

  def add_marker(self, mark):
    self.marks.append(mark)


def test_slow_lists_name_existing_files_and_tests():
  for name in conftest.SLOW_FILES:
    assert (TESTS / name).is_file(), f"SLOW_FILES names a missing file: {name}"
  for test_id in conftest.SLOW_TESTS:
    file_name, test_name = test_id.split("::")
    text = (TESTS / file_name).read_text(encoding="utf-8")
    assert re.search(rf"^def {test_name}\(", text, re.M), f"SLOW_TESTS names a missing test: {test_id}"


def test_longest_first_names_existing_files_once():
  assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)
  for name in conftest.LONGEST_FIRST:
    assert (TESTS / name).is_file(), f"LONGEST_FIRST names a missing file: {name}"


def test_marker_follows_the_lists(request):
  session_items = request.session.items
  by_file = {}
  for item in session_items:
    by_file.setdefault(item.path.name, []).append(item.get_closest_marker("slow") is not None)
  assert not any(by_file.get("test_slow_marker.py", []))
  for name, marks in by_file.items():
    if name in conftest.SLOW_FILES:
      assert all(marks), name


def test_the_hook_marks_the_listed_files_and_tests_and_nothing_else(request):
  """The marking itself, on stand-in tests of known names: whatever run this is (a run of this
  file alone collects no slow file, so the check above then looks at nothing). Every test of a
  SLOW_FILES file, and every parametrization of a SLOW_TESTS test, is slow; the other tests of
  that test's file and of a fast file are not."""
  slow_file = sorted(conftest.SLOW_FILES)[0]
  slow_test = sorted(conftest.SLOW_TESTS)[0]
  test_file, test_name = slow_test.split("::")
  assert test_file not in conftest.SLOW_FILES and "test_adam.py" not in conftest.SLOW_FILES
  expected = {(slow_file, "test_a"): True, (slow_file, "test_b[x-1]"): True,
              (test_file, test_name): True, (test_file, f"{test_name}[beam-2]"): True,
              (test_file, f"{test_name}_other"): False, (test_file, "test_other"): False,
              ("test_adam.py", test_name): False, ("test_adam.py", "test_a"): False}
  items = [Item(file_name, name) for file_name, name in expected]
  conftest.pytest_collection_modifyitems(request.config, items)
  assert {(item.path.name, item.name): [m.name for m in item.marks] == ["slow"] for item in items} == expected
  assert all(len(item.marks) <= 1 for item in items)


def _files_in_order(items):
  return list(dict.fromkeys(item.path.name for item in items))


def _assert_longest_first(files):
  listed = [name for name in files if name in conftest.LONGEST_FIRST]
  assert files[:len(listed)] == listed
  assert listed == [name for name in conftest.LONGEST_FIRST if name in listed]


def test_longest_files_come_first_in_their_order(request):
  _assert_longest_first(_files_in_order(request.session.items))  # this run's (maybe a few files)

  names = ["test_adam.py", conftest.LONGEST_FIRST[3], "test_hparams.py", conftest.LONGEST_FIRST[0],
           "test_vocab.py", conftest.LONGEST_FIRST[3]]
  items = [Item(name, f"test_{i}") for i, name in enumerate(names)]
  conftest.pytest_collection_modifyitems(request.config, items)
  conftest.pytest_collection_modifyitems_longest_first(items)
  assert [item.name for item in items] == ["test_3", "test_1", "test_5", "test_0", "test_2", "test_4"]
  _assert_longest_first(_files_in_order(items))
