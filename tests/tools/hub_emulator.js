#!/usr/bin/env node
// hub_emulator.js - a small HTTP server that speaks the ModelScope HTTP commit
// API and the Hugging Face upload protocol as documented in
// docs/reference/serving-and-hubs.md §3, strictly, for tests/check_hub.c.
//
//   node tests/tools/hub_emulator.js --port-file FILE --log FILE [--token T]
//
// Listens on 127.0.0.1 on a free port and writes the port to --port-file.
// Every request is appended to --log as text lines:
//   REQ <ms> <method> <url> / H <name>: <value> / B <body> / RES <status> / R <body>
// Blobs are checked with node's own crypto (sha256 of the bytes received must
// equal the oid), commits are checked against the stored blobs and the inline
// content's sha256, and any protocol violation is answered 400/422 and listed
// in /__emu/state's `violations`.
//
// Control (no auth): POST /__emu/config {token, faults:[...], hang_blob_puts_after,
// hf_lfs_threshold, hf_chunk_size, hf_multipart_threshold}, GET /__emu/state,
// GET /__emu/file?hub=ms|hf&repo=O/N&path=P (raw bytes), POST /__emu/reset.
// A fault: {method, path (regex on the URL path), status, times, retry_after,
// body, apply (commit: apply it, then answer with the fault = a lost reply),
// ms_code (answer HTTP 200 with this ModelScope Code)}.
'use strict';
const http = require('http');
const crypto = require('crypto');
const fs = require('fs');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const logFile = args.log;

const MS_LFS_SUFFIX = ['.safetensors', '.bin', '.pt', '.pth', '.onnx', '.tar', '.gz', '.zip', '.h5', '.ckpt', '.pkl',
  '.msgpack', '.npy', '.npz', '.model', '.tflite', '.pb', '.ot', '.7z', '.bz2', '.xz', '.zst'];
const HF_LFS_SUFFIX = ['.safetensors', '.bin', '.pt', '.pth', '.onnx', '.gguf', '.h5', '.ckpt', '.msgpack', '.npy', '.npz',
  '.model', '.tar', '.gz', '.zip', '.zst'];

let config, state;
function reset() {
  config = {
    token: args.token || null, faults: [], hang_blob_puts_after: -1,
    hf_lfs_threshold: 10 * 1000 * 1000, hf_chunk_size: 65536, hf_multipart_threshold: 100 * 1024,
  };
  state = {
    ms: { repos: {}, blobs: {} }, hf: { repos: {}, blobs: {}, parts: {} },
    counts: {}, requests: [], violations: [], blob_stores: 0, hanging: 0,
  };
}
reset();

const sha256 = (b) => crypto.createHash('sha256').update(b).digest('hex');
const gitSha1 = (b) => crypto.createHash('sha1').update(Buffer.concat([Buffer.from(`blob ${b.length}\0`), b])).digest('hex');
const hex64 = (s) => typeof s === 'string' && /^[0-9a-f]{64}$/.test(s);
const isNat = (n) => Number.isInteger(n) && n >= 0;
const goodPath = (p) => typeof p === 'string' && p.length > 0 && !p.startsWith('/') && !p.split('/').some((c) => c === '' || c === '.' || c === '..');

function log(lines) { if (logFile) fs.appendFileSync(logFile, lines.join('\n') + '\n'); }

function bodyText(buf, ct) {
  if (!buf.length) return '';
  if (/json|ndjson|text/.test(ct || '') || /^[\x09\x0a\x0d\x20-\x7e]*$/.test(buf.slice(0, 4096).toString('latin1')))
    return buf.slice(0, 65536).toString('utf8').replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
  return `<${buf.length} bytes sha256 ${sha256(buf)}>`;
}

class Reply extends Error { constructor(status, body, headers) { super('reply'); this.status = status; this.body = body; this.headers = headers || {}; } }
function violation(msg, status = 400, ms = false) {
  state.violations.push(msg);
  throw new Reply(status, ms ? { Code: 10010101, Message: msg } : { error: msg });
}
function need(cond, msg, ms = false) { if (!cond) violation(msg, 400, ms); }

