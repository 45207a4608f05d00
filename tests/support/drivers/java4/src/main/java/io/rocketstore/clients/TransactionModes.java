package io.rocketstore.clients;

import static io.rocketstore.clients.DriverIO.emit;
import static io.rocketstore.clients.DriverIO.line;
import static io.rocketstore.clients.DriverIO.options;


import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The transactional modes of {@link ClientDriver}: RocketMQ 4.9.8's {@code TransactionMQProducer}.
 *
 * <p>{@code tx-produce -n NAMESRV -t TOPIC -g GROUP -c COUNT [--local STATE] [--check STATE]
 * [--expect-checks N] [--linger MS] [--start I]}, STATE one of commit, rollback, unknown.
 * Sends COUNT transactional messages (bodies {@code tx-<i>}, keys {@code key-<i>}); the local
 * transaction answers {@code --local} (default commit) and every check-back from the broker is
 * answered {@code --check} (default commit). With {@code -c 0} it only stands by as a member of
 * the group answering checks. After sending it waits for {@code --expect-checks} check-backs (then
 * half a second for the one-way END_TRANSACTION to leave), else for {@code --linger} ms.
 *
 * <p>Lines (JSON, one per line, as every mode prints them): "started" once the producer runs,
 * "sent" per message (msgId, offsetMsgId, transactionId, sendStatus, localState, queueId,
 * queueOffset), "checked" per check-back (msgId, transactionId, body, checkTimes, queueOffset,
 * commitLogOffset, answer), then "summary" (sent, checks, expectedChecks, timedOut). Exit 0 when
 * every send succeeded and the expected checks came.
 */
final class TransactionModes {


    private TransactionModes() {
    }

    private static LocalTransactionState state(String name) {
        switch (name) {
            case "commit":
                return LocalTransactionState.COMMIT_MESSAGE;
            case "rollback":
                return LocalTransactionState.ROLLBACK_MESSAGE;
            case "unknown":
                return LocalTransactionState.UNKNOW;
            default:
                throw new IllegalArgumentException("state must be commit, rollback or unknown, not " + name);
        }
    }

    static boolean produce(String[] argv) throws Exception {
        Map<String, String> o = options(argv);
        String namesrv = o.get("-n");
        String topic = o.get("-t");
        String group = o.get("-g");
        if (namesrv == null || topic == null || group == null || !o.containsKey("-c")) {
            throw new IllegalArgumentException("tx-produce needs -n NAMESRV -t TOPIC -g GROUP -c COUNT");
        }
        int count = Integer.parseInt(o.get("-c"));
        int start = Integer.parseInt(o.getOrDefault("--start", "0"));
        LocalTransactionState local = state(o.getOrDefault("--local", "commit"));
        LocalTransactionState answer = state(o.getOrDefault("--check", "commit"));
        int expectChecks = Integer.parseInt(o.getOrDefault("--expect-checks", "0"));
        int lingerMs = Integer.parseInt(o.getOrDefault("--linger", "0"));
        int timeoutS = Integer.parseInt(o.getOrDefault("--timeout", "60"));
        AtomicInteger checks = new AtomicInteger();
        CountDownLatch enoughChecks = new CountDownLatch(Math.max(expectChecks, 0));

        TransactionMQProducer p = new TransactionMQProducer(group);
        p.setNamesrvAddr(namesrv);
        if (o.containsKey("--poll-namesrv")) {
            p.setPollNameServerInterval(Integer.parseInt(o.get("--poll-namesrv")));
        }
        if (o.containsKey("--heartbeat")) {
            p.setHeartbeatBrokerInterval(Integer.parseInt(o.get("--heartbeat")));
        }
        p.setSendMsgTimeout(3000);
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return local;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                Map<String, Object> l = line("checked");
                l.put("msgId", msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
                l.put("transactionId", msg.getTransactionId());
                l.put("topic", msg.getTopic());
                l.put("body", new String(msg.getBody(), StandardCharsets.UTF_8));
                l.put("checkTimes", msg.getProperty(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES));
                l.put("queueOffset", msg.getQueueOffset());
                l.put("commitLogOffset", msg.getCommitLogOffset());
                l.put("answer", answer.name());
                emit(l);
                checks.incrementAndGet();
                enoughChecks.countDown();
                return answer;
            }
        });
        p.start();
        emit(line("started"));

        int failed = 0;
        for (int i = start; i < start + count; i++) {
            Message m = new Message(topic, "tx", "key-" + i, ("tx-" + i).getBytes(StandardCharsets.UTF_8));
            Map<String, Object> l = line("sent");
            try {
                TransactionSendResult r = p.sendMessageInTransaction(m, null);
                l.put("msgId", r.getMsgId());
                l.put("offsetMsgId", r.getOffsetMsgId());
                l.put("transactionId", r.getTransactionId());
                l.put("sendStatus", r.getSendStatus().name());
                l.put("localState", r.getLocalTransactionState().name());
                l.put("queueId", r.getMessageQueue().getQueueId());
                l.put("queueOffset", r.getQueueOffset());
                l.put("body", "tx-" + i);
            } catch (Exception e) {
                failed++;
                l.put("error", e.toString());
                e.printStackTrace();
            }
            emit(l);
        }

        boolean timedOut = false;
        if (expectChecks > 0) {
            timedOut = !enoughChecks.await(timeoutS, TimeUnit.SECONDS);
            Thread.sleep(500); // the answer to the last check is a one-way END_TRANSACTION
        } else if (lingerMs > 0) {
            Thread.sleep(lingerMs);
        }
        p.shutdown();
        Map<String, Object> s = line("summary");
        s.put("sent", count - failed);
        s.put("checks", checks.get());
        s.put("expectedChecks", expectChecks);
        s.put("timedOut", timedOut);
        emit(s);
        if (failed > 0) {
            Map<String, Object> e = line("error");
            e.put("error", failed + " transactional sends failed");
            emit(e);
        }
        return failed == 0 && !timedOut;
    }
}
