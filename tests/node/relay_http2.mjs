// llmretry-relay (its path: the first argument) in front of an https upstream that speaks HTTP/2, whose
// certificate is signed by an authority of this script's own (made with the openssl program): with
// --upstream-ca, 300 streamed chat completions at once through a relay allowed 2 upstream connections
// (--upstream-connections 2, one event loop) all end whole over at most 2 TLS connections, many streams on
// each; without --upstream-ca the certificate is refused (502 saying so) and the relay serves on.
// Exits 1 naming what went wrong.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import os from 'node:os';
import path from 'node:path';
import { relayAddress } from './relay_address.mjs';

const relayProgram = process.argv[2];
if (!relayProgram) {
  console.error('usage: node relay_http2.mjs LLMRETRY_RELAY');
  process.exit(2);
}

const relays = [];
function fail(message) {
  console.error(`FAIL: ${message}`);
  for (const relay of relays) relay.kill('SIGKILL');
  process.exit(1);
}

// A certificate for 127.0.0.1, its own authority.
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llmretry-relay-http2-'));
process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
const key = path.join(dir, 'key.pem');
const cert = path.join(dir, 'cert.pem');
try {
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
  { stdio: ['ignore', 'ignore', 'pipe'] });
} catch (error) {
  fail(`openssl could not make a certificate: ${error.message}`);
}

// The upstream: HTTP/2 only; each stream answers a chat stream of 5 events 100 ms apart, then [DONE].
let sessions = 0;
let open = 0;
let mostOpen = 0;
const upstream = http2.createSecureServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) });
upstream.on('session', () => { sessions += 1; });
upstream.on('stream', (stream, headers) => {
  open += 1;
  mostOpen = Math.max(mostOpen, open);
  stream.on('close', () => { open -= 1; });
  stream.on('error', () => {});
  if (headers.authorization !== 'Bearer sk-upstream') {
    stream.respond({ ':status': 401, 'content-type': 'application/json' });
    stream.end('{"error":{"message":"bad key","type":"invalid_request_error"}}');
    return;
  }
  stream.resume();
  stream.on('end', () => {
    stream.respond({ ':status': 200, 'content-type': 'text/event-stream', 'x-request-id': 'req_h2' });
    let sentEvents = 0;
    const timer = setInterval(() => {
      if (stream.destroyed) return clearInterval(timer);
      if (sentEvents++ < 5) {
        stream.write(`data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'x' } }] })}\n\n`);
      } else {
        clearInterval(timer);
        stream.end('data: [DONE]\n\n');
      }
    }, 100);
  });
});
await new Promise((resolve) => upstream.listen(0, '127.0.0.1', resolve));
const upstreamURL = `https://127.0.0.1:${upstream.address().port}/v1`;

async function startRelay(extra) {
  const relay = spawn(relayProgram, ['--listen', '127.0.0.1:0', '--upstream', upstreamURL, '--threads', '1', ...extra],
    { env: { ...process.env, OPENAI_API_KEY: 'sk-upstream' }, stdio: ['ignore', 'pipe', 'inherit'] });
  relays.push(relay);
  return relayAddress(relay).catch((error) => fail(error.message));
}

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
const body = JSON.stringify({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'Say hello.' }] });
function stream(relayURL) {
  return new Promise((resolve) => {
    const request = http.request(`${relayURL}/v1/chat/completions`, {
      method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (piece) => { text += piece; });
      response.on('end', () => resolve({ status: response.statusCode, text }));
    });
    request.on('error', (error) => resolve({ status: 0, text: error.message }));
    request.end(body);
  });
}

// Trusted: 300 streams at once over at most 2 connections.
const trusted = await startRelay(['--upstream-ca', cert, '--upstream-connections', '2']);
const answers = await Promise.all(Array.from({ length: 300 }, () => stream(trusted)));
const whole = answers.filter((a) => a.status === 200 && a.text.trimEnd().endsWith('data: [DONE]')).length;
if (whole !== 300) {
  const other = answers.find((a) => !(a.status === 200 && a.text.trimEnd().endsWith('data: [DONE]')));
  fail(`${whole} of 300 streams ended whole; one other: ${other.status} ${other.text.slice(0, 300)}`);
}
if (sessions < 1 || sessions > 2) fail(`the relay opened ${sessions} connections upstream, expected 1 or 2`);
if (mostOpen < 101) fail(`at most ${mostOpen} streams were open upstream at once: they were not multiplexed`);
console.log(`trusted: 300 of 300 streams whole over ${sessions} HTTP/2 connections, ${mostOpen} open at once`);

// Not trusted: the certificate is refused, the relay answers 502 and serves on.
const untrusted = await startRelay([]);
const refused = await stream(untrusted);
if (refused.status !== 502) fail(`without --upstream-ca: status ${refused.status}, expected 502: ${refused.text}`);
if (!/certificate/i.test(refused.text)) fail(`without --upstream-ca: the answer does not say why: ${refused.text}`);
const health = await fetch(`${untrusted}/healthz`);
if (health.status !== 200) fail(`without --upstream-ca: /healthz answered ${health.status}`);
console.log(`untrusted: 502 ${refused.text.slice(0, 120).trim()}`);

for (const relay of relays) relay.kill('SIGTERM');
agent.destroy();
upstream.close();
console.log('relay over HTTP/2: ok');
process.exit(0);
