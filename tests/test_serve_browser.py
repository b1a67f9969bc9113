"""t2t-lite-serve's page in a real headless browser (Debian's Chromium and chromedriver, installed
by scripts/install_browser.sh; Selenium drives them): type sentences, get the decoder's
translations, the n-best list and the attention heatmap; a parsing model's tree.

Skipped, with the reason, only where Chromium is missing and CI is not set; under CI a missing
browser fails. The screenshot goes to the test's temporary folder, and to
docs/images/serve_page.png with T2T_LITE_UPDATE_SCREENSHOT=1 (the picture docs/serving.md shows).
"""

import os
import pathlib
import re
import shutil

import numpy as np
import pytest

from t2t_lite.decoding import attention_pictures
from t2t_lite.hparams import DecodeHParams
from t2t_lite.serving import app as app_lib
from t2t_lite.serving import backends
from t2t_lite.serving.batching import BatchingOptions

REPO = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
DECODE = "beam_size=2,extra_length=20,xla=false"
SENTENCES = ["A man in a blue shirt is riding a bike down the street .",
             "Two dogs play in the snow .", "A woman reads a book in the park ."]
WAIT = 600   # seconds: a guard against a hang, never a speed requirement


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
  if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    message = (f"Chromium and chromedriver not found ({CHROMIUM}, {CHROMEDRIVER}); "
               "scripts/install_browser.sh installs them")
    if os.environ.get("CI"):
      pytest.fail(message + " (CI is set: the browser test must run)")
    pytest.skip(message)
  from selenium import webdriver
  from selenium.webdriver.chrome.service import Service
  # Chromium's profile and scratch folders (org.chromium.Chromium.*) under pytest's temporary
  # folder, which pytest prunes, instead of left in /tmp after every run.
  scratch = tmp_path_factory.mktemp("chromium")
  options = webdriver.ChromeOptions()
  options.binary_location = CHROMIUM
  options.add_argument(f"--user-data-dir={scratch / 'profile'}")
  for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                   "--window-size=1100,1250", "--lang=en-US"):
    options.add_argument(argument)
  service = Service(executable_path=CHROMEDRIVER, env={**os.environ, "TMPDIR": str(scratch)})
  driver = webdriver.Chrome(service=service, options=options)
  yield driver
  driver.quit()


def wait(driver, condition):
  from selenium.webdriver.support.ui import WebDriverWait
  return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(condition)


def css(driver, selector):
  from selenium.webdriver.common.by import By
  return driver.find_elements(By.CSS_SELECTOR, selector)


def shown_heatmap(driver):
  """The heatmap as drawn, read in one script (no half-redrawn table): (source tokens, target
  tokens, the cells' data-weight per target row)."""
  source_tokens, target_tokens, weights = driver.execute_script(
      "const q = (s, f) => Array.from(document.querySelectorAll(s), f);"
      "return [q('#heatmap thead th span', e => e.textContent), q('#heatmap tbody th', e => e.textContent),"
      " q('#heatmap td.cell', e => e.dataset.weight)];")
  assert len(weights) == len(source_tokens) * len(target_tokens)
  weights = np.array([float(w) for w in weights]).reshape(len(target_tokens), len(source_tokens))
  return source_tokens, target_tokens, weights


def nbest_shown(driver):
  """The n-best list as shown, read in one script: [(text, score as printed)], best first."""
  return [tuple(item) for item in driver.execute_script(
      "return Array.from(document.querySelectorAll('#nbest li'), li =>"
      " [li.querySelector('span.text').textContent, li.querySelector('span.score').textContent]);")]


def open_page_and_translate(driver, url, sentences):
  driver.get(url)
  wait(driver, lambda d: d.execute_script("return document.body.dataset.ready === 'true'"))
  source = css(driver, "#source")[0]
  source.clear()
  source.send_keys("\n".join(sentences))
  css(driver, "#translate")[0].click()
  wait(driver, lambda d: len(css(d, "#results tbody tr[data-state='done']")) == len(sentences))


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
  return backends.ModelDirBackend(str(tiny_model_dir[0]), DecodeHParams().parse(DECODE),
                                  BatchingOptions(max_batch_size=4).batch_sizes)


