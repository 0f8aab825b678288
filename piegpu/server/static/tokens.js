// The token view: an answer drawn as one span per generated token (from the stream's logprobs),
// a popup listing the top alternatives the device computed for that step with their probabilities
// (the drawn token highlighted), and classes that colour tokens by probability.

export function visible(text) {
  // whitespace made visible in the popup, where a bare space or newline would not show
  return text.replace(/ /g, "\u2423").replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5") || "\u2205";
}

function bucket(p) {
  return p >= 0.9 ? "p5" : p >= 0.6 ? "p4" : p >= 0.3 ? "p3" : p >= 0.1 ? "p2" : "p1";
}

export function appendPiece(box, piece, store) {
  // piece: {text, toks: [{t, lp, top: [[text, lp], ...]}] or undefined}; store: the message's token list
  const toks = piece.toks || [];
  if (!toks.length) {
    if (piece.text) box.append(document.createTextNode(piece.text));
    return;
  }
  const joined = toks.map(t => t.t).join("");
  // One span per token when the token texts spell the piece; else (a character split across tokens,
  // a stop string cut) one span for the piece, carrying its first token's alternatives.
  const parts = joined === piece.text ? toks.map(t => [t.t, t]) : [[piece.text, toks[0]]];
  for (const [text, tok] of parts) {
    const span = document.createElement("span");
    span.className = "tok " + bucket(Math.exp(tok.lp));
    span.textContent = text;
    span.tabIndex = -1;
    span.dataset.i = String(store.length);
    store.push(tok);
    box.append(span);
  }
}

export class TokenPopup {
  constructor(el) {
    this.el = el;
    this.anchor = null;
    document.addEventListener("click", e => {
      if (!this.el.hidden && !this.el.contains(e.target) && !e.target.classList.contains("tok")) this.close();
    });
    document.addEventListener("keydown", e => {
      if (e.key === "Escape" && !this.el.hidden) {
        const back = this.anchor;
        this.close();
        if (back) back.focus();
      }
    });
  }

  open(span, tok) {
    this.anchor = span;
    for (const s of document.querySelectorAll(".tok.selected")) s.classList.remove("selected");
    span.classList.add("selected");
    const el = this.el;
    el.replaceChildren();
    const head = document.createElement("p");
    head.className = "popup-head";
    const chosenP = Math.exp(tok.lp);
    head.textContent = `drawn: ${visible(tok.t)}  p = ${(chosenP * 100).toFixed(2)}%`;
    const list = document.createElement("ol");
    list.className = "alts";
    let listed = false, sum = 0;
    const rows = tok.top.map(([t, lp]) => [t, Math.exp(lp)]);
    for (const [t, p] of rows) {
      const chosen = !listed && t === tok.t && Math.abs(p - chosenP) < 1e-6;
      listed = listed || chosen;
      sum += p;
      list.append(this.row(t, p, chosen));
    }
    if (!listed) {
      const li = this.row(tok.t, chosenP, true);
      li.classList.add("outside");
      li.title = "the drawn token was not among the top alternatives";
      list.append(li);
    }
    const foot = document.createElement("p");
    foot.className = "popup-foot";
    foot.textContent = rows.length
      ? `${rows.length} alternatives, ${(sum * 100).toFixed(1)}% of the model's probability (before the sampler's ` +
        "temperature, truncation, penalties and grammar)"
      : "no alternatives: set 'Alternatives per token' above 0 in Settings";
    el.append(head, list, foot);
    el.hidden = false;
    const r = span.getBoundingClientRect();
    const w = Math.min(300, window.innerWidth - 16);
    el.style.setProperty("--x", Math.max(8, Math.min(r.left, window.innerWidth - w - 8)) + "px");
    const below = r.bottom + 6;
    el.style.setProperty("--y", (below + 260 > window.innerHeight ? Math.max(8, r.top - 266) : below) + "px");
  }

  row(t, p, chosen) {
    const li = document.createElement("li");
    li.dataset.p = String(p);
    if (chosen) { li.classList.add("chosen"); li.setAttribute("aria-current", "true"); }
    const name = document.createElement("span");
    name.className = "alt-token";
    name.textContent = visible(t);
    const bar = document.createElement("span");
    bar.className = "bar";
    const fill = document.createElement("span");
    fill.style.setProperty("width", Math.max(0.5, p * 100).toFixed(1) + "%");
    bar.append(fill);
    const pct = document.createElement("span");
    pct.className = "pct";
    pct.textContent = (p * 100).toFixed(p < 0.001 ? 3 : 1) + "%";
    li.append(name, bar, pct);
    return li;
  }

  close() {
    this.el.hidden = true;
    for (const s of document.querySelectorAll(".tok.selected")) s.classList.remove("selected");
    this.anchor = null;
  }
}

export function tokenKeys(box, tokens, popup) {
  // keyboard: the answer text is one tab stop; arrows walk its tokens, Enter/Space opens the alternatives
  box.addEventListener("keydown", e => {
    const spans = [...box.querySelectorAll(".tok")];
    if (!spans.length) return;
    const at = spans.indexOf(document.activeElement);
    let next = null;
    if (e.key === "ArrowRight") next = at < 0 ? 0 : Math.min(spans.length - 1, at + 1);
    else if (e.key === "ArrowLeft") next = at < 0 ? spans.length - 1 : Math.max(0, at - 1);
    else if ((e.key === "Enter" || e.key === " ") && at >= 0) {
      e.preventDefault();
      popup.open(spans[at], tokens[Number(spans[at].dataset.i)]);
      return;
    }
    if (next !== null) {
      e.preventDefault();
      spans[next].focus();
      if (!popup.el.hidden) popup.open(spans[next], tokens[Number(spans[next].dataset.i)]);
    }
  });
  box.addEventListener("click", e => {
    const span = e.target.closest(".tok");
    if (span) popup.open(span, tokens[Number(span.dataset.i)]);
  });
}
