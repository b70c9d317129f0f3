// The attention figure: every layer × head of every attention module at once, as small
// multiples on one colour scale (0 to 1), masked cells hatched; and one panel enlarged with its
// token labels. Weights come from /attention: per module (H, T_query, T_key), row-major.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const DECODER_SELF = "decoder self-attention";
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
// Blues, from white (weight 0) to dark blue (weight 1); masked cells: grey with dark hatching
const RAMP = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
const LUT = Array.from({ length: 256 }, (_, i) => rampColor(i / 255));
const HATCH_BACK = "#d4d4d4";
const HATCH_LINE = "#737373";
const MASKED_TEXT = "masked: a query does not see later pieces";

function rampColor(w) {
  const x = Math.min(Math.max(w, 0), 1) * (RAMP.length - 1);
  const i = Math.min(Math.floor(x), RAMP.length - 2);
  const t = x - i;
  return RAMP[i].map((a, c) => Math.round(a + (RAMP[i + 1][c] - a) * t));
}

function color(w) {
  return `rgb(${LUT[Math.round(Math.min(Math.max(w, 0), 1) * 255)].join(",")})`;
}

function decodeWeights(module) {
  // base64 of little-endian uint16 values, weight x 65535, in (H, T, S) order -> Float32Array
  const bytes = Uint8Array.from(atob(module.weights), (c) => c.charCodeAt(0));
  const view = new DataView(bytes.buffer);
  const values = new Float32Array(bytes.length / 2);
  for (let i = 0; i < values.length; i++) values[i] = view.getUint16(2 * i, true) / 65535;
  return values;
}

function weightAt(module, h, q, k) {
  const [, T, S] = module.shape;
  return module.values[(h * T + q) * S + k];
}

function isMasked(module, q, k) {
  return module.role === DECODER_SELF && k > q; // the causal mask: a later piece
}

function roleGroups(maps) {
  // [{role, modules (by layer)}] in the order the model runs them
  const order = Object.keys(ROLE_NAMES);
  const roles = [...new Set(maps.modules.map((m) => m.role))];
  roles.sort((a, b) => order.indexOf(a) - order.indexOf(b));
  return roles.map((role) => ({ role, modules: maps.modules.filter((m) => m.role === role)
    .sort((a, b) => a.layer - b.layer) }));
}

function panelCell(maps, width) {
  // pixels a cell, so that a row of heads fits `width`: 1 (the longest sentences) to 14
  const heads = Math.max(...maps.modules.map((m) => m.shape[0]));
  const longest = Math.max(maps.src_pieces.length, maps.out_pieces.length);
  const room = Math.floor((width - 80) / heads) - 10;
  return Math.max(1, Math.min(14, Math.floor(room / longest)));
}

function hatch(context) {
  const tile = document.createElement("canvas");
  tile.width = tile.height = 6;
  const c = tile.getContext("2d");
  c.fillStyle = HATCH_BACK;
  c.fillRect(0, 0, 6, 6);
  c.strokeStyle = HATCH_LINE;
  c.lineWidth = 1.5;
  c.beginPath();
  c.moveTo(-1, 7);
  c.lineTo(7, -1);
  c.stroke();
  return context.createPattern(tile, "repeat");
}

function drawPanel(context, x, y, module, head, cell) {
  // one head's (T, S) weights at (x, y), `cell` pixels a weight; masked cells hatched
  const [, T, S] = module.shape;
  const image = new ImageData(S, T);
  const pixels = image.data; // (T, S, RGBA)
  for (let i = 0; i < T * S; i++) {
    const rgb = LUT[Math.round(Math.min(Math.max(module.values[head * T * S + i], 0), 1) * 255)];
    pixels.set(rgb, 4 * i);
    pixels[4 * i + 3] = 255;
  }
  const tile = document.createElement("canvas");
  [tile.width, tile.height] = [S, T];
  tile.getContext("2d").putImageData(image, 0, 0);
  context.imageSmoothingEnabled = false;
  context.drawImage(tile, x, y, S * cell, T * cell);
  if (module.role !== DECODER_SELF) return;
  context.fillStyle = hatch(context);
  for (let q = 0; q < T - 1; q++) {
    context.fillRect(x + (q + 1) * cell, y + q * cell, (T - q - 1) * cell, cell);
  }
}

function panelButton(module, head, cell, onPick) {
  const [, T, S] = module.shape;
  const name = `${ROLE_NAMES[module.role] || module.role}, layer ${module.layer + 1}, ` +
    `head ${head + 1}`;
  const button = element("button", "panel");
  Object.assign(button, { type: "button", title: `${name}: click to enlarge` });
  button.setAttribute("aria-label", `${name}: enlarge`);
  Object.assign(button.dataset, { module: module.name, head, layer: module.layer,
    role: module.role });
  const canvas = element("canvas");
  [canvas.width, canvas.height] = [S * cell, T * cell];
  drawPanel(canvas.getContext("2d"), 0, 0, module, head, cell);
  button.append(canvas);
  button.addEventListener("click", () => onPick(module.name, head));
  return button;
}