function bearerOk(req) {
  const a = req.headers.authorization || '';
  return config.token && a === `Bearer ${config.token}`;
}
function msAuth(req) {
  // ModelScope: the cookie m_session_id and the bearer header, both
  const c = req.headers.cookie || '';
  const m = /(?:^|;\s*)m_session_id=([^;]*)/.exec(c);
  if (!bearerOk(req) || !m || m[1] !== config.token) throw new Reply(401, { Code: 10010301, Message: 'token invalid or expired' });
  need(/^[0-9a-f]{16,64}$/.test(req.headers['x-request-id'] || ''), 'modelscope: X-Request-ID missing', true);
}
function hfAuth(req) {
  if (!bearerOk(req)) throw new Reply(401, { error: 'Invalid credentials in Authorization header' });
}
function noAuth(req, what) {
  need(!req.headers.authorization && !(req.headers.cookie || '').includes('m_session_id'), `${what}: credentials sent to a presigned URL`);
}
function json(buf, what, ms) {
  try { return JSON.parse(buf.toString('utf8')); } catch (e) { violation(`${what}: body is not JSON`, 400, ms); }
}
const msOk = (data) => ({ Code: 200, Message: 'success', Data: data, RequestId: crypto.randomUUID() });

function base(req) { return `http://${req.headers.host}`; }

function storeBlob(store, oid, buf) {
  store[oid] = buf;
  state.blob_stores++;
}

// ===== ModelScope =====
function msRepo(owner, name, must = true) {
  const r = state.ms.repos[`${owner}/${name}`];
  if (!r && must) throw new Reply(404, { Code: 10010205, Message: `model ${owner}/${name} not found` });
  return r;
}

function msCommit(req, repo, rev, body) {
  need(typeof body.commit_message === 'string', 'modelscope commit: commit_message missing', true);
  need(Array.isArray(body.actions) && body.actions.length > 0, 'modelscope commit: actions missing', true);
  need(body.actions.length <= 256, 'modelscope commit: more than 256 files', true);
  const files = repo.revs[rev] || (repo.revs[rev] = Object.assign({}, repo.revs.master || {}));
  const staged = {};
  for (const a of body.actions) {
    need(['create', 'update', 'delete'].includes(a.action), `modelscope commit: bad action '${a.action}'`, true);
    need(goodPath(a.path), `modelscope commit: bad path '${a.path}'`, true);
    need(!(a.path in staged), `modelscope commit: '${a.path}' twice`, true);
    if (a.action === 'create') need(!(a.path in files), `modelscope commit: create '${a.path}' but it exists`, true);
    if (a.action === 'update') need(a.path in files, `modelscope commit: update '${a.path}' but it does not exist`, true);
    need(isNat(a.size) && hex64(a.sha256), `modelscope commit: '${a.path}': size/sha256 missing`, true);
    let content;
    if (a.type === 'lfs') {
      need(a.content === '' && a.encoding === '', `modelscope commit: lfs '${a.path}' carries content`, true);
      content = state.ms.blobs[a.sha256];
      need(content !== undefined, `modelscope commit: lfs '${a.path}': blob ${a.sha256} was never uploaded`, true);
    } else {
      need(a.type === 'normal' && a.encoding === 'base64' && typeof a.content === 'string', `modelscope commit: '${a.path}': bad normal action`, true);
      content = Buffer.from(a.content, 'base64');
      need(sha256(content) === a.sha256, `modelscope commit: '${a.path}': sha256 does not match the content`, true);
    }
    need(content.length === a.size, `modelscope commit: '${a.path}': size ${a.size} != ${content.length}`, true);
    staged[a.path] = { sha256: sha256(content), size: content.length, lfs: a.type === 'lfs', content };
  }
  Object.assign(files, staged);
  const oid = crypto.randomBytes(20).toString('hex');
  repo.commits.push({ id: oid, rev, message: body.commit_message, paths: Object.keys(staged) });
  return oid;
}

