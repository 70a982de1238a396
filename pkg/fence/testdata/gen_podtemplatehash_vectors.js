#!/usr/bin/env node
// Writes the pod-template-hash vectors of pkg/fence (contract §5), one JSON record
// per line: {"name", "input" (a JSON text), "canonical", "hash"}. The hash is
// computed here, by JavaScript itself, with the host's algorithm; the Go port
// must reproduce every line. Deterministic (seeded), no npm packages:
//
//   node gen_podtemplatehash_vectors.js > podtemplatehash_vectors.jsonl
//
// TestPodTemplateHashVectorsAreCurrent re-runs it, so the committed file
// cannot drift from this generator.
//
// With --oracle it is FuzzPodTemplateHashJSON's oracle instead: it reads one
// JSON string per line on stdin (an input text) and answers each with one
// line, {"canonical", "hash"} as vector() computes them, or {"error"} with
// the exception JSON.parse (or the engine) threw.
'use strict';
const crypto = require('node:crypto');

// The host's canonicalisation (contract §5): sort keys by UTF-16 code units into a
// fresh object, drop undefined members. JavaScript then enumerates
// array-index keys first, and out['__proto__'] = v sets the prototype instead
// of a member: both are behaviours of the language the Go port must copy.
function canonical(v) {
  if (Array.isArray(v)) return v.map((e) => canonical(e));
  if (v !== null && typeof v === 'object') {
    const out = {};
    for (const k of Object.keys(v).sort()) {
      const c = v[k];
      if (c !== undefined) out[k] = canonical(c);
    }
    return out;
  }
  return v;
}

function vector(name, input) {
  if (!input.isWellFormed()) throw new Error(`${name}: input must be well-formed UTF-16 to survive the file`);
  const canon = JSON.stringify(canonical(JSON.parse(input)));
  const hash = 'sha256:' + crypto.createHash('sha256').update(canon, 'utf8').digest('hex');
  return { name, input, canonical: canon, hash };
}

if (process.argv[2] === '--oracle') {
  const lines = require('node:readline').createInterface({ input: process.stdin, crlfDelay: Infinity });
  lines.on('line', (line) => {
    let answer;
    try {
      const v = vector('oracle', JSON.parse(line));
      answer = { canonical: v.canonical, hash: v.hash };
    } catch (e) {
      answer = { error: `${e.name}: ${e.message}` };
    }
    process.stdout.write(JSON.stringify(answer) + '\n');
  });
  return;
}

// mulberry32: a tiny seeded PRNG, so the output is the same on every run.
let seed = 20260801;
function rnd() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rnd() * n);
const pick = (a) => a[int(a.length)];
const hex4 = (c) => c.toString(16).padStart(4, '0');

// ---- values ----------------------------------------------------------------

const f64 = new Float64Array(1);
const u32 = new Uint32Array(f64.buffer);
function randomBitsNumber() {
  for (;;) {
    u32[0] = int(2 ** 32);
    u32[1] = int(2 ** 32);
    if (Number.isFinite(f64[0])) return f64[0];
  }
}
function randomNumber() {
  switch (int(8)) {
    case 0: return int(1000);
    case 1: return -int(100000);
    case 2: return randomBitsNumber();
    case 3: return Number(`${int(1e6)}e${int(700) - 350}`); // may be 0 or Infinity
    case 4: { // around the layout boundaries of Number::toString
      const x = 10 ** (int(32) - 9);
      return pick([x, x * (1 + Number.EPSILON), x * (1 - Number.EPSILON), x * 1.5, -x, x * 9.99]);
    }
    case 5: return int(2 ** 53) * pick([1, -1, 3, 0.5]);
    case 6: return rnd() * pick([1, 1e-7, 1e-6, 1e21, 1e20, 1e308]);
    default: return pick(specialNumbers);
  }
}
const specialNumbers = [
  0, -0, 1, -1, 1.5, 100, 0.1, 0.2, 0.30000000000000004, 1e21, 1e-7, 1e-6, 1e20, 123456789012345680000,
  999999999999999900000, 1.2345e-7, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
  2 ** 53, 2 ** 53 - 1, 2 ** 53 + 2, 4.35, 0.000001, 0.0000001, 1e300, 123e-20, 2 ** 31, 2 ** 32, 2 ** 64,
  Infinity, -Infinity,
];

