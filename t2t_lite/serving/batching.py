"""Dynamic batching: sentences of concurrent requests decoded together, each answer to its caller.

TF Serving's batching options, with their names and meanings (TF Serving's
`--batching_parameters_file`):

- `max_batch_size`: the most sentences decoded in one batch;
- `batch_timeout_micros`: how long the first sentence of a batch that is not full waits for
  others before the batch is decoded anyway;
- `max_enqueued_batches`: the queue holds at most this many full batches of waiting sentences;
  a request that does not fit is refused at once (`OverloadedError`, HTTP 503), never left to hang;
- `allowed_batch_sizes`: batches are padded up to the next of these sizes (the backend's job), so
  the search graph is traced for a few batch shapes only; by default the decoder's and the
  SavedModel's batch buckets (`t2t_lite.decoding.buckets`: 1, 2, 4, ... up to max_batch_size).

The defaults are meant for a small CPU (2 cores): on it one sentence alone costs mostly the
search's fixed per-step work, which a batch shares, and a batch of 16 sentences (64 hypotheses
at beam 4) is enough to share it while a batch's latency (it waits for its slowest sentence) and
the warm-up (one compiled program per batch bucket and width bucket) stay small; 16 concurrent
one-sentence clients fill it. The timeout is short against a decode: a batch that waited longer
would mostly add latency. `scripts/bench_serve.py` measures them against one client.

A backend may warm up first (`warm_up`: compile the search for its shapes): the worker runs it
before the first batch, and `ready` is set when it is done; requests meanwhile are refused with
`WarmingUpError` (HTTP 503), never left hanging.

One worker thread decodes (TensorFlow runs its ops on all cores already); the event loop only
waits on futures. A request's sentences are queued together and in order, so a request is never
split over more batches than its size needs, and each sentence's future gets its own result.
"""

import collections
import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence

from t2t_lite.decoding import buckets


class OverloadedError(Exception):
  """The queue is full: the request is refused (HTTP 503)."""


class QueueClosedError(Exception):
  """The server is shutting down and takes no new requests (HTTP 503)."""


class WarmingUpError(Exception):
  """The backend is still compiling its search shapes at start (HTTP 503)."""


@dataclasses.dataclass(frozen=True)
class BatchingOptions:
  """TF Serving's batching parameters (see the module docstring)."""
  max_batch_size: int = 16
  batch_timeout_micros: int = 5000
  max_enqueued_batches: int = 16
  allowed_batch_sizes: tuple[int, ...] = ()   # empty: powers of two up to max_batch_size

  def __post_init__(self):
    if self.max_batch_size < 1:
      raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
    if self.batch_timeout_micros < 0:
      raise ValueError(f"batch_timeout_micros must be >= 0, got {self.batch_timeout_micros}")
    if self.max_enqueued_batches < 1:
      raise ValueError(f"max_enqueued_batches must be >= 1, got {self.max_enqueued_batches}")
    sizes = self.allowed_batch_sizes
    if sizes and (list(sizes) != sorted(set(sizes)) or sizes[0] < 1 or sizes[-1] != self.max_batch_size):
      raise ValueError(f"allowed_batch_sizes must increase, start at >= 1 and end with "
                       f"max_batch_size={self.max_batch_size} (TF Serving's rule), got {list(sizes)}")

  @property
  def batch_sizes(self) -> tuple[int, ...]:
    """The padded batch sizes: `allowed_batch_sizes`, or the decoder's batch buckets up to
    max_batch_size (1, 2, 4, ..., max_batch_size)."""
    return tuple(self.allowed_batch_sizes) or buckets.batch_buckets(self.max_batch_size)

  def padded_size(self, n: int) -> int:
    """The smallest batch size >= n."""
    return buckets.padded_size(n, self.batch_sizes)

  @property
  def capacity(self) -> int:
    """The most sentences waiting in the queue."""
    return self.max_batch_size * self.max_enqueued_batches


