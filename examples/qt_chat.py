"""A desktop chat window over piegpu (PySide6): streamed answers, Stop, sampler settings, multi-turn KV reuse.

The UI thread never waits on the model: each answer is generated on a QThread and its text
pieces reach the window through queued signals, so typing, scrolling and the Stop button
stay live while tokens arrive. Every turn renders the whole history with the model's chat
template and generates with reuse_prefix=True on one working set kept for the conversation,
so only the tokens the working set does not hold yet (the new user turn) are prefilled.

    pip install 'piegpu[qt]'
    python examples/qt_chat.py [--model PATH] [--context 2048] [--temperature 0.2] [--top-p 0.9] [--max-tokens 256]

After loading, the window warms up on its worker (builds the forward passes, compiles the sampler
of the current settings, prefills the chat template's system prompt). What keeps the event loop
free on a CPU adapter is measured in tests/apps/test_qt_chat.py: gc.freeze() after the warm-up and
the driver's threads reniced below the UI thread (yield_cpu_to_ui).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
from dataclasses import dataclass, replace

from PySide6.QtCore import QThread, Signal
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (QApplication, QDoubleSpinBox, QHBoxLayout, QLabel, QLineEdit, QMainWindow,
                               QPushButton, QSpinBox, QTextBrowser, QVBoxLayout, QWidget)

import piegpu

ASSISTANT = "SmolLM"
DRIVER_NICE = 5  # how far below the UI thread a CPU adapter's worker threads run
ENDINGS = {"stop token": "Done", "stop string": "Done", "max_tokens": "Reached max tokens", "cancelled": "Stopped"}


@dataclass(frozen=True)
class Settings:
    """Sampler settings of one turn (temperature 0 means greedy)."""

    temperature: float = 0.2
    top_p: float = 0.9
    max_tokens: int = 256

    def sampler_args(self) -> dict:
        """The generate() keywords these settings stand for."""
        if self.temperature == 0:
            return {"sampler": "greedy"}
        return {"sampler": "top-p", "p": self.top_p, "temperature": self.temperature}


def fit_history(model, messages: list, answer_tokens: int, context: int) -> list:
    """The newest messages whose rendered prompt plus `answer_tokens` fit in `context` tokens.

    Drops the oldest user/assistant exchanges (the prefix then changes, so that turn prefills it all).
    """
    def tokens(ms):
        return len(model.tokenizer.encode(model.chat_prompt(ms)).ids)
    while len(messages) > 1 and tokens(messages) + answer_tokens > context:
        messages = messages[2:]
    return messages


def yield_cpu_to_ui(model) -> int:
    """Run a CPU adapter's native worker threads below the UI thread (Linux); returns how many were lowered.

    On lavapipe the "GPU" is the CPU: while tokens are generated its worker threads keep every core
    busy, and a UI thread competing with them on equal terms waited 40-80 ms for a core here (2 cores).
    At nice +DRIVER_NICE the UI thread gets a core as soon as it wakes. Threads Python started keep
    their priority: they may hold the GIL, which the UI thread needs too.
    """
    if not model.gpu.dev.is_cpu or not os.path.isdir("/proc/self/task"):
        return 0
    python = {t.native_id for t in threading.enumerate()} | {threading.get_native_id()}
    lowered = 0
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        try:
            if tid not in python and os.getpriority(os.PRIO_PROCESS, tid) < DRIVER_NICE:
                os.setpriority(os.PRIO_PROCESS, tid, DRIVER_NICE)
                lowered += 1
        except OSError:  # the thread ended meanwhile, or renicing is not allowed here: nothing to do
            pass
    return lowered


class Turn(QThread):
    """One assistant answer generated on a worker thread; its pieces and its end reach the UI as signals."""

    piece = Signal(str, int, float)  # text piece, tokens so far, decode tokens/s so far
    ended = Signal(object, str)  # the Generation (None if it could not start), error text ("" if none)

    def __init__(self, model, ws, messages: list, settings: Settings, seed: int):
        super().__init__()
        self.model, self.ws, self.messages, self.settings, self.seed = model, ws, messages, settings, seed
        self.generation = None
        self._stop = threading.Event()
        self._first = 0.0

    def stop(self) -> None:
        """Stop the answer at its next token (callable from the UI thread at any moment)."""
        self._stop.set()
        g = self.generation
        if g is not None:
            g.cancel()

    def run(self) -> None:
        """Generate the answer (QThread entry point)."""
        g = None
        try:
            s = self.settings
            messages = fit_history(self.model, self.messages, s.max_tokens, self.ws.max_tokens)
            g = self.model.generate(messages, chat=True, working_set=self.ws, reuse_prefix=True,
                                    max_tokens=s.max_tokens, seed=self.seed, on_token=self._on_token,
                                    **s.sampler_args())
            self.generation = g
            if self._stop.is_set():  # Stop was pressed before the generation existed
                g.cancel()
            g.run()
            self.ended.emit(g, "")
        except Exception as e:  # noqa: BLE001 -- whatever went wrong, the window must hear of it and not hang
            self.ended.emit(g, f"{type(e).__name__}: {e}")

    def _on_token(self, text: str) -> None:
        n = len(self.generation.tokens)
        now = time.perf_counter()
        if n <= 1:
            self._first = now
        rate = (n - 1) / (now - self._first) if n > 1 and now > self._first else 0.0
        self.piece.emit(text, n, rate)


class Loader(QThread):
    """Loads the model off the UI thread."""

    loaded = Signal(object, str)  # the Model (None on failure), error text

    def __init__(self, path: str | None):
        super().__init__()
        self.path = path
        self.model = None  # also here: a window closed before the signal arrives must still close it

    def run(self) -> None:
        """Load (QThread entry point)."""
        try:
            self.model = piegpu.load_model(self.path, verbose=False)
            self.loaded.emit(self.model, "")
        except Exception as e:  # noqa: BLE001 -- shown in the window instead of a silent thread death
            self.loaded.emit(None, f"{type(e).__name__}: {e}")


class ChatWindow(QMainWindow):
    """The chat window: history pane, input box, Send/Stop, sampler settings, tokens/s in the status bar.

    Pass a loaded `model` to share it (the window then leaves it open), or `model_path` (None: the
    default model) to have the window load it in the background and close it with the window.
    """

    ready = Signal()  # the model is loaded and Send is enabled
    piece_shown = Signal(str)  # a text piece was appended to the history pane
    turn_done = Signal(object)  # a turn ended: its Generation (None if it failed to start)

    def __init__(self, model=None, *, model_path: str | None = None, context: int = 2048,
                 settings: Settings = Settings()):
        super().__init__()
        self.setWindowTitle("piegpu chat")
        self.model = None
        self.ws = None
        self.context = context
        self.messages: list = []  # the conversation as {role, content}, as sent to the chat template
        self.turn: Turn | None = None
        self.last_generation = None
        self._owns_model = model is None
        self._seed = 0
        self._ready = False  # loaded and warmed up
        self._closing = False
        self._build(settings)
        gc.freeze()  # Python, Qt and this window are here to stay (see the note above _on_warm)
        if model is None:
            self._status("Loading the model...")
            self._loader = Loader(model_path)
            self._loader.loaded.connect(self._on_loaded)
            self._loader.start()
        else:
            self._on_loaded(model, "")

    # ---- layout ----------------------------------------------------------------------------------------
    def _build(self, initial: Settings) -> None:
        self.history = QTextBrowser()
        self.history.setOpenLinks(False)
        self.input = QLineEdit()
        self.input.setPlaceholderText("Type a message and press Enter")
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.new_button = QPushButton("New chat")
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.1, decimals=2,
                                          value=initial.temperature)
        self.temperature.setToolTip("0 = greedy")
        self.top_p = QDoubleSpinBox(minimum=0.01, maximum=1.0, singleStep=0.05, decimals=2, value=initial.top_p)
        self.max_tokens = QSpinBox(minimum=1, maximum=4096, value=initial.max_tokens)

        settings = QHBoxLayout()
        for label, w in (("Temperature", self.temperature), ("Top-p", self.top_p), ("Max tokens", self.max_tokens)):
            settings.addWidget(QLabel(label))
            settings.addWidget(w)
        settings.addStretch(1)
        settings.addWidget(self.new_button)
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        row.addWidget(self.send_button)
        row.addWidget(self.stop_button)
        box = QVBoxLayout()
        box.addLayout(settings)
        box.addWidget(self.history, 1)
        box.addLayout(row)
        central = QWidget()
        central.setLayout(box)
        self.setCentralWidget(central)

        self.speed = QLabel("")
        self.statusBar().addPermanentWidget(self.speed)
        self.send_button.clicked.connect(self.send)
        self.input.returnPressed.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.new_button.clicked.connect(self.new_chat)
        self._set_busy(False)

    def _set_busy(self, busy: bool) -> None:
        self.send_button.setEnabled(not busy and self._ready)
        self.new_button.setEnabled(not busy and self._ready)
        self.stop_button.setEnabled(busy and self._ready)

    def _status(self, text: str) -> None:
        self.statusBar().showMessage(text)

    def _write(self, text: str, bold: bool = False, color: str | None = None) -> None:
        cursor = self.history.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold if bold else QFont.Weight.Normal)
        if color:
            fmt.setForeground(QColor(color))
        cursor.insertText(text, fmt)
        self.history.setTextCursor(cursor)
        bar = self.history.verticalScrollBar()
        bar.setValue(bar.maximum())

    # ---- actions ----------------------------------------------------------------------------------------
    def settings(self) -> Settings:
        """The sampler settings the controls show."""
        return Settings(self.temperature.value(), self.top_p.value(), self.max_tokens.value())

    def send(self) -> None:
        """Send the input box's text as the next user turn and stream the answer."""
        text = self.input.text().strip()
        if not text or not self._ready or self.turn is not None:
            return
        self.input.clear()
        self.messages.append({"role": "user", "content": text})
        if self.history.document().characterCount() > 1:
            self._write("\n\n")
        self._write("You: ", bold=True, color="#1f5fbf")
        self._write(text)
        self._write(f"\n{ASSISTANT}: ", bold=True, color="#2e7d32")
        self._seed += 1
        yield_cpu_to_ui(self.model)  # the driver may have started threads since the last turn
        turn = self.turn = Turn(self.model, self.ws, list(self.messages), self.settings(), self._seed)
        turn.piece.connect(self._on_piece)
        turn.ended.connect(self._on_ended)
        self._set_busy(True)
        self.speed.setText("")
        self._status("Reading the prompt...")
        turn.start()

    def stop(self) -> None:
        """Stop the answer being generated (it ends at its next token; the partial answer stays in the chat)."""
        if self.turn is not None:
            self.turn.stop()
            self._status("Stopping...")

    def new_chat(self) -> None:
        """Forget the conversation (the working set keeps what a new chat can reuse: the system prompt)."""
        if self.turn is not None:
            return
        self.messages = []
        self.history.clear()
        self.speed.setText("")
        self._status("New chat")

    @property
    def generation(self):
        """The Generation of the answer being streamed (None between turns)."""
        return self.turn.generation if self.turn is not None else None

    # ---- signals from worker threads (run in the UI thread) ----------------------------------------------
    def _on_loaded(self, model, error: str) -> None:
        if self._closing:  # closeEvent closed it already
            return
        if model is None:
            self._status(f"Could not load the model: {error}")
            self._write(error, color="#b00020")
            return
        self.model = model
        self.ws = model.working_set(min(self.context, model.config.max_position_embeddings))
        gc.freeze()  # the model too
        yield_cpu_to_ui(model)
        # Warm up on the worker: a one-token answer to an empty message builds the forward passes and
        # compiles the sampler of the current settings, and leaves the chat template's system prompt in
        # the working set, which every conversation starts with -- so the first answer starts as fast
        # as later ones.
        self._status("Warming up: building the forward pass and compiling the sampler...")
        empty = [{"role": "user", "content": ""}]
        warm = self.turn = Turn(model, self.ws, empty, replace(self.settings(), max_tokens=1), self._seed)
        warm.ended.connect(self._on_warm)
        warm.start()

    # What exists at each gc.freeze() lives as long as the window: leaving it out of the cyclic GC
    # keeps its full collections short. They scan every other object while holding the GIL, in
    # whichever thread triggers them, and the event loop stalls meanwhile: 20-160 ms pauses were
    # measured here while the model loaded or warmed up. No gc.collect() first: that would be such a
    # pause itself, in the UI thread; the little garbage frozen with the rest stays.

    def _on_warm(self, g, error: str) -> None:
        turn, self.turn = self.turn, None
        turn.wait()
        self._ready = True
        gc.freeze()  # and its compiled passes
        self._set_busy(False)
        self._status(f"Ready: {self.model.source}" if not error else f"Warm-up failed ({error}); ready anyway")
        self.ready.emit()

    def _on_piece(self, text: str, tokens: int, rate: float) -> None:
        self._write(text)
        self.speed.setText(f"{tokens} tokens  {rate:.1f} tok/s")
        self._status("Generating...")
        self.piece_shown.emit(text)

    def _on_ended(self, g, error: str) -> None:
        turn, self.turn = self.turn, None
        turn.wait()
        self.last_generation = g
        if error:
            self._write(f"[{error}]", color="#b00020")
            self._status(error)
            if g is None or not g.tokens:  # nothing of the answer exists: forget the question too
                self.messages.pop()
        else:
            self.messages.append({"role": "assistant", "content": g.text})
            st = g.stats
            if st.stop_reason == "cancelled":
                self._write(" [stopped]", color="#808080")
            self.speed.setText(f"{st.generated} tokens  {st.decode_tokens_per_s:.1f} tok/s")
            self._status(f"{ENDINGS.get(st.stop_reason, st.stop_reason)}. Prompt: {st.prompt_tokens} tokens "
                         f"prefilled in {st.prefill_s:.2f} s, {st.reused_tokens} reused from earlier turns")
        self._set_busy(False)
        self.input.setFocus()
        self.turn_done.emit(g)

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """Stop a running answer, wait for it, and close the model if the window loaded it."""
        self._closing = True
        loader = getattr(self, "_loader", None)
        if loader is not None:
            loader.wait()
        if self.turn is not None:
            self.turn.stop()
            self.turn.wait()
        model = self.model or (loader.model if loader is not None else None)
        if self._owns_model and model is not None:
            model.close()
            self.model = None
        super().closeEvent(event)


def main(argv: list | None = None) -> int:
    """Open the chat window (`python examples/qt_chat.py`)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="a model directory or GGUF file (default: the default model)")
    ap.add_argument("--context", type=int, default=2048, help="tokens of conversation kept on the device")
    ap.add_argument("--temperature", type=float, default=Settings.temperature, help="0 = greedy")
    ap.add_argument("--top-p", type=float, default=Settings.top_p)
    ap.add_argument("--max-tokens", type=int, default=Settings.max_tokens)
    args = ap.parse_args(argv)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = ChatWindow(model_path=args.model, context=args.context,
                        settings=Settings(args.temperature, args.top_p, args.max_tokens))
    window.resize(760, 620)
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
