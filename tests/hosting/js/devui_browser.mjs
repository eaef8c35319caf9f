// Headless Chromium check of the DevUI web page (run by tests/hosting/test_devui.py).
// Usage: node devui_browser.mjs <base url> <auth token> <message> <screenshot dir>
// Opens the page (the single agent is auto-selected), sends <message>, waits for the approval card,
// clicks Approve, waits for "deployed: <message>", saves devui_approved.png (or devui_failure.png) and
// exits 0 on success, 1 otherwise. The page reads its bearer token from localStorage "devui_auth_token".
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [base, token, message, shotDir] = process.argv.slice(2);
if (!base || !token || !message || !shotDir) {
  console.error("usage: node devui_browser.mjs <base url> <auth token> <message> <screenshot dir>");
  process.exit(2);
}
const expected = `deployed: ${message}`;
const profile = mkdtempSync(join(tmpdir(), "devui-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
  viewport: { width: 1280, height: 800 },
});
let ok = false;
try {
  await context.addInitScript((t) => localStorage.setItem("devui_auth_token", t), token);
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => console.log("  pageerror:", String(err).slice(0, 200)));
  await page.goto(base, { waitUntil: "networkidle" });
  const box = page.locator("textarea").first();
  await box.waitFor({ timeout: 30000 });
  await box.fill(message);
  await box.press("Enter");
  await page.getByText("Approval Required").first().waitFor({ timeout: 30000 });
  console.log("  approval card shown");
  await page.getByRole("button", { name: "Approve" }).first().click();
  await page.getByText(expected).first().waitFor({ timeout: 30000 });
  console.log(`  final text shown: ${expected}`);
  await page.screenshot({ path: join(shotDir, "devui_approved.png"), fullPage: true });
  ok = true;
} catch (err) {
  console.log("  FAILED:", String(err?.message ?? err).split("\n")[0]);
  const page = context.pages()[0];
  if (page) await page.screenshot({ path: join(shotDir, "devui_failure.png"), fullPage: true });
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(ok ? "DEVUI BROWSER CHECK: PASS" : "DEVUI BROWSER CHECK: FAIL");
process.exit(ok ? 0 : 1);
