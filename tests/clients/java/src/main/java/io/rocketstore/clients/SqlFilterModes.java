package io.rocketstore.clients;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.ClientConfig;
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

    /** The process's real stdout: ClientDriver.main points System.out at stderr before any mode runs. */
    private static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true,
        StandardCharsets.UTF_8);
    private static final String[] COLORS = {"red", "green", "blue"};

    private SqlFilterModes() {
    }

    /** "-x value" options after the mode name (ClientDriver has already checked their shape). */
    private static Map<String, String> options(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 1; i + 1 < argv.length; i += 2) {
            m.put(argv[i], argv[i + 1]);
        }
        return m;
    }

    private static String required(Map<String, String> opts, String name) {
        String v = opts.get(name);
        if (v == null) {
            throw new IllegalArgumentException("option " + name + " is required");
        }
        return v;
    }

    private static synchronized void emit(Map<String, Object> line) {
        OUT.println(JSON.toJSONString(line, SerializerFeature.WriteMapNullValue));
        OUT.flush();
    }

    private static Map<String, Object> line(String kind) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("kind", kind);
        return m;
    }

    /** The shortened client timers ClientDriver's --poll-namesrv / --heartbeat ask for. */
    private static void configure(ClientConfig cc, Map<String, String> opts) {
        if (opts.containsKey("--poll-namesrv")) {
            cc.setPollNameServerInterval(Integer.parseInt(opts.get("--poll-namesrv")));
        }
        if (opts.containsKey("--heartbeat")) {
            cc.setHeartbeatBrokerInterval(Integer.parseInt(opts.get("--heartbeat")));
        }
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
