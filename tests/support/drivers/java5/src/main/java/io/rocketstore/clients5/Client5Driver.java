package io.rocketstore.clients5;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;
import org.apache.rocketmq.client.java.impl.producer.SendReceiptImpl;

/**
 * Drives the real RocketMQ 5.x Java client for tests/compat/java5/test_java_5x_client.py. One JSON object
 * per line on stdout ("kind" says what it is); an exception prints {"kind":"error"} and exits 1.
 *
 * <pre>
 *   produce ENDPOINT TOPIC COUNT PREFIX [fifo GROUP | delay MILLIS]
 *   send-loop ENDPOINT TOPIC COUNT PREFIX PAUSE_MS
 *           (sends body PREFIX-i for i below COUNT, each once, PAUSE_MS apart, and goes on past a failed
 *           send, printing "failed" for it; "sent" names the brokerName that acknowledged)
 *   consume ENDPOINT TOPIC GROUP EXPECT TIMEOUT_S        (simple consumer, acks each message)
 *   push    ENDPOINT TOPIC GROUP EXPECT TIMEOUT_S [FAIL_FIRST [BUSY_MS]]
 *           (push consumer; EXPECT deliveries; with FAIL_FIRST=true the listener answers FAILURE to
 *           a message's first delivery and SUCCESS to the later ones; it takes BUSY_MS per message)
 *   transact ENDPOINT TOPIC CHECK_TIMEOUT_S ENDING...
 *           (transactional producer: one message per ENDING, each in a transaction of its own,
 *           ended by "commit" or "rollback", or left unresolved by "open-ANSWER"; the checker answers
 *           a check with the message's "check" property: ANSWER (commit, rollback, unknown) for an
 *           open one, unknown for the rest; then waits up to CHECK_TIMEOUT_S for a check of every
 *           open one)
 * </pre>
 *
 * With the environment variables CLIENT5_ACCESS_KEY and CLIENT5_SECRET_KEY set, the client signs its
 * calls with them (a broker with aclEnable); otherwise it has no credentials.
 */
public final class Client5Driver {
    private Client5Driver() {
    }

    public static void main(String[] args) {
        try {
            ClientConfigurationBuilder builder = ClientConfiguration.newBuilder().setEndpoints(args[1])
                .enableSsl(false).setRequestTimeout(Duration.ofSeconds(5));
            String accessKey = System.getenv("CLIENT5_ACCESS_KEY");
            String secretKey = System.getenv("CLIENT5_SECRET_KEY");
            if (accessKey != null && secretKey != null) {
                builder.setCredentialProvider(new StaticSessionCredentialsProvider(accessKey, secretKey));
            }
            ClientConfiguration config = builder.build();
            ClientServiceProvider provider = ClientServiceProvider.loadService();
            switch (args[0]) {
                case "produce" -> produce(provider, config, args);
                case "send-loop" -> sendLoop(provider, config, args);
                case "consume" -> consume(provider, config, args);
                case "push" -> push(provider, config, args);
                case "transact" -> transact(provider, config, args);
                default -> throw new IllegalArgumentException("unknown mode " + args[0]);
            }
            System.exit(0);
        } catch (Throwable e) {
            StringBuilder chain = new StringBuilder(e.toString());  // a refused call's status is in a cause
            for (Throwable cause = e.getCause(); cause != null && cause != cause.getCause(); cause = cause.getCause()) {
                chain.append(" <- ").append(cause);
            }
            emit("error", Map.of("error", chain.toString()));
            System.exit(1);
        }
    }

    private static void produce(ClientServiceProvider provider, ClientConfiguration config, String[] args)
        throws Exception {
        String topic = args[2];
        int count = Integer.parseInt(args[3]);
        String prefix = args[4];
        String variant = args.length > 5 ? args[5] : "normal";
        try (Producer producer = provider.newProducerBuilder().setClientConfiguration(config).setTopics(topic)
            .build()) {
            for (int i = 0; i < count; i++) {
                MessageBuilder builder = provider.newMessageBuilder().setTopic(topic).setTag("TagJ")
                    .setKeys(prefix + "-key-" + i).addProperty("index", String.valueOf(i))
                    .setBody((prefix + "-" + i).getBytes(StandardCharsets.UTF_8));
                // when the message is due (0: at once); a send's own duration must not move it
                long deliverAtMs = 0;
                if (variant.equals("fifo")) {
                    builder.setMessageGroup(args[6]);
                } else if (variant.equals("delay")) {
                    deliverAtMs = System.currentTimeMillis() + Long.parseLong(args[6]);
                    builder.setDeliveryTimestamp(deliverAtMs);
                }
                Message message = builder.build();
                SendReceipt receipt = producer.send(message);
                emit("sent", Map.of("index", i, "message_id", receipt.getMessageId().toString(),
                    "at_ms", System.currentTimeMillis(), "deliver_at_ms", deliverAtMs));
            }
        }
    }

