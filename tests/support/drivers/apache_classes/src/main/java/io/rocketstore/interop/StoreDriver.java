package io.rocketstore.interop;

import com.alibaba.fastjson.JSON;
import java.io.File;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.GetMessageStatus;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.PutMessageStatus;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * Drives Apache RocketMQ's own DefaultMessageStore (4.9.8) on a directory, for the interop tests.
 *
 * <pre>
 *   write DIR N            put N messages (2 topics x 2 queues), shut down cleanly
 *   write-crash DIR N      SYNC_FLUSH puts, then halt the JVM without shutdown (abort stays)
 *   read DIR [TOPIC:KEY]   open (recovering), pull every queue found, query each key, shut down
 *   write-delayed DIR N LEVELS
 *                          with messageDelayLevel=LEVELS, put N messages to InteropDelayed with
 *                          delay levels 1, 2, 1, 2, ... and shut down before any is due
 *   deliver DIR N LEVELS SECONDS
 *                          open with messageDelayLevel=LEVELS (the schedule service runs), wait up
 *                          to SECONDS for N messages on InteropDelayed, report its queues, shut down
 * </pre>
 *
 * Every result is one JSON object per line on stdout, each with a "kind" field; anything else
 * the store's logging prints is not JSON and is ignored by the tests. The sizes below must equal
 * the ones the Python side configures (tests/compat/apache_classes/conftest.py).
 */
public final class StoreDriver {
    static final int COMMIT_LOG_FILE_SIZE = 64 * 1024;
    static final int CONSUME_QUEUE_FILE_SIZE = 20 * 100;
    static final int MAX_HASH_SLOT_NUM = 100;
    static final int MAX_INDEX_NUM = 400;
    static final String[] TOPICS = {"InteropTopicA", "InteropTopicB"};
    static final int QUEUES_PER_TOPIC = 2;
    static final int STORE_PORT = 10911;

    private static final PrintStream OUT = System.out;

    private StoreDriver() {
    }

    public static void main(String[] args) throws Exception {
        // The store logs through rocketmq-logging; keep stdout for our JSON lines only.
        System.setOut(System.err);
        if (args.length < 2) {
            usage();
        }
        String mode = args[0];
        String dir = args[1];
        switch (mode) {
            case "write":
                write(dir, Integer.parseInt(args[2]), false);
                break;
            case "write-crash":
                write(dir, Integer.parseInt(args[2]), true);
                break;
            case "read":
                read(dir, Arrays.copyOfRange(args, 2, args.length));
                break;
            case "write-delayed":
                writeDelayed(dir, Integer.parseInt(args[2]), args[3]);
                break;
            case "deliver":
                deliver(dir, Integer.parseInt(args[2]), args[3], Integer.parseInt(args[4]));
                break;
            default:
                usage();
        }
        OUT.flush();
        System.exit(0);
    }

    private static void usage() {
        System.err.println("usage: StoreDriver write|write-crash DIR N | read DIR [TOPIC:KEY ...]"
            + " | write-delayed DIR N LEVELS | deliver DIR N LEVELS SECONDS");
        System.exit(2);
    }

    private static MessageStoreConfig config(String dir, boolean syncFlush) {
        MessageStoreConfig cfg = new MessageStoreConfig();
        cfg.setStorePathRootDir(dir);
        cfg.setStorePathCommitLog(dir + File.separator + "commitlog");
        cfg.setMappedFileSizeCommitLog(COMMIT_LOG_FILE_SIZE);
        cfg.setMappedFileSizeConsumeQueue(CONSUME_QUEUE_FILE_SIZE);
        cfg.setMaxHashSlotNum(MAX_HASH_SLOT_NUM);
        cfg.setMaxIndexNum(MAX_INDEX_NUM);
        cfg.setFlushDiskType(syncFlush ? FlushDiskType.SYNC_FLUSH : FlushDiskType.ASYNC_FLUSH);
        cfg.setHaListenPort(0); // an ephemeral port: several drivers may run at once
        return cfg;
    }