function handleMs(req, res, url, buf) {
  const p = url.pathname;
  let m;
  if (req.method === 'GET' && (m = /^\/api\/v1\/models\/([^/]+)\/([^/]+)$/.exec(p))) {
    msAuth(req);
    const r = msRepo(m[1], m[2]);
    return [200, msOk({ Path: m[1], Name: m[2], Visibility: r.visibility })];
  }
  if (req.method === 'POST' && p === '/api/v1/models') {
    msAuth(req);
    const b = json(buf, 'modelscope create', true);
    need(typeof b.Path === 'string' && typeof b.Name === 'string' && [1, 3, 5].includes(b.Visibility), 'modelscope create: Path/Name/Visibility', true);
    const id = `${b.Path}/${b.Name}`;
    if (state.ms.repos[id]) return [200, { Code: 10010202, Message: 'model already exists' }];
    state.ms.repos[id] = { visibility: b.Visibility, revs: { master: {} }, commits: [] };
    return [200, msOk(`${base(req)}/models/${id}`)];
  }
  if (req.method === 'GET' && (m = /^\/api\/v1\/models\/([^/]+)\/([^/]+)\/repo\/files$/.exec(p))) {
    msAuth(req);
    const r = msRepo(m[1], m[2]);
    const rev = url.searchParams.get('Revision') || 'master';
    const files = r.revs[rev];
    if (!files) throw new Reply(404, { Code: 10010205, Message: `revision ${rev} not found` });
    const out = [];
    const dirs = new Set();
    for (const [path, f] of Object.entries(files)) {
      const parts = path.split('/');
      for (let i = 1; i < parts.length; i++) dirs.add(parts.slice(0, i).join('/'));
      out.push({ Name: parts[parts.length - 1], Path: path, Type: 'blob', Size: f.size, Sha256: f.sha256, IsLFS: f.lfs, Revision: rev });
    }
    for (const d of dirs) out.push({ Name: d.split('/').pop(), Path: d, Type: 'tree', Size: 0, Sha256: '' });
    return [200, msOk({ Files: out })];
  }
  if (req.method === 'POST' && (m = /^\/api\/v1\/repos\/models\/([^/]+)\/([^/]+)\/info\/lfs\/objects\/batch$/.exec(p))) {
    msAuth(req);
    msRepo(m[1], m[2]);
    const b = json(buf, 'modelscope lfs batch', true);
    need(b.operation === 'upload' && Array.isArray(b.objects), 'modelscope lfs batch: operation/objects', true);
    need(b.objects.length >= 1 && b.objects.length <= 64, 'modelscope lfs batch: 1..64 objects per call', true);
    const objects = b.objects.map((o) => {
      need(hex64(o.oid) && isNat(o.size), 'modelscope lfs batch: bad oid/size', true);
      if (state.ms.blobs[o.oid]) return { oid: o.oid, size: o.size };
      return { oid: o.oid, size: o.size, actions: { upload: { href: `${base(req)}/ms-blob/${o.oid}?size=${o.size}` } } };
    });
    return [200, msOk({ objects })];
  }
  if (req.method === 'POST' && (m = /^\/api\/v1\/repos\/models\/([^/]+)\/([^/]+)\/commit\/([^/]+)$/.exec(p))) {
    msAuth(req);
    const r = msRepo(m[1], m[2]);
    need((req.headers['content-type'] || '').startsWith('application/json'), 'modelscope commit: Content-Type', true);
    const b = json(buf, 'modelscope commit', true);
    return [200, msOk({ oid: msCommit(req, r, decodeURIComponent(m[3]), b) })];
  }
  if (req.method === 'PUT' && (m = /^\/ms-blob\/([0-9a-f]{64})$/.exec(p))) {
    msAuth(req);
    const size = Number(url.searchParams.get('size'));
    need(buf.length === size, `modelscope blob: ${buf.length} bytes, expected ${size}`, true);
    need(sha256(buf) === m[1], 'modelscope blob: sha256 does not match the oid', true);
    storeBlob(state.ms.blobs, m[1], buf);
    return [200, msOk(null)];
  }
  return null;
}

