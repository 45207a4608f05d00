package io.rocketstore.clients;

import static io.rocketstore.clients.DriverIO.emit;
import static io.rocketstore.clients.DriverIO.line;


import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntFunction;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The real Apache RocketMQ 4.x Java client as a test peer and load generator.
 *
 * <p>Usage: {@code ClientDriver MODE -n NAMESRV [options]}; modes produce, push-consume,
 * pull-consume, query, bench-produce, bench-consume (see {@link #usage()}). Every result is one
 * JSON object per line on stdout, each with a "kind" field (started, sent, received, pulled,
 * committed, found, summary, error; push-consume prints "started" once its consumer has started, so
 * a test can produce only after that); everything else (our notes, the client's own logging) goes to stderr or
 * the client's log root. Exit status 0 = the mode's goal was met, 1 = it was not (timeout, send
 * failure, nothing found), 2 = bad arguments, 124 = the watchdog ended a hung run.
 */
public final class ClientDriver {

    private static final int BATCH_SIZE = 32;
    private static final int SEND_TIMEOUT_MS = 3000;
    private static final int ASYNC_IN_FLIGHT = 256;
    /** The watchdog halts the JVM this long after the mode's own deadline (--timeout) passed. */
    private static final int WATCHDOG_GRACE_S = 30;

    /** ClientConfig.pollNameServerInterval for every client we make; 0 keeps RocketMQ's 30 s. */
    private static int pollNamesrvMs;
    /** ClientConfig.heartbeatBrokerInterval for every client we make; 0 keeps RocketMQ's 30 s. */
    private static int heartbeatMs;

    private ClientDriver() {
    }

    // -- arguments -----------------------------------------------------------------------------

    /** Options given as "-x value" or "--name value"; the flags listed in FLAGS take no value. */
    private static final Set<String> FLAGS = Set.of("--keys", "--orderly");

    private static final class Args {
        private final Map<String, String> values = new HashMap<>();

        Args(String[] argv, int from) {
            for (int i = from; i < argv.length; i++) {
                String name = argv[i];
                if (!name.startsWith("-")) {
                    fail("unexpected argument " + name);
                }
                if (FLAGS.contains(name)) {
                    values.put(name, "true");
                } else {
                    if (i + 1 >= argv.length) {
                        fail("option " + name + " needs a value");
                    }
                    values.put(name, argv[++i]);
                }
            }
        }

        String get(String name, String fallback) {
            return values.getOrDefault(name, fallback);
        }

        String required(String name) {
            String v = values.get(name);
            if (v == null) {
                fail("option " + name + " is required");
            }
            return v;
        }

        int integer(String name, int fallback) {
            String v = values.get(name);
            return v == null ? fallback : Integer.parseInt(v);
        }

        boolean flag(String name) {
            return values.containsKey(name);
        }
    }

    private static void fail(String why) {
        System.err.println("ClientDriver: " + why);
        usage();
    }

    private static void usage() {
        System.err.println(String.join("\n",
            "usage: ClientDriver MODE -n NAMESRV [--timeout SECONDS] [--poll-namesrv MS] [--heartbeat MS] [options]",
            "  produce -t TOPIC -c COUNT [--mode sync|async|oneway|batch] [--keys] [--tags A,B] [--size BYTES]",
            "          (bodies body-<i> padded with x to BYTES; over 4 KiB the client sends them zipped)",
            "          [--group G] [--start I] [--delay-level L] [--pause MS]",
            "          (sync: each send is followed by MS of nothing, a paced loop; a failed one is reported, not retried)",
            "  push-consume -t TOPIC -g GROUP -c EXPECTED [--tags EXPR] [--fail-times N] [--max-reconsume N]",
            "          [--retry-delay-level L] [--orderly] [--linger MS]",
            "  pull-consume -t TOPIC -g GROUP -c EXPECTED",
            "  query -t TOPIC (--key K | --uniq-key MSGID | --offset-msg-id ID) [--expect N]",
            "  bench-produce -t TOPIC -w THREADS -s SIZE -d SECONDS [--group G] [--warmup SECONDS]",
            "          (--warmup: the same senders run untimed first, so the client's JIT is warm when timing starts)",
            "  bench-consume -t TOPIC -g GROUP -d SECONDS [-c STOP_AFTER]",
            "  bench-fill -t TOPIC -c COUNT -s SIZE -w THREADS -d MAX_SECONDS [--batch N]",
            "  bench-pull -t TOPIC -g GROUP -d SECONDS [-c STOP_AFTER]",
            "  tx-produce -t TOPIC -g GROUP -c COUNT [--local STATE] [--check STATE] [--expect-checks N]",
            "          [--linger MS] [--start I]   (TransactionModes.java; STATE commit|rollback|unknown)"));
        Runtime.getRuntime().halt(2);
    }

    // -- output --------------------------------------------------------------------------------

    private static void error(String what, Throwable t) {
        Map<String, Object> m = line("error");
        m.put("error", what);
        if (t != null) {
            m.put("exception", t.toString());
            t.printStackTrace();
        }
        emit(m);
    }

    /** The fields a consumer or a query sees on a stored message. */
    private static Map<String, Object> describe(String kind, MessageExt msg) {
        Map<String, Object> m = line(kind);
        String uniq = MessageClientIDSetter.getUniqID(msg);
        m.put("msgId", uniq != null ? uniq : msg.getMsgId());
        m.put("offsetMsgId", msg instanceof MessageClientExt ? ((MessageClientExt) msg).getOffsetMsgId() : msg.getMsgId());
        m.put("topic", msg.getTopic());
        m.put("queueId", msg.getQueueId());
        m.put("queueOffset", msg.getQueueOffset());
        m.put("commitLogOffset", msg.getCommitLogOffset());
        m.put("tags", msg.getTags());
        m.put("keys", msg.getKeys());
        m.put("reconsumeTimes", msg.getReconsumeTimes());
        m.put("bornTimestamp", msg.getBornTimestamp());
        m.put("storeTimestamp", msg.getStoreTimestamp());
        m.put("body", new String(msg.getBody(), StandardCharsets.UTF_8));
        return m;
    }

    // -- main ----------------------------------------------------------------------------------

    public static void main(String[] argv) throws Exception {
        // The client logs through rocketmq-logging (to rocketmq.client.logRoot); anything printed
        // to stdout by a library must not mix with our JSON lines.
        System.setOut(System.err);
        if (argv.length < 1) {
            usage();
        }
        String mode = argv[0];
        Args args = new Args(argv, 1);
        String namesrv = args.required("-n");
        pollNamesrvMs = args.integer("--poll-namesrv", 0);
        heartbeatMs = args.integer("--heartbeat", 0);
        int defaultTimeout = mode.startsWith("bench-") ? args.integer("-d", 10) + args.integer("--warmup", 0) + 60 : 60;
        startWatchdog(args.integer("--timeout", defaultTimeout) + WATCHDOG_GRACE_S);
        boolean ok;
        switch (mode) {
            case "tx-produce":
                ok = TransactionModes.produce(argv);
                break;
            case "produce":
                ok = produce(namesrv, args);
                break;
            case "push-consume":
                ok = pushConsume(namesrv, args);
                break;
            case "pull-consume":
                ok = pullConsume(namesrv, args);
                break;
            case "query":
                ok = query(namesrv, args);
                break;
            case "bench-produce":
                ok = benchProduce(namesrv, args);
                break;
            case "bench-consume":
                ok = benchConsume(namesrv, args);
                break;
            case "bench-fill":
                ok = benchFill(namesrv, args);
                break;
            case "bench-pull":
                ok = benchPull(namesrv, args);
                break;
            case "request":
                ok = RequestReplyModes.request(argv);
                break;
            case "respond":
                ok = RequestReplyModes.respond(argv);
                break;
            case "sql-produce":
                ok = SqlFilterModes.produce(namesrv, argv);
                break;
            case "sql-push-consume":
                ok = SqlFilterModes.pushConsume(namesrv, argv);
                break;
            case "acl-produce":
                ok = AclModes.produce(argv);
                break;
            case "acl-pull":
                ok = AclModes.pull(argv);
                break;
            case "acl-sign":
                ok = AclModes.sign(argv);
                break;
            default:
                fail("unknown mode " + mode);
                return;
        }
        // halt, not exit: client shutdown hooks must not hold the process after we are done.
        Runtime.getRuntime().halt(ok ? 0 : 1);
    }

    private static void startWatchdog(int seconds) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(seconds * 1000L);
            } catch (InterruptedException e) {
                return;
            }
            error("watchdog: mode did not finish within " + seconds + " s", null);
            Runtime.getRuntime().halt(124);
        }, "driver-watchdog");
        t.setDaemon(true);
        t.start();
    }

    /**
     * RocketMQ's 30 s timers, shortened on request. Route refresh: a push consumer also subscribes
     * to %RETRY%group, which the broker creates only at the consumer's first heartbeat, after the
     * client fetched its routes, so the first retries can wait for the next refresh. Heartbeat: a
     * client heartbeats only brokers in its routes, so a consumer started before its topic existed
     * is unknown to the broker (no queues in rebalance) until its next heartbeat.
     */
    private static void configure(ClientConfig cc) {
        if (pollNamesrvMs > 0) {
            cc.setPollNameServerInterval(pollNamesrvMs);
        }
        if (heartbeatMs > 0) {
            cc.setHeartbeatBrokerInterval(heartbeatMs);
        }
    }

    private static DefaultMQProducer producer(String namesrv, String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(namesrv);
        configure(p);
        p.setSendMsgTimeout(SEND_TIMEOUT_MS);
        p.setRetryTimesWhenSendFailed(1);
        p.setRetryTimesWhenSendAsyncFailed(1);
        p.start();
        return p;
    }

    private static byte[] body(String prefix, int size) {
        StringBuilder b = new StringBuilder(prefix);
        while (b.length() < size) {
            b.append('x');
        }
        return b.toString().getBytes(StandardCharsets.UTF_8);
    }

    // -- produce -------------------------------------------------------------------------------

    private static boolean produce(String namesrv, Args args) throws Exception {
        String topic = args.required("-t");
        int count = Integer.parseInt(args.required("-c"));
        String mode = args.get("--mode", "sync");
        boolean keys = args.flag("--keys");
        String[] tags = args.get("--tags", "").isEmpty() ? new String[0] : args.get("--tags", "").split(",");
        int size = args.integer("--size", 0);
        int start = args.integer("--start", 0);
        int delayLevel = args.integer("--delay-level", 0);
        int pauseMs = args.integer("--pause", 0);
        DefaultMQProducer p = producer(namesrv, args.get("--group", "client_driver_producer"));

        List<Message> msgs = new ArrayList<>(count);
        for (int i = start; i < start + count; i++) {
            Message m = new Message(topic, body("body-" + i, size));
            if (keys) {
                m.setKeys("key-" + i);
            }
            if (tags.length > 0) {
                m.setTags(tags[i % tags.length]);
            }
            if (delayLevel > 0) {
                m.setDelayTimeLevel(delayLevel);
            }
            msgs.add(m);
        }
        AtomicInteger failed = new AtomicInteger();
        switch (mode) {
            case "sync":
                for (Message m : msgs) {
                    try {
                        SendResult r = p.send(m);
                        emitSent(m, r, MessageClientIDSetter.getUniqID(m), r.getMsgId(), r.getOffsetMsgId(),
                            r.getQueueOffset());
                        if (r.getSendStatus() != SendStatus.SEND_OK) {
                            failed.incrementAndGet();
                        }
                    } catch (Exception e) {
                        failed.incrementAndGet();
                        error("send failed for " + new String(m.getBody(), StandardCharsets.UTF_8), e);
                    }
                    // a loop sending through a failover: a steady rate, no burst of failures while no master is known
                    Thread.sleep(pauseMs);
                }
                break;
            case "async": {
                CountDownLatch done = new CountDownLatch(msgs.size());
                Semaphore inFlight = new Semaphore(ASYNC_IN_FLIGHT);
                for (Message m : msgs) {
                    inFlight.acquire();
                    p.send(m, new SendCallback() {
                        @Override
                        public void onSuccess(SendResult r) {
                            emitSent(m, r, MessageClientIDSetter.getUniqID(m), r.getMsgId(), r.getOffsetMsgId(),
                                r.getQueueOffset());
                            if (r.getSendStatus() != SendStatus.SEND_OK) {
                                failed.incrementAndGet();
                            }
                            inFlight.release();
                            done.countDown();
                        }

                        @Override
                        public void onException(Throwable e) {
                            failed.incrementAndGet();
                            error("async send failed for " + new String(m.getBody(), StandardCharsets.UTF_8), e);
                            inFlight.release();
                            done.countDown();
                        }
                    });
                }
                done.await();
                break;
            }
            case "oneway":
                for (Message m : msgs) {
                    p.sendOneway(m);
                    Map<String, Object> l = line("sent");
                    l.put("msgId", MessageClientIDSetter.getUniqID(m));
                    l.put("status", "ONEWAY");
                    putMessageFields(l, m);
                    emit(l);
                }
                break;
            case "batch":
                for (int from = 0; from < msgs.size(); from += BATCH_SIZE) {
                    List<Message> batch = msgs.subList(from, Math.min(msgs.size(), from + BATCH_SIZE));
                    try {
                        SendResult r = p.send(batch);
                        // One result for the batch: comma-separated ids, the first message's offset.
                        String[] offsetIds = r.getOffsetMsgId() == null ? new String[0] : r.getOffsetMsgId().split(",");
                        for (int i = 0; i < batch.size(); i++) {
                            Message m = batch.get(i);
                            emitSent(m, r, MessageClientIDSetter.getUniqID(m), MessageClientIDSetter.getUniqID(m),
                                i < offsetIds.length ? offsetIds[i] : null, r.getQueueOffset() + i);
                        }
                        if (r.getSendStatus() != SendStatus.SEND_OK) {
                            failed.addAndGet(batch.size());
                        }
                    } catch (Exception e) {
                        failed.addAndGet(batch.size());
                        error("batch send failed at message " + (start + from), e);
                    }
                }
                break;
            default:
                fail("unknown --mode " + mode);
        }
        p.shutdown();
        Map<String, Object> s = line("summary");
        s.put("mode", mode);
        s.put("count", count);
        s.put("failed", failed.get());
        emit(s);
        return failed.get() == 0;
    }

    private static void putMessageFields(Map<String, Object> l, Message m) {
        l.put("key", m.getKeys());
        l.put("tag", m.getTags());
        l.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
    }

    private static void emitSent(Message m, SendResult r, String uniq, String msgId, String offsetMsgId, long queueOffset) {
        Map<String, Object> l = line("sent");
        l.put("msgId", msgId != null ? msgId : uniq);
        l.put("offsetMsgId", offsetMsgId);
        l.put("brokerName", r.getMessageQueue().getBrokerName());
        l.put("queueId", r.getMessageQueue().getQueueId());
        l.put("queueOffset", queueOffset);
        l.put("status", r.getSendStatus().name());
        l.put("at_ms", System.currentTimeMillis());
        putMessageFields(l, m);
        emit(l);
    }

    // -- push-consume --------------------------------------------------------------------------

    private static boolean pushConsume(String namesrv, Args args) throws Exception {
        String topic = args.required("-t");
        String group = args.required("-g");
        int expected = Integer.parseInt(args.required("-c"));
        String tags = args.get("--tags", "*");
        int failTimes = args.integer("--fail-times", 0);
        int retryDelayLevel = args.integer("--retry-delay-level", 0);
        boolean orderly = args.flag("--orderly");
        int timeoutS = args.integer("--timeout", 60);
        int lingerMs = args.integer("--linger", 0);

        Map<String, AtomicInteger> deliveries = new ConcurrentHashMap<>();
        Set<String> succeeded = ConcurrentHashMap.newKeySet();
        AtomicLong deliveryCount = new AtomicLong();
        CountDownLatch enough = new CountDownLatch(1);

        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        configure(c);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // The listener counts a message before the client records its offset (after the listener
        // returns): shutdown must let the consume threads finish, or it can persist an offset one short.
        c.setAwaitTerminationMillisWhenShutdown(5000);
        if (args.flag("--max-reconsume")) {
            c.setMaxReconsumeTimes(args.integer("--max-reconsume", 16));
        }
        c.subscribe(topic, tags);

        // Returns true when the listener should report success for this delivery.
        java.util.function.Predicate<MessageExt> handle = msg -> {
            deliveryCount.incrementAndGet();
            Map<String, Object> l = describe("received", msg);
            String id = (String) l.get("msgId");
            int n = deliveries.computeIfAbsent(id, k -> new AtomicInteger()).incrementAndGet();
            boolean ok = n > failTimes;
            l.put("delivery", n);
            l.put("status", ok ? "CONSUME_SUCCESS" : "RECONSUME_LATER");
            emit(l);
            if (ok && succeeded.add(id) && succeeded.size() >= expected) {
                enough.countDown();
            }
            return ok;
        };
        if (orderly) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    if (!handle.test(m)) {
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                    }
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                boolean all = true;
                for (MessageExt m : msgs) {
                    all &= handle.test(m);
                }
                if (!all) {
                    ctx.setDelayLevelWhenNextConsume(retryDelayLevel);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        emit(line("started"));
        boolean ok = enough.await(timeoutS, TimeUnit.SECONDS);
        if (ok && lingerMs > 0) {
            Thread.sleep(lingerMs);
        }
        c.shutdown(); // persists the consume offsets to the broker
        Map<String, Object> s = line("summary");
        s.put("consumed", succeeded.size());
        s.put("deliveries", deliveryCount.get());
        s.put("expected", expected);
        s.put("timedOut", !ok);
        emit(s);
        return ok;
    }

    // -- pull-consume --------------------------------------------------------------------------

    private static boolean pullConsume(String namesrv, Args args) throws Exception {
        String topic = args.required("-t");
        String group = args.required("-g");
        int expected = Integer.parseInt(args.required("-c"));
        int timeoutS = args.integer("--timeout", 60);

        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(namesrv);
        configure(c);
        c.setAutoCommit(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.start();
        Collection<MessageQueue> queues = c.fetchMessageQueues(topic);
        // No seekToBegin after assign: assign starts pulling at once, and a pull still in flight
        // when a seek clears the cache lands in it afterwards, so messages came twice (seen against
        // Apache's broker). A new group starts at the first offset anyway (CONSUME_FROM_FIRST_OFFSET),
        // and a pull below a deleted head is moved to the queue's min offset by the broker's answer.
        c.assign(queues);
        Set<String> seen = new java.util.HashSet<>();
        Map<MessageQueue, Long> next = new HashMap<>();
        long deadline = System.currentTimeMillis() + timeoutS * 1000L;
        while (seen.size() < expected && System.currentTimeMillis() < deadline) {
            List<MessageExt> got = c.poll(1000);
            for (MessageExt m : got) {
                Map<String, Object> l = describe("pulled", m);
                seen.add((String) l.get("msgId"));
                emit(l);
                MessageQueue mq = new MessageQueue(topic, m.getBrokerName(), m.getQueueId());
                next.merge(mq, m.getQueueOffset() + 1, Math::max);
            }
            if (!got.isEmpty()) {
                c.commitSync();
            }
        }
        boolean ok = seen.size() >= expected;
        // Write what we consumed to the broker synchronously, then read it back from the broker.
        Map<Integer, Long> committed = new TreeMap<>();
        for (Map.Entry<MessageQueue, Long> e : next.entrySet()) {
            c.getOffsetStore().updateConsumeOffsetToBroker(e.getKey(), e.getValue(), false);
        }
        for (MessageQueue mq : queues) {
            long stored = c.getOffsetStore().readOffset(mq, ReadOffsetType.READ_FROM_STORE);
            Map<String, Object> l = line("committed");
            l.put("brokerName", mq.getBrokerName());
            l.put("queueId", mq.getQueueId());
            l.put("offset", next.getOrDefault(mq, -1L));
            l.put("brokerOffset", stored);
            emit(l);
            committed.put(mq.getQueueId(), stored);
            Long want = next.get(mq);
            if (want != null && stored != want) {
                ok = false;
            }
        }
        c.shutdown();
        Map<String, Object> s = line("summary");
        s.put("consumed", seen.size());
        s.put("expected", expected);
        s.put("queues", queues.size());
        s.put("timedOut", seen.size() < expected);
        emit(s);
        return ok;
    }

    // -- query ---------------------------------------------------------------------------------

    @SuppressWarnings("deprecation")
    private static boolean query(String namesrv, Args args) throws Exception {
        String topic = args.required("-t");
        String key = args.get("--key", null);
        String uniq = args.get("--uniq-key", null);
        String offsetId = args.get("--offset-msg-id", null);
        int expect = args.integer("--expect", 1);
        int timeoutS = args.integer("--timeout", 60);
        if ((key == null ? 0 : 1) + (uniq == null ? 0 : 1) + (offsetId == null ? 0 : 1) != 1) {
            fail("query needs exactly one of --key, --uniq-key, --offset-msg-id");
        }
        DefaultMQProducer p = producer(namesrv, args.get("--group", "client_driver_query"));
        // The broker builds its index asynchronously, so a message sent just now may not be found
        // yet: retry until enough are found or our time is up (keeping 5 s for the watchdog).
        long deadline = System.currentTimeMillis() + Math.max(1, timeoutS - 5) * 1000L;
        List<MessageExt> found = List.of();
        Exception last = null;
        while (true) {
            try {
                if (key != null) {
                    found = p.queryMessage(topic, key, 64, 0, Long.MAX_VALUE).getMessageList();
                } else if (uniq != null) {
                    MessageExt m = p.viewMessage(topic, uniq);
                    found = m == null ? List.of() : List.of(m);
                } else {
                    found = List.of(p.viewMessage(offsetId));
                }
                last = null;
            } catch (Exception e) {
                last = e;
                found = List.of();
            }
            if (found.size() >= expect || System.currentTimeMillis() >= deadline) {
                break;
            }
            Thread.sleep(200);
        }
        if (last != null && found.size() < expect) {
            error("query failed", last);
        }
        for (MessageExt m : found) {
            emit(describe("found", m));
        }
        p.shutdown();
        Map<String, Object> s = line("summary");
        s.put("found", found.size());
        s.put("expect", expect);
        emit(s);
        return found.size() >= expect;
    }

    // -- benchmarks ----------------------------------------------------------------------------

    private static final class Latencies {
        private long[] values = new long[1 << 16];
        private int size;

        void add(long v) {
            if (size == values.length) {
                values = Arrays.copyOf(values, size * 2);
            }
            values[size++] = v;
        }
    }

    private static boolean benchProduce(String namesrv, Args args) throws Exception {
        String topic = args.required("-t");
        int threads = args.integer("-w", 16);
        int size = args.integer("-s", 128);
        int seconds = args.integer("-d", 10);
        DefaultMQProducer p = producer(namesrv, args.get("--group", "client_driver_bench"));
        byte[] payload = randomBody(size);
        // One untimed send first: route lookup and (with autoCreateTopicEnable) topic creation.
        SendResult first = firstSend(p, new Message(topic, payload));
        System.err.println("bench-produce: warm-up send " + first.getSendStatus() + ", starting " + threads
            + " threads for " + seconds + " s");

        int warmup = args.integer("--warmup", 0);
        if (warmup > 0) {
            sendFor(p, topic, payload, threads, warmup, new AtomicLong(), new AtomicLong(), new Latencies[threads]);
        }
        // a harness that measures CPU over the timed part waits for this line
        System.err.println("bench-produce: timing starts");
        AtomicLong sent = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        Latencies[] lat = new Latencies[threads];
        for (int t = 0; t < threads; t++) {
            lat[t] = new Latencies();
        }
        long begin = System.nanoTime();
        sendFor(p, topic, payload, threads, seconds, sent, failed, lat);
        double elapsed = (System.nanoTime() - begin) / 1e9;
        p.shutdown();
        int n = 0;
        for (Latencies l : lat) {
            n += l.size;
        }
        long[] all = new long[n];
        int at = 0;
        for (Latencies l : lat) {
            System.arraycopy(l.values, 0, all, at, l.size);
            at += l.size;
        }
        Arrays.sort(all);
        Map<String, Object> s = line("summary");
        s.put("threads", threads);
        s.put("size", size);
        s.put("seconds", elapsed);
        s.put("sent", sent.get());
        s.put("failed", failed.get());
        s.put("tps", sent.get() / elapsed);
        s.put("p50_ms", percentile(all, 0.50));
        s.put("p99_ms", percentile(all, 0.99));
        s.put("max_ms", n == 0 ? 0.0 : all[n - 1] / 1e6);
        emit(s);
        return sent.get() > 0;
    }

    /**
     * Closed-loop sync sends from {@code threads} threads for {@code seconds}, counted into {@code sent}
     * and {@code failed}; each thread's latencies go to its {@code lat} slot unless that slot is null
     * (the untimed warm-up keeps none).
     */
    private static void sendFor(DefaultMQProducer p, String topic, byte[] payload, int threads, int seconds,
                                AtomicLong sent, AtomicLong failed, Latencies[] lat) throws InterruptedException {
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        runThreads(threads, "bench-sender-", t -> () -> {
            Latencies mine = lat[t];
            while (System.nanoTime() < end) {
                long t0 = System.nanoTime();
                try {
                    SendResult r = p.send(new Message(topic, payload));
                    if (mine != null) {
                        mine.add(System.nanoTime() - t0);
                    }
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        sent.incrementAndGet();
                    } else {
                        failed.incrementAndGet();
                    }
                } catch (Exception e) {
                    failed.incrementAndGet();
                }
            }
        });
    }

    /**
     * A benchmark's untimed first send, tried up to five times: on a machine loaded by other work
     * the route lookup and the topic's creation can outlast one send timeout, and a benchmark that
     * dies on its warm-up send measures nothing.
     */
    private static SendResult firstSend(DefaultMQProducer p, Message m) throws Exception {
        for (int attempt = 1; ; attempt++) {
            try {
                return p.send(m);
            } catch (Exception e) {
                if (attempt == 5) {
                    throw e;
                }
                System.err.println("first send failed (" + e + "), attempt " + attempt + " of 5");
            }
        }
    }

    /**
     * A benchmark's message body: random bytes, as the client zips bodies over 4 KiB
     * (compressMsgBodyOverHowmuch) and a padded body would shrink to almost nothing on the wire
     * and in the store.
     */
    private static byte[] randomBody(int size) {
        byte[] payload = new byte[size];
        new Random(42).nextBytes(payload);
        return payload;
    }

    /** Runs {@code work.apply(t)} on threads {@code name + t}, t in 0..threads-1, and waits for them all. */
    private static void runThreads(int threads, String name, IntFunction<Runnable> work) throws InterruptedException {
        Thread[] workers = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            workers[t] = new Thread(work.apply(t), name + t);
            workers[t].start();
        }
        for (Thread w : workers) {
            w.join();
        }
    }

    private static double percentile(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0.0;
        }
        int i = (int) Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1);
        return sorted[Math.max(0, i)] / 1e6;
    }

    private static boolean benchConsume(String namesrv, Args args) throws Exception {
        String topic = args.required("-t");
        String group = args.required("-g");
        int seconds = args.integer("-d", 10);
        long stopAfter = args.integer("-c", 0);
        AtomicLong consumed = new AtomicLong();
        AtomicLong firstNs = new AtomicLong();
        AtomicLong lastNs = new AtomicLong();
        CountDownLatch enough = new CountDownLatch(1);

        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        configure(c);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.nanoTime();
            firstNs.compareAndSet(0, now);
            lastNs.accumulateAndGet(now, Math::max);
            long total = consumed.addAndGet(msgs.size());
            if (stopAfter > 0 && total >= stopAfter) {
                enough.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long begin = System.nanoTime();
        c.start();
        enough.await(seconds, TimeUnit.SECONDS);
        double elapsed = (System.nanoTime() - begin) / 1e9;
        long n = consumed.get();
        double active = (lastNs.get() - firstNs.get()) / 1e9;
        c.shutdown();
        return consumeSummary(n, elapsed, active);
    }

    /**
     * A consumption benchmark's summary line: the rate while messages flowed ({@code active}, first
     * to last delivery), so an early-drained backlog is not diluted by the idle rest of the window,
     * and {@code tps_window} over the whole window; true when anything was consumed.
     */
    private static boolean consumeSummary(long n, double elapsed, double active) {
        Map<String, Object> s = line("summary");
        s.put("consumed", n);
        s.put("seconds", elapsed);
        s.put("tps", n > 1 && active > 0 ? n / active : n / elapsed);
        s.put("tps_window", n / elapsed);
        emit(s);
        return n > 0;
    }

    /**
     * Writes a backlog for the consumption benchmarks: COUNT random SIZE-byte bodies in batches
     * (one SEND_BATCH_MESSAGE per BATCH messages) from THREADS threads, so a million messages take
     * seconds rather than the minutes of single sends; its rate is not a figure anyone compares.
     */
    private static boolean benchFill(String namesrv, Args args) throws Exception {
        String topic = args.required("-t");
        long count = Long.parseLong(args.required("-c"));
        int size = args.integer("-s", 1024);
        int threads = args.integer("-w", 4);
        int batch = args.integer("--batch", 32);
        int seconds = args.integer("-d", 600);
        DefaultMQProducer p = producer(namesrv, args.get("--group", "client_driver_fill"));
        byte[] payload = randomBody(size);
        SendResult first = firstSend(p, new Message(topic, payload));  // route lookup, topic creation
        AtomicLong claimed = new AtomicLong(1);
        AtomicLong sent = new AtomicLong(first.getSendStatus() == SendStatus.SEND_OK ? 1 : 0);
        AtomicLong failed = new AtomicLong();
        long begin = System.nanoTime();
        long end = begin + seconds * 1_000_000_000L;
        runThreads(threads, "bench-fill-", t -> () -> {
            while (System.nanoTime() < end) {
                long from = claimed.getAndAdd(batch);
                int n = (int) Math.min(batch, count - from);
                if (n <= 0) {
                    return;
                }
                List<Message> msgs = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    msgs.add(new Message(topic, payload));
                }
                // A backlog is written, not measured: a batch that failed (a timeout on a
                // loaded machine) is sent again, up to five times, the first failure reported.
                boolean ok = false;
                for (int attempt = 1; attempt <= 5 && !ok; attempt++) {
                    try {
                        ok = p.send(msgs).getSendStatus() == SendStatus.SEND_OK;
                    } catch (Exception e) {
                        if (attempt == 1) {
                            System.err.println("bench-fill: batch failed (" + e + "), sending it again");
                        }
                    }
                }
                (ok ? sent : failed).addAndGet(n);
            }
        });
        double elapsed = (System.nanoTime() - begin) / 1e9;
        p.shutdown();
        Map<String, Object> s = line("summary");
        s.put("sent", sent.get());
        s.put("failed", failed.get());
        s.put("seconds", elapsed);
        s.put("tps", sent.get() / elapsed);
        emit(s);
        return sent.get() > 0;
    }

    /**
     * The pull side of bench-consume: a DefaultLitePullConsumer assigned every queue of the topic,
     * from the first offset, polling (32 messages per pull, as the push consumer's default) and
     * committing offsets automatically, until STOP_AFTER messages or SECONDS; the same summary.
     */
    private static boolean benchPull(String namesrv, Args args) throws Exception {
        String topic = args.required("-t");
        String group = args.required("-g");
        int seconds = args.integer("-d", 10);
        long stopAfter = args.integer("-c", 0);
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(namesrv);
        configure(c);
        c.setPullBatchSize(32);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        long begin = System.nanoTime();
        c.start();
        c.assign(c.fetchMessageQueues(topic));
        long deadline = begin + seconds * 1_000_000_000L;
        long n = 0;
        long firstNs = 0;
        long lastNs = 0;
        while ((stopAfter <= 0 || n < stopAfter) && System.nanoTime() < deadline) {
            List<MessageExt> got = c.poll(1000);
            if (!got.isEmpty()) {
                lastNs = System.nanoTime();
                firstNs = firstNs == 0 ? lastNs : firstNs;
                n += got.size();
            }
        }
        double elapsed = (System.nanoTime() - begin) / 1e9;
        double active = (lastNs - firstNs) / 1e9;
        c.shutdown();
        return consumeSummary(n, elapsed, active);
    }
}
