// test_mixed.mjs - the server's continuous scheduler over HTTP (issue 19):
// 48 greedy requests of prompts from 2 to ~76 tokens and 40 new tokens
// each, sent at once to a server of 8 sequences and 32-token prefill chunks,
// each answer (whole or streamed) equal to the same request's answer
// alone; every prompt position and decode token computed once (the step
// rows of /metrics), and the weight passes within 1.3x the ideal, where
// prompt chunks ride in the passes beside the others' decode tokens:
//   ideal = max(ceil(sum s_i / B), max_i (ceil(p_i / C) + s_i - 1),
//               ceil(sum (p_i + s_i - 1) / R))
// (s_i the request's samples, EOS included; p_i its prompt tokens; B the
// sequences, C the chunk, R = max(B, C) the rows a pass takes). The server
// is stopped (SIGSTOP) while the requests connect, so all of them are
// there when it goes on, as a burst of clients finds it.
import { check, equal, finish, requireServer, startServer,
  stopServer } from "./lib.mjs";

requireServer(false);
const B = 8, C = 32, R = Math.max(B, C), N = 48;
const srv = await startServer(["--batch", String(B), "--prefill-chunk", String(C),
  "--prefix-cache", "0", "--max-queue", "64"]);

const words = ("Once upon a time there was a little girl named Lily who loved " +
  "to play in the park with her big red ball and her friend Tom the dog ").split(" ");
// request i: a prompt of 1 + 10 * (i % 6) + i % 4 words, 40 new tokens
function request(i) {
  const n = 1 + 10 * (i % 6) + (i % 4);
  const prompt = Array.from({ length: n }, (_, k) => words[(k + i) % words.length]).join(" ");
  return { prompt, max_tokens: 40, temperature: 0 };
}

async function whole(i) {
  const r = await fetch(srv.base + "/v1/completions", { method: "POST",
    body: JSON.stringify(request(i)) });
  const o = await r.json();
  return { status: r.status, text: o.choices[0].text, finish: o.choices[0].finish_reason,
    prompt: o.usage.prompt_tokens, completion: o.usage.completion_tokens };
}

async function streamed(i) {
  const r = await fetch(srv.base + "/v1/completions", { method: "POST",
    body: JSON.stringify({ ...request(i), stream: true }) });
  const events = (await r.text()).split("\n\n").filter(e => e.startsWith("data: "))
    .map(e => e.slice(6));
  const json = events.filter(e => e !== "[DONE]").map(e => JSON.parse(e));
  const fin = json.filter(j => j.choices && j.choices[0].finish_reason);
  return { status: r.status, text: json.map(j => j.choices ? j.choices[0].text : "").join(""),
    finish: fin.length === 1 ? fin[0].choices[0].finish_reason : null,
    done: events.filter(e => e === "[DONE]").length };
}

async function metric(name) {
  const m = await (await fetch(srv.base + "/metrics")).text();
  return Number(m.match(new RegExp(`^${name} (\\d+)`, "m"))[1]);
}

// each request alone: its answer, prompt tokens and samples
const alone = [];
const passes0 = await metric("strata_weight_passes_total");
for (let i = 0; i < N; i++) alone.push(await whole(i));
const passes1 = await metric("strata_weight_passes_total");
const rows1 = await metric("strata_step_rows_total");
const samples = alone.map(a => a.completion + (a.finish === "stop" ? 1 : 0));
const prompts = alone.map(a => a.prompt);
// alone, a request takes its prompt's chunks and one pass per further sample
let soloPasses = 0;
for (let i = 0; i < N; i++) soloPasses += Math.ceil(prompts[i] / C) + samples[i] - 1;
equal(passes1 - passes0, soloPasses, "one at a time: chunks + samples - 1 passes each");
check(Math.max(...prompts) > 2 * C && Math.min(...prompts) < C,
  `prompts from under one chunk to several (${Math.min(...prompts)}..${Math.max(...prompts)})`);

// all at once, half of them streamed, while the server is stopped
srv.proc.kill("SIGSTOP");
const t0 = Date.now();
const pending = Array.from({ length: N }, (_, i) => i % 2 ? streamed(i) : whole(i));
await new Promise(res => setTimeout(res, 1500));
srv.proc.kill("SIGCONT");
const together = await Promise.all(pending);
const ms = Date.now() - t0 - 1500;
together.forEach((r, i) => {
  equal(r.status, 200, `request ${i}: status`);
  equal(r.text, alone[i].text, `request ${i}: the text it has alone`);
  equal(r.finish, alone[i].finish, `request ${i}: the finish it has alone`);
  if (i % 2) equal(r.done, 1, `request ${i}: one [DONE]`);
});
const passes = await metric("strata_weight_passes_total") - passes1;
const rows = await metric("strata_step_rows_total") - rows1;
let sumS = 0, sumRows = 0, longest = 0;
for (let i = 0; i < N; i++) {
  sumS += samples[i];
  sumRows += prompts[i] + samples[i] - 1;
  longest = Math.max(longest, Math.ceil(prompts[i] / C) + samples[i] - 1);
}
const ideal = Math.max(Math.ceil(sumS / B), longest, Math.ceil(sumRows / R));
console.log(`${N} requests at once (prompts ${Math.min(...prompts)}..${Math.max(...prompts)} ` +
  `tokens, ${sumS} samples) in ${ms} ms: ${passes} weight passes, ideal ${ideal} ` +
  `(${(passes / ideal).toFixed(3)}x), one at a time ${soloPasses}; ${rows} step rows`);
equal(rows, sumRows, "every prompt position and decode token computed once");
check(passes <= 1.3 * ideal, `passes ${passes} within 1.3x the ideal ${ideal}`);
equal(await metric("strata_queue_running"), 0, "nothing left running");
equal((await stopServer(srv)).code, 0, "SIGTERM exits 0");
finish("test_mixed");