    private static DefaultMessageStore open(MessageStoreConfig cfg) throws Exception {
        DefaultMessageStore store = new DefaultMessageStore(
            cfg, new BrokerStatsManager("interop", true), null, new BrokerConfig());
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed on " + cfg.getStorePathRootDir());
        }
        store.start();
        return store;
    }

    private static void emit(Map<String, Object> line) {
        OUT.println(JSON.toJSONString(line));
        OUT.flush();
    }

    private static String host(SocketAddress address) {
        InetSocketAddress a = (InetSocketAddress) address;
        return a.getAddress().getHostAddress() + ":" + a.getPort();
    }

    // -- write ---------------------------------------------------------------------------------
    private static void write(String dir, int count, boolean crash) throws Exception {
        DefaultMessageStore store = open(config(dir, crash));
        InetSocketAddress storeHost = new InetSocketAddress(InetAddress.getByName("127.0.0.1"), STORE_PORT);
        InetAddress bornV4 = InetAddress.getByName("10.1.2.3");
        InetAddress bornV6 = InetAddress.getByName("fd00::1:2");
        for (int i = 0; i < count; i++) {
            String topic = TOPICS[i % TOPICS.length];
            int queueId = (i / TOPICS.length) % QUEUES_PER_TOPIC;
            String body = "msg-" + i;
            String tags = "tag" + (i % 3);
            String keys = "key-" + i + " shared-" + (i % 5);

            MessageExtBrokerInner msg = new MessageExtBrokerInner();
            msg.setTopic(topic);
            msg.setQueueId(queueId);
            msg.setBody(body.getBytes(StandardCharsets.UTF_8));
            msg.setTags(tags);
            msg.setKeys(keys);
            MessageClientIDSetter.setUniqID(msg);
            msg.putUserProperty("origin", "java");
            msg.setSysFlag(0);
            msg.setFlag(i % 4);
            msg.setBornTimestamp(System.currentTimeMillis());
            // every 7th message is born on IPv6, so the 20-byte host layout is covered as well
            InetAddress born = i % 7 == 6 ? bornV6 : bornV4;
            msg.setBornHost(new InetSocketAddress(born, 40000 + i));
            msg.setStoreHost(storeHost);
            msg.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(tags));
            msg.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));

            PutMessageResult result = store.putMessage(msg);
            if (result.getPutMessageStatus() != PutMessageStatus.PUT_OK) {
                throw new IllegalStateException("put " + i + " failed: " + result.getPutMessageStatus());
            }
            AppendMessageResult append = result.getAppendMessageResult();
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("kind", "put");
            line.put("topic", topic);
            line.put("queueId", queueId);
            line.put("queueOffset", append.getLogicsOffset());
            line.put("commitLogOffset", append.getWroteOffset());
            line.put("wroteBytes", append.getWroteBytes());
            line.put("msgId", append.getMsgId());
            line.put("storeTimestamp", append.getStoreTimestamp());
            line.put("bornTimestamp", msg.getBornTimestamp());
            line.put("bornHost", host(msg.getBornHost()));
            line.put("storeHost", host(msg.getStoreHost()));
            line.put("sysFlag", msg.getSysFlag());
            line.put("flag", msg.getFlag());
            line.put("body", body);
            line.put("tags", tags);
            line.put("keys", keys);
            line.put("uniqKey", msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            line.put("propertiesString", msg.getPropertiesString());
            emit(line);
        }
        if (crash) {
            // No shutdown and no wait for dispatch: the abort file stays, consume queues and index
            // may lag, and only what SYNC_FLUSH forced before each acknowledgement is promised.
            OUT.flush();
            Runtime.getRuntime().halt(0);
        }
        // dispatch (consume queues, index) must have caught up before a clean shutdown
        long deadline = System.currentTimeMillis() + 30_000;
        while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(20);
        }
        store.shutdown();
        Map<String, Object> done = new LinkedHashMap<>();
        done.put("kind", "shutdown");
        done.put("maxPhyOffset", store.getMaxPhyOffset());
        done.put("abortLeft", new File(dir, "abort").exists());
        emit(done);
    }

    // -- delay levels ------------------------------------------------------------------------------
    static final String DELAYED_TOPIC = "InteropDelayed";

    private static void writeDelayed(String dir, int count, String levels) throws Exception {
        MessageStoreConfig cfg = config(dir, false);
        cfg.setMessageDelayLevel(levels);
        DefaultMessageStore store = open(cfg);
        InetSocketAddress storeHost = new InetSocketAddress(InetAddress.getByName("127.0.0.1"), STORE_PORT);
        for (int i = 0; i < count; i++) {
            int level = 1 + i % 2;
            MessageExtBrokerInner msg = new MessageExtBrokerInner();
            msg.setTopic(DELAYED_TOPIC);
            msg.setQueueId(i % QUEUES_PER_TOPIC);
            msg.setBody(("delayed-" + i).getBytes(StandardCharsets.UTF_8));
            msg.setTags("tagD");
            MessageClientIDSetter.setUniqID(msg);
            msg.setDelayTimeLevel(level);
            msg.setBornTimestamp(System.currentTimeMillis());
            msg.setBornHost(new InetSocketAddress(InetAddress.getByName("10.1.2.3"), 40000));
            msg.setStoreHost(storeHost);
            msg.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode("tagD"));
            msg.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
            PutMessageResult result = store.putMessage(msg);
            if (result.getPutMessageStatus() != PutMessageStatus.PUT_OK) {
                throw new IllegalStateException("put " + i + " failed: " + result.getPutMessageStatus());
            }
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("kind", "put");
            line.put("uniqKey", msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            line.put("level", level);
            line.put("queueId", i % QUEUES_PER_TOPIC);
            line.put("storeTimestamp", result.getAppendMessageResult().getStoreTimestamp());
            emit(line);
        }
        long deadline = System.currentTimeMillis() + 30_000;
        while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(20);
        }
        store.shutdown();
    }

    private static void deliver(String dir, int expected, String levels, int seconds) throws Exception {
        MessageStoreConfig cfg = config(dir, false);
        cfg.setMessageDelayLevel(levels);
        DefaultMessageStore store = open(cfg);
        Map<String, Object> opened = new LinkedHashMap<>();
        opened.put("kind", "opened");
        opened.put("at", System.currentTimeMillis());
        emit(opened);
        long deadline = System.currentTimeMillis() + seconds * 1000L;
        while (System.currentTimeMillis() < deadline) {
            long found = 0;
            for (int q = 0; q < QUEUES_PER_TOPIC; q++) {
                found += store.getMaxOffsetInQueue(DELAYED_TOPIC, q);
            }
            if (found >= expected) {
                break;
            }
            Thread.sleep(20);
        }
        Thread.sleep(500); // a few more timer runs: a message delivered twice would show now
        for (int q = 0; q < QUEUES_PER_TOPIC; q++) {
            readQueue(store, DELAYED_TOPIC, q);
        }
        store.shutdown();
    }

    // -- read ----------------------------------------------------------------------------------
    private static void read(String dir, String[] queries) throws Exception {
        boolean abortAtOpen = new File(dir, "abort").exists();
        DefaultMessageStore store = open(config(dir, false));
        Map<String, Object> opened = new LinkedHashMap<>();
        opened.put("kind", "opened");
        opened.put("abortAtOpen", abortAtOpen);
        opened.put("minPhyOffset", store.getMinPhyOffset());
        opened.put("maxPhyOffset", store.getMaxPhyOffset());
        emit(opened);

        File cqRoot = new File(dir, "consumequeue");
        String[] topics = cqRoot.list();
        if (topics != null) {
            Arrays.sort(topics);
            for (String topic : topics) {
                String[] queueDirs = new File(cqRoot, topic).list();
                if (queueDirs == null) {
                    continue;
                }
                Arrays.sort(queueDirs);
                for (String q : queueDirs) {
                    readQueue(store, topic, Integer.parseInt(q));
                }
            }
        }

        for (String query : queries) {
            int sep = query.indexOf(':');
            String topic = query.substring(0, sep);
            String key = query.substring(sep + 1);
            QueryMessageResult found = store.queryMessage(topic, key, 64, 0, Long.MAX_VALUE);
            List<Object> hits = new ArrayList<>();
            for (ByteBuffer buffer : found.getMessageBufferList()) {
                hits.add(describe(buffer));
            }
            found.release();
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("kind", "query");
            line.put("topic", topic);
            line.put("key", key);
            line.put("hits", hits);
            emit(line);
        }
        store.shutdown();
        Map<String, Object> done = new LinkedHashMap<>();
        done.put("kind", "shutdown");
        done.put("abortLeft", new File(dir, "abort").exists());
        emit(done);
    }

    private static void readQueue(DefaultMessageStore store, String topic, int queueId) {
        long min = store.getMinOffsetInQueue(topic, queueId);
        long max = store.getMaxOffsetInQueue(topic, queueId);
        Map<String, Object> head = new LinkedHashMap<>();
        head.put("kind", "queue");
        head.put("topic", topic);
        head.put("queueId", queueId);
        head.put("minOffset", min);
        head.put("maxOffset", max);
        emit(head);
        long offset = min;
        while (offset < max) {
            GetMessageResult result = store.getMessage("interop", topic, queueId, offset, 32, null);
            if (result == null || result.getStatus() != GetMessageStatus.FOUND) {
                Map<String, Object> err = new LinkedHashMap<>();
                err.put("kind", "error");
                err.put("topic", topic);
                err.put("queueId", queueId);
                err.put("offset", offset);
                err.put("status", result == null ? "null" : result.getStatus().name());
                emit(err);
                return;
            }
            for (ByteBuffer buffer : result.getMessageBufferList()) {
                Map<String, Object> line = describe(buffer);
                line.put("kind", "message");
                emit(line);
            }
            offset = result.getNextBeginOffset();
            result.release();
        }
    }

    private static Map<String, Object> describe(ByteBuffer buffer) {
        byte[] raw = new byte[buffer.remaining()];
        buffer.duplicate().get(raw);
        MessageExt msg = MessageDecoder.decode(ByteBuffer.wrap(raw), true, false);
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("topic", msg.getTopic());
        line.put("queueId", msg.getQueueId());
        line.put("queueOffset", msg.getQueueOffset());
        line.put("commitLogOffset", msg.getCommitLogOffset());
        line.put("storeSize", msg.getStoreSize());
        line.put("bodyCRC", msg.getBodyCRC());
        line.put("flag", msg.getFlag());
        line.put("sysFlag", msg.getSysFlag());
        line.put("bornTimestamp", msg.getBornTimestamp());
        line.put("storeTimestamp", msg.getStoreTimestamp());
        line.put("bornHost", host(msg.getBornHost()));
        line.put("storeHost", host(msg.getStoreHost()));
        line.put("msgId", msg.getMsgId());
        line.put("body", new String(msg.getBody(), StandardCharsets.UTF_8));
        line.put("bodyBase64", Base64.getEncoder().encodeToString(msg.getBody()));
        line.put("keys", msg.getKeys());
        line.put("tags", msg.getTags());
        line.put("uniqKey", msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        line.put("properties", new LinkedHashMap<>(msg.getProperties()));
        line.put("raw", HexFormat.of().formatHex(raw));
        return line;
    }
}
