// test_sigterm.mjs - SIGTERM while streams run: with the default grace the
// in-flight streams finish whole (finish chunk, [DONE]) and the server
// exits 0; with --shutdown-grace 0 they are cut with an error event and
// [DONE], a request after the signal is refused or never connects, and the
// exit is still 0.
import { check, equal, finish, requireServer, startServer } from "./lib.mjs";

requireServer(false);

// Starts n streams (each answered with headers: submitted), waits for the
// first bytes of the first `running` of them, then sends SIGTERM.
async function streamsThenTerm(args, maxTokens, n, running) {
  const srv = await startServer(args);
  const bodies = [];
  const firsts = [];
  for (let i = 0; i < n; i++) {
    const r = await fetch(srv.base + "/v1/completions", { method: "POST", body: JSON.stringify({
      prompt: "Once", max_tokens: maxTokens, temperature: 0, stream: true }) });
    const reader = r.body.getReader();
    firsts.push(reader.read()); // the first bytes have come: the stream runs
    bodies.push((async () => {
      const dec = new TextDecoder();
      let text = dec.decode((await firsts[i]).value);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value);
      }
      return text;
    })());
  }
  await Promise.all(firsts.slice(0, running));
  srv.proc.kill("SIGTERM");
  const texts = await Promise.all(bodies);
  const exit = await srv.exited;
  return { texts, exit };
}

const graceful = await streamsThenTerm([], 200, 3, 3);
equal(graceful.exit.code, 0, "graceful: exit 0");
graceful.texts.forEach((t, i) => {
  equal(t.split("data: [DONE]").length - 1, 1, `graceful stream ${i}: one [DONE]`);
  check(/"finish_reason":"(length|stop)"/.test(t), `graceful stream ${i}: finished`);
  check(!/"error"/.test(t), `graceful stream ${i}: no error`);
});

// one sequence: the first stream runs, five wait in the queue when the
// signal comes, and a grace of 0 cancels them
const cut = await streamsThenTerm(["--shutdown-grace", "0", "--batch", "1"], 480, 6, 1);
equal(cut.exit.code, 0, "grace 0: exit 0");
cut.texts.forEach((t, i) => {
  equal(t.split("data: [DONE]").length - 1, 1, `cut stream ${i}: one [DONE]`);
  check(/"finish_reason":"(length|stop)"/.test(t) || /"code":"cancelled"/.test(t),
    `cut stream ${i}: finished or cancelled, said so`);
});
check(cut.texts.some(t => /"code":"cancelled"/.test(t)), "grace 0: some stream is cut");
finish("test_sigterm");
