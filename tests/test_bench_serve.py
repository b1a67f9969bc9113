"""`scripts/bench_serve.py`: its checks (each failure a server could have is reported), its request
modes against a stand-in server, and one smoke run against the real `t2t-lite-serve`.

The script's figures mean something only alone on the machine; what a test can hold is that the
script would notice a server answering wrong, and that its table is the one its rounds measured.
"""

import http.server
import json
import pathlib
import re
import sys
import threading

import pytest

from test_benchmarks import run_script

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import bench_serve  # noqa: E402  pylint: disable=wrong-import-position

SENTENCES = ["A man .", "Two dogs play .", "A woman reads a book ."]


def answer(translation, score, status=200):
  return (status, {"predictions": [{"translations": translation, "scores": score}]})


def health(sentences, **changes):
  """A /health answer of an idle, healthy server that has decoded `sentences` in all."""
  return 200, {"status": "ok", "requests_in_flight": 0, "queued_sentences": 0,
               "decoding_sentences": 0, "sentences": sentences, "batches": sentences, **changes}


def good_answers():
  return {i: [answer(s.upper(), -float(i + 1))] for i, s in enumerate(SENTENCES)}


def test_check_passes_a_right_run_and_takes_its_answers_as_the_reference():
  reference = {}
  assert bench_serve.check("one client", SENTENCES, good_answers(), health(5)[1], health(8),
                           reference) == []
  assert reference == {s: (s.upper(), -float(i + 1)) for i, s in enumerate(SENTENCES)}
  # A later mode is held to that reference, scores within SCORE_TOLERANCE.
  nearly = good_answers()
  nearly[2] = [answer(SENTENCES[2].upper(), -3.0 + 0.5 * bench_serve.SCORE_TOLERANCE)]
  assert bench_serve.check("4 clients", SENTENCES, nearly, health(8)[1], health(11), reference) == []


@pytest.mark.parametrize("fault, expected", [
    ("swapped", ["request 0 ('A man .'): got ('TWO DOGS PLAY .', -2.0)",
                 "request 1 ('Two dogs play .'): got ('A MAN .', -1.0)"]),
    ("score", ["request 2 ('A woman reads a book .'): got ('A WOMAN READS A BOOK .', -3.002)"]),
    ("twice", ["request 1 answered 2 times"]),
    ("lost", ["request 2 answered 0 times"]),
    ("status", ["request 0 ('A man .'): HTTP 503"]),
    ("decoded", ["the server decoded 4 sentences for 3 sent"]),
    ("busy", ["the server is not healthy and idle after the run"]),
])
def test_check_reports_each_way_a_server_can_answer_wrong(fault, expected):
  """Against a reference from a right run: answers swapped between two requests, a score off by
  more than the tolerance, a request answered twice or never, an error status, a sentence decoded
  twice by the server, and a server still busy after the mode."""
  reference = {s: (s.upper(), -float(i + 1)) for i, s in enumerate(SENTENCES)}
  answers, decoded, busy = good_answers(), 3, {}
  if fault == "swapped":
    answers[0], answers[1] = answers[1], answers[0]
  elif fault == "score":
    answers[2] = [answer(SENTENCES[2].upper(), -3.002)]
  elif fault == "twice":
    answers[1] = answers[1] * 2
  elif fault == "lost":
    del answers[2]   # the server decoded it all the same: the count alone would not show it
  elif fault == "status":
    answers[0] = [(503, {"error": "overloaded"})]
  elif fault == "decoded":
    decoded = 4
  elif fault == "busy":
    busy = {"requests_in_flight": 1}
  problems = bench_serve.check("4 clients", SENTENCES, answers, health(0)[1], health(decoded, **busy),
                               reference)
  assert len(problems) == len(expected), problems
  for problem, start in zip(problems, expected):
    assert problem.startswith("4 clients: " + start), problems


class StandIn:
  """What `run_mode` reads of bench_serve.Server (host, port, health()) over a real HTTP server
  on 127.0.0.1 whose predict answers a sentence with its upper case, or, with `mix_up`, answers
  every second request with the previous request's sentence."""

  def __init__(self, mix_up=False):
    state = {"sentences": 0, "last": None}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
      protocol_version = "HTTP/1.1"   # keep-alive, as the script's clients use it

      def log_message(self, *args):
        pass

      def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def do_GET(self):   # noqa: N802 (http.server's name)
        with lock:
          self.reply(health(state["sentences"])[1])

      def do_POST(self):   # noqa: N802
        sentence = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["instances"][0]
        with lock:
          state["sentences"] += 1
          shown = state["last"] if mix_up and state["sentences"] % 2 == 0 else sentence
          state["last"] = sentence
        self.reply({"predictions": [{"translations": shown.upper(), "scores": -float(len(shown))}]})

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.host, self.port = self.httpd.server_address[:2]
    threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

  def health(self):
    return bench_serve.Server.health(self)


@pytest.mark.parametrize("mix_up", [False, True])
def test_run_mode_keeps_each_answer_with_its_request(mix_up):
  """run_mode's 4 client threads over keep-alive connections, 40 requests: each answer is filed
  under its own request, so a right server passes `check` and one that answers some requests with
  another request's sentence fails it."""
  server = StandIn(mix_up)
  try:
    load = [f"sentence {i % 10} ." for i in range(40)]
    reference = {s: (s.upper(), -float(len(s))) for s in load}
    answers, latencies, seconds, before, after = bench_serve.run_mode(server, load, 4)
  finally:
    server.httpd.shutdown()
  assert sorted(answers) == list(range(40)) and len(latencies) == 40 and seconds > 0
  assert before["sentences"] == 0 and after[1]["sentences"] == 40
  problems = bench_serve.check("4 clients", load, answers, before, after, reference)
  if mix_up:
    assert len(problems) == 20 and all("the one-client answer is" in p for p in problems), problems
  else:
    assert problems == []


def test_smoke_against_the_real_server(tiny_model_dir, short_lines):
  """`--smoke` on the tiny model and 24 short lines (distinct, so the one-client mode sends 24):
  `t2t-lite-serve` warmed up for width 16 and batches up to 4 only (3 shapes); the script's own
  checks hold, its table has both modes, batches of 1 for one client and at most 4 for 4 clients,
  and the batching ratio is the rows' rates over each other within their roundings."""
  model_dir, _ = tiny_model_dir
  output = run_script("bench_serve.py", f"--output_dir={model_dir}", f"--source={short_lines}",
                      "--decode_hparams=beam_size=2", "--serve_flag=--warmup_max_width=16",
                      "--serve_flag=--max_batch_size=4")
  assert "checked: every request answered exactly once with its own sentence's translation" in output
  rows = dict((name, values) for name, *values in re.findall(
      r"^\| (one client|4 clients) \| (\d+) \| ([\d.]+) \| ([\d,]+) \| ([\d,]+) \| ([\d.]+) \|$",
      output, re.MULTILINE))
  assert sorted(rows) == ["4 clients", "one client"], output
  for name, (count, _, p50, p99, batch) in rows.items():
    assert count == "24" and int(p50.replace(",", "")) <= int(p99.replace(",", "")), output
    assert (float(batch) == 1.0) if name == "one client" else (1.0 <= float(batch) <= 4.0), output
  single, batched = float(rows["one client"][1]), float(rows["4 clients"][1])
  ratio = float(re.search(r"batching: ([\d.]+)x the one-client throughput", output).group(1))
  assert (batched - 0.05) / (single + 0.05) - 0.005 <= ratio <= (batched + 0.05) / (single - 0.05) + 0.005
