// llama.cpp's logits for a prompt of token ids, every row: node logits.mjs MODEL.gguf IDS OUT.f32
// IDS is comma-separated; OUT gets float32 [len(IDS), vocab] row-major (read by check_logits.py).
import fs from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, idsText, outPath] = process.argv.slice(2);
if (!outPath) throw new Error("usage: node logits.mjs MODEL.gguf ID,ID,... OUT.f32");
const ids = idsText.split(",").map(Number);
const llama = await getLlama({build: "never", skipDownload: true, gpu: false, maxThreads: 2, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const vocab = model.fileInfo.architectureMetadata.vocab_size;
const ctx = await model.createContext({contextSize: Math.max(64, ids.length), batchSize: Math.max(64, ids.length), sequences: 1, threads: 2});
const seq = ctx.getSequence();
const res = await seq.controlledEvaluate(ids.map((t) => [t, {generateNext: {logits: true}}]));
const out = new Float32Array(ids.length * vocab);
res.forEach((r, i) => {
    for (const [tok, v] of r.next.logits) out[i * vocab + tok] = v;
});
fs.writeFileSync(outPath, Buffer.from(out.buffer));
await ctx.dispose();
await model.dispose();
await llama.dispose();
