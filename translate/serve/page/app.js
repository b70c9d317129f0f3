// The page: translate what is typed, list each sentence's n-best translations, and draw the
// attention of the one picked (figure.js; export.js downloads it). Talks to the server's JSON
// endpoints (/health, /translate, /attention); nothing else loads.
"use strict";

const $ = (id) => document.getElementById(id);

let maps = null; // the drawn /attention answer, its weights decoded (`values`)
let facts = null; // the /health answer: the model, its run and the server's limits
let shown = null; // the enlarged panel: {module, head}
let asked = 0; // /attention requests made: an answer to an older one is dropped

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

function candidateButton(source, text, value, rank, sentence) {
  // one translation of one sentence: a button that draws its attention below
  const button = element("button", rank === 0 ? "candidate best" : "candidate",
    text || "(empty translation)");
  button.type = "button";
  button.lang = targetLang;
  button.append(score(value));
  Object.assign(button.dataset, { sentence, rank, target: text });
  button.setAttribute("aria-pressed", "false");
  if (!text) {
    button.classList.add("empty");
    button.disabled = true; // an empty translation has no pieces to draw
    button.title = "an empty translation: no attention to draw";
  } else {
    button.title = "draw the attention of this translation";
    button.addEventListener("click", () => pick(button, source));
  }
  return button;
}

function showTranslations(sources, answer) {
  // each source sentence, then its numbered n-best list, best first: each one can be picked
  const list = $("translations");
  list.replaceChildren();
  sources.forEach((source, i) => {
    const item = element("li");
    const texts = answer.nbest > 1 ? answer.translations[i] : [answer.translations[i]];
    const scores = answer.nbest > 1 ? answer.scores[i] : [answer.scores[i]];
    const nbest = element("ol", "nbest");
    nbest.append(...texts.map((text, j) => {
      const line = element("li");
      line.append(candidateButton(source, text, scores[j], j, i));
      return line;
    }));
    item.append(element("p", "source", source), nbest);
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
    // the first translation that is not empty: the best of the first sentence, as a rule
    const first = document.querySelector("#translations .candidate:not(:disabled)");
    await (first ? pick(first, sources[Number(first.dataset.sentence)]) :
      loadAttention(sources[0], null));
  } catch (e) {
    showError(e.message);
  } finally {
    button.disabled = false;
    button.textContent = "Translate";
  }
}

async function pick(button, source) {
  // mark `button`'s translation as the one drawn, and draw it
  document.querySelectorAll("#translations .candidate").forEach((b) => {
    b.setAttribute("aria-pressed", String(b === button));
  });
  const { sentence, rank, target } = button.dataset;
  const which = `translation ${Number(rank) + 1} of sentence ${Number(sentence) + 1}`;
  try {
    showError("");
    await loadAttention(source, target, which);
  } catch (e) {
    showError(e.message);
  }
}

async function loadAttention(source, target, which) {
  // the attention of `target` (a translation of `source`; null: the greedy one), drawn
  const request = ++asked;
  $("attention").setAttribute("aria-busy", "true");
  try {
    const answer = await call("/attention", target ? { text: source, target } :
      { text: source });
    if (request === asked) showAttention(Object.assign(answer, { source }), which);
  } finally {
    if (request === asked) $("attention").removeAttribute("aria-busy");
  }
}

function showAttention(answer, which) {
  for (const module of answer.modules) module.values = decodeWeights(module);
  maps = answer;
  $("attention-which").textContent = maps.forced ? `is fed ${which}` :
    "re-reads its greedy translation";
  $("attention-translation").textContent = maps.translation;
  $("attention").hidden = false;
  const grids = $("grids");
  grids.dataset.outPieces = JSON.stringify(maps.out_pieces);
  grids.dataset.srcPieces = JSON.stringify(maps.src_pieces);
  drawGrids(maps, enlarge);
  const old = shown && maps.modules.find((m) => m.name === shown.module);
  if (old && shown.head < old.shape[0]) {
    enlarge(shown.module, shown.head);
  } else { // the last layer's cross-attention (the RNN: its alignment), first head
    const groups = roleGroups(maps);
    const last = groups[groups.length - 1].modules;
    enlarge(last[last.length - 1].name, 0);
  }
}

function enlarge(name, head) {
  shown = { module: name, head };
  document.querySelectorAll("#grids .panel").forEach((p) => {
    const on = p.dataset.module === name && Number(p.dataset.head) === head;
    p.classList.toggle("on", on);
    p.setAttribute("aria-pressed", String(on));
  });
  drawDetail(maps, maps.modules.find((m) => m.name === name), head);
}

function showFacts(health) {
  // the model and its run, as /health reports them
  const items = [
    ["Model", health.model],
    ["Parameters", health.parameters ? `${(health.parameters / 1e6).toFixed(1)} M` : "?"],
    ["Trained", `${health.step.toLocaleString("en")} steps`],
    ["Languages", `${languageName(health.source_lang || "en")} → ` +
      `${languageName(health.target_lang || "de")}`],
    ["Device", health.device], ["Precision", health.precision],
    ["Engine", health.engine],
  ];
  $("model").replaceChildren(...items.map(([name, value]) => {
    const item = element("div");
    item.append(element("dt", null, name), element("dd", null, value));
    return item;
  }));
}

async function showModel() {
  try {
    facts = await call("/health");
    showFacts(facts);
    $("beam").max = facts.limits.max_beam;
    if (facts.source_lang && facts.target_lang) {
      showLanguages(facts.source_lang, facts.target_lang);
    }
  } catch (e) {
    $("model").replaceChildren();
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
  $("download-png").addEventListener("click", () =>
    downloadPng(maps, facts, Math.max(Number($("grids").dataset.cell), 3)));
  $("download-json").addEventListener("click", () => downloadJson(maps, facts));
  showModel();
});
