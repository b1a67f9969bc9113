"""t2t-lite-serve: TF Serving's REST API against the decoder and the SavedModel, dynamic batching,
bad requests, overload, a load test on 127.0.0.1, and SIGTERM with requests in flight.

The references: `t2t-lite-decoder`'s output file, the exported SavedModel's own signatures called
directly, and `attention_pictures.attention_for_pair`. Waits are on events (a gate the test
opens, a line the server prints, a figure of /health), never on how fast anything runs; the only
timeouts are generous guards against a hang.
"""

import base64
import concurrent.futures
import itertools
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from starlette.testclient import TestClient

from t2t_lite.bin import decoder as decoder_cli
from t2t_lite.bin import serve as serve_cli
from t2t_lite.decoding import attention_pictures, buckets
from t2t_lite.serving import app as app_lib
from t2t_lite.serving import backends, rest
from t2t_lite.serving.batching import (BatchingOptions, BatchQueue, OverloadedError, QueueClosedError,
                                       WarmingUpError)

from conftest import TINY_EXPORT_DECODE

DECODE = f"{TINY_EXPORT_DECODE},xla=false"   # the decoder's, as the shared export's (tests/conftest.py)
SENTENCES = ["A man is riding a bike .", "", "Two dogs play in the snow while a child watches them .",
             "A woman .", "A very long sentence " + "with many many words " * 40 + ".",
             "Eine Frau mit \u00e4\u00f6\u00fc und \u00df .",
             "People are sitting on a bench near the water ."]
LIMITS = rest.Limits(max_body_bytes=8192, max_sentences_per_request=16, max_sentence_chars=1500)
HANG_GUARD = 600   # seconds: only a guard against a hang, never a speed requirement


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
  return str(tiny_model_dir[0])


@pytest.fixture(scope="module")
def backend(model_dir, tiny_decode_defaults):
  return backends.ModelDirBackend(model_dir, tiny_decode_defaults.parse(DECODE),
                                  BatchingOptions(max_batch_size=8).batch_sizes)


@pytest.fixture(scope="module")
def client(backend):
  with TestClient(app_lib.create_app(backend, "ende", BatchingOptions(max_batch_size=8), LIMITS)) as c:
    yield c


@pytest.fixture(scope="module")
def exported(tiny_export):
  """tests/conftest.py's `tiny_export`: the model directory exported with DECODE's beam and
  extra_length (the search compiled with XLA), as version 7."""
  return tiny_export


@pytest.fixture(scope="module")
def saved_backend(exported):
  backend = backends.SavedModelBackend(str(exported))   # the base folder: its latest version
  assert backend.version == "7"
  return backend


@pytest.fixture(scope="module")
def saved_client(saved_backend):
  with TestClient(app_lib.create_app(saved_backend, "ende", BatchingOptions(max_batch_size=8),
                                     LIMITS)) as c:
    yield c


