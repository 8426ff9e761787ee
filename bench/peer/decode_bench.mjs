// Peer benchmark: llama.cpp (node-llama-cpp's prebuilt CPU addon) batch-1 decode and prefill on a
// GGUF written by hf_to_gguf.py. Prints one JSON line on stdout; llama.cpp's warnings go to stderr.
//
//   node decode_bench.mjs MODEL.gguf [--threads 2] [--prompt 64] [--decode 32] [--prefill 512] [--reps 3]
//
// decode: after a --prompt-token prefill, --decode greedy steps (each one forward pass of one token
// with the full-vocab output row, then llama.cpp's greedy sampler), timed from the first generated
// token to the last; prefill: --prefill tokens in one batch up to the first generated token (the
// output row of the last token only). Token ids are fixed pseudo-random, the KV cache is cleared
// before each repetition, and the best repetition is reported. `llama_ms_per_tok` is llama.cpp's own
// eval timer for the best decode repetition (no JS and no queueing), next to the wall clock.
import fs from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

function parseArgs(argv) {
    const opts = {threads: 2, prompt: 64, decode: 32, prefill: 512, reps: 3};
    const rest = [];
    for (let i = 0; i < argv.length; i++) {
        const m = /^--(threads|prompt|decode|prefill|reps)$/.exec(argv[i]);
        if (m) {
            const v = Number(argv[++i]);
            if (!Number.isInteger(v) || v < 1) throw new Error(`${argv[i - 1]} needs a positive integer`);
            opts[m[1]] = v;
        } else if (argv[i].startsWith("--")) {
            throw new Error(`unknown option ${argv[i]}`);
        } else {
            rest.push(argv[i]);
        }
    }
    if (rest.length !== 1) throw new Error("usage: node decode_bench.mjs MODEL.gguf [--threads N] [--prompt N] [--decode N] [--prefill N] [--reps N]");
    return {...opts, model: rest[0]};
}

// Deterministic ids above the stand-in vocab's control and byte tokens (0..258).
function tokenIds(n, seed, vocab) {
    let x = seed >>> 0;
    const out = [];
    for (let i = 0; i < n; i++) {
        x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
        out.push(259 + (x % (vocab - 259)));
    }
    return out;
}

const opts = parseArgs(process.argv.slice(2));
const logs = [];
const llama = await getLlama({
    build: "never",  // only the prebuilt binary: never fetch or compile llama.cpp
    skipDownload: true,
    gpu: false,
    maxThreads: opts.threads,  // the default is max(math cores, 4)
    logLevel: LlamaLogLevel.info,
    logger(level, message) {
        const text = message.trimEnd();
        logs.push(text);
        // the stand-in vocab fails node-llama-cpp's tokenizer round-trip check; ids are all we use
        if ((level === LlamaLogLevel.warn || level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) &&
            !text.includes("tokenize text and then detokenize"))
            process.stderr.write(`[llama.cpp ${level}] ${text}\n`);
    }
});
const model = await llama.loadModel({modelPath: opts.model, gpuLayers: 0});
const vocab = model.fileInfo.architectureMetadata?.vocab_size ?? 151936;
const ctx = await model.createContext({
    contextSize: Math.max(opts.prefill, opts.prompt + opts.decode + 1),
    batchSize: Math.max(opts.prefill, opts.prompt),
    sequences: 1,
    threads: {ideal: opts.threads, min: opts.threads},
    performanceTracking: true
});
const seq = ctx.getSequence();

// tokens.length forward, then `steps` greedy tokens; returns [ms to the first token, ms for the rest]
async function run(tokens, steps) {
    await seq.clearHistory();
    const it = seq.evaluate(tokens, {temperature: 0, yieldEogToken: true});
    const t0 = performance.now();
    let t1 = 0, n = 0;
    for await (const _ of it) {
        if (n === 0) t1 = performance.now();
        if (++n > steps) break;
    }
    const t2 = performance.now();
    await it.return?.();
    return [t1 - t0, t2 - t1];
}

async function llamaEvalTimings() {
    const start = logs.length;
    await ctx.printTimings();
    // "eval time = X ms / N runs" (the decode calls since the last print; prompt eval is separate)
    for (const line of logs.slice(start)) {
        const m = /^.*?\beval time =\s*([\d.]+) ms \/\s*(\d+) (?:runs|tokens)/.exec(line);
        if (m && !/prompt eval/.test(line)) return {ms: Number(m[1]), runs: Number(m[2])};
    }
    return null;
}

const prompt = tokenIds(opts.prompt, 1, vocab);
const long = tokenIds(opts.prefill, 2, vocab);
await run(prompt, 4);  // warm-up: first-touch of the weights and the graph allocations
await llamaEvalTimings();
let decode = null, prefill = null;
for (let r = 0; r < opts.reps; r++) {
    const [, ms] = await run(prompt, opts.decode);
    const t = await llamaEvalTimings();
    if (decode == null || ms < decode.ms) decode = {ms, llama: t};
}
for (let r = 0; r < opts.reps; r++) {
    const [ms] = await run(long, 0);
    if (prefill == null || ms < prefill) prefill = ms;
}

// Which of the addon's CPU backend variants ggml picked for this CPU, and where the weights went.
const cpuLib = [...new Set(fs.readFileSync("/proc/self/maps", "utf8").split("\n")
    .map((l) => /libggml-cpu-[\w-]+\.so/.exec(l)?.[0]).filter(Boolean))];
const buffers = logs.filter((l) => /model buffer size|KV buffer size|repack/i.test(l))
    .map((l) => l.replace(/^.*?(\w[\w ]*:)\s+/, "").replace(/\s+/g, " "));
const fa = logs.some((l) => /Flash Attention enabled/.test(l));
const llamaMs = decode.llama && decode.llama.runs > 0 ? decode.llama.ms / decode.llama.runs : null;
console.log(JSON.stringify({
    model: opts.model,
    file_type: logs.find((l) => /file type\s+=/.test(l))?.replace(/^.*file type\s+=\s*/, ""),
    cpu_backend: cpuLib.join(","),
    system_info: llama.systemInfo.trim(),
    buffers,
    flash_attn: fa,
    threads: ctx.currentThreads,
    prompt: opts.prompt,
    decode_steps: opts.decode,
    decode_tok_s: +(opts.decode / (decode.ms / 1000)).toFixed(2),
    decode_ms_per_tok: +(decode.ms / opts.decode).toFixed(3),
    llama_ms_per_tok: llamaMs == null ? null : +llamaMs.toFixed(3),
    prefill_tokens: opts.prefill,
    prefill_tok_s: +(opts.prefill / (prefill / 1000)).toFixed(2),
    reps: opts.reps
}));
await ctx.dispose();
await model.dispose();
await llama.dispose();
