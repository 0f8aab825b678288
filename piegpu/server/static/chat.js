// The chat page of `piegpu serve`: conversations kept in localStorage, answers streamed from
// /v1/chat/completions (SSE), Stop aborting the fetch (the server then cancels the row), the token
// view built from the stream's logprobs. No framework, no network but this server.

import { Settings } from "./settings.js";
import { TokenPopup, appendPiece, tokenKeys } from "./tokens.js";
import { Chats } from "./store.js";

const $ = id => document.getElementById(id);
const KEY = "piegpu.apiKey";
let config = { model: "default", api_key_required: false, fields: {} };
let settings, popup, chats;
let running = null;  // {controller, chat, msg} while an answer streams

// ---- the server ------------------------------------------------------------------------------
function headers() {
  const h = { "Content-Type": "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

function askKey(why) {
  // the key dialog; resolves once the server accepts a key (it stays in this tab's sessionStorage)
  return new Promise(resolve => {
    const dlg = $("key-dialog"), err = $("key-error"), input = $("key-input");
    err.hidden = !why;
    err.textContent = why || "";
    input.value = "";
    const onSubmit = async e => {
      e.preventDefault();
      sessionStorage.setItem(KEY, input.value.trim());
      const r = await fetch("/v1/models", { headers: headers() }).catch(() => null);
      if (r && r.ok) {
        $("key-form").removeEventListener("submit", onSubmit);
        dlg.close();
        resolve();
      } else {
        sessionStorage.removeItem(KEY);
        err.hidden = false;
        err.textContent = r ? "The server refused this key (401). Fix: use the key given to piegpu serve --api-key."
          : "Could not reach the server. Fix: check that piegpu serve is running.";
        input.select();
      }
    };
    $("key-form").addEventListener("submit", onSubmit);
    dlg.addEventListener("cancel", e => e.preventDefault(), { once: true });
    if (!dlg.open) dlg.showModal();
    input.focus();
  });
}

async function errorText(resp) {
  const text = await resp.text();
  try {
    const body = JSON.parse(text);
    if (body.error) return typeof body.error === "string" ? body.error : body.error.message;
  } catch (e) { /* not JSON */ }
  return `HTTP ${resp.status}: ${text.slice(0, 300)}`;
}

function requestBody(chat) {
  // -> [body, error]: the settings, the structured-output box and the conversation as one request
  const { fields, error } = settings.fields();
  if (error) return [null, error];
  const body = { model: config.model, stream: true, stream_options: { include_usage: true }, ...fields };
  if ($("want-logprobs").checked) {
    const n = Number($("top-logprobs").value || 0);
    body.logprobs = true;
    if (n > 0) body.top_logprobs = n;
  }
  const kind = $("format-kind").value, text = $("format-text").value.trim();
  if (kind !== "none" && kind !== "json_object" && !text) {
    return [null, `Structured output is set to ${kind} but its box is empty. Fix: fill it in, or choose "nothing".`];
  }
  if (kind === "json_schema") {
    let schema;
    try { schema = JSON.parse(text); } catch (e) {
      return [null, `The JSON schema box is not valid JSON (${e.message}). Fix: paste a JSON Schema object.`];
    }
    body.response_format = { type: "json_schema", json_schema: { name: "answer", schema } };
  } else if (kind === "json_object") body.response_format = { type: "json_object" };
  else if (kind === "regex") body.regex = text;
  else if (kind === "grammar") body.grammar = text;
  const messages = [];
  const system = $("system-prompt").value.trim();
  if (system) messages.push({ role: "system", content: system });
  for (const m of chat.messages) {
    if (m.error || (m.role === "assistant" && !m.content)) continue;
    messages.push({ role: m.role, content: m.content });
  }
  body.messages = messages;
  return [body, null];
}

async function generate(chat) {
  // streams one assistant answer into a new last message of `chat`
  const msg = { role: "assistant", content: "", pieces: [], state: "streaming" };
  chat.messages.push(msg);
  const view = render();
  const el = view.last;
  const [body, problem] = requestBody(chat);
  if (problem) return finish(chat, msg, "error", problem);
  const controller = new AbortController();
  running = { controller, chat, msg };
  setBusy(true);
  const t0 = performance.now();
  let tFirst = null, usage = null, reason = null, count = 0;
  try {
    let resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body),
      signal: controller.signal });
    if (resp.status === 401) {
      sessionStorage.removeItem(KEY);
      await askKey("The server wants an API key (401).");
      resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body),
        signal: controller.signal });
    }
    if (!resp.ok) return finish(chat, msg, "error", await errorText(resp));
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.error) return finish(chat, msg, "error", chunk.error.message || String(chunk.error));
          if (chunk.usage) usage = chunk.usage;
          for (const choice of chunk.choices || []) {
            if (choice.finish_reason) reason = choice.finish_reason;
            const text = choice.delta && choice.delta.content;
            const entries = choice.logprobs && choice.logprobs.content;
            if (!text && !(entries && entries.length)) continue;
            if (tFirst === null) tFirst = performance.now();
            const piece = { text: text || "" };
            if (entries && entries.length) {
              piece.toks = entries.map(e => ({ t: e.token, lp: e.logprob,
                top: (e.top_logprobs || []).map(a => [a.token, a.logprob]) }));
              count += entries.length;
            } else count += 1;
            msg.content += piece.text;
            msg.pieces.push(piece);
            appendPiece(el.body, piece, el.tokens);
            el.node.dataset.chunks = String(msg.pieces.length);
            follow();
          }
        }
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") {
      return finish(chat, msg, "error", `Lost the connection to the server (${e.message}). Fix: check that ` +
        "piegpu serve is still running, then Regenerate.");
    }
  }
  const tEnd = performance.now();
  const stopped = controller.signal.aborted;
  const n = usage ? usage.completion_tokens : count;
  msg.stats = {
    tokens: n, ttft: tFirst === null ? null : (tFirst - t0) / 1000,
    tps: tFirst !== null && n > 1 && tEnd > tFirst ? (n - 1) / ((tEnd - tFirst) / 1000) : null,
    prompt: usage ? usage.prompt_tokens : null,
    cached: usage && usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : null,
    reason: stopped ? "stopped" : reason,
  };
  return finish(chat, msg, stopped ? "stopped" : "done");
}

