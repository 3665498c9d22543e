// Encodes texts with gpt-3-encoder's Encoder.js, an independent JavaScript GPT-2 encoder, for
// zoo's parity tests. Usage: node gpt2_js_encode.js NPM_DIR IN.json OUT.json
// IN is a JSON array of strings; OUT gets a JSON array with the ids of each.
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, input, output] = process.argv.slice(2);
const { encode } = require(path.join(npmDir, 'gpt-3-encoder', 'package', 'Encoder.js'));
const texts = JSON.parse(fs.readFileSync(input, 'utf8'));
fs.writeFileSync(output, JSON.stringify(texts.map((t) => encode(t))));
