// Encodes text files with the npm gpt-3-encoder JS reference encoder.
// Usage: node scripts/js_encode.js GPT2_DIR FILE...
// For each FILE writes FILE.js.ids: the ids separated by spaces, then '\n'
// (the same form `trident tokenize` prints).
'use strict';
const fs = require('fs');
const path = require('path');
const [dir, ...files] = process.argv.slice(2);
if (!dir || !fs.existsSync(path.join(dir, 'Encoder.js'))) {
  console.error(`js_encode: no Encoder.js in '${dir}': run scripts/setup_data.sh`);
  process.exit(1);
}
const { encode } = require(path.resolve(dir, 'Encoder.js'));
for (const f of files) {
  fs.writeFileSync(f + '.js.ids', encode(fs.readFileSync(f, 'utf-8')).join(' ') + '\n');
}
