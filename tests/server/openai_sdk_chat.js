// Sends chat requests to `hlx serve` through the official OpenAI SDK (node, pinned in package.json).
// Shared by the Python tests that check served answers against an independent reference.
//   node tests/server/openai_sdk_chat.js PORT '[BODY, ...]'
// Each BODY is a /v1/chat/completions request body (model, messages, max_tokens, ...). For each, one
// plain and one streamed client.chat.completions.create call; prints one JSON line
//   {"version": SDK version, "answers": [[content, finish_reason, streamed content], ...]}
// and exits 1 on any error (the SDK's error on stderr).
const OpenAI = require("openai").default || require("openai").OpenAI;
const path = require("path");
const version = require(path.join(path.dirname(require.resolve("openai")), "package.json")).version;

const [port, bodies] = [process.argv[2], JSON.parse(process.argv[3])];
(async () => {
  const client = new OpenAI({ apiKey: "none", baseURL: `http://127.0.0.1:${port}/v1` });
  const answers = [];
  for (const body of bodies) {
    const plain = await client.chat.completions.create(body);
    let streamed = "";
    for await (const chunk of await client.chat.completions.create({ ...body, stream: true }))
      if (chunk.choices.length && chunk.choices[0].delta.content) streamed += chunk.choices[0].delta.content;
    answers.push([plain.choices[0].message.content, plain.choices[0].finish_reason, streamed]);
  }
  console.log(JSON.stringify({ version, answers }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
