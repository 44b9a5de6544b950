// test_hostile.mjs - a catalogue of malformed and hostile requests against
// strata serve, each with the status and the OpenAI error it must get
// (never a crash, never a 500); raw bytes that are not HTTP; a full
// queue's 503; a client that leaves mid-stream cancelling its request; and
// the server healthy and answering afterwards.
import net from "node:net";
import { TEMPLATE, check, equal, finish, requireServer, startServer,
  stopServer } from "./lib.mjs";

requireServer(false);
const srv = await startServer(["--chat-template", TEMPLATE, "--max-body", "64KiB",
  "--api-key", "k1"]);
const auth = { Authorization: "Bearer k1", "Content-Type": "application/json" };

const C = "/v1/completions", CH = "/v1/chat/completions";
const ok = { prompt: "Hi", max_tokens: 2 };
const msg = [{ role: "user", content: "Hi" }];
const big = "a".repeat(70 * 1024);
const deep = "[".repeat(5000) + "]".repeat(5000);
// [name, method, path, body (string or object), status, param, code, headers]
const cases = [
  ["not JSON", "POST", C, "{prompt:", 400],
  ["empty body", "POST", C, "", 400],
  ["JSON array body", "POST", C, "[1,2]", 400],
  ["JSON string body", "POST", C, "\"hi\"", 400],
  ["trailing garbage", "POST", C, "{\"prompt\":\"a\"} x", 400],
  ["duplicate keys", "POST", C, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400],
  ["invalid UTF-8", "POST", C, Buffer.from([0x7b, 0x22, 0x70, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]), 400],
  ["NaN literal", "POST", C, "{\"prompt\":\"a\",\"temperature\":NaN}", 400],
  ["nested 5000 deep", "POST", C, "{\"prompt\":" + deep + "}", 400],
  ["missing prompt", "POST", C, { max_tokens: 3 }, 400, "prompt"],
  ["prompt a number", "POST", C, { prompt: 5 }, 400, "prompt"],
  ["prompt an object", "POST", C, { prompt: { a: 1 } }, 400, "prompt"],
  ["two prompts", "POST", C, { prompt: ["a", "b"] }, 400, "prompt"],
  ["token id past vocab", "POST", C, { prompt: [1, 99999], max_tokens: 2 }, 400, "prompt"],
  ["negative token id", "POST", C, { prompt: [1, -3] }, 400, "prompt"],
  ["empty token list", "POST", C, { prompt: [] }, 400, "prompt"],
  ["max_tokens a string", "POST", C, { ...ok, max_tokens: "5" }, 400, "max_tokens"],
  ["max_tokens 0", "POST", C, { ...ok, max_tokens: 0 }, 400, "max_tokens"],
  ["max_tokens negative", "POST", C, { ...ok, max_tokens: -1 }, 400, "max_tokens"],
  ["max_tokens 2.5", "POST", C, { ...ok, max_tokens: 2.5 }, 400, "max_tokens"],
  ["max_tokens past context", "POST", C, { ...ok, max_tokens: 100000 }, 400, "max_tokens"],
  ["max_tokens 1e300", "POST", C, "{\"prompt\":\"a\",\"max_tokens\":1e300}", 400, "max_tokens"],
  ["prompt past context", "POST", C, { prompt: "a b ".repeat(600), max_tokens: 1 }, 400, "prompt"],
  ["temperature -1", "POST", C, { ...ok, temperature: -1 }, 400, "temperature"],
  ["temperature 3", "POST", C, { ...ok, temperature: 3 }, 400, "temperature"],
  ["temperature a string", "POST", C, { ...ok, temperature: "hot" }, 400, "temperature"],
  ["top_p 0", "POST", C, { ...ok, top_p: 0 }, 400, "top_p"],
  ["top_p 1.5", "POST", C, { ...ok, top_p: 1.5 }, 400, "top_p"],
  ["top_k -2", "POST", C, { ...ok, top_k: -2 }, 400, "top_k"],
  ["min_p 2", "POST", C, { ...ok, min_p: 2 }, 400, "min_p"],
  ["seed a string", "POST", C, { ...ok, seed: "x" }, 400, "seed"],
  ["n = 2", "POST", C, { ...ok, n: 2 }, 400, "n"],
  ["stream a string", "POST", C, { ...ok, stream: "yes" }, 400, "stream"],
  ["stream_options a list", "POST", C, { ...ok, stream_options: [] }, 400, "stream_options"],
  ["stop a number", "POST", C, { ...ok, stop: 3 }, 400, "stop"],
  ["five stops", "POST", C, { ...ok, stop: ["a", "b", "c", "d", "e"] }, 400, "stop"],
  ["empty stop", "POST", C, { ...ok, stop: [""] }, 400, "stop"],
  ["stop with NUL (JSON refuses \\u0000)", "POST", C, { ...ok, stop: ["a\u0000b"] }, 400],
  ["model a number", "POST", C, { ...ok, model: 7 }, 400, "model"],
  ["prompt_cache_key a number", "POST", C, { ...ok, prompt_cache_key: 7 }, 400, "prompt_cache_key"],
  ["prompt_cache_key an object", "POST", C, { ...ok, prompt_cache_key: { a: 1 } }, 400, "prompt_cache_key"],
  ["messages missing", "POST", CH, { max_tokens: 2 }, 400, "messages"],
  ["messages empty", "POST", CH, { messages: [] }, 400, "messages"],
  ["messages an object", "POST", CH, { messages: { role: "user" } }, 400, "messages"],
  ["message without role", "POST", CH, { messages: [{ content: "x" }] }, 400, "messages"],
  ["unknown role", "POST", CH, { messages: [{ role: "wizard", content: "x" }] }, 400, "messages"],
  ["stop of 2000 bytes", "POST", C, { ...ok, stop: ["x".repeat(2000)] }, 400, "stop"],
  ["message a string", "POST", CH, { messages: ["hi"] }, 400, "messages"],
  ["content a number", "POST", CH, { messages: [{ role: "user", content: 4 }] }, 400, "messages"],
  ["image part", "POST", CH, { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }, 400, "messages"],
  ["body past --max-body", "POST", C, { prompt: big }, 413, null, "request_too_large"],
  ["no key", "POST", C, ok, 401, null, "invalid_api_key", { "Content-Type": "application/json" }],
  ["wrong key", "GET", "/v1/models", null, 401, null, "invalid_api_key", { Authorization: "Bearer k2" }],
  ["key as Basic", "GET", "/v1/models", null, 401, null, "invalid_api_key", { Authorization: "Basic azE=" }],
  ["unknown route", "POST", "/v1/embeddings", ok, 404, null, "not_found"],
  ["path traversal", "GET", "/../../etc/passwd", null, 404],
  ["GET completions", "GET", C, null, 405, null, "method_not_allowed"],
  ["DELETE models", "DELETE", "/v1/models", null, 405, null, "method_not_allowed"],
];

