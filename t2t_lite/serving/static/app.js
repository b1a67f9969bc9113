// t2t-lite-serve's page: one TF Serving predict request per sentence ("nbest" signature), so
// translations appear as they come; the selected row shows its n-best list, the encoder-decoder
// attention as a heatmap table (/api/attention) and, for parsing models, the tree (/api/tree).
"use strict";

const state = { info: null, rows: [], selected: -1, attention: null };
const $ = (id) => document.getElementById(id);

async function postJSON(url, body) {
  const response = await fetch(url, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

async function loadInfo() {
  const response = await fetch("/api/info");
  state.info = await response.json();
  const info = state.info;
  const dh = info.decode_hparams || {};
  const parts = [`model "${info.model_name}" version ${info.version}`, `backend ${info.backend}`];
  if (info.problem) parts.push(`problem ${info.problem}`);
  if (dh.beam_size !== undefined) parts.push(`beam ${dh.beam_size}, alpha ${dh.alpha}`);
  $("model-info").textContent = parts.join(" \u00b7 ");
  if (info.parsing) $("output-heading").textContent = "linearized tree";
  await waitUntilWarm();
  document.body.dataset.ready = "true";
}

// At start the server compiles its search shapes (warm-up): /health answers 503 until then.
async function waitUntilWarm() {
  for (;;) {
    const response = await fetch("/health").catch(() => null);
    if (response && response.ok) {
      $("status").textContent = "";
      return;
    }
    const data = response ? await response.json().catch(() => ({})) : {};
    $("status").textContent = data.status === "warming up"
      ? "the model is warming up (compiling its search)\u2026" : "waiting for the server\u2026";
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function formatScore(score) {
  return typeof score === "number" ? score.toFixed(3) : "";
}

function translateAll() {
  const lines = $("source").value.split("\n").map((line) => line.trim()).filter((line) => line);
  const tbody = document.querySelector("#results tbody");
  tbody.textContent = "";
  state.rows = [];
  state.selected = -1;
  $("details").hidden = true;
  if (!lines.length) {
    $("status").textContent = "type a sentence first";
    return;
  }
  let done = 0;
  $("status").textContent = `translating ${lines.length} sentence(s)\u2026`;
  lines.forEach((line, index) => {
    const tr = document.createElement("tr");
    tr.dataset.state = "pending";
    tr.dataset.index = String(index);
    for (const [name, text] of [["number", String(index + 1)], ["source", line],
                                ["translation", "translating\u2026"], ["score", ""]]) {
      const td = document.createElement("td");
      td.className = name;
      td.textContent = text;
      tr.appendChild(td);
    }
    tr.addEventListener("click", () => select(index));
    tbody.appendChild(tr);
    const row = { source: line, tr, beams: null };
    state.rows.push(row);
    const url = `/v1/models/${encodeURIComponent(state.info.model_name)}:predict`;
    postJSON(url, { signature_name: "nbest", instances: [line] })
      .then((data) => {
        const prediction = data.predictions[0];
        row.beams = prediction.translations.map((text, b) => ({ text, score: prediction.scores[b] }));
        tr.querySelector("td.translation").textContent = row.beams[0].text;
        tr.querySelector("td.score").textContent = formatScore(row.beams[0].score);
        tr.dataset.state = "done";
        if (state.selected < 0) select(index);
      })
      .catch((error) => {
        tr.querySelector("td.translation").textContent = `error: ${error.message}`;
        tr.dataset.state = "error";
      })
      .finally(() => {
        done += 1;
        $("status").textContent = done < lines.length
          ? `${done} of ${lines.length} translated\u2026` : `${lines.length} translated`;
      });
  });
}

function select(index) {
  const row = state.rows[index];
  if (!row || !row.beams) return;
  state.selected = index;
  state.rows.forEach((r, i) => r.tr.classList.toggle("selected", i === index));
  $("details").hidden = false;
  const list = $("nbest");
  list.textContent = "";
  for (const beam of row.beams) {
    const li = document.createElement("li");
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = beam.text;
    const score = document.createElement("span");
    score.className = "score";
    score.textContent = formatScore(beam.score);
    li.append(text, score);
    list.appendChild(li);
  }
  showAttention(row);
  if (state.info.parsing) showTree(row);
}

// --- Attention heatmap. ------------------------------------------------------------------------

async function showAttention(row) {
  const table = $("heatmap");
  table.textContent = "";
  $("layer").textContent = "";
  $("head").textContent = "";
  if (!state.info.attention) {
    $("attention-note").textContent = "this backend (a SavedModel) has no attention weights; " +
      "serve the model directory (--output_dir) to see them";
    return;
  }
  if (!row.beams[0].text) {
    $("attention-note").textContent = "empty translation: nothing to show";
    return;
  }
  $("attention-note").textContent = "computing\u2026";
  try {
    const data = await postJSON("/api/attention", { source: row.source, target: row.beams[0].text });
    if (state.rows[state.selected] !== row) return;   // another row was selected meanwhile
    state.attention = data;
    const layers = data.encoder_decoder.length;
    const heads = data.encoder_decoder[0].length;
    for (let l = 0; l < layers; l++) $("layer").add(new Option(`${l + 1} of ${layers}`, String(l)));
    $("layer").value = String(layers - 1);
    $("head").add(new Option("average of heads", "mean"));
    for (let h = 0; h < heads; h++) $("head").add(new Option(String(h + 1), String(h)));
    drawHeatmap();
  } catch (error) {
    $("attention-note").textContent = `attention: ${error.message}`;
  }
}

function weightsOf(layer, head) {
  const heads = state.attention.encoder_decoder[layer];
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, t) => row.map((_, s) =>
    heads.reduce((sum, h) => sum + h[t][s], 0) / heads.length));
}

function color(weight) {   // white -> dark blue
  const w = Math.max(0, Math.min(1, weight));
  const mix = (a, b) => Math.round(a + (b - a) * w);
  return `rgb(${mix(247, 8)}, ${mix(251, 48)}, ${mix(255, 107)})`;
}

function drawHeatmap() {
  const data = state.attention;
  const weights = weightsOf(Number($("layer").value), $("head").value);
  // Colours span 0 to the largest weight shown (averaged heads are flatter than single ones).
  const largest = Math.max(1e-6, ...weights.map((row) => Math.max(...row)));
  $("attention-note").textContent =
    `white: 0, darkest blue: ${largest.toFixed(3)} (the largest weight shown); hover a cell for its weight`;
  const table = $("heatmap");
  table.textContent = "";
  const head = table.createTHead().insertRow();
  head.appendChild(document.createElement("th"));
  for (const token of data.source_tokens) {
    const th = document.createElement("th");
    const span = document.createElement("span");
    span.textContent = token;
    th.appendChild(span);
    head.appendChild(th);
  }
  const body = table.createTBody();
  data.target_tokens.forEach((token, t) => {
    const tr = body.insertRow();
    const th = document.createElement("th");
    th.textContent = token;
    tr.appendChild(th);
    data.source_tokens.forEach((sourceToken, s) => {
      const td = tr.insertCell();
      td.className = "cell";
      td.style.backgroundColor = color(weights[t][s] / largest);
      td.dataset.weight = weights[t][s].toFixed(4);
      td.title = `${token} \u2192 ${sourceToken}: ${weights[t][s].toFixed(3)}`;
    });
  });
  table.dataset.drawn = "true";
}

// --- Parse tree (SVG). -------------------------------------------------------------------------

async function showTree(row) {
  $("tree-section").hidden = false;
  $("tree").textContent = "";
  $("tree-ptb").textContent = "";
  try {
    const data = await postJSON("/api/tree", { source: row.source, output: row.beams[0].text });
    if (state.rows[state.selected] !== row) return;
    drawTree(data.tree);
    $("tree-ptb").textContent = data.ptb +
      (data.repairs.length ? `\n(repaired: ${data.repairs.join(", ")})` : "");
  } catch (error) {
    $("tree-ptb").textContent = `tree: ${error.message}`;
  }
}

function drawTree(tree) {
  const NS = "http://www.w3.org/2000/svg";
  const levelHeight = 40, charWidth = 9, gap = 12;   // charWidth: a bold capital at 13px
  let x = 10, depth = 0;
  // Leaves left to right; a constituent sits centred above its children.
  // `above`: the longest label of the chain of single-child constituents right above `node`.
  function layout(node, level, above) {
    depth = Math.max(depth, level);
    if (node.word !== undefined) {   // as wide as the word or the labels stacked above it
      const width = Math.max(Math.max(node.word.length, above) * charWidth, 16);
      const placed = { text: node.word, cls: "word", x: x + width / 2, level, children: [] };
      x += width + gap;
      return placed;
    }
    const chain = node.children.length === 1 ? Math.max(above, node.label.length) : 0;
    const children = node.children.map((child) => layout(child, level + 1, chain));
    const cx = children.length ? (children[0].x + children[children.length - 1].x) / 2 : (x += 30);
    return { text: node.label, cls: "label", x: cx, level, children };
  }
  const root = layout(tree, 0, 0);
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", String(Math.max(x, 100)));
  svg.setAttribute("height", String((depth + 1) * levelHeight + 10));
  const y = (node) => node.cls === "word" ? depth * levelHeight + 25 : node.level * levelHeight + 25;
  (function draw(node) {   // pre-order: a label before its constituents, as in the PTB string
    const text = document.createElementNS(NS, "text");
    text.setAttribute("x", node.x); text.setAttribute("y", y(node));
    text.setAttribute("text-anchor", "middle");
    text.setAttribute("class", node.cls);
    text.textContent = node.text;
    svg.appendChild(text);
    for (const child of node.children) {
      const line = document.createElementNS(NS, "line");
      line.setAttribute("x1", node.x); line.setAttribute("y1", y(node) + 5);
      line.setAttribute("x2", child.x); line.setAttribute("y2", y(child) - 13);
      svg.appendChild(line);
      draw(child);
    }
  })(root);
  $("tree").appendChild(svg);
}

document.addEventListener("DOMContentLoaded", () => {
  $("translate").addEventListener("click", translateAll);
  $("source").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translateAll();
  });
  $("layer").addEventListener("change", drawHeatmap);
  $("head").addEventListener("change", drawHeatmap);
  loadInfo().catch((error) => { $("model-info").textContent = `error: ${error.message}`; });
});
