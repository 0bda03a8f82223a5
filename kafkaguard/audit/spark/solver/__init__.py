"""The pure-Python solver of ``propose``: from observed grants to a least-privilege ACL set
(:mod:`.proposal`), with no Spark."""