// ===== Hugging Face =====
function hfRepo(owner, name) {
  const r = state.hf.repos[`${owner}/${name}`];
  if (!r) throw new Reply(404, { error: 'Repository not found' });
  return r;
}
function hfLfs(path, size) {
  if (size === 0) return false;
  return size > config.hf_lfs_threshold || HF_LFS_SUFFIX.some((s) => path.toLowerCase().endsWith(s));
}

function hfCommit(req, repo, rev, buf) {
  const lines = buf.toString('utf8').split('\n').filter((l) => l.length);
  need(lines.length >= 2, 'hf commit: no operations');
  const objs = lines.map((l) => { try { return JSON.parse(l); } catch (e) { return violation('hf commit: a line is not JSON'); } });
  need(objs[0].key === 'header' && objs[0].value && typeof objs[0].value.summary === 'string', 'hf commit: first line must be the header');
  need(objs.length - 1 <= 100, 'hf commit: more than 100 files in one commit');
  const files = repo.revs[rev] || (repo.revs[rev] = Object.assign({}, repo.revs.main || {}));
  const staged = {};
  for (const o of objs.slice(1)) {
    const v = o.value || {};
    need(goodPath(v.path), `hf commit: bad path '${v.path}'`);
    need(!(v.path in staged), `hf commit: '${v.path}' twice`);
    let content, lfs;
    if (o.key === 'lfsFile') {
      need(v.algo === 'sha256' && hex64(v.oid) && isNat(v.size), `hf commit: '${v.path}': bad lfsFile`);
      content = state.hf.blobs[v.oid];
      need(content !== undefined, `hf commit: '${v.path}': blob ${v.oid} was never uploaded`);
      need(content.length === v.size, `hf commit: '${v.path}': size mismatch`);
      need(hfLfs(v.path, v.size), `hf commit: '${v.path}' should be regular`);
      lfs = true;
    } else if (o.key === 'file') {
      need(v.encoding === 'base64' && typeof v.content === 'string', `hf commit: '${v.path}': bad file`);
      content = Buffer.from(v.content, 'base64');
      need(!hfLfs(v.path, content.length), `hf commit: '${v.path}' must go through LFS`);
      lfs = false;
    } else {
      violation(`hf commit: unknown key '${o.key}'`);
    }
    staged[v.path] = { sha256: sha256(content), sha1: gitSha1(content), size: content.length, lfs, content };
  }
  Object.assign(files, staged);
  const oid = crypto.randomBytes(20).toString('hex');
  repo.commits.push({ id: oid, rev, message: objs[0].value.summary, paths: Object.keys(staged) });
  return oid;
}

