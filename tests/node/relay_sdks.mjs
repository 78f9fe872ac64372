// The official OpenAI and Anthropic Node SDKs as clients of llmretry-relay (its path: the first argument),
// in front of an upstream this script serves itself: a call, a stream, a 429 and an error, on
// /v1/chat/completions and /v1/messages. The relay retries upstream; the SDKs (maxRetries 2) must not retry
// on top of it: each SDK call reaches the relay once. Exits 1 naming what went wrong.
import { spawn } from 'node:child_process';
import http from 'node:http';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { relayAddress } from './relay_address.mjs';

const relayProgram = process.argv[2];
if (!relayProgram) {
  console.error('usage: node relay_sdks.mjs LLMRETRY_RELAY');
  process.exit(2);
}

let relay;
function fail(message) {
  console.error(`FAIL: ${message}`);
  relay?.kill('SIGKILL');
  process.exit(1);
}

// The upstream: what it answers depends on the model asked for; it counts the requests per model.
const received = {};
const upstream = http.createServer((request, response) => {
  let text = '';
  request.on('data', (piece) => { text += piece; });
  request.on('end', () => {
    const body = JSON.parse(text);
    received[body.model] = (received[body.model] ?? 0) + 1;
    const anthropic = request.url.endsWith('/messages');
    const json = (status, value, headers = {}) => {
      response.writeHead(status, { 'content-type': 'application/json', ...headers });
      response.end(JSON.stringify(value));
    };
    const error = anthropic
      ? (type, message) => ({ type: 'error', error: { type, message } })
      : (type, message) => ({ error: { type, message, code: type } });
    if (body.model.endsWith('limited'))
      return json(429, error('rate_limit_error', 'slow down'), { 'retry-after': '120' });
    if (body.model.endsWith('broken')) return json(anthropic ? 529 : 500, error('api_error', 'it broke'));
    if (body.model.endsWith('bad')) return json(400, error('invalid_request_error', 'bad request'));
    const headers = { 'x-request-id': 'req_upstream', 'request-id': 'req_upstream' };
    if (!body.stream) {
      if (anthropic)
        return json(200, {
          id: 'msg_1', type: 'message', role: 'assistant', model: body.model, stop_reason: 'end_turn',
          content: [{ type: 'text', text: 'Hello' }], usage: { input_tokens: 3, output_tokens: 1 },
        }, headers);
      return json(200, {
        id: 'chatcmpl-1', object: 'chat.completion', created: 0, model: body.model,
        choices: [{ index: 0, message: { role: 'assistant', content: 'Hello' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
      }, headers);
    }
    response.writeHead(200, { 'content-type': 'text/event-stream', ...headers });
    const events = anthropic
      ? [
          ['message_start', { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: body.model, content: [], usage: { input_tokens: 3, output_tokens: 0 } } }],
          ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
          ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } }],
          ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'lo' } }],
          ['content_block_stop', { type: 'content_block_stop', index: 0 }],
          ['message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 2 } }],
          ['message_stop', { type: 'message_stop' }],
        ].map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)
      : [
          { role: 'assistant', content: 'Hel' }, { content: 'lo' }, {},
        ].map((delta, i) => `data: ${JSON.stringify({
          id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 0, model: body.model,
          choices: [{ index: 0, delta, finish_reason: i === 2 ? 'stop' : null }],
        })}\n\n`).concat(['data: [DONE]\n\n']);
    for (const event of events) response.write(event);
    response.end();
  });
});
await new Promise((resolve) => upstream.listen(0, '127.0.0.1', resolve));
const upstreamPort = upstream.address().port;

relay = spawn(relayProgram, [
  '--listen', '127.0.0.1:0', '--upstream', `http://127.0.0.1:${upstreamPort}/v1`,
  '--anthropic-upstream', `http://127.0.0.1:${upstreamPort}`,
], { env: { ...process.env, OPENAI_API_KEY: 'sk-upstream', ANTHROPIC_API_KEY: 'sk-ant-upstream' }, stdio: ['ignore', 'pipe', 'inherit'] });
const relayURL = await relayAddress(relay).catch((error) => fail(error.message));

// Each SDK's requests to the relay, counted.
let sent = 0;
const counting = (url, init) => { sent += 1; return fetch(url, init); };
const openai = new OpenAI({ baseURL: `${relayURL}/v1`, apiKey: 'client', maxRetries: 2, fetch: counting });
const anthropic = new Anthropic({ baseURL: relayURL, apiKey: 'client', maxRetries: 2, fetch: counting });

async function expectOnce(name, call, status) {
  sent = 0;
  try {
    await call();
  } catch (error) {
    if (error.status !== status) fail(`${name}: status ${error.status}, expected ${status}: ${error.message}`);
    if (sent !== 1) fail(`${name}: the SDK sent ${sent} requests: it retried on top of the relay`);
    return;
  }
  fail(`${name}: no error`);
}

const chat = (model, stream = false) => ({
  model, stream, max_tokens: 8, messages: [{ role: 'user', content: 'Say hello.' }],
});

// OpenAI: a call, a stream, a 429, an error.
const { data: completion, response } = await openai.chat.completions.create(chat('gpt-ok')).withResponse();
if (completion.choices[0].message.content !== 'Hello') fail(`OpenAI call: ${JSON.stringify(completion)}`);
if (response.headers.get('x-request-id') !== 'req_upstream') fail('OpenAI call: no x-request-id');
let text = '';
for await (const chunk of await openai.chat.completions.create(chat('gpt-ok', true)))
  text += chunk.choices[0]?.delta?.content ?? '';
if (text !== 'Hello') fail(`OpenAI stream: "${text}"`);
await expectOnce('OpenAI 5xx', () => openai.chat.completions.create(chat('gpt-broken')), 502);
await expectOnce('OpenAI 400', () => openai.chat.completions.create(chat('gpt-bad')), 400);
// Last on its upstream: its Retry-After of 120 s pauses the upstream for the relay.
await expectOnce('OpenAI 429', () => openai.chat.completions.create(chat('gpt-limited')), 429);
if (received['gpt-limited'] !== 1) fail(`OpenAI 429: the relay sent ${received['gpt-limited']} upstream`);
console.log(`openai: call, stream, 5xx (${received['gpt-broken']} upstream requests), 400, 429`);

// Anthropic: a call, a stream, a 429, an error.
const message = await anthropic.messages.create(chat('claude-ok'));
if (message.content[0].text !== 'Hello') fail(`Anthropic call: ${JSON.stringify(message)}`);
const events = [];
for await (const event of await anthropic.messages.create(chat('claude-ok', true))) events.push(event);
if (events.at(-1)?.type !== 'message_stop') fail(`Anthropic stream: last event ${events.at(-1)?.type}`);
await expectOnce('Anthropic 529', () => anthropic.messages.create(chat('claude-broken')), 502);
await expectOnce('Anthropic 400', () => anthropic.messages.create(chat('claude-bad')), 400);
await expectOnce('Anthropic 429', () => anthropic.messages.create(chat('claude-limited')), 429);
if (received['claude-limited'] !== 1) fail(`Anthropic 429: the relay sent ${received['claude-limited']} upstream`);
console.log(`anthropic: call, stream (${events.length} events), 529 (${received['claude-broken']} upstream requests), 400, 429`);

relay.kill('SIGTERM');
upstream.closeAllConnections();
upstream.close();
