package io.rocketstore.interop;

import com.alibaba.fastjson.JSON;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.ByteBufUtil;
import io.netty.buffer.Unpooled;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.protocol.RequestCode;
import org.apache.rocketmq.common.protocol.ResponseCode;
import org.apache.rocketmq.common.protocol.body.ClusterInfo;
import org.apache.rocketmq.common.protocol.body.LockBatchRequestBody;
import org.apache.rocketmq.common.protocol.body.LockBatchResponseBody;
import org.apache.rocketmq.common.protocol.body.UnlockBatchRequestBody;
import org.apache.rocketmq.common.protocol.header.GetConsumerListByGroupResponseBody;
import org.apache.rocketmq.common.protocol.header.SendMessageRequestHeader;
import org.apache.rocketmq.common.protocol.header.SendMessageRequestHeaderV2;
import org.apache.rocketmq.common.protocol.header.SendMessageResponseHeader;
import org.apache.rocketmq.common.protocol.header.UpdateConsumerOffsetRequestHeader;
import org.apache.rocketmq.common.protocol.heartbeat.HeartbeatData;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.common.protocol.route.TopicRouteData;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;
import org.apache.rocketmq.remoting.protocol.SerializeType;

/**
 * Drives RocketMQ's own RemotingCommand (4.9.8) for the remoting interop tests.
 *
 * <pre>
 *   encode        print frames Java encodes (as Netty's NettyEncoder writes them), one per line
 *   decode        read hex frames (length prefix included) on stdin; print what Java decodes
 *   body          read "CLASS HEX" lines on stdin: decode the JSON body with RemotingSerializable
 *                 into that RocketMQ class and print fastjson's re-encoding of it
 * </pre>
 *
 * Every result is one JSON object per line on stdout with a "kind" field.
 */
public final class RemotingDriver {
    private static final PrintStream OUT = System.out;
    private static final HexFormat HEX = HexFormat.of();

    private RemotingDriver() {
    }

    public static void main(String[] args) throws Exception {
        System.setOut(System.err);
        // What MQClientAPIImpl does first: every command then carries the client's version.
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        if (args.length != 1) {
            usage();
        }
        switch (args[0]) {
            case "encode":
                encode();
                break;
            case "decode":
                decode();
                break;
            case "body":
                body();
                break;
            default:
                usage();
        }
        OUT.flush();
        System.exit(0);
    }

    private static void usage() {
        System.err.println("usage: RemotingDriver encode|decode|body");
        System.exit(2);
    }

    private static void emit(Map<String, Object> line) {
        OUT.println(JSON.toJSONString(line));
        OUT.flush();
    }

    // -- encode --------------------------------------------------------------------------------

    private static SendMessageRequestHeader sendHeader() {
        SendMessageRequestHeader h = new SendMessageRequestHeader();
        h.setProducerGroup("InteropProducer");
        h.setTopic("InteropTopic");
        h.setDefaultTopic("TBW102");
        h.setDefaultTopicQueueNums(4);
        h.setQueueId(3);
        h.setSysFlag(0);
        h.setBornTimestamp(1700000000123L);
        h.setFlag(0);
        h.setProperties("KEYS\u0001k1\u0002TAGS\u0001tagA\u0002UNIQ_KEY\u0001ABCDEF\u0002");
        h.setReconsumeTimes(0);
        h.setUnitMode(false);
        h.setBatch(false);
        h.setMaxReconsumeTimes(16);
        return h;
    }

    private static void encode() {
        for (SerializeType type : SerializeType.values()) {
            String t = type.name();

            RemotingCommand v2 = RemotingCommand.createRequestCommand(RequestCode.SEND_MESSAGE_V2,
                SendMessageRequestHeaderV2.createSendMessageRequestHeaderV2(sendHeader()));
            v2.setBody("hello from java".getBytes(StandardCharsets.UTF_8));
            emitFrame("send-v2-" + t, v2, type);

            RemotingCommand v1 = RemotingCommand.createRequestCommand(RequestCode.SEND_MESSAGE, sendHeader());
            v1.setBody(new byte[] {0, 1, 2, (byte) 0xff});
            emitFrame("send-v1-" + t, v1, type);

            RemotingCommand response = RemotingCommand.createResponseCommand(SendMessageResponseHeader.class);
            SendMessageResponseHeader rh = (SendMessageResponseHeader) response.readCustomHeader();
            rh.setMsgId("7F00000100002A9F0000000000000000");
            rh.setQueueId(3);
            rh.setQueueOffset(41L);
            response.setCode(ResponseCode.SUCCESS);
            response.setRemark("stored, ünïcödé remark");
            response.setOpaque(12345);
            emitFrame("send-response-" + t, response, type);

            UpdateConsumerOffsetRequestHeader uh = new UpdateConsumerOffsetRequestHeader();
            uh.setConsumerGroup("InteropGroup");
            uh.setTopic("InteropTopic");
            uh.setQueueId(1);
            uh.setCommitOffset(99L);
            RemotingCommand oneway = RemotingCommand.createRequestCommand(RequestCode.UPDATE_CONSUMER_OFFSET, uh);
            oneway.markOnewayRPC();
            emitFrame("oneway-" + t, oneway, type);
        }
    }

