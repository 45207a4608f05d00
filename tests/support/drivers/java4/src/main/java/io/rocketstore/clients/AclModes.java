package io.rocketstore.clients;

import static io.rocketstore.clients.DriverIO.emit;
import static io.rocketstore.clients.DriverIO.line;


import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * Plain-ACL modes of the client driver ({@link ClientDriver} dispatches to them). Each signs its
 * requests with RocketMQ's own {@code AclClientRPCHook} when {@code --ak} and {@code --sk} are given.
 *
 * <ul>
 * <li>{@code acl-produce -n NS -t TOPIC -c COUNT [--ak AK --sk SK] [--group G]}: COUNT sync sends of
 *     {@code body-<i>}; a "sent" line per success, a "refused" line (the broker's response code and
 *     remark from {@code MQBrokerException}) or an "error" line per failure, then a "summary".
 *     Exit 0 when every send succeeded.</li>
 * <li>{@code acl-pull -n NS -t TOPIC -g GROUP [--ak AK --sk SK]}: a {@code DefaultMQPullConsumer}
 *     pulls every queue of TOPIC from offset 0 to its end; "pulled" lines, "refused"/"error" lines,
 *     then a "summary" with the count. Exit 0 when nothing was refused.</li>
 * <li>{@code acl-sign --ak AK --sk SK [--code N] [--body TEXT] [--field k=v ...]}: builds a request with
 *     those ext fields and body, runs {@code AclClientRPCHook.doBeforeRequest} on it and prints one
 *     "signed" line with the resulting ext fields (AccessKey and Signature added). No broker.</li>
 * </ul>
 *
 * <p>TLS needs no option here: {@code -Dtls.enable=true} and the {@code tls.client.*} properties
 * switch every mode of the driver (RocketMQ's TlsSystemConfig).
 */
final class AclModes {

    private AclModes() {
    }

    /** "-x value" pairs after the mode; "--field" may repeat. */
    private static Map<String, List<String>> options(String[] argv) {
        Map<String, List<String>> m = new HashMap<>();
        for (int i = 1; i + 1 < argv.length; i += 2) {
            m.computeIfAbsent(argv[i], k -> new ArrayList<>()).add(argv[i + 1]);
        }
        return m;
    }

    private static String opt(Map<String, List<String>> o, String name, String fallback) {
        List<String> v = o.get(name);
        return v == null ? fallback : v.get(v.size() - 1);
    }

    private static String required(Map<String, List<String>> o, String name) {
        String v = opt(o, name, null);
        if (v == null) {
            throw new IllegalArgumentException("option " + name + " is required");
        }
        return v;
    }

    private static RPCHook hook(Map<String, List<String>> o) {
        String ak = opt(o, "--ak", null);
        String sk = opt(o, "--sk", null);
        return ak == null ? null : new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    private static void configure(ClientConfig cc, Map<String, List<String>> o) {
        cc.setNamesrvAddr(required(o, "-n"));
        cc.setInstanceName("acl-" + System.nanoTime());
    }

    /** A refused request (the broker's code and remark) or any other failure. */
    private static void failure(String what, Throwable t) {
        Throwable cause = t;
        while (cause != null && !(cause instanceof MQBrokerException)) {
            cause = cause.getCause();
        }
        Map<String, Object> m;
        if (cause != null) {
            MQBrokerException e = (MQBrokerException) cause;
            m = line("refused");
            m.put("code", e.getResponseCode());
            m.put("remark", e.getErrorMessage());
        } else {
            m = line("error");
            m.put("exception", t.toString());
        }
        m.put("what", what);
        emit(m);
    }

    static boolean produce(String[] argv) throws Exception {
        Map<String, List<String>> o = options(argv);
        String topic = required(o, "-t");
        int count = Integer.parseInt(opt(o, "-c", "1"));
        DefaultMQProducer producer = new DefaultMQProducer(opt(o, "--group", "acl_producer_group"), hook(o));
        configure(producer, o);
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
        int sent = 0;
        try {
            for (int i = 0; i < count; i++) {
                Message msg = new Message(topic, ("body-" + i).getBytes(StandardCharsets.UTF_8));
                try {
                    SendResult r = producer.send(msg, 5000);
                    Map<String, Object> m = line("sent");
                    m.put("i", i);
                    m.put("status", r.getSendStatus().name());
                    m.put("msgId", r.getMsgId());
                    emit(m);
                    sent++;
                } catch (Exception e) {
                    failure("send " + i, e);
                }
            }
        } finally {
            producer.shutdown();
        }
        Map<String, Object> s = line("summary");
        s.put("sent", sent);
        s.put("count", count);
        emit(s);
        return sent == count;
    }

    @SuppressWarnings("deprecation")
    static boolean pull(String[] argv) throws Exception {
        Map<String, List<String>> o = options(argv);
        String topic = required(o, "-t");
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(required(o, "-g"), hook(o));
        configure(consumer, o);
        consumer.start();
        int pulled = 0;
        boolean refused = false;
        try {
            for (MessageQueue mq : consumer.fetchSubscribeMessageQueues(topic)) {
                long offset = 0;
                while (true) {
                    PullResult r;
                    try {
                        r = consumer.pull(mq, "*", offset, 32, 5000);
                    } catch (Exception e) {
                        failure("pull " + mq, e);
                        refused = true;
                        break;
                    }
                    if (r.getPullStatus() != PullStatus.FOUND) {
                        break;
                    }
                    for (MessageExt msg : r.getMsgFoundList()) {
                        Map<String, Object> m = line("pulled");
                        m.put("queueId", mq.getQueueId());
                        m.put("body", new String(msg.getBody(), StandardCharsets.UTF_8));
                        emit(m);
                        pulled++;
                    }
                    offset = r.getNextBeginOffset();
                }
            }
        } finally {
            consumer.shutdown();
        }
        Map<String, Object> s = line("summary");
        s.put("pulled", pulled);
        emit(s);
        return !refused;
    }

    static boolean sign(String[] argv) {
        Map<String, List<String>> o = options(argv);
        RemotingCommand request = RemotingCommand.createRequestCommand(Integer.parseInt(opt(o, "--code", "10")), null);
        for (String field : o.getOrDefault("--field", new ArrayList<>())) {
            int eq = field.indexOf('=');
            request.addExtField(field.substring(0, eq), field.substring(eq + 1));
        }
        String body = opt(o, "--body", null);
        if (body != null) {
            request.setBody(body.getBytes(StandardCharsets.UTF_8));
        }
        hook(o).doBeforeRequest("127.0.0.1:0", request);
        Map<String, Object> m = line("signed");
        m.put("extFields", new TreeMap<>(request.getExtFields()));
        emit(m);
        return true;
    }
}
