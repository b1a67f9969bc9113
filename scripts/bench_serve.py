r"""t2t-lite-serve under load: dynamic batching against one client sending one sentence at a time.

    python scripts/bench_serve.py --output_dir=runs/quickstart/averaged
    python scripts/bench_serve.py --output_dir=MODEL --clients=16 --sentences=2000
    python scripts/bench_serve.py --export_dir=MODEL/export     # the SavedModel backend
    python scripts/bench_serve.py --output_dir=MODEL --smoke    # a few sentences: checks it runs

Starts the real command (`python -m t2t_lite.bin.serve --port=0 ...`, its default batching and
warm-up unless flags say otherwise) in its own process, waits until /health answers 200 (the
warm-up compiled the search's shapes), and sends TF Serving predict requests over 127.0.0.1
with keep-alive connections, one sentence per request, in two modes:

- "one client": each distinct sentence once, one request at a time (each waits for the previous
  answer): what a server without batching can do at best, every batch of size 1. Its answers
  are the reference;
- "N clients": N threads sending `--sentences` requests concurrently (the source's lines, cycled),
  the server batching what arrives together.

Checked, and the run fails (status 1) otherwise: every request is answered exactly once with
status 200 and one prediction; each answer is its own sentence's, equal to the one-client answer
for that sentence (the translation exactly, the score within 1e-3: a mixed-up answer would show
another sentence's); the server decoded exactly as many sentences as were sent (its /health
count: none lost, none twice); and the server is healthy after (status ok, nothing queued or in
flight). Reported: sentences/s and p50/p99 request latency of both modes, the mean batch, and
the ratio of the throughputs. Run it alone on the machine: the figures mean nothing while other
work runs.
"""

import argparse
import collections
import concurrent.futures
import http.client
import json
import os
import queue
import subprocess
import sys
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SOURCE = os.path.join(os.path.dirname(REPO), "shared", "data", "multi30k",
                              "test_2016_flickr.en")
SCORE_TOLERANCE = 1e-3


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  model = p.add_mutually_exclusive_group(required=True)
  model.add_argument("--output_dir", help="a model directory to serve")
  model.add_argument("--export_dir", help="a SavedModel of t2t-lite-exporter to serve")
  p.add_argument("--decode_hparams", default="", help="passed to t2t-lite-serve (--output_dir)")
  p.add_argument("--source", default=DEFAULT_SOURCE, help="sentences, one per line (cycled)")
  p.add_argument("--sentences", type=int, default=2000, help="requests of the concurrent mode")
  p.add_argument("--clients", type=int, default=16, help="concurrent clients")
  p.add_argument("--rounds", type=int, default=1,
                 help="rounds of each mode, taking turns; the best round counts")
  p.add_argument("--serve_flag", action="append", default=[],
                 help="more t2t-lite-serve flags, e.g. --serve_flag=--max_batch_size=32 (repeatable)")
  p.add_argument("--smoke", action="store_true", help="a few sentences, one round: checks it runs")
  args = p.parse_args(argv)
  if args.smoke:
    args.sentences, args.clients, args.rounds = 24, 4, 1
  if args.sentences < 1 or args.clients < 1 or args.rounds < 1:
    p.error("--sentences, --clients and --rounds must be >= 1")
  return args


class Server:
  """`t2t-lite-serve` in a child process on a free port of 127.0.0.1; its output is echoed."""

  def __init__(self, args):
    model = f"--output_dir={args.output_dir}" if args.output_dir else f"--export_dir={args.export_dir}"
    command = [sys.executable, "-m", "t2t_lite.bin.serve", model, "--port=0",
               "--model_name=bench", "--log_level=warning",
               f"--max_enqueued_batches={max(16, 4 * args.clients)}"] + args.serve_flag
    if args.decode_hparams:
      command.append(f"--decode_hparams={args.decode_hparams}")
    print("$ " + " ".join(command[1:]), file=sys.stderr, flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    started = time.perf_counter()
    self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env)
    for line in self.process.stdout:
      print("  serve: " + line.rstrip(), file=sys.stderr, flush=True)
      if "serving on http://" in line:
        address = line.split("serving on http://")[1].strip().rstrip("/")
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)
        break
    else:
      raise SystemExit(f"t2t-lite-serve exited with status {self.process.wait()}")
    threading.Thread(target=self._echo, daemon=True).start()
    while (health := self.health())[0] != 200:
      if self.process.poll() is not None:
        raise SystemExit(f"t2t-lite-serve exited with status {self.process.returncode}")
      if health[1].get("status") != "warming up":
        raise SystemExit(f"t2t-lite-serve is not healthy: {health}")
      time.sleep(0.5)
    self.ready_seconds = time.perf_counter() - started

  def _echo(self):
    for line in self.process.stdout:
      print("  serve: " + line.rstrip(), file=sys.stderr, flush=True)

  def health(self):
    connection = http.client.HTTPConnection(self.host, self.port, timeout=3600)
    connection.request("GET", "/health")
    response = connection.getresponse()
    return response.status, json.loads(response.read())

  def stop(self):
    self.process.terminate()
    self.process.wait()


def predict(connection, sentence):
  """One predict request of one sentence: (status, body, seconds)."""
  body = json.dumps({"instances": [sentence]})
  start = time.perf_counter()
  connection.request("POST", "/v1/models/bench:predict", body, {"Content-Type": "application/json"})
  response = connection.getresponse()
  data = json.loads(response.read())
  return response.status, data, time.perf_counter() - start