// Code units chosen to hit every branch of JSON.stringify's QuoteJSONString
// and of UTF-16 ordering.
function randomUnits() {
  switch (int(12)) {
    case 0: return [int(0x20)];
    case 1: return [pick([0x7f, 0x80, 0xa0, 0xad, 0xff, 0x2028, 0x2029, 0xfeff, 0xfffe, 0xffff, 0xe000])];
    case 2: return [0x100 + int(0xd800 - 0x100)];
    case 3: return [0xd800 + int(0x400)]; // lone high
    case 4: return [0xdc00 + int(0x400)]; // lone low
    case 5: { // a valid pair
      const cp = 0x10000 + int(0x100000);
      return [0xd800 + ((cp - 0x10000) >> 10), 0xdc00 + ((cp - 0x10000) & 0x3ff)];
    }
    case 6: return [0xdc00 + int(0x400), 0xd800 + int(0x400)]; // reversed pair
    case 7: return [pick([0x22, 0x5c, 0x2f, 0x3c, 0x3e, 0x26, 0x27, 0x60])];
    case 8: return [0xe000 + int(0x2000)];
    default: return [0x20 + int(0x5f)];
  }
}
function randomString(max) {
  const units = [];
  const n = int(max + 1);
  for (let i = 0; i < n; i++) units.push(...randomUnits());
  return String.fromCharCode(...units);
}
const keyPool = [
  '0', '1', '9', '10', '01', '00', '007', '4294967294', '4294967295', '4294967296', '18446744073709551616',
  '-1', '-0', '1.0', '1e3', ' 1', '+1', '0x1', '１', '__proto__', '__proto', 'constructor', 'prototype',
  'toString', 'toJSON', 'hasOwnProperty', 'valueOf', '', ' ', 'a', 'b', 'A', 'B', 'Z', '_', '~', 'é', 'e\u0301',
  '\u{1F600}', '\uffff', '\ufffe', '\ud800', '\udc00', '\udbff\udfff', 'metadata', 'spec', 'labels',
  'annotations', 'containers', 'image', 'name', 'env', 'value', 'resources', 'limits', 'cpu', 'memory',
  'nodeSelector', 'tolerations', 'sandbox.namzu.ai/template', 'app.kubernetes.io/name',
];
const randomKey = () => (rnd() < 0.6 ? pick(keyPool) : rnd() < 0.5 ? String(int(20)) : randomString(6));

function randomValue(depth) {
  const r = int(depth <= 0 ? 5 : 8);
  switch (r) {
    case 0: return null;
    case 1: return rnd() < 0.5;
    case 2: return randomNumber();
    case 3: case 4: return randomString(8);
    case 5: {
      const a = [];
      for (let n = int(5); n > 0; n--) a.push(randomValue(depth - 1));
      return a;
    }
    default: return randomObject(depth);
  }
}

// A Map keeps insertion order and lets '__proto__' be a plain member until it
// is written as JSON text.
function randomObject(depth) {
  const m = new Map();
  for (let n = int(6); n > 0; n--) m.set(randomKey(), randomValue(depth - 1));
  return m;
}

// ---- JSON text with every legal spelling -----------------------------------

const ws = () => (rnd() < 0.75 ? '' : pick([' ', '\t', '\n', '\r', '  ', '\r\n  ']));

function numberText(x) {
  if (!Number.isFinite(x)) return x > 0 ? pick(['1e400', '1E999', '2e308']) : pick(['-1e400', '-1E999']);
  if (Object.is(x, -0)) return pick(['-0', '-0.0', '-0e5', '-1e-400']);
  switch (int(6)) {
    case 0: return x.toExponential();
    case 1: return x.toExponential().replace('e', 'E').replace('E+', pick(['E+', 'E']));
    case 2: return x.toPrecision(17);
    case 3: return x.toPrecision(21);
    default: return String(x);
  }
}

function stringText(s) {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const pairNext = c >= 0xd800 && c < 0xdc00 && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00;
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += '\\\\';
    else if (pairNext && rnd() < 0.5) { out += s[i] + s[i + 1]; i++; }
    else if (c < 0x20 || (c >= 0xd800 && c <= 0xdfff) || rnd() < 0.08) {
      const short = { 8: '\\b', 9: '\\t', 10: '\\n', 12: '\\f', 13: '\\r', 0x2f: '\\/' }[c];
      const h = hex4(c);
      out += short && rnd() < 0.7 ? short : '\\u' + (rnd() < 0.5 ? h : h.toUpperCase());
    } else out += s[i];
  }
  return out + '"';
}