function finish(chat, msg, state, error) {
  msg.state = state;
  if (error) {
    msg.error = error;
    msg.content = "";
    notice(error);
  }
  running = null;
  setBusy(false);
  chats.save();
  render();
  $("prompt").focus();
}

function notice(text) {
  $("notice").hidden = !text;
  $("notice").textContent = text || "";
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  document.body.classList.toggle("busy", busy);
  $("conversation").setAttribute("aria-busy", String(busy));  // screen readers read the answer once, when done
}

function follow() {
  const box = $("conversation");
  if (box.scrollHeight - box.scrollTop - box.clientHeight < 120) box.scrollTop = box.scrollHeight;
}

// ---- rendering -------------------------------------------------------------------------------
function statsText(s) {
  const parts = [`${s.tokens} tokens`];
  if (s.tps !== null) parts.push(`${s.tps.toFixed(1)} tokens/s`);
  if (s.ttft !== null) parts.push(`first token ${s.ttft.toFixed(2)} s`);
  if (s.prompt !== null) parts.push(`${s.cached ?? 0} of ${s.prompt} prompt tokens cached`);
  if (s.reason) parts.push(s.reason);
  return parts.join(" \u00b7 ");
}

function button(label, title, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "quiet small";
  b.textContent = label;
  b.title = title;
  b.addEventListener("click", onClick);
  return b;
}

async function copy(text, b) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  b.textContent = "Copied";
  setTimeout(() => { b.textContent = "Copy"; }, 1500);
}

function messageNode(chat, msg, i) {
  const node = document.createElement("article");
  node.className = `msg ${msg.role}` + (msg.error ? " error" : "");
  node.dataset.state = msg.state || "done";
  node.setAttribute("aria-label", msg.role === "user" ? "You" : "Assistant");
  const body = document.createElement("div");
  body.className = "body";
  const tokens = [];
  if (msg.error) body.textContent = msg.error;
  else if (msg.pieces && msg.pieces.length) {
    for (const p of msg.pieces) appendPiece(body, p, tokens);
  } else body.textContent = msg.content;
  if (msg.role === "assistant" && !msg.error) {
    body.tabIndex = 0;
    body.setAttribute("aria-label", "Answer (arrow keys walk its tokens, Enter shows a token's alternatives)");
    tokenKeys(body, tokens, popup);
  }
  node.append(body);
  if (msg.role === "assistant" && msg.state !== "streaming") {
    const foot = document.createElement("div");
    foot.className = "foot";
    const stats = document.createElement("span");
    stats.className = "stats";
    if (msg.stats) stats.textContent = statsText(msg.stats);
    foot.append(stats);
    if (!msg.error) foot.append(button("Copy", "Copy this answer", e => copy(msg.content, e.target)));
    if (i === chat.messages.length - 1) {
      foot.append(button("Regenerate", "Draw this answer again", () => {
        if (running) return;
        chat.messages.pop();
        generate(chat);
      }));
    }
    node.append(foot);
  }
  return { node, body, tokens };
}

