'use strict';
/*
 * Drives the real RocketMQ 5.x Node.js client (npm `rocketmq-client-nodejs`, pinned in
 * package-lock.json beside this file) for tests/compat/node5/test_node_5x_client.py. The test installs
 * the package with `npm ci` into a cache of its own and points NODE_PATH there.
 *
 * Prints one JSON object per line on stdout (`kind` says what it is):
 *
 *   produce ENDPOINT TOPIC COUNT [--tag T] [--prop k=v ...] [--group G] [--delay-ms N]
 *       -> {"kind": "sent", ...} per message (--group: FIFO message group; --delay-ms: delivery time)
 *   consume ENDPOINT TOPIC GROUP --expect N [--mode ack|ignore-first] [--invisible-ms N]
 *       -> {"kind": "received", ...} per delivery, {"kind": "acked", ...} per ack, then "done"
 *   push ENDPOINT TOPIC GROUP --expect N [--mode ack|fail-first]
 *       -> {"kind": "received", ...} per call of a PushConsumer's listener, which answers SUCCESS
 *          (fail-first: FAILURE to a first delivery), then "done"
 *
 * Both take `--access-key AK --secret-key SK`: the client then signs its calls (MQv2-HMAC-SHA1);
 * and `--startup-timeout-ms N` (20 s): the client's startup fails after that long.
 * A failure is one {"kind": "error", ...} line and exit code 1. The client's own log lines go to
 * stderr (its default logger would write under $HOME/logs), where the test reads a refusal's status.
 */

const { ConsumeResult, Producer, PushConsumer, SimpleConsumer } = require('rocketmq-client-nodejs');

function emit(fields) {
  process.stdout.write(`${JSON.stringify(fields)}\n`);
}

/** The client's logger interface, writing every line to stderr. */
const stderrLogger = {};
for (const level of [ 'debug', 'info', 'warn', 'error' ]) {
  stderrLogger[level] = (...args) => process.stderr.write(`${level.toUpperCase()} ${require('node:util').format(...args)}\n`);
}

function parse(argv) {
  const [ command, ...rest ] = argv;
  const positional = [];
  const options = { prop: [], tag: '', mode: 'ack', 'invisible-ms': '30000', 'await-ms': '2000', timeout: '30',
    'body-prefix': 'body', 'access-key': '', 'secret-key': '', group: '', 'delay-ms': '0', expect: '0',
    'startup-timeout-ms': '20000' };
  for (let i = 0; i < rest.length; i++) {
    if (!rest[i].startsWith('--')) {
      positional.push(rest[i]);
      continue;
    }
    const name = rest[i].slice(2);
    if (!(name in options)) throw new Error(`unknown option --${name}`);
    if (i + 1 >= rest.length) throw new Error(`--${name} needs a value`);
    const value = rest[++i];
    if (Array.isArray(options[name])) options[name].push(value); else options[name] = value;
  }
  return { command, positional, options };
}

/**
 * The client's startup(), failing after --startup-timeout-ms: a producer whose Telemetry stream is
 * refused (an account without PUB) never gets its first settings and its startup never returns.
 */
async function startup(client, options) {
  let timer;
  const ms = Number(options['startup-timeout-ms']);
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`startup did not finish within ${ms} ms`)), ms);
  });
  try {
    await Promise.race([ client.startup(), late ]);
  } finally {
    clearTimeout(timer);
  }
}

function baseOptions(endpoint, options) {
  const base = { endpoints: endpoint, namespace: '', logger: stderrLogger, requestTimeout: 5000 };
  if (options['access-key']) {
    base.sessionCredentials = { accessKey: options['access-key'], accessSecret: options['secret-key'] };
  }
  return base;
}

