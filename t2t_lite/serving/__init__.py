"""t2t-lite-serve's library: a translation server with TF Serving's REST API.

- `batching`: the dynamic batching queue (TF Serving's max_batch_size, batch_timeout_micros,
  max_enqueued_batches, allowed_batch_sizes): concurrent requests are decoded together.
- `backends`: what decodes a batch: a model directory through the project's `Translator`, or an
  exported SavedModel through its `serving_default` / `nbest` signatures.
- `rest`: TF Serving's REST request and response formats (row "instances", columnar "inputs").
- `app`: the Starlette application (the REST API, a health endpoint, the web page and its JSON
  helpers: attention weights, parse trees) and `serve`, which runs it under uvicorn.
"""
