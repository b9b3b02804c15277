// gguf_logits.mjs - llama.cpp's side of tests/cli/test-gguf.sh: loads a GGUF
// file with node-llama-cpp's prebuilt CPU binary and writes the logits of
// every position of a token list, as little-endian float32 (T rows of V).
//
//   node gguf_logits.mjs NODE_MODULES MODEL.gguf 1,2,3 OUT.f32 [VOCAB]
//   node gguf_logits.mjs NODE_MODULES MODEL.gguf --tokenize TEXT_FILE
//        prints llama.cpp's token ids of the file's text (no BOS, special
//        tokens as plain text), space-separated, on one line
//
// NODE_MODULES is the folder holding node-llama-cpp (scripts/deps.sh puts it
// in $PRIMUS_CACHE/npm/node_modules). The KV cache is F32 (llama.cpp's
// default F16 cache alone costs ~1e-3 in the logits) and flash attention
// is off, so the numbers are llama.cpp's plain f32 path. Nothing is built
// or downloaded: build "never", skipDownload. A token missing from the
// returned logits is written as NaN, so a comparison fails loudly. Prints
// one line: "T V".
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, modelPath, tokenList, outPath, vocabArg] = process.argv.slice(2);
if (!modules || !modelPath || !tokenList || !outPath) {
  console.error("usage: node gguf_logits.mjs NODE_MODULES MODEL.gguf 1,2,3 OUT.f32 [VOCAB]\n" +
                "       node gguf_logits.mjs NODE_MODULES MODEL.gguf --tokenize TEXT_FILE");
  process.exit(2);
}
if (tokenList === "--tokenize") {
  const { readFileSync } = await import("node:fs");
  const entry = join(modules, "node-llama-cpp", "dist", "index.js");
  const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
  const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath, gpuLayers: 0, vocabOnly: true });
  console.log(model.tokenize(readFileSync(outPath, "utf8"), false).join(" "));
  await model.dispose();
  await llama.dispose();
  process.exit(0);
}
const tokens = tokenList.split(",").map((s) => Number.parseInt(s, 10));
if (tokens.some((t) => !Number.isInteger(t) || t < 0)) {
  console.error(`gguf_logits: bad token list "${tokenList}"`);
  process.exit(2);
}

const entry = join(modules, "node-llama-cpp", "dist", "index.js");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
const llama = await getLlama({
  gpu: false,
  build: "never",
  skipDownload: true,
  logLevel: LlamaLogLevel.error,
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
// node-llama-cpp keeps one cell of the context free: a context of exactly
// the token count would decode the last token in a second batch after a
// context shift (which drops the first tokens). Room for all, in one batch.
const context = await model.createContext({
  contextSize: tokens.length + 16,
  batchSize: tokens.length + 16,
  sequences: 1,
  flashAttention: false,
  experimentalKvCacheKeyType: "F32",
  experimentalKvCacheValueType: "F32",
});
const sequence = context.getSequence();
const res = await sequence.controlledEvaluate(
  tokens.map((t) => [t, { generateNext: { logits: true } }]),
);

const V = vocabArg ? Number.parseInt(vocabArg, 10) : model.tokens.vocabSize ?? model.fileInsights.tokens;
const out = new Float32Array(tokens.length * V).fill(Number.NaN);
for (let i = 0; i < tokens.length; i++) {
  const logits = res[i]?.next?.logits;
  if (!logits) continue;
  for (const [tok, v] of logits) if (tok >= 0 && tok < V) out[i * V + tok] = v;
}
writeFileSync(outPath, Buffer.from(out.buffer));
console.log(`${tokens.length} ${V}`);

await context.dispose();
await model.dispose();
await llama.dispose();