class BatchQueue:
  """Queues sentences and decodes them in batches on one worker thread.

  Args:
    decode: `decode(sentences) -> results`, one result per sentence, in order; called on the
      worker thread with at most `options.max_batch_size` sentences, and as `decode(sentences,
      best_only=True)` when every request of the batch was submitted with `best_only` (it wants
      the best translation only; the search can stop sooner). An exception fails the futures of
      that batch only.
    options: `BatchingOptions`.
    clock: seconds, monotonic (for the batch timeout).
    warm_up: optional, called once on the worker thread before the first batch (`submit`
      raises `WarmingUpError` until it returns); if it raises, the error is reported through
      `warm_up_error` and the queue serves anyway (shapes then compile on first use).
  """

  def __init__(self, decode: Callable[[list], list], options: BatchingOptions | None = None,
               clock: Callable[[], float] = time.monotonic,
               warm_up: Callable[[], object] | None = None):
    self._decode = decode
    self._warm_up = warm_up
    self.ready = threading.Event()       # set once the warm-up is over (at once without one)
    self.warm_up_error = None
    if warm_up is None:
      self.ready.set()
    self.options = options or BatchingOptions()
    self._clock = clock
    self._items = collections.deque()    # (sentence, future, enqueue time, best_only)
    self._condition = threading.Condition()
    self._closed = False
    self.decoding = 0                    # sentences in the batch being decoded now
    self.batches = 0                     # batches decoded so far
    self.sentences = 0                   # sentences decoded so far (filler rows not counted)
    self._worker = threading.Thread(target=self._run, name="t2t-lite-batcher", daemon=True)
    self._worker.start()

  @property
  def queued(self) -> int:
    return len(self._items)

  def submit(self, sentences: Sequence, best_only: bool = False) -> list[concurrent.futures.Future]:
    """Queues the sentences of one request together; returns one future per sentence.
    `best_only`: the request wants each sentence's best translation only (see `decode`).

    Raises:
      OverloadedError: they do not fit in the queue (nothing is queued).
      QueueClosedError: `close` was called.
      WarmingUpError: the warm-up is not over.
    """
    futures = [concurrent.futures.Future() for _ in sentences]
    with self._condition:
      if self._closed:
        raise QueueClosedError("the server is shutting down and takes no new requests")
      if not self.ready.is_set():
        raise WarmingUpError("the model is warming up (compiling its search for the batch and "
                             "width buckets it serves); retry when GET /health answers 200")
      if len(self._items) + len(sentences) > self.options.capacity:
        raise OverloadedError(
            f"the server is overloaded: {len(self._items)} sentences are waiting, the queue holds "
            f"{self.options.capacity} (max_enqueued_batches={self.options.max_enqueued_batches} x "
            f"max_batch_size={self.options.max_batch_size}); retry later")
      now = self._clock()
      self._items.extend((sentence, future, now, best_only)
                         for sentence, future in zip(sentences, futures))
      self._condition.notify_all()
    return futures

  def close(self, wait: bool = True) -> None:
    """Takes no new sentences; the worker decodes everything queued, then stops."""
    with self._condition:
      self._closed = True
      self._condition.notify_all()
    if wait:
      self._worker.join()

  def _next_batch(self):
    """Waits for a batch: full, or its first sentence's timeout passed, or closing. None: stop."""
    timeout = self.options.batch_timeout_micros / 1e6
    with self._condition:
      while True:
        if not self._items:
          if self._closed:
            return None
          self._condition.wait()
          continue
        remaining = self._items[0][2] + timeout - self._clock()
        if len(self._items) >= self.options.max_batch_size or remaining <= 0 or self._closed:
          break
        self._condition.wait(remaining)
      batch = [self._items.popleft()
               for _ in range(min(len(self._items), self.options.max_batch_size))]
      self.decoding = len(batch)
      return batch

  def _run(self):
    if self._warm_up is not None:
      try:
        self._warm_up()
      except Exception as e:  # noqa: BLE001  reported; serving goes on without a warm-up
        self.warm_up_error = f"{type(e).__name__}: {e}"
      finally:
        self.ready.set()
    while True:
      batch = self._next_batch()
      if batch is None:
        return
      live = [(sentence, future, best_only) for sentence, future, _, best_only in batch
              if future.set_running_or_notify_cancel()]
      results, error = [], None
      try:
        sentences = [sentence for sentence, _, _ in live]
        if live and all(best_only for _, _, best_only in live):
          results = self._decode(sentences, best_only=True)
        else:
          results = self._decode(sentences) if live else []
        if len(results) != len(live):
          raise RuntimeError(f"the backend returned {len(results)} results for {len(live)} sentences")
      except BaseException as e:  # noqa: BLE001  each caller gets the error; the worker goes on
        error = e
      # Counted before any caller hears back, so that what /health reports agrees with every
      # answer a caller already has.
      with self._condition:
        self.decoding = 0
        self.batches += 1
        if error is None:
          self.sentences += len(live)
      for index, (_, future, _) in enumerate(live):
        if error is None:
          future.set_result(results[index])
        else:
          future.set_exception(error)
