// The settings panel: one control per sampling field the server accepts (llama.cpp's names on the
// OpenAI route), each showing "off" at its off value. Only fields that differ from the server's
// default are sent, so "off" on the page is exactly the server's off.

const KEY = "piegpu.settings";

// [field, label, kind, server default, off test (value -> text shown, or null when on), hint]
const GROUPS = [
  ["Generation", [
    ["max_tokens", "Max tokens", "int", null, v => v === null ? "off: up to the context" : null, "empty: up to the context"],
    ["seed", "Seed", "int", null, v => v === null ? "random" : null, "empty: a random seed per request"],
    ["temperature", "Temperature", "float", 1.0, v => v === 0 ? "greedy" : null, "0 is greedy"],
    ["dynatemp_range", "Dynamic temperature range", "float", 0.0, v => v === 0 ? "off" : null],
    ["dynatemp_exponent", "Dynamic temperature exponent", "float", 1.0, null],
  ]],
  ["Truncation", [
    ["top_k", "Top-k", "int", 0, v => v <= 0 ? "off" : null, "0 or -1: off"],
    ["top_p", "Top-p", "float", 1.0, v => v >= 1 ? "off" : null, "1: off"],
    ["min_p", "Min-p", "float", 0.0, v => v === 0 ? "off" : null, "0: off"],
    ["typical_p", "Typical-p", "float", 1.0, v => v >= 1 ? "off" : null, "1: off"],
    ["top_n_sigma", "Top-n-sigma", "float", -1.0, v => v <= 0 ? "off" : null, "0 or less: off"],
    ["tfs_z", "Tail-free z", "float", 1.0, v => v >= 1 ? "off" : null, "1: off"],
    ["top_a", "Top-a", "float", 0.0, v => v === 0 ? "off" : null, "0: off"],
    ["p_less", "P-less", "bool", false, v => v ? null : "off"],
  ]],
  ["XTC", [
    ["xtc_probability", "XTC probability", "float", 0.0, v => v === 0 ? "off" : null, "0: off"],
    ["xtc_threshold", "XTC threshold", "float", 0.1, v => v > 0.5 ? "off (above 0.5)" : null, "above 0.5: off"],
  ]],
  ["DRY", [
    ["dry_multiplier", "DRY multiplier", "float", 0.0, v => v === 0 ? "off" : null, "0: off"],
    ["dry_base", "DRY base", "float", 1.75, null],
    ["dry_allowed_length", "DRY allowed length", "int", 2, null],
    ["dry_penalty_last_n", "DRY last n", "int", -1, v => v === -1 ? "whole context" : v === 0 ? "off" : null],
    ["dry_sequence_breakers", "DRY breakers (JSON list)", "json", null, v => v === null ? "default" : null,
     'e.g. ["\\n", ":", "\\"", "*"]'],
  ]],
  ["Mirostat", [
    ["mirostat", "Mirostat", "select", 0, v => v === 0 ? "off" : null, "1: v1, 2: v2 (then only temperature applies)"],
    ["mirostat_tau", "Mirostat tau", "float", 5.0, null],
    ["mirostat_eta", "Mirostat eta", "float", 0.1, null],
  ]],
  ["Penalties and bias", [
    ["repeat_penalty", "Repeat penalty", "float", 1.0, v => v === 1 ? "off" : null, "1: off"],
    ["presence_penalty", "Presence penalty", "float", 0.0, v => v === 0 ? "off" : null, "0: off"],
    ["frequency_penalty", "Frequency penalty", "float", 0.0, v => v === 0 ? "off" : null, "0: off"],
    ["logit_bias", "Logit bias (id:bias, ...)", "bias", null, v => v === null ? "off" : null, "e.g. 1234:-100, 42:5"],
  ]],
  ["Order and stops", [
    ["samplers", "Sampler order", "text", null, v => v === null ? "default" : null, "e.g. top_k;top_p;min_p"],
    ["stop", "Stop strings (one per line)", "lines", null, v => v === null ? "off" : null],
  ]],
];

const FIELDS = GROUPS.flatMap(([, rows]) => rows);
const PAGE_DEFAULTS = { max_tokens: "256" };  // a chat turn on a CPU adapter should end

function parse(kind, raw) {
  // -> [value, error]; an empty box is the server default (null for optional fields)
  if (kind === "bool") return [raw === true, null];
  const text = raw.trim();
  if (text === "") return [null, null];
  if (kind === "int" || kind === "float" || kind === "select") {
    const v = Number(text);
    if (!Number.isFinite(v)) return [null, "is not a number"];
    if (kind !== "float" && !Number.isInteger(v)) return [null, "must be a whole number"];
    return [v, null];
  }
  if (kind === "json") {
    try { return [JSON.parse(text), null]; } catch (e) { return [null, `is not valid JSON (${e.message})`]; }
  }
  if (kind === "bias") {
    const out = {};
    for (const part of text.split(",").map(s => s.trim()).filter(Boolean)) {
      const m = /^(\d+)\s*:\s*(-?[\d.]+(?:e-?\d+)?)$/i.exec(part);
      if (!m) return [null, `has "${part}"; write token-id:bias pairs, e.g. 1234:-100`];
      out[m[1]] = Number(m[2]);
    }
    return [out, null];
  }
  if (kind === "lines") return [raw.split("\n").filter(s => s.length > 0), null];
  return [text, null];
}

