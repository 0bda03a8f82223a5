"""What the API-family handlers share: the handler contract (``base.py``), authorization
helpers, answers the proxy builds, broker-address rewriting, asking the broker first, and the
merge orders of offset responses. Nothing here imports a family module."""