async function send([name, method, path, body, status, param, code, headers]) {
  const init = { method, headers: headers ?? auth };
  if (body !== null && body !== undefined)
    init.body = typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const r = await fetch(srv.base + path, init);
  const text = await r.text();
  equal(r.status, status, `${name}: status`);
  if (status === 404 && !code) return;
  let j = null;
  try { j = JSON.parse(text); } catch { check(false, `${name}: error body is JSON (${text.slice(0, 80)})`); return; }
  const e = j && j.error;
  check(e && typeof e.message === "string" && e.message.length > 0, `${name}: error.message`);
  check(e && typeof e.type === "string", `${name}: error.type`);
  check(e && "param" in e && "code" in e, `${name}: error.param and error.code present`);
  if (param !== undefined && param !== null) equal(e && e.param, param, `${name}: error.param`);
  if (code) equal(e && e.code, code, `${name}: error.code`);
}

check(cases.length >= 50, `catalogue of ${cases.length}`);
for (const c of cases) await send(c);

// bytes that are not HTTP: the connection gets 400 or is closed, the
// server lives on
async function raw(bytes) {
  return new Promise(res => {
    const s = net.connect(srv.port, "127.0.0.1", () => s.end(bytes));
    let got = "";
    s.on("data", d => { got += d; });
    s.on("close", () => res(got));
    s.on("error", () => res(got));
    setTimeout(() => { s.destroy(); res(got); }, 3000);
  });
}
for (const junk of ["\x00\x01\x02garbage\r\n\r\n", "GET / HTTP/9.9\r\n\r\n",
  "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
  "GET /" + "a".repeat(100000) + " HTTP/1.1\r\nHost: x\r\n\r\n",
  "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]) {
  const got = await raw(junk);
  // 505 is HTTP's own answer to a version it does not speak
  check(!/^HTTP\/1\.[01] 5(?!05)/.test(got), `junk ${JSON.stringify(junk.slice(0, 30))}: no 5xx (${got.slice(0, 40)})`);
}

// a client leaving mid-stream cancels its request
const ac = new AbortController();
const r = await fetch(srv.base + C, { method: "POST", headers: auth, signal: ac.signal,
  body: JSON.stringify({ prompt: "Once", max_tokens: 400, temperature: 0.9, stream: true }) });
const reader = r.body.getReader();
await reader.read();
ac.abort();
let cancelled = 0;
for (let i = 0; i < 50 && !cancelled; i++) {
  await new Promise(res => setTimeout(res, 100));
  const m = await (await fetch(srv.base + "/metrics", { headers: auth })).text();
  cancelled = Number((m.match(/^strata_requests_cancelled_total (\d+)/m) || [])[1] || 0);
}
equal(cancelled, 1, "the left client's request is cancelled");

// healthy after all of it
const h = await fetch(srv.base + "/health");
equal(h.status, 200, "health after the catalogue");
const after = await fetch(srv.base + C, { method: "POST", headers: auth,
  body: JSON.stringify({ prompt: "Once upon", max_tokens: 3, temperature: 0 }) });
equal(after.status, 200, "a good request after the catalogue");
const metrics = await (await fetch(srv.base + "/metrics", { headers: auth })).text();
check(/^strata_http_responses_total\{code="5xx"\} 0$/m.test(metrics), "no 5xx counted");
for (const name of ["strata_requests_total", "strata_generated_tokens_total", "strata_queue_waiting",
  "strata_time_to_first_token_seconds_count", "strata_transfer_bytes_total{direction=\"host_to_device\"}",
  "strata_stalls_total", "strata_weight_passes_total"])
  check(metrics.includes(name), `metrics has ${name}`);
equal((await stopServer(srv)).code, 0, "SIGTERM exits 0");

// a full queue answers 503: one sequence, one place in the queue
const small = await startServer(["--batch", "1", "--max-queue", "1"]);
const long = { prompt: "Once", max_tokens: 500, temperature: 0 };
const rs = await Promise.all(Array.from({ length: 16 }, () =>
  fetch(small.base + C, { method: "POST", body: JSON.stringify(long) })
    .then(async x => ({ status: x.status, body: await x.json() }))));
const n503 = rs.filter(x => x.status === 503);
check(n503.length >= 1, `some of 16 get 503 (${rs.map(x => x.status)})`);
check(rs.every(x => x.status === 200 || x.status === 503), "only 200 or 503");
check(n503.every(x => x.body.error.code === "queue_full"), "503 says queue_full");
// chat without a template is a 400 naming --chat-template
const nt = await fetch(small.base + CH, { method: "POST", body: JSON.stringify({ messages: msg }) });
const ntj = await nt.json();
equal(nt.status, 400, "chat without a template");
check(/--chat-template/.test(ntj.error.message), "names --chat-template");
equal((await stopServer(small)).code, 0, "SIGTERM exits 0 (small)");

// a template's own refusal is a 400 with its words (Gemma 2: no system role)
const gemma = await startServer(["--chat-template",
  TEMPLATE.replace(/microsoft-Phi-3.5-mini-instruct/, "google-gemma-2-2b-it")]);
const g = await fetch(gemma.base + CH, { method: "POST", body: JSON.stringify({
  messages: [{ role: "system", content: "x" }, ...msg] }) });
equal(g.status, 400, "template refusal status");
check(/System role not supported/.test((await g.json()).error.message), "template's message");
equal((await stopServer(gemma)).code, 0, "SIGTERM exits 0 (gemma)");
finish("test_hostile");