export class Settings {
  constructor(root, ranges) {
    this.root = root;
    this.ranges = ranges || {};
    this.inputs = {};
    this.build();
    this.load();
  }

  build() {
    const box = this.root.querySelector("#sampler-controls");
    for (const [title, rows] of GROUPS) {
      const det = document.createElement("details");
      det.open = title === "Generation" || title === "Truncation";
      const sum = document.createElement("summary");
      sum.textContent = title;
      det.append(sum);
      for (const [field, label, kind, def, , hint] of rows) det.append(this.row(field, label, kind, def, hint));
      box.append(det);
    }
  }

  row(field, label, kind, def, hint) {
    const row = document.createElement("div");
    row.className = "field";
    const id = "f-" + field;
    const lab = document.createElement("label");
    lab.htmlFor = id;
    lab.textContent = label;
    let input;
    if (kind === "select") {
      input = document.createElement("select");
      for (const [v, t] of [["0", "off"], ["1", "v1"], ["2", "v2"]]) input.append(new Option(t, v));
    } else if (kind === "lines") {
      input = document.createElement("textarea");
      input.rows = 2;
    } else {
      input = document.createElement("input");
      if (kind === "bool") input.type = "checkbox";
      else if (kind === "int" || kind === "float") {
        input.type = "number";
        input.step = "any";
        const r = this.ranges[field] || {};
        if (r.ge !== undefined && Math.abs(r.ge) < 1e15) input.min = r.ge;
        if (r.le !== undefined) input.max = r.le;
      } else input.type = "text";
      if (def !== null && kind !== "bool") input.placeholder = String(def);
    }
    input.id = id;
    input.dataset.field = field;
    input.dataset.kind = kind;
    if (hint) input.title = hint;
    const state = document.createElement("output");
    state.className = "state";
    state.htmlFor = id;
    input.addEventListener("input", () => { this.show(field); this.save(); });
    input.addEventListener("change", () => { this.show(field); this.save(); });
    row.append(lab, input, state);
    this.inputs[field] = input;
    return row;
  }

  raw(field) {
    const input = this.inputs[field];
    return input.type === "checkbox" ? input.checked : input.value;
  }

  value(field) {
    // -> [value with the default filled in, error]
    const spec = FIELDS.find(f => f[0] === field);
    const input = this.inputs[field];
    if (input.validity && input.validity.badInput) return [null, "is not a number"];
    const [v, err] = parse(spec[2], this.raw(field));
    return [v === null ? spec[3] : v, err];
  }

  show(field) {
    const spec = FIELDS.find(f => f[0] === field);
    const input = this.inputs[field];
    const [v, err] = this.value(field);
    const off = err ? null : spec[4] ? spec[4](v) : null;
    const state = input.parentElement.querySelector(".state");
    state.textContent = err ? "?" : off !== null ? off : "";
    input.parentElement.classList.toggle("is-off", off !== null);
  }

  fields() {
    // -> {fields: request body fields that differ from the server default, error: text or null}
    const body = {};
    for (const [field, label, kind, def] of FIELDS) {
      const [v, err] = this.value(field);
      if (err) return { fields: null, error: `${label} (${field}) ${err}. Fix it in Settings.` };
      if (kind === "lines" && v && v.length === 0) continue;
      if (kind === "bias" && v && Object.keys(v).length === 0) continue;
      if (v !== def && v !== null) body[field] = v;
    }
    return { fields: body, error: null };
  }

  load() {
    let saved = {};
    try { saved = JSON.parse(localStorage.getItem(KEY) || "{}"); } catch (e) { saved = {}; }
    const values = saved.values || PAGE_DEFAULTS;
    for (const [field, input] of Object.entries(this.inputs)) {
      const v = values[field];
      if (input.type === "checkbox") input.checked = v === true;
      else input.value = v === undefined ? "" : v;
      this.show(field);
    }
    const extra = saved.extra || {};
    for (const [id, v] of Object.entries(extra)) {
      const el = document.getElementById(id);
      if (!el) continue;
      if (el.type === "checkbox") el.checked = !!v; else el.value = v;
    }
  }

  save(extraIds) {
    if (extraIds) this.extraIds = extraIds;
    const values = {};
    for (const field of Object.keys(this.inputs)) values[field] = this.raw(field);
    const extra = {};
    for (const id of this.extraIds || []) {
      const el = document.getElementById(id);
      extra[id] = el.type === "checkbox" ? el.checked : el.value;
    }
    try { localStorage.setItem(KEY, JSON.stringify({ values, extra })); } catch (e) { /* full: not saved */ }
  }

  reset() {
    for (const [field, input] of Object.entries(this.inputs)) {
      const v = PAGE_DEFAULTS[field];
      if (input.type === "checkbox") input.checked = false; else input.value = v === undefined ? "" : v;
      this.show(field);
    }
    this.save();
  }
}

export const FIELD_NAMES = FIELDS.map(f => f[0]);
