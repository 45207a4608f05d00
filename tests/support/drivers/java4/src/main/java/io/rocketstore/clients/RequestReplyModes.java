package io.rocketstore.clients;

import static io.rocketstore.clients.DriverIO.emit;
import static io.rocketstore.clients.DriverIO.line;
import static io.rocketstore.clients.DriverIO.options;
import static io.rocketstore.clients.DriverIO.required;
import static io.rocketstore.clients.DriverIO.configure;


import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Request-reply modes of the client driver ({@link ClientDriver} dispatches to them):
 *
 * <ul>
 * <li>{@code request -t TOPIC -c COUNT [--mode sync|async] [--ttl MS] [--group G]}:
 *     {@code DefaultMQProducer.request()} COUNT times with bodies {@code req-<i>}; one "replied" line
 *     per reply (the reply's body, topic and request-reply properties), "error" lines for requests
 *     that failed or timed out, then a "summary". Exit 0 when every request got its reply.</li>
 * <li>{@code respond -t TOPIC -g GROUP -c EXPECTED [--linger MS]}: a push consumer that answers each
 *     request with {@code MessageUtil.createReplyMessage(request, "reply-" + body)} sent by a
 *     producer; prints "started", one "responded" line per reply sent, then a "summary".</li>
 * </ul>
 *
 * <p>Output as ClientDriver's: one JSON object per line on stdout with a "kind" field. Options
 * {@code --poll-namesrv} and {@code --heartbeat} shorten the client's timers, as in ClientDriver.
 */
final class RequestReplyModes {


    private RequestReplyModes() {
    }

    private static void error(String what, Throwable t) {
        Map<String, Object> m = line("error");
        m.put("error", what);
        m.put("exception", t == null ? null : t.toString());
        emit(m);
    }

    private static String text(byte[] body) {
        return new String(body, StandardCharsets.UTF_8);
    }

    // -- request -------------------------------------------------------------------------------

    private static void emitReplied(Message request, Message reply) {
        Map<String, Object> m = line("replied");
        m.put("request", text(request.getBody()));
        m.put("requestCorrelationId", request.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
        m.put("requestReplyTo", request.getProperty(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT));
        m.put("body", text(reply.getBody()));
        m.put("topic", reply.getTopic());
        m.put("correlationId", reply.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
        m.put("replyTo", reply.getProperty(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT));
        m.put("msgType", reply.getProperty(MessageConst.PROPERTY_MESSAGE_TYPE));
        m.put("ttl", reply.getProperty(MessageConst.PROPERTY_MESSAGE_TTL));
        m.put("pushReplyTime", reply.getProperty(MessageConst.PROPERTY_PUSH_REPLY_TIME));
        m.put("cluster", reply.getProperty(MessageConst.PROPERTY_CLUSTER));
        if (reply instanceof MessageExt) {
            MessageExt ext = (MessageExt) reply;
            m.put("storeHost", String.valueOf(ext.getStoreHost()));
            m.put("storeTimestamp", ext.getStoreTimestamp());
        }
        emit(m);
    }

    static boolean request(String[] argv) throws Exception {
        Map<String, String> o = options(argv);
        String topic = required(o, "-t");
        int count = Integer.parseInt(required(o, "-c"));
        String mode = o.getOrDefault("--mode", "sync");
        int ttl = Integer.parseInt(o.getOrDefault("--ttl", "15000"));
        DefaultMQProducer p = new DefaultMQProducer(o.getOrDefault("--group", "client_driver_requester"));
        p.setNamesrvAddr(required(o, "-n"));
        configure(p, o);
        p.start();
        AtomicInteger replied = new AtomicInteger();
        if ("sync".equals(mode)) {
            for (int i = 0; i < count; i++) {
                Message m = new Message(topic, ("req-" + i).getBytes(StandardCharsets.UTF_8));
                try {
                    Message reply = p.request(m, ttl);
                    emitReplied(m, reply);
                    replied.incrementAndGet();
                } catch (Exception e) {
                    error("request failed for req-" + i, e);
                }
            }
        } else if ("async".equals(mode)) {
            CountDownLatch done = new CountDownLatch(count);
            for (int i = 0; i < count; i++) {
                Message m = new Message(topic, ("req-" + i).getBytes(StandardCharsets.UTF_8));
                String name = "req-" + i;
                p.request(m, new RequestCallback() {
                    @Override
                    public void onSuccess(Message reply) {
                        emitReplied(m, reply);
                        replied.incrementAndGet();
                        done.countDown();
                    }

                    @Override
                    public void onException(Throwable e) {
                        error("request failed for " + name, e);
                        done.countDown();
                    }
                }, ttl);
            }
            if (!done.await(ttl + 10000L, TimeUnit.MILLISECONDS)) {
                error("async requests did not all complete", null);
            }
        } else {
            throw new IllegalArgumentException("unknown --mode " + mode);
        }
        p.shutdown();
        Map<String, Object> s = line("summary");
        s.put("requested", count);
        s.put("replied", replied.get());
        emit(s);
        return replied.get() == count;
    }

    // -- respond -------------------------------------------------------------------------------

    static boolean respond(String[] argv) throws Exception {
        Map<String, String> o = options(argv);
        String topic = required(o, "-t");
        String group = required(o, "-g");
        int expected = Integer.parseInt(required(o, "-c"));
        int timeoutS = Integer.parseInt(o.getOrDefault("--timeout", "60"));
        int lingerMs = Integer.parseInt(o.getOrDefault("--linger", "0"));
        AtomicInteger responded = new AtomicInteger();
        CountDownLatch enough = new CountDownLatch(expected);

        DefaultMQProducer replier = new DefaultMQProducer(group + "_replier");
        replier.setNamesrvAddr(required(o, "-n"));
        configure(replier, o);
        replier.start();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(required(o, "-n"));
        configure(c, o);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt request : msgs) {
                Map<String, Object> m = line("responded");
                m.put("request", text(request.getBody()));
                m.put("correlationId", request.getProperty(MessageConst.PROPERTY_CORRELATION_ID));
                m.put("replyTo", request.getProperty(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT));
                m.put("cluster", request.getProperty(MessageConst.PROPERTY_CLUSTER));
                try {
                    Message reply = MessageUtil.createReplyMessage(request,
                        ("reply-" + text(request.getBody())).getBytes(StandardCharsets.UTF_8));
                    SendResult r = replier.send(reply, 3000);
                    m.put("replyTopic", reply.getTopic());
                    m.put("sendStatus", r.getSendStatus().toString());
                    m.put("replyMsgId", r.getMsgId());
                    m.put("replyOffsetMsgId", r.getOffsetMsgId());
                    emit(m);
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        responded.incrementAndGet();
                        enough.countDown();
                    }
                } catch (Exception e) {
                    error("reply to " + text(request.getBody()) + " failed", e);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        emit(line("started"));
        boolean ok = enough.await(timeoutS, TimeUnit.SECONDS);
        if (ok && lingerMs > 0) {
            Thread.sleep(lingerMs);
        }
        c.shutdown();
        replier.shutdown();
        Map<String, Object> s = line("summary");
        s.put("responded", responded.get());
        s.put("expected", expected);
        emit(s);
        return ok;
    }
}
