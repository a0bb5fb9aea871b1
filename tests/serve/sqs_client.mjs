// q serve against npm's @aws-sdk/client-sqs (AWS JSON 1.0), the sign-up rush:
// producers at 167/s, consumers at 50/s in all, poison messages dead-lettered
// after maxReceiveCount and redriven by StartMessageMoveTask; FIFO order; a
// wrong secret refused; a long poll woken by a send. Usage: node sqs_client.mjs ENDPOINT KEY SECRET PREFIX
// (NODE_PATH names the directory holding @aws-sdk).
import { createRequire } from "node:module";
const require = createRequire(process.env.NODE_PATH + "/");
const sqsLib = require("@aws-sdk/client-sqs");
const {
  SQSClient, CreateQueueCommand, GetQueueAttributesCommand, SendMessageCommand,
  ReceiveMessageCommand, DeleteMessageCommand, StartMessageMoveTaskCommand,
  ListMessageMoveTasksCommand, SendMessageBatchCommand,
} = sqsLib;

const [endpoint, key, secret, prefix] = process.argv.slice(2);
const scale = Number(process.env.Q_TEST_TIME_SCALE || "1");
const client = (s = secret) => new SQSClient({
  endpoint, region: "us-east-1", maxAttempts: 1,
  credentials: { accessKeyId: key, secretAccessKey: s },
});
const sqs = client();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function check(cond, what) {
  if (!cond) { console.log(`FAIL: ${what}`); process.exit(1); }
  console.log(`ok: ${what}`);
}
const attrs = async (QueueUrl, names = ["All"]) =>
  (await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: names }))).Attributes;

try {
  await client("wrong").send(new CreateQueueCommand({ QueueName: `${prefix}-nope` }));
  check(false, "a wrong secret is refused");
} catch (e) {
  check(e.name === "SignatureDoesNotMatch" || e.Code === "SignatureDoesNotMatch",
    `a wrong secret is refused (${e.name})`);
}

const dlq = (await sqs.send(new CreateQueueCommand({ QueueName: `${prefix}-signups-dlq` }))).QueueUrl;
const dlqArn = (await attrs(dlq, ["QueueArn"])).QueueArn;
const src = (await sqs.send(new CreateQueueCommand({
  QueueName: `${prefix}-signups`,
  Attributes: {
    VisibilityTimeout: "1",
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 2 }),
  },
}))).QueueUrl;

const N = 300, POISON_EVERY = 25;
const sent = new Map(), deleted = new Map();
let stop = false;
async function producer(n, offset) {
  const start = Date.now();
  for (let i = 0; i < n; i++) {
    const k = offset + i;
    const r = await sqs.send(new SendMessageCommand({
      QueueUrl: src, MessageBody: JSON.stringify({ user: k, poison: k % POISON_EVERY === 0 }),
      MessageAttributes: { kind: { DataType: "String", StringValue: "signup" } },
    }));
    sent.set(r.MessageId, k);
    const delay = start + ((i + 1) * 1000) / (167 / 2) - Date.now();
    if (delay > 0) await sleep(delay);
  }
}
async function consumer() {
  const c = client();
  const start = Date.now();
  let taken = 0;
  while (!stop) {
    const got = await c.send(new ReceiveMessageCommand({
      QueueUrl: src, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: ["All"],
    }));
    for (const m of got.Messages || []) {
      taken++;
      if (JSON.parse(m.Body).poison) continue;
      await c.send(new DeleteMessageCommand({ QueueUrl: src, ReceiptHandle: m.ReceiptHandle }));
      deleted.set(m.MessageId, (deleted.get(m.MessageId) || 0) + 1);
    }
    const delay = start + (taken * 1000) / 25 - Date.now();
    if (delay > 0) await sleep(delay);
  }
}
const consumers = [consumer(), consumer()];
await Promise.all([producer(N / 2, 0), producer(N / 2, N / 2)]);
const poison = [...sent].filter(([, k]) => k % POISON_EVERY === 0).map(([id]) => id);
const deadline = Date.now() + 60000 * scale;
while (Date.now() < deadline && deleted.size < N - poison.length) await sleep(200);
while (Date.now() < deadline &&
       Number((await attrs(dlq)).ApproximateNumberOfMessages) < poison.length) await sleep(200);
stop = true;
await Promise.all(consumers);
check(sent.size === N, `${N} sign-ups sent`);
check(deleted.size === N - poison.length &&
      poison.every((id) => !deleted.has(id)), `every good one deleted (${deleted.size})`);
check(Number((await attrs(dlq)).ApproximateNumberOfMessages) === poison.length,
  `the ${poison.length} poison messages are in the DLQ`);
const task = (await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: dlqArn }))).TaskHandle;
const tasks = (await sqs.send(new ListMessageMoveTasksCommand({ SourceArn: dlqArn }))).Results;
check(tasks[0].TaskHandle === task && tasks[0].ApproximateNumberOfMessagesMoved === poison.length,
  "StartMessageMoveTask moved them back");
check(Number((await attrs(src)).ApproximateNumberOfMessages) === poison.length,
  "the redriven messages are back in the source queue");

const fifo = (await sqs.send(new CreateQueueCommand({
  QueueName: `${prefix}-orders.fifo`, Attributes: { FifoQueue: "true" },
}))).QueueUrl;
await sqs.send(new SendMessageBatchCommand({
  QueueUrl: fifo,
  Entries: [0, 1, 2, 3, 4, 5].map((i) => ({
    Id: `e${i}`, MessageBody: `${"ab"[i % 2]}${i}`, MessageGroupId: "ab"[i % 2],
    MessageDeduplicationId: `d${i}`,
  })),
}));
const order = [];
for (;;) {
  const got = (await sqs.send(new ReceiveMessageCommand({ QueueUrl: fifo, MaxNumberOfMessages: 10 }))).Messages || [];
  if (!got.length) break;
  for (const m of got) {
    order.push(m.Body);
    await sqs.send(new DeleteMessageCommand({ QueueUrl: fifo, ReceiptHandle: m.ReceiptHandle }));
  }
}
check(order.filter((b) => b[0] === "a").join() === "a0,a2,a4" &&
      order.filter((b) => b[0] === "b").join() === "b1,b3,b5", `FIFO groups in order (${order})`);
// A long poll (20 s) woken by a send on another connection.
const lp = (await sqs.send(new CreateQueueCommand({ QueueName: `${prefix}-longpoll` }))).QueueUrl;
const polling = client().send(new ReceiveMessageCommand({ QueueUrl: lp, WaitTimeSeconds: 20 }));
await sleep(1000);
const woken = Date.now();
await sqs.send(new SendMessageCommand({ QueueUrl: lp, MessageBody: "wake up" }));
const woke = (await polling).Messages || [];
const after = (Date.now() - woken) / 1000;
check(woke.length === 1 && woke[0].Body === "wake up" && after < 4 * scale,
  `a long poll is woken by a send (${after.toFixed(2)} s after it)`);
await sqs.send(new DeleteMessageCommand({ QueueUrl: lp, ReceiptHandle: woke[0].ReceiptHandle }));
console.log("PASS");
