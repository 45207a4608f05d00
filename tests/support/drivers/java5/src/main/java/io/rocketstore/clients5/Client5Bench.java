package io.rocketstore.clients5;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * Load generator of bench/run_grpc_bench.py: the real RocketMQ 5.x Java client (gRPC v2) against one
 * endpoint, so our broker and Apache's proxy are driven by the same code in the same way.
 *
 * <pre>
 *   ENDPOINT --topic T --warm-topic W --group G --size BYTES --inflight 1,32 --warmup S --seconds S
 *            --receive-threads N --receive-max S
 * </pre>
 *
 * Phases, each bracketed by {"kind":"window","phase":P,"edge":"start"|"end"} lines so that the caller
 * can read the server's CPU time exactly around it: an untimed warm-up (sends to the warm topic at the
 * largest window, then receive + ack of what it sent), one timed send phase per in-flight window
 * ("send-N": N asynchronous sends outstanding at any time, a closed loop, for --seconds), then a timed
 * "receive" phase: --receive-threads threads of one SimpleConsumer receive up to 32 messages at a
 * time and ack each (asynchronously, waiting for a batch's acks before the next receive) until
 * every message of the timed sends is acked or --receive-max seconds pass. Each phase ends with a
 * {"kind":"summary"} line. Asynchronous sends let one client core keep a server core busy: a thread
 * per outstanding send would spend the client's core on context switches instead.
 */
public final class Client5Bench {
    private static final int RECEIVE_BATCH = 32;
    private static final int MAX_SAMPLES = 4_000_000;

    private Client5Bench() {
    }

    public static void main(String[] args) {
        try {
            Map<String, String> opts = new HashMap<>();
            for (int i = 1; i + 1 < args.length; i += 2) {
                opts.put(args[i].replaceFirst("^--", ""), args[i + 1]);
            }
            ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(args[0]).enableSsl(false)
                .setRequestTimeout(Duration.ofSeconds(10)).build();
            ClientServiceProvider provider = ClientServiceProvider.loadService();
            byte[] body = new byte[Integer.parseInt(opts.get("size"))];
            new Random(42).nextBytes(body);
            int[] windows = Arrays.stream(opts.get("inflight").split(",")).mapToInt(Integer::parseInt).toArray();
            int largest = Arrays.stream(windows).max().orElseThrow();
            String topic = opts.get("topic");
            String warmTopic = opts.get("warm-topic");
            String group = opts.get("group");
            int receiveThreads = Integer.parseInt(opts.get("receive-threads"));
            long warmup = Long.parseLong(opts.get("warmup"));
            long seconds = Long.parseLong(opts.get("seconds"));
            long receiveMax = Long.parseLong(opts.get("receive-max"));
            long timedSent = 0;
            try (Producer producer = provider.newProducerBuilder().setClientConfiguration(config)
                .setTopics(topic, warmTopic).build()) {
                Map<String, Object> warm = send(provider, producer, warmTopic, body, largest, warmup, "warmup-send");
                try (SimpleConsumer consumer = consumer(provider, config, group, warmTopic)) {
                    receive(consumer, receiveThreads, ((Number) warm.get("sent")).longValue(), warmup,
                        "warmup-receive");
                }
                for (int window : windows) {
                    Map<String, Object> run = send(provider, producer, topic, body, window, seconds, "send-" + window);
                    timedSent += ((Number) run.get("sent")).longValue();
                }
            }
            try (SimpleConsumer consumer = consumer(provider, config, group, topic)) {
                receive(consumer, receiveThreads, timedSent, receiveMax, "receive");
            }
            System.exit(0);
        } catch (Throwable e) {
            StringBuilder chain = new StringBuilder(e.toString());
            for (Throwable cause = e.getCause(); cause != null && cause != cause.getCause(); cause = cause.getCause()) {
                chain.append(" <- ").append(cause);
            }
            emit("error", Map.of("error", chain.toString()));
            System.exit(1);
        }
    }

    private static SimpleConsumer consumer(ClientServiceProvider provider, ClientConfiguration config, String group,
                                           String topic) throws Exception {
        return provider.newSimpleConsumerBuilder().setClientConfiguration(config).setConsumerGroup(group)
            .setAwaitDuration(Duration.ofSeconds(1))
            .setSubscriptionExpressions(Collections.singletonMap(topic,
                new FilterExpression("*", FilterExpressionType.TAG))).build();
    }

    /** Closed-loop asynchronous sends, {@code window} outstanding, for {@code seconds}; the phase's summary. */
    private static Map<String, Object> send(ClientServiceProvider provider, Producer producer, String topic,
                                            byte[] body, int window, long seconds, String phase)
        throws InterruptedException {
        Message message = provider.newMessageBuilder().setTopic(topic).setTag("bench").setBody(body).build();
        Semaphore permits = new Semaphore(window);
        long[] latencyNs = new long[MAX_SAMPLES];
        AtomicInteger samples = new AtomicInteger();
        AtomicLong sent = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        Map<String, Object> firstError = Collections.synchronizedMap(new HashMap<>());
        window(phase, "start");
        long begin = System.nanoTime();
        long deadline = begin + TimeUnit.SECONDS.toNanos(seconds);
        while (System.nanoTime() < deadline) {
            permits.acquire();
            long t0 = System.nanoTime();
            producer.sendAsync(message).whenComplete((receipt, error) -> {
                long took = System.nanoTime() - t0;
                if (error == null) {
                    sent.incrementAndGet();
                    int i = samples.getAndIncrement();
                    if (i < MAX_SAMPLES) {
                        latencyNs[i] = took;
                    }
                } else {
                    failed.incrementAndGet();
                    firstError.putIfAbsent("first_error", error.toString());
                }
                permits.release();
            });
        }
        permits.acquire(window); // the last sends complete inside the window
        long elapsed = System.nanoTime() - begin;
        window(phase, "end");
        int n = Math.min(samples.get(), MAX_SAMPLES);
        long[] sorted = Arrays.copyOf(latencyNs, n);
        Arrays.sort(sorted);
        Map<String, Object> summary = new HashMap<>(firstError);
        summary.put("phase", phase);
        summary.put("inflight", window);
        summary.put("sent", sent.get());
        summary.put("failed", failed.get());
        summary.put("seconds", elapsed / 1e9);
        summary.put("tps", sent.get() / (elapsed / 1e9));
        summary.put("p50_ms", percentile(sorted, 0.50));
        summary.put("p99_ms", percentile(sorted, 0.99));
        summary.put("max_ms", n == 0 ? 0.0 : sorted[n - 1] / 1e6);
        emit("summary", summary);
        return summary;
    }

    private static double percentile(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0.0;
        }
        int i = (int) Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1);
        return sorted[Math.max(0, i)] / 1e6;
    }

    /** Receive + ack until {@code expect} messages are acked or {@code maxSeconds} pass; the phase's summary. */
    private static Map<String, Object> receive(SimpleConsumer consumer, int threads, long expect, long maxSeconds,
                                               String phase) throws InterruptedException {
        AtomicLong acked = new AtomicLong();
        AtomicLong received = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicLong lastAckNs = new AtomicLong();
        Map<String, Object> firstError = Collections.synchronizedMap(new HashMap<>());
        window(phase, "start");
        long begin = System.nanoTime();
        long deadline = begin + TimeUnit.SECONDS.toNanos(maxSeconds);
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread worker = new Thread(() -> {
                while (acked.get() < expect && System.nanoTime() < deadline) {
                    List<MessageView> views;
                    try {
                        views = consumer.receive(RECEIVE_BATCH, Duration.ofSeconds(60));
                    } catch (Exception e) {
                        failed.incrementAndGet();
                        firstError.putIfAbsent("first_error", e.toString());
                        continue;
                    }
                    received.addAndGet(views.size());
                    List<CompletableFuture<Void>> acks = new ArrayList<>(views.size());
                    for (MessageView view : views) {
                        acks.add(consumer.ackAsync(view).whenComplete((ok, error) -> {
                            if (error == null) {
                                acked.incrementAndGet();
                                lastAckNs.accumulateAndGet(System.nanoTime(), Math::max);
                            } else {
                                failed.incrementAndGet();
                                firstError.putIfAbsent("first_error", error.toString());
                            }
                        }));
                    }
                    try {
                        CompletableFuture.allOf(acks.toArray(new CompletableFuture<?>[0])).join();
                    } catch (Exception e) {
                        // counted per ack above
                    }
                }
            }, "bench-receive-" + t);
            worker.start();
            workers.add(worker);
        }
        for (Thread worker : workers) {
            worker.join();
        }
        long end = System.nanoTime();
        window(phase, "end");
        double elapsed = ((acked.get() >= expect && lastAckNs.get() > 0) ? lastAckNs.get() : end) - begin;
        Map<String, Object> summary = new HashMap<>(firstError);
        summary.put("phase", phase);
        summary.put("expected", expect);
        summary.put("received", received.get());
        summary.put("acked", acked.get());
        summary.put("failed", failed.get());
        summary.put("seconds", elapsed / 1e9);
        summary.put("tps", acked.get() / (elapsed / 1e9));
        emit("summary", summary);
        return summary;
    }

    private static void window(String phase, String edge) {
        emit("window", Map.of("phase", phase, "edge", edge));
    }

    private static synchronized void emit(String kind, Map<String, ?> fields) {
        StringBuilder out = new StringBuilder("{\"kind\":\"").append(kind).append('"');
        for (Map.Entry<String, ?> entry : new java.util.TreeMap<>(fields).entrySet()) {
            out.append(",\"").append(entry.getKey()).append("\":");
            Object value = entry.getValue();
            if (value instanceof Number) {
                out.append(value);
            } else {
                out.append('"').append(value.toString().replace("\\", "\\\\").replace("\"", "\\\"")
                    .replace("\n", " ")).append('"');
            }
        }
        System.out.println(out.append('}'));
        System.out.flush();
    }
}
