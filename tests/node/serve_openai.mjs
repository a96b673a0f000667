// serve_openai.mjs BASE_URL API_KEY MODEL - the real `openai` client (npm,
// tests/node/package.json) against `lynn serve` (tests/check_serve.c runs
// it): models, chat completions streamed and not (also n = 3 choices),
// the usage chunk, text completions (also with penalties and a logit bias,
// as the client sends them), and the client's error classes for 400, 401
// and 404.
// Prints one JSON object of what it saw; exits 1 on the first failed check.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const seen = {};
const messages = [{ role: 'user', content: 'Name three colours.' }];

// models
const list = await client.models.list();
assert.deepEqual(list.data.map((m) => m.id), [model]);

// not streamed, greedy
const full = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
assert.match(full.id, /^chatcmpl-/);
assert.equal(full.object, 'chat.completion');
assert.equal(full.choices.length, 1);
assert.equal(full.choices[0].message.role, 'assistant');
assert.ok(['stop', 'length'].includes(full.choices[0].finish_reason));
assert.equal(full.usage.total_tokens, full.usage.prompt_tokens + full.usage.completion_tokens);
seen.content = full.choices[0].message.content;
seen.reasoning = full.choices[0].message.reasoning_content ?? '';
seen.finish = full.choices[0].finish_reason;
seen.usage = full.usage;

// streamed, same request: same text, one id, role first, one finish_reason, usage last
const stream = await client.chat.completions.create({
	model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let content = '', reasoning = '', finishes = 0, usage = null, first = true;
const ids = new Set();
for await (const chunk of stream) {
	ids.add(chunk.id);
	assert.equal(chunk.object, 'chat.completion.chunk');
	if (chunk.usage) {
		assert.equal(chunk.choices.length, 0);
		usage = chunk.usage;
		continue;
	}
	assert.equal(usage, null, 'the usage chunk comes last');
	const c = chunk.choices[0];
	if (first) {
		assert.equal(c.delta.role, 'assistant');
		first = false;
	} else {
		assert.equal(c.delta.role, undefined);
	}
	content += c.delta.content ?? '';
	reasoning += c.delta.reasoning_content ?? '';
	if (c.finish_reason) finishes++;
}
assert.equal(ids.size, 1);
assert.equal(finishes, 1);
assert.deepEqual(usage, full.usage);
assert.equal(content, seen.content);
assert.equal(reasoning, seen.reasoning);

// n = 3 sampled choices, streamed and not: each index's deltas join to
// that choice's message, each finishes once, one usage chunk over all three
const sampled = { model, messages, max_tokens: 10, temperature: 1, seed: 7, n: 3 };
const three = await client.chat.completions.create(sampled);
assert.equal(three.choices.length, 3);
const parts = ['', '', ''], ends = [0, 0, 0], roles = [0, 0, 0];
let usage3 = null;
for await (const chunk of await client.chat.completions.create({
	...sampled, stream: true, stream_options: { include_usage: true },
})) {
	if (chunk.usage) {
		usage3 = chunk.usage;
		continue;
	}
	const c = chunk.choices[0];
	assert.equal(ends[c.index], 0, 'nothing after a choice\'s finish_reason');
	if (c.delta.role) roles[c.index]++;
	parts[c.index] += c.delta.content ?? '';
	if (c.finish_reason) ends[c.index]++;
}
assert.deepEqual(ends, [1, 1, 1]);
assert.deepEqual(roles, [1, 1, 1]);
assert.deepEqual(parts, three.choices.map((c) => c.message.content ?? ''));
assert.deepEqual(usage3, three.usage);
seen.choices = parts;

// text completions, streamed and not
const tc = await client.completions.create({ model, prompt: 'The sky is', max_tokens: 6, temperature: 0 });
assert.equal(tc.object, 'text_completion');
let text = '';
for await (const chunk of await client.completions.create({
	model, prompt: 'The sky is', max_tokens: 6, temperature: 0, stream: true,
})) text += chunk.choices[0]?.text ?? '';
assert.equal(text, tc.choices[0].text);
seen.completion = tc.choices[0].text;
const pen = await client.completions.create({
	model, prompt: 'The sky is', max_tokens: 6, temperature: 0, presence_penalty: 1, logit_bias: { 300: 8.5 },
});
seen.penalized = pen.choices[0].text;

// errors arrive as the client's classes, with OpenAI's error object
await assert.rejects(
	client.chat.completions.create({ model, messages, temperature: 5 }),
	(e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature',
);
await assert.rejects(
	client.chat.completions.create({ model, messages, frequency_penalty: 3 }),
	(e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'frequency_penalty',
);
await assert.rejects(
	client.chat.completions.create({ model: 'no-such-model', messages }),
	(e) => e instanceof OpenAI.NotFoundError && e.status === 404,
);
const wrong = new OpenAI({ baseURL, apiKey: 'not-the-key', maxRetries: 0 });
await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);

console.log(JSON.stringify(seen));
