// otlp_check.js: an OTLP profiles receiver that decodes what stackshot
// sends with protobufjs loading the .proto files (independent of the C
// encoder), then checks every dictionary invariant and concrete values.
//
//   node otlp_check.js <v1development|v1experimental> <synth|demo|java|unimplemented|
//                      partial|unavailable> -- <command...>
//
// Starts a gRPC server on 127.0.0.1 (both method paths), runs the command
// with OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT pointing at it, waits for it to
// exit, then checks the requests received. Exit 1 on a failed check.
// "partial": the receiver answers a partial success rejecting one of the
// request's two profiles; "unavailable": it answers the first call
// UNAVAILABLE and takes the retry (both with the synthetic rounds).
// "java": the command is a JVM running examples/java/Demo.java with the
// agent (-agentpath): busy-worker is on CPU in Demo.computePrimes.
// "stripped": the command runs tests/profiles/strip_host.c, whose busy
// thread runs a stripped library (OTLP_CHECK_STRIPPED_LIB): its frames
// without a symbol are functions "libstripx.so+0x<offset>" (several
// distinct offsets), on locations whose mapping is libstripx.so with the
// attribute process.executable.build_id.gnu = the library's build id;
// symbolized functions have plain names (no "global."/"unknown.").
//
// OTLP_CHECK_TRANSPORT=http (or http-gzip): the receiver is an OTLP/HTTP
// one instead (node's http: POST /v1development/profiles or
// /v1experimental/profiles, application/x-protobuf, gzip checked when
// asked), the exporter set to http/protobuf with the general endpoint (it
// appends the path of its version).
'use strict';
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');
const http = require('http');
const zlib = require('zlib');
let grpc, protobuf;
try {
  grpc = require('@grpc/grpc-js');
  protobuf = require('protobufjs');
} catch (e) {
  console.log('otlp_check: npm packages missing (npm ci in tests/profiles/node); skipped');
  process.exit(77);
}

const HERE = __dirname;
const PROTO_DIRS = [path.resolve(HERE, '../../../exporters/profiles/proto'),
                    path.resolve(HERE, '../../../exporters/otlp/proto')];
const DEV = 'opentelemetry.proto.collector.profiles.v1development';
const EXP = 'opentelemetry.proto.collector.profiles.v1experimental';

function fail(msg) {
  console.error('otlp_check: FAIL: ' + msg);
  process.exit(1);
}
function check(cond, msg) { if (!cond) fail(msg); }

function loadRoot() {
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => {
    for (const d of PROTO_DIRS) {
      const p = path.join(d, target);
      if (fs.existsSync(p)) return p;
    }
    return target;
  };
  root.loadSync(['opentelemetry/proto/collector/profiles/v1development/profiles_service.proto',
                 'opentelemetry/proto/collector/profiles/v1experimental/profiles_service.proto'],
                { keepCase: true });
  return root;
}

const raw = (b) => b;
function service(pkg) {
  return {
    Export: {
      path: '/' + pkg + '.ProfilesService/Export',
      requestStream: false, responseStream: false,
      requestSerialize: raw, requestDeserialize: raw,
      responseSerialize: raw, responseDeserialize: raw,
    },
  };
}

function toObj(type, bytes) {
  return type.toObject(type.decode(bytes), { longs: String, defaults: true, arrays: true });
}

function anyValue(v) {
  if (v.string_value !== undefined && v.string_value !== '') return v.string_value;
  if (v.int_value !== undefined) return Number(v.int_value);
  return v.string_value;
}

// ---- v1development ----------------------------------------------------

