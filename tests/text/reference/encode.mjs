// Reference token ids for deltabit's tokenizer tests, from an independent implementation
// (@huggingface/tokenizers, the tokenizer half of transformers.js).
//
//   node encode.mjs TOKENIZER_JSON CORPUS OUT
//
// CORPUS holds one case per line, each the base64 of the case's raw bytes: base64 carries newlines,
// NUL and invalid UTF-8 through a line-oriented file unchanged. A line starting with '!' (not a base64
// character) is encoded with add_special_tokens, i.e. with the file's BOS/EOS template. Node decodes
// the bytes as WHATWG UTF-8 (each maximal invalid subsequence becomes one U+FFFD), which is the
// behaviour deltabit defines for invalid input. OUT gets one JSON array of ids per case, in order.
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokenizerPath, corpusPath, outPath, ...flags] = process.argv.slice(2);
if (!tokenizerPath || !corpusPath || !outPath || flags.length) {
  console.error("usage: node encode.mjs TOKENIZER_JSON CORPUS OUT");
  process.exit(2);
}

const tokenizerJson = JSON.parse(readFileSync(tokenizerPath, "utf8"));
const configPath = join(dirname(tokenizerPath), "tokenizer_config.json");
const tokenizerConfig = existsSync(configPath) ? JSON.parse(readFileSync(configPath, "utf8")) : {};
const tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);

const lines = readFileSync(corpusPath, "utf8").split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
const out = [];
for (const line of lines) {
  const addSpecial = line.startsWith("!");
  const text = Buffer.from(addSpecial ? line.slice(1) : line, "base64").toString("utf8");
  out.push(JSON.stringify(tokenizer.encode(text, { add_special_tokens: addSpecial }).ids));
}
writeFileSync(outPath, out.join("\n") + "\n");
