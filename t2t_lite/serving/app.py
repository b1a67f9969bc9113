"""The server: TF Serving's REST API over a batching queue, a health endpoint, and the web page.

    GET  /                                       the page (static HTML/JS/CSS, no CDN)
    GET  /health                                 {"status": "ok", queue figures}; 503 while warming
                                                 up or stopping
    GET  /v1/models/<name>[/versions/<v>]         TF Serving's model status
    GET  /v1/models/<name>[/versions/<v>]/metadata   TF Serving's metadata (the signature defs)
    POST /v1/models/<name>[/versions/<v>]:predict   TF Serving's predict (see `rest`)
    GET  /api/info                               what the page needs: model, limits, features
    POST /api/attention  {"source", "target"}    encoder-decoder attention weights (model dirs)
    POST /api/tree       {"source", "output"}    a parsing model's output as a tree

Every error is `{"error": "..."}` with its status: 400/404/405/413 for a bad request (the
server goes on serving), 503 when the queue is full, the model is still warming up or the
server is stopping, 500 if decoding itself fails. A backend that `warms_up` compiles its search
shapes on the batching thread at start (logged on stderr); until then /health answers 503
`"warming up"`, the model status `LOADING` (TF Serving's state), and predictions 503.

`serve` runs the app under uvicorn, which on SIGTERM (or Ctrl-C) stops accepting connections,
finishes the requests in flight, and then the queue is drained and closed (after the warm-up,
if it is still running).
"""

import asyncio
import contextlib
import dataclasses
import pathlib
import signal
import socket
import sys

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from t2t_lite.serving import rest
from t2t_lite.serving.backends import BackendError, UnsupportedError
from t2t_lite.serving.batching import (BatchingOptions, BatchQueue, OverloadedError, QueueClosedError,
                                       WarmingUpError)

STATIC_DIR = pathlib.Path(__file__).resolve().parent / "static"


@dataclasses.dataclass
class _State:
  queue: BatchQueue | None = None
  closing: bool = False
  requests_in_flight: int = 0


async def read_body(request: Request, limit: int) -> bytes:
  """The body, refused with 413 as soon as it is longer than `limit` bytes (never read whole)."""
  declared = request.headers.get("content-length")
  if declared is not None:
    if not declared.isdigit():
      raise rest.RequestError(400, f"invalid Content-Length header {declared!r}")
    if int(declared) > limit:
      raise rest.RequestError(413, f"the request body has {declared} bytes, more than the limit of "
                                   f"{limit} (--max_body_bytes)")
  chunks, size = [], 0
  async for chunk in request.stream():
    size += len(chunk)
    if size > limit:
      raise rest.RequestError(413, f"the request body is longer than the limit of {limit} bytes "
                                   "(--max_body_bytes)")
    chunks.append(chunk)
  return b"".join(chunks)


def error(status: int, message: str) -> JSONResponse:
  return JSONResponse({"error": message}, status_code=status)