def test_page_shows_translations_nbest_and_attention_heatmap(browser, backend, tmp_path):
  beams = backend.translator.translate_beams(SENTENCES)         # the decoder's path
  with app_lib.running(app_lib.create_app(backend, "ende", BatchingOptions(max_batch_size=4))) as url:
    open_page_and_translate(browser, url, SENTENCES)
    rows = css(browser, "#results tbody tr")
    assert [row.find_element("css selector", "td.source").text for row in rows] == SENTENCES
    assert [row.find_element("css selector", "td.translation").text for row in rows] == [
        b[0][0] for b in beams]
    assert backend.translator.translate(SENTENCES) == [b[0][0] for b in beams]

    # The first row is selected: its n-best list, best first, with scores. Row 1's list differs
    # (scores at least), so the page showing row 0's list or row 1's tells which row it follows.
    nbest = [[(t, f"{s:.3f}") for t, s in b] for b in beams]
    assert nbest[0] != nbest[1]
    assert nbest_shown(browser) == nbest[0]

    # The heatmap: one cell per (target piece, source piece), last layer, mean of the heads.
    wait(browser, lambda d: d.execute_script("return document.getElementById('heatmap').dataset.drawn"))
    expected = []
    for sentence, b in zip(SENTENCES[:2], beams):
      weights, source_tokens, target_tokens, _ = attention_pictures.attention_for_pair(
          backend.translator.model, backend.vocab, sentence, b[0][0])
      expected.append((source_tokens, target_tokens,
                       np.mean(np.asarray(weights["encoder_decoder"][-1]), axis=0)))
    assert expected[0][0] != expected[1][0]                       # different sources: rows differ
    shown = shown_heatmap(browser)
    assert shown[:2] == expected[0][:2]
    np.testing.assert_allclose(shown[2], expected[0][2], atol=1e-3)
    cells = css(browser, "#heatmap td.cell")
    colors = {c.value_of_css_property("background-color") for c in cells}
    assert len(colors) > len(cells) // 4                           # drawn: weights as colours
    browser.save_screenshot(str(tmp_path / "serve_page.png"))
    if os.environ.get("T2T_LITE_UPDATE_SCREENSHOT") == "1":
      shutil.copy(tmp_path / "serve_page.png", REPO / "docs" / "images" / "serve_page.png")

    # Another row, another heatmap: the page follows. Selecting fills the n-best list and empties
    # the heatmap in one step, so once row 1's list shows, a non-empty heatmap is the one drawn
    # for row 1 (a page that kept row 0's heatmap fails the comparison at once, with no wait out).
    rows[1].click()
    wait(browser, lambda d: nbest_shown(d) == nbest[1])
    assert "selected" in rows[1].get_attribute("class").split()
    wait(browser, lambda d: d.execute_script(
        "return document.querySelector('#heatmap tbody th') !== null"
        " || !document.getElementById('attention-note').textContent.startsWith('computing')"))
    shown = shown_heatmap(browser)
    assert shown[:2] == expected[1][:2]
    np.testing.assert_allclose(shown[2], expected[1][2], atol=1e-3)


# --- A parsing model: its output as a tree. --------------------------------------------------------

@pytest.fixture(scope="module")
def parsing_backend(tiny_parsing_model_dir):
  """tests/conftest.py's untrained parsing model: its trees are poor but well-formed over the
  input (the problem's decoding constraint)."""
  model_dir, problem = tiny_parsing_model_dir
  decode = problem.default_decode_hparams().parse("beam_size=2,extra_length=60,xla=false")
  return backends.ModelDirBackend(str(model_dir), decode, (1, 2)), problem


def test_parsing_tree_endpoint(parsing_backend):
  """/api/tree without a browser: the repaired tree over the input words, as parse evaluation
  reads a decoded line (`linearize.tree_from_linearized`)."""
  from starlette.testclient import TestClient

  from t2t_lite.parsing import linearize
  backend, problem = parsing_backend
  sentences = [source for source, _ in problem.text_pairs("dev")[:2]]
  with TestClient(app_lib.create_app(backend, "parser", BatchingOptions(max_batch_size=2))) as client:
    info = client.get("/api/info").json()
    assert info["parsing"] is True and info["problem"] == "parsing_english_ptb8k_tags"
    outputs = client.post("/v1/models/parser:predict", json={"instances": sentences}).json()
    outputs = [p["translations"] for p in outputs["predictions"]]
    assert outputs == backend.translator.translate(sentences)
    for sentence, output in zip(sentences, outputs):
      served = client.post("/api/tree", json={"source": sentence, "output": output}).json()
      expected = linearize.tree_from_linearized(output, sentence, leaf_tags=True)
      assert served["ptb"] == str(expected.tree) and served["repairs"] == list(expected.repairs)
      words = []
      stack = [served["tree"]]
      while stack:
        node = stack.pop()
        if "word" in node:
          words.append(node["word"])
        else:
          stack.extend(reversed(node["children"]))
      assert words == sentence.split()
    malformed = client.post("/api/tree", json={"source": sentences[0], "output": "(S (NP XX"}).json()
    assert "unclosed" in malformed["repairs"]


def test_parsing_model_shows_its_tree(browser, parsing_backend, tmp_path):
  from t2t_lite.parsing import linearize
  backend, problem = parsing_backend
  sentence = problem.text_pairs("dev")[0][0]
  output = backend.decode([sentence])[0][0][0]
  expected = linearize.tree_from_linearized(output, sentence, leaf_tags=True)
  assert expected.repairs == ()                                  # constrained: well formed
  with app_lib.running(app_lib.create_app(backend, "parser", BatchingOptions(max_batch_size=2))) as url:
    open_page_and_translate(browser, url, [sentence])
    assert css(browser, "td.translation")[0].text == output
    wait(browser, lambda d: css(d, "#tree svg"))
    words = [t.text for t in css(browser, "#tree svg text.word")]
    labels = [t.text for t in css(browser, "#tree svg text.label")]
    assert words == sentence.split() == expected.tree.leaves()
    assert labels == re.findall(r"\((\S+)", str(expected.tree))   # every constituent, in order
    wait(browser, lambda d: css(d, "#tree-ptb")[0].text.startswith(str(expected.tree)))
    browser.execute_script("document.getElementById('nbest').scrollIntoView()")
    browser.save_screenshot(str(tmp_path / "serve_parse_tree.png"))
    if os.environ.get("T2T_LITE_UPDATE_SCREENSHOT") == "1":
      shutil.copy(tmp_path / "serve_parse_tree.png", REPO / "docs" / "images" / "serve_parse_tree.png")
