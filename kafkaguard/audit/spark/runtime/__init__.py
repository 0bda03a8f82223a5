"""What every job runs with: the command line the jobs share (:mod:`.command`, no pyspark at
import), the session (:mod:`.session`), the caches that end with the job (:mod:`.cache`), its
progress on a terminal (:mod:`.progress`), its result tables (:mod:`.output`) and the replay
of decisions against an ACL set that ``unused`` and ``whatif`` share (:mod:`.replay`)."""
