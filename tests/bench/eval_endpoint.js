// eval_endpoint.js - a scripted OpenAI-compatible endpoint for the eval
// benchmark and demo: every chat completion waits LATENCY_MS, then answers
// (a tool call when tools are passed, else a short bilingual paragraph).
//   node tests/bench/eval_endpoint.js PORT LATENCY_MS
"use strict";
const http = require("http");
const port = Number(process.argv[2] || 8089);
const latency = Number(process.argv[3] || 50);
let served = 0;
const answer = (req) => {
  const tools = req.tools || [];
  if (tools.length) {
    const name = tools[0].function.name;
    return `<tool_call>\n${JSON.stringify({ name, arguments: {} })}\n</tool_call>`;
  }
  const base = req.model === "cand" ? "结论:" : "";
  return `${base}This answer covers the question in a few sentences with numbers such as 42 and 2025.\n\n` +
    "## 要点\n- 第一点:数据支撑\n- 第二点:逻辑论证\n\n```python\nprint(42)\n```";
};
http.createServer((rq, rs) => {
  if (rq.method === "GET" && rq.url === "/v1/models") {
    rs.writeHead(200, { "Content-Type": "application/json" });
    return rs.end(JSON.stringify({ object: "list", data: [{ id: "base-model" }] }));
  }
  if (rq.method === "GET" && rq.url === "/served") {
    return rs.end(String(served));
  }
  let body = "";
  rq.on("data", (d) => (body += d));
  rq.on("end", () => {
    const req = JSON.parse(body || "{}");
    setTimeout(() => {
      served++;
      rs.writeHead(200, { "Content-Type": "application/json" });
      rs.end(JSON.stringify({ object: "chat.completion",
        choices: [{ index: 0, message: { role: "assistant", content: answer(req) }, finish_reason: "stop" }] }));
    }, latency);
  });
}).listen(port, "127.0.0.1", () => console.error(`eval_endpoint: :${port}, ${latency} ms per request`));
