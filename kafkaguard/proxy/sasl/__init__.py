"""SASL terminated at the proxy: one sans-I/O state machine per mechanism (PLAIN,
SCRAM-SHA-256/512, OAUTHBEARER), the per-connection authenticator, credentials and config.

The asyncio side is ``kafkaguard/proxy/handlers/sasl.py`` (SaslHandshake, SaslAuthenticate)
plus the gate in ``connection.py``.
"""