function text(v) {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return String(v);
  if (typeof v === 'number') return numberText(v);
  if (typeof v === 'string') return stringText(v);
  if (Array.isArray(v)) return '[' + ws() + v.map((e) => ws() + text(e) + ws()).join(',') + ws() + ']';
  const members = [];
  for (const [k, val] of v) {
    // A decoy before the real member: JSON.parse keeps the last duplicate.
    if (rnd() < 0.05) members.push(ws() + stringText(k) + ws() + ':' + ws() + text(randomValue(1)));
    members.push(ws() + stringText(k) + ws() + ':' + ws() + text(val) + ws());
  }
  return '{' + ws() + members.join(',') + ws() + '}';
}

// ---- the vectors -----------------------------------------------------------

const out = [];
const add = (name, input) => out.push(vector(name, input));

// contract §5's own vectors, verbatim.
add('spec5 workspace template', '{"metadata":{"labels":{"sandbox.namzu.ai/template":"namzu-workspace"}},"spec":{"containers":[{"image":"namzu/agent:1","name":"main","volumeDevices":[{"devicePath":"/dev/workspace","name":"workspace"}]}],"terminationGracePeriodSeconds":5}}');
add('spec5 array-index keys', '{"spec":{"nodeSelector":{"9":"b","10":"a","a":"c"}}}');

add('empty object', '{}');
add('empty array', '[]');
add('nested empties', '{"a":{},"b":[],"c":[{}],"d":[[]],"e":{"f":{}}}');
for (const t of ['null', 'true', 'false', '0', '-0', '"x"', '""', '[null]', ' \t\n\r{ "a" : [ 1 , 2 ] } \n']) add(`top level ${JSON.stringify(t)}`, t);
const numberTexts = [
  '0', '-0', '-0.0', '0e0', '1', '-1', '1.5', '100', '1e2', '1E2', '1e+2', '100e-2', '1e21', '1e20', '999999999999999999999',
  '1000000000000000000000', '123456789012345678901234567890', '1e-7', '1e-6', '0.000001', '0.0000001', '0.0000012345',
  '1.2345e-7', '5e-324', '2e-324', '1e-400', '-1e-400', '1e400', '-1e400', '1.7976931348623157e308', '1.7976931348623159e308',
  '2.2250738585072014e-308', '9007199254740991', '9007199254740992', '9007199254740993', '18446744073709551615',
  '0.1', '0.10', '0.30000000000000004', '4.35', '1.005', '123e-20', '1e23', '8.41e21', '5e-7', '2.5e-7', '1.7e+308',
  '0.00000000000000000000000000000000001', '3.141592653589793238462643383279', '-9.999999999999999e20', '4294967295',
];
for (const t of numberTexts) add(`number ${t}`, `{"n":${t},"a":[${t}]}`);
add('index keys first, numerically', '{"10":1,"9":2,"a":3,"01":4,"4294967294":5,"4294967295":6,"-1":7,"":8,"A":9,"0":10,"1.0":11,"00":12}');
add('a surrogate pair sorts before U+FFFF', '{"\\uffff":1,"\\ud83d\\ude00":2,"\uffff\\u0000":3,"😀":4}');
add('lone surrogates survive in keys and values', '{"\\ud800":"\\udc00x","a\\udbff":"\\ud800\\ud800","\\udfff\\ud800":["\\ud83d"]}');
add('__proto__ with an object is dropped', '{"__proto__":{"a":1},"b":2}');
add('__proto__ with a number is dropped', '{"__proto__":1}');
add('__proto__ with null is dropped', '{"__proto__":null,"z":[]}');
add('__proto__ with an array is dropped', '{"a":{"__proto__":[1],"length":3}}');
add('__proto__ inside an array element', '[{"__proto__":"x","y":"\\u005f_proto__"}]');
add('escaped __proto__ key is still __proto__', '{"\\u005f\\u005fproto\\u005f\\u005f":{"x":1},"k":0}');
add('duplicate keys keep the last value', '{"a":1,"b":0,"a":2}');
add('duplicate keys with different types', '{"a":{"x":1},"b":0,"a":[2]}');
add('duplicate __proto__', '{"__proto__":1,"__proto__":{"q":2},"r":3}');
add('control characters', '{"c":"\\u0000\\u0001\\u001F\\u001f\\b\\f\\n\\r\\t\\u000B\\u007f\\u0080"}');
add('escaped solidus and raw slash', '{"p":"\\/dev/workspace"}');
add('U+2028 and U+2029 raw and escaped', '{"l":"\u2028\u2029\\u2028\\u2029"}');
add('html characters stay raw', '{"h":"<script>&amp;\\u003c\\u003e\\u0026</script>"}');
add('non-ASCII raw and escaped', '{"u":"é\\u00e9e\\u0301日本\\u65e5😀\\uD83D\\uDE00","\\u00e9":1,"é":2}');
add('uppercase hex escapes', '{"x":"\\u00C9\\uABCD\\uFFFF"}');
add('keys that look like numbers but are not indexes', '{"1e3":1,"+1":2," 1":3,"1 ":4,"0x1":5,"１":6,"4294967296":7}');
add('keys sort by code units, not code points', '{"\\ue000":1,"\\ud800\\udc00":2,"\\uffff":3,"~":4,"\\u007f":5}');
add('toJSON key is only data', '{"toJSON":"x","constructor":{"prototype":1}}');
for (const depth of [32, 200, 1000]) {
  add(`objects nested ${depth} deep`, '{"a":'.repeat(depth) + '1' + '}'.repeat(depth));
  add(`arrays nested ${depth} deep`, '['.repeat(depth) + ']'.repeat(depth));
  add(`alternating nesting ${depth} deep`, '[{"x":'.repeat(depth) + 'null' + '}]'.repeat(depth));
}
add('a wide object', '{' + Array.from({ length: 300 }, (_, i) => `"k${(i * 7919) % 300}":${i}`).join(',') + '}');
add('a wide index object', '{' + Array.from({ length: 120 }, (_, i) => `"${(i * 7919) % 1000}":${i}`).join(',') + '}');

