/*
 * Kafka's own readers as the referee of kafkaguard's parsers (tests/support/kafka_referee.py).
 *
 * One JVM reads batches on stdin and answers on stdout, one JSON array per line each way: the
 * whole batch is read before any answer is written, so neither pipe can fill while the other
 * side waits. Ops:
 *   {"op":"request","frame":B64}  a request after its size prefix, read as the broker reads it
 *       (RequestHeader.parse, then AbstractRequest.parseRequest as RequestContext.parseRequest)
 *   {"op":"request","api_key":K,"version":V,"body":B64}  a request body alone, likewise
 *   {"op":"response","api_key":K,"version":V,"frame":B64}  a response after its size prefix
 *       (ResponseHeader.parse, then the generated *ResponseData reader, as NetworkClient)
 *   {"op":"regex","pattern":P,"subject":S,"replacement":R|null}  java.util.regex as
 *       SslPrincipalMapper and KerberosRule use it
 * An accepted frame answers {"ok":true,"consumed":N,"size":N,"header":{...},"body":{...}} with
 * the body in the generated *JsonConverter's form; a refused one {"ok":false,"error":"..."}.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.RequestAndSize;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.requests.ResponseHeader;

public class Referee {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
    private static final Map<Class<?>, Method> WRITERS = new HashMap<>();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8), 1 << 20);
        BufferedWriter out = new BufferedWriter(
            new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 20);
        String line;
        while ((line = in.readLine()) != null) {
            JsonNode batch = MAPPER.readTree(line);
            ArrayNode answers = NODES.arrayNode();
            for (JsonNode op : batch) {
                answers.add(answer(op));
            }
            out.write(MAPPER.writeValueAsString(answers));
            out.write('\n');
            out.flush();
        }
    }

    private static ObjectNode answer(JsonNode op) {
        try {
            switch (op.get("op").asText()) {
                case "request":
                    if (op.has("body")) {
                        return requestBody((short) op.get("api_key").asInt(),
                            (short) op.get("version").asInt(),
                            Base64.getDecoder().decode(op.get("body").asText()));
                    }
                    return request(Base64.getDecoder().decode(op.get("frame").asText()));
                case "response":
                    return response((short) op.get("api_key").asInt(),
                        (short) op.get("version").asInt(),
                        Base64.getDecoder().decode(op.get("frame").asText()));
                case "regex":
                    return regex(op.get("pattern").asText(), op.get("subject").asText(),
                        op.get("replacement").isNull() ? null : op.get("replacement").asText());
                default:
                    return refused(new IllegalArgumentException("unknown op " + op));
            }
        } catch (Throwable e) {
            return refused(e);
        }
    }

    private static ObjectNode request(byte[] frame) throws Exception {
        ByteBuffer buffer = ByteBuffer.wrap(frame);
        RequestHeader header = RequestHeader.parse(buffer);
        ObjectNode result = NODES.objectNode();
        ObjectNode head = result.putObject("header");
        head.put("apiKey", header.apiKey().id);
        head.put("apiVersion", header.apiVersion());
        head.put("correlationId", header.correlationId());
        head.put("clientId", header.clientId());
        head.put("headerVersion", header.headerVersion());
        int bodyStart = buffer.position();
        RequestAndSize parsed = AbstractRequest.parseRequest(
            header.apiKey(), header.apiVersion(), new ByteBufferAccessor(buffer));
        return accepted(result, frame.length, bodyStart + parsed.size,
            parsed.request.data(), header.apiVersion());
    }

    private static ObjectNode requestBody(short apiKey, short version, byte[] body)
        throws Exception {
        ByteBuffer buffer = ByteBuffer.wrap(body);
        RequestAndSize parsed = AbstractRequest.parseRequest(
            ApiKeys.forId(apiKey), version, new ByteBufferAccessor(buffer));
        return accepted(
            NODES.objectNode(), body.length, parsed.size, parsed.request.data(), version);
    }

    private static ObjectNode response(short apiKey, short version, byte[] frame) throws Exception {
        ApiKeys api = ApiKeys.forId(apiKey);
        ByteBuffer buffer = ByteBuffer.wrap(frame);
        ResponseHeader header = ResponseHeader.parse(buffer, api.responseHeaderVersion(version));
        ObjectNode result = NODES.objectNode();
        result.putObject("header").put("correlationId", header.correlationId());
        ApiMessage data = api.messageType.newResponse();
        data.read(new ByteBufferAccessor(buffer), version);
        return accepted(result, frame.length, buffer.position(), data, version);
    }

    private static ObjectNode accepted(
        ObjectNode result, int size, int consumed, ApiMessage data, short version
    ) throws Exception {
        result.put("ok", true);
        result.put("size", size);
        result.put("consumed", consumed);
        result.set("body", json(data, version));
        return result;
    }

    /** The generated {@code <Data>JsonConverter.write(data, version)}, found by reflection. */
    private static JsonNode json(ApiMessage data, short version) throws Exception {
        Class<?> type = data.getClass();
        Method write = WRITERS.get(type);
        if (write == null) {
            Class<?> converter = Class.forName(type.getName() + "JsonConverter");
            write = converter.getMethod("write", type, short.class);
            WRITERS.put(type, write);
        }
        try {
            return (JsonNode) write.invoke(null, data, version);
        } catch (InvocationTargetException e) {
            throw (Exception) e.getCause();
        }
    }

    private static ObjectNode regex(String pattern, String subject, String replacement) {
        ObjectNode result = NODES.objectNode();
        Pattern compiled;
        try {
            compiled = Pattern.compile(pattern);
        } catch (RuntimeException e) {
            result.put("compiles", false);
            result.put("error", e.getMessage());
            result.put("matches", false);
            result.putNull("result");
            return result;
        }
        result.put("compiles", true);
        Matcher matcher = compiled.matcher(subject);
        boolean matches = matcher.matches();
        result.put("matches", matches);
        String error = null;
        String replaced = null;
        if (matches && replacement != null) {
            try {
                replaced = matcher.replaceAll(replacement);
            } catch (RuntimeException e) {
                error = e.getClass().getSimpleName() + ": " + e.getMessage();
            }
        }
        result.put("error", error);
        result.put("result", replaced);
        return result;
    }

    private static ObjectNode refused(Throwable e) {
        ObjectNode result = NODES.objectNode();
        result.put("ok", false);
        StringBuilder error = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (error.length() > 0) {
                error.append(" <- ");
            }
            error.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage());
        }
        result.put("error", error.toString());
        return result;
    }
}