function checkDev(req, expect, rounds) {
  const d = req.dictionary;
  check(d, 'no dictionary');
  const S = d.string_table;
  // Zero elements.
  check(S.length > 0 && S[0] === '', 'string_table[0] is not ""');
  const z = (arr, name, isZero) => check(arr.length > 0 && isZero(arr[0]), name + '[0] is not the zero element');
  z(d.mapping_table, 'mapping_table', (m) => m.memory_start === '0' && m.filename_strindex === 0 && !m.attribute_indices.length);
  z(d.location_table, 'location_table', (l) => l.mapping_index === 0 && l.address === '0' && !l.lines.length && !l.attribute_indices.length);
  z(d.function_table, 'function_table', (f) => f.name_strindex === 0 && f.filename_strindex === 0);
  z(d.link_table, 'link_table', (l) => l.trace_id.every((b) => b === 0) && l.span_id.every((b) => b === 0));
  z(d.attribute_table, 'attribute_table', (a) => a.key_strindex === 0);
  z(d.stack_table, 'stack_table', (s) => !s.location_indices.length);
  // No duplicates.
  const dup = (arr, name, key) => {
    const seen = new Set();
    arr.forEach((e, i) => { const k = key(e); check(!seen.has(k), `${name}[${i}] duplicates an earlier entry`); seen.add(k); });
  };
  dup(S, 'string_table', (s) => s);
  dup(d.function_table, 'function_table', (f) => JSON.stringify(f));
  dup(d.location_table, 'location_table', (l) => JSON.stringify(l));
  dup(d.stack_table, 'stack_table', (s) => s.location_indices.join(','));
  dup(d.attribute_table, 'attribute_table', (a) => JSON.stringify(a));
  dup(d.mapping_table, 'mapping_table', (m) => JSON.stringify(m));
  dup(d.link_table, 'link_table', (l) => Buffer.from(l.trace_id).toString('hex') + Buffer.from(l.span_id).toString('hex'));
  // Index bounds.
  const inb = (i, arr, what) => check(Number.isInteger(i) && i >= 0 && i < arr.length, `${what} index ${i} out of bounds (${arr.length})`);
  for (const m of d.mapping_table) { inb(m.filename_strindex, S, 'mapping filename'); m.attribute_indices.forEach((i) => inb(i, d.attribute_table, 'mapping attribute')); }
  for (const f of d.function_table) { inb(f.name_strindex, S, 'function name'); inb(f.system_name_strindex, S, 'function system name'); inb(f.filename_strindex, S, 'function file'); }
  for (const a of d.attribute_table) { inb(a.key_strindex, S, 'attribute key'); inb(a.unit_strindex, S, 'attribute unit'); }
  for (const s of d.stack_table) s.location_indices.forEach((i) => inb(i, d.location_table, 'stack location'));
  for (const l of d.link_table.slice(1)) check(l.trace_id.length === 16 && l.span_id.length === 8, 'link id widths');
  const attr = (i) => { const a = d.attribute_table[i]; return [S[a.key_strindex], anyValue(a.value || {})]; };
  d.location_table.forEach((l, li) => {
    inb(l.mapping_index, d.mapping_table, 'location mapping');
    l.lines.forEach((ln) => inb(ln.function_index, d.function_table, 'line function'));
    l.attribute_indices.forEach((i) => inb(i, d.attribute_table, 'location attribute'));
    if (li > 0) {
      const types = l.attribute_indices.map(attr).filter(([k]) => k === 'profile.frame.type');
      check(types.length === 1 && ['jvm', 'native'].includes(types[0][1]), `location ${li} has no profile.frame.type`);
    }
  });
  d.mapping_table.slice(1).forEach((m, i) => {
    const file = S[m.filename_strindex];
    check(file, `mapping ${i + 1} has no file name`);
  });
  // Resource.
  check(req.resource_profiles.length === 1, 'one ResourceProfiles');
  const rp = req.resource_profiles[0];
  const rattrs = Object.fromEntries(rp.resource.attributes.map((kv) => [kv.key, anyValue(kv.value)]));
  check(rattrs['process.pid'] > 0 && rattrs['service.name'], 'resource lacks process.pid/service.name');
  check(rp.scope_profiles.length === 1 && rp.scope_profiles[0].scope.name === 'stackshot', 'scope stackshot');
  const profiles = rp.scope_profiles[0].profiles;
  check(profiles.length === 2, `${profiles.length} profiles, want 2 (wall, cpu)`);
  const out = {};
  for (const p of profiles) {
    check(p.sample_type && S[p.sample_type.type_strindex] === 'samples' && S[p.sample_type.unit_strindex] === 'count', 'sample type samples/count');
    const kind = S[p.period_type.type_strindex];
    check(['wall', 'cpu'].includes(kind) && S[p.period_type.unit_strindex] === 'nanoseconds', 'period type');
    check(p.profile_id.length === 16, 'profile id');
    const t0 = BigInt(p.time_unix_nano), t1 = t0 + BigInt(p.duration_nano);
    check(t1 > t0, 'duration');
    const seen = new Set();
    let total = 0;
    const byThread = {}, leafByThread = {};
    const fnName = (li) => { const l = d.location_table[li]; return S[d.function_table[l.lines[0].function_index].name_strindex]; };
    for (const s of p.samples) {
      inb(s.stack_index, d.stack_table, 'sample stack');
      inb(s.link_index, d.link_table, 'sample link');
      s.attribute_indices.forEach((i) => inb(i, d.attribute_table, 'sample attribute'));
      const keys = s.attribute_indices.map((i) => attr(i)[0]);
      check(new Set(keys).size === keys.length, 'duplicate attribute keys in a sample');
      const id = `${s.stack_index}/${s.attribute_indices.join(',')}/${s.link_index}`;
      check(!seen.has(id), 'two samples with the same identity');
      seen.add(id);
      for (const ts of s.timestamps_unix_nano) {
        const t = BigInt(ts);
        check(t >= t0 && t < t1, `timestamp ${t} outside [${t0}, ${t1})`);
      }
      const n = s.values.length ? Number(s.values[0]) : s.timestamps_unix_nano.length;
      check(n > 0, 'sample without observations');
      total += n;
      const a = Object.fromEntries(s.attribute_indices.map(attr));
      check(a['thread.name'] !== undefined && a['thread.id'] !== undefined && a['thread.state'], 'thread attributes');
      byThread[a['thread.name']] = (byThread[a['thread.name']] || 0) + n;
      const stack = d.stack_table[s.stack_index].location_indices;
      if (stack.length) {
        const k = a['thread.name'] + '|' + fnName(stack[0]);
        leafByThread[k] = (leafByThread[k] || 0) + n;
        const k2 = a['thread.name'] + '|has|' + stack.map(fnName).join(';');
        leafByThread[k2] = (leafByThread[k2] || 0) + n;
      }
      if (s.link_index) {
        const l = d.link_table[s.link_index];
        out.link = Buffer.from(l.trace_id).toString('hex') + '/' + Buffer.from(l.span_id).toString('hex');
        out.linkThread = a['thread.name'];
      }
    }
    out[kind] = { total, byThread, leafByThread, period: Number(p.period) };
  }
  return out;
}