@pytest.fixture(scope="module")
def decoded(model_dir, tmp_path_factory):
  """t2t-lite-decoder's translations of SENTENCES (same decode hparams)."""
  folder = tmp_path_factory.mktemp("serve_decoder")
  (folder / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
  assert decoder_cli.main([f"--output_dir={model_dir}", f"--decode_hparams={DECODE}",
                           f"--decode_from_file={folder / 'in.txt'}",
                           f"--decode_to_file={folder / 'out.txt'}"]) == 0
  lines = (folder / "out.txt").read_text(encoding="utf-8").split("\n")
  assert len(lines) >= len(SENTENCES) and all(lines[i] for i in (0, 2, 3, 4, 5, 6))
  return lines[:len(SENTENCES)]


def predict(client, body, name="ende"):
  response = client.post(f"/v1/models/{name}:predict", json=body)
  assert response.status_code == 200, response.text
  return response.json()


# --- TF Serving's API against the decoder and the SavedModel. -----------------------------------

def test_row_and_columnar_requests_give_the_decoders_translations(client, backend, decoded):
  # The Translator's own best-only beams of SENTENCES (the backend's decode hparams): the served
  # score is the best (first) beam's. Beam 2 gives each line more than one beam, and on some line
  # the others score differently, so a score taken from another beam is caught.
  beams = backend.translator.translate_beams(SENTENCES, best_only=True)
  assert all(len(line) == 2 for i, line in enumerate(beams) if i != 1) and beams[1] == []
  assert any(line[-1][1] != line[0][1] for line in beams if line)
  best_scores = [line[0][1] if line else 0.0 for line in beams]
  b64 = [{"b64": base64.b64encode(s.encode("utf-8")).decode("ascii")} for s in SENTENCES]
  for instances in (SENTENCES, [{"text": s} for s in SENTENCES], b64):
    predictions = predict(client, {"instances": instances})["predictions"]
    assert [p["translations"] for p in predictions] == decoded
    assert all(isinstance(p["scores"], float) for p in predictions)
    np.testing.assert_allclose([p["scores"] for p in predictions], best_scores, rtol=1e-5, atol=1e-6)
    assert predictions[1] == {"translations": "", "scores": 0.0}
  for inputs in ({"text": SENTENCES}, SENTENCES):
    outputs = predict(client, {"inputs": inputs, "signature_name": "serving_default"})["outputs"]
    assert outputs["translations"] == decoded and len(outputs["scores"]) == len(SENTENCES)
    np.testing.assert_allclose(outputs["scores"], best_scores, rtol=1e-5, atol=1e-6)


def test_nbest_equals_the_saved_models_nbest_signature(client, saved_client, saved_backend, decoded):
  import tensorflow as tf
  # The signatures of the SavedModel the server loaded, called directly (a second load of the
  # same files would compile the same XLA programs again).
  loaded = saved_backend._loaded  # pylint: disable=protected-access
  nbest = loaded.signatures["nbest"](text=tf.constant(SENTENCES))
  texts = [[t.decode("utf-8") for t in row] for row in nbest["translations"].numpy()]
  scores = nbest["scores"].numpy().tolist()
  best = loaded.signatures["serving_default"](text=tf.constant(SENTENCES))

  served = predict(saved_client, {"signature_name": "nbest", "instances": SENTENCES})["predictions"]
  assert [p["translations"] for p in served] == texts
  assert [p["scores"] for p in served] == scores              # float32 values, exactly
  columnar = predict(saved_client, {"signature_name": "nbest", "inputs": {"text": SENTENCES}})
  assert columnar["outputs"] == {"translations": texts, "scores": scores}
  default = predict(saved_client, {"inputs": {"text": SENTENCES}})["outputs"]
  assert default["translations"] == [t.decode("utf-8") for t in best["translations"].numpy()]
  assert default["scores"] == best["scores"].numpy().tolist()
  assert default["translations"] == decoded                   # the SavedModel decodes as the decoder

  from_model_dir = predict(client, {"signature_name": "nbest", "instances": SENTENCES})["predictions"]
  assert [p["translations"] for p in from_model_dir] == texts
  assert all(len(p["translations"]) == 2 for p in from_model_dir)
  np.testing.assert_allclose([p["scores"] for p in from_model_dir], scores, atol=1e-4)


def test_model_status_and_metadata(client, saved_client, exported):
  status = client.get("/v1/models/ende").json()
  assert status == {"model_version_status": [{"version": "30", "state": "AVAILABLE",
                                              "status": {"error_code": "OK", "error_message": ""}}]}
  assert client.get("/v1/models/ende/versions/30").status_code == 200
  for client_, version in ((client, "30"), (saved_client, "7")):
    metadata = client_.get(f"/v1/models/ende/versions/{version}/metadata").json()
    assert metadata["model_spec"] == {"name": "ende", "signature_name": "", "version": version}
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    for name, sizes in (("serving_default", ["-1"]), ("nbest", ["-1", "2"])):   # 2 beams
      signature = signatures[name]
      assert signature["method_name"] == "tensorflow/serving/predict"
      assert signature["inputs"]["text"]["dtype"] == "DT_STRING"
      assert [d["size"] for d in signature["inputs"]["text"]["tensor_shape"]["dim"]] == ["-1"]
      assert signature["outputs"]["translations"]["dtype"] == "DT_STRING"
      assert signature["outputs"]["scores"]["dtype"] == "DT_FLOAT"
      for output in ("translations", "scores"):
        assert [d["size"] for d in signature["outputs"][output]["tensor_shape"]["dim"]] == sizes
  # The SavedModel's metadata is its own signature defs (real tensor names), as TF Serving shows.
  saved = saved_client.get("/v1/models/ende/metadata").json()["metadata"]["signature_def"]["signature_def"]
  assert saved["serving_default"]["inputs"]["text"]["name"].endswith(":0")
  assert saved_client.get("/v1/models/ende").json()["model_version_status"][0]["version"] == "7"
  health = client.get("/health").json()
  assert health["status"] == "ok" and health["requests_in_flight"] == 0


def test_attention_endpoint_equals_attention_pictures(client, backend, saved_client):
  source, target = "A man is riding a bike .", "Ein Mann fährt Fahrrad ."
  response = client.post("/api/attention", json={"source": source, "target": target})
  assert response.status_code == 200, response.text
  served = response.json()
  weights, source_tokens, target_tokens, _ = attention_pictures.attention_for_pair(
      backend.translator.model, backend.vocab, source, target)
  assert served["source_tokens"] == source_tokens and served["target_tokens"] == target_tokens
  assert source_tokens[-1] == "</s>" and target_tokens[-1] == "</s>"
  expected = [np.asarray(layer) for layer in weights["encoder_decoder"]]
  assert len(served["encoder_decoder"]) == len(expected) == 2
  for got, want in zip(served["encoder_decoder"], expected):
    assert np.shape(got) == want.shape == (4, len(target_tokens), len(source_tokens))
    np.testing.assert_allclose(got, want, atol=1e-4)
    np.testing.assert_allclose(np.sum(got, axis=-1), 1.0, atol=1e-3)   # each query's softmax
  unsupported = saved_client.post("/api/attention", json={"source": source, "target": target})
  assert unsupported.status_code == 501 and "--output_dir" in unsupported.json()["error"]
  not_parsing = client.post("/api/tree", json={"source": source, "output": target})
  assert not_parsing.status_code == 501 and "parsing" in not_parsing.json()["error"]


def test_page_and_its_files_are_served(client):
  page = client.get("/")
  assert page.status_code == 200 and "text/html" in page.headers["content-type"]
  for name in ("app.js", "style.css"):
    assert f"/static/{name}" in page.text
    assert client.get(f"/static/{name}").status_code == 200
  info = client.get("/api/info").json()
  assert info["model_name"] == "ende" and info["attention"] is True and info["parsing"] is False
  assert info["decode_hparams"]["beam_size"] == 2
  assert info["batching"]["allowed_batch_sizes"] == [1, 2, 4, 8]


# --- Bad requests: 4xx with a message, then still serving. ---------------------------------------

BAD_REQUESTS = [  # (id, path, body bytes, status, words of the message)
    ("invalid-json", ":predict", b'{"instances": ["a"', 400, "not valid JSON"),
    ("invalid-utf8", ":predict", b'{"instances": ["caf\xe9"]}', 400, "not valid UTF-8"),
    ("empty-body", ":predict", b"", 400, "empty"),
    ("not-an-object", ":predict", b'["a"]', 400, "JSON object"),
    ("unknown-field", ":predict", b'{"instances": ["a"], "examples": []}', 400, "unknown field"),
    ("both-formats", ":predict", b'{"instances": ["a"], "inputs": ["a"]}', 400, "not both"),
    ("no-input", ":predict", b'{"signature_name": "nbest"}', 400, "exactly one"),
    ("instances-not-a-list", ":predict", b'{"instances": "a"}', 400, "must be a list"),
    ("number-instance", ":predict", b'{"instances": [3]}', 400, "must be a string"),
    ("wrong-input-name", ":predict", b'{"instances": [{"sentence": "a"}]}', 400, "only input"),
    ("inputs-scalar", ":predict", b'{"inputs": {"text": "a"}}', 400, "list of strings"),
    ("inputs-wrong-name", ":predict", b'{"inputs": {"x": ["a"]}}', 400, "only input"),
    ("bad-b64", ":predict", b'{"instances": [{"b64": "%%%"}]}', 400, "base64"),
    ("unknown-signature", ":predict", b'{"signature_name": "x", "instances": ["a"]}', 400,
     "not found in signature def"),
    ("no-sentences", ":predict", b'{"instances": []}', 400, "no sentences"),
    ("too-many-sentences", ":predict", json.dumps({"instances": ["a"] * 17}).encode(), 413,
     "--max_sentences_per_request"),
    ("sentence-too-long", ":predict", json.dumps({"instances": ["a" * 1501]}).encode(), 413,
     "--max_sentence_chars"),
    ("body-too-big", ":predict", json.dumps({"instances": ["a b " * 250] * 12}).encode(), 413,
     "--max_body_bytes"),
    ("unknown-model", "/../other:predict", b'{"instances": ["a"]}', 404,
     "Servable not found for request: Latest(other)"),
    ("unknown-version", "/versions/9:predict", b'{"instances": ["a"]}', 404, "Specific(ende, 9)"),
    ("not-predict", ":classify", b'{"instances": ["a"]}', 404, ":predict"),
    ("attention-fields", "/api/attention", b'{"source": "a"}', 400, "exactly the fields"),
    ("attention-invalid-json", "/api/attention", b"{", 400, "not valid JSON"),
    ("attention-empty", "/api/attention", b'{"source": " ", "target": "a"}', 400, "must not be empty"),
    ("attention-not-a-string", "/api/attention", b'{"source": ["a"], "target": "a"}', 400,
     "must be a string"),
    ("attention-too-many-chars", "/api/attention",
     json.dumps({"source": "a", "target": "a" * 1501}).encode(), 413, "--max_sentence_chars"),
    ("attention-too-many-pieces", "/api/attention",   # the backend's BackendError
     json.dumps({"source": "a " * 700, "target": "a"}).encode(), 400, "the attention view takes at most"),
]


@pytest.mark.parametrize("path, body, status, message", [case[1:] for case in BAD_REQUESTS],
                         ids=[case[0] for case in BAD_REQUESTS])
def test_bad_request_gets_4xx_with_a_message_and_the_server_keeps_serving(client, path, body, status,
                                                                          message):
  url = path if path.startswith("/api") else "/v1/models/ende" + path
  url = url.replace("/v1/models/ende/../other", "/v1/models/other")
  response = client.post(url, content=body, headers={"Content-Type": "application/json"})
  assert response.status_code == status, response.text
  assert message in response.json()["error"]
  assert predict(client, {"instances": ["A woman ."]})["predictions"][0]["translations"]


def test_a_chunked_body_over_the_limit_gets_413_while_it_is_read(client):
  """A body sent without Content-Length (chunked), which BAD_REQUESTS' bodies never are: the
  limit is counted as it streams in (`read_body`), not taken from a header. Under the limit the
  same request is answered; over it, 413, and the server goes on serving."""
  sentences = ["A woman ."] * 4
  body = json.dumps({"instances": sentences}).encode()

  def chunks(data):  # a generator body: httpx sends it chunked, without Content-Length
    yield from (data[i:i + 64] for i in range(0, len(data), 64))

  served = client.post("/v1/models/ende:predict", content=chunks(body),
                       headers={"Content-Type": "application/json"})
  assert served.request.headers.get("content-length") is None
  assert served.status_code == 200, served.text
  assert len(served.json()["predictions"]) == len(sentences)
  big = json.dumps({"instances": ["a b " * 250] * 12}).encode()
  assert len(big) > LIMITS.max_body_bytes
  response = client.post("/v1/models/ende:predict", content=chunks(big),
                         headers={"Content-Type": "application/json"})
  assert response.request.headers.get("content-length") is None
  assert response.status_code == 413, response.text
  assert "--max_body_bytes" in response.json()["error"]
  assert predict(client, {"instances": ["A woman ."]})["predictions"][0]["translations"]


def test_methods_and_paths_outside_the_api_get_json_errors(client):
  for method, url, status in (("PUT", "/v1/models/ende:predict", 405), ("GET", "/nowhere", 404),
                              ("GET", "/v1/models/ende:predict", 404), ("GET", "/api/attention", 405)):
    response = client.request(method, url)
    assert response.status_code == status and response.json()["error"], (method, url)
  assert client.get("/health").json()["status"] == "ok"


# --- The batching queue (its own logic: a recording stand-in for the model). ---------------------

class GatedDecode:
  """A decode function that blocks on `gate` and records each batch; result = sentence.upper()."""

  def __init__(self, decode=None):
    self.gate = threading.Event()
    self.started = threading.Event()
    self.batches = []
    self._decode = decode or (lambda sentences, best_only=False: [s.upper() for s in sentences])

  def __call__(self, sentences, **kwargs):
    self.batches.append(list(sentences))
    self.started.set()
    assert self.gate.wait(HANG_GUARD)
    return self._decode(sentences, **kwargs)


def test_queue_decodes_waiting_requests_together_each_answer_to_its_own():
  decode = GatedDecode()
  batcher = BatchQueue(decode, BatchingOptions(max_batch_size=4, batch_timeout_micros=10**9))
  first = batcher.submit(["a"])      # the timeout is huge: only a full batch (or closing) goes
  assert batcher.queued == 1 and not decode.started.is_set()
  rest_ = [batcher.submit([f"r{i}s{j}" for j in range(i)]) for i in (1, 2, 3)]   # 6 sentences
  assert decode.started.wait(HANG_GUARD)   # the first 4 made a full batch; 3 wait for more
  decode.gate.set()
  assert [f.result(HANG_GUARD) for f in first] == ["A"]
  batcher.close()                            # closing decodes the partial batch left waiting
  assert [[f.result(0) for f in futures] for futures in rest_] == [
      ["R1S0"], ["R2S0", "R2S1"], ["R3S0", "R3S1", "R3S2"]]
  assert decode.batches == [["a", "r1s0", "r2s0", "r2s1"], ["r3s0", "r3s1", "r3s2"]]


def test_queue_refuses_what_does_not_fit_and_closes_after_draining():
  decode = GatedDecode()
  batcher = BatchQueue(decode, BatchingOptions(max_batch_size=2, batch_timeout_micros=0,
                                               max_enqueued_batches=2))
  running = batcher.submit(["x"])
  assert decode.started.wait(HANG_GUARD)          # "x" is being decoded, the queue is empty
  waiting = batcher.submit(["a", "b", "c"])       # 3 of the 4 places
  with pytest.raises(OverloadedError, match="overloaded"):
    batcher.submit(["d", "e"])
  assert batcher.queued == 3                      # nothing of the refused request was queued
  batcher.close(wait=False)                       # no new sentences; the queued ones are kept
  with pytest.raises(QueueClosedError, match="shutting down"):
    batcher.submit(["f"])
  decode.gate.set()
  batcher.close()                                 # returns once the queue is drained
  assert [f.result(0) for f in running + waiting] == ["X", "A", "B", "C"]
  assert decode.batches == [["x"], ["a", "b"], ["c"]]


def test_a_failing_batch_fails_its_requests_only():
  calls = []

  def decode(sentences):
    calls.append(sentences)
    if "boom" in sentences:
      raise RuntimeError("decode failed")
    return [s * 2 for s in sentences]

  batcher = BatchQueue(decode, BatchingOptions(max_batch_size=1, batch_timeout_micros=0))
  bad, good = batcher.submit(["boom"]), batcher.submit(["ok"])
  with pytest.raises(RuntimeError, match="decode failed"):
    bad[0].result(HANG_GUARD)
  assert good[0].result(HANG_GUARD) == "okok"
  batcher.close()


def test_a_batch_of_best_only_requests_is_decoded_best_only():
  """Requests that want the best translation only (serving_default) get a search that can stop
  sooner, when every request of their batch wants only that; a batch with an n-best request in it
  is decoded for the n-best lists."""
  calls = []

  def decode(sentences, best_only=False):
    calls.append((list(sentences), best_only))
    return [s.upper() for s in sentences]

  batcher = BatchQueue(decode, BatchingOptions(max_batch_size=2, batch_timeout_micros=10**9))
  best = batcher.submit(["a", "b"], best_only=True)                   # a full batch of 2
  assert [f.result(HANG_GUARD) for f in best] == ["A", "B"]
  mixed = batcher.submit(["c"], best_only=True) + batcher.submit(["d"])
  assert [f.result(HANG_GUARD) for f in mixed] == ["C", "D"]
  batcher.close()
  assert calls == [(["a", "b"], True), (["c", "d"], False)]


def test_queue_refuses_requests_until_the_warm_up_is_over():
  gate, started = threading.Event(), threading.Event()

  def warm_up():
    started.set()
    assert gate.wait(HANG_GUARD)

  batcher = BatchQueue(lambda sentences: [s.upper() for s in sentences], warm_up=warm_up)
  assert started.wait(HANG_GUARD)
  with pytest.raises(WarmingUpError, match="warming up"):
    batcher.submit(["a"])
  assert batcher.queued == 0 and not batcher.ready.is_set()
  gate.set()
  assert batcher.ready.wait(HANG_GUARD)
  assert [f.result(HANG_GUARD) for f in batcher.submit(["a", "b"])] == ["A", "B"]
  batcher.close()

  def failing():
    raise RuntimeError("no memory for the warm-up")

  batcher = BatchQueue(lambda sentences: sentences, warm_up=failing)   # serves anyway
  assert batcher.ready.wait(HANG_GUARD)
  assert batcher.warm_up_error == "RuntimeError: no memory for the warm-up"
  assert [f.result(HANG_GUARD) for f in batcher.submit(["x"])] == ["x"]
  batcher.close()
  assert batcher.sentences == 1 and batcher.batches == 1


def test_batching_options_check_their_values():
  assert BatchingOptions(max_batch_size=12).batch_sizes == (1, 2, 4, 8, 12)
  assert BatchingOptions().batch_sizes == (1, 2, 4, 8, 16)   # the default, for a 2-core CPU
  assert BatchingOptions(max_batch_size=8, allowed_batch_sizes=(2, 8)).padded_size(3) == 8
  assert BatchingOptions(max_batch_size=8, max_enqueued_batches=3).capacity == 24
  # Each refused by its own check: the message names the option, the rule and the value given.
  sizes_rule = ("allowed_batch_sizes must increase, start at >= 1 and end with max_batch_size=8 "
                "(TF Serving's rule), got ")
  for bad, message in (
      ({"max_batch_size": 0}, "max_batch_size must be >= 1, got 0"),
      ({"batch_timeout_micros": -1}, "batch_timeout_micros must be >= 0, got -1"),
      ({"max_enqueued_batches": 0}, "max_enqueued_batches must be >= 1, got 0"),
      ({"max_batch_size": 8, "allowed_batch_sizes": (4, 2, 8)}, sizes_rule + "[4, 2, 8]"),  # decreases
      ({"max_batch_size": 8, "allowed_batch_sizes": (0, 8)}, sizes_rule + "[0, 8]"),        # below 1
      ({"max_batch_size": 8, "allowed_batch_sizes": (2, 4)}, sizes_rule + "[2, 4]")):       # ends short
    with pytest.raises(ValueError, match=re.escape(message)):
      BatchingOptions(**bad)


# --- Over HTTP on 127.0.0.1: overload, batching of concurrent requests, the load test. -----------

class GatedBackend:
  """The real backend behind a gate (see GatedDecode)."""

  def __init__(self, backend):
    self._backend = backend
    self.decode = GatedDecode(backend.decode)

  def __getattr__(self, name):
    return getattr(self._backend, name)


def post(url, body, timeout=HANG_GUARD):
  """(status, JSON) of a POST, 4xx/5xx included."""
  request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"),
                                   headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(request, timeout=timeout) as response:
      return response.status, json.loads(response.read())
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read())


