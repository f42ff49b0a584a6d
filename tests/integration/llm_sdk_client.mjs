// The official OpenAI SDK (`openai` from npm, pinned in scripts/node/package.json) used as an
// agent uses it, with its defaults (retries included), against an LLM API reached through
// sandgate as a forward proxy. Node 20's fetch does not read HTTP_PROXY, so the SDK is given a
// fetch that sends its requests to the proxy in absolute form (what curl does with -x); the
// SDK's request building, stream reading and error classes are its own.
//
// argv: node_modules dir, proxy host:port, Proxy-Authorization value, base URL, then the calls
// as JSON: [{"stream": bool, "model": ..., "max_tokens": n}, ...]. Prints one JSON line per
// call: {"ok": true, "content", "chunks", "usage"} or {"ok": false, "class", "status", "code",
// "type", "message"}.
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { Readable } from "node:stream";

const [nodeModules, proxy, proxyAuth, baseURL, callsJson] = process.argv.slice(2);
const require = createRequire(path.join(nodeModules, "sdk-client.cjs"));
const { OpenAI, APIError } = require("openai");
const [proxyHost, proxyPort] = proxy.split(":");

async function proxiedFetch(url, init = {}) {
  const headers = new Headers(init.headers);
  headers.set("proxy-authorization", proxyAuth);
  const body = init.body == null ? null : Buffer.from(await new Response(init.body).arrayBuffer());
  if (body) headers.set("content-length", String(body.length));
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: proxyHost, port: Number(proxyPort), method: init.method || "GET",
      path: target.href, headers: { ...Object.fromEntries(headers), host: target.host },
      signal: init.signal,
    }, (res) => {
      const h = new Headers();
      for (const [k, v] of Object.entries(res.headers)) {
        for (const one of [].concat(v)) h.append(k, one);
      }
      resolve(new Response(Readable.toWeb(res), { status: res.statusCode, headers: h }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

const client = new OpenAI({ apiKey: "sk-placeholder-the-proxy-injects", baseURL, fetch: proxiedFetch });
for (const call of JSON.parse(callsJson)) {
  const ask = { model: call.model, max_tokens: call.max_tokens,
                messages: [{ role: "user", content: "hi" }] };
  try {
    if (call.stream) {
      const stream = await client.chat.completions.create({ ...ask, stream: true });
      let content = "", chunks = 0, usage = null;
      for await (const chunk of stream) {
        chunks += 1;
        if (chunk.usage) usage = chunk.usage;
        for (const choice of chunk.choices) content += choice.delta?.content ?? "";
      }
      console.log(JSON.stringify({ ok: true, content, chunks, usage }));
    } else {
      const done = await client.chat.completions.create(ask);
      console.log(JSON.stringify({ ok: true, content: done.choices[0]?.message?.content,
                                   usage: done.usage }));
    }
  } catch (e) {
    if (!(e instanceof APIError)) throw e;
    console.log(JSON.stringify({ ok: false, class: e.constructor.name, status: e.status,
                                 code: e.code, type: e.type, message: e.message }));
  }
}
