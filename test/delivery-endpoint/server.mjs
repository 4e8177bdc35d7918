// An HTTP endpoint in Node that coordd delivers jobs to (docs/delivery.md):
// it verifies each request's signature with the Standard Webhooks reference
// library, makes the job's effect with one FencedCommit over coordd's
// HTTP/JSON API fenced by the request's Coordd-Fencing-Token (keyed by its
// Idempotency-Key), and answers 200, or 409 when the token was refused.
// It prints its address, then one JSON line per request.
//
//   COORDD_HTTP=http://127.0.0.1:7411 COORDD_SECRET=whsec_... node server.mjs
import http from "node:http";
import { Webhook } from "standardwebhooks";

const coordd = process.env.COORDD_HTTP;
const wh = new Webhook(process.env.COORDD_SECRET);

const server = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = Buffer.concat(chunks).toString("utf8");
  const line = { job: req.headers["coordd-job-id"], attempt: req.headers["coordd-attempt"],
    token: req.headers["coordd-fencing-token"], window: req.headers["coordd-window"] ?? "",
    occurrence: req.headers["coordd-occurrence"] ?? "", deadline: req.headers["coordd-deadline"] ?? "",
    idempotency: req.headers["idempotency-key"] ?? "", webhook_id: req.headers["webhook-id"] ?? "" };
  try {
    wh.verify(body, req.headers); // throws on a bad signature or a stale timestamp
    line.verified = true;
  } catch (e) {
    line.verified = false;
    line.error = String(e);
    console.log(JSON.stringify(line));
    res.writeHead(401).end();
    return;
  }
  const r = await fetch(`${coordd}/v1/fence/commit`, { method: "POST", body: JSON.stringify({
    resource: `effects/${line.job}`, token: line.token, idempotency_key: req.headers["idempotency-key"],
    payload: JSON.parse(body) }) });
  const answer = await r.json();
  line.accepted = r.ok && answer.accepted === true;
  line.duplicate = answer.duplicate === true;
  console.log(JSON.stringify(line));
  res.writeHead(line.accepted ? 200 : 409, { "Content-Type": "application/json" });
  res.end(JSON.stringify({ node: "ok", duplicate: line.duplicate }));
});
server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ listening: `http://127.0.0.1:${server.address().port}` })));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