def get(url):
  with urllib.request.urlopen(url, timeout=HANG_GUARD) as response:
    return json.loads(response.read())


def get_status(url):
  try:
    with urllib.request.urlopen(url, timeout=HANG_GUARD) as response:
      return response.status
  except urllib.error.HTTPError as e:
    return e.code


def wait_for(condition, what):
  """Polls `condition()` (a figure the server reports) until true; fails only after HANG_GUARD."""
  deadline = time.monotonic() + HANG_GUARD
  while not condition():
    assert time.monotonic() < deadline, f"gave up waiting for {what}"
    time.sleep(0.02)


def reference(backend, sentences):
  """The decoder's (Translator's) beams of each sentence: {sentence: (texts, scores)}."""
  unique = sorted(set(sentences))
  beams = backend.translator.translate_beams(unique)
  return {s: ([t for t, _ in b], [score for _, score in b]) for s, b in zip(unique, beams)}


def test_overload_gets_503_and_concurrent_requests_are_batched(backend):
  gated = GatedBackend(backend)
  options = BatchingOptions(max_batch_size=2, batch_timeout_micros=0, max_enqueued_batches=2)
  sentences = ["A man .", "A dog runs .", "Two women talk .", "A child eats .", "The sun ."]
  expected = reference(backend, sentences)
  with app_lib.running(app_lib.create_app(gated, "ende", options, LIMITS)) as url, \
      concurrent.futures.ThreadPoolExecutor(8) as pool:
    predict_url = f"{url}/v1/models/ende:predict"
    nbest = lambda s: post(predict_url, {"signature_name": "nbest", "instances": [s]})
    first = pool.submit(nbest, sentences[0])
    assert gated.decode.started.wait(HANG_GUARD)            # decoding, gate closed
    queued = [pool.submit(nbest, s) for s in sentences[1:]]  # 4 sentences: the queue is full
    wait_for(lambda: get(f"{url}/health")["queued_sentences"] == 4, "4 queued sentences")
    status, body = post(predict_url, {"instances": ["One too many ."]})
    assert status == 503 and "overloaded" in body["error"]
    gated.decode.gate.set()
    for sentence, future in zip(sentences, [first] + queued):
      status, body = future.result(HANG_GUARD)
      assert status == 200
      prediction = body["predictions"][0]
      assert prediction["translations"] == expected[sentence][0]
      np.testing.assert_allclose(prediction["scores"], expected[sentence][1], atol=1e-4)
    # The four that waited were decoded two by two (max_batch_size), not one by one.
    assert [len(batch) for batch in gated.decode.batches] == [1, 2, 2]
    health = get(f"{url}/health")
    assert health["status"] == "ok" and health["requests_in_flight"] == 0 and health["batches"] == 3
    assert post(predict_url, {"instances": ["A man ."]})[0] == 200


