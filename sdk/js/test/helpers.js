// Shared by the tests: the golden corpus (tests/sdk/golden/corpus.json) and a seeded PRNG.
import { readFileSync } from "node:fs";

export const CORPUS = JSON.parse(readFileSync(new URL("../../../tests/sdk/golden/corpus.json", import.meta.url), "utf8"));

export function hexBytes(hex) {
  return Uint8Array.from(Buffer.from(hex, "hex"));
}

export function toHex(bytes) {
  return Buffer.from(bytes).toString("hex");
}

/** mulberry32: a small deterministic PRNG, so the mutation tests are the same on every run. */
export function prng(seed) {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) / 4294967296) * n | 0;
  };
}
