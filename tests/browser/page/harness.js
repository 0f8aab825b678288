"use strict";
// piegpu's WGSL harness inside Chromium's WebGPU (Dawn, Tint, SwiftShader). The Python tests
// (tests/browser/harness.py) call these functions through Playwright's page.evaluate:
//   harness.init(limitNames)  -> adapter info, features and the device's limits
//   harness.compile(items)    -> per shader: Tint's messages and pipeline errors
//   harness.run(items)        -> per eta program: errors, or its outputs read back
// Buffers cross as base64 strings of little-endian 32-bit words. Every item is checked on
// its own, so one bad shader reports its errors without hiding the others'.

const harness = (() => {
  let device = null;
  const stray = [];  // uncaptured errors and device loss: reported by the next call

  const BUFFER_TYPES = {"uniform": "uniform", "storage-read": "read-only-storage", "storage-rw": "storage"};

  async function init(limitNames) {
    if (!navigator.gpu) {
      throw new Error("navigator.gpu is missing: start Chromium with --enable-unsafe-webgpu and load the page " +
                      "from a secure origin (http://127.0.0.1)");
    }
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) {
      throw new Error("requestAdapter() gave no adapter: start Chromium with --enable-unsafe-webgpu " +
                      "--use-webgpu-adapter=swiftshader");
    }
    const requiredLimits = {};
    for (const name of limitNames) {
      if (adapter.limits[name] !== undefined) requiredLimits[name] = adapter.limits[name];
    }
    // Subgroups where the adapter has them: the matmul specialisations recorded on lavapipe use them.
    const requiredFeatures = adapter.features.has("subgroups") ? ["subgroups"] : [];
    device = await adapter.requestDevice({requiredLimits, requiredFeatures});
    device.lost.then((info) => stray.push(`device lost (${info.reason}): ${info.message}`));
    device.addEventListener("uncapturederror", (e) => stray.push(`uncaptured: ${e.error.message}`));
    const limits = {};
    for (const key in device.limits) limits[key] = device.limits[key];
    const info = adapter.info || {};
    return {vendor: info.vendor, architecture: info.architecture, device: info.device,
            description: info.description, features: [...adapter.features], limits,
            subgroupMinSize: info.subgroupMinSize, subgroupMaxSize: info.subgroupMaxSize};
  }

  function needDevice() {
    if (!device) throw new Error("harness.init() was not called");
  }

  function takeStray() {
    return stray.splice(0, stray.length);
  }

  const STORAGE_TEXTURES = {"texture-rgba32-write": "rgba32float", "texture-rgba32uint-write": "rgba32uint"};

  function layoutFor(bindings) {
    const entries = bindings.map(([binding, kind]) => {
      if (kind === "texture-uint") {
        return {binding, visibility: GPUShaderStage.COMPUTE, texture: {sampleType: "uint", viewDimension: "2d"}};
      }
      if (kind === "texture-float") {
        return {binding, visibility: GPUShaderStage.COMPUTE,
                texture: {sampleType: "unfilterable-float", viewDimension: "2d"}};
      }
      const storageFormat = STORAGE_TEXTURES[kind];  // the KV pool's textures: f32, or f16 pairs in u32 words
      if (storageFormat) {
        return {binding, visibility: GPUShaderStage.COMPUTE,
                storageTexture: {access: "write-only", format: storageFormat, viewDimension: "2d"}};
      }
      const type = BUFFER_TYPES[kind];
      if (!type) {
        throw new Error(`unknown binding kind ${kind} (use ${Object.keys(BUFFER_TYPES)}, texture-uint, texture-float, ` +
                        `${Object.keys(STORAGE_TEXTURES)})`);
      }
      return {binding, visibility: GPUShaderStage.COMPUTE, buffer: {type}};
    });
    const group = device.createBindGroupLayout({entries});
    return {group, pipeline: device.createPipelineLayout({bindGroupLayouts: [group]})};
  }

  // Module + one pipeline per entry point, each inside its own error scope. The scopes are
  // pushed and popped with no await in between, so concurrent items never share a scope.
  // Pipelines are created with createComputePipelineAsync, which lets Dawn compile them on its
  // worker threads (a failure rejects the promise with Tint's or the validator's message).
  function build(item, layouts) {
    const scoped = [];
    device.pushErrorScope("validation");
    const module = device.createShaderModule({code: item.code, label: item.label});
    scoped.push(["createShaderModule", device.popErrorScope()]);
    const pipelines = item.entry_points.map((entryPoint) => {
      const what = `createComputePipeline(${entryPoint})`;
      const made = device.createComputePipelineAsync({layout: layouts.pipeline, compute: {module, entryPoint},
                                                      label: `${item.label}:${entryPoint}`});
      scoped.push([what, made.then(() => null, (e) => e)]);
      return made.catch(() => null);
    });
    return {module, pipelines, scoped};
  }

  async function diagnose(item, built) {
    const out = {label: item.label, errors: [], warnings: []};
    const info = await built.module.getCompilationInfo();
    for (const m of info.messages) {
      const text = `${m.type} at line ${m.lineNum}:${m.linePos}: ${m.message}`;
      (m.type === "error" ? out.errors : out.warnings).push(text);
    }
    for (const [what, promise] of built.scoped) {
      const err = await promise;
      if (err) out.errors.push(`${what}: ${err.message}`);
    }
    return out;
  }

  async function compileOne(item) {
    try {
      return await diagnose(item, build(item, layoutFor(item.bindings)));
    } catch (e) {
      return {label: item.label, errors: [`exception: ${e.message}`], warnings: []};
    }
  }

  async function compile(items) {
    needDevice();
    const results = await Promise.all(items.map(compileOne));
    return {results, stray: takeStray()};
  }

  function fromBase64(text) {
    const bin = atob(text);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  }

  function toBase64(bytes) {
    let bin = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return btoa(bin);
  }

  // Ends a run: each [buffer, word offset, words] of `copies` is copied, back to back, into one
  // mappable buffer of at least minBytes (added to `buffers`, which the caller destroys), the
  // encoder is submitted, and the error scope the caller pushed is popped. The bytes go to
  // out.output (base64), a validation error to out.errors as "<verb>: <message>".
  async function submitAndRead(encoder, copies, minBytes, buffers, out, verb) {
    const total = copies.reduce((n, [, , words]) => n + words, 0);
    const readback = device.createBuffer({size: Math.max(minBytes, total * 4),
                                          usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
    buffers.push(readback);
    let pos = 0;
    for (const [buffer, offset, words] of copies) {
      if (words > 0) encoder.copyBufferToBuffer(buffer, offset * 4, readback, pos * 4, words * 4);
      pos += words;
    }
    device.queue.submit([encoder.finish()]);
    const err = device.popErrorScope();
    await readback.mapAsync(GPUMapMode.READ);
    const scoped = await err;
    if (scoped) out.errors.push(`${verb}: ${scoped.message}`);
    out.output = toBase64(new Uint8Array(readback.getMappedRange().slice(0)));
    readback.unmap();
  }

  // An eta program as the runtime binds it (piegpu/runtime/compiled.py): one read_write
  // storage buffer per plan binding in group 0 -- the arena, then an epilogue's logits and
  // channel buffers (item.buffers: {words, data} per binding after the arena) -- the kernels
  // dispatched in order in one compute pass, then the outputs (arena words) and every
  // buffer of item.read_back copied out, in that order.
  async function runOne(item) {
    let out;
    let built;
    let layouts;
    try {
      layouts = layoutFor(item.bindings.map((_, i) => [i, "storage-rw"]));
      built = build({...item, entry_points: item.kernels.map((k) => k[0])}, layouts);
      out = await diagnose(item, built);
    } catch (e) {
      return {label: item.label, errors: [`exception: ${e.message}`], warnings: []};
    }
    if (out.errors.length) return out;
    const pipelines = await Promise.all(built.pipelines);
    const buffers = [];
    const storage = (words) => {
      const b = device.createBuffer({size: Math.max(16, words * 4),
                                     usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC});
      buffers.push(b);
      return b;
    };
    try {
      device.pushErrorScope("validation");
      const extra = item.buffers || [];
      if (extra.length !== item.bindings.length - 1) {
        throw new Error(`${item.bindings.length} bindings but ${extra.length} buffers besides the arena`);
      }
      const bound = [storage(item.arena_words), ...extra.map((b) => storage(b.words))];
      for (const [offset, data] of item.inputs) device.queue.writeBuffer(bound[0], offset * 4, fromBase64(data));
      extra.forEach((b, i) => { if (b.data) device.queue.writeBuffer(bound[i + 1], 0, fromBase64(b.data)); });
      const entries = bound.map((buffer, binding) => ({binding, resource: {buffer}}));
      const bindGroup = device.createBindGroup({layout: layouts.group, entries});
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      pass.setBindGroup(0, bindGroup);
      item.kernels.forEach(([name, gx, gy], i) => {
        pass.setPipeline(pipelines[i]);
        pass.dispatchWorkgroups(gx, gy, 1);
      });
      pass.end();
      const copies = item.outputs.map(([offset, words]) => [bound[0], offset, words]);
      for (const i of item.read_back || []) copies.push([bound[i], 0, extra[i - 1].words]);
      await submitAndRead(encoder, copies, 16, buffers, out, "running");
    } catch (e) {
      out.errors.push(`running: ${e.message}`);
    } finally {
      for (const b of buffers) b.destroy();
    }
    return out;
  }

  async function run(items) {
    needDevice();
    const results = await Promise.all(items.map(runOne));
    return {results, stray: takeStray()};
  }

  // A recorded forward pass of the model (tests/browser/model_replay.py): every buffer's
  // pre-pass bytes fetched from the page's server, the hand-written shaders with the bind
  // group layouts their declarations give (as model/shaders.py's Kernel builds them), the
  // dispatches in recorded order in one compute pass, then each [buffer, words] of spec.reads back.
  async function replay(spec) {
    needDevice();
    const out = {errors: [], stray: []};
    const layouts = spec.shaders.map((sh) => layoutFor(sh.bindings));
    const built = spec.shaders.map((sh, i) => build(sh, layouts[i]));
    for (const [i, b] of built.entries()) out.errors.push(...(await diagnose(spec.shaders[i], b)).errors);
    if (out.errors.length) return out;
    const pipelines = await Promise.all(built.map((b) => b.pipelines[0]));
    const contents = await Promise.all(spec.buffers.map(async (b) => {
      const data = await (await fetch(b.url)).arrayBuffer();
      if (data.byteLength !== b.size) throw new Error(`${b.url}: ${data.byteLength} bytes, ${b.size} expected`);
      return data;
    }));
    const buffers = [];
    try {
      device.pushErrorScope("validation");
      const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
      spec.buffers.forEach((b, i) => {
        const buffer = device.createBuffer({size: Math.max(16, b.size), usage});
        buffers.push(buffer);
        device.queue.writeBuffer(buffer, 0, contents[i]);
      });
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      for (const [s, entries, groups] of spec.dispatches) {
        const bindGroup = device.createBindGroup({layout: layouts[s].group, entries: entries.map(
          ([binding, b, offset, size]) => ({binding, resource: {buffer: buffers[b], offset, size}}))});
        pass.setPipeline(pipelines[s]);
        pass.setBindGroup(0, bindGroup);
        pass.dispatchWorkgroups(groups[0], groups[1], groups[2]);
      }
      pass.end();
      const copies = spec.reads.map(([which, words]) => [buffers[which], 0, words]);
      await submitAndRead(encoder, copies, 0, buffers, out, "replaying");
    } catch (e) {
      out.errors.push(`replaying: ${e.message}`);
    } finally {
      for (const b of buffers) b.destroy();
    }
    out.stray = takeStray();
    return out;
  }

  return {init, compile, run, replay};
})();
window.harness = harness;
