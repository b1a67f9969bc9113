r"""t2t-lite-serve under load: dynamic batching against one client sending one sentence at a time.

    python scripts/bench_serve.py --output_dir=runs/base --source=newstest2014.en
    python scripts/bench_serve.py --output_dir=MODEL --clients=16 --sentences=2000 --rounds=2
    python scripts/bench_serve.py --output_dir=MODEL --smoke        # seconds: checks it runs

Starts the real command (`python -m t2t_lite.bin.serve --port=0 ...`) in its own process and
sends TF Serving predict requests over 127.0.0.1 with keep-alive connections, one sentence per
request, in two modes:

- "one client": one request at a time (each waits for the previous answer): what a server
  without batching can do at best, every batch of size 1;
- "N clients": N threads sending concurrently, the server batching what arrives together.

Each mode runs `--rounds` times, taking turns (the first round includes tracing/XLA compiling
for new batch shapes); the best round of each mode is reported: sentences/s and the p50/p99
latency of a request, and the mean batch size the server reports. Every answer must equal the
one-client answer for the same sentence (the run stops otherwise). Run it alone on the machine:
the figures mean nothing while other work runs.
"""

import argparse
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


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--output_dir", required=True, help="the model directory to serve")
  p.add_argument("--decode_hparams", default="", help="passed to t2t-lite-serve")
  p.add_argument("--source", default=DEFAULT_SOURCE, help="sentences, one per line (cycled)")
  p.add_argument("--sentences", type=int, default=2000, help="sentences per mode and round")
  p.add_argument("--clients", type=int, default=16, help="concurrent clients of the batched mode")
  p.add_argument("--rounds", type=int, default=2, help="rounds per mode (best counts)")
  p.add_argument("--max_batch_size", type=int, default=32, help="t2t-lite-serve's")
  p.add_argument("--batch_timeout_micros", type=int, default=5000, help="t2t-lite-serve's")
  p.add_argument("--smoke", action="store_true", help="a few sentences, one round: checks it runs")
  args = p.parse_args(argv)
  if args.smoke:
    args.sentences, args.clients, args.rounds = 8, 2, 1
  return args


class Server:
  """`t2t-lite-serve` in a child process on a free port of 127.0.0.1."""

  def __init__(self, args):
    command = [sys.executable, "-m", "t2t_lite.bin.serve", f"--output_dir={args.output_dir}",
               "--port=0", "--model_name=bench", "--log_level=warning",
               f"--max_batch_size={args.max_batch_size}",
               f"--batch_timeout_micros={args.batch_timeout_micros}",
               f"--max_enqueued_batches={max(16, 4 * args.clients)}"]
    if args.decode_hparams:
      command.append(f"--decode_hparams={args.decode_hparams}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env)
    for line in self.process.stdout:
      if "serving on http://" in line:
        address = line.split("serving on http://")[1].strip().rstrip("/")
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)
        break
    else:
      raise SystemExit(f"t2t-lite-serve exited with status {self.process.wait()}")
    threading.Thread(target=lambda: [None for _ in self.process.stdout], daemon=True).start()

  def get(self, path):
    connection = http.client.HTTPConnection(self.host, self.port, timeout=3600)
    connection.request("GET", path)
    return json.loads(connection.getresponse().read())

  def stop(self):
    self.process.terminate()
    self.process.wait()


def translate(connection, sentence):
  """One predict request of one sentence; (translation, seconds)."""
  body = json.dumps({"instances": [sentence]})
  start = time.perf_counter()
  connection.request("POST", "/v1/models/bench:predict", body, {"Content-Type": "application/json"})
  response = connection.getresponse()
  data = json.loads(response.read())
  elapsed = time.perf_counter() - start
  if response.status != 200:
    raise SystemExit(f"HTTP {response.status}: {data}")
  return data["predictions"][0]["translations"], elapsed


def run_mode(server, sentences, clients):
  """Sends every sentence with `clients` threads; returns (answers, latencies, seconds, batches)."""
  work = queue.Queue()
  for i, sentence in enumerate(sentences):
    work.put((i, sentence))
  answers, latencies = [None] * len(sentences), [0.0] * len(sentences)

  def client():
    connection = http.client.HTTPConnection(server.host, server.port, timeout=3600)
    while True:
      try:
        i, sentence = work.get_nowait()
      except queue.Empty:
        return
      answers[i], latencies[i] = translate(connection, sentence)

  batches_before = server.get("/health")["batches"]
  start = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(clients) as pool:
    for future in [pool.submit(client) for _ in range(clients)]:
      future.result()
  seconds = time.perf_counter() - start
  return answers, np.array(latencies), seconds, server.get("/health")["batches"] - batches_before


def main(argv=None):
  args = parse_args(argv)
  with open(args.source, encoding="utf-8") as f:
    lines = [line.strip() for line in f if line.strip()]
  sentences = [lines[i % len(lines)] for i in range(args.sentences)]
  modes = {"one client": 1, f"{args.clients} clients": args.clients}
  server = Server(args)
  best, reference = {}, None
  try:
    for round_ in range(args.rounds):
      for name, clients in modes.items():
        answers, latencies, seconds, batches = run_mode(server, sentences, clients)
        reference = reference or answers
        wrong = sum(a != b for a, b in zip(answers, reference))
        if wrong:
          raise SystemExit(f"{name}: {wrong} answers differ from the one-client answers")
        rate = len(sentences) / seconds
        print(f"round {round_ + 1}, {name}: {rate:.1f} sentences/s", file=sys.stderr, flush=True)
        if name not in best or rate > best[name][0]:
          best[name] = (rate, np.percentile(latencies, 50), np.percentile(latencies, 99),
                        len(sentences) / max(batches, 1))
  finally:
    server.stop()
  print(f"\n{args.sentences} sentences, one per request, {args.rounds} round(s), best round; "
        f"max_batch_size={args.max_batch_size}, batch_timeout_micros={args.batch_timeout_micros}\n")
  print("| mode | sentences/s | p50 latency (ms) | p99 latency (ms) | mean batch |")
  print("|---|---|---|---|---|")
  for name, (rate, p50, p99, batch) in best.items():
    print(f"| {name} | {rate:.1f} | {p50 * 1000:.0f} | {p99 * 1000:.0f} | {batch:.1f} |")
  single, batched = best["one client"][0], best[f"{args.clients} clients"][0]
  print(f"\nbatching: {batched / single:.2f}x the one-client throughput")
  return 0


if __name__ == "__main__":
  sys.exit(main())