// A realistic pod template with every kind of member the host writes.
add('realistic pod template', JSON.stringify({
  metadata: { labels: { 'sandbox.namzu.ai/template': 'namzu-workspace', 'sandbox.namzu.ai/per-sandbox-egress': 'claim-1' }, annotations: { 'x/y': 'z' } },
  spec: {
    runtimeClassName: 'gvisor', terminationGracePeriodSeconds: 5, automountServiceAccountToken: false,
    securityContext: { runAsUser: 1000, runAsNonRoot: true, fsGroup: 1000, seccompProfile: { type: 'RuntimeDefault' } },
    containers: [{
      name: 'main', image: 'namzu/agent:1', command: ['/bin/sh', '-c', 'exec agent --port=8080 "$@"'],
      env: [{ name: 'A', value: '1' }, { name: 'B', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }],
      resources: { limits: { cpu: '2', memory: '4Gi' }, requests: { cpu: 0.5, memory: 1073741824 } },
      ports: [{ containerPort: 8080, protocol: 'TCP' }], volumeDevices: [{ devicePath: '/dev/workspace', name: 'workspace' }],
    }],
    tolerations: [{ key: 'sandbox', operator: 'Exists', effect: 'NoSchedule', tolerationSeconds: 3600 }],
    nodeSelector: { 'kubernetes.io/arch': 'amd64', 1: 'x', 0: 'y' },
  },
}));

// Number::toString over many doubles at once: random bit patterns, and every
// power of ten with its neighbours across the layout boundaries.
for (let i = 0; i < 5; i++) {
  add(`random doubles ${i}`, '[' + Array.from({ length: 200 }, () => numberText(randomBitsNumber())).join(',') + ']');
}
const near = [];
for (let k = -30; k <= 30; k++) {
  const x = Number(`1e${k}`);
  near.push(x, x * (1 + Number.EPSILON), x * (1 - Number.EPSILON / 2), x * 1.25, 2 * x / 3);
}
add('powers of ten and their neighbours', JSON.stringify(near));

for (let i = 0; out.length < 640; i++) add(`random ${i}`, ws() + text(rnd() < 0.9 ? randomObject(1 + int(4)) : randomValue(int(3))) + ws());

for (const v of out) process.stdout.write(JSON.stringify(v) + '\n');
