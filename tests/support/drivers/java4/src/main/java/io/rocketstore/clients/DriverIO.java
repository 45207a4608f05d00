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
import org.apache.rocketmq.client.ClientConfig;

/**
 * What every driver mode shares: its JSON lines on the process's real stdout, the "-x value"
 * options of the modes kept outside ClientDriver, and the shortened client timers.
 *
 * <p>The stream is opened on file descriptor 1 rather than taken from {@code System.out}, which
 * ClientDriver.main points at stderr so that nothing a library prints mixes with the JSON lines.
 */
final class DriverIO {

    private static final PrintStream OUT =
        new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);

    private DriverIO() {
    }

    /** One JSON line; nulls are written, so every line of a kind has the same keys. */
    static synchronized void emit(Map<String, Object> line) {
        OUT.println(JSON.toJSONString(line, SerializerFeature.WriteMapNullValue));
        OUT.flush();
    }

    /** A new line of the given kind, fields in insertion order. */
    static Map<String, Object> line(String kind) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("kind", kind);
        return m;
    }

    /** "-x value" pairs after the mode name (these modes take no bare flags). */
    static Map<String, String> options(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 1; i + 1 < argv.length; i += 2) {
            m.put(argv[i], argv[i + 1]);
        }
        return m;
    }

    static String required(Map<String, String> opts, String name) {
        String v = opts.get(name);
        if (v == null) {
            throw new IllegalArgumentException("option " + name + " is required");
        }
        return v;
    }

    /** The shortened client timers --poll-namesrv / --heartbeat ask for (0 or absent: RocketMQ's 30 s). */
    static void configure(ClientConfig cc, Map<String, String> opts) {
        int poll = Integer.parseInt(opts.getOrDefault("--poll-namesrv", "0"));
        int heartbeat = Integer.parseInt(opts.getOrDefault("--heartbeat", "0"));
        if (poll > 0) {
            cc.setPollNameServerInterval(poll);
        }
        if (heartbeat > 0) {
            cc.setHeartbeatBrokerInterval(heartbeat);
        }
    }
}
