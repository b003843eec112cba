#!/usr/bin/env node
// Renders chat templates with @huggingface/jinja, the independent reference for deltabit's Jinja
// interpreter (tests/text/test_chat_template_reference.cpp).
//
//   node render_template.js CASES.json OUT.json
//
// CASES.json: {"cases": [{"id": "...", "template": {"file": PATH} | {"tokenizer_config": PATH},
//                         "context": {...variables...}}]}
// OUT.json:   {"results": [{"id": "...", "ok": true, "output": "..."} |
//                           {"id": "...", "ok": false, "error": "..."}]}
//
// The template is read from the file itself (a .jinja file, or the "chat_template" string of a
// tokenizer_config.json), not from what deltabit's loader made of it, so a loader bug shows up as a
// difference. Variables go in as JSON values, as transformers passes them.
"use strict";

const fs = require("fs");
const path = require("path");
const { Template } = require("@huggingface/jinja");

function readTemplateText(source) {
  if (source.file) return fs.readFileSync(source.file, "utf8");
  if (source.tokenizer_config) {
    const config = JSON.parse(fs.readFileSync(source.tokenizer_config, "utf8"));
    const t = config.chat_template;
    if (typeof t === "string") return t;
    if (Array.isArray(t)) {
      const wanted = source.name || "default";
      const named = t.find((entry) => entry.name === wanted);
      if (!named) throw new Error(`${source.tokenizer_config}: no chat template named ${wanted}`);
      return named.template;
    }
    throw new Error(`${source.tokenizer_config}: no chat_template`);
  }
  throw new Error("case has neither template.file nor template.tokenizer_config");
}

function main() {
  const [casesPath, outPath] = process.argv.slice(2);
  if (!casesPath || !outPath) {
    console.error("usage: node render_template.js CASES.json OUT.json");
    process.exit(2);
  }
  const { cases } = JSON.parse(fs.readFileSync(casesPath, "utf8"));
  const compiled = new Map();
  const results = cases.map((c) => {
    try {
      const key = JSON.stringify(c.template);
      if (!compiled.has(key)) compiled.set(key, new Template(readTemplateText(c.template)));
      return { id: c.id, ok: true, output: compiled.get(key).render(c.context) };
    } catch (err) {
      return { id: c.id, ok: false, error: String(err && err.message ? err.message : err) };
    }
  });
  fs.writeFileSync(outPath, JSON.stringify({ results }));
}

main();
