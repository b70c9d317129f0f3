// The page: translate what is typed, then draw the attention of one sentence's translation.
// Talks to the server's JSON endpoints (/health, /translate, /attention); nothing else loads.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const ROLE_NAMES = {
  "encoder self-attention": "Encoder self-attention",
  "decoder self-attention": "Decoder self-attention (causal)",
  "cross-attention": "Cross-attention (target → source)",
  "additive attention": "Alignment (additive attention)",
};
const AXIS_NAMES = {
  src_pieces: "source pieces",
  tgt_in_pieces: "decoder input pieces",
  out_pieces: "predicted target pieces",
};
// Blues, from white (weight 0) to dark blue (weight 1)
const RAMP = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
const CELL = 28;
const HINT = "Point at a cell, or focus the map and use the arrow keys, to read its weight.";

let maps = null; // the last /attention answer

function color(w) {
  const x = Math.min(Math.max(w, 0), 1) * (RAMP.length - 1);
  const i = Math.min(Math.floor(x), RAMP.length - 2);
  const t = x - i;
  const rgb = RAMP[i].map((a, c) => Math.round(a + (RAMP[i + 1][c] - a) * t));
  return `rgb(${rgb.join(",")})`;
}

function showError(message) {
  const box = $("error");
  box.textContent = message ? `Error: ${message}` : "";
  box.hidden = !message;
}