async function produce([ endpoint, topic, count ], options) {
  const producer = new Producer({ ...baseOptions(endpoint, options), topic });
  await startup(producer, options);
  try {
    for (let index = 0; index < Number(count); index++) {
      const prefix = options['body-prefix'];
      const properties = new Map([ [ 'index', String(index) ] ]);
      for (const pair of options.prop) {
        const at = pair.indexOf('=');
        properties.set(pair.slice(0, at), pair.slice(at + 1));
      }
      const message = { topic, body: Buffer.from(`${prefix}-${index}`), keys: [ `${prefix}-key-${index}`, `${prefix}-alt-${index}` ],
        properties };
      if (options.tag) message.tag = options.tag;
      if (options.group) message.messageGroup = options.group;
      if (Number(options['delay-ms']) > 0) message.delay = Number(options['delay-ms']);
      const receipt = await producer.send(message);
      emit({ kind: 'sent', index, message_id: receipt.messageId, body: `${prefix}-${index}`,
        queue_id: receipt.messageQueue.queueId, at_ms: Date.now() });
    }
  } finally {
    await producer.shutdown();
  }
}

async function consume([ endpoint, topic, group ], options) {
  const consumer = new SimpleConsumer({ ...baseOptions(endpoint, options), consumerGroup: group,
    subscriptions: new Map([ [ topic, options.tag || '*' ] ]), awaitDuration: Number(options['await-ms']) });
  await startup(consumer, options);
  const started = Date.now();
  const expect = Number(options.expect);
  let deliveries = 0;
  try {
    while (deliveries < expect && Date.now() - started < Number(options.timeout) * 1000) {
      for (const message of await consumer.receive(16, Number(options['invisible-ms']))) {
        deliveries++;
        const attempt = message.deliveryAttempt;
        emit({ kind: 'received', message_id: message.messageId, body: message.body.toString(), tag: message.tag ?? null,
          keys: [ ...message.keys ].sort(), properties: Object.fromEntries(message.properties), attempt,
          message_group: message.messageGroup ?? null, queue_offset: message.offset ?? null, at_ms: Date.now() });
        if (options.mode === 'ack' || (options.mode === 'ignore-first' && attempt > 1)) {
          await consumer.ack(message);
          emit({ kind: 'acked', message_id: message.messageId });
        }
      }
    }
  } finally {
    await consumer.shutdown();
  }
  emit({ kind: 'done', deliveries });
}

async function push([ endpoint, topic, group ], options) {
  const expect = Number(options.expect);
  const started = Date.now();
  let deliveries = 0;
  let enough;
  const done = new Promise(resolve => { enough = resolve; });
  const messageListener = {
    consume(message) {
      deliveries++;
      const attempt = message.deliveryAttempt;
      emit({ kind: 'received', message_id: message.messageId, body: message.body.toString(), attempt,
        at_ms: Date.now() });
      if (deliveries >= expect) enough();
      return options.mode === 'fail-first' && attempt === 1 ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
    },
  };
  const consumer = new PushConsumer({ ...baseOptions(endpoint, options), consumerGroup: group,
    subscriptions: new Map([ [ topic, options.tag || '*' ] ]), messageListener,
    longPollingTimeout: Number(options['await-ms']) });  // its shutdown waits for the receives in flight
  await startup(consumer, options);
  let timer;
  try {
    await Promise.race([ done, new Promise(resolve => { timer = setTimeout(resolve, Number(options.timeout) * 1000); }) ]);
  } finally {
    clearTimeout(timer);
    await consumer.shutdown();
  }
  emit({ kind: 'done', deliveries, seconds: (Date.now() - started) / 1000 });
}

async function main() {
  const { command, positional, options } = parse(process.argv.slice(2));
  const commands = { produce, consume, push };
  if (!(command in commands)) throw new Error(`unknown command ${command}: one of ${Object.keys(commands)}`);
  await commands[command](positional, options);
}

main().then(() => process.exit(0), err => {
  // the test reads the reason from stdout; the client's status code is on err.code (ClientException)
  emit({ kind: 'error', error: `${err.name}: ${err.message}`, code: err.code ?? err.cause?.code ?? null,
    cause: err.cause ? String(err.cause) : null });
  process.exit(1);
});