    /**
     * Sends through a failover: a send the client gave up on (its retries spent, e.g. while no member
     * of a group is master) is reported and not sent again, since it may be stored all the same, and
     * the loop goes on, as an application's producer does. Runs until COUNT or until it is killed.
     */
    private static void sendLoop(ClientServiceProvider provider, ClientConfiguration config, String[] args)
        throws Exception {
        String topic = args[2];
        int count = Integer.parseInt(args[3]);
        String prefix = args[4];
        long pauseMs = Long.parseLong(args[5]);
        try (Producer producer = provider.newProducerBuilder().setClientConfiguration(config).setTopics(topic)
            .build()) {
            for (int i = 0; i < count; i++) {
                String body = prefix + "-" + i;
                Message message = provider.newMessageBuilder().setTopic(topic).setTag("TagJ")
                    .setBody(body.getBytes(StandardCharsets.UTF_8)).build();
                try {
                    SendReceipt receipt = producer.send(message);
                    String broker = receipt instanceof SendReceiptImpl impl
                        ? impl.getMessageQueue().getBroker().getName() : "";
                    emit("sent", Map.of("index", i, "body", body, "message_id", receipt.getMessageId().toString(),
                        "brokerName", broker, "at_ms", System.currentTimeMillis()));
                } catch (Exception e) {
                    emit("failed", Map.of("index", i, "body", body, "error", e.toString(),
                        "at_ms", System.currentTimeMillis()));
                }
                Thread.sleep(pauseMs);
            }
        }
    }

    private static Map<String, Object> describe(MessageView view) {
        Map<String, Object> fields = new TreeMap<>();
        ByteBuffer body = view.getBody();
        byte[] bytes = new byte[body.remaining()];
        body.get(bytes);
        fields.put("message_id", view.getMessageId().toString());
        fields.put("body", new String(bytes, StandardCharsets.UTF_8));
        fields.put("tag", view.getTag().orElse(""));
        fields.put("keys", new ArrayList<>(view.getKeys()));
        fields.put("properties", view.getProperties());
        fields.put("attempt", view.getDeliveryAttempt());
        fields.put("message_group", view.getMessageGroup().orElse(""));
        fields.put("at_ms", System.currentTimeMillis());
        return fields;
    }

