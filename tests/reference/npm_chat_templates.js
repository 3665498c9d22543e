// Writes the real models' chat templates that @huggingface/ollama-utils carries (its
// src/chat-template-automap.ts: each entry's "gguf" field is the Jinja chat template a model's
// GGUF file, i.e. its tokenizer_config.json, ships) as JSON: [{"model": ..., "template": ...}].
// The TypeScript source is a single array literal; its type annotations are dropped and the rest
// is evaluated as JavaScript. Usage: node npm_chat_templates.js AUTOMAP_TS OUT_JSON
"use strict";
const fs = require("fs");
const vm = require("vm");

const [source, out] = process.argv.slice(2);
let text = fs.readFileSync(source, "utf8");
text = text.replace(/^import type .*$/m, "");
const start = text.indexOf("export const OLLAMA_CHAT_TEMPLATE_MAPPING");
if (start < 0) throw new Error(source + ": no OLLAMA_CHAT_TEMPLATE_MAPPING");
text = text.slice(text.indexOf("=", start) + 1);
const entries = vm.runInNewContext("(" + text.trim().replace(/;\s*$/, "") + ")");
const seen = new Set();
const templates = [];
for (const e of entries) {
  if (typeof e.gguf !== "string" || seen.has(e.gguf)) continue;
  seen.add(e.gguf);
  templates.push({ model: e.model, template: e.gguf });
}
fs.writeFileSync(out, JSON.stringify(templates, null, 1) + "\n");
console.log(`${templates.length} chat templates in ${out}`);
