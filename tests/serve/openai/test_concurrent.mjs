// test_concurrent.mjs - 64 streaming clients at once (the openai client)
// against strata serve with 16 sequences: every stream answered exactly
// once (one finish, one [DONE], no error), each greedy answer equal to the
// same prompt's single-client answer, the steps shared between sequences
// (weight passes well under the tokens generated), and the server's peak
// RSS reported and bounded.
import { check, equal, finish, openaiModule, peakRssKiB, requireServer,
  startServer, stopServer } from "./lib.mjs";

requireServer();
const OpenAI = openaiModule().default ?? openaiModule().OpenAI;
const srv = await startServer(["--batch", "16", "--max-queue", "64"]);
const client = new OpenAI({ baseURL: srv.base + "/v1", apiKey: "none", maxRetries: 0 });
const prompts = ["Once upon a time", "The cat", "Lily and Ben", "One day, a little",
  "The sun was", "Tom had a big", "In the park", "She was happy"];

async function ask(prompt, stream) {
  const r = await client.completions.create({ model: "m", prompt, max_tokens: 48,
    temperature: 0, stream });
  if (!stream) return { text: r.choices[0].text, finishes: 1 };
  let text = "", finishes = 0;
  for await (const ch of r) {
    text += ch.choices[0].text;
    if (ch.choices[0].finish_reason) finishes++;
  }
  return { text, finishes };
}

// single-client answers, one at a time
const single = [];
for (const p of prompts) single.push((await ask(p, false)).text);
const m0 = await (await fetch(srv.base + "/metrics")).text();
const passes0 = Number(m0.match(/^strata_weight_passes_total (\d+)/m)[1]);

// 64 at once over raw SSE as well as the client: count [DONE] per stream
const t0 = Date.now();
const results = await Promise.all(Array.from({ length: 64 }, (_, i) =>
  i % 2 ? ask(prompts[i % 8], true)
        : fetch(srv.base + "/v1/completions", { method: "POST",
            body: JSON.stringify({ prompt: prompts[i % 8], max_tokens: 48, temperature: 0, stream: true }) })
          .then(r => r.text()).then(body => {
            const events = body.split("\n\n").filter(e => e.startsWith("data: ")).map(e => e.slice(6));
            const done = events.filter(e => e === "[DONE]").length;
            const json = events.filter(e => e !== "[DONE]").map(e => JSON.parse(e));
            return { text: json.map(j => j.choices ? j.choices[0].text : "").join(""),
              finishes: json.filter(j => j.choices && j.choices[0].finish_reason).length,
              done, errors: json.filter(j => j.error).length };
          })));
const ms = Date.now() - t0;
results.forEach((r, i) => {
  equal(r.text, single[i % 8], `client ${i}: text = the single-client answer`);
  equal(r.finishes, 1, `client ${i}: one finish`);
  if (i % 2 === 0) {
    equal(r.done, 1, `client ${i}: one [DONE]`);
    equal(r.errors, 0, `client ${i}: no error event`);
  }
});
const m1 = await (await fetch(srv.base + "/metrics")).text();
const passes = Number(m1.match(/^strata_weight_passes_total (\d+)/m)[1]) - passes0;
const rows = Number(m1.match(/^strata_step_rows_total (\d+)/m)[1]);
const tokens = Number(m1.match(/^strata_generated_tokens_total (\d+)/m)[1]);
const rss = peakRssKiB(srv.proc.pid);
console.log(`64 streams in ${ms} ms; ${passes} weight passes for them; ` +
  `${tokens} tokens generated in all, ${rows} step rows; peak RSS ${(rss / 1024).toFixed(1)} MiB`);
check(passes < 64 * 48 / 4, `steps shared (${passes} passes)`);
check(rss > 0 && rss < 512 * 1024, `peak RSS bounded (${rss} KiB)`);
equal(Number(m1.match(/^strata_queue_running (\d+)/m)[1]), 0, "nothing left running");
equal((await stopServer(srv)).code, 0, "SIGTERM exits 0");
finish("test_concurrent");
