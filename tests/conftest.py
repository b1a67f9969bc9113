"""Shared test setup: quiet TensorFlow, the data folder, and the backend_independent marker.

Tests marked `backend_independent` use only keras.ops/numpy and run on both the TensorFlow and
the JAX backends (scripts/test.sh runs them twice).
"""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_configure(config):
  config.addinivalue_line("markers", "backend_independent: runs on the TensorFlow and JAX backends")


@pytest.fixture(scope="session")
def shared_data():
  if not SHARED_DATA.is_dir():
    pytest.skip(f"real corpora not found at {SHARED_DATA} (see README, 'Data')")
  return SHARED_DATA
