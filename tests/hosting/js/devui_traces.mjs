// Headless Chromium on DevUI's Traces panel after an approval (run by tests/hosting/test_devui_traces.py).
// Usage: node devui_traces.mjs <base url> <auth token> <message> <screenshot path>
// Sends <message>, clicks Approve on the approval card, waits for "deployed: <message>", opens the
// Traces panel and waits until it lists the two invoke_agent spans (the pause and the resume); prints
// a JSON line "TRACES <json>" with the spans DevUI streamed to the page (response.trace.completed events
// of /v1/responses: name, attributes, span events; DevUI's panel shows a span's attributes only for
// leaf spans and never its events), saves the screenshot and exits 0, or 1 on failure.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [base, token, message, shot] = process.argv.slice(2);
if (!base || !token || !message || !shot) {
  console.error("usage: node devui_traces.mjs <base url> <auth token> <message> <screenshot path>");
  process.exit(2);
}
const profile = mkdtempSync(join(tmpdir(), "devui-traces-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
  viewport: { width: 1600, height: 1000 },
});
let ok = false;
try {
  await context.addInitScript((t) => localStorage.setItem("devui_auth_token", t), token);
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => console.log("  pageerror:", String(err).slice(0, 200)));
  const turns = [];
  page.on("response", async (response) => {
    if (!response.url().endsWith("/v1/responses") || response.request().method() !== "POST") return;
    const spans = [];
    for (const line of (await response.text()).split("\n")) {
      if (!line.startsWith("data:") || !line.includes("response.trace.completed")) continue;
      const data = JSON.parse(line.slice(5)).data ?? {};
      spans.push({ name: data.operation_name, attributes: data.attributes ?? {}, events: data.events ?? [] });
    }
    turns.push(spans);
  });
  await page.goto(base, { waitUntil: "networkidle" });
  const box = page.locator("textarea").first();
  await box.waitFor({ timeout: 30000 });
  await box.fill(message);
  await box.press("Enter");
  await page.getByText("Approval Required").first().waitFor({ timeout: 30000 });
  console.log("  approval card shown");
  await page.getByRole("button", { name: "Approve" }).first().click();
  await page.getByText(`deployed: ${message}`).first().waitFor({ timeout: 30000 });
  console.log("  final text shown");
  await page.getByRole("tab", { name: /Traces/ }).first().click();
  await page.getByText("2 turns").first().waitFor({ timeout: 30000 });
  // Each turn's invoke_agent span is labelled with the agent's name: open both to show their events.
  await page.waitForTimeout(500);
  console.log(`TRACES ${JSON.stringify(turns)}`);
  await page.screenshot({ path: shot, fullPage: true });
  ok = true;
} catch (err) {
  console.log("  FAILED:", String(err?.message ?? err).split("\n")[0]);
  const page = context.pages()[0];
  if (page) await page.screenshot({ path: shot.replace(/\.png$/, "_failure.png"), fullPage: true });
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(ok ? "DEVUI TRACES CHECK: PASS" : "DEVUI TRACES CHECK: FAIL");
process.exit(ok ? 0 : 1);
