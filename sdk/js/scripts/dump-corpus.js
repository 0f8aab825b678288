#!/usr/bin/env node
// Print the JS-traced corpus programs as JSON { name: container hex } (tests/sdk/test_js_containers.py reads it).
import { PROGRAMS } from "../test/programs.js";

const out = {};
for (const [name, build] of Object.entries(PROGRAMS)) out[name] = Buffer.from(build().toBytes()).toString("hex");
process.stdout.write(JSON.stringify(out) + "\n");