function handleHf(req, res, url, buf) {
  const p = url.pathname;
  let m;
  if (req.method === 'POST' && p === '/api/repos/create') {
    hfAuth(req);
    const b = json(buf, 'hf create');
    need(typeof b.name === 'string' && typeof b.organization === 'string' && b.type === 'model' &&
      ['public', 'private'].includes(b.visibility), 'hf create: name/organization/type/visibility');
    const id = `${b.organization}/${b.name}`;
    if (state.hf.repos[id]) return [409, { error: 'You already created this model repo', url: `${base(req)}/${id}` }];
    state.hf.repos[id] = { visibility: b.visibility, revs: { main: {} }, commits: [] };
    return [200, { url: `${base(req)}/${id}` }];
  }
  if (req.method === 'POST' && (m = /^\/api\/models\/([^/]+)\/([^/]+)\/preupload\/([^/]+)$/.exec(p))) {
    hfAuth(req);
    const r = hfRepo(m[1], m[2]);
    const files = r.revs[decodeURIComponent(m[3])] || {};
    const b = json(buf, 'hf preupload');
    need(Array.isArray(b.files) && b.files.length >= 1 && b.files.length <= 256, 'hf preupload: 1..256 files');
    const out = b.files.map((f) => {
      need(goodPath(f.path) && isNat(f.size) && typeof f.sample === 'string', 'hf preupload: path/size/sample');
      const sample = Buffer.from(f.sample, 'base64');
      need(sample.length <= 512 && sample.length === Math.min(512, f.size), 'hf preupload: sample must be the first 512 bytes');
      const lfs = hfLfs(f.path, f.size);
      const cur = files[f.path];
      return { path: f.path, uploadMode: lfs ? 'lfs' : 'regular', shouldIgnore: false,
        oid: cur ? (cur.lfs ? cur.sha256 : cur.sha1) : undefined };
    });
    return [200, { files: out, commitOid: r.commits.length ? r.commits[r.commits.length - 1].id : null }];
  }
  if (req.method === 'POST' && (m = /^\/([^/]+)\/([^/]+)\.git\/info\/lfs\/objects\/batch$/.exec(p))) {
    hfAuth(req);
    hfRepo(m[1], m[2]);
    need(req.headers.accept === 'application/vnd.git-lfs+json' &&
      req.headers['content-type'] === 'application/vnd.git-lfs+json', 'hf lfs batch: Accept/Content-Type must be application/vnd.git-lfs+json');
    const b = json(buf, 'hf lfs batch');
    need(b.operation === 'upload' && Array.isArray(b.transfers) && b.transfers.includes('basic') && !b.transfers.includes('xet'),
      'hf lfs batch: operation/transfers');
    need(b.hash_algo === 'sha256' && b.ref && typeof b.ref.name === 'string', 'hf lfs batch: hash_algo/ref');
    need(Array.isArray(b.objects) && b.objects.length >= 1 && b.objects.length <= 1000, 'hf lfs batch: objects');
    const multi = b.transfers.includes('multipart');
    const objects = b.objects.map((o) => {
      need(hex64(o.oid) && isNat(o.size), 'hf lfs batch: bad oid/size');
      if (state.hf.blobs[o.oid]) return { oid: o.oid, size: o.size };
      const sig = crypto.randomBytes(8).toString('hex');
      const verify = { href: `${base(req)}/hf-verify/${o.oid}`, header: {} };
      if (multi && o.size > config.hf_multipart_threshold) {
        const cs = config.hf_chunk_size;
        const header = { chunk_size: String(cs) };
        const n = Math.ceil(o.size / cs);
        for (let i = 1; i <= n; i++) header[String(i).padStart(5, '0')] = `${base(req)}/hf-part/${o.oid}/${i}?sig=${sig}`;
        return { oid: o.oid, size: o.size, authenticated: true,
          actions: { upload: { href: `${base(req)}/hf-complete/${o.oid}?size=${o.size}&sig=${sig}`, header }, verify } };
      }
      return { oid: o.oid, size: o.size, authenticated: true,
        actions: { upload: { href: `${base(req)}/hf-blob/${o.oid}?size=${o.size}&sig=${sig}`, header: { 'x-emu-sig': sig } }, verify } };
    });
    return [200, { transfer: multi ? 'multipart' : 'basic', objects }];
  }
  if (req.method === 'PUT' && (m = /^\/hf-blob\/([0-9a-f]{64})$/.exec(p))) {
    noAuth(req, 'hf blob');
    need(req.headers['x-emu-sig'] === url.searchParams.get('sig'), 'hf blob: the action header was not sent');
    const size = Number(url.searchParams.get('size'));
    need(buf.length === size, `hf blob: ${buf.length} bytes, expected ${size}`);
    need(sha256(buf) === m[1], 'hf blob: sha256 does not match the oid');
    storeBlob(state.hf.blobs, m[1], buf);
    return [200, {}];
  }
  if (req.method === 'PUT' && (m = /^\/hf-part\/([0-9a-f]{64})\/(\d+)$/.exec(p))) {
    noAuth(req, 'hf part');
    const parts = state.hf.parts[m[1]] || (state.hf.parts[m[1]] = {});
    const etag = `"${crypto.createHash('md5').update(buf).digest('hex')}"`;
    parts[Number(m[2])] = { buf, etag };
    return [200, '', { ETag: etag }];
  }
  if (req.method === 'POST' && (m = /^\/hf-complete\/([0-9a-f]{64})$/.exec(p))) {
    noAuth(req, 'hf multipart completion');
    const b = json(buf, 'hf multipart completion');
    const parts = state.hf.parts[m[1]] || {};
    const size = Number(url.searchParams.get('size'));
    const n = Math.ceil(size / config.hf_chunk_size);
    need(b.oid === m[1] && Array.isArray(b.parts) && b.parts.length === n, `hf multipart completion: ${n} parts expected`);
    const bufs = b.parts.map((x, i) => {
      need(x.partNumber === i + 1 && parts[i + 1] && parts[i + 1].etag === x.etag, `hf multipart completion: part ${i + 1} etag`);
      return parts[i + 1].buf;
    });
    const all = Buffer.concat(bufs);
    need(all.length === size && sha256(all) === m[1], 'hf multipart completion: assembled blob does not match the oid');
    for (let i = 1; i < n; i++) need(bufs[i - 1].length === config.hf_chunk_size, 'hf multipart: parts must be chunk_size long');
    storeBlob(state.hf.blobs, m[1], all);
    delete state.hf.parts[m[1]];
    return [200, {}];
  }
  if (req.method === 'POST' && (m = /^\/hf-verify\/([0-9a-f]{64})$/.exec(p))) {
    hfAuth(req);
    const b = json(buf, 'hf verify');
    const blob = state.hf.blobs[m[1]];
    if (!blob || b.oid !== m[1] || b.size !== blob.length) return [404, { error: 'object not found' }];
    return [200, {}];
  }
  if (req.method === 'POST' && (m = /^\/api\/models\/([^/]+)\/([^/]+)\/commit\/([^/]+)$/.exec(p))) {
    hfAuth(req);
    const r = hfRepo(m[1], m[2]);
    need((req.headers['content-type'] || '').startsWith('application/x-ndjson'), 'hf commit: Content-Type must be application/x-ndjson');
    const rev = decodeURIComponent(m[3]);
    const reply = () => ({ commitOid: hfCommit(req, r, rev, buf), commitUrl: `${base(req)}/${m[1]}/${m[2]}/commit/x`, pullRequestUrl: null });
    return [200, null, null, reply];
  }
  return null;
}