// ---- v1experimental ---------------------------------------------------

function checkExp(req) {
  check(req.resource_profiles.length === 1, 'one ResourceProfiles');
  const sp = req.resource_profiles[0].scope_profiles;
  check(sp.length === 1 && sp[0].profiles.length === 1, 'one ProfileContainer');
  const c = sp[0].profiles[0];
  check(c.profile_id.length === 16 && c.profile_id.some((b) => b !== 0), 'profile id');
  const t0 = BigInt(c.start_time_unix_nano), t1 = BigInt(c.end_time_unix_nano);
  check(t1 > t0, 'container time range');
  const p = c.profile;
  const S = p.string_table;
  check(S[0] === '', 'string_table[0] is not ""');
  check(new Set(S).size === S.length, 'duplicate strings');
  const types = p.sample_type.map((v) => S[v.type] + '/' + S[v.unit]);
  check(types.join(',') === 'samples/count,wall/nanoseconds,cpu/nanoseconds', 'sample types ' + types);
  const inb = (i, n, what) => check(Number(i) >= 0 && Number(i) < n, `${what} index ${i} out of bounds (${n})`);
  p.location_indices.forEach((i) => inb(i, p.location.length, 'location_indices'));
  p.location.forEach((l, li) => {
    inb(l.mapping_index, p.mapping.length, 'mapping');
    l.line.forEach((ln) => inb(ln.function_index, p.function.length, 'function'));
    if (li) check(['jvm', 'native'].includes(S[l.type_index]), 'location type ' + S[l.type_index]);
  });
  p.function.forEach((f) => { inb(f.name, S.length, 'name'); inb(f.filename, S.length, 'filename'); });
  const kv = (i) => { const a = p.attribute_table[i]; return [a.key, anyValue(a.value)]; };
  const byThreadCpu = {}, leafCpu = {};
  let cpuTotal = 0, wallTotal = 0;
  for (const s of p.sample) {
    check(s.value.length === 3, 'three values per sample');
    const start = Number(s.locations_start_index), len = Number(s.locations_length);
    check(start + len <= p.location_indices.length, 'location slice out of bounds');
    s.attributes.forEach((i) => inb(i, p.attribute_table.length, 'attribute'));
    inb(s.link, p.link_table.length, 'link');
    for (const ts of s.timestamps_unix_nano) {
      const t = BigInt(ts);
      check(t >= t0 && t < t1, `timestamp ${t} outside [${t0}, ${t1})`);
    }
    const a = Object.fromEntries(s.attributes.map(kv));
    check(a['thread.name'] !== undefined, 'thread.name attribute');
    wallTotal += Number(s.value[0]);
    const cpu = Number(s.value[2]);
    cpuTotal += cpu;
    byThreadCpu[a['thread.name']] = (byThreadCpu[a['thread.name']] || 0) + cpu;
    if (len) {
      const leaf = p.location[Number(p.location_indices[start])];
      const name = S[p.function[Number(leaf.line[0].function_index)].name];
      leafCpu[a['thread.name'] + '|' + name] = (leafCpu[a['thread.name'] + '|' + name] || 0) + cpu;
    }
  }
  return { wallTotal, cpuTotal, byThreadCpu, leafCpu, period: Number(p.period) };
}