def create_app(backend, model_name: str = "default", options: BatchingOptions | None = None,
               limits: rest.Limits | None = None) -> Starlette:
  """The Starlette app serving `backend` (`backends.ModelDirBackend` or `SavedModelBackend`, or
  anything with their `decode`, `version`, `signature_defs`, `attention`, `tree`, `describe`)."""
  options = options or BatchingOptions()
  limits = limits or rest.Limits()
  state = _State()

  @contextlib.asynccontextmanager
  async def lifespan(app):
    def warm_up():
      try:
        backend.warm_up()
      except Exception as e:
        print(f"warm-up failed ({type(e).__name__}: {e}); serving anyway, each shape compiles on "
              "first use", file=sys.stderr, flush=True)
        raise

    state.queue = BatchQueue(backend.decode, options,
                             warm_up=warm_up if getattr(backend, "warms_up", False) else None)
    app.state.serving = state
    try:
      yield
    finally:
      state.closing = True
      await anyio.to_thread.run_sync(state.queue.close)   # decodes what is queued, then stops

  def check_model(name, version):
    if name != model_name or (version is not None and version != backend.version):
      raise rest.servable_not_found(name, version)

  async def translate(sentences, best_only=False):
    """Queues the sentences and waits for their beams (no thread is held while waiting; a
    request cancelled by its client leaves its sentences still queued undecoded); `best_only`:
    only the best beam is wanted (`BatchQueue.submit`)."""
    if state.closing:
      raise QueueClosedError("the server is shutting down and takes no new requests")
    futures = state.queue.submit(sentences, best_only)
    return await asyncio.gather(*(asyncio.wrap_future(future) for future in futures))

  async def models(request: Request):
    path = request.url.path
    if request.method == "POST":
      match = rest.PREDICT_PATH.match(path)
      if not match:
        raise rest.RequestError(404, f"no such endpoint: POST {path}; predict is POST "
                                     "/v1/models/<name>[/versions/<version>]:predict")
      check_model(match.group(1), match.group(2))
      body = await read_body(request, limits.max_body_bytes)
      predict = rest.parse_predict(rest.decode_json_body(body), limits)
      state.requests_in_flight += 1
      try:
        beams = await translate(predict.sentences, best_only=predict.signature != "nbest")
      finally:
        state.requests_in_flight -= 1
      return JSONResponse(rest.predict_response(predict, beams))
    match = rest.STATUS_PATH.match(path)
    if not match:
      raise rest.RequestError(404, f"no such endpoint: GET {path}; try /v1/models/{model_name} or "
                                   f"/v1/models/{model_name}/metadata")
    check_model(match.group(1), match.group(2))
    if match.group(3):
      return JSONResponse(rest.model_metadata(model_name, backend.version, backend.signature_defs()))
    ready = state.queue is not None and state.queue.ready.is_set()
    return JSONResponse(rest.model_status(backend.version, "AVAILABLE" if ready else "LOADING"))

  async def health(request: Request):
    queue = state.queue
    warming = queue is None or not queue.ready.is_set()
    status = "shutting down" if state.closing else "warming up" if warming else "ok"
    body = {"status": status, "model": model_name,
            "version": backend.version, "requests_in_flight": state.requests_in_flight,
            "queued_sentences": queue.queued if queue else 0,
            "decoding_sentences": queue.decoding if queue else 0,
            "batches": queue.batches if queue else 0,
            "sentences": queue.sentences if queue else 0}
    if queue is not None and queue.warm_up_error:
      body["warm_up_error"] = queue.warm_up_error
    return JSONResponse(body, status_code=200 if status == "ok" else 503)

  async def info(request: Request):
    return JSONResponse({"model_name": model_name, "version": backend.version, **backend.describe(),
                         "limits": dataclasses.asdict(limits),
                         "batching": {**dataclasses.asdict(options),
                                      "allowed_batch_sizes": list(options.batch_sizes)}})

  async def json_fields(request, *names):
    """The named string fields of a JSON object body, each within the sentence limit."""
    payload = rest.decode_json_body(await read_body(request, limits.max_body_bytes))
    if not isinstance(payload, dict) or set(payload) != set(names):
      raise rest.RequestError(400, f"send a JSON object with exactly the fields {list(names)}")
    for name in names:
      if not isinstance(payload[name], str):
        raise rest.RequestError(400, f"\"{name}\" must be a string")
      if len(payload[name]) > limits.max_sentence_chars:
        raise rest.RequestError(413, f"\"{name}\" has {len(payload[name])} characters, more than the "
                                     f"limit of {limits.max_sentence_chars} (--max_sentence_chars)")
    return [payload[name] for name in names]

  async def attention(request: Request):
    source, target = await json_fields(request, "source", "target")
    if not source.strip() or not target.strip():
      raise rest.RequestError(400, "\"source\" and \"target\" must not be empty")
    return JSONResponse(await run_in_threadpool(backend.attention, source, target))

  async def tree(request: Request):
    source, output = await json_fields(request, "source", "output")
    return JSONResponse(await run_in_threadpool(backend.tree, source, output))

  async def page(request: Request):
    return FileResponse(STATIC_DIR / "index.html")

  async def request_error(request, e):
    return error(e.status, e.message)

  async def http_error(request, e):
    return error(e.status_code, f"{e.detail}: {request.method} {request.url.path}")

  async def unsupported(request, e):
    return error(501, str(e))

  async def backend_error(request, e):
    return error(400, str(e))

  async def unavailable(request, e):
    return error(503, str(e))

  async def internal(request, e):
    return error(500, f"decoding failed: {type(e).__name__}: {e}")

  routes = [Route("/", page), Route("/health", health), Route("/api/info", info),
            Route("/api/attention", attention, methods=["POST"]),
            Route("/api/tree", tree, methods=["POST"]),
            Route("/v1/models/{rest:path}", models, methods=["GET", "POST"]),
            Mount("/static", StaticFiles(directory=STATIC_DIR), name="static")]
  handlers = {rest.RequestError: request_error, HTTPException: http_error,
              UnsupportedError: unsupported, BackendError: backend_error,
              OverloadedError: unavailable, QueueClosedError: unavailable,
              WarmingUpError: unavailable, Exception: internal}
  return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)


def bind(host: str, port: int) -> socket.socket:
  """A listening socket on host:port (port 0: a free one)."""
  family = socket.AF_INET6 if ":" in host else socket.AF_INET
  sock = socket.socket(family, socket.SOCK_STREAM)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try:
    sock.bind((host, port))
  except OSError as e:
    sock.close()
    raise OSError(f"cannot listen on {host}:{port}: {e.strerror}; pick another --port") from None
  sock.listen(2048)
  return sock


def serve(app: Starlette, host: str = "127.0.0.1", port: int = 8501, log_level: str = "info",
          sock: socket.socket | None = None) -> None:
  """Runs `app` under uvicorn until SIGTERM/SIGINT, which finish the requests in flight first;
  then returns. Call it from the main thread (signal handlers).

  Prints `serving on http://HOST:PORT/` (the real port when `port` is 0) once listening.
  """
  import uvicorn
  sock = sock or bind(host, port)
  shown = sock.getsockname()
  print(f"serving on http://{host if ':' not in host else f'[{host}]'}:{shown[1]}/", flush=True,
        file=sys.stderr)
  config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on")
  # uvicorn handles SIGTERM/SIGINT itself (graceful shutdown), then re-raises the signal with
  # the handler it found: a no-op here, so a graceful stop ends the process with status 0.
  previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGTERM, signal.SIGINT)}
  try:
    uvicorn.Server(config).run(sockets=[sock])
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)


@contextlib.contextmanager
def running(app: Starlette, host: str = "127.0.0.1", port: int = 0):
  """Runs `app` under uvicorn in a background thread; yields its base URL, stops on exit.

  For tests and benchmarks: the socket listens before this yields, so requests can be sent at
  once (uvicorn answers them after the app's startup).
  """
  import threading

  import uvicorn
  sock = bind(host, port)
  server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
  thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
  thread.start()
  try:
    yield f"http://{host}:{sock.getsockname()[1]}"
  finally:
    server.should_exit = True
    thread.join()
    sock.close()
