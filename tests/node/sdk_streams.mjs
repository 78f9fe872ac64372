// The official OpenAI and Anthropic Node SDKs stream from an OpenAI-compatible base URL given as the
// first argument (such as llmretry-loopback's): each must receive content chunks, in order, and the end
// of the stream. Exits 1 naming what was missing.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const baseURL = process.argv[2];
if (!baseURL) {
  console.error('usage: node sdk_streams.mjs BASE_URL (ending in /v1)');
  process.exit(2);
}

function fail(message) {
  console.error(`FAIL: ${message}`);
  process.exit(1);
}

const openai = new OpenAI({ baseURL, apiKey: 'loopback', maxRetries: 0 });
const chunks = [];
const stream = await openai.chat.completions.create({
  model: 'loopback',
  messages: [{ role: 'user', content: 'Say something.' }],
  max_tokens: 8,
  stream: true,
});
for await (const chunk of stream) chunks.push(chunk);
const text = chunks.map((chunk) => chunk.choices?.[0]?.delta?.content ?? '').join('');
if (chunks.length < 2) fail(`OpenAI SDK: ${chunks.length} chunks`);
if (text.length === 0) fail('OpenAI SDK: no content in the chunks');
if (!chunks.some((chunk) => chunk.choices?.[0]?.finish_reason)) fail('OpenAI SDK: no finish_reason');
console.log(`openai: ${chunks.length} chunks, ${text.length} characters`);

// Anthropic's base URL has no /v1: the SDK adds /v1/messages.
const anthropic = new Anthropic({ baseURL: baseURL.replace(/\/v1$/, ''), apiKey: 'loopback', maxRetries: 0 });
const events = [];
const messages = await anthropic.messages.create({
  model: 'loopback',
  max_tokens: 8,
  messages: [{ role: 'user', content: 'Say something.' }],
  stream: true,
});
for await (const event of messages) events.push(event);
const deltas = events.filter((event) => event.type === 'content_block_delta');
if (deltas.length === 0) fail(`Anthropic SDK: no content_block_delta among ${events.length} events`);
if (events[0]?.type !== 'message_start') fail(`Anthropic SDK: first event ${events[0]?.type}`);
if (events.at(-1)?.type !== 'message_stop') fail(`Anthropic SDK: last event ${events.at(-1)?.type}`);
console.log(`anthropic: ${events.length} events, ${deltas.length} deltas`);
