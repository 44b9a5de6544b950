// test_replicas.mjs - strata serve --gpus on CPU replicas (--device cpu
// --gpus N, as batch's multi-replica runs are tested where no GPU is):
// requests spread over two replicas, every one answered exactly once, each
// greedy answer equal to the one-replica server's; a key's requests stay on
// one replica and its prefix cache there reuses what they share (the new
// positions alone computed, counted in /metrics, the text a cold run's);
// round-robin alternates; the router's decisions and each replica's
// counters are in /metrics; SIGTERM drains every replica (each stream
// finished, exit 0).
import { check, equal, finish, requireServer, startServer, stopServer }
  from "./lib.mjs";

requireServer(false); // plain fetch: runs where the npm client is absent
// STRATA_SERVE_DEVICE=cuda (the GPU machine): two replicas on cuda:0, the
// one-replica answers from cuda:0 too
const CUDA = process.env.STRATA_SERVE_DEVICE === "cuda";
const ONE = CUDA ? ["--device", "cuda"] : [];
const TWO = CUDA ? ["--device", "cuda", "--gpus", "0", "--replicas-per-device", "2"]
                 : ["--gpus", "2"];
const prompts = ["Once upon a time", "The cat", "Lily and Ben", "One day, a little",
  "The sun was", "Tom had a big", "In the park", "She was happy", "A dog",
  "The little bird", "Mom said", "It was a sunny"];

// A greedy completion, whole or streamed (then the SSE chunks joined).
async function ask(srv, prompt, stream, extra = {}) {
  const r = await fetch(srv.base + "/v1/completions", { method: "POST",
    body: JSON.stringify({ prompt, max_tokens: 32, temperature: 0, stream, ...extra }) });
  if (!stream) {
    const j = await r.json();
    return { text: j.choices[0].text, finishes: 1, usage: j.usage };
  }
  const events = (await r.text()).split("\n\n").filter(e => e.startsWith("data: "))
    .map(e => e.slice(6));
  const json = events.filter(e => e !== "[DONE]").map(e => JSON.parse(e));
  return { text: json.map(j => j.choices[0].text).join(""),
    finishes: json.filter(j => j.choices[0].finish_reason).length,
    done: events.filter(e => e === "[DONE]").length };
}

async function metrics(srv) {
  return (await fetch(srv.base + "/metrics")).text();
}
function value(m, re) {
  const x = m.match(re);
  return x ? Number(x[1]) : NaN;
}
function perReplica(m, name) {
  const out = [];
  for (const x of m.matchAll(new RegExp(`^strata_replica_${name}\\{replica="(\\d+)",device="([^"]+)"\\} (\\d+)$`, "gm")))
    out[Number(x[1])] = Number(x[3]);
  return out;
}

// the one-replica answers, and the cold run of an id prompt (no cache)
const one = await startServer([...ONE, "--prefix-cache", "0"]);
const single = [];
for (const p of prompts) single.push((await ask(one, p, false)).text);
const idsA = [1, ...Array.from({ length: 39 }, (_, t) => 1 + (13 * t + 5) % 500)];
const idsB = [...idsA, 77, 91, 103, 250, 311];
const coldB = (await ask(one, idsB, false)).text;
await stopServer(one);

// two replicas: 12 at once, half streamed; then the metrics
const two = await startServer([...TWO, "--batch", "4"]);
const results = await Promise.all(prompts.map((p, i) => ask(two, p, i % 2 === 1)));
results.forEach((r, i) => {
  equal(r.text, single[i], `prompt ${i} on 2 replicas = 1 replica's answer`);
  equal(r.finishes, 1, `prompt ${i}: one finish`);
  if (i % 2 === 1) equal(r.done, 1, `prompt ${i}: one [DONE]`);
});
let m = await metrics(two);
const requests = perReplica(m, "requests_total");
const finished = perReplica(m, "requests_finished_total");
console.log(`2 replicas: requests ${JSON.stringify(requests)}, ` +
  `router home ${value(m, /^strata_router_decisions_total\{decision="home"\} (\d+)/m)}, ` +
  `spilled ${value(m, /^strata_router_decisions_total\{decision="spilled"\} (\d+)/m)}`);