LOAD_CLIENTS = 16
LOAD_POOL = 40          # distinct sentences: the shortest of the slice's first 100 test lines
LOAD_SENTENCES = 120    # in requests of 1 to 4 sentences: about 3 requests per client
LOAD_ATOL = 1e-4        # the served scores against the reference (as the overload test's)


def test_load_every_request_answered_once_with_its_own_translations(backend, multi30k_slice):
  """16 concurrent clients, requests of 1 to 4 sentences: each answer matches its own sentences,
  in order (translations and scores: the tiny model gives many sentences the same text, their
  scores still tell them apart), none lost or duplicated (the server decoded each sentence
  once), the server healthy after. Speed is scripts/bench_serve.py's business, not this test's."""
  lines = (multi30k_slice / "test_2016_flickr.en").read_text(encoding="utf-8").split("\n")
  pool_ = sorted([line for line in lines if line.strip()][:100], key=len)[:LOAD_POOL]
  expected = reference(backend, pool_)
  # Mix-ups must show: any two sentences with the same beam texts have scores more than
  # 2 * LOAD_ATOL apart somewhere, so that an answer carrying the other one's scores (off by at
  # most LOAD_ATOL of its own) fails the comparison below. (Tiny model: closest such pair
  # ~2.4e-3 apart, while the served scores match the reference to ~0 on CPU.)
  same_text_gaps = [np.max(np.abs(np.subtract(a[1], b[1])))
                    for a, b in itertools.combinations(expected.values(), 2) if a[0] == b[0]]
  assert min(same_text_gaps, default=np.inf) > 2 * LOAD_ATOL
  rng = np.random.default_rng(0)
  plans = [[] for _ in range(LOAD_CLIENTS)]   # per client, its requests' sentences
  total = requests = 0
  while total < LOAD_SENTENCES:
    size = int(rng.integers(1, 5))
    requests += 1
    plans[requests % LOAD_CLIENTS].append(
        [pool_[int(i)] for i in rng.integers(len(pool_), size=size)])
    total += size
  options = BatchingOptions(max_batch_size=8, batch_timeout_micros=2000, max_enqueued_batches=64)
  with app_lib.running(app_lib.create_app(backend, "ende", options, LIMITS)) as url:
    predict_url = f"{url}/v1/models/ende:predict"

    def client(plan):
      answers = []
      for sentences in plan:
        answers.append(post(predict_url, {"signature_name": "nbest", "instances": sentences}))
      return answers

    with concurrent.futures.ThreadPoolExecutor(LOAD_CLIENTS) as pool:
      results = list(pool.map(client, plans))
    health = get(f"{url}/health")
  answered = 0
  for plan, answers in zip(plans, results):
    assert len(answers) == len(plan)
    for sentences, (status, body) in zip(plan, answers):
      assert status == 200, body
      assert len(body["predictions"]) == len(sentences)
      for sentence, prediction in zip(sentences, body["predictions"]):
        assert prediction["translations"] == expected[sentence][0], sentence
        np.testing.assert_allclose(prediction["scores"], expected[sentence][1],
                                   atol=LOAD_ATOL)
        answered += 1
  assert answered == total
  assert health["status"] == "ok" and health["requests_in_flight"] == 0
  assert health["queued_sentences"] == 0 and health["decoding_sentences"] == 0
  assert health["sentences"] == total                     # each sentence decoded once


