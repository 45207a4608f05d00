package io.rocketstore.clients;

import static io.rocketstore.clients.DriverIO.emit;
import static io.rocketstore.clients.DriverIO.line;
import static io.rocketstore.clients.DriverIO.options;
import static io.rocketstore.clients.DriverIO.required;
import static io.rocketstore.clients.DriverIO.configure;


import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * SQL92 property filters through the real 4.9.8 client: modes of {@link ClientDriver} (its switch
 * calls these with the whole argument vector), printing JSON lines on stdout as the other modes do.
 *
 * <ul>
 * <li>{@code sql-produce -t TOPIC -c COUNT [--group G]}: message i (body "body-i") gets the tag
 * "Tag" + (i % 2) and the user properties {@code i} (the number) and {@code color}
 * (red, green, blue by i % 3); one "sent" line each, then "summary".</li>
 * <li>{@code sql-push-consume -t TOPIC -g GROUP --sql EXPR -c EXPECTED [--linger MS]}: a push
 * consumer subscribed with {@code MessageSelector.bySql(EXPR)}, from the first offset. If
 * {@code start()} throws (the broker refused the subscription), one "error" line carries the
 * client's responseCode and errorMessage and the mode fails; else "started", one "received" line
 * per delivery (with the message's properties), and after EXPECTED messages plus the linger
 * (to catch deliveries the filter should have stopped) a "summary".</li>
 * </ul>
 */
final class SqlFilterModes {

    private static final String[] COLORS = {"red", "green", "blue"};

    private SqlFilterModes() {
    }

    static boolean produce(String namesrv, String[] argv) throws Exception {
        Map<String, String> opts = options(argv);
        String topic = required(opts, "-t");
        int count = Integer.parseInt(required(opts, "-c"));
        DefaultMQProducer p = new DefaultMQProducer(opts.getOrDefault("--group", "sql_filter_producer"));
        p.setNamesrvAddr(namesrv);
        configure(p, opts);
        p.start();
        int failed = 0;
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "Tag" + (i % 2), ("body-" + i).getBytes(StandardCharsets.UTF_8));
            m.putUserProperty("i", String.valueOf(i));
            m.putUserProperty("color", COLORS[i % 3]);
            SendResult r = p.send(m);
            Map<String, Object> l = line("sent");
            l.put("body", "body-" + i);
            l.put("status", r.getSendStatus().name());
            l.put("queueId", r.getMessageQueue().getQueueId());
            emit(l);
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                failed++;
            }
        }
        p.shutdown();
        Map<String, Object> s = line("summary");
        s.put("sent", count - failed);
        s.put("failed", failed);
        emit(s);
        return failed == 0;
    }

    static boolean pushConsume(String namesrv, String[] argv) throws Exception {
        Map<String, String> opts = options(argv);
        String topic = required(opts, "-t");
        String group = required(opts, "-g");
        String sql = required(opts, "--sql");
        int expected = Integer.parseInt(required(opts, "-c"));
        int timeoutS = Integer.parseInt(opts.getOrDefault("--timeout", "60"));
        int lingerMs = Integer.parseInt(opts.getOrDefault("--linger", "0"));

        Set<String> received = ConcurrentHashMap.newKeySet();
        CountDownLatch enough = new CountDownLatch(expected);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        configure(c, opts);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, MessageSelector.bySql(sql));
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt msg : msgs) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                Map<String, Object> l = line("received");
                l.put("body", body);
                l.put("tags", msg.getTags());
                l.put("properties", new TreeMap<>(msg.getProperties()));
                emit(l);
                if (received.add(body)) {
                    enough.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        try {
            c.start();
        } catch (MQClientException e) {
            Map<String, Object> l = line("error");
            l.put("error", "consumer start failed");
            l.put("responseCode", e.getResponseCode());
            l.put("errorMessage", e.getErrorMessage());
            l.put("exception", e.toString());
            emit(l);
            c.shutdown();
            return false;
        }
        emit(line("started"));
        boolean ok = enough.await(timeoutS, TimeUnit.SECONDS);
        if (lingerMs > 0) {
            Thread.sleep(lingerMs);
        }
        c.shutdown();
        Map<String, Object> s = line("summary");
        s.put("consumed", received.size());
        s.put("expected", expected);
        s.put("timedOut", !ok);
        emit(s);
        return ok;
    }
}