equal(requests.length, 2, "two replicas in /metrics");
check(requests[0] > 0 && requests[1] > 0, `requests spread (${requests})`);
equal(requests[0] + requests[1], 12, "every request placed once");
equal(finished[0] + finished[1], 12, "every request finished once");
equal(value(m, /^strata_requests_finished_total (\d+)/m), 12, "the sum is the replicas'");
equal(value(m, /^strata_router_decisions_total\{decision="home"\} (\d+)/m) +
  value(m, /^strata_router_decisions_total\{decision="spilled"\} (\d+)/m), 12,
  "one routing decision per request");
equal(value(m, /^strata_replicas (\d+)/m), 2, "strata_replicas 2");
const loads = perReplica(m, "load");
equal(loads, [0, 0], "every load released");

// one key: A then B (A and 5 more ids) land where A did; B computes only
// its 5 new positions and answers as the cold run
const routed0 = perReplica(m, "routed_total");
await ask(two, idsA, false);
const m1 = await metrics(two);
const computed1 = value(m1, /^strata_prompt_tokens_computed_total (\d+)/m);
const reused1 = value(m1, /^strata_prefix_cache_reused_tokens_total (\d+)/m);
const gotB = await ask(two, idsB, false);
const m2 = await metrics(two);
const routed2 = perReplica(m2, "routed_total");
const moved = routed2.map((v, i) => v - routed0[i]);
check(moved.includes(2) && moved.includes(0), `A and B on one replica (${moved})`);
equal(gotB.text, coldB, "B with A's cached prefix = the cold run's text");
equal(gotB.usage.prompt_tokens, idsB.length, "B's usage counts its whole prompt");
equal(value(m2, /^strata_prompt_tokens_computed_total (\d+)/m) - computed1, 5,
  "B computed its 5 new positions only");
equal(value(m2, /^strata_prefix_cache_reused_tokens_total (\d+)/m) - reused1,
  idsA.length, "B reused A's 40 positions");
// prompt_cache_key routes by the key, whatever the prompt
const keyed0 = perReplica(m2, "routed_total");
for (const p of prompts.slice(0, 4)) await ask(two, p, false, { prompt_cache_key: "user-42" });
const keyed = perReplica(await metrics(two), "routed_total").map((v, i) => v - keyed0[i]);
check(keyed.includes(4), `one prompt_cache_key, one replica (${keyed})`);
equal((await stopServer(two)).code, 0, "SIGTERM exits 0");

// round-robin: 12 requests, 6 each
const rr = await startServer([...TWO, "--route", "round-robin"]);
for (const p of prompts) await ask(rr, p, false);
equal(perReplica(await metrics(rr), "requests_total"), [6, 6], "round-robin alternates");
equal(value(await metrics(rr), /^strata_router_info\{route="round-robin"\} (\d+)/m), 1,
  "the route in /metrics");

// SIGTERM with streams on both replicas: every one finishes whole. The
// signal waits until the server has placed all four requests (a stream
// still connecting when it stops listening gets no answer at all, which
// is not what this checks) and both replicas run one.
const sum = a => a.reduce((x, y) => x + y, 0);
const placed0 = sum(perReplica(await metrics(rr), "requests_total"));
const streams = prompts.slice(0, 4).map(p => fetch(rr.base + "/v1/completions", {
  method: "POST", body: JSON.stringify({ prompt: p, max_tokens: 200, temperature: 0,
    stream: true }) }).then(r => r.text()));
for (let t = 0; t < 500; t++) {
  const m = await metrics(rr);
  const running = perReplica(m, "queue_running");
  if (sum(perReplica(m, "requests_total")) - placed0 >= 4 && running[0] > 0 &&
      running[1] > 0)
    break;
  await new Promise(res => setTimeout(res, 10));
}
const exit = stopServer(rr);
const bodies = await Promise.all(streams);
equal((await exit).code, 0, "SIGTERM with streams on two replicas: exit 0");
bodies.forEach((b, i) => {
  equal(b.split("data: [DONE]").length - 1, 1, `drained stream ${i}: one [DONE]`);
  check(/"finish_reason":"(length|stop)"/.test(b), `drained stream ${i}: finished`);
});
finish("test_replicas");