class GatedWarmUp:
  """A backend whose warm-up waits for `gate` (the real warm-up then runs), logging to `lines`."""

  def __init__(self, backend):
    self._backend = backend
    self.warms_up = True
    self.gate, self.started, self.lines = threading.Event(), threading.Event(), []

  def warm_up(self):
    self.started.set()
    assert self.gate.wait(HANG_GUARD)
    return self._backend.warm_up(log=self.lines.append)

  def __getattr__(self, name):
    return getattr(self._backend, name)


def test_warm_up_compiles_the_buckets_before_the_server_takes_requests(model_dir, backend,
                                                                        tiny_decode_defaults):
  """Until the warm-up is over: /health 503 "warming up", the model LOADING, predictions 503.
  After it, requests within the warmed buckets (batch 1 or 2, up to 16 subwords) trace no new
  search shape; a longer source does (width 32), so the count can tell."""
  fresh = backends.ModelDirBackend(model_dir, tiny_decode_defaults.parse(DECODE), (1, 2),
                                   warmup_max_width=16)
  assert fresh.warms_up and fresh.translator.tracing_count == 0
  short = ["A man .", "Two dogs play .", "A woman reads a book ."]
  long_ = "A man in a blue shirt and a woman in a red dress are walking their two dogs in the park ."
  assert len(fresh.vocab.encode(long_)) + 1 > 16 >= max(len(fresh.vocab.encode(s)) + 1 for s in short)
  expected = reference(backend, short + [long_])
  gated = GatedWarmUp(fresh)
  options = BatchingOptions(max_batch_size=2, batch_timeout_micros=0)
  with app_lib.running(app_lib.create_app(gated, "ende", options, LIMITS)) as url:
    predict_url = f"{url}/v1/models/ende:predict"
    assert gated.started.wait(HANG_GUARD)
    with pytest.raises(urllib.error.HTTPError) as warming:
      get(f"{url}/health")
    assert warming.value.code == 503 and json.loads(warming.value.read())["status"] == "warming up"
    assert get(f"{url}/v1/models/ende")["model_version_status"][0]["state"] == "LOADING"
    status, body = post(predict_url, {"instances": short[:1]})
    assert status == 503 and "warming up" in body["error"]
    gated.gate.set()
    wait_for(lambda: get_status(f"{url}/health") == 200, "the end of the warm-up")
    assert get(f"{url}/v1/models/ende")["model_version_status"][0]["state"] == "AVAILABLE"
    assert len(gated.lines) == 3
    assert gated.lines[0].startswith("warm-up 1/2: batch 1 x width 16 ready in ")
    assert gated.lines[1].startswith("warm-up 2/2: batch 2 x width 16 ready in ")
    assert gated.lines[-1].startswith("warm-up: 2 shapes in ")
    assert fresh.translator.tracing_count == 2
    for sentences in (short[:1], short[:2], short[1:]):        # batches of 1 and 2 (two requests)
      status, body = post(predict_url, {"signature_name": "nbest", "instances": sentences})
      assert status == 200
      assert [p["translations"] for p in body["predictions"]] == [expected[s][0] for s in sentences]
    assert fresh.translator.tracing_count == 2                 # no shape traced under requests
    status, body = post(predict_url, {"signature_name": "nbest", "instances": [long_]})
    assert status == 200 and body["predictions"][0]["translations"] == expected[long_][0]
    assert fresh.translator.tracing_count == 3                 # width 32 was not warmed up


