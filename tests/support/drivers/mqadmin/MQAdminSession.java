import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * Runs Apache's mqadmin verbs one after another in one JVM, for tests/support/mqadmin.py.
 *
 * <p>Each mqadmin command in a JVM of its own spends most of its seconds starting the JVM, loading
 * the tool's classes and compiling them; a test module runs dozens of commands. This runs each
 * one as mqadmin.sh's JVM would, through MQAdminStartup.main0 (the tool's own entry point, which
 * builds a new admin client for the command and shuts it down after), with System.out and
 * System.err captured for that command alone. main0 registers the subcommands anew on each call and
 * runs the first it registered: the list is emptied first, so each command runs on a new instance
 * (some keep their admin client in a field, shut down after their first run).
 *
 * <p>Protocol: one JSON object per stdin line, {"args": [...], "home": ...}: the command's
 * arguments, verb first, and the ROCKETMQ_HOME to run it with (null: the JVM's own), whose
 * conf/logback_tools.xml configures the tool's logging and conf/tools.yml, if there, holds the
 * credentials it signs with (MQAdminStartup reads both from its home on each command); for each,
 * one JSON object on stdout, {"stdout": ..., "stderr": ..., "exiting": false}, what the
 * command printed. A command that calls System.exit (a command line mqadmin cannot parse) ends the
 * JVM with its exit status, as it would end mqadmin.sh: the shutdown hook answers first, with
 * "exiting": true.
 * End of stdin ends the JVM. Run from source (java's single-file launch), so there is nothing to build.
 */
public final class MQAdminSession {
    private static final PrintStream ANSWERS = System.out;
    private static final PrintStream ERRORS = System.err;
    private static volatile ByteArrayOutputStream out;
    private static volatile ByteArrayOutputStream err;

    public static void main(String[] ignored) throws Exception {
        Field registered = MQAdminStartup.class.getDeclaredField("subCommandList");
        registered.setAccessible(true);
        Field rocketmqHome = MQAdminStartup.class.getDeclaredField("rocketmqHome");
        rocketmqHome.setAccessible(true);
        Object ownHome = rocketmqHome.get(null);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> answerPending(true)));
        BufferedReader commands = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = commands.readLine()) != null) {
            JSONObject request = JSON.parseObject(line);
            List<String> args = request.getJSONArray("args").toJavaList(String.class);
            String home = request.getString("home");
            ((List<?>) registered.get(null)).clear();
            rocketmqHome.set(null, home == null ? ownHome : home);
            out = new ByteArrayOutputStream();
            err = new ByteArrayOutputStream();
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            try {
                MQAdminStartup.main0(args.toArray(new String[0]), null);
            } catch (Throwable t) {
                t.printStackTrace();
            } finally {
                System.setOut(ANSWERS);
                System.setErr(ERRORS);
            }
            answerPending(false);
        }
    }

    /** Answers the command under way, if any, with what it printed so far. */
    private static synchronized void answerPending(boolean exiting) {
        if (out == null) {
            return;
        }
        System.out.flush();
        System.err.flush();
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("stdout", out.toString(StandardCharsets.UTF_8));
        answer.put("stderr", err.toString(StandardCharsets.UTF_8));
        answer.put("exiting", exiting);
        out = null;
        err = null;
        ANSWERS.println(JSON.toJSONString(answer));
        ANSWERS.flush();
    }
}