function drawGrids(maps, onPick) {
  // a grid per role: rows are layers, columns heads
  const box = $("grids");
  const cell = panelCell(maps, box.clientWidth || 1000);
  box.replaceChildren(...roleGroups(maps).map(({ role, modules }) => {
    const heads = modules[0].shape[0];
    const grid = element("section", "grid");
    grid.dataset.role = role;
    grid.append(element("h3", null, ROLE_NAMES[role] || role), element("p", "muted",
      `${modules.length} layer${modules.length > 1 ? "s" : ""} × ${heads} ` +
      `head${heads > 1 ? "s" : ""}; in each panel, rows: ${AXIS_NAMES[modules[0].queries]}, ` +
      `columns: ${AXIS_NAMES[modules[0].keys]}.`));
    const panels = element("div", "panels");
    panels.style.gridTemplateColumns = `repeat(${heads + 1}, max-content)`;
    panels.append(element("span"), ...Array.from({ length: heads },
      (_, h) => element("span", "head", `head ${h + 1}`)));
    for (const module of modules) {
      panels.append(element("span", "layer", `layer ${module.layer + 1}`));
      for (let h = 0; h < heads; h++) panels.append(panelButton(module, h, cell, onPick));
    }
    grid.append(panels);
    return grid;
  }));
  box.dataset.cell = cell;
  return cell;
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

function hatchDefs() {
  const pattern = svgNode("pattern", { id: "masked-hatch", width: 6, height: 6,
    patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
  pattern.append(svgNode("rect", { width: 6, height: 6, fill: HATCH_BACK }),
    svgNode("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: HATCH_LINE, "stroke-width": 2 }));
  const defs = svgNode("defs", {});
  defs.append(pattern);
  return defs;
}

function drawDetail(maps, module, head) {
  // one panel enlarged: token labels on both axes, a cell per weight to point at
  const queries = maps[module.queries];
  const keys = maps[module.keys];
  const CELL = Math.max(queries.length, keys.length) > 40 ? 16 : 28;
  const left = textWidth(queries) + 36;
  const top = textWidth(keys) * 0.75 + 36; // key labels are turned 50 degrees
  const svg = svgNode("svg", { width: left + keys.length * CELL + 40, role: "img",
    height: top + queries.length * CELL + 10, tabindex: 0 });
  const title = `${ROLE_NAMES[module.role] || module.role}, layer ${module.layer + 1}, ` +
    `head ${head + 1}`;
  svg.setAttribute("aria-label", `${title}: ${queries.length} queries ` +
    `(${AXIS_NAMES[module.queries]}) by ${keys.length} keys (${AXIS_NAMES[module.keys]})`);
  svg.append(hatchDefs(), svgNode("text", { x: left, y: 14, class: "axis" },
    `keys: ${AXIS_NAMES[module.keys]}`));
  const middle = top + (queries.length * CELL) / 2;
  svg.append(svgNode("text", { x: 14, y: middle, class: "axis", "text-anchor": "middle",
    transform: `rotate(-90 14 ${middle})` }, `queries: ${AXIS_NAMES[module.queries]}`));
  keys.forEach((key, k) => {
    const x = left + k * CELL + CELL / 2;
    svg.append(svgNode("text", { x, y: top - 6, id: `key-${k}`,
      transform: `rotate(-50 ${x} ${top - 6})` }, key));
  });
  queries.forEach((query, q) => {
    svg.append(svgNode("text", { x: left - 6, y: top + q * CELL + CELL / 2 + 4,
      "text-anchor": "end", id: `query-${q}` }, query));
    keys.forEach((key, k) => {
      const masked = isMasked(module, q, k);
      const w = weightAt(module, head, q, k);
      const cell = svgNode("rect", { x: left + k * CELL, y: top + q * CELL, width: CELL - 1,
        height: CELL - 1, fill: masked ? "url(#masked-hatch)" : color(w),
        class: masked ? "cell masked" : "cell", "data-q": q, "data-k": k,
        "data-w": masked ? "masked" : w.toFixed(3) });
      cell.append(svgNode("title", {}, `${query} → ${key}: ` +
        (masked ? MASKED_TEXT : w.toFixed(3))));
      svg.append(cell);
    });
  });
  const outlined = outlineLinks(svg, maps, module, left, top, CELL);
  svg.addEventListener("mouseover", (event) => point(event.target, queries, keys));
  svg.addEventListener("keydown", (event) => step(event, svg, queries, keys));
  $("detail-title").textContent = title;
  $("heatmap").replaceChildren(svg);
  $("cell").textContent = "Point at a cell, or focus the map and use the arrow keys, to read " +
    "its weight.";
  $("alignment-note").textContent = outlined ? "Outlined in red: the word alignment " +
    `(${maps.alignment.reading}), the cells of each linked source and output word.` : "";
}

function outlineLinks(svg, maps, module, left, top, cell) {
  // the word alignment over the map it is read from: the cells of each linked word pair
  const a = maps.alignment;
  const read = a && module.queries === "out_pieces" &&
    (a.layer === null || module.layer === a.layer);
  if (!read) return 0;
  const linked = new Set(a.links.map(([i, j]) => `${i},${j}`));
  let count = 0;
  a.out_words.forEach((j, q) => a.src_words.forEach((i, k) => {
    if (i < 0 || j < 0 || !linked.has(`${i},${j}`)) return;
    svg.append(svgNode("rect", { x: left + k * cell + 1, y: top + q * cell + 1,
      width: cell - 3, height: cell - 3, class: "link", "data-q": q, "data-k": k }));
    count++;
  }));
  return count;
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
  const w = target.dataset.w;
  $("cell").textContent = `query “${queries[q]}” → key “${keys[k]}”: ` +
    (w === "masked" ? MASKED_TEXT : `weight ${w}`);
}