// ---- main -------------------------------------------------------------

// The stripped library's frames, read from every request's dictionary.
function checkStripped(reqs) {
  const lib = process.env.OTLP_CHECK_STRIPPED_LIB;
  check(lib, 'OTLP_CHECK_STRIPPED_LIB not set');
  const notes = require('child_process').execFileSync('readelf', ['-n', lib]).toString();
  const m = /Build ID: ([0-9a-f]+)/.exec(notes);
  check(m, 'the library has no build id');
  const buildId = m[1];
  const offsets = new Set(), names = new Set();
  for (const req of reqs) {
    const d = req.dictionary, S = d.string_table;
    const attr = (i) => { const a = d.attribute_table[i]; return [S[a.key_strindex], anyValue(a.value || {})]; };
    for (const l of d.location_table.slice(1)) {
      for (const ln of l.lines) {
        const name = S[d.function_table[ln.function_index].name_strindex];
        names.add(name);
        const u = /^libstripx\.so\+0x([0-9a-f]+)$/.exec(name);
        if (!u) continue;
        const mp = d.mapping_table[l.mapping_index];
        const file = S[mp.filename_strindex];
        const ids = mp.attribute_indices.map(attr).filter(([k]) => k === 'process.executable.build_id.gnu');
        check(file.endsWith('/libstripx.so') && ids.length === 1 && ids[0][1] === buildId,
              `${name}: mapping ${file} build id ${JSON.stringify(ids)}, want ${buildId}`);
        offsets.add(u[1]);
      }
    }
  }
  check(offsets.size >= 2, `${offsets.size} distinct libstripx.so offsets; names ${[...names].join(' ')}`);
  for (const want of ['stripx_run', 'worker', 'start_thread'])
    check(names.has(want), `no function ${want}: ${[...names].join(' ')}`);
  const bad = [...names].filter((n) => /^(global|unknown)\./.test(n));
  check(bad.length === 0, 'namespaced names: ' + bad.join(' '));
  return { offsets: [...offsets].sort(), buildId };
}

