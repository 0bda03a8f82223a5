// Kafka's own BrokerJwtValidator as a referee for kafkaguard's OAUTHBEARER validation
// (tests/proxy/sasl/test_oauthbearer_kafka_referee.py). Run in source-file mode on the Kafka
// classpath: java -cp CP oauthbearer_referee.java JWKS_FILE AUDIENCE|- ISSUER
// Reads one JWT a line on stdin; prints "OK <principal>" or "ERR <why>" a line.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import javax.security.auth.login.AppConfigurationEntry;

import org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;

public class OAuthBearerReferee {
    public static void main(String[] args) throws Exception {
        Map<String, Object> configs = new HashMap<>();
        configs.put("sasl.oauthbearer.jwks.endpoint.url", "file://" + args[0]);
        // "-": none expected (the empty list that is the setting's default)
        configs.put("sasl.oauthbearer.expected.audience",
            args[1].equals("-") ? List.of() : List.of(args[1]));
        configs.put("sasl.oauthbearer.expected.issuer", args[2]);
        configs.put("sasl.oauthbearer.clock.skew.seconds", 30);
        configs.put("sasl.oauthbearer.scope.claim.name", "scope");
        configs.put("sasl.oauthbearer.sub.claim.name", "sub");
        AppConfigurationEntry jaas = new AppConfigurationEntry(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
            AppConfigurationEntry.LoginModuleControlFlag.REQUIRED,
            Map.of());
        BrokerJwtValidator validator = new BrokerJwtValidator();
        validator.configure(configs, "OAUTHBEARER", List.of(jaas));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            try {
                OAuthBearerToken token = validator.validate(line);
                System.out.println("OK " + token.principalName());
            } catch (Exception e) {
                System.out.println("ERR " + String.valueOf(e.getMessage()).replace('\n', ' '));
            }
        }
    }
}
