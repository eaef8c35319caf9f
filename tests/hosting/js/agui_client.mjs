// The official AG-UI JS client against our AG-UI endpoint (run by tests/hosting/test_agui.py).
// Usage: node agui_client.mjs <endpoint url> <user text> <expected final text> [<answer JSON>]
// HttpAgent sends the transcript it keeps; @ag-ui/client verifies the event order of every run (verifyEvents)
// and throws on a breach. Each pause (RUN_FINISHED outcome=interrupt) is answered with
// buildResumeArray(pendingInterrupts, {id: {status: "resolved", payload}}) until the run finishes, where payload
// is {approved: true}, plus answer: <answer JSON> when given (a typed answer: text, a draft to publish, ...).
// A 409 (a run of this thread is still finishing) is retried, as README "Host it" shows; @ag-ui/client does not.
// Exit 0 when the last assistant message is <expected final text>.
import { HttpAgent, buildResumeArray } from "@ag-ui/client";

const [url, text, expected, answerJson] = process.argv.slice(2);
if (!url || !text || !expected) {
  console.error("usage: node agui_client.mjs <endpoint url> <user text> <expected final text> [<answer JSON>]");
  process.exit(2);
}
const agent = new HttpAgent({ url, threadId: `js-${Date.now()}-${Math.random().toString(16).slice(2)}` });
const seen = [];
let runError = null;
const subscriber = {
  onEvent({ event }) {
    seen.push(event.type + (event.toolCallId ? `(${event.toolCallId})` : ""));
  },
  onRunErrorEvent({ event }) {
    runError = event;
    console.log("  RUN_ERROR:", JSON.stringify(event));
  },
};

// README "Host it": retry a run that AG-UI refused with 409 (the thread's previous run is still finishing).
async function runWithRetry(params, tries = 20) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await agent.runAgent(params, subscriber);
    } catch (err) {
      if (err?.status !== 409 || attempt >= tries) throw err;
      await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
    }
  }
}

async function run(label, params) {
  seen.length = 0;
  try {
    await runWithRetry(params);
  } catch (err) {
    console.log(`${label}: REJECTED after [${seen.join(" ")}]: ${err?.constructor?.name}: ${err?.message}`);
    process.exit(1);
  }
  console.log(`${label}: accepted [${seen.join(" ")}]`);
  if (runError) {
    console.log(`${label}: the run ended in RUN_ERROR ${runError.code}`);
    process.exit(1);
  }
}

agent.addMessage({ id: `m-${Date.now()}`, role: "user", content: text });
await run("turn 1", {});
let rounds = 0;
while (agent.pendingInterrupts.length > 0) {
  if (++rounds > 5) {
    console.log("too many interrupts");
    process.exit(1);
  }
  const ids = agent.pendingInterrupts.map((i) => i.id);
  console.log(`  interrupts: ${JSON.stringify(ids)}`);
  const payload = answerJson ? { approved: true, answer: JSON.parse(answerJson) } : { approved: true };
  const answers = Object.fromEntries(ids.map((id) => [id, { status: "resolved", payload }]));
  await run(`resume ${rounds}`, { resume: buildResumeArray(agent.pendingInterrupts, answers) });
}
const last = [...agent.messages].reverse().find((m) => m.role === "assistant" && m.content);
console.log(`final text: ${last?.content ?? "(none)"}`);
if (rounds === 0) console.log("no interrupt was raised");
process.exit(rounds > 0 && last?.content === expected ? 0 : 1);
