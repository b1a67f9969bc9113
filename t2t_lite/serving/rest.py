"""TF Serving's REST API formats, for the text-in/text-out signatures of the exported SavedModel.

    POST /v1/models/<name>[/versions/<v>]:predict
    {"signature_name": "nbest",                      (optional; default "serving_default")
     "instances": ["a sentence", {"text": "another"}, {"b64": "..."}]}     row format, or
     "inputs": {"text": ["a sentence", ...]}  or  "inputs": ["a sentence", ...]   columnar

Answers (the signatures' outputs, named as in the SavedModel):

    row       {"predictions": [{"translations": "...", "scores": -1.2}, ...]}
    columnar  {"outputs": {"translations": ["...", ...], "scores": [-1.2, ...]}}

With `nbest` each translation and score is a list over the beams, best first. Errors are
`{"error": "..."}` with a 4xx status (TF Serving's form), the message saying what was wrong.
Binary string values are `{"b64": "<base64>"}`, as in TF Serving; here they must hold UTF-8 text.
"""

import base64
import binascii
import dataclasses
import json
import re

from t2t_lite.serving.backends import INPUT_NAME, SIGNATURES

DEFAULT_SIGNATURE = "serving_default"
PREDICT_PATH = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+))?:predict$")
STATUS_PATH = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+))?(/metadata)?$")


class RequestError(Exception):
  """A bad request: `status` (4xx) and a message saying what was wrong and how to fix it."""

  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status
    self.message = message


@dataclasses.dataclass(frozen=True)
class Limits:
  """What one request may hold."""
  max_body_bytes: int = 1 << 20
  max_sentences_per_request: int = 256
  max_sentence_chars: int = 2000

  def __post_init__(self):
    for field in dataclasses.fields(self):
      if getattr(self, field.name) < 1:
        raise ValueError(f"{field.name} must be >= 1, got {getattr(self, field.name)}")


@dataclasses.dataclass(frozen=True)
class PredictRequest:
  signature: str
  sentences: list
  columnar: bool


def decode_json_body(body: bytes, what: str = "the request body"):
  """UTF-8 JSON -> a Python object, or a 400 saying which of the two it is not."""
  try:
    text = body.decode("utf-8")
  except UnicodeDecodeError as e:
    raise RequestError(400, f"{what} is not valid UTF-8 (byte {e.start}: {e.reason}); send "
                            "JSON encoded as UTF-8") from None
  if not text.strip():
    raise RequestError(400, f"{what} is empty; send a JSON object")
  try:
    # NaN and Infinity are valid in TF Serving's JSON; Python's parser takes them too.
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise RequestError(400, f"{what} is not valid JSON: {e.msg} at line {e.lineno} column "
                            f"{e.colno}") from None


def _string(value, where):
  """A JSON string, or TF Serving's {"b64": ...} holding UTF-8 bytes."""
  if isinstance(value, str):
    return value
  if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
    try:
      return base64.b64decode(value["b64"], validate=True).decode("utf-8")
    except (binascii.Error, ValueError) as e:
      raise RequestError(400, f"{where}: b64 value is not base64 of UTF-8 text ({e})") from None
  raise RequestError(400, f"{where} must be a string (or {{\"b64\": ...}}), got "
                          f"{type(value).__name__} {json.dumps(value)[:80]}; the signature takes "
                          f"'{INPUT_NAME}', a [N] string tensor: one sentence per instance")


