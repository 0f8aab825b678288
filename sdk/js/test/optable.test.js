// The JS op table cannot drift from piegpu/eta/ops.py: optable.json is its export (a Python test
// regenerates and compares it); here every row must have a JS type rule and a function that records it,
// and every public name of piegpu.eta must have a JS export.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as eta from "../src/index.js";
import { HAND_RULES } from "../src/ops.js";
import { OP_FUNCTIONS } from "../src/api.js";
import { TABLE } from "../src/types.js";

// ops with no function of their own: trace() records inputs, literals are consts, channels and intrinsics have objects
const RECORDED_ELSEWHERE = new Set(["input", "const", "intrinsic", "chan_take", "chan_read", "chan_put"]);
// names of piegpu.eta that are the Python runtime's, or spelled differently here
const NOT_IN_JS = new Map([["IntrinsicContext", "forLogits"], ["cache_stats", null], ["clear_memory_cache", null],
  ["top_k_idx", "topK"]]);

test("every op of the table has a type rule, and no rule is stale", () => {
  const names = TABLE.ops.map((r) => r.name);
  for (const name of names) assert.equal(typeof eta.OPS.get(name).infer, "function", `${name} has no type rule in src/ops.js`);
  for (const name of HAND_RULES) assert.ok(names.includes(name), `src/ops.js has a rule for ${name}, which the op table lacks`);
  for (const row of TABLE.ops) assert.ok(row.dtype_rule || HAND_RULES.includes(row.name), row.name);
});

test("every op of the table is recorded by some function", () => {
  for (const { name } of TABLE.ops) {
    assert.ok(RECORDED_ELSEWHERE.has(name) || typeof OP_FUNCTIONS[name] === "function", `no function records ${name}`);
  }
});

test("every public name of piegpu.eta has a JS export (camelCase)", () => {
  for (const py of TABLE.python_api) {
    const js = NOT_IN_JS.has(py) ? NOT_IN_JS.get(py) : eta.jsName(py);
    if (js === null) continue;
    assert.ok(js in eta, `piegpu.eta.${py} has no JS export ${js}`);
  }
  assert.equal(eta.jsName("reduce_argmax"), "reduceArgmax");
  assert.equal(eta.jsName("top_p_mask"), "topPMask");
  assert.equal(eta.jsName("abs_"), "abs");
});

test("dtype codes and the container header come from the table", () => {
  assert.deepEqual(Object.fromEntries(Object.values(eta.dtype).map((d) => [d.name, d.code])), TABLE.dtypes);
  assert.equal(eta.VERSION, TABLE.version);
  assert.equal(new TextDecoder().decode(eta.MAGIC), TABLE.format);
});
