// Downloads of what the page draws: the figure as a PNG (the grids, their labels, the sentence,
// the model and the colour scale on one canvas) and the weights as JSON numbers with labels.
"use strict";

const FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";

function figureLayout(maps, cell, top) {
  // where each grid, label and panel goes, below a title `top` pixels tall
  const gap = 6;
  let y = top;
  const grids = roleGroups(maps).map(({ role, modules }) => {
    const [heads, T, S] = modules[0].shape;
    const grid = { role, modules, heads, y, panel: [S * cell, T * cell], gap };
    grid.width = 86 + heads * (S * cell + gap);
    grid.height = 52 + modules.length * (T * cell + gap);
    y += grid.height + 14;
    return grid;
  });
  return { grids, width: Math.max(640, ...grids.map((g) => g.width + 16)), height: y + 56 };
}

function wrap(c, text, width) {
  // `text` in lines no wider than `width` pixels (a word wider than that gets a line)
  const lines = [""];
  for (const word of text.split(" ")) {
    const line = lines[lines.length - 1];
    if (line && c.measureText(`${line} ${word}`).width > width) lines.push(word);
    else lines[lines.length - 1] = line ? `${line} ${word}` : word;
  }
  return lines;
}

function figureCanvas(maps, facts, cell) {
  // the whole figure on one canvas, for the PNG: a title, the grids, the colour scale
  const canvas = document.createElement("canvas");
  const c = canvas.getContext("2d");
  const width = figureLayout(maps, cell, 0).width;
  const title = [[`600 15px ${FONT}`, "#1a1a1a", `${maps.source}  →  ${maps.translation}`],
    [`12px ${FONT}`, "#4b5563", factsLine(facts)],
    [`12px ${FONT}`, "#4b5563", maps.forced ? "Attention while the model is fed this " +
      "translation (teacher forcing)." : "Attention while the model re-reads its greedy " +
      "translation."]].flatMap(([font, fill, text]) => {
    c.font = font;
    return wrap(c, text, width - 32).map((line) => [font, fill, line]);
  });
  const layout = figureLayout(maps, cell, 24 + 19 * title.length);
  [canvas.width, canvas.height] = [layout.width, layout.height];
  c.fillStyle = "#fff";
  c.fillRect(0, 0, canvas.width, canvas.height);
  title.forEach(([font, fill, line], i) => {
    [c.font, c.fillStyle] = [font, fill];
    c.fillText(line, 16, 24 + 19 * i);
  });
  for (const grid of layout.grids) drawGrid(c, grid, cell);
  drawScale(c, 16, layout.height - 40);
  return canvas;
}

function drawGrid(c, grid, cell) {
  const [w, h] = grid.panel;
  const m = grid.modules[0];
  c.fillStyle = "#1a1a1a";
  c.font = `600 13px ${FONT}`;
  c.fillText(ROLE_NAMES[grid.role] || grid.role, 16, grid.y + 14);
  c.font = `11px ${FONT}`;
  c.fillStyle = "#4b5563";
  c.fillText(`rows: ${AXIS_NAMES[m.queries]}; columns: ${AXIS_NAMES[m.keys]}`, 16,
    grid.y + 30);
  for (let head = 0; head < grid.heads; head++) {
    c.fillText(`head ${head + 1}`, 86 + head * (w + grid.gap), grid.y + 46);
  }
  grid.modules.forEach((module, row) => {
    const y = grid.y + 52 + row * (h + grid.gap);
    c.fillStyle = "#4b5563"; // (a panel leaves the hatching as the fill)
    c.fillText(`layer ${module.layer + 1}`, 16, y + Math.min(h, 24) / 2 + 4);
    for (let head = 0; head < grid.heads; head++) {
      drawPanel(c, 86 + head * (w + grid.gap), y, module, head, cell);
    }
  });
}

function drawScale(c, x, y) {
  // the colour scale shared by every panel, and the masked cells' hatching
  const width = 200;
  for (let i = 0; i < width; i++) {
    c.fillStyle = color(i / (width - 1));
    c.fillRect(x + 24 + i, y, 1, 14);
  }
  c.strokeStyle = "#d1d5db";
  c.strokeRect(x + 24, y, width, 14);
  c.fillStyle = "#1a1a1a";
  c.font = `12px ${FONT}`;
  c.fillText("0", x + 10, y + 12);
  c.fillText("1  attention weight (every panel, one scale)", x + 30 + width, y + 12);
  c.fillStyle = hatch(c);
  c.fillRect(x + 24, y + 20, 28, 14);
  c.fillStyle = "#1a1a1a";
  c.fillText(MASKED_TEXT, x + 60, y + 32);
}

function factsLine(facts) {
  if (!facts) return "";
  const lang = facts.source_lang ? `${facts.source_lang} → ${facts.target_lang} · ` : "";
  const parameters = facts.parameters ? `${(facts.parameters / 1e6).toFixed(1)}M parameters · `
    : "";
  return `${lang}${facts.model} · ${parameters}step ${facts.step} · ${facts.device} · ` +
    `${facts.precision} · ${facts.engine} engine`;
}

function weightsJson(maps, facts) {
  // the weights as numbers (to the 1/65535 they were sent in), with their labels
  const round = (w) => Math.round(w * 1e5) / 1e5;
  const modules = maps.modules.map((m) => {
    const [H, T, S] = m.shape;
    const weights = Array.from({ length: H }, (_, h) => Array.from({ length: T }, (_, q) =>
      Array.from({ length: S }, (_, k) => round(weightAt(m, h, q, k)))));
    return { name: m.name, role: m.role, layer: m.layer, queries: m.queries, keys: m.keys,
      shape: m.shape, masked: m.role === DECODER_SELF ? `keys after the query (${MASKED_TEXT})`
        : null, weights };
  });
  const model = facts ? Object.fromEntries(["model", "parameters", "step", "source_lang",
    "target_lang", "device", "precision", "engine"].map((k) => [k, facts[k]])) : null;
  return JSON.stringify({ source: maps.source, translation: maps.translation,
    forced: maps.forced, model, src_pieces: maps.src_pieces, tgt_in_pieces: maps.tgt_in_pieces,
    out_pieces: maps.out_pieces, modules });
}

function save(blob, name) {
  const link = element("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
}

function downloadPng(maps, facts, cell) {
  figureCanvas(maps, facts, cell).toBlob((blob) => save(blob, "attention.png"), "image/png");
}

function downloadJson(maps, facts) {
  save(new Blob([weightsJson(maps, facts)], { type: "application/json" }), "attention.json");
}