// ===== server =====
function kind(method, p) {
  if (/\/ms-blob\/|\/hf-blob\/|\/hf-part\//.test(p)) return 'blob_put';
  if (/\/commit\//.test(p)) return 'commit';
  if (/lfs\/objects\/batch/.test(p)) return 'lfs_batch';
  if (/preupload/.test(p)) return 'preupload';
  if (/hf-complete/.test(p)) return 'complete';
  if (/hf-verify/.test(p)) return 'verify';
  if (/repo\/files/.test(p)) return 'list';
  return 'other';
}

function send(res, status, body, headers, logLines) {
  const text = body === null || body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
  logLines.push(`RES ${status}`, `R ${text.replace(/\n/g, '\\n').slice(0, 4096)}`);
  log(logLines);
  res.writeHead(status, Object.assign({ 'Content-Type': 'application/json' }, headers || {}));
  res.end(text);
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const buf = Buffer.concat(chunks);
    const url = new URL(req.url, 'http://x');
    const p = url.pathname;
    const t = Date.now();
    if (p.startsWith('/__emu/')) return control(req, res, url, buf);
    const lines = [`REQ ${t} ${req.method} ${req.url}`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`H ${req.rawHeaders[i].toLowerCase()}: ${req.rawHeaders[i + 1]}`);
    lines.push(`B ${bodyText(buf, req.headers['content-type'])}`);
    const k = kind(req.method, p);
    state.counts[k] = (state.counts[k] || 0) + 1;
    const rec = { t, method: req.method, path: p, kind: k, status: 0 };
    state.requests.push(rec);
    const reply = (status, body, headers) => { rec.status = status; send(res, status, body, headers, lines); };
    try {
      // the kill-halfway hook: blob uploads past N never get an answer
      if (k === 'blob_put' && config.hang_blob_puts_after >= 0 && state.blob_stores >= config.hang_blob_puts_after) {
        state.hanging++;
        lines.push('HANG');
        log(lines);
        return;
      }
      const isMs = p.startsWith('/api/v1/') || p.startsWith('/ms-blob/');
      const fault = config.faults.find((f) => f.times > 0 && (!f.method || f.method === req.method) && new RegExp(f.path).test(p));
      if (fault && !fault.apply) {
        fault.times--;
        const h = fault.retry_after !== undefined ? { 'Retry-After': String(fault.retry_after) } : {};
        if (fault.ms_code) return reply(200, { Code: fault.ms_code, Message: fault.message || 'failed' }, h);
        return reply(fault.status, fault.body || (isMs ? { Code: fault.status, Message: 'injected' } : { error: 'injected' }), h);
      }
      const r = isMs ? handleMs(req, res, url, buf) : handleHf(req, res, url, buf);
      if (!r) return reply(404, isMs ? { Code: 404, Message: 'no such endpoint' } : { error: 'no such endpoint' });
      let [status, body, headers, apply] = r;
      if (apply) body = apply();
      if (fault && fault.apply) {
        // the request took effect but the reply is lost / an error
        fault.times--;
        if (fault.ms_code) return reply(200, { Code: fault.ms_code, Message: fault.message || 'failed' });
        return reply(fault.status, { error: 'injected after apply' });
      }
      return reply(status, body, headers);
    } catch (e) {
      if (e instanceof Reply) return reply(e.status, e.body, e.headers);
      state.violations.push(`internal: ${e.stack}`);
      return reply(500, { error: 'emulator bug' });
    }
  });
});