    private static void consume(ClientServiceProvider provider, ClientConfiguration config, String[] args)
        throws Exception {
        String topic = args[2];
        int expect = Integer.parseInt(args[4]);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[5]));
        int received = 0;
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(args[3]).setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Collections.singletonMap(topic,
                new FilterExpression("*", FilterExpressionType.TAG))).build()) {
            while (received < expect && System.nanoTime() < deadline) {
                List<MessageView> views = consumer.receive(16, Duration.ofSeconds(30));
                for (MessageView view : views) {
                    received++;
                    emit("received", describe(view));
                    consumer.ack(view);
                }
            }
        }
        emit("done", Map.of("deliveries", received));
    }

    private static void push(ClientServiceProvider provider, ClientConfiguration config, String[] args)
        throws Exception {
        String topic = args[2];
        int expect = Integer.parseInt(args[4]);
        boolean failFirst = args.length > 6 && Boolean.parseBoolean(args[6]);
        long busyMs = args.length > 7 ? Long.parseLong(args[7]) : 0;
        CountDownLatch done = new CountDownLatch(expect);
        AtomicInteger consumed = new AtomicInteger();
        try (PushConsumer consumer = provider.newPushConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(args[3])
            .setSubscriptionExpressions(Collections.singletonMap(topic,
                new FilterExpression("*", FilterExpressionType.TAG)))
            .setMessageListener(view -> {
                ConsumeResult result = failFirst && view.getDeliveryAttempt() == 1 ? ConsumeResult.FAILURE
                    : ConsumeResult.SUCCESS;
                Map<String, Object> fields = describe(view);
                if (busyMs > 0) {
                    try {
                        Thread.sleep(busyMs);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
                fields.put("result", result.name());
                emit("received", fields);
                consumed.incrementAndGet();
                done.countDown();
                return result;
            }).build()) {
            done.await(Long.parseLong(args[5]), TimeUnit.SECONDS);
            Thread.sleep(500); // the acks of the last messages go out after the listener returns
        }
        emit("done", Map.of("deliveries", consumed.get()));
    }

    private static void transact(ClientServiceProvider provider, ClientConfiguration config, String[] args)
        throws Exception {
        String topic = args[2];
        long checkTimeoutS = Long.parseLong(args[3]);
        List<String> endings = List.of(args).subList(4, args.length);
        Set<String> unchecked = ConcurrentHashMap.newKeySet();
        try (Producer producer = provider.newProducerBuilder().setClientConfiguration(config).setTopics(topic)
            .setTransactionChecker(view -> {
                String answer = view.getProperties().getOrDefault("check", "unknown");
                Map<String, Object> fields = describe(view);
                fields.put("answer", answer);
                emit("checked", fields);
                unchecked.remove(view.getMessageId().toString());
                return switch (answer) {
                    case "commit" -> TransactionResolution.COMMIT;
                    case "rollback" -> TransactionResolution.ROLLBACK;
                    default -> TransactionResolution.UNKNOWN;
                };
            }).build()) {
            for (int i = 0; i < endings.size(); i++) {
                String ending = endings.get(i);
                boolean open = ending.startsWith("open-");
                Message message = provider.newMessageBuilder().setTopic(topic).setTag("TagT")
                    .setKeys("txn-key-" + i).addProperty("index", String.valueOf(i))
                    .addProperty("check", open ? ending.substring("open-".length()) : "unknown")
                    .setBody(("txn-" + i + "-" + ending).getBytes(StandardCharsets.UTF_8)).build();
                Transaction transaction = producer.beginTransaction();
                SendReceipt receipt = producer.send(message, transaction);
                String messageId = receipt.getMessageId().toString();
                if (open) {
                    unchecked.add(messageId);
                }
                emit("sent", Map.of("index", i, "message_id", messageId, "ending", ending,
                    "at_ms", System.currentTimeMillis()));
                switch (ending) {
                    case "commit" -> transaction.commit();
                    case "rollback" -> transaction.rollback();
                    default -> {
                    }
                }
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(checkTimeoutS);
            while (!unchecked.isEmpty() && System.nanoTime() < deadline) {
                Thread.sleep(100);
            }
            Thread.sleep(1000); // the answers to the last checks go out after the checker returns
        }
        emit("done", Map.of("unchecked", new ArrayList<>(unchecked)));
    }

    private static synchronized void emit(String kind, Map<String, ?> fields) {
        StringBuilder out = new StringBuilder("{\"kind\":").append(json(kind));
        for (Map.Entry<String, ?> entry : new TreeMap<>(fields).entrySet()) {
            out.append(',').append(json(entry.getKey())).append(':').append(json(entry.getValue()));
        }
        System.out.println(out.append('}'));
        System.out.flush();
    }

    private static String json(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof Number || value instanceof Boolean) {
            return value.toString();
        }
        if (value instanceof Map<?, ?> map) {
            StringBuilder out = new StringBuilder("{");
            for (Map.Entry<?, ?> entry : new TreeMap<>(map).entrySet()) {
                if (out.length() > 1) {
                    out.append(',');
                }
                out.append(json(entry.getKey().toString())).append(':').append(json(entry.getValue()));
            }
            return out.append('}').toString();
        }
        if (value instanceof Iterable<?> items) {
            StringBuilder out = new StringBuilder("[");
            for (Object item : items) {
                if (out.length() > 1) {
                    out.append(',');
                }
                out.append(json(item));
            }
            return out.append(']').toString();
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : value.toString().toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