def _load_once(monkeypatch, saved_backend):
  """A SavedModelBackend made in the test gets `saved_backend`'s loaded SavedModel (the same
  files: the module's export) instead of loading it again: a load costs about 8 s here, and a
  second load compiles the same XLA programs again."""
  import tensorflow as tf

  def load(path):
    assert path == saved_backend.path
    return saved_backend._loaded  # pylint: disable=protected-access
  monkeypatch.setattr(tf.saved_model, "load", load)


def test_saved_model_warm_up_runs_each_bucket(exported, saved_backend, monkeypatch):
  """Each shape through `nbest`, then `serving_default` once (its graph's first call)."""
  _load_once(monkeypatch, saved_backend)
  saved = backends.SavedModelBackend(str(exported), (2,), warmup_max_width=16)   # one shape
  calls, best = [], saved._best   # pylint: disable=protected-access
  saved._best = lambda text: calls.append(text.shape[0]) or best(text=text)   # pylint: disable=protected-access
  lines = []
  assert saved.warm_up(lines.append) == [(2, 16)]
  assert calls == [2]
  assert lines[0].startswith("warm-up 1/1: batch 2 x 15 words ready in ")
  assert lines[1].startswith("warm-up: 1 shape in ")
  assert not saved_backend.warms_up   # the default: no warm-up


