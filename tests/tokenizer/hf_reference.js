// Reference tokenization with Hugging Face's own Rust tokenizers (npm package `tokenizers`).
// Usage: node hf_reference.js TOKENIZER_JSON < requests.jsonl > answers.jsonl
// Each request line is {"t": text, "a": addSpecialTokens} (encode, then decode the ids with and
// without skipping special tokens) or {"ids": [...]} (decode only). One answer line per request:
// {"ids": [...], "dec": text, "dec_skip": text} or {"error": message}.
// Run with cwd = repo root, so `tokenizers` resolves from the repo's node_modules.
"use strict";
const path = require("path");
const readline = require("readline");
const { Tokenizer } = require(path.join(process.cwd(), "node_modules", "tokenizers"));

async function main() {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const out = [];
  for await (const line of rl) {
    if (!line) continue;
    const req = JSON.parse(line);
    try {
      let ids = req.ids;
      const ans = {};
      if (ids === undefined) {
        const enc = await tok.encode(req.t, null, { addSpecialTokens: !!req.a });
        ids = Array.from(enc.getIds());
        ans.ids = ids;
      }
      ans.dec = await tok.decode(ids, false);
      ans.dec_skip = await tok.decode(ids, true);
      out.push(JSON.stringify(ans));
    } catch (e) {
      out.push(JSON.stringify({ error: String(e) }));
    }
  }
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + "\n");
  process.exit(2);
});
