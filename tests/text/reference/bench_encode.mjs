// The reference's encode speed, single thread, on the text bench_tokenizer_encode wrote:
//
//   node bench_encode.mjs TOKENIZER_JSON TEXT_FILE
//
// Same protocol as the C++ bench: one first pass, then the best of three.
import { readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokenizerPath, textPath] = process.argv.slice(2);
if (!tokenizerPath || !textPath) {
  console.error("usage: node bench_encode.mjs TOKENIZER_JSON TEXT_FILE");
  process.exit(2);
}
const configPath = join(dirname(tokenizerPath), "tokenizer_config.json");
const tokenizer = new Tokenizer(
  JSON.parse(readFileSync(tokenizerPath, "utf8")),
  existsSync(configPath) ? JSON.parse(readFileSync(configPath, "utf8")) : {},
);
const text = readFileSync(textPath, "utf8");
const mb = Buffer.byteLength(text, "utf8") / 1e6;

function pass() {
  const start = process.hrtime.bigint();
  const n = tokenizer.encode(text, { add_special_tokens: false }).ids.length;
  return [Number(process.hrtime.bigint() - start) / 1e9, n];
}
const [first, n] = pass();
let best = Infinity;
for (let r = 0; r < 3; r++) best = Math.min(best, pass()[0]);
console.log(`reference   @huggingface/tokenizers, ${mb.toFixed(1)} MB -> ${n} tokens`);
console.log(`first pass  ${(mb / first).toFixed(1)} MB/s`);
console.log(`warm        ${(mb / best).toFixed(1)} MB/s (best of 3)`);