def test_saved_model_warm_up_stops_at_the_exports_source_limit(exported, backend, saved_backend, monkeypatch,
                                                             tmp_path):
  """The export records the width buckets its graph pads to, which stop at its source limit (a
  wider warm-up would rerun the limit's shape); the model directory's translator (same model,
  same max_input_size) warms up the same widths. An older export without that record falls back
  to its decode hparams' max_input_size."""
  limit = backend.translator.limit
  assert limit < 1024
  _load_once(monkeypatch, saved_backend)
  saved = backends.SavedModelBackend(str(exported), (2,), warmup_max_width=1024)
  sent = []
  # The shapes only: nothing is decoded. Each width through nbest, then serving_default once.
  monkeypatch.setattr(saved, "decode", lambda sentences, best_only=False: sent.append((sentences, best_only)))
  assert saved.warm_up(lambda message: None) == [(2, w) for w in buckets.width_buckets(limit)]
  assert [(len(s), len(s[0].split()), best) for s, best in sent] == \
      [(2, w - 1, False) for w in buckets.width_buckets(limit)] + [(2, 1, True)]
  (tmp_path / "assets.extra").mkdir()   # an export written before shapes.json
  assert backends._graph_width_buckets(str(tmp_path), {"max_input_size": 40}) == (16, 32, 40)
  assert backends._graph_width_buckets(str(tmp_path), {"max_input_size": -1}) == buckets.WIDTH_BUCKETS


