// Runs RSMQ calls for redjob's interop tests.
// Usage: node driver.js <port> <namespace> < ops.json
// ops.json is an array of {"op": "<rsmq method>", ...options}; the output is one JSON
// array with each call's result, or {"error": "<name>: <message>"} where it failed.
const RedisSMQ = require("rsmq");

async function main() {
  const [port, ns] = process.argv.slice(2);
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const rsmq = new RedisSMQ({ host: "127.0.0.1", port: Number(port), ns });
  const out = [];
  for (const { op, ...opts } of JSON.parse(input)) {
    try {
      const args = Object.keys(opts).length ? [opts] : [];
      out.push(await rsmq[op + "Async"](...args));
    } catch (e) {
      out.push({ error: `${e.name}: ${e.message}` });
    }
  }
  process.stdout.write(JSON.stringify(out));
  rsmq.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
