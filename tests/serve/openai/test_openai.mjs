// test_openai.mjs - the official openai client against strata serve on
// loopback: completions and chat completions, streaming and not, greedy
// text equal to strata run's (for chat, on a model with its own template:
// strata run of the rendered conversation, whose <s> run adds itself),
// usage counts, stop strings, --chat-template, /v1/models, and the Bearer
// key.
import { CHAT_MODEL, TEMPLATE, check, equal, finish, openaiModule, render,
  requireServer, runGreedy, startServer, stopServer, tokenIds } from "./lib.mjs";

requireServer();
const OpenAI = openaiModule().default ?? openaiModule().OpenAI;
const srv = await startServer(["--api-key", "sekret", "--name", "stories260K"], CHAT_MODEL);
const client = new OpenAI({ baseURL: srv.base + "/v1", apiKey: "sekret", maxRetries: 0 });

const prompt = "Once upon a time";
const want = runGreedy(["-p", prompt, "-n", "40"]);

// completions, whole
const c = await client.completions.create({ model: "stories260K", prompt,
  max_tokens: 40, temperature: 0 });
equal(c.choices[0].text, want, "completion text = strata run's");
equal(c.object, "text_completion", "completion object");
equal(c.usage.completion_tokens, 40, "completion tokens");
equal(c.usage.prompt_tokens + 40, c.usage.total_tokens, "total tokens");
equal(c.choices[0].finish_reason, "length", "finish at max_tokens");

// completions, streamed
let streamed = "", chunks = 0, finishes = [];
const cs = await client.completions.create({ model: "stories260K", prompt,
  max_tokens: 40, temperature: 0, stream: true });
for await (const ch of cs) {
  chunks++;
  streamed += ch.choices[0].text;
  if (ch.choices[0].finish_reason) finishes.push(ch.choices[0].finish_reason);
}
equal(streamed, want, "streamed completion = strata run's");
check(chunks >= 10, `streamed in chunks (${chunks})`);
equal(finishes, ["length"], "one finish chunk");

// chat, whole and streamed, against strata run of the rendered prompt
const messages = [{ role: "system", content: "You tell stories." },
  { role: "user", content: "Tell me about a cat." }];
const rendered = render(messages, CHAT_MODEL);
check(rendered.startsWith("<s>"), "the model's template writes <s>");
const wantChat = runGreedy(["-p", rendered.slice(3), "-n", "30"]);
const chat = await client.chat.completions.create({ model: "stories260K", messages,
  max_tokens: 30, temperature: 0 });
equal(chat.choices[0].message.content, wantChat, "chat text = strata run of the rendering");
equal(chat.choices[0].message.role, "assistant", "assistant role");
equal(chat.object, "chat.completion", "chat object");
let chatStreamed = "", roles = 0, usageSeen = null;
const chs = await client.chat.completions.create({ model: "stories260K", messages,
  max_tokens: 30, temperature: 0, stream: true, stream_options: { include_usage: true } });
for await (const ch of chs) {
  const d = ch.choices[0]?.delta ?? {};
  if (d.role) roles++;
  if (d.content) chatStreamed += d.content;
  if (ch.usage) usageSeen = ch.usage;
}
equal(chatStreamed, wantChat, "streamed chat = strata run of the rendering");
equal(roles, 1, "the role comes once");
equal(usageSeen && usageSeen.completion_tokens, 30, "usage in the stream");

equal(chat.usage.prompt_tokens, tokenIds(rendered).length, "chat prompt = the rendering's ids, one BOS");

// content as text parts is the conversation with the parts joined by "\n"
const joined = await client.chat.completions.create({ model: "x", max_tokens: 30, temperature: 0,
  messages: [messages[0], { role: "user", content: "Tell me\nabout a cat." }] });
const parts = await client.chat.completions.create({ model: "x", max_tokens: 30, temperature: 0,
  messages: [messages[0], { role: "user", content: [{ type: "text", text: "Tell me" },
    { type: "text", text: "about a cat." }] }] });
equal(parts.choices[0].message.content, joined.choices[0].message.content, "text parts joined");

// stop strings: cut before the first match, finish_reason stop, streamed too
const cut = want.indexOf(" girl");
check(cut > 0, "the greedy text has ' girl'");
const st = await client.completions.create({ model: "m", prompt, max_tokens: 40,
  temperature: 0, stop: [" girl", "zzz"] });
equal(st.choices[0].text, want.slice(0, cut), "text cut at the stop string");
equal(st.choices[0].finish_reason, "stop", "finish_reason stop");
// generation ended at the token completing the stop (", there was a" is
// 4 tokens, "▁little" "▁g" "ir" "l" 4 more), not at max_tokens
equal(st.usage.completion_tokens, 8, "stopped at the step the stop completed");
let stStreamed = "";
for await (const ch of await client.completions.create({ model: "m", prompt,
  max_tokens: 40, temperature: 0, stop: " girl", stream: true }))
  stStreamed += ch.choices[0].text;
equal(stStreamed, want.slice(0, cut), "streamed text cut at the stop string");

// seeded sampling repeats itself
const s1 = await client.completions.create({ model: "m", prompt, max_tokens: 20, seed: 5, temperature: 1 });
const s2 = await client.completions.create({ model: "m", prompt, max_tokens: 20, seed: 5, temperature: 1 });
equal(s1.choices[0].text, s2.choices[0].text, "same seed, same text");

// models, and the key
const models = await client.models.list();
equal(models.data.map(m => m.id), ["stories260K"], "model list");
equal(models.data.map(m => m.precision), ["fast"], "model precision (the default)");
const bad = new OpenAI({ baseURL: srv.base + "/v1", apiKey: "wrong", maxRetries: 0 });
let status = 0;
try { await bad.models.list(); } catch (e) { status = e.status; }
equal(status, 401, "a wrong key is 401");

const ex = await stopServer(srv);
equal(ex.code, 0, "SIGTERM exits 0");

// --precision is the loaded model's, shown in /v1/models
const exact = await startServer(["--precision", "exact"]);
const em = await (await fetch(exact.base + "/v1/models")).json();
equal(em.data.map(m => m.precision), ["exact"], "model precision (--precision exact)");
equal((await stopServer(exact)).code, 0, "SIGTERM exits 0 (exact)");

// --chat-template overrides: Phi-3.5's template, which writes no BOS
const phi = await startServer(["--chat-template", TEMPLATE]);
const pc = new OpenAI({ baseURL: phi.base + "/v1", apiKey: "none", maxRetries: 0 });
const pr = await pc.chat.completions.create({ model: "m", messages, max_tokens: 5, temperature: 0 });
equal(pr.usage.prompt_tokens, tokenIds(render(messages)).length, "--chat-template's rendering");
equal((await stopServer(phi)).code, 0, "SIGTERM exits 0 (phi)");
finish("test_openai");