function control(req, res, url, buf) {
  const p = url.pathname;
  const ok = (b, type = 'application/json') => { res.writeHead(200, { 'Content-Type': type }); res.end(b); };
  if (p === '/__emu/config' && req.method === 'POST') {
    Object.assign(config, JSON.parse(buf.toString('utf8') || '{}'));
    return ok('{}');
  }
  if (p === '/__emu/reset') { reset(); return ok('{}'); }
  if (p === '/__emu/state') {
    const strip = (hub) => {
      const out = {};
      for (const [id, r] of Object.entries(state[hub].repos)) {
        const revs = {};
        for (const [rev, files] of Object.entries(r.revs)) {
          revs[rev] = {};
          for (const [path, f] of Object.entries(files)) revs[rev][path] = { sha256: f.sha256, size: f.size, lfs: f.lfs };
        }
        out[id] = { visibility: r.visibility, revs, commits: r.commits };
      }
      return { repos: out, blobs: Object.keys(state[hub].blobs) };
    };
    return ok(JSON.stringify({ ms: strip('ms'), hf: strip('hf'), counts: state.counts, requests: state.requests,
      violations: state.violations, blob_stores: state.blob_stores, hanging: state.hanging }));
  }
  if (p === '/__emu/file') {
    const hub = url.searchParams.get('hub');
    const r = state[hub] && state[hub].repos[url.searchParams.get('repo')];
    const rev = url.searchParams.get('rev') || (hub === 'ms' ? 'master' : 'main');
    const f = r && r.revs[rev] && r.revs[rev][url.searchParams.get('path')];
    if (!f) { res.writeHead(404); return res.end(); }
    return ok(f.content, 'application/octet-stream');
  }
  res.writeHead(404);
  res.end();
}

server.keepAliveTimeout = 1000;
server.listen(0, '127.0.0.1', () => {
  const port = server.address().port;
  if (args['port-file']) {
    fs.writeFileSync(args['port-file'] + '.tmp', String(port));
    fs.renameSync(args['port-file'] + '.tmp', args['port-file']);
  } else {
    console.log(port);
  }
});
process.on('SIGTERM', () => process.exit(0));