async function main() {
  const argv = process.argv.slice(2);
  const sep = argv.indexOf('--');
  const [version, expect] = argv.slice(0, sep);
  const cmd = argv.slice(sep + 1);
  const root = loadRoot();
  const got = [];
  const server = new grpc.Server();
  // "unimplemented": only the other version's service is there, so the
  // exporter's method is unknown to the receiver.
  const want = version === 'v1experimental' ? EXP : DEV;
  const pkgs = expect === 'unimplemented' ? [want === DEV ? EXP : DEV] : [DEV, EXP];
  let calls = 0;
  const answer = (pkg) => {
    if (expect !== 'partial') return Buffer.alloc(0);
    const Resp = root.lookupType(pkg + '.ExportProfilesServiceResponse');
    return Buffer.from(Resp.encode(Resp.fromObject({
      partial_success: { rejected_profiles: 1, error_message: 'one bad profile' } })).finish());
  };
  for (const pkg of pkgs) {
    server.addService(service(pkg), {
      Export: (call, cb) => {
        if (expect === 'unavailable' && calls++ === 0)
          return cb({ code: grpc.status.UNAVAILABLE, details: 'warming up' });
        got.push({ pkg, bytes: call.request });
        cb(null, answer(pkg));
      },
    });
  }
  const transport = process.env.OTLP_CHECK_TRANSPORT || 'grpc';
  let port, httpServer = null;
  const extra = {};
  if (transport === 'grpc') {
    port = await new Promise((res, rej) => server.bindAsync('127.0.0.1:0',
      grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))));
    extra.OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT = 'http://127.0.0.1:' + port;
    extra.OTEL_EXPORTER_OTLP_ENDPOINT = 'http://127.0.0.1:1';
  } else {
    // OTLP/HTTP: the path names the version, as the Collector's receiver does
    const paths = { '/v1development/profiles': DEV, '/v1experimental/profiles': EXP };
    httpServer = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        let body = Buffer.concat(chunks);
        const pkg = paths[req.url];
        if (!pkg || !pkgs.includes(pkg)) { res.writeHead(404); return res.end(); }
        check(req.headers['content-type'] === 'application/x-protobuf', 'content type');
        if (transport === 'http-gzip') {
          check(req.headers['content-encoding'] === 'gzip', 'not gzipped');
          body = zlib.gunzipSync(body);
        }
        if (expect === 'unavailable' && calls++ === 0) { res.writeHead(503); return res.end(); }
        got.push({ pkg, bytes: body });
        res.writeHead(200, { 'content-type': 'application/x-protobuf' });
        res.end(answer(pkg));
      });
    });
    port = await new Promise((res) => httpServer.listen(0, '127.0.0.1', () => res(httpServer.address().port)));
    extra.OTEL_EXPORTER_OTLP_PROTOCOL = 'http/protobuf';
    extra.OTEL_EXPORTER_OTLP_ENDPOINT = 'http://127.0.0.1:' + port;
    if (transport === 'http-gzip') extra.OTEL_EXPORTER_OTLP_COMPRESSION = 'gzip';
  }
  const env = Object.assign({}, process.env, {
    STACKSHOT_PROFILES_VERSION: version,
    STACKSHOT_OTLP_RETRY_INITIAL: '100',
  }, extra);
  const child = spawn(cmd[0], cmd.slice(1), { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '', stderr = '';
  child.stdout.on('data', (b) => { stdout += b; });
  child.stderr.on('data', (b) => { stderr += b; process.stderr.write(b); });
  const code = await new Promise((res) => child.on('close', (c) => res(c)));
  server.forceShutdown();
  if (httpServer) httpServer.close();
  if (expect === 'unimplemented') {
    // The driver exits 1 when records were dropped; it must say why, once.
    check(code === 1, `command exited ${code}, want 1 (records dropped)`);
    check(got.length === 0, 'a request reached the wrong service');
    const lines = stderr.split('\n').filter((l) => l.includes(
      transport === 'grpc' ? 'answers UNIMPLEMENTED' : 'answers HTTP 404'));
    check(lines.length === 1, `${lines.length} UNIMPLEMENTED lines, want 1`);
    check(/otlp_profiles: exported 0 dropped 90 /.test(stdout), 'counters: ' + stdout.trim());
    console.log('otlp_check: ok ' + version + ' unimplemented: ' + stdout.trim());
    process.exit(0);
  }
  if (expect === 'partial') {
    // 1 of 2 profiles rejected: half of the 90 observations, counted once.
    check(code === 0, `command exited ${code}`);
    const lines = stderr.split('\n').filter((l) => l.includes('accepted a batch partially'));
    check(lines.length === 1 &&
          /1 of 2 profiles rejected \(one bad profile\); not retried/.test(lines[0]),
          'partial success lines: ' + JSON.stringify(lines));
    check(/otlp_profiles: exported 45 dropped 0 rejected 45/.test(stdout), 'counters: ' + stdout.trim());
    check(/exported 45 dropped 0 rejected 45 taken 90/.test(stdout), 'no balanced accounting');
    console.log('otlp_check: ok ' + version + ' partial: ' + stdout.trim());
    process.exit(0);
  }
  if (expect === 'unavailable') {
    // the driver's only export is its exit flush: the backend answers it
    // UNAVAILABLE, and an exit does not wait to retry a backend that is
    // failing: one call, the data dropped and counted, said in one line
    // (profiles_drive exits 1 when anything was dropped)
    check(code === 1, `command exited ${code}, want 1 (records dropped)`);
    check(calls === 1 && got.length === 0, `${calls} calls, ${got.length} delivered; want 1 and 0`);
    check(/otlp_profiles: export to .* failed: (UNAVAILABLE: warming up|HTTP 503); retrying in \d+ ms/.test(stderr),
          'no failure line');
    // the reason names the backend's state when the exit began (sender.c):
    // the driver's first call is its exit flush, so that state is "unknown"
    check(/otlp_profiles: \d+ records not delivered before the shutdown deadline \(the backend (did not answer in time|was failing)\)/.test(stderr),
          'no line for what the exit dropped');
    check(/otlp_profiles: exported 0 dropped 90 rejected 0/.test(stdout), 'counters: ' + stdout.trim());
    console.log('otlp_check: ok ' + version + ' unavailable: ' + stdout.trim());
    process.exit(0);
  }
  check(code === 0, `command exited ${code}`);
  check(got.length >= 1, 'no request received');
  check(got.every((g) => g.pkg === want), 'requests on the wrong method path');
  const Req = root.lookupType(want + '.ExportProfilesServiceRequest');
  let summary;
  if (version === 'v1development') {
    const results = got.map((g) => checkDev(toObj(Req, g.bytes), expect));
    const r = results[results.length - 1];
    if (expect === 'stripped') {
      summary = checkStripped(got.map((g) => toObj(Req, g.bytes)));
    } else if (expect === 'synth') {
      check(got.length === 1, 'one request for one period');
      check(r.wall.total === 30 * 3, `wall observations ${r.wall.total}, want 90`);
      check(r.cpu.total === 30, `cpu observations ${r.cpu.total}, want 30`);
      check(r.cpu.leafByThread['main|compute_primes'] === 20 &&
            r.cpu.leafByThread['main|is_prime'] === 10, 'main leaf counts ' + JSON.stringify(r.cpu.leafByThread));
      check(r.wall.byThread.idle === 30 && r.wall.byThread['java-worker'] === 30, 'wall per thread');
      check(r.link === '0102030405060708090a0b0c0d0e0f10/a1a2a3a4a5a6a7a8' && r.linkThread === 'java-worker', 'link ' + r.link);
      check(r.wall.period === 10000000 && r.cpu.period === 10000000, 'period = interval');
      check(r.wall.leafByThread['idle|has|inner;start'] === 30, 'inlined location leaf first');
    } else if (expect === 'java') {
      // busy-worker's CPU observations run Demo.computePrimes (JVM frames
      // named pkg.Class.method)
      let busy = 0, inPrimes = 0;
      for (const x of results) {
        if (!x.cpu) continue;
        busy += x.cpu.byThread['busy-worker'] || 0;
        for (const [k, v] of Object.entries(x.cpu.leafByThread))
          if (k.startsWith('busy-worker|has|') && k.includes('Demo.computePrimes')) inPrimes += v;
      }
      check(busy >= 3, `busy-worker has ${busy} CPU observations`);
      check(inPrimes >= busy * 0.8, `Demo.computePrimes in ${inPrimes} of busy-worker's ${busy}`);
      summary = { requests: got.length, busy, inPrimes };
    } else {
      const busy = results.reduce((n, x) => n + (x.cpu ? (x.cpu.byThread['busy-worker'] || 0) : 0), 0);
      const cpuAll = results.reduce((n, x) => n + (x.cpu ? x.cpu.total : 0), 0);
      let hot = 0;
      for (const x of results) {
        if (!x.cpu) continue;
        for (const [k, v] of Object.entries(x.cpu.leafByThread)) {
          if (k.startsWith('busy-worker|has|') && k.includes('compute_primes')) hot += v;
        }
      }
      check(busy >= 5, `busy-worker has ${busy} CPU observations`);
      check(busy / cpuAll >= 0.8, `busy-worker share of CPU ${busy}/${cpuAll}`);
      check(hot === busy, `compute_primes in ${hot} of busy-worker's ${busy} CPU observations`);
      summary = { requests: got.length, busy, cpuAll };
    }
    summary = summary || { requests: got.length, wall: r.wall.total, cpu: r.cpu.total };
  } else {
    const results = got.map((g) => checkExp(toObj(Req, g.bytes)));
    const r = results[results.length - 1];
    if (expect === 'synth') {
      check(r.wallTotal === 90, `wall ${r.wallTotal}`);
      check(r.cpuTotal === 30 * 9000000, `cpu ns ${r.cpuTotal}`);
      check(r.leafCpu['main|compute_primes'] === 20 * 9000000, 'main compute_primes cpu');
      check(r.period === 10000000, 'period');
    } else {
      const busy = results.reduce((n, x) => n + (x.byThreadCpu['busy-worker'] || 0), 0);
      const all = results.reduce((n, x) => n + x.cpuTotal, 0);
      check(busy / all >= 0.8, `busy-worker share of CPU time ${busy}/${all}`);
    }
    summary = { requests: got.length, wall: r.wallTotal, cpu_ns: r.cpuTotal };
  }
  console.log('otlp_check: ok ' + version + ' ' + expect + ' over ' + transport + ' ' + JSON.stringify(summary));
  process.exit(0);
}

main().catch((e) => fail(String(e && e.stack || e)));
