/*
 * Kafka's own StandardAuthorizer in one JVM, as the referee (and the timed peer) of kafkaguard's
 * authorizer (tests/support/authorizer_referee.py).
 *
 * Commands on stdin, one per line, fields separated by tabs; one answer line each on stdout
 * ("ok\t..." or "error\t<message>"):
 *   load PATH ALLOW_EVERYONE   a new StandardAuthorizer (super.users empty,
 *       allow.everyone.if.no.acl.found as given) loaded with the ACLs of the file PATH, one
 *       "TYPE NAME PATTERN PRINCIPAL HOST OPERATION PERMISSION" per line (Java enum names).
 *       Reading the file and building the Map<Uuid, StandardAcl> are not timed; the answer is
 *       "ok NANOS COUNT" with the nanoseconds of configure + withPluginMetrics + loadSnapshot +
 *       completeInitialLoad, a broker's path from a metadata snapshot.
 *   decide QUERIES OUT  one decision per query line of QUERIES, written to OUT as ALLOWED or
 *       DENIED per line; a query is "authorize PRINCIPAL HOST OPERATION TYPE NAME" (one LITERAL
 *       Action, as AuthorizerBenchmark's: refCount 1, logIfAllowed and logIfDenied true) or
 *       "by_type PRINCIPAL HOST OPERATION TYPE" (Authorizer.authorizeByResourceType). Answer:
 *       "ok COUNT".
 *   time CALLS QUERY...  the query (same fields) CALLS times in a loop; "ok NANOS ALLOWED",
 *       the loop's nanoseconds and how many calls were allowed (so the JIT cannot drop them).
 * The request context is AuthorizerBenchmark's: a Produce v1 header, listener "listener",
 * PLAINTEXT, the principal split at its first ':'.
 */

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.internals.PluginMetricsImpl;
import org.apache.kafka.common.network.ClientInformation;
import org.apache.kafka.common.network.ListenerName;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.requests.RequestContext;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.common.utils.SecurityUtils;
import org.apache.kafka.metadata.authorizer.StandardAcl;
import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizationResult;

public class AuthorizerReferee {
    private static StandardAuthorizer authorizer;

    /** One query, with its context and action built once (outside any timed loop). */
    private static final class Query {
        final boolean byType;
        final RequestContext context;
        final List<Action> actions;
        final AclOperation operation;
        final ResourceType resourceType;

        Query(String[] f, int at) throws Exception {
            byType = f[at].equals("by_type");
            KafkaPrincipal principal = SecurityUtils.parseKafkaPrincipal(f[at + 1]);
            context = new RequestContext(
                new RequestHeader(ApiKeys.PRODUCE, (short) 1, "someclient", 1), "1",
                InetAddress.getByName(f[at + 2]), principal, ListenerName.normalised("listener"),
                SecurityProtocol.PLAINTEXT, ClientInformation.EMPTY, false);
            operation = AclOperation.valueOf(f[at + 3]);
            resourceType = ResourceType.valueOf(f[at + 4]);
            actions = byType ? null : Collections.singletonList(new Action(operation,
                new ResourcePattern(resourceType, f[at + 5], PatternType.LITERAL), 1, true, true));
        }

        boolean allowed() {
            AuthorizationResult result = byType
                ? authorizer.authorizeByResourceType(context, operation, resourceType)
                : authorizer.authorize(context, actions).get(0);
            return result == AuthorizationResult.ALLOWED;
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        BufferedWriter out = new BufferedWriter(
            new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String answer;
            try {
                answer = "ok\t" + answer(line.split("\t", -1));
            } catch (Throwable e) {
                answer = "error\t" + (e.getClass().getSimpleName() + ": " + e.getMessage())
                    .replace('\n', ' ').replace('\t', ' ');
            }
            out.write(answer);
            out.write('\n');
            out.flush();
        }
    }

    private static String answer(String[] f) throws Exception {
        switch (f[0]) {
            case "load":
                return load(f[1], Boolean.parseBoolean(f[2]));
            case "decide":
                return decide(f[1], f[2]);
            case "time":
                return time(Integer.parseInt(f[1]), new Query(f, 2));
            default:
                throw new IllegalArgumentException("unknown command " + f[0]);
        }
    }

    private static String load(String path, boolean allowEveryone) throws Exception {
        Map<Uuid, StandardAcl> acls = new HashMap<>();
        try (BufferedReader reader = Files.newBufferedReader(Paths.get(path))) {
            String line;
            while ((line = reader.readLine()) != null) {
                String[] f = line.split("\t", -1);
                if (f.length != 7) {
                    throw new IllegalArgumentException("not 7 fields: " + line);
                }
                acls.put(Uuid.randomUuid(), new StandardAcl(ResourceType.valueOf(f[0]), f[1],
                    PatternType.valueOf(f[2]), f[3], f[4], AclOperation.valueOf(f[5]),
                    AclPermissionType.valueOf(f[6])));
            }
        }
        authorizer = null;
        System.gc();
        long start = System.nanoTime();
        StandardAuthorizer fresh = new StandardAuthorizer();
        Map<String, Object> configs = new HashMap<>();
        configs.put(StandardAuthorizer.SUPER_USERS_CONFIG, "");
        configs.put(StandardAuthorizer.ALLOW_EVERYONE_IF_NO_ACL_IS_FOUND_CONFIG,
            Boolean.toString(allowEveryone));
        fresh.configure(configs);
        // As the broker does (KIP-877): authorize() records its metrics, and needs them set.
        fresh.withPluginMetrics(new PluginMetricsImpl(new Metrics(), Map.of()));
        fresh.loadSnapshot(acls);
        fresh.completeInitialLoad();
        long nanos = System.nanoTime() - start;
        authorizer = fresh;
        return nanos + "\t" + fresh.aclCount();
    }

    private static String decide(String queries, String target) throws Exception {
        List<String> decisions = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(queries), StandardCharsets.UTF_8)) {
            decisions.add(new Query(line.split("\t", -1), 0).allowed() ? "ALLOWED" : "DENIED");
        }
        Files.write(Paths.get(target), decisions, StandardCharsets.UTF_8);
        return Integer.toString(decisions.size());
    }

    private static String time(int calls, Query query) {
        int allowed = 0;
        long start = System.nanoTime();
        for (int i = 0; i < calls; i++) {
            if (query.allowed()) {
                allowed++;
            }
        }
        return (System.nanoTime() - start) + "\t" + allowed;
    }
}