async function call(path, body) {
  let response;
  try {
    response = await fetch(path, body === undefined ? {} : {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  } catch (e) {
    throw new Error(`could not reach the server (${e.message})`);
  }
  let data = null;
  try {
    data = await response.json();
  } catch (e) {
    data = null;
  }
  if (!response.ok) {
    const reason = data && data.error ? data.error : response.statusText;
    throw new Error(`${reason} (HTTP ${response.status})`);
  }
  return data;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function score(value) {
  return element("span", "score", `score ${value.toFixed(3)}`);
}

// The run's languages, from /health; the page starts as English → German until it answers.
const LANGUAGE_NAMES = {
  cs: "Czech", de: "German", en: "English", es: "Spanish", fr: "French", it: "Italian",
  nl: "Dutch", pt: "Portuguese", ro: "Romanian", ru: "Russian", tr: "Turkish", zh: "Chinese",
};
let targetLang = "de";

function languageName(code) {
  return LANGUAGE_NAMES[code] || code;
}

function showLanguages(source, target) {
  targetLang = target;
  const [from, to] = [languageName(source), languageName(target)];
  $("direction").textContent = `${from} → ${to}`;
  document.title = `translate: ${from} → ${to}, with attention`;
  $("source-label").textContent = `${from}, one sentence a line`;
  $("source").lang = source;
  $("output-heading").textContent = to;
  $("attention-translation").lang = target;
}

function translated(tag, className, text) {
  // an empty output is shown as such, not as nothing
  const node = element(tag, text ? className : `${className || ""} empty`.trim(),
    text || "(empty translation)");
  node.lang = targetLang;
  return node;
}

function showTranslations(sources, answer) {
  // each source sentence, then its translation or its numbered n-best list, best first
  const list = $("translations");
  list.replaceChildren();
  sources.forEach((source, i) => {
    const item = element("li");
    const texts = answer.nbest > 1 ? answer.translations[i] : [answer.translations[i]];
    const scores = answer.nbest > 1 ? answer.scores[i] : [answer.scores[i]];
    item.append(element("p", "source", source));
    const lines = texts.map((text, j) => {
      const line = translated(answer.nbest > 1 ? "li" : "p", j === 0 ? "best" : null, text);
      line.append(score(scores[j]));
      return line;
    });
    if (answer.nbest > 1) {
      const nbest = element("ol", "nbest");
      nbest.append(...lines);
      item.append(nbest);
    } else {
      item.append(lines[0]);
    }
    list.append(item);
  });
  $("output").hidden = false;
}

async function translate() {
  const sources = $("source").value.split("\n").map((s) => s.trim()).filter((s) => s);
  if (!sources.length) {
    showError("type a sentence to translate first.");
    return;
  }
  const beam = Number($("beam").value);
  const nbest = Number($("nbest").value);
  const button = $("translate");
  button.disabled = true;
  button.textContent = "Translating…";
  showError("");
  try {
    const answer = await call("/translate", { texts: sources, beam, nbest });
    showTranslations(sources, answer);
    const select = $("sentence");
    select.replaceChildren(...sources.map((s, i) => new Option(s, String(i))));
    $("sentence-control").hidden = sources.length < 2;
    await loadAttention(sources[0]);
  } catch (e) {
    showError(e.message);
  } finally {
    button.disabled = false;
    button.textContent = "Translate";
  }
}

function decodeWeights(module) {
  // base64 of little-endian uint16 values, weight x 65535, in (H, T, S) order -> nested arrays
  const bytes = Uint8Array.from(atob(module.weights), (c) => c.charCodeAt(0));
  const view = new DataView(bytes.buffer);
  const [H, T, S] = module.shape;
  return Array.from({ length: H }, (_, h) => Array.from({ length: T }, (_, q) =>
    Array.from({ length: S }, (_, k) => view.getUint16(2 * ((h * T + q) * S + k), true) / 65535)));
}

async function loadAttention(text) {
  maps = await call("/attention", { text });
  for (const module of maps.modules) module.weights = decodeWeights(module);
  $("attention-translation").textContent = maps.translation;
  const roles = [...new Set(maps.modules.map((m) => m.role))];
  keepChoice($("role"), roles.map((r) => new Option(ROLE_NAMES[r] || r, r)));
  $("attention").hidden = false;
  chooseRole();
}

function keepChoice(select, options) {
  // new options, keeping the one chosen before where it is still there
  const before = select.value;
  select.replaceChildren(...options);
  if (options.some((o) => o.value === before)) select.value = before;
}

function chooseRole() {
  const role = $("role").value;
  const layers = maps.modules.filter((m) => m.role === role);
  keepChoice($("layer"), layers.map((m) => new Option(`layer ${m.layer + 1}`, m.name)));
  $("layer-control").hidden = layers.length < 2;
  chooseLayer();
}

function chooseLayer() {
  const module = maps.modules.find((m) => m.name === $("layer").value);
  const heads = module.shape[0];
  const options = [new Option(`average of ${heads} heads`, "mean")];
  for (let h = 0; h < heads; h++) options.push(new Option(`head ${h + 1}`, String(h)));
  keepChoice($("head"), options);
  $("head-control").hidden = heads < 2;
  draw();
}

function chosenMatrix(module) {
  const head = $("head").value;
  if (head !== "mean" && module.shape[0] > 1) return module.weights[Number(head)];
  const [H, T, S] = module.shape;
  return Array.from({ length: T }, (_, q) =>
    Array.from({ length: S }, (_, k) => module.weights.reduce((sum, w) => sum + w[q][k], 0) / H));
}

function textWidth(labels) {
  const context = document.createElement("canvas").getContext("2d");
  context.font = "13px system-ui, sans-serif";
  return Math.max(0, ...labels.map((l) => context.measureText(l).width));
}

function svgNode(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attributes)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function draw() {
  const module = maps.modules.find((m) => m.name === $("layer").value);
  const matrix = chosenMatrix(module);
  const queries = maps[module.queries];
  const keys = maps[module.keys];
  const left = textWidth(queries) + 36;
  const top = textWidth(keys) * 0.75 + 36; // key labels are turned 50 degrees
  const width = left + keys.length * CELL + 40;
  const height = top + queries.length * CELL + 10;
  const svg = svgNode("svg", { width, height, role: "img" });
  svg.setAttribute("aria-label", `${ROLE_NAMES[module.role] || module.role}, ` +
    `${$("layer").selectedOptions[0].text}, ${$("head").selectedOptions[0].text}: ` +
    `${queries.length} queries (${AXIS_NAMES[module.queries]}) by ${keys.length} keys ` +
    `(${AXIS_NAMES[module.keys]})`);
  svg.append(svgNode("text", { x: left, y: 14, class: "axis" }, `keys: ${AXIS_NAMES[module.keys]}`));
  svg.append(svgNode("text", { x: 14, y: top + (queries.length * CELL) / 2, class: "axis",
    transform: `rotate(-90 14 ${top + (queries.length * CELL) / 2})`, "text-anchor": "middle" },
  `queries: ${AXIS_NAMES[module.queries]}`));
  keys.forEach((key, k) => {
    const x = left + k * CELL + CELL / 2;
    svg.append(svgNode("text", { x, y: top - 6, id: `key-${k}`,
      transform: `rotate(-50 ${x} ${top - 6})` }, key));
  });
  queries.forEach((query, q) => {
    svg.append(svgNode("text", { x: left - 6, y: top + q * CELL + CELL / 2 + 4,
      "text-anchor": "end", id: `query-${q}` }, query));
    matrix[q].forEach((w, k) => {
      const cell = svgNode("rect", { x: left + k * CELL, y: top + q * CELL, width: CELL - 1,
        height: CELL - 1, fill: color(w), class: "cell", "data-q": q, "data-k": k,
        "data-w": w.toFixed(3) });
      cell.append(svgNode("title", {}, `${query} → ${keys[k]}: ${w.toFixed(3)}`));
      svg.append(cell);
    });
  });
  svg.addEventListener("mouseover", (event) => point(event.target, queries, keys));
  svg.setAttribute("tabindex", "0"); // and the arrow keys move from cell to cell
  svg.addEventListener("keydown", (event) => step(event, svg, queries, keys));
  $("heatmap").replaceChildren(svg);
  $("cell").textContent = HINT;
}

function step(event, svg, queries, keys) {
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  if (!moves[event.key]) return;
  event.preventDefault();
  const on = svg.querySelector("rect.cell.on");
  const [dq, dk] = on ? moves[event.key] : [0, 0];
  const q = Math.min(Math.max((on ? Number(on.dataset.q) : 0) + dq, 0), queries.length - 1);
  const k = Math.min(Math.max((on ? Number(on.dataset.k) : 0) + dk, 0), keys.length - 1);
  point(svg.querySelector(`rect.cell[data-q="${q}"][data-k="${k}"]`), queries, keys);
}

function point(target, queries, keys) {
  if (!target.classList || !target.classList.contains("cell")) return;
  document.querySelectorAll("#heatmap .on").forEach((n) => n.classList.remove("on"));
  const q = Number(target.dataset.q);
  const k = Number(target.dataset.k);
  [target, $(`query-${q}`), $(`key-${k}`)].forEach((n) => n.classList.add("on"));
  $("cell").textContent = `query “${queries[q]}” → key “${keys[k]}”: weight ${target.dataset.w}`;
}

async function showModel() {
  try {
    const health = await call("/health");
    $("model").textContent = `${health.model} · step ${health.step} · ${health.device} · ` +
      `${health.precision} · ${health.engine} engine`;
    $("beam").max = health.limits.max_beam;
    if (health.source_lang && health.target_lang) {
      showLanguages(health.source_lang, health.target_lang);
    }
  } catch (e) {
    $("model").textContent = "";
    showError(e.message);
  }
}

function keepNbestWithinBeam() {
  const beam = Math.max(1, Number($("beam").value) || 1);
  $("nbest").max = beam;
  if (Number($("nbest").value) > beam) $("nbest").value = beam;
}

document.addEventListener("DOMContentLoaded", () => {
  $("translate").addEventListener("click", translate);
  $("source").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      translate();
    }
  });
  $("beam").addEventListener("change", keepNbestWithinBeam);
  keepNbestWithinBeam();
  $("role").addEventListener("change", chooseRole);
  $("layer").addEventListener("change", chooseLayer);
  $("head").addEventListener("change", draw);
  $("sentence").addEventListener("change", async () => {
    try {
      showError("");
      await loadAttention($("sentence").selectedOptions[0].text);
    } catch (e) {
      showError(e.message);
    }
  });
  showModel();
});