function render() {
  const chat = chats.current();
  const box = $("conversation");
  box.replaceChildren();
  let last = null;
  chat.messages.forEach((m, i) => {
    last = messageNode(chat, m, i);
    box.append(last.node);
  });
  if (!chat.messages.length) {
    const hint = document.createElement("p");
    hint.className = "empty";
    hint.textContent = `Ask ${config.model} something. Click a word of an answer to see what else the model ` +
      "considered there.";
    box.append(hint);
  }
  box.scrollTop = box.scrollHeight;
  renderList();
  return { last };
}

function renderList() {
  const list = $("chat-list");
  list.replaceChildren();
  for (const c of chats.all()) {
    const li = document.createElement("li");
    const open = document.createElement("button");
    open.type = "button";
    open.className = "chat-link";
    open.textContent = c.title || "New chat";
    if (c.id === chats.currentId) open.setAttribute("aria-current", "page");
    open.addEventListener("click", () => { if (!running) { chats.select(c.id); render(); closeNarrow("chats"); } });
    const del = button("\u2715", "Delete this chat", () => { if (!running) { chats.remove(c.id); render(); } });
    del.setAttribute("aria-label", `Delete chat ${c.title || "New chat"}`);
    li.append(open, del);
    list.append(li);
  }
}

// ---- wiring ----------------------------------------------------------------------------------
function send() {
  const text = $("prompt").value;
  if (running || !text.trim()) return;
  notice("");
  const chat = chats.current();
  chat.messages.push({ role: "user", content: text });
  if (!chat.title) chat.title = text.trim().slice(0, 48);
  $("prompt").value = "";
  chats.save();
  generate(chat);
}

function drawer(name, open) {
  const el = $(name);
  el.dataset.open = String(open);
  $("toggle-" + name).setAttribute("aria-expanded", String(open));
}

function closeNarrow(name) {
  if (!matchMedia("(min-width: 1000px)").matches) drawer(name, false);
}

async function init() {
  chats = new Chats();
  popup = new TokenPopup($("token-popup"));
  try {
    const r = await fetch("/chat/config.json");
    config = await r.json();
  } catch (e) {
    notice("Could not read /chat/config.json from the server. Fix: check that piegpu serve is running, then reload.");
  }
  $("model-name").textContent = config.model;
  settings = new Settings($("settings"), config.fields);
  const extra = ["system-prompt", "format-kind", "format-text", "want-logprobs", "top-logprobs", "colour-tokens"];
  for (const id of extra) $(id).addEventListener("change", () => settings.save(extra));
  settings.save(extra);
  document.body.classList.toggle("colour", $("colour-tokens").checked);
  $("colour-tokens").addEventListener("change", e => document.body.classList.toggle("colour", e.target.checked));
  const wide = matchMedia("(min-width: 1000px)").matches;
  drawer("chats", wide);
  drawer("settings", wide);
  for (const name of ["chats", "settings"]) {
    $("toggle-" + name).addEventListener("click", () => drawer(name, $(name).dataset.open !== "true"));
  }
  document.addEventListener("keydown", e => {  // Escape closes an overlay drawer (narrow screens), back to its button
    if (e.key !== "Escape" || matchMedia("(min-width: 1000px)").matches || !$("token-popup").hidden) return;
    for (const name of ["chats", "settings"]) {
      if ($(name).dataset.open === "true") { drawer(name, false); $("toggle-" + name).focus(); }
    }
  });
  $("composer").addEventListener("submit", e => { e.preventDefault(); send(); });
  $("prompt").addEventListener("keydown", e => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
    if (e.key === "Escape" && running) running.controller.abort();
  });
  $("stop").addEventListener("click", () => { if (running) running.controller.abort(); });
  $("new-chat").addEventListener("click", () => { if (!running) { chats.create(); render(); $("prompt").focus(); } });
  $("clear-chats").addEventListener("click", () => { if (!running) { chats.clear(); render(); } });
  $("reset-settings").addEventListener("click", () => settings.reset());
  render();
  if (config.api_key_required && !sessionStorage.getItem(KEY)) await askKey("");
  document.body.dataset.ready = "true";
  $("prompt").focus();
}

init();
