// Renders chat templates with @huggingface/jinja (the JavaScript Jinja of transformers.js), a
// second reference for zoo's renderer beside jinja2 (it has raise_exception built in). Nothing
// here is shared with zoo.
// Usage: node chat_template_js.js NPM_DIR CASES.json OUT.json, with CASES and OUT as for
// chat_template_reference.py ({"template", "variables"} in; {"output"} or {"error"} out).
"use strict";
const fs = require("fs");
const path = require("path");

const [npmDir, casesPath, outPath] = process.argv.slice(2);
const { Template } = require(path.resolve(npmDir, "@huggingface", "jinja", "package", "dist", "index.cjs"));

const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const compiled = new Map();
const results = cases.map(({ template, variables }) => {
  try {
    if (!compiled.has(template)) compiled.set(template, new Template(template));
    return { output: compiled.get(template).render(variables) };
  } catch (e) {
    return { error: String(e) };
  }
});
fs.writeFileSync(outPath, JSON.stringify(results));
