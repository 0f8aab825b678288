"""Ask questions about a folder of text files, all local: embed its passages, retrieve, answer with the chat model.

The folder's .txt / .md files are split into passages of about --words words, embedded on the device by an
embedding model (a sentence-transformers / BERT directory: --embedder; without one the chat model itself pools its
hidden states, which retrieves far worse), and kept in an index file (numpy, next to the folder by default) that
later runs update: only passages of new or changed files are embedded again. A question is embedded the same way,
the --top passages by cosine similarity (optionally reordered by a cross-encoder: --reranker) go into the chat
prompt, and the chat model answers from them.

    python examples/rag.py NOTES_DIR "What did we decide about the release date?" --embedder ./bge-small-en-v1.5
    python examples/rag.py NOTES_DIR "..." --embedder ./bge-small-en-v1.5 --reranker ./bge-reranker-base
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

import piegpu

SUFFIXES = (".txt", ".md")


def passages(text: str, words: int = 120, overlap: int = 20) -> list:
    """The text as passages of about `words` words, each sharing `overlap` words with the one before."""
    w = text.split()
    step = max(1, words - overlap)
    return [" ".join(w[i:i + words]) for i in range(0, max(1, len(w) - overlap), step) if w[i:i + words]]


class Index:
    """Passages (file, text) and their unit vectors, saved as one .npz file."""

    def __init__(self, path: Path):
        self.path = path
        self.files: dict = {}  # file name -> content hash
        self.sources: list = []
        self.texts: list = []
        self.vectors = np.zeros((0, 0), np.float32)
        if path.exists():
            z = np.load(path, allow_pickle=False)
            self.files = dict(zip(z["file_names"].tolist(), z["file_hashes"].tolist()))
            self.sources, self.texts, self.vectors = z["sources"].tolist(), z["texts"].tolist(), z["vectors"]

    def update(self, folder: Path, embed, words: int) -> int:
        """Embed the passages of new or changed files (and drop deleted ones); returns the passages embedded."""
        found = {p.name: p for p in sorted(folder.iterdir()) if p.suffix in SUFFIXES and p.is_file()}
        hashes = {n: hashlib.sha256(p.read_bytes()).hexdigest() for n, p in found.items()}
        stale = {n for n in self.files if hashes.get(n) != self.files[n]}
        keep = [i for i, s in enumerate(self.sources) if s not in stale]
        self.sources = [self.sources[i] for i in keep]
        self.texts = [self.texts[i] for i in keep]
        vectors = [self.vectors[keep]] if keep else []
        new_sources, new_texts = [], []
        for n in found:
            if self.files.get(n) != hashes[n]:
                for t in passages(found[n].read_text(encoding="utf-8", errors="replace"), words):
                    new_sources.append(n)
                    new_texts.append(t)
        if new_texts:
            vectors.append(embed(new_texts))
        self.sources += new_sources
        self.texts += new_texts
        self.vectors = np.concatenate(vectors) if vectors else np.zeros((0, 0), np.float32)
        self.files = hashes
        self._save()
        return len(new_texts)

    def _save(self) -> None:
        """Written to a temporary file and renamed over the index: an interrupted run leaves the old one whole."""
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".npz")
        os.close(fd)
        np.savez(tmp, file_names=np.array(list(self.files), dtype=str),
                 file_hashes=np.array(list(self.files.values()), dtype=str), sources=np.array(self.sources, dtype=str),
                 texts=np.array(self.texts, dtype=str), vectors=self.vectors)
        os.replace(tmp, self.path)

    def search(self, query_vector: np.ndarray, k: int) -> list:
        """The k passages nearest the query: [(cosine, file, text)], best first."""
        if not self.texts:
            return []
        scores = self.vectors @ query_vector
        order = np.argsort(-scores)[:k]
        return [(float(scores[i]), self.sources[i], self.texts[i]) for i in order]


def answer_prompt(question: str, hits: list) -> str:
    """The chat prompt: the retrieved passages, numbered with their files, then the question."""
    context = "\n\n".join(f"[{i + 1}] ({src}) {text}" for i, (_, src, text) in enumerate(hits))
    return (f"Answer the question using only these passages; say which ones you used.\n\n{context}\n\n"
            f"Question: {question}")


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("question")
    ap.add_argument("--embedder", default=None, help="an embedding model directory (default: the chat model)")
    ap.add_argument("--reranker", default=None, help="a cross-encoder directory that reorders the retrieved passages")
    ap.add_argument("--model", default=None, help="the chat model (default: piegpu's default model)")
    ap.add_argument("--index", type=Path, default=None, help="the index file (default: FOLDER/.piegpu-index.npz)")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--words", type=int, default=120, help="words per passage")
    ap.add_argument("--max-tokens", type=int, default=200)
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        ap.error(f"{args.folder} is not a folder")
    chat = piegpu.load_model(args.model, verbose=False)
    if args.embedder:
        embedder = piegpu.load_model(args.embedder, verbose=False)
        embed = lambda xs: embedder.embed(xs, truncate=True)  # noqa: E731 (a passage over its max tokens: cut)
    else:
        print("rag: no --embedder; the chat model pools its own hidden states (retrieval is much worse)",
              file=sys.stderr)
        embed = lambda xs: chat.embed(xs, pooling="mean", truncate=True)  # noqa: E731
    index = Index(args.index or args.folder / ".piegpu-index.npz")
    added = index.update(args.folder, embed, args.words)
    print(f"rag: {len(index.texts)} passages from {len(index.files)} files ({added} embedded now)", file=sys.stderr)
    hits = index.search(embed([args.question])[0], args.top * (3 if args.reranker else 1))
    if args.reranker and hits:
        reranker = piegpu.load_model(args.reranker, verbose=False)
        scores = reranker.rerank(args.question, [t for _, _, t in hits], truncate=True)
        hits = [h for _, h in sorted(zip(scores, hits), key=lambda p: -p[0])][:args.top]
    for score, src, text in hits:
        print(f"rag: {score:.3f} {src}: {text[:70]}...", file=sys.stderr)
    for piece in chat.generate(answer_prompt(args.question, hits), max_tokens=args.max_tokens, chat=True):
        print(piece, end="", flush=True)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
