// Conversations in localStorage: {id, title, messages: [{role, content, pieces?, stats?, error?, state?}]}.
// When the browser's quota runs out, the token data of the oldest answers goes first (their text stays).

const KEY = "piegpu.chats";

function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

export class Chats {
  constructor() {
    let saved = {};
    try { saved = JSON.parse(localStorage.getItem(KEY) || "{}"); } catch (e) { saved = {}; }
    this.list = Array.isArray(saved.chats) ? saved.chats : [];
    this.currentId = saved.current;
    for (const c of this.list) {
      for (const m of c.messages) if (m.state === "streaming") m.state = "stopped";  // the tab closed mid-answer
    }
    if (!this.list.some(c => c.id === this.currentId)) {
      if (this.list.length) this.currentId = this.list[0].id; else this.create();
    }
  }

  all() { return this.list; }

  current() { return this.list.find(c => c.id === this.currentId); }

  create() {
    const cur = this.current();
    if (cur && !cur.messages.length) return cur;  // an empty chat is already open
    const chat = { id: newId(), title: "", messages: [] };
    this.list.unshift(chat);
    this.currentId = chat.id;
    this.save();
    return chat;
  }

  select(id) { this.currentId = id; this.save(); }

  remove(id) {
    this.list = this.list.filter(c => c.id !== id);
    if (this.currentId === id) {
      this.currentId = this.list.length ? this.list[0].id : undefined;
      if (!this.list.length) this.create();
    }
    this.save();
  }

  clear() {
    this.list = [];
    this.currentId = undefined;
    this.create();
  }

  save() {
    for (;;) {
      try {
        localStorage.setItem(KEY, JSON.stringify({ chats: this.list, current: this.currentId }));
        return;
      } catch (e) {
        if (!this.dropOldestTokens()) return;  // nothing left to drop: this state is not saved
      }
    }
  }

  dropOldestTokens() {
    for (let c = this.list.length - 1; c >= 0; c--) {
      for (const m of this.list[c].messages) {
        if (m.pieces) { delete m.pieces; return true; }
      }
    }
    return false;
  }
}