    private static void emitFrame(String name, RemotingCommand cmd, SerializeType type) {
        cmd.setSerializeTypeCurrentRPC(type);
        ByteBuf out = Unpooled.buffer();
        // What NettyEncoder.encode does with a command on its way to the socket.
        cmd.fastEncodeHeader(out);
        if (cmd.getBody() != null) {
            out.writeBytes(cmd.getBody());
        }
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("kind", "frame");
        line.put("name", name);
        line.put("hex", ByteBufUtil.hexDump(out));
        emit(line);
    }

    // -- decode --------------------------------------------------------------------------------

    private static void decode() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String text = in.readLine(); text != null; text = in.readLine()) {
            if (text.isBlank()) {
                continue;
            }
            byte[] data = HEX.parseHex(text.trim());
            ByteBuf buf = Unpooled.wrappedBuffer(data);
            int length = buf.readInt(); // NettyDecoder's LengthFieldBasedFrameDecoder strips this
            if (length != data.length - 4) {
                throw new IllegalStateException("length field " + length + " but " + (data.length - 4) + " bytes follow");
            }
            RemotingCommand cmd = RemotingCommand.decode(buf);
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("kind", "decoded");
            line.put("code", cmd.getCode());
            line.put("opaque", cmd.getOpaque());
            line.put("flag", cmd.getFlag());
            line.put("language", cmd.getLanguage() == null ? null : cmd.getLanguage().name());
            line.put("version", cmd.getVersion());
            line.put("remark", cmd.getRemark());
            line.put("serializeType", cmd.getSerializeTypeCurrentRPC().name());
            line.put("extFields", cmd.getExtFields() == null ? Map.of() : new TreeMap<>(cmd.getExtFields()));
            line.put("body", cmd.getBody() == null ? "" : HEX.formatHex(cmd.getBody()));
            if (cmd.getCode() == RequestCode.SEND_MESSAGE_V2 || cmd.getCode() == RequestCode.SEND_MESSAGE) {
                // The broker's own path (AbstractSendMessageProcessor.parseRequestHeader) to the V1 header.
                SendMessageRequestHeader h = cmd.getCode() == RequestCode.SEND_MESSAGE_V2
                    ? SendMessageRequestHeaderV2.createSendMessageRequestHeaderV1(
                        (SendMessageRequestHeaderV2) cmd.decodeCommandCustomHeader(SendMessageRequestHeaderV2.class))
                    : (SendMessageRequestHeader) cmd.decodeCommandCustomHeader(SendMessageRequestHeader.class);
                Map<String, Object> header = new TreeMap<>();
                header.put("producerGroup", h.getProducerGroup());
                header.put("topic", h.getTopic());
                header.put("defaultTopic", h.getDefaultTopic());
                header.put("defaultTopicQueueNums", h.getDefaultTopicQueueNums());
                header.put("queueId", h.getQueueId());
                header.put("sysFlag", h.getSysFlag());
                header.put("bornTimestamp", h.getBornTimestamp());
                header.put("flag", h.getFlag());
                header.put("properties", h.getProperties());
                header.put("reconsumeTimes", h.getReconsumeTimes());
                header.put("unitMode", h.isUnitMode());
                header.put("batch", h.isBatch());
                header.put("maxReconsumeTimes", h.getMaxReconsumeTimes());
                header.put("bname", h.getBname());
                line.put("sendHeader", header);
            }
            emit(line);
        }
    }

    // -- body ----------------------------------------------------------------------------------

    private static Class<? extends RemotingSerializable> bodyClass(String name) {
        switch (name) {
            case "TopicRouteData":
                return TopicRouteData.class;
            case "ClusterInfo":
                return ClusterInfo.class;
            case "HeartbeatData":
                return HeartbeatData.class;
            case "LockBatchRequestBody":
                return LockBatchRequestBody.class;
            case "LockBatchResponseBody":
                return LockBatchResponseBody.class;
            case "UnlockBatchRequestBody":
                return UnlockBatchRequestBody.class;
            case "GetConsumerListByGroupResponseBody":
                return GetConsumerListByGroupResponseBody.class;
            default:
                throw new IllegalArgumentException("unknown body class " + name);
        }
    }

    private static void body() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String text = in.readLine(); text != null; text = in.readLine()) {
            if (text.isBlank()) {
                continue;
            }
            String[] parts = text.trim().split(" ", 2);
            RemotingSerializable obj = RemotingSerializable.decode(HEX.parseHex(parts[1]), bodyClass(parts[0]));
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("kind", "body");
            line.put("class", parts[0]);
            line.put("json", new String(RemotingSerializable.encode(obj), StandardCharsets.UTF_8));
            if (obj instanceof TopicRouteData) {
                // The typed look-up clients do: brokerAddrs is a HashMap<Long, String>.
                Map<String, Object> masters = new TreeMap<>();
                for (BrokerData bd : ((TopicRouteData) obj).getBrokerDatas()) {
                    masters.put(bd.getBrokerName(), bd.getBrokerAddrs().get(0L));
                }
                line.put("masters", masters);
            }
            emit(line);
        }
    }
}