def parse_predict(payload, limits: Limits) -> PredictRequest:
  """Checks a predict request (already parsed JSON) and returns its sentences.

  Raises:
    RequestError: 400 for any wrong field, type, signature or over-limit sentence, with a
      message naming it; 413 for more sentences than the limit.
  """
  if not isinstance(payload, dict):
    raise RequestError(400, "the request must be a JSON object with \"instances\" (row format) or "
                            f"\"inputs\" (columnar format), got {type(payload).__name__}")
  unknown = sorted(set(payload) - {"signature_name", "instances", "inputs"})
  if unknown:
    raise RequestError(400, f"unknown field(s) {unknown}; a predict request has "
                            "\"signature_name\" (optional) and \"instances\" or \"inputs\"")
  signature = payload.get("signature_name", DEFAULT_SIGNATURE)
  if not isinstance(signature, str):
    raise RequestError(400, "\"signature_name\" must be a string")
  signature = signature or DEFAULT_SIGNATURE
  if signature not in SIGNATURES:
    raise RequestError(400, f"Serving signature name: \"{signature}\" not found in signature def; "
                            f"this model has {list(SIGNATURES)}")
  if ("instances" in payload) == ("inputs" in payload):
    raise RequestError(400, "a request has either \"instances\" (row format) or \"inputs\" "
                            "(columnar format), exactly one of the two"
                            + (", not both" if "inputs" in payload else ""))
  if "instances" in payload:
    columnar = False
    values = payload["instances"]
    if not isinstance(values, list):
      raise RequestError(400, "\"instances\" must be a list: one sentence (a string or "
                              f"{{\"{INPUT_NAME}\": string}}) per instance")
    sentences = []
    for i, value in enumerate(values):
      if isinstance(value, dict) and "b64" not in value:
        if set(value) != {INPUT_NAME}:
          raise RequestError(400, f"instances[{i}] has the field(s) {sorted(value)}; the signature's "
                                  f"only input is \"{INPUT_NAME}\"")
        value = value[INPUT_NAME]
      sentences.append(_string(value, f"instances[{i}]"))
  else:
    columnar = True
    values = payload["inputs"]
    if isinstance(values, dict):
      if set(values) != {INPUT_NAME}:
        raise RequestError(400, f"\"inputs\" has the field(s) {sorted(values)}; the signature's only "
                                f"input is \"{INPUT_NAME}\"")
      values = values[INPUT_NAME]
    if not isinstance(values, list):
      raise RequestError(400, f"\"inputs\" must give \"{INPUT_NAME}\" as a list of strings (a [N] "
                              f"string tensor), got {type(values).__name__}")
    sentences = [_string(value, f"inputs.{INPUT_NAME}[{i}]") for i, value in enumerate(values)]
  if not sentences:
    raise RequestError(400, "the request holds no sentences; send at least one")
  if len(sentences) > limits.max_sentences_per_request:
    raise RequestError(413, f"the request holds {len(sentences)} sentences, more than the limit "
                            f"of {limits.max_sentences_per_request} (--max_sentences_per_request); "
                            "split it")
  for i, sentence in enumerate(sentences):
    if len(sentence) > limits.max_sentence_chars:
      raise RequestError(413, f"sentence {i} has {len(sentence)} characters, more than the limit "
                              f"of {limits.max_sentence_chars} (--max_sentence_chars)")
  return PredictRequest(signature, sentences, columnar)


def predict_response(request: PredictRequest, beams: list) -> dict:
  """The answer to `request` given each sentence's beams [(text, score), ...]."""
  if request.signature == "nbest":
    translations = [[text for text, _ in line] for line in beams]
    scores = [[score for _, score in line] for line in beams]
  else:
    translations = [line[0][0] for line in beams]
    scores = [line[0][1] for line in beams]
  if request.columnar:
    return {"outputs": {"translations": translations, "scores": scores}}
  return {"predictions": [{"translations": t, "scores": s} for t, s in zip(translations, scores)]}


def model_status(version: str, state: str = "AVAILABLE") -> dict:
  """GetModelStatusResponse's JSON: one version, AVAILABLE (or LOADING while it warms up)."""
  return {"model_version_status": [{"version": version, "state": state,
                                    "status": {"error_code": "OK", "error_message": ""}}]}


def model_metadata(name: str, version: str, signature_defs: dict) -> dict:
  """GetModelMetadataResponse's JSON."""
  return {"model_spec": {"name": name, "signature_name": "", "version": version},
          "metadata": {"signature_def": {"signature_def": signature_defs}}}


def servable_not_found(name: str, version: str | None) -> RequestError:
  """TF Serving's 404 for an unknown model name or version."""
  spec = f"Specific({name}, {version})" if version else f"Latest({name})"
  return RequestError(404, f"Servable not found for request: {spec}")
