"""The audit trail as the jobs read it and ``compact`` lays it out: the record's schema
(:mod:`.schema`), reading a window of it (:mod:`.source`), its hour directories and the
compaction's on-disk protocol (:mod:`.hours`, no pyspark) and the hourly and daily facts
(:mod:`.facts`).
"""
