// A program that knows nothing of redjob but the topic entry format of
// docs/topics.md: it publishes and consumes topic events with a plain Redis client.
// Usage: node topics.js <port> < ops.json
// ops: {"op": "publish", "topic", "entries": [[field, value, ...], ...]} → ids
//      {"op": "consume", "topic", "group", "consumer", "count"} → [{id, type, data}]
//        (reads new events for the consumer group, acknowledges each)
const redis = require("redis");

function call(c, cmd, args) {
  return new Promise((ok, fail) => c.send_command(cmd, args, (e, r) => (e ? fail(e) : ok(r))));
}

async function main() {
  const [port] = process.argv.slice(2);
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const c = redis.createClient({ host: "127.0.0.1", port: Number(port) });
  const out = [];
  for (const op of JSON.parse(input)) {
    // the stream of topic T in namespace rsmq
    const key = `rsmq:t:{${op.topic}}`;
    if (op.op === "publish") {
      const ids = [];
      for (const fields of op.entries) ids.push(await call(c, "XADD", [key, "*", ...fields]));
      out.push(ids);
    } else if (op.op === "consume") {
      const r = await call(c, "XREADGROUP", [
        "GROUP", op.group, op.consumer, "COUNT", String(op.count), "STREAMS", key, ">",
      ]);
      const got = [];
      for (const [, entries] of r || []) {
        for (const [id, kv] of entries) {
          const f = {};
          for (let i = 0; i < kv.length; i += 2) f[kv[i]] = kv[i + 1];
          got.push({ id, type: f.type, data: JSON.parse(f.data) });
          await call(c, "XACK", [key, op.group, id]);
        }
      }
      out.push(got);
    }
  }
  process.stdout.write(JSON.stringify(out));
  c.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