# --- The command: flags, and SIGTERM with requests in flight. -------------------------------------

@pytest.mark.parametrize("argv, message", [
    ([], "one of the arguments --output_dir --export_dir is required"),
    (["--output_dir=a", "--export_dir=b"], "not allowed with argument"),
    (["--output_dir=MODEL", "--max_batch_size=0"], "max_batch_size must be >= 1"),
    (["--output_dir=MODEL", "--allowed_batch_sizes=4,2"], "allowed_batch_sizes must increase"),
    (["--output_dir=MODEL", "--allowed_batch_sizes=a"], "comma-separated numbers"),
    (["--output_dir=MODEL", "--max_sentence_chars=0"], "max_sentence_chars must be >= 1"),
    (["--output_dir=MODEL", "--port=70000"], "--port must be in 0..65535"),
    (["--output_dir=MODEL", "--warmup_max_width=-1"], "--warmup_max_width must be >= 0"),
    (["--output_dir=MODEL", "--model_name=a:b"], "--model_name"),
    (["--output_dir=MODEL", "--decode_hparams=beam_sise=2"], "beam_sise"),
    (["--output_dir=/nonexistent/model"], "/nonexistent/model"),
    (["--export_dir=/nonexistent/export"], "does not exist"),
    (["--export_dir=EXPORT", "--decode_hparams=beam_size=3"], "go with --output_dir"),
])
def test_bad_flags_exit_2_with_a_message(argv, message, model_dir, tmp_path, capsys):
  argv = [a.replace("MODEL", model_dir).replace("EXPORT", str(tmp_path)) for a in argv]
  with pytest.raises(SystemExit) as exit_info:
    sys.exit(serve_cli.main(["--port=0"] + argv))
  assert exit_info.value.code == 2
  assert message in capsys.readouterr().err


def test_a_taken_port_exits_2(model_dir, capsys):
  with app_lib.bind("127.0.0.1", 0) as taken, pytest.raises(SystemExit) as exit_info:
    serve_cli.main([f"--output_dir={model_dir}", f"--port={taken.getsockname()[1]}"])
  assert exit_info.value.code == 2 and "pick another --port" in capsys.readouterr().err


# The command, with its backend's decode held until the test writes a line to its stdin.
GATED_SERVE = """
import sys
from t2t_lite.bin import serve
from t2t_lite.serving import backends
decode = backends.ModelDirBackend.decode
def gated(self, sentences):
  print(f"decoding {len(sentences)}", flush=True)
  sys.stdin.readline()
  return decode(self, sentences)
backends.ModelDirBackend.decode = gated
sys.exit(serve.main(sys.argv[1:]))
"""


def test_sigterm_finishes_the_requests_in_flight_then_exits(model_dir, backend):
  sentences = ["A man is riding a bike .", "Two dogs play .", "A woman reads a book ."]
  expected = reference(backend, sentences)
  process = subprocess.Popen(
      [sys.executable, "-c", GATED_SERVE, f"--output_dir={model_dir}", f"--decode_hparams={DECODE}",
       "--port=0", "--model_name=ende", "--max_batch_size=1", "--warmup_max_width=16"],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      env=dict(os.environ, PYTHONUNBUFFERED="1"))
  lines = queue.Queue()
  threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()

  def expect(prefix):
    while True:
      line = lines.get(timeout=HANG_GUARD)
      if prefix in line:
        return line

  try:
    url = expect("serving on http://").split("serving on ")[1].strip().rstrip("/")
    expect("warm-up: 1 shape in ")                       # the command's warm-up, logged
    wait_for(lambda: get_status(f"{url}/health") == 200, "the server to be ready")
    with concurrent.futures.ThreadPoolExecutor(len(sentences)) as pool:
      futures = [pool.submit(post, f"{url}/v1/models/ende:predict", {"signature_name": "nbest",
                                                                     "instances": [s]})
                 for s in sentences]
      expect("decoding 1")                                # the first is held in the backend
      wait_for(lambda: get(f"{url}/health")["requests_in_flight"] == len(sentences),
               "all requests in flight")
      process.send_signal(signal.SIGTERM)
      expect("Shutting down")
      expect("Waiting for connections to close")          # uvicorn stopped listening
      with pytest.raises(urllib.error.URLError) as refused:
        get(f"{url}/health")
      for _ in sentences:                                 # release the batches one by one
        process.stdin.write("go\n")
        process.stdin.flush()
      for sentence, future in zip(sentences, futures):
        status, body = future.result(HANG_GUARD)
        assert status == 200, body
        assert body["predictions"][0]["translations"] == expected[sentence][0]
    # Refused, not answered: an HTTPError (a URLError too, say 503) would be a server still
    # listening. Checked once the batches are released: failing while they are held would wait
    # out the requests' HANG_GUARD.
    assert not isinstance(refused.value, urllib.error.HTTPError), refused.value
    assert isinstance(refused.value.reason, ConnectionRefusedError), refused.value
    assert process.wait(HANG_GUARD) == 0
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()