def run_mode(server, sentences, clients):
  """Sends every sentence as its own request with `clients` threads.

  Returns (answers: {request index: [(status, body)]}, latencies, seconds, /health before, after).
  """
  work = queue.Queue()
  for i, sentence in enumerate(sentences):
    work.put((i, sentence))
  answers = collections.defaultdict(list)
  latencies = []
  lock = threading.Lock()

  def client():
    connection = http.client.HTTPConnection(server.host, server.port, timeout=3600)
    while True:
      try:
        i, sentence = work.get_nowait()
      except queue.Empty:
        return
      try:
        status, body, seconds = predict(connection, sentence)
      except (OSError, http.client.HTTPException, ValueError) as e:   # reported by `check`
        status, body, seconds = 0, {"error": f"{type(e).__name__}: {e}"}, 0.0
        connection.close()
        connection = http.client.HTTPConnection(server.host, server.port, timeout=3600)
      with lock:
        answers[i].append((status, body))
        latencies.append(seconds)

  before = server.health()[1]
  start = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(clients) as pool:
    for future in [pool.submit(client) for _ in range(clients)]:
      future.result()
  seconds = time.perf_counter() - start
  return answers, np.array(latencies), seconds, before, server.health()


def check(name, sentences, answers, before, after, reference):
  """The mode's problems (an empty list when every check holds); fills `reference` (sentence ->
  (translation, score)) from answers when it has no entry for a sentence yet."""
  problems = []
  for i, sentence in enumerate(sentences):
    got = answers.get(i, [])
    if len(got) != 1:
      problems.append(f"request {i} answered {len(got)} times")
      continue
    status, body = got[0]
    if status != 200 or len(body.get("predictions", [])) != 1:
      problems.append(f"request {i} ({sentence!r}): HTTP {status}, {str(body)[:200]}")
      continue
    prediction = body["predictions"][0]
    answer = (prediction["translations"], prediction["scores"])
    expected = reference.setdefault(sentence, answer)
    if answer[0] != expected[0] or abs(answer[1] - expected[1]) > SCORE_TOLERANCE:
      problems.append(f"request {i} ({sentence!r}): got {answer}, the one-client answer is {expected}")
  status, health = after
  decoded = health.get("sentences", 0) - before.get("sentences", 0)
  if decoded != len(sentences):
    problems.append(f"the server decoded {decoded} sentences for {len(sentences)} sent")
  if status != 200 or health["status"] != "ok" or health["requests_in_flight"] or \
      health["queued_sentences"] or health["decoding_sentences"]:
    problems.append(f"the server is not healthy and idle after the run: {health}")
  return [f"{name}: {problem}" for problem in problems]


def main(argv=None):
  args = parse_args(argv)
  with open(args.source, encoding="utf-8") as f:
    lines = [line.strip() for line in f if line.strip()]
  load = [lines[i % len(lines)] for i in range(args.sentences)]
  distinct = list(dict.fromkeys(load))   # the one-client mode sends each once, in order
  modes = {"one client": (distinct, 1), f"{args.clients} clients": (load, args.clients)}
  server = Server(args)
  print(f"server ready (warm-up included) after {server.ready_seconds:.1f} s", file=sys.stderr)
  best, reference, problems = {}, {}, []
  try:
    for round_ in range(args.rounds):
      for name, (sentences, clients) in modes.items():
        answers, latencies, seconds, before, after = run_mode(server, sentences, clients)
        problems += check(name, sentences, answers, before, after, reference)
        rate = len(sentences) / seconds
        batches = after[1]["batches"] - before["batches"]
        print(f"round {round_ + 1}, {name}: {len(sentences)} sentences in {seconds:.1f} s, "
              f"{rate:.1f} sentences/s", file=sys.stderr, flush=True)
        if name not in best or rate > best[name][1]:
          best[name] = (len(sentences), rate, np.percentile(latencies, 50),
                        np.percentile(latencies, 99), len(sentences) / max(batches, 1))
  finally:
    server.stop()
  flags = " ".join(args.serve_flag) or "t2t-lite-serve's defaults"
  print(f"\none sentence per request, {args.rounds} round(s), best round; {flags}; server ready "
        f"after {server.ready_seconds:.0f} s (warm-up included)\n")
  print("| mode | sentences | sentences/s | p50 latency (ms) | p99 latency (ms) | mean batch |")
  print("|---|---|---|---|---|---|")
  for name, (count, rate, p50, p99, batch) in best.items():
    print(f"| {name} | {count:,} | {rate:.1f} | {p50 * 1000:,.0f} | {p99 * 1000:,.0f} | {batch:.1f} |")
  single, batched = best["one client"][1], best[f"{args.clients} clients"][1]
  print(f"\nbatching: {batched / single:.2f}x the one-client throughput")
  if problems:
    print(f"\nFAILED: {len(problems)} problem(s):\n" + "\n".join(problems[:20]), file=sys.stderr)
    return 1
  print(f"checked: every request answered exactly once with its own sentence's translation (the "
        f"one-client answer), {args.sentences * args.rounds:,} concurrent requests in all; the server "
        "decoded each sentence once and was healthy and idle after each mode")
  return 0


if __name__ == "__main__":
  sys.exit(main())
